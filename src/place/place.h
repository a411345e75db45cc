/* place: where every buffer lives in tile memory, and the package that
 * results.
 *
 *   liveness     the steps each buffer is live, exact across repeats
 *   support      per tile: code, run descriptors and the encoded exchange
 *                tables, from tile_memory_base up
 *   buffers      one address range per buffer, the same on every tile that
 *                holds it, exclusively its own while it is live and reused
 *                after it dies; small buffers packed in the ordinary region,
 *                large ones in whole interleaved elements; nothing at or past
 *                loader_limit
 *   program      the low program with every (buffer, offset) turned into an
 *                absolute address
 *   segments     each parameter shard encoded once into the blob and pointed
 *                at by every replica's tile
 *   bindings     host inputs and outputs with their layouts and addresses,
 *                and a probe for every op result the program computes
 */
#ifndef TESSEL_PLACE_H
#define TESSEL_PLACE_H

#include "../low/low.h"
#include "../package/package.h"

/* ---- schedule.c ------------------------------------------------------- */

/* The supersteps: lp with every exchange phase that can join the nearest
 * phase before it merged into that one (its sources ready, its destinations
 * free; never across a REPEAT or an END), and every step of on-tile copies
 * that then follows another joined to it (each tile's runs in order). out
 * shares lp's buffers and strings; its steps, runs and fragments are new, in
 * arena a. step_map (lp's step count) receives each old step's new index (a
 * merged step: the one it joined). Returns the number of steps merged away. */
int32_t place_schedule(const low_program *lp, arena *a, low_program *out, int32_t *step_map);

/* ---- liveness.c ------------------------------------------------------- */

enum { PLACE_LIVE_AT_START = 1, PLACE_LIVE_AT_END = 2 };  /* host inputs and parameters; outputs */

typedef struct place_live {
    int32_t first, last;   /* steps, inclusive; last = steps.n: to the end; -1: never */
} place_live;

/* The live steps of every buffer of lp (flags per buffer: PLACE_LIVE_*). */
void place_liveness(const low_program *lp, const uint8_t *flags, place_live *live);

/* ---- alloc.c ---------------------------------------------------------- */

typedef enum { PLACE_ANY, PLACE_ORDINARY, PLACE_INTERLEAVED } place_region;

typedef struct place_req {
    const char *name;      /* for messages */
    uint64_t payload;      /* bytes the buffer holds */
    uint32_t tail;         /* bytes past the payload a kernel may read */
    uint32_t align;        /* address alignment, bytes (a power of two) */
    int32_t first, last;   /* live steps, inclusive */
    place_region region;   /* ANY: packed if small, else in whole interleaved elements */
    const uint64_t *tiles; /* the tiles that hold it, a bitmap of tile_words words; NULL: every tile.
                              Buffers on no common tile may share addresses (the orders of last resort) */
    int32_t tile_words;
    const int32_t *apart;  /* requests best kept out of this one's memory elements while both live:
                              an exchange phase sends from one and receives into the other, and a
                              tile doing both in one element pays exchange_conflict_percent */
    int32_t napart;
} place_req;

typedef struct place_slot {
    uint32_t addr;         /* first byte */
    uint64_t reserved;     /* bytes owned from addr: payload and tail, rounded */
} place_slot;

/* Addresses for n requests in memory from data_base to loader_limit
 * (alloc.c's picture). On failure returns -1 with *failed the request that
 * did not fit, why (cap bytes) naming its payload, reservation rules, the
 * buffers live then and the free ranges, and *shortfall (may be NULL).
 * *shared (may be NULL) says whether the placement found lets buffers on no
 * common tile share addresses (the orders of last resort). */
/* What the request that did not fit needed at once on its tile (its own
 * bytes and those of the buffers live beside it) and the bytes the tile has
 * for data: need > room is a tile too full, need <= room free memory cut
 * into gaps too small. */
typedef struct place_shortfall {
    uint64_t need, room;
} place_shortfall;
int place_assign(const machine *m, uint32_t data_base, const place_req *req, int32_t n, place_slot *slot, int32_t *failed,
                 char *why, size_t cap, place_shortfall *shortfall,
                 bool *shared);

/* ---- tables.c --------------------------------------------------------- */

/* Every tile's exchange tables, planned from a program's exchange phases
 * (docs/placement.md, "Exchange tables"); lp's fragments may be in buffers
 * (before placement) or absolute. The plan refers to lp, which must outlive it. */
typedef struct place_xt place_xt;
place_xt *place_tables_plan(const low_program *lp, const machine *m);
void place_tables_free(place_xt *x);
/* Bytes of the encoded tables of every tile (per_tile[tiles]); with
 * per_step, also the bytes tile `tile`'s tables spend on each step
 * (per_step[steps.n], added to). */
void place_tables_count(const place_xt *x, uint32_t *per_tile, int32_t tile, uint32_t *per_step);
/* Writes the tables into out (tables and groups; every EXCHANGE step of
 * out->prog, which mirrors lp's steps, gets its phase): exactly the bytes
 * place_tables_count gives. buf_addr: each buffer's address (NULL when the
 * fragments are absolute). -1 with d if a row count or the phase count
 * does not fit its header field. */
int place_tables_encode(const place_xt *x, const uint32_t *buf_addr, package *out, diag *d);
/* For packages built by hand (tests, calibration): encodes p->prog's
 * absolute fragments into p's tables and drops them from the program. */
int place_package_tables(package *p, diag *d);

/* Bytes of the encoded exchange tables of every tile (per_tile[tiles]):
 * the rows docs/placement.md prices, over every exchange phase; what
 * place_tables_encode writes. */
void place_table_bytes(const low_program *lp, const machine *m, uint32_t *per_tile);
/* The same, and per step the bytes that tile `tile`'s tables spend on it
 * (per_step[steps.n], added to). */
void place_table_rows(const low_program *lp, const machine *m, uint32_t *per_tile, int32_t tile, uint32_t *per_step);

/* ---- place.c ---------------------------------------------------------- */

/* Bytes of code and run descriptors each tile needs (per_tile[tiles]), the
 * estimate docs/placement.md gives. */
void place_code_bytes(const low_program *lp, const machine *m, uint32_t *per_tile);

typedef struct place_stats {
    uint32_t tile_bytes;       /* the fullest tile: bytes from tile_memory_base to its last reserved byte */
    uint32_t peak_tile;        /* which tile that is */
    uint32_t support_bytes;    /* code, run descriptors and exchange tables, the largest tile's */
    uint32_t table_bytes_max;  /* encoded exchange tables, the largest tile's */
    uint32_t table_bytes_median;
    uint64_t table_bytes_total;
    uint32_t param_bytes;      /* parameter buffers' reservations, summed (a tile holding one of each) */
    int32_t buffers;
    bool shared_addresses;     /* buffers on disjoint tiles share addresses: no placement kept every address its own */
} place_stats;

/* Assembles out from the lowered (and scheduled) program lp for machine m:
 * the program, its buffers, parameters and bindings are all lp's. A program
 * that does not fit the tile memory is a user-level failure: -1 with d
 * saying by how much and which buffers are largest. Without `data` the
 * parameters' values are neither made nor written (a fit check: out is not
 * for running). */
int place_package(const low_program *lp, const machine *m, const char *meta_json, bool data, package *out, place_stats *st,
                  diag *d);

#endif
