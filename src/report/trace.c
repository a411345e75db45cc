/* trace.c: Chrome Trace Event JSON from the simulator's step events. */
#include "report.h"

#include <jansson.h>

int report_trace_write(FILE *f, const sim_stats *st, double clock_hz, const char *title) {
    json_t *events = json_array();
    /* The timeline counts cycles: one microsecond on the viewer's ruler is
     * one cycle; each slice also carries its wall time at the clock. */
    /* Two tracks: compute sets and exchange phases, named once as threads. */
    static const char *const track[] = {"compute", "exchange"};
    for (int t = 0; t < 2; t++)
        json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 0,
                                                "tid", t, "args", "name", track[t]));
    json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", 0, "args",
                                            "name", title));
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
        if (e->depth) json_object_set_new(args, "iteration", json_integer(e->iteration));
        /* A joined step's copies, as cycles_by_kind counts them. */
        if (e->copy_cycles)
            json_object_set_new(args, "copy_cycles", json_integer((json_int_t)e->copy_cycles));
    }
    json_t *root = json_pack("{s:o, s:s}", "traceEvents", events, "displayTimeUnit", "ns");
    int rc = json_dumpf(root, f, JSON_COMPACT) == 0 ? 0 : -1;
    json_decref(root);
    return rc;
}
