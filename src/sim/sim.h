/* sim: runs a package with bulk-synchronous semantics and counts cycles.
 *
 *   tile memories   one image per tile at its real addresses, zeroed, then
 *                   filled from the package's segments and the host inputs
 *   COMPUTE step    every tile runs its kernel runs in order; tiles run in
 *                   parallel host threads (results never depend on how many);
 *                   the step takes its slowest tile's cycles, each run paying
 *                   the machine's launch cost on top of its kernel cycles
 *   EXCHANGE step   executed from the package's exchange tables, decoded once
 *                   (pkg_xplan_build): every tile's send rows read a snapshot
 *                   taken before the phase, then every tile's receive rows
 *                   write what is delivered to it, in slot order, from their
 *                   pointers; senders and receivers run on host threads, each
 *                   tile on one, so results never depend on how many; the
 *                   phase takes the sync
 *                   cost and the repeat patching of its busiest patcher, then
 *                   (if it moves data) the latency and its busiest tile: the
 *                   bytes of the busier direction over the exchange bandwidth
 *                   (slower on a memory element conflict), or the fragments
 *                   sent plus received times the per-fragment cost, whichever
 *                   is larger (exchange_phase_cycles in sim.c)
 *   REPEAT          the body runs `iterations` times; cycles add up
 *
 * The simulator reads only the package: never the graph or the reference.
 */
#ifndef TESSEL_SIM_H
#define TESSEL_SIM_H

#include "../package/package.h"

typedef struct sim_event {
    const char *label;     /* the step's name, from the package */
    uint8_t kind;          /* low_step_kind: COMPUTE or EXCHANGE */
    uint64_t start;        /* cycle the step starts */
    uint64_t cycles;       /* its duration */
    uint32_t busiest_tile; /* the tile that set the duration */
    uint64_t copy_cycles;  /* of a joined compute step: its busiest tile's copy runs */
    uint32_t iteration;    /* inside a repeat (depth > 0): the innermost one's iteration */
    uint8_t depth;         /* repeats open around the step */
    uint32_t step;         /* the program's step (an index into the package's steps) */
} sim_event;

/* With trace on, the compute cycles of a sample of tiles are kept per step:
 * tiles k * tiles / SIM_TRACE_TILES (k = 0 .. SIM_TRACE_TILES - 1, those
 * that exist), the Chrome trace's per-tile tracks. */
enum { SIM_KINDS = 16, SIM_TRACE_TILES = 8 };

typedef struct sim_stats {
    uint64_t cycles;           /* total */
    uint64_t compute_cycles;   /* of which compute sets */
    uint64_t exchange_cycles;  /* of which exchange phases, sync included */
    uint64_t sync_cycles;      /* of which syncs and repeat address patching */
    uint64_t runs, fragments;  /* executed, repeats counted */
    uint64_t phases;           /* exchange phases executed, repeats counted */
    uint64_t exchange_bytes;   /* payload sent, a multicast counted once */
    uint64_t macs;             /* GEMM multiply-adds simulated */
    double roofline_cycles;    /* those multiply-adds at every tile's AMP peak rate */
    int32_t tiles_used;        /* tiles that ran a kernel or sent or received */
    uint32_t peak_tile_bytes;  /* highest byte any tile touches, from tile_memory_base */
    double host_seconds;       /* wall time of the run itself */
    double kernel_seconds;     /* of which compute sets */
    sim_event *events;         /* malloc'd, one per step executed (with trace on) */
    int64_t nevents;
    /* With trace on, per tile (malloc'd, machine tiles entries): its compute
     * cycles over the whole run, and in the longest compute step executed
     * (events[longest_step]; the first of equals), launch costs included. */
    uint64_t *tile_compute;
    uint64_t *tile_longest;
    int64_t longest_step;
    int32_t nsample;                          /* sampled tiles */
    uint32_t sample_tile[SIM_TRACE_TILES];    /* their ids */
    uint64_t *sample_cycles;                  /* [event * nsample + k]: tile sample_tile[k]'s compute cycles */
    /* Cycles per kind of step, the part of each step's label after its ':'
     * (gemm, exchange, softmax, ...), in order of first appearance; the
     * last slot gathers whatever kinds did not fit. */
    struct {
        char name[16];
        uint64_t cycles;
    } kinds[SIM_KINDS];
    int32_t nkinds;
} sim_stats;

typedef struct sim_options {
    bool trace;   /* record one event per executed step */
    bool quiet;   /* no progress line */
    /* If set, called for every probe binding each time its step completes,
     * with its values as f32 and the iteration of every enclosing repeat
     * (iters[0..depth), outermost first). */
    void (*probe)(void *ctx, int32_t binding, const uint32_t *iters, int depth, const float *values, int64_t n);
    void *probe_ctx;
    uint64_t max_host_bytes;  /* refuse a run needing more host memory than this; 0: no limit */
} sim_options;

/* Host memory a run of a package for m needs, bytes: every tile's memory
 * image and the per-tile counters (the package itself not counted). */
uint64_t sim_host_bytes(const machine *m);
/* Refuses (-1 with d) when sim_host_bytes(m) exceeds limit (0: none);
 * `option` names the option that sets the limit. */
int sim_host_check(const machine *m, uint64_t limit, const char *option, diag *d);

/* Runs p. inputs[k] holds the k-th input binding's values as f32 (rounded
 * to the binding's dtype on the way in); outputs[j] receives a malloc'd f32
 * array for the j-th output binding. */
int sim_run(const package *p, const sim_options *o, float *const *inputs, float **outputs, sim_stats *st, diag *d);
void sim_stats_free(sim_stats *st);

/* Elements of a binding's tensor. */
int64_t sim_binding_numel(const pkg_binding *b);

#endif
