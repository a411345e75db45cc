/* run.c: what a compile, a run and a check print for people (stdout) and
 * scripts (--json): the summaries, the cycles by kind, the comparisons. */
#include "report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void report_compile_summary(FILE *f, const char *model, const machine *m, const compile_info *ci, uint64_t pkg_bytes,
                                  const char *path) {
    char used[32], have[32], size[32];
    fmt_bytes(used, sizeof used, ci->place.tile_bytes);
    fmt_bytes(have, sizeof have, machine_tile_bytes(m));
    fmt_bytes(size, sizeof size, (double)pkg_bytes);
    fprintf(f, "compiled %s for %s in %.2f s\n", model, m->name, ci->seconds);
    fprintf(f, "  program     %lld steps, %lld kernel runs, %lld exchange fragments (repeat bodies once)\n", (long long)ci->steps,
           (long long)ci->runs, (long long)ci->frags);
    char sup[32], tmax[32], tmed[32];
    fmt_bytes(sup, sizeof sup, ci->place.support_bytes);
    fmt_bytes(tmax, sizeof tmax, ci->place.table_bytes_max);
    fmt_bytes(tmed, sizeof tmed, ci->place.table_bytes_median);
    fprintf(f, "  tile memory %s of %s reserved on the fullest tile (%u), %d buffers reusing memory once dead%s; code and tables %s\n",
           used, have, ci->place.peak_tile, ci->place.buffers,
           ci->place.shared_addresses ? " and sharing addresses on disjoint tiles" : "", sup);
    fprintf(f, "  tables      %s on the busiest tile, median %s (budget %u KiB)\n", tmax, tmed, m->table_budget_bytes / 1024);
    if (path) fprintf(f, "  package     %s, %s\n", path, size);
}

/* A few lines on stderr: what the search chose and how sure it is, and
 * where the 8-bit casts run. */
void report_search_summary(const graph *model, const compile_info *ci) {
    const search_result *sr = &ci->search;
    fprintf(stderr, "search: %lld beam plans, %lld proposals, %d kept, predicted %.0f cycles (compute %.0f, exchange %.0f); finalist %d of %d",
            (long long)sr->beam_evaluations, (long long)sr->proposals, (int)sr->steps.n, sr->est.cycles, sr->est.compute,
            sr->est.exchange, ci->finalist + 1, sr->nfinalists);
    if (ci->nfailed) fprintf(stderr, " (%d failed placement)", ci->nfailed);
    if (ci->start_plan_fallback)
        fprintf(stderr, "; every searched plan failed placement, so this is the start plan (each matmul's best-scored grid)");
    fprintf(stderr, "\n");
    if (!sr->nsites) return;
    /* Where the 8-bit casts run (docs/lowering.md, "Cast ordering"). */
    const graph *g = driver_compiled_graph(model, ci);
    static const char *const what[3] = {"early", "late", "cannot move"};
    fprintf(stderr, "casts:");
    for (int k = 0, sep = 0; k < 3; k++) {
        int n = 0;
        for (int32_t i = 0; i < sr->nsites; i++) {
            const mid_cast_site *c = &sr->sites[i];
            if ((c->early ? 0 : c->eligible ? 1 : 2) != k) continue;
            fprintf(stderr, n ? ", %s" : "%s %s %s", n ? graph_op_name(g, c->op) : sep ? ";" : "", n ? "" : what[k],
                    n ? "" : graph_op_name(g, c->op));
            if (c->ordinal) fprintf(stderr, "#%d", (int)c->ordinal);
            n++;
        }
        sep |= n > 0;
    }
    fprintf(stderr, "\n");
}

json_t *report_sim_json(const sim_stats *st, const machine *m) {
    json_t *j = json_pack("{s:I, s:f, s:I, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:f, s:f}", "cycles", (json_int_t)st->cycles,
                     "seconds_at_clock", (double)st->cycles / m->clock_hz, "compute_cycles", (json_int_t)st->compute_cycles,
                     "exchange_cycles", (json_int_t)st->exchange_cycles, "sync_cycles", (json_int_t)st->sync_cycles,
                     "tiles_used", st->tiles_used, "peak_tile_bytes", (int)st->peak_tile_bytes, "exchange_bytes",
                     (json_int_t)st->exchange_bytes, "runs", (json_int_t)st->runs, "macs", (json_int_t)st->macs,
                     "host_seconds", st->host_seconds, "kernel_seconds", st->kernel_seconds);
    json_object_set_new(j, "roofline_cycles", json_real(st->roofline_cycles));
    json_object_set_new(j, "exchange_phases", json_integer((json_int_t)st->phases));
    json_object_set_new(j, "exchange_fragments", json_integer((json_int_t)st->fragments));
    json_t *kinds = json_object();
    for (int32_t i = 0; i < st->nkinds; i++) json_object_set_new(kinds, st->kinds[i].name, json_integer((json_int_t)st->kinds[i].cycles));
    json_object_set_new(j, "cycles_by_kind", kinds);
    return j;
}

/* The kinds of step, most cycles first (ties in order of appearance). */
static void sorted_kinds(const sim_stats *st, int32_t *order) {
    for (int32_t i = 0; i < st->nkinds; i++) order[i] = i;
    for (int32_t i = 1; i < st->nkinds; i++)
        for (int32_t k = i; k > 0 && st->kinds[order[k]].cycles > st->kinds[order[k - 1]].cycles; k--) {
            int32_t t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
}

void report_sim_summary(const sim_stats *st, const machine *m) {
    char used[32], xb[32];
    fmt_bytes(used, sizeof used, st->peak_tile_bytes);
    fmt_bytes(xb, sizeof xb, (double)st->exchange_bytes);
    printf("  cycles      %llu (%.3f ms at %.2f GHz): compute %llu, exchange %llu (sync %llu)\n",
           (unsigned long long)st->cycles, (double)st->cycles / m->clock_hz * 1e3, m->clock_hz / 1e9,
           (unsigned long long)st->compute_cycles, (unsigned long long)st->exchange_cycles,
           (unsigned long long)st->sync_cycles);
    if (st->macs)
        printf("  roofline    %.0f cycles for %.3g multiply-adds at the AMP peak: %.2fx of it\n", st->roofline_cycles,
               (double)st->macs, st->cycles / st->roofline_cycles);
    if (st->nkinds > 0 && st->cycles > 0) {
        int32_t order[SIM_KINDS];
        sorted_kinds(st, order);
        printf("  by kind    ");
        for (int32_t i = 0; i < st->nkinds; i++) {
            uint64_t c = st->kinds[order[i]].cycles;
            printf("%s %s %llu (%.1f%%)", i ? "," : "", st->kinds[order[i]].name, (unsigned long long)c, 100.0 * (double)c / (double)st->cycles);
        }
        printf("\n");
    }
    printf("  tiles       %d of %u used, at most %s of a tile's memory touched, %s exchanged\n", st->tiles_used, m->tiles, used,
           xb);
    printf("  host        %.2f s simulating (%.2f s in kernels)\n", st->host_seconds, st->kernel_seconds);
}

/* JSON has no NaN or infinity: those figures are null. */
static json_t *json_num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *locate_json(const graph *g, const locate_result *l) {
    if (!l->found) return json_pack("{s:b, s:I, s:i}", "found", 0, "compared", (json_int_t)l->compared, "probes", (int)l->probes);
    json_t *it = json_array(), *at = json_array();
    for (int k = 0; k < l->depth; k++) json_array_append_new(it, json_integer(l->iters[k]));
    for (int a = 0; a < l->rank; a++) json_array_append_new(at, json_integer(l->coord[a]));
    json_t *j = json_pack("{s:b, s:s, s:s, s:s, s:o, s:b, s:I, s:I}", "found", 1, "op", graph_op_name(g, l->op), "kind",
                          graph_op_infos[graph_opr(g, l->op)->kind].name, "value", graph_val(g, l->value)->name,
                          "iterations", it, "missing", l->missing, "elements", (json_int_t)l->numel, "differing",
                          (json_int_t)l->diff.count);
    if (l->diff.count)
        json_object_set_new(j, "first", json_pack("{s:I, s:o, s:i, s:o, s:o}", "index", (json_int_t)l->diff.first, "coords",
                                                  at, "tile", (int)l->tile, "got", json_num(l->diff.got), "want",
                                                  json_num(l->diff.want)));
    else
        json_decref(at);
    return j;
}

/* NaN or infinity in what the user gave: inputs, and parameters read from
 * .npy files (seeded ones cannot hold any); a note on stderr each, and the
 * same as JSON entries. */
static void scan_nonfinite(const char *kind, const char *name, const float *x, int64_t n, json_t *out, FILE *notes) {
    int64_t count = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) && count++ == 0) first = i;
    if (!count) return;
    if (notes) fprintf(notes, "tessel check: note: %s '%s' holds %lld non-finite values (the first at element %lld)\n", kind, name,
            (long long)count, (long long)first);
    json_array_append_new(out, json_pack("{s:s, s:s, s:I, s:I}", "name", name, "kind", kind, "count", (json_int_t)count,
                                         "first", (json_int_t)first));
}

json_t *report_nonfinite_json(const graph *g, const host_spec *specs, int32_t nin, float *const *inputs, FILE *notes) {
    json_t *out = json_array();
    for (int32_t j = 0; j < nin; j++) scan_nonfinite("input", specs[j].name, inputs[j], host_numel(&specs[j]), out, notes);
    for (int32_t op = 0; op < g->ops.n; op++) {
        const graph_op *o = graph_opr(g, op);
        if (o->kind != OP_PARAM || o->init.kind != INIT_NPY) continue;
        const graph_value *v = graph_val(g, o->out[0]);
        int64_t n = graph_type_numel(&v->type);
        float *vals = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
        diag d = {0};
        if (graph_param_values(g, op, true, vals, &d) == 0) scan_nonfinite("parameter", v->name, vals, n, out, notes);
        free(vals);
    }
    return out;
}

json_t *report_check_json(const graph *g, const char *model, const machine *m, const compile_info *ci, const check_result *r,
                          const check_proofs *pv, json_t *nonfinite) {
    json_t *j = report_sim_json(&r->sim, m);
    json_t *outs = json_array();
    for (int32_t i = 0; i < r->n; i++) {
        const check_output *o = &r->out[i];
        json_t *e = json_pack("{s:s, s:o, s:o, s:f, s:b, s:I, s:b}", "name", o->name, "cosine", json_num(o->pure.cosine),
                              "max_abs_err", json_num(o->pure.max_abs_err), "min_cosine", o->min_cosine, "exact",
                              o->exact.count == 0, "differing", (json_int_t)o->exact.count, "pass", o->pass);
        if (o->has_expect) {
            json_object_set_new(e, "expect_cosine", json_real(o->expect.cosine));
            json_object_set_new(e, "expect_max_abs_err", json_real(o->expect.max_abs_err));
        }
        if (o->exact.count)
            json_object_set_new(e, "first_difference", json_pack("{s:I, s:o, s:o}", "index", (json_int_t)o->exact.first,
                                                                 "got", json_num(o->exact.got), "want", json_num(o->exact.want)));
        json_array_append_new(outs, e);
    }
    json_object_set_new(j, "model", json_string(model));
    json_object_set_new(j, "machine", json_string(m->name));
    json_object_set_new(j, "cosine", json_num(r->cosine));
    json_object_set_new(j, "max_abs_err", json_num(r->max_abs_err));
    json_object_set_new(j, "exact", json_boolean(r->differing == 0));
    if (r->has_expect) {
        json_object_set_new(j, "expect_cosine", json_real(r->expect_cosine));
        json_object_set_new(j, "expect_max_abs_err", json_real(r->expect_max_abs_err));
    }
    json_object_set_new(j, "differing", json_integer(r->differing));
    json_object_set_new(j, "pass", json_boolean(r->pass));
    json_object_set_new(j, "fp8", json_boolean(r->fp8));
    json_object_set_new(j, "outputs", outs);
    if (ci) {
        json_object_set_new(j, "compile_seconds", json_real(ci->seconds));
        json_object_set_new(j, "tile_bytes_placed", json_integer(ci->place.tile_bytes));
    }
    json_object_set_new(j, "ref_seconds", json_real(r->ref_seconds));
    json_object_set_new(j, "fp32_ref_seconds", json_real(r->pure_seconds));
    json_object_set_new(j, "exact_ref_seconds", json_real(r->exact_seconds));
    if (r->located) json_object_set_new(j, "located", locate_json(g, &r->loc));
    json_object_set_new(j, "fusions", report_fusion_json(pv->gf, pv->fp, NULL, NULL, pv->proofs));
    json_object_set_new(j, "peak_live_bytes", json_integer((json_int_t)pv->peak.bytes));
    json_object_set_new(j, "nonfinite_inputs", nonfinite ? json_incref(nonfinite) : json_array());
    return j;
}

void report_check_summary(const graph *g, const check_result *r, const char *const *expect_src) {
    printf("  references  FP32 %.2f s, plan-exact %.2f s, each on a thread beside the simulation\n", r->pure_seconds,
           r->exact_seconds);
    for (int32_t i = 0; i < r->n; i++) {
        const check_output *o = &r->out[i];
        char exact[200];
        if (o->exact.count == 0) snprintf(exact, sizeof exact, "bit-exact");
        else
            snprintf(exact, sizeof exact, "%lld elements differ, first [%lld]: got %.9g, want %.9g",
                     (long long)o->exact.count, (long long)o->exact.first, o->exact.got, o->exact.want);
        printf("  output %-12s vs pure FP32: cosine %.6f (>= %.3f), max abs err %.4g | vs plan-exact reference: %s  %s\n",
               o->name, o->pure.cosine, o->min_cosine, o->pure.max_abs_err, exact, o->pass_refs ? "ok" : "FAIL");
        if (o->has_expect) /* its own verdict, on its own line */
            printf("  output %-12s vs expected %s: cosine %.6f (>= %.3f), max abs err %.4g  %s\n", o->name, expect_src[i],
                   o->expect.cosine, o->min_cosine, o->expect.max_abs_err, o->pass_expect ? "ok" : "FAIL");
    }
    if (r->located) report_locate_print(stdout, g, &r->loc);
    printf("%s\n", r->pass ? "PASS" : "FAIL");
}

/* One line on the fused optimizer steps and what the package stores. */
void report_epilogue_summary(const graph *g, const fuse_plan *fp, const epilogue_proof *proofs) {
    if (!fp->n) return;
    char fused[512] = "", refused[512] = "";
    size_t a = 0, b = 0;
    int bad = 0;
    for (int32_t k = 0; k < fp->n; k++) {
        const fuse_candidate *c = &fp->c[k];
        const char *name = graph_op_name(g, c->consumer);
        if (c->fused && a < sizeof fused) a += (size_t)snprintf(fused + a, sizeof fused - a, "%s%s", a ? ", " : "", name);
        if (!c->fused && b < sizeof refused)
            b += (size_t)snprintf(refused + b, sizeof refused - b, "%s%s [%s]", b ? ", " : "", name, fuse_rule_names[c->rule]);
        bad += c->fused && proofs[k].materialized;
    }
    printf("  epilogue    %d of %d optimizer steps fused%s%s%s%s\n", (int)graph_fuse_fused(fp), (int)fp->n, a ? ": " : "", fused,
           b ? "; unfused: " : "", refused);
    if (graph_fuse_fused(fp))
        printf("              %s\n", bad ? "FAIL: the package stores a fused gradient" :
                                           "the package stores none of the fused gradients (proof from its buffers and runs)");
    for (int32_t k = 0; k < fp->n; k++)
        if (fp->c[k].fused && proofs[k].materialized) printf("              %s: %s\n", graph_op_name(g, fp->c[k].consumer), proofs[k].evidence);
}


void report_locate_print(FILE *f, const graph *g, const locate_result *r) {
    if (!r->probes) {
        fprintf(f, "  locate      the package has no probes of op results (compiled by an older tessel?)\n");
        return;
    }
    if (!r->found) {
        fprintf(f, "  locate      all %lld op results (repeat iterations counted) match the plan-exact reference\n",
                (long long)r->compared);
        return;
    }
    const graph_value *v = graph_val(g, r->value);
    char ty[160];
    graph_type_str(&v->type, ty, sizeof ty);
    fprintf(f, "  locate      first difference: op '%s' (%s), result %%%s %s", graph_op_name(g, r->op),
            graph_op_infos[graph_opr(g, r->op)->kind].name, v->name, ty);
    /* The repeats around the op (a repeat's results live outside its own body). */
    int32_t rep[GRAPH_MAX_REPEAT_DEPTH], n = 0;
    for (int32_t q = graph_opr(g, r->op)->parent; q >= 0 && n < GRAPH_MAX_REPEAT_DEPTH; q = graph_opr(g, q)->parent) rep[n++] = q;
    for (int k = 0; k < r->depth && k < n; k++)
        fprintf(f, ", iteration %lld of %lld of repeat '%s'", (long long)r->iters[k], (long long)graph_opr(g, rep[n - 1 - k])->count,
                graph_op_name(g, rep[n - 1 - k]));
    fprintf(f, "\n");
    if (r->missing) {
        fprintf(f, "              the simulator never completed it\n");
        return;
    }
    char at[200] = "";
    fmt_dims(at, sizeof at, r->rank, r->coord);
    fprintf(f, "              %lld of %lld elements differ; the first, %s (element %lld) on tile %d: got %.9g, want %.9g\n",
            (long long)r->diff.count, (long long)r->numel, at, (long long)r->diff.first, (int)r->tile, r->diff.got,
            r->diff.want);
}
