/* driver.c: compile() and check(): the pipeline on one screen. */
#include "tessel.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The package's metadata: what was compiled, statistics, and the plan's
 * numeric decisions, which the plan-exact reference reads back. */
static char *meta_json(const graph *g, const machine *m, const char *model, const compile_info *ci, const char *numerics) {
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:{s:i, s:i, s:i, s:I, s:I, s:I}}", "tessel", "0.1", "model", model, "graph",
                          g->name, "machine", m->name, "compile", "tile_bytes", (int)ci->place.tile_bytes, "param_bytes",
                          (int)ci->place.param_bytes, "buffers", (int)ci->place.buffers, "steps", (json_int_t)ci->steps,
                          "runs", (json_int_t)ci->runs, "fragments", (json_int_t)ci->frags);
    json_object_set_new(j, "numerics", json_loads(numerics, 0, NULL));
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return s;
}

int tessel_compile(const graph *g, const machine *m, const char *model, FILE *print_mid, package *out, compile_info *info,
                   diag *d) {
    double t0 = util_now_seconds();
    memset(info, 0, sizeof *info);
    mid_program mid;
    if (mid_expand(g, m, &mid, d)) return -1;
    if (print_mid) mid_print(print_mid, &mid);
    arena la;
    arena_init(&la);
    low_program low;
    int32_t *buf_of = xmalloc(sizeof(int32_t) * (size_t)(mid.tensors.n + 1));
    int rc = low_lower(&mid, m, &la, &low, buf_of, d);
    if (rc == 0) {
        info->prims = mid.prims.n;
        info->steps = low.steps.n;
        info->runs = low.runs.n;
        info->frags = low.frags.n;
        /* Placement first fills the statistics the metadata reports. */
        rc = place_package(&mid, &low, buf_of, "{}", out, &info->place, d);
        if (rc == 0) {
            graph_numerics nu;
            mid_numerics(&mid, &nu);
            char *nj = graph_numerics_json(g, &nu), *meta = meta_json(g, m, model, info, nj);
            out->meta = arena_strdup(&out->arena, meta);
            free(meta);
            free(nj);
            graph_numerics_free(&nu);
        }
    }
    free(buf_of);
    arena_free(&la);
    mid_free(&mid);
    info->seconds = util_now_seconds() - t0;
    return rc;
}

static bool has_fp8(const graph *g) {
    for (int32_t v = 0; v < g->values.n; v++)
        if (dtype_is_f8(graph_val(g, v)->type.dtype)) return true;
    return false;
}

int tessel_check(const graph *g, const package *p, float *const *given, const sim_options *so, check_result *r, diag *d) {
    memset(r, 0, sizeof *r);
    int32_t nin = graph_inputs(g, NULL, 0), nout = graph_outputs(g, NULL, 0);
    int32_t *in_ids = xcalloc((size_t)nin + 1, sizeof(int32_t)), *out_ids = xcalloc((size_t)nout + 1, sizeof(int32_t));
    graph_inputs(g, in_ids, nin);
    graph_outputs(g, out_ids, nout);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *));
    float **got = xcalloc((size_t)nout + 1, sizeof(float *)), **pure = xcalloc((size_t)nout + 1, sizeof(float *));
    float **emu = xcalloc((size_t)nout + 1, sizeof(float *));
    for (int32_t k = 0; k < nin; k++) {
        size_t n = (size_t)graph_type_numel(&graph_val(g, in_ids[k])->type);
        inputs[k] = xmalloc(sizeof(float) * (n ? n : 1));
        if (given && given[k]) memcpy(inputs[k], given[k], sizeof(float) * n);
        else graph_input_default(g, in_ids[k], k, inputs[k]);
    }
    graph_numerics plan;
    int rc = graph_numerics_parse(g, p->meta, "package metadata", &plan, d);
    if (rc == 0) {
        rc = sim_run(p, so, inputs, got, &r->sim, d);
        double t0 = util_now_seconds();
        ref_options po = {.strip_precision = true, .quiet = true}, eo = {.plan = &plan, .quiet = true};
        if (rc == 0) rc = ref_run(g, &po, inputs, pure, d);
        if (rc == 0) rc = ref_run(g, &eo, inputs, emu, d);
        r->ref_seconds = util_now_seconds() - t0;
        graph_numerics_free(&plan);
    }
    if (rc == 0) {
        r->fp8 = has_fp8(g);
        r->n = nout;
        r->out = xcalloc((size_t)nout + 1, sizeof(check_output));
        r->pass = true;
        r->cosine = 1;
        for (int32_t j = 0; j < nout; j++) {
            check_output *o = &r->out[j];
            size_t n = (size_t)graph_type_numel(&graph_val(g, out_ids[j])->type);
            o->name = graph_val(g, out_ids[j])->name;
            o->pure = num_compare(got[j], pure[j], n);
            o->exact = num_mismatches(got[j], emu[j], n);
            o->min_cosine = r->fp8 ? 0.99 : 0.999;
            o->pass = o->pure.nonfinite == 0 && o->pure.cosine >= o->min_cosine && o->exact.count == 0;
            r->pass &= o->pass;
            r->differing += o->exact.count;
            if (!(o->pure.cosine >= r->cosine)) r->cosine = o->pure.cosine;
            if (!(o->pure.max_abs_err <= r->max_abs_err)) r->max_abs_err = o->pure.max_abs_err;
        }
    }
    for (int32_t k = 0; k < nin; k++) free(inputs[k]);
    for (int32_t j = 0; j < nout; j++) {
        free(got[j]);
        free(pure[j]);
        free(emu[j]);
    }
    free(inputs);
    free(got);
    free(pure);
    free(emu);
    free(in_ids);
    free(out_ids);
    return rc;
}

void check_result_free(check_result *r) {
    sim_stats_free(&r->sim);
    free(r->out);
    r->out = NULL;
}
