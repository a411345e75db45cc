/* compile.c: the compile report (`tessel compile --report FILE.json`): the
 * plan per op, predictions, search steps, failed finalists, statistics,
 * stage times, and the epilogue fusions (docs/epilogue.md) with their
 * summary on a stream. */
#include "report.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *epilogue_of(const graph *g, const fuse_candidate *c) {
    graph_op_kind k = graph_opr(g, c->consumer)->kind;
    return k == OP_ADAMW || k == OP_MATMUL_ADAMW || k == OP_SUM_ADAMW ? "adam moments, then adamw_apply" : "sgd";
}

json_t *report_fusion_json(const graph *g, const fuse_plan *fp, const int64_t *saved, char *const *saved_names,
                           const epilogue_proof *proofs) {
    json_t *a = json_array();
    for (int32_t k = 0; k < fp->n; k++) {
        const fuse_candidate *c = &fp->c[k];
        json_t *e = json_pack("{s:s, s:s, s:o, s:b, s:s, s:s, s:s, s:s}", "consumer", graph_op_name(g, c->consumer),
                              "consumer_kind", graph_op_infos[graph_opr(g, c->consumer)->kind].name, "gradient",
                              c->gradient >= 0 ? json_string(graph_val(g, c->gradient)->name) : json_null(), "fused", c->fused,
                              "rule", fuse_rule_names[c->rule], "reason", c->why, "need", fuse_locality_names[c->need], "have",
                              fuse_locality_names[c->have]);
        if (c->given) json_object_set_new(e, "given", json_true());
        /* The optimizer state's dtype (the first state operand's), none for plain SGD. */
        const graph_op *o = graph_opr(g, c->consumer);
        int first = o->kind == OP_SGD || o->kind == OP_ADAMW ? 2 : 3;
        json_object_set_new(e, "state_dtype",
                            o->nin > first ? json_string(dtype_name(graph_val(g, o->in[first])->type.dtype)) : json_string("none"));
        bool made = c->producer >= 0 && !graph_op_infos[graph_opr(g, c->producer)->kind].structural;
        json_object_set_new(e, "producer", made ? json_string(graph_op_name(g, c->producer)) : json_null());
        json_object_set_new(e, "producer_kind", made ? json_string(graph_op_infos[graph_opr(g, c->producer)->kind].name) : json_null());
        if (c->fused) {
            json_object_set_new(e, "epilogue", json_string(epilogue_of(g, c)));
            json_object_set_new(e, "sram_saved_bytes_per_tile", json_integer(saved ? saved[k] : 0));
            json_object_set_new(e, "saved_buffers", json_string(saved_names && saved_names[k] ? saved_names[k] : ""));
        } else {
            json_object_set_new(e, "sram_saved_bytes_per_tile", json_integer(0));
        }
        if (proofs) {
            const epilogue_proof *p = &proofs[k];
            json_t *j = json_pack("{s:b, s:s}", "materialized", p->materialized, "evidence", p->evidence);
            json_object_set_new(j, "update_runs", json_integer(p->update_runs));
            json_object_set_new(j, "largest_gradient_buffer_bytes", json_integer(p->buffer_bytes));
            json_object_set_new(e, "proof", j);
        }
        json_array_append_new(a, e);
    }
    return a;
}

void report_fusion_summary(FILE *f, const graph *g, const fuse_plan *fp, const int64_t *saved, char *const *saved_names) {
    if (!fp->n) return; /* no optimizer step: nothing to say (not "0 of 0") */
    fprintf(f, "fusion: %d of %d optimizer steps run in their gradient GEMM's epilogue\n", (int)graph_fuse_fused(fp), (int)fp->n);
    for (int32_t k = 0; k < fp->n; k++) {
        const fuse_candidate *c = &fp->c[k];
        bool made = c->producer >= 0 && !graph_op_infos[graph_opr(g, c->producer)->kind].structural;
        fprintf(f, "  %-8s %s (%s) <- %s %s", c->fused ? "fused" : c->rule == FUSE_DISABLED ? "legal" : "refused",
                graph_op_name(g, c->consumer), graph_op_infos[graph_opr(g, c->consumer)->kind].name,
                made ? graph_op_infos[graph_opr(g, c->producer)->kind].name : "value",
                made ? graph_op_name(g, c->producer) : c->gradient >= 0 ? graph_val(g, c->gradient)->name : "its own matmul");
        if (c->given) {
            fprintf(f, ": fused in the model itself\n");
        } else if (c->fused) {
            char b[32];
            fmt_bytes(b, sizeof b, saved ? (double)saved[k] : 0);
            fprintf(f, ": the gradient is never stored; saves %s per tile (%s bytes)\n", b,
                    saved_names && saved_names[k] ? saved_names[k] : "");
        } else {
            fprintf(f, " [%s]: %s\n", fuse_rule_names[c->rule], c->why);
        }
    }
}

static json_t *gemm_json(const graph *g, int32_t op, const mid_gemm_plan *c) {
    mid_gemm_site s;
    mid_gemm_site_of(g, op, &s);
    json_t *bp = json_array();
    for (int j = 0; j < s.nb; j++) json_array_append_new(bp, json_integer(c->batch_parts[j]));
    int64_t R = (s.M + c->bm - 1) / c->bm, C = (s.N + c->bn - 1) / c->bn, K = (s.K + c->bk - 1) / c->bk;
    return json_pack("{s:o, s:I, s:I, s:I, s:I, s:[I,I,I], s:s, s:s, s:b, s:s, s:s}", "batch_parts", bp, "rows", (json_int_t)c->bm, "cols",
                     (json_int_t)c->bn, "k", (json_int_t)c->bk, "col_run", (json_int_t)c->col_run, "grid", (json_int_t)R,
                     (json_int_t)C, (json_int_t)K, "partials", dtype_name(c->partials), "weights",
                     c->stage_b ? "staged" : "resident", "panel_batch", (int)c->panel_batch, "sums",
                     c->sum_at_consumer ? "consumer" : "grid", "streams", c->swap ? "b" : "a");
}

/* Why a matmul's choice won, in a sentence: the cost it was chosen on
 * (the whole program's prediction) against its runner-up's. */
static void choice_reason(const search_op *so, double cycles, double peak, char *why, size_t cap) {
    char pk[32], rp[32];
    fmt_bytes(pk, sizeof pk, peak);
    if (so->chosen_score == 0)
        snprintf(why, cap, "not a scored candidate (the recipe's choice, or a variant of one): kept for the whole program's %.0f cycles",
                 cycles);
    else if (!so->has_runner)
        snprintf(why, cap, "the only grid the machine allows for this op");
    else if (!so->runner_priced)
        snprintf(why, cap, "chosen on the whole program's %.0f cycles (the runner-up does not expand with the rest of the plan)",
                 cycles);
    else if (!so->runner_fits)
        fmt_bytes(rp, sizeof rp, so->runner_peak),
            snprintf(why, cap, "with the runner-up the program's estimated peak is %s per tile, more than the room; chosen: %s", rp, pk);
    else if (so->runner_cycles > cycles)
        snprintf(why, cap, "%s alone, but with it the whole program predicts %.0f cycles, %.0f more than the %.0f chosen",
                 so->runner_score < so->chosen_score ? "the runner-up scores better" : "the runner-up scores worse",
                 so->runner_cycles, so->runner_cycles - cycles, cycles);
    else
        snprintf(why, cap, "the whole program predicts %.0f cycles with the runner-up, no better than the %.0f chosen (the search "
                           "keeps the first of equals)",
                 so->runner_cycles, cycles);
}

/* Per op of g (the compiled graph) that costs anything, the least it can
 * cost on m (est_op_bound), the plan's prediction and their ratio, one
 * execution each; *bound receives the program's sum, repeats counted. */
static json_t *bounds_json(const graph *g, const machine *m, const search_result *sr, double *bound) {
    json_t *a = json_array();
    *bound = 0;
    for (int32_t i = 0; i < g->ops.n; i++) {
        double b = est_op_bound(g, i, m), p = sr->op_cycles ? sr->op_cycles[i] : 0;
        if (b <= 0 && p <= 0) continue;
        int64_t n = est_op_executions(g, i);
        *bound += b * (double)n;
        json_t *e = json_pack("{s:s, s:s, s:I, s:f, s:f}", "op", graph_op_name(g, i), "kind", graph_op_infos[graph_opr(g, i)->kind].name,
                              "executions", (json_int_t)n, "bound_cycles", b, "predicted_cycles", p);
        if (b > 0) json_object_set_new(e, "ratio", json_real(p / b));
        json_array_append_new(a, e);
    }
    return a;
}

char *report_compile_json(const graph *model, const machine *m, const compile_info *info) {
    const search_result *sr = &info->search;
    const graph *g = driver_compiled_graph(model, info); /* the search's ops are the compiled graph's */
    json_t *ops = json_array();
    for (int32_t i = 0; i < sr->ops.n; i++) {
        const search_op *so = &sr->ops.v[i];
        if (so->parts) { /* a layer norm: its rows whole (1) or cut over tiles */
            json_array_append_new(ops, json_pack("{s:s, s:s, s:{s:i}, s:f, s:f}", "op", graph_op_name(g, so->op), "kind",
                                                 "row_parts", "chosen", "parts", (int)so->parts, "predicted_cycles", so->cycles,
                                                 "predicted_exchange_cycles", so->exchange_cycles));
            continue;
        }
        if (so->ew) { /* an elementwise op not in the rule's layout */
            json_array_append_new(ops, json_pack("{s:s, s:s, s:{s:s}, s:f, s:f}", "op", graph_op_name(g, so->op), "kind",
                                                 "elementwise_layout", "chosen", "follows", mid_ew_layout_names[so->ew - 1],
                                                 "predicted_cycles", so->cycles, "predicted_exchange_cycles", so->exchange_cycles));
            continue;
        }
        json_t *o = json_pack("{s:s, s:s, s:o, s:f, s:f, s:f}", "op", graph_op_name(g, so->op), "kind", "matmul_grid", "chosen",
                              gemm_json(g, so->op, &so->chosen), "predicted_cycles", so->cycles, "predicted_exchange_cycles",
                              so->exchange_cycles, "score", so->chosen_score);
        if (so->has_runner) {
            json_object_set_new(o, "runner_up", gemm_json(g, so->op, &so->runner_up));
            json_object_set_new(o, "runner_up_score", json_real(so->runner_score));
            if (so->runner_priced) {
                json_object_set_new(o, "runner_up_predicted_cycles", json_real(so->runner_cycles));
                json_object_set_new(o, "runner_up_fits", json_boolean(so->runner_fits));
            }
        }
        char why[320];
        choice_reason(so, sr->est.cycles, sr->est.peak_bytes, why, sizeof why);
        json_object_set_new(o, "why", json_string(why));
        json_array_append_new(ops, o);
    }
    json_t *steps = json_array();
    for (int32_t i = 0; i < sr->steps.n; i++) {
        const search_step *st = &sr->steps.v[i];
        json_t *sj = json_pack("{s:s, s:s, s:f, s:f, s:f}", "op", st->op < 0 ? "(start streaming B)" : graph_op_name(g, st->op), "by",
                               st->beam ? "beam" : st->op < 0 ? "start" : "local search", "before", st->before, "after",
                               st->after, "delta", st->after - st->before);
        if (st->cast >= 0) /* the cast site the step moved */
            json_object_set_new(sj, "cast_site", json_pack("{s:s, s:i, s:s}", "op", graph_op_name(g, st->op), "ordinal",
                                                           (int)st->cast, "moved", st->early ? "early" : "late"));
        json_array_append_new(steps, sj);
    }
    /* Every f16-to-f8 cast site of the plan: where it runs, and why not
     * early when it cannot be (docs/lowering.md, "Cast ordering"). */
    json_t *sites = json_array();
    for (int32_t i = 0; i < sr->nsites; i++) {
        const mid_cast_site *cs = &sr->sites[i];
        json_t *sj = json_pack("{s:s, s:i, s:b, s:b}", "op", graph_op_name(g, cs->op), "ordinal", (int)cs->ordinal, "eligible",
                               (int)cs->eligible, "early", (int)cs->early);
        if (!cs->eligible && cs->why) json_object_set_new(sj, "reason", json_string(cs->why));
        json_array_append_new(sites, sj);
    }
    json_t *failed = json_array();
    for (int i = 0; i < info->nfailed; i++)
        json_array_append_new(failed, json_pack("{s:i, s:f, s:s, s:f, s:s, s:s}", "finalist", i, "predicted_cycles",
                                                info->failed[i].predicted, "memory", info->failed[i].reserved ? "reserved" : "payload",
                                                "room_scale", info->failed[i].room_scale, "siblings",
                                                info->failed[i].joined ? "joined" : "apart", "why", info->failed[i].why));
    const est_result *e = &sr->est;
    double bound;
    json_t *bounds = bounds_json(g, m, sr, &bound);
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:i, s:f, s:o, s:o, s:o, s:i, "
        "s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i}, "
        "s:{s:i, s:i, s:i, s:i}, s:{s:f, s:f, s:f, s:f}}",
        "format", "tessel-compile-report", "model", g->name, "machine", m->name, "predicted_cycles", e->cycles,
        "predicted_compute_cycles", e->compute, "predicted_exchange_cycles", e->exchange, "predicted_table_bytes_max",
        e->table_bytes_max, "predicted_table_bytes_total", e->table_bytes_total, "predicted_phases", (json_int_t)e->phases, "predicted_fragments", (json_int_t)e->fragments,
        "predicted_peak_bytes", e->peak_bytes, "predicted_peak_tile", (int)e->peak_tile, "predicted_reserved_bytes",
        e->reserved_peak_bytes, "ops", ops, "search_steps", steps,
        "failed_finalists", failed, "finalist", info->finalist, "search", "proposals", (json_int_t)sr->proposals,
        "rejected_memory", (json_int_t)sr->rejected_memory, "rejected_slower", (json_int_t)sr->rejected_slower,
        "evaluations", (json_int_t)sr->evaluations, "beam_evaluations", (json_int_t)sr->beam_evaluations, "copies_priced", (json_int_t)sr->copies_priced, "copies_reused",
        (json_int_t)sr->copies_reused, "finalists", sr->nfinalists, "placed", "tile_bytes", (int)info->place.tile_bytes,
        "peak_tile", (int)info->place.peak_tile, "table_bytes_max", (int)info->place.table_bytes_max, "table_bytes_median",
        (int)info->place.table_bytes_median, "seconds", "search", info->search_seconds, "lower", info->lower_seconds,
        "place", info->place_seconds, "total", info->seconds);
    json_object_set_new(json_object_get(j, "placed"), "table_bytes_total", json_integer((json_int_t)info->place.table_bytes_total));
    json_object_set_new(json_object_get(j, "placed"), "shared_addresses", json_boolean(info->place.shared_addresses));
    json_object_set_new(j, "cast_sites", sites);
    /* The epilogue fusion: every candidate, and what the package holds at once. */
    json_object_set_new(j, "fusions", report_fusion_json(driver_model_graph(model, info), &info->fusions, info->fusion_saved,
                                                         info->fusion_saved_names, info->fusion_proofs));
    /* With a fusion made: the same plan unfused, as a recipe for the model
     * (compile --no-fuse --recipe it --search-steps 0 replays it). */
    if (graph_fuse_count(&info->fusions)) {
        char *unfused = driver_unfused_recipe(model, m, info);
        json_object_set_new(j, "unfused_recipe", json_loads(unfused, 0, NULL));
        free(unfused);
    }
    /* Sibling matmuls: the groups found, whether the plan joins them, and
     * the two searches' predictions that decided it (0: not searched both). */
    json_t *groups = json_array(), *joined = json_array();
    for (int32_t k = 0; k < info->nsibling_groups; k++) json_array_append_new(groups, json_string(info->sibling_groups[k]));
    for (int32_t k = 0; k < info->siblings.n; k++) json_array_append_new(joined, json_string(info->siblings.v[k].name));
    json_object_set_new(j, "siblings", json_pack("{s:o, s:o, s:f, s:f}", "groups", groups, "joined", joined, "predicted_joined",
                                                 info->siblings_joined_cycles, "predicted_apart", info->siblings_apart_cycles));
    /* What the buffers hold at once (the highest address reached depends on where placement put them). */
    json_t *pl = json_object_get(j, "placed");
    json_object_set_new(pl, "peak_live_bytes", json_integer((json_int_t)info->peak.bytes));
    json_object_set_new(pl, "peak_live_tile", json_integer(info->peak.tile));
    json_object_set_new(pl, "peak_live_step", json_integer(info->peak.step));
    json_object_set_new(pl, "peak_live_payload_bytes", json_integer((json_int_t)info->peak.payload));
    /* Every searched plan failed placement and the start plan was packaged. */
    json_object_set_new(j, "start_plan_fallback", json_boolean(info->start_plan_fallback));
    /* How far the plan is from what the machine allows (docs/search.md, "The bound"). */
    json_object_set_new(j, "bounds", bounds);
    json_object_set_new(j, "bound_cycles", json_real(bound));
    if (bound > 0) json_object_set_new(j, "predicted_over_bound", json_real(e->cycles / bound));

    char *s = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(j);
    return util_newline_terminated(s);
}

