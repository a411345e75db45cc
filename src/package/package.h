/* package: the file the compiler writes and the simulator runs. It holds
 * everything the simulator needs and nothing it must look up elsewhere:
 *
 *   header    magic "TESSPKG\0", format version, machine fingerprint
 *   machine   the full machine description (its fingerprint must match)
 *   program   steps and kernel runs (low.h, kern.h), placed: every address absolute
 *             and inside the tile's memory map
 *   tables    every tile's encoded exchange tables: per exchange phase a
 *             header, its send rows, its receive rows and its repeat patch
 *             rows; the multicast groups the send rows name
 *   buffer tiles  per buffer, the tiles that hold it (a bitmap): two buffers
 *             live at once share addresses only on no common tile
 *   segments  sparse initial tile memory (weights, constants): (tile, address,
 *             bytes, offset into the blob); replicas share blob bytes
 *   bindings  host inputs and outputs: name, dtype, scale, shape, layout and
 *             address of the buffer holding them; and probes, where every
 *             graph op's result can be read as soon as a step completes it
 *             (for locating a fault, never needed to run)
 *   meta      JSON text: model, recipe, compile statistics
 *
 * The file is a little-endian sequence of sections, each a tag, a CRC-32C of
 * its payload, a byte length and its records (a run holds only what its
 * kernel reads, whatever kernel_run's arrays can hold); the layout is in
 * docs/package.md. Every checksum is verified before anything is read. Writing the same
 * package twice gives the same bytes. A package is untrusted input: the
 * reader checks every count, index, offset and length, and every address a
 * run or fragment can touch (over all repeat iterations), before anyone uses it.
 */
#ifndef TESSEL_PACKAGE_H
#define TESSEL_PACKAGE_H

#include "../layout/layout.h"
#include "../low/low.h"
#include "../machine/machine.h"

enum { PACKAGE_VERSION = 15 };

typedef struct pkg_segment {
    uint32_t tile;
    uint32_t addr;      /* byte address on the tile */
    uint32_t bytes;
    uint64_t blob_off;  /* where its bytes start in the blob */
} pkg_segment;

/* What a binding is for: data the host writes before the run, reads after
 * it, or may read after step `step` each time it executes (a probe). */
typedef enum { PKG_INPUT, PKG_OUTPUT, PKG_PROBE } pkg_role;

typedef struct pkg_binding {
    const char *name;   /* the graph value */
    uint8_t role;       /* pkg_role */
    dtype dtype;
    int8_t scale;       /* 8-bit types */
    layout layout;      /* how the tensor lies over tiles (replica 0 is read for outputs) */
    uint32_t addr;      /* the buffer's byte address on every tile of the layout */
    int32_t step;       /* probes: the step that completes the value (a REPEAT
                           step: at the start of every iteration; an END step:
                           when its loop exits); -1 for inputs and outputs */
} pkg_binding;

/* The encoded exchange tables (docs/package.md, "Exchange tables"). */
typedef struct pkg_tables {
    uint8_t *bytes;             /* every tile's table, tile after tile */
    uint64_t *at;               /* tiles + 1 offsets: tile t's table is bytes[at[t], at[t + 1]); NULL: all empty */
    uint32_t ngroups;           /* multicast groups */
    uint32_t *group_at;         /* ngroups + 1 offsets into group_tiles */
    uint32_t *group_tiles;      /* group g: group_tiles[group_at[g], group_at[g + 1]), ascending */
} pkg_tables;

typedef struct package {
    arena arena;                /* owns everything below */
    machine machine;
    uint64_t fingerprint;       /* machine_fingerprint(&machine) */
    low_program prog;           /* placed: every kernel_addr.buf is KERNEL_ABSOLUTE; no fragments (an
                                   EXCHANGE step's first is its phase, the how-manieth exchange
                                   step it is, and its count is 0): the exchanges are the tables */
    pkg_tables tables;
    uint64_t *buf_tiles;        /* buffer b holds tile t: bit t % 64 of word b * package_tile_words() + t / 64;
                                   NULL (a package built by hand): every buffer on every tile */
    VEC(pkg_segment) segments;
    uint8_t *blob;              /* initial memory bytes */
    uint64_t blob_bytes;
    VEC(pkg_binding) bindings;  /* inputs first, in graph order, then outputs, then probes in program order */
    const char *meta;           /* JSON text */
} package;

/* Words of one buffer's tile bitmap on machine m. */
static inline uint32_t package_tile_words(const machine *m) { return (m->tiles + 63) / 64; }
/* Whether buffer b of p holds tile t (its address there is its own while it lives). */
static inline bool package_buf_on_tile(const package *p, int32_t b, uint32_t t) {
    return !p->buf_tiles || (p->buf_tiles[(size_t)b * package_tile_words(&p->machine) + t / 64] >> (t % 64) & 1);
}

/* ---- xtab.c: exchange tables ------------------------------------------ */

enum {
    PKG_XT_MAX_ROWS = 0xffff, /* of one kind, on one tile, in one phase */
    PKG_XT_MAX_PHASES = 0x10000,
};
#define PKG_XT_RECV_ROW 0x80000000u


typedef struct pkg_xt_header {
    uint32_t phase, nsend, nrecv, npatch;
} pkg_xt_header;
typedef struct pkg_xt_send {
    uint32_t addr;           /* source address at iteration 0 */
    uint32_t bytes;
    uint32_t slot;           /* its place in the phase's delivery order */
    uint32_t dst;            /* a tile, or tiles + a multicast group */
} pkg_xt_send;
typedef struct pkg_xt_recv {
    uint32_t addr;           /* where the first fragment lands, at iteration 0 */
    uint32_t count;          /* fragments that stream through the pointer */
} pkg_xt_recv;
typedef struct pkg_xt_patch {
    uint32_t row;            /* a send row of the block, or PKG_XT_RECV_ROW | a receive row */
    int32_t stride;          /* bytes added to its address per iteration */
} pkg_xt_patch;

void pkg_xt_put_header(uint8_t *out, const pkg_xt_header *h);
void pkg_xt_put_send(const kernel_xt_format *f, uint8_t *out, const pkg_xt_send *s);
void pkg_xt_put_recv(const kernel_xt_format *f, uint8_t *out, const pkg_xt_recv *r);
void pkg_xt_put_patch(uint8_t *out, const pkg_xt_patch *p);
void pkg_xt_get_header(const uint8_t *in, pkg_xt_header *h);
/* False when a bit beyond the row's fields is set. */
bool pkg_xt_get_send(const kernel_xt_format *f, const uint8_t *in, pkg_xt_send *s);
bool pkg_xt_get_recv(const kernel_xt_format *f, const uint8_t *in, pkg_xt_recv *r);
void pkg_xt_get_patch(const uint8_t *in, pkg_xt_patch *p);

/* The tables decoded: per phase what every tile sends and where every
 * fragment lands. The simulator runs the phases from it, the checker
 * validates with it, inspect reads it. */
typedef struct pkg_xsend {
    uint32_t tile;           /* the sender */
    uint32_t addr;           /* source address at iteration 0 */
    int32_t stride;          /* bytes added per iteration (its patch row), else 0 */
    uint32_t bytes;
    uint64_t stage;          /* where its bytes go in the phase's staging buffer */
} pkg_xsend;
typedef struct pkg_xrecv {
    uint32_t send;           /* the fragment: an index into send[] */
    uint32_t addr;           /* where it lands at iteration 0 */
    int32_t stride;          /* its receive row's patch, else 0 */
} pkg_xrecv;
typedef struct pkg_xtile {
    uint32_t tile;
    uint32_t n;              /* its sends (receives) in the phase */
    uint64_t first;          /* into send[] (recv[]) */
} pkg_xtile;
typedef struct pkg_xphase {
    int32_t step;            /* its EXCHANGE step */
    uint32_t nsenders, nreceivers;
    uint64_t senders, receivers;  /* into tiles[]: ascending tiles */
    uint64_t first_send, nsend;   /* send[]: by sender, each in its table's order */
    uint64_t first_recv, nrecv;   /* recv[]: by receiver, each in delivery order */
    uint64_t bytes;          /* payload, a multicast once */
} pkg_xphase;
typedef struct pkg_xplan {
    uint32_t nphases;
    pkg_xphase *phase;
    pkg_xsend *send;
    pkg_xrecv *recv;
    pkg_xtile *tiles;
} pkg_xplan;

/* Decodes and cross-checks p's tables against its steps and groups: every
 * field, every row count, each tile's receive rows against the fragments
 * sent to it (docs/package.md, "Validation"). -1 with d naming the section,
 * tile, phase and row otherwise. Addresses are checked only at iteration 0
 * here; pkg_check checks every iteration. */
int pkg_xplan_build(const package *p, const char *path, pkg_xplan *x, diag *d);
void pkg_xplan_free(pkg_xplan *x);
/* The receive row of tile's phase block through which the k-th fragment
 * delivered to it streams (for messages). */
uint32_t pkg_xt_recv_row_of(const package *p, uint32_t tile, uint32_t phase, uint64_t k);

void package_init(package *p);
void package_free(package *p);

/* Serialises p (deterministically) to path, all or nothing. */
int package_save(const package *p, const char *path, diag *d);
/* The same into an open file (path names it in errors); the caller owns
 * the file and its all-or-nothing commit. */
int package_write(const package *p, FILE *f, const char *path, diag *d);
/* Parses and fully validates a package image; path names it in errors. */
int package_parse(const void *bytes, size_t len, const char *path, package *out, diag *d);
int package_load(const char *path, package *out, diag *d);
/* The serialised image (malloc'd): what package_write writes, for a caller
 * that parses it back in memory and for tests that corrupt it. NULL, with
 * "PATH: error: the package image needs B bytes ..." in d, when the host
 * cannot hold it (path names the package in that message). */
uint8_t *package_image(const package *p, size_t *len, const char *path, diag *d);
/* Rewrites the checksum of every section whose bounds lie inside img: for
 * tests and fuzzers that damage a section on purpose to reach the parser. */
void package_fix_checksums(uint8_t *img, size_t len);

/* ---- proof.c: whether a package stores an optimizer's gradient -------- */

typedef struct epilogue_proof {
    bool materialized;     /* some buffer holds the gradient (or a completed product the update reads) */
    int32_t update_runs;   /* runs that write the optimizer's results */
    uint32_t buffer_bytes; /* the largest such buffer, payload bytes per tile; 0 when none */
    char evidence[640];    /* what shows it: the run, the buffers, their bytes and live steps */
} epilogue_proof;

/* Whether the gradient behind the optimizer results named in outs (their
 * output or probe bindings: w' and the states') is stored in a buffer of
 * placed package p, from its program, exchange tables, buffers and live
 * ranges alone (docs/epilogue.md, "The proof"). -1 with d when the tables
 * do not decode. */
int package_epilogue_proof(const package *p, const char *const *outs, int nouts, epilogue_proof *out, diag *d);

/* The most a tile's buffers reserve at once: over tiles and steps, the sum
 * of the reservations of the buffers live then that the tile holds (a
 * run's operand, a fragment's source or destination, initial data). Unlike
 * the highest address reached, this does not depend on where placement put
 * them. */
typedef struct package_peak {
    uint64_t bytes;        /* reserved bytes (payload, tail, rounding to whole interleaved elements), support excluded */
    uint32_t tile;         /* where, */
    int32_t step;          /* and when */
    uint64_t payload;      /* the same peak counting payload bytes only: what the buffers hold, not where placement put them */
    uint32_t payload_tile;
    int32_t payload_step;
} package_peak;
/* -1 with d when the tables do not decode. */
int package_live_peak(const package *p, package_peak *out, diag *d);

/* ---- chips.c: a package for several chips (docs/chips.md) -------------
 * The machine of several chips, a manifest (JSON: the model, each chip's
 * stage) and one ordinary package per chip, for that machine's one chip. */
/* What a package for several chips runs: a pipeline (of stages, in
 * data-parallel copies), or a training step over data-parallel replicas
 * (program 0 on every chip, then program 1 + c on chip c: its owner's). */
typedef enum { PKG_CHIPS_PIPELINE = 0, PKG_CHIPS_TRAIN = 1 } pkg_chips_kind;
typedef struct pkg_chips {
    machine machine;       /* chips > 1: n x replicas (a pipeline), replicas (training) */
    pkg_chips_kind kind;
    int32_t n;             /* programs (a pipeline's stages; training: replicas + 1), one package each */
    int32_t replicas;      /* data-parallel copies: of the pipeline (chip c runs program c % n), or training replicas */
    char *manifest;        /* JSON text */
    int64_t batch;         /* the manifest's: the inputs' first axis */
    int64_t micro_batches; /* and the pieces it runs in, each through every chip */
    package *pkg;          /* per chip; only those loaded are filled */
    bool *loaded;
} pkg_chips;
/* Writes the machine, manifest and n packages (for n x replicas chips) to f, deterministically. */
int pkg_chips_write(const machine *m, const char *manifest, const package *pkgs, int32_t n, int32_t replicas,
                    pkg_chips_kind kind, FILE *f, const char *path, diag *d);
/* Reads a package for several chips from size bytes, every header field
 * checked; parses the packages of the programs want selects (NULL: all). */
int pkg_chips_parse(const void *bytes, size_t size, const char *path, const bool *want, pkg_chips *out, diag *d);
int pkg_chips_load(const char *path, const bool *want, pkg_chips *out, diag *d);
bool pkg_chips_magic(const void *bytes, size_t len);  /* the bytes start like one */
bool pkg_chips_file(const char *path);                /* the file starts like one */
/* Its programs and replicas, from the header alone. */
int pkg_chips_count(const char *path, int32_t *programs, int32_t *replicas, pkg_chips_kind *kind, diag *d);
/* Recomputes the header's and the texts' checksums of an image in place
 * (where its lengths allow), for tests and fuzzing that damage what is behind them. */
void pkg_chips_fix_checksums(uint8_t *img, size_t len);
void pkg_chips_free(pkg_chips *p);

#endif
