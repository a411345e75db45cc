/* hostio.c: tensors on the command line: .npy inputs, seeded defaults,
 * output files, one-line summaries. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../report/report.h"
#include "cli.h"

/* Tensors named by the command's `opt` NAME=FILE.npy options into data[j]
 * for specs[j] (role: "input" or "output"); inputs round to their dtype. */
static int load_named(const cmd *c, const parsed *p, const char *opt, const char *role, const host_spec *specs, int32_t n,
                      float **inputs, const char **source, diag *d) {
    int k = cli_opt_index(c, opt);
    bool is_input = role[0] == 'i';
    arena scratch; /* names cut from the options, any length */
    arena_init(&scratch);
    for (int i = 0; i < p->nval[k]; i++) {
        const char *a = p->val[k][i], *eq = strchr(a, '=');
        if (!eq || eq == a || !eq[1]) {
            diag_fail(d, "tessel %s: error: option '%s %s': expected NAME=FILE.npy", c->name, opt, a);
            goto fail;
        }
        char *name = arena_strndup(&scratch, a, (size_t)(eq - a));
        const char *bare = name[0] == '%' ? name + 1 : name;
        int32_t j = host_find(specs, n, bare);
        if (j < 0) {
            char known[512];
            host_names(specs, n, known, sizeof known);
            diag_fail(d, "tessel %s: error: option '%s %s': there is no %s '%s' (%ss: %s)", c->name, opt, a, role, bare, role, known);
            goto fail;
        }
        if (inputs[j]) {
            diag_fail(d, "tessel %s: error: option '%s %s': %s '%s' given twice", c->name, opt, a, role, bare);
            goto fail;
        }
        npy_array arr;
        if (npy_read(eq + 1, &arr, d)) goto fail;
        const host_spec *s = &specs[j];
        char got[160];
        if (!npy_has_shape(&arr, s->rank, s->dim, got, sizeof got)) {
            char want[128];
            fmt_dims(want, sizeof want, s->rank, s->dim);
            npy_free(&arr);
            diag_fail(d, "tessel %s: error: option '%s %s': %s has shape %s but %s '%s' is %s%s", c->name, opt, a, eq + 1,
                      got, role, bare, dtype_name(s->dtype), want);
            goto fail;
        }
        /* Expected outputs are compared in f32 whatever they hold. */
        host_entry how = is_input ? driver_host_entry(s, arr.dtype, arr.wide, arr.wide_exact) : HOST_AS_IS;
        const char *held = npy_held_name(&arr);
        if (how == HOST_DECLARED)
            fprintf(stderr, "tessel %s: note: input '%s': the model declares %s; rounded to the %s it is imported at (--precision)\n", c->name,
                    bare, dtype_name(s->declared), dtype_name(s->dtype));
        if (how == HOST_LOSSY && !cli_flag(c, p, "--convert")) {
            npy_free(&arr);
            diag_fail(d,
                      "tessel %s: error: option '--input %s': %s holds %s but input '%s' is %s, and the conversion can lose "
                      "information (give --convert to round it)",
                      c->name, a, eq + 1, held, bare, dtype_name(s->dtype));
            goto fail;
        }
        if (how == HOST_WIDENED || how == HOST_LOSSY)
            fprintf(stderr, "tessel %s: note: input '%s': %s %s to %s%s\n", c->name, bare,
                    how == HOST_LOSSY ? "converting" : arr.wide ? "narrowing" : "widening", held, dtype_name(s->dtype),
                    how == HOST_WIDENED && arr.wide ? " (every value fits)" : "");
        char shape[128];
        fmt_dims(shape, sizeof shape, s->rank, s->dim);
        inputs[j] = util_try_malloc((size_t)(arr.numel ? arr.numel : 1), sizeof(float), d, "tessel %s: error: %s '%s' (%s%s)",
                                    c->name, role, bare, dtype_name(s->dtype), shape);
        if (!inputs[j]) {
            npy_free(&arr);
            goto fail;
        }
        num_decode_buf(arr.dtype, 0, arr.data, inputs[j], (size_t)arr.numel);
        if (is_input) num_round_buf(s->dtype, s->scale, inputs[j], (size_t)arr.numel);
        source[j] = eq + 1;
        npy_free(&arr);
    }
    arena_free(&scratch);
    return 0;
fail:
    arena_free(&scratch);
    return -1;
}

int cli_load_expected(const cmd *c, const parsed *p, const host_spec *specs, int32_t n, float **expect, const char **source,
                      diag *d) {
    return load_named(c, p, "--expect", "output", specs, n, expect, source, d);
}

int cli_load_inputs(const cmd *c, const parsed *p, const host_spec *specs, int32_t n, float **inputs, const char **source,
                    diag *d) {
    if (load_named(c, p, "--input", "input", specs, n, inputs, source, d)) return -1;
    char who[64];
    snprintf(who, sizeof who, "tessel %s", c->name);
    return host_seed_missing(specs, n, inputs, who, d); /* source[j] stays NULL: seeded */
}

int cli_outputs_open(cli_outputs *o, const char *dir, const host_spec *specs, int32_t n, const char *trace, diag *d) {
    memset(o, 0, sizeof *o);
    if (dir && !dir[0]) return diag_fail(d, "tessel: error: option '--output-dir': the directory name is empty");
    if (dir && outset_mkdir(&o->set, dir, d)) return cli_outputs_abort(o), -1;
    o->n = dir ? n : 0;
    o->files = xcalloc((size_t)o->n + 1, sizeof(FILE *));
    o->paths = xcalloc((size_t)o->n + 1, sizeof(char *));
    for (int32_t j = 0; j < o->n; j++) {
        char *file = xmalloc(strlen(specs[j].name) + 5);
        sprintf(file, "%s.npy", specs[j].name);
        o->paths[j] = path_join(dir, file);
        free(file);
        if (!(o->files[j] = outset_open(&o->set, o->paths[j], d))) return cli_outputs_abort(o), -1;
    }
    if (trace) {
        o->trace_path = trace;
        if (!(o->trace = outset_open(&o->set, trace, d))) return cli_outputs_abort(o), -1;
    }
    return 0;
}

static void close_quietly(FILE **f) {
    if (*f) fclose(*f);
    *f = NULL;
}

void cli_outputs_abort(cli_outputs *o) {
    for (int32_t j = 0; j < o->n; j++) {
        close_quietly(&o->files[j]);
        free(o->paths[j]);
    }
    close_quietly(&o->trace);
    close_quietly(&o->html);
    outset_abort(&o->set);
    free(o->files);
    free(o->paths);
    memset(o, 0, sizeof *o);
}

int cli_outputs_open_html(cli_outputs *o, const char *path, diag *d) {
    if (!path) return 0;
    o->html_path = path;
    if ((o->html = outset_open(&o->set, path, d))) return 0;
    cli_outputs_abort(o);
    return -1;
}

int cli_outputs_commit(cli_outputs *o, const host_spec *specs, float *const *data, const sim_stats *st, const package *pkg,
                       const char *title, const report_html_input *html, diag *d) {
    int rc = 0;
    for (int32_t j = 0; j < o->n && rc == 0; j++) {
        /* Floats as f32 whatever they are computed in; indices as i32. */
        npy_array a = {.dtype = DT_F32, .rank = specs[j].rank, .numel = host_numel(&specs[j]), .data = data[j]};
        for (int r = 0; r < specs[j].rank; r++) a.dim[r] = specs[j].dim[r];
        int32_t *ints = NULL;
        if (specs[j].dtype == DT_I32) {
            if (!(ints = util_try_malloc((size_t)(a.numel ? a.numel : 1), sizeof(int32_t), d, "%s: error: output", o->paths[j]))) rc = -1;
            else num_encode_buf(DT_I32, 0, data[j], ints, (size_t)a.numel);
            a.dtype = DT_I32, a.data = ints;
        }
        if (rc == 0) rc = npy_write(o->files[j], &a);
        free(ints);
        FILE *f = o->files[j];
        o->files[j] = NULL;
        if (outset_close(&o->set, f, o->paths[j], d)) rc = -1;
        if (rc && !d->set) diag_fail(d, "%s: error: write failed", o->paths[j]);
    }
    if (rc == 0 && o->trace) {
        rc = report_trace_write(o->trace, st, pkg, title, d);
        FILE *f = o->trace;
        o->trace = NULL;
        if (outset_close(&o->set, f, o->trace_path, d)) rc = -1;
        if (rc && !d->set) diag_fail(d, "%s: error: write failed", o->trace_path);
    }
    if (rc == 0 && o->html) {
        rc = report_html_write(o->html, html, d);
        FILE *f = o->html;
        o->html = NULL;
        if (outset_close(&o->set, f, o->html_path, d)) rc = -1;
        if (rc && !d->set) diag_fail(d, "%s: error: write failed", o->html_path);
    }
    if (rc) {
        cli_outputs_abort(o);
        return -1;
    }
    rc = outset_commit(&o->set, d); /* all of them, or (on failure) none */
    for (int32_t j = 0; j < o->n; j++) free(o->paths[j]);
    free(o->files);
    free(o->paths);
    memset(o, 0, sizeof *o);
    return rc;
}

int cli_pkg_run_open(const char *path, cli_pkg_run *r, diag *d) {
    memset(r, 0, sizeof *r);
    if (package_load(path, &r->pkg, d)) return -1;
    const package *pkg = &r->pkg;
    driver_package_specs(pkg, &r->ins, &r->nin, &r->outs, &r->nout);
    r->inputs = xcalloc((size_t)r->nin + 1, sizeof(float *));
    r->outputs = xcalloc((size_t)r->nout + 1, sizeof(float *));
    r->source = xcalloc((size_t)r->nin + 1, sizeof(char *));
    return 0;
}

void cli_pkg_run_free(cli_pkg_run *r) {
    for (int32_t j = 0; j < r->nin; j++) free(r->inputs[j]);
    for (int32_t j = 0; j < r->nout; j++) free(r->outputs[j]);
    free(r->inputs);
    free(r->outputs);
    free(r->source);
    free(r->ins);
    free(r->outs);
    sim_stats_free(&r->st);
    package_free(&r->pkg);
    memset(r, 0, sizeof *r);
}

const char *cli_input_source(const host_spec *s, const char *source) {
    return source ? source : s->dtype == DT_I32 ? "seeded normal(0, 64), integers" : "seeded normal(0, 1)";
}

void cli_print_stats(const char *role, const host_spec *s, const float *x, const char *note) {
    int64_t n = host_numel(s), bad = 0;
    double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            bad++;
            continue;
        }
        sum += x[i];
        sq += (double)x[i] * x[i];
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    double cnt = (double)(n - bad), mean = cnt ? sum / cnt : 0, sd = cnt ? sqrt(fmax(0, sq / cnt - mean * mean)) : 0;
    char ty[160], sh[128];
    fmt_dims(sh, sizeof sh, s->rank, s->dim);
    snprintf(ty, sizeof ty, "%s%s", dtype_name(s->dtype), sh);
    printf("  %-6s %-14s %-20s mean %+.4g  std %.4g  min %+.4g  max %+.4g", role, s->name, ty, mean, sd, mn, mx);
    if (bad) printf("  (%lld non-finite)", (long long)bad);
    if (note) printf("  %s", note);
    printf("\n");
}
