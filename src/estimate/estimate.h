/* estimate: what a mid program costs on a machine, without lowering or
 * simulating it (docs/search.md).
 *
 *   compute   per prim, the runs the busiest tile executes (the shard shapes
 *             the lowering cuts, full blocks and tails alike), priced with
 *             the machine's kernel formulas (machine.h), launch included;
 *             where the schedule joins compute steps (one of them only
 *             on-tile copies), the joined step's busiest tile's sum;
 *   exchange  per copy, the ownership runs of layout_runs (the geometry the
 *             lowering cuts its fragments from): bytes and fragments each
 *             tile sends and receives, multicast receivers counted as
 *             receives and not sends, runs split at max_send_bytes, priced
 *             with the machine's exchange formulas, one phase per copy
 *             unless the schedule joins it to the phase before;
 *   memory    per tile, the peak of the payload of the buffers live at once
 *             (mid-level liveness over program order, repeat bodies whole),
 *             and of what they reserve under placement's memory map (the
 *             largest in whole interleaved elements until the rest packs
 *             into the ordinary region);
 *   tables    per tile, exchange-table bytes from the same fragments
 *             (src/place/tables.c's row costs).
 *
 * Repeat bodies count `count` times. A copy's pricing depends only on its
 * two layouts and view, so it is memoized in an est_cache that any number of
 * threads can share; the result never depends on which thread priced what.
 */
#ifndef TESSEL_ESTIMATE_H
#define TESSEL_ESTIMATE_H

#include "../mid/mid.h"

typedef struct est_cache est_cache;
est_cache *est_cache_new(const machine *m);
void est_cache_free(est_cache *c);
/* Copies priced and reused, for statistics. */
void est_cache_stats(const est_cache *c, int64_t *priced, int64_t *reused);

typedef struct est_result {
    double cycles;            /* predicted run time */
    double compute, exchange; /* its parts */
    int64_t phases;           /* exchange phases run (repeat bodies times their count) */
    int64_t fragments;        /* fragments sent, likewise */
    double peak_bytes;        /* the fullest tile's live buffer payload at its peak */
    int32_t peak_tile;
    double reserved_peak_bytes; /* the most any tile's live buffers reserve at once (est_buffer_room's units) */
    int32_t reserved_peak_tile;
    double resident_bytes;    /* the parameters' and inputs' buffers, each its shard's bytes: placement holds
                                 them all at the first step, each at one address on every tile, so no placement
                                 of the plan needs less room; a bound, not a model */
    double table_bytes_max;   /* the busiest tile's exchange-table bytes */
    double table_bytes_total; /* over all tiles */
    double *prim_cycles;      /* when non-NULL (p->prims.n entries): one execution of each prim */
    double *prim_exchange;    /* when non-NULL, likewise: of prim_cycles, the exchange phases' part */
} est_result;

/* Code and run descriptors, below the data on every tile: src/place's
 * estimate is well below this on the zoo. */
enum { EST_CODE_BYTES = 16384 };
/* The part of a tile its buffers may reserve once code and exchange tables
 * (table_max bytes on the busiest tile) have theirs. */
double est_buffer_room(const machine *m, double table_max);
/* What buffers of these sizes (request bytes, in any order), live at once
 * on one tile, reserve there under the memory map est_program models
 * (estimate.c has the rules). */
int64_t est_tile_reserved(const machine *m, double table_max, const int64_t *sizes, int32_t n);

/* Prices p. The cache (non-NULL) must be for p's machine. */
void est_program(const mid_program *p, est_cache *c, est_result *r);

/* One copy alone, as est_program prices it: fragments sent (a multicast
 * once), the busiest tile's exchange cycles, the busiest tile's on-tile copy
 * cycles. Both layouts must pass layout_check for the cache's machine. */
typedef struct est_copy_info {
    uint64_t fragments;
    uint64_t busiest;
    uint64_t local;
    uint64_t table_sum, table_max;  /* exchange-table bytes over every tile, on the fullest tile */
    uint64_t moved_sum;             /* bytes sent and received, over every tile */
} est_copy_info;
void est_copy(est_cache *c, const layout *src, const layout *dst, const layout_view *view, est_copy_info *out);
/* For tests: price copies into a replicated destination by walking every
 * replica on its own, the definition the one walk per destination shard
 * (estimate.c, by_shard) must equal. Call before the cache prices anything. */
void est_cache_walk_every_replica(est_cache *c);

/* Exchange-table bytes of one tile's part of a phase on machine m: a header,
 * a send row per fragment it sends and its receive rows, in the rows' own
 * format (kern.h's kernel_xt_format, which placement encodes with). */
double est_table_bytes(const machine *m, uint64_t sent_frags, uint64_t recv_frags);

/* ---- bound.c: the least an op can cost (docs/search.md, "The bound") ---- */

/* Cycles graph op `op` of g takes at least on m, one execution, whatever
 * the plan: its multiply-adds at the AMP's peak on every tile, its vector
 * work at the kernels' rates shared by every tile; no exchange. */
double est_op_bound(const graph *g, int32_t op, const machine *m);
/* Times op runs: the product of its enclosing repeats' counts. */
int64_t est_op_executions(const graph *g, int32_t op);

#endif
