/* trace.c: Chrome Trace Event JSON from the simulator's step events.
 *
 * Tracks: compute sets and exchange phases (the busiest tile sets each
 * step's length), then one track per sampled tile (sim.h's SIM_TRACE_TILES:
 * that tile's own cycles in each compute set) and, per sampled tile, a
 * counter of the bytes its live buffers reserve at each step (the buffers
 * the tile holds, inspect.c's report_tiles). */
#include "report.h"

#include <jansson.h>
#include <stdlib.h>

/* Per sampled tile k and program step s: the bytes tile k's live buffers reserve. */
static uint64_t *live_bytes(const package *pkg, const sim_stats *st, const report_tiles *rt) {
    int32_t nsteps = pkg->prog.steps.n;
    uint64_t *live = xcalloc((size_t)st->nsample * (size_t)(nsteps + 1) + 1, sizeof(uint64_t));
    for (int32_t k = 0; k < st->nsample; k++)
        for (int32_t b = 0; b < rt->nbufs; b++) {
            const low_buf *lb = &pkg->prog.bufs.v[b];
            if (!report_tile_holds(rt, st->sample_tile[k], b)) continue;
            for (int32_t s = lb->first; s <= lb->last && s < nsteps; s++) live[(size_t)k * (size_t)nsteps + (size_t)s] += lb->reserved;
        }
    return live;
}

int report_trace_write(FILE *f, const sim_stats *st, const package *pkg, const char *title, diag *d) {
    double clock_hz = pkg->machine.clock_hz;
    report_tiles rt;
    if (report_tiles_build(pkg, title, &rt, d)) return -1;
    uint64_t *live = live_bytes(pkg, st, &rt);
    report_tiles_free(&rt);
    json_t *events = json_array();
    /* The timeline counts cycles: one microsecond on the viewer's ruler is
     * one cycle; each slice also carries its wall time at the clock. */
    static const char *const track[] = {"compute", "exchange"};
    for (int t = 0; t < 2; t++)
        json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 0,
                                                "tid", t, "args", "name", track[t]));
    for (int32_t k = 0; k < st->nsample; k++) {
        char name[48];
        snprintf(name, sizeof name, "tile %u", st->sample_tile[k]);
        json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 0,
                                                "tid", 2 + k, "args", "name", name));
    }
    json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", 0, "args",
                                            "name", title));
    int32_t nsteps = pkg->prog.steps.n;
    uint64_t *shown = xcalloc((size_t)st->nsample + 1, sizeof(uint64_t)); /* the counters' last values, +1 */
    for (int64_t i = 0; i < st->nevents; i++) {
        const sim_event *e = &st->events[i];
        int tid = e->kind == LOW_STEP_EXCHANGE;
        /* A repeat body's steps run once per iteration under one label (the
         * body's op names): each slice says which iteration it is. */
        char name[320];
        if (e->depth) snprintf(name, sizeof name, "%s [%u]", e->label, e->iteration);
        else snprintf(name, sizeof name, "%s", e->label);
        json_array_append_new(events, json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:i, s:{s:I, s:f, s:i}}", "name", name,
                                                "cat", track[tid], "ph", "X", "ts", (json_int_t)e->start, "dur",
                                                (json_int_t)e->cycles, "pid", 0, "tid", tid, "args", "cycles",
                                                (json_int_t)e->cycles, "microseconds", (double)e->cycles * 1e6 / clock_hz,
                                                "busiest_tile", (int)e->busiest_tile));
        json_t *args = json_object_get(json_array_get(events, json_array_size(events) - 1), "args");
        json_object_set_new(args, "step", json_integer(e->step)); /* the program's step, as low_print numbers it */
        if (e->depth) json_object_set_new(args, "iteration", json_integer(e->iteration));
        /* A joined step's copies, as cycles_by_kind counts them. */
        if (e->copy_cycles)
            json_object_set_new(args, "copy_cycles", json_integer((json_int_t)e->copy_cycles));
        for (int32_t k = 0; k < st->nsample; k++) {
            uint64_t c = st->sample_cycles[i * st->nsample + k];
            if (c)
                json_array_append_new(events, json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:i, s:{s:I}}", "name", name, "cat", "tile",
                                                        "ph", "X", "ts", (json_int_t)e->start, "dur", (json_int_t)c, "pid", 0,
                                                        "tid", 2 + k, "args", "cycles", (json_int_t)c));
            uint64_t b = e->step < (uint32_t)nsteps ? live[(size_t)k * (size_t)nsteps + e->step] : 0;
            if (shown[k] == b + 1) continue; /* a counter event only where the value changes */
            shown[k] = b + 1;
            char cname[48];
            snprintf(cname, sizeof cname, "tile %u live bytes", st->sample_tile[k]);
            json_array_append_new(events, json_pack("{s:s, s:s, s:I, s:i, s:{s:I}}", "name", cname, "ph", "C", "ts",
                                                    (json_int_t)e->start, "pid", 0, "args", "reserved", (json_int_t)b));
        }
    }
    free(shown);
    free(live);
    json_t *root = json_pack("{s:o, s:s}", "traceEvents", events, "displayTimeUnit", "ns");
    int rc = json_dumpf(root, f, JSON_COMPACT) == 0 ? 0 : -1;
    json_decref(root);
    return rc;
}
