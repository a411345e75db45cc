/* cmd_compile.c: compile a model, run a package, check one against the other. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../models/models.h"
#include "../report/report.h"
#include "cli.h"

static void print_compile_summary(const char *model, const machine *m, const compile_info *ci, uint64_t pkg_bytes,
                                  const char *path) {
    char used[32], have[32], size[32];
    fmt_bytes(used, sizeof used, ci->place.tile_bytes);
    fmt_bytes(have, sizeof have, machine_tile_bytes(m));
    fmt_bytes(size, sizeof size, (double)pkg_bytes);
    printf("compiled %s for %s in %.2f s\n", model, m->name, ci->seconds);
    printf("  program     %lld steps, %lld kernel runs, %lld exchange fragments (repeat bodies once)\n", (long long)ci->steps,
           (long long)ci->runs, (long long)ci->frags);
    char sup[32], tmax[32], tmed[32];
    fmt_bytes(sup, sizeof sup, ci->place.support_bytes);
    fmt_bytes(tmax, sizeof tmax, ci->place.table_bytes_max);
    fmt_bytes(tmed, sizeof tmed, ci->place.table_bytes_median);
    printf("  tile memory %s of %s on the fullest tile (%u), %d buffers reusing memory once dead; code and tables %s\n",
           used, have, ci->place.peak_tile, ci->place.buffers, sup);
    printf("  tables      %s on the busiest tile, median %s (budget %u KiB)\n", tmax, tmed, m->table_budget_bytes / 1024);
    if (path) printf("  package     %s, %s\n", path, size);
}

static int load_model(const char *spec, const cmd *c, const parsed *p, graph **g, machine *m, diag *d) {
    if (cli_machine(c, p, m, d)) return -1;
    *g = cli_load_model(c, p, spec, d);
    return *g ? 0 : -1;
}

/* --recipe, --search-steps and --beam, shared by compile and check. */
enum { DEFAULT_SEARCH_STEPS = 256 };

/* Option `name`'s value into *v when given: a whole number from 0 to max
 * (`what` names it in the message). */
static int count_option(const cmd *c, const parsed *p, const char *name, const char *what, long long max, long long *v,
                        diag *d) {
    const char *text = cli_opt(c, p, name);
    if (!text) return 0;
    char *end = NULL;
    long long n = strtoll(text, &end, 10);
    if (!*text || *end || n < 0 || n > max)
        return diag_fail(d, "tessel %s: error: option '%s': '%s' is not a %s from 0 to %lld", c->name, name, text, what, max);
    *v = n;
    return 0;
}

static int plan_options(const cmd *c, const parsed *p, const char *model, bool quiet, compile_options *o, diag *d) {
    long long steps = DEFAULT_SEARCH_STEPS, beam = SEARCH_BEAM;
    if (count_option(c, p, "--search-steps", "count", 1000000, &steps, d) ||
        count_option(c, p, "--beam", "width", SEARCH_BEAM_MAX, &beam, d))
        return -1;
    *o = (compile_options){.model = model, .recipe = cli_opt(c, p, "--recipe"), .search_steps = steps, .beam = (int)beam,
                           .quiet = quiet};
    return 0;
}

/* Writes text through the output set. */
static int write_text(outset *os, FILE *f, const char *path, const char *text, diag *d) {
    if (!f) return 0;
    if (fputs(text, f) < 0) return diag_fail(d, "%s: error: cannot write", path);
    return outset_close(os, f, path, d);
}

/* A few lines on stderr: what the search chose and how sure it is. */
static void print_search_summary(const compile_info *ci) {
    const search_result *sr = &ci->search;
    fprintf(stderr, "search: %lld beam plans, %lld proposals, %d kept, predicted %.0f cycles (compute %.0f, exchange %.0f); finalist %d of %d",
            (long long)sr->beam_evaluations, (long long)sr->proposals, (int)sr->steps.n, sr->est.cycles, sr->est.compute,
            sr->est.exchange, ci->finalist + 1, sr->nfinalists);
    if (ci->nfailed) fprintf(stderr, " (%d failed placement)", ci->nfailed);
    fprintf(stderr, "\n");
}

int cmd_compile(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    const char *out = cli_opt(c, &p, "-o"), *save = cli_opt(c, &p, "--save-recipe"), *report = cli_opt(c, &p, "--report");
    diag d = {0};
    if (!out) return diag_fail(&d, "tessel compile: error: option '-o PKG' is required"), cli_report(&d);
    graph *g = NULL;
    machine m;
    compile_options co;
    const char *after = cli_opt(c, &p, "--print-after");
    if (after && !tessel_pass_known(after))
        return diag_fail(&d, "tessel compile: error: option '--print-after=%s': no pass is called '%s' (fuse, expand)", after,
                         after),
               cli_report(&d);
    if (plan_options(c, &p, p.pos[0], cli_flag(c, &p, "--quiet"), &co, &d)) return cli_report(&d);
    if (load_model(p.pos[0], c, &p, &g, &m, &d)) return cli_report(&d);
    co.print_mid = cli_flag(c, &p, "--print-mid") ? stderr : NULL;
    co.print_after = after;
    co.print_to = stderr;
    co.no_fuse = cli_flag(c, &p, "--no-fuse");
    co.no_siblings = cli_flag(c, &p, "--no-siblings");
    co.fusion_report = report != NULL;
    /* Every output exists as a temporary from the start: an unwritable path
     * fails before the work, and an interrupted compile leaves nothing. */
    outset os = {0};
    FILE *f = outset_open(&os, out, &d), *fr = NULL, *fp = NULL;
    if (f && save && !(fr = outset_open(&os, save, &d))) f = NULL;
    if (f && report && !(fp = outset_open(&os, report, &d))) f = NULL;
    if (!f) {
        outset_abort(&os);
        graph_free(g);
        return cli_report(&d);
    }
    package pkg;
    compile_info ci;
    rc = tessel_compile(g, &m, &co, &pkg, &ci, &d);
    if (rc == 0) {
        rc = package_write(&pkg, f, out, &d);
        package_free(&pkg);
    }
    if (outset_close(&os, f, out, &d)) rc = -1;
    if (rc == 0) rc = write_text(&os, fr, save, ci.recipe, &d);
    if (rc == 0 && fp) {
        char *text = tessel_compile_report(g, &m, &ci);
        rc = write_text(&os, fp, report, text, &d);
        free(text);
        tessel_fusion_summary(stderr, tessel_model_graph(g, &ci), &ci.fusions, ci.fusion_saved, ci.fusion_saved_names);
    }
    if (rc == 0) rc = outset_commit(&os, &d);
    else outset_abort(&os);
    if (rc == 0) {
        /* The file's size, without serialising the package a second time. */
        struct stat sb;
        print_search_summary(&ci);
        print_compile_summary(p.pos[0], &m, &ci, stat(out, &sb) == 0 ? (uint64_t)sb.st_size : 0, out);
    }
    compile_info_free(&ci);
    graph_free(g);
    return rc ? cli_report(&d) : 0;
}

static host_spec binding_spec(const pkg_binding *b) {
    host_spec s = {.name = b->name, .dtype = b->dtype, .scale = b->scale, .rank = b->layout.rank};
    for (int a = 0; a < b->layout.rank; a++) s.dim[a] = b->layout.dim[a];
    return s;
}

static json_t *sim_json(const sim_stats *st, const machine *m) {
    json_t *j = json_pack("{s:I, s:f, s:I, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:f, s:f}", "cycles", (json_int_t)st->cycles,
                     "seconds_at_clock", (double)st->cycles / m->clock_hz, "compute_cycles", (json_int_t)st->compute_cycles,
                     "exchange_cycles", (json_int_t)st->exchange_cycles, "sync_cycles", (json_int_t)st->sync_cycles,
                     "tiles_used", st->tiles_used, "peak_tile_bytes", (int)st->peak_tile_bytes, "exchange_bytes",
                     (json_int_t)st->exchange_bytes, "runs", (json_int_t)st->runs, "macs", (json_int_t)st->macs,
                     "host_seconds", st->host_seconds, "kernel_seconds", st->kernel_seconds);
    json_object_set_new(j, "roofline_cycles", json_real(st->roofline_cycles));
    json_object_set_new(j, "exchange_phases", json_integer((json_int_t)st->phases));
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

static void print_sim_summary(const sim_stats *st, const machine *m) {
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
    printf("  tiles       %d of %u used, peak %s per tile, %s exchanged\n", st->tiles_used, m->tiles, used, xb);
    printf("  host        %.2f s simulating (%.2f s in kernels)\n", st->host_seconds, st->kernel_seconds);
}

int cmd_run(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    package pkg;
    if (package_load(p.pos[0], &pkg, &d)) return cli_report(&d);
    int32_t nin = 0, nout = 0;
    host_spec *ins = xcalloc((size_t)pkg.bindings.n + 1, sizeof(host_spec)), *outs = xcalloc((size_t)pkg.bindings.n + 1, sizeof(host_spec));
    for (int32_t i = 0; i < pkg.bindings.n; i++) {
        if (pkg.bindings.v[i].role == PKG_OUTPUT) outs[nout++] = binding_spec(&pkg.bindings.v[i]);
        else if (pkg.bindings.v[i].role == PKG_INPUT) ins[nin++] = binding_spec(&pkg.bindings.v[i]);
    }
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    bool json = cli_flag(c, &p, "--json");
    const char *trace = cli_opt(c, &p, "--trace"), *dir = cli_opt(c, &p, "--output-dir");
    sim_options so = {.trace = trace != NULL, .quiet = json};
    sim_stats st = {0};
    cli_outputs files = {0};
    rc = cli_max_host_memory(c, &p, &so.max_host_bytes, &d);
    if (rc == 0) rc = sim_host_check(&pkg.machine, so.max_host_bytes, "--max-host-memory", &d);
    if (rc == 0) rc = cli_outputs_open(&files, dir, outs, nout, trace, &d);
    if (rc == 0) rc = cli_load_inputs(c, &p, ins, nin, inputs, source, &d);
    if (rc == 0) rc = sim_run(&pkg, &so, inputs, outputs, &st, &d);
    if (rc == 0) rc = cli_outputs_commit(&files, outs, outputs, &st, pkg.machine.clock_hz, p.pos[0], &d);
    else cli_outputs_abort(&files);
    if (rc == 0 && json) {
        json_t *j = sim_json(&st, &pkg.machine);
        json_object_set_new(j, "package", json_string(p.pos[0]));
        json_object_set_new(j, "machine", json_string(pkg.machine.name));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(s);
        free(s);
        json_decref(j);
    } else if (rc == 0) {
        printf("ran %s on %s\n", p.pos[0], pkg.machine.name);
        print_sim_summary(&st, &pkg.machine);
        for (int32_t j = 0; j < nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", source[j] ? source[j] : "seeded normal(0, 1)");
            cli_print_stats("input", &ins[j], inputs[j], note);
        }
        for (int32_t j = 0; j < nout; j++) cli_print_stats("output", &outs[j], outputs[j], NULL);
    }
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    for (int32_t j = 0; j < nout; j++) free(outputs[j]);
    free(inputs);
    free(outputs);
    free(source);
    free(ins);
    free(outs);
    sim_stats_free(&st);
    package_free(&pkg);
    return rc ? cli_report(&d) : 0;
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

static json_t *check_json(const graph *g, const char *model, const machine *m, const compile_info *ci, const check_result *r) {
    json_t *j = sim_json(&r->sim, m);
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
    if (r->located) json_object_set_new(j, "located", locate_json(g, &r->loc));
    return j;
}

static void print_check(const graph *g, const check_result *r, const char *const *expect_src) {
    for (int32_t i = 0; i < r->n; i++) {
        const check_output *o = &r->out[i];
        char exact[200];
        if (o->exact.count == 0) snprintf(exact, sizeof exact, "bit-exact");
        else
            snprintf(exact, sizeof exact, "%lld elements differ, first [%lld]: got %.9g, want %.9g",
                     (long long)o->exact.count, (long long)o->exact.first, o->exact.got, o->exact.want);
        printf("  output %-12s vs pure FP32: cosine %.6f (>= %.3f), max abs err %.4g | vs plan-exact reference: %s  %s\n",
               o->name, o->pure.cosine, o->min_cosine, o->pure.max_abs_err, exact, o->pass ? "ok" : "FAIL");
        if (o->has_expect)
            printf("  output %-12s vs expected %s: cosine %.6f (>= %.3f), max abs err %.4g\n", o->name, expect_src[i],
                   o->expect.cosine, o->min_cosine, o->expect.max_abs_err);
    }
    if (r->located) tessel_locate_print(stdout, g, &r->loc);
    printf("%s\n", r->pass ? "PASS" : "FAIL");
}

/* NaN or infinity in what the user gave: inputs, and parameters read from
 * .npy files (seeded ones cannot hold any); a note on stderr each, and the
 * same as JSON entries. */
static void scan_nonfinite(const char *kind, const char *name, const float *x, int64_t n, json_t *out) {
    int64_t count = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) && count++ == 0) first = i;
    if (!count) return;
    fprintf(stderr, "tessel check: note: %s '%s' holds %lld non-finite values (the first at element %lld)\n", kind, name,
            (long long)count, (long long)first);
    json_array_append_new(out, json_pack("{s:s, s:s, s:I, s:I}", "name", name, "kind", kind, "count", (json_int_t)count,
                                         "first", (json_int_t)first));
}

static json_t *nonfinite_report(const graph *g, const host_spec *specs, int32_t nin, float *const *inputs) {
    json_t *out = json_array();
    for (int32_t j = 0; j < nin; j++) scan_nonfinite("input", specs[j].name, inputs[j], host_numel(&specs[j]), out);
    for (int32_t op = 0; op < g->ops.n; op++) {
        const graph_op *o = graph_opr(g, op);
        if (o->kind != OP_PARAM || o->init.kind != INIT_NPY) continue;
        const graph_value *v = graph_val(g, o->out[0]);
        int64_t n = graph_type_numel(&v->type);
        float *vals = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
        diag d = {0};
        if (graph_param_values(g, op, true, vals, &d) == 0) scan_nonfinite("parameter", v->name, vals, n, out);
        free(vals);
    }
    return out;
}

/* The package to check: PKG as given, or MODEL compiled and sent through
 * the file format and its reader (what runs is what a file holds). A
 * machine too large to simulate here is refused before any work. */
/* One line on the fused optimizer steps and what the package stores. */
static void print_epilogue(const graph *g, const fuse_plan *fp, const epilogue_proof *proofs) {
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

static int check_package(const cmd *c, const parsed *p, const graph *g, machine *m, uint64_t host_limit, package *pkg,
                         compile_info *ci, bool *compiled, diag *d) {
    const char *given = cli_opt(c, p, "--package");
    *compiled = !given;
    if (given) {
        if (cli_opt(c, p, "--machine"))
            return diag_fail(d, "tessel check: error: option '--machine': a package carries its machine (--package %s)", given);
        if (package_load(given, pkg, d)) return -1;
        *m = pkg->machine;
        if (sim_host_check(m, host_limit, "--max-host-memory", d) == 0 && tessel_package_matches(g, pkg, given, d) == 0) return 0;
        package_free(pkg);
        return -1;
    }
    if (cli_machine(c, p, m, d) || sim_host_check(m, host_limit, "--max-host-memory", d)) return -1;
    package built;
    compile_options co;
    if (plan_options(c, p, p->pos[0], true, &co, d)) return -1;
    co.no_fuse = cli_flag(c, p, "--no-fuse");
    co.no_siblings = cli_flag(c, p, "--no-siblings");
    if (tessel_compile(g, m, &co, &built, ci, d)) return -1;
    size_t n;
    uint8_t *img = package_image(&built, &n);
    package_free(&built);
    int rc = package_parse(img, n, p->pos[0], pkg, d);
    free(img);
    return rc;
}

int cmd_check(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    graph *g = cli_load_model(c, &p, p.pos[0], &d);
    if (!g) return cli_report(&d);
    bool json = cli_flag(c, &p, "--json"), compiled = false;
    const char *trace = cli_opt(c, &p, "--trace");
    int32_t nin;
    host_spec *specs = cli_graph_specs(g, false, &nin);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    machine m;
    package pkg;
    compile_info ci = {0};
    check_result r = {0};
    int32_t nout;
    host_spec *out_specs = cli_graph_specs(g, true, &nout);
    float **expect = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **expect_src = xcalloc((size_t)nout + 1, sizeof(char *));
    rc = cli_load_inputs(c, &p, specs, nin, inputs, source, &d);
    if (rc == 0) rc = cli_load_expected(c, &p, out_specs, nout, expect, expect_src, &d);
    json_t *nonfinite = rc == 0 ? nonfinite_report(g, specs, nin, inputs) : json_array();
    cli_outputs files = {0};
    uint64_t host_limit = 0;
    if (rc == 0) rc = cli_max_host_memory(c, &p, &host_limit, &d);
    if (rc == 0) rc = cli_outputs_open(&files, NULL, NULL, 0, trace, &d);
    if (rc == 0) rc = check_package(c, &p, g, &m, host_limit, &pkg, &ci, &compiled, &d);
    bool have_pkg = rc == 0; /* until the trace is written: its events name the package's strings */
    fuse_plan given_fp = {0};
    const fuse_plan *fp = &ci.fusions;
    const graph *gf = tessel_model_graph(g, &ci); /* the graph fp names */
    epilogue_proof *proofs = NULL;
    package_peak peak = {0};
    bool proof_fail = false;
    if (rc == 0 && !compiled) { /* a given package: what it shows, not what we would do */
        graph_fuse_analyze(g, false, &given_fp);
        fp = &given_fp;
    }
    if (rc == 0) {
        /* Fused or not, what the package really stores (docs/epilogue.md, "The proof"). */
        proofs = xcalloc((size_t)fp->n + 1, sizeof(epilogue_proof));
        rc = tessel_fusion_proofs(gf, fp, &pkg, proofs, &d);
        /* A given package: a legal step is fused when the package stores no gradient for it. */
        for (int32_t k = 0; rc == 0 && k < given_fp.n; k++)
            if (given_fp.c[k].rule == FUSE_DISABLED && !proofs[k].materialized)
                given_fp.c[k].rule = FUSE_OK, given_fp.c[k].fused = true;
        for (int32_t k = 0; rc == 0 && k < fp->n; k++) proof_fail |= fp->c[k].fused && proofs[k].materialized;
        if (rc == 0) rc = package_live_peak(&pkg, &peak, &d);
    }
    if (rc == 0) {
        const char *given = cli_opt(c, &p, "--package");
        check_options co = {.package = given ? given : p.pos[0],
                            .inputs = inputs,
                            .expect = expect,
                            .sim = {.trace = trace != NULL, .quiet = json, .max_host_bytes = host_limit},
                            .locate = cli_flag(c, &p, "--locate")};
        rc = tessel_check(g, &pkg, &co, &r, &d);
    }
    if (rc == 0) rc = cli_outputs_commit(&files, NULL, NULL, &r.sim, m.clock_hz, p.pos[0], &d);
    else cli_outputs_abort(&files);
    if (have_pkg) package_free(&pkg);
    if (rc == 0 && proof_fail) r.pass = false;
    if (rc == 0 && json) {
        json_t *j = check_json(g, p.pos[0], &m, compiled ? &ci : NULL, &r);
        json_object_set_new(j, "fusions", tessel_fusion_json(gf, fp, NULL, NULL, proofs));
        json_object_set_new(j, "peak_live_bytes", json_integer((json_int_t)peak.bytes));
        json_object_set(j, "nonfinite_inputs", nonfinite);
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(s);
        free(s);
        json_decref(j);
    } else if (rc == 0) {
        if (compiled) print_compile_summary(p.pos[0], &m, &ci, 0, NULL);
        else printf("checking %s against %s on %s\n", cli_opt(c, &p, "--package"), p.pos[0], m.name);
        print_sim_summary(&r.sim, &m);
        for (int32_t j = 0; j < nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", source[j] ? source[j] : "seeded normal(0, 1)");
            cli_print_stats("input", &specs[j], inputs[j], note);
        }
        print_epilogue(gf, fp, proofs);
        print_check(g, &r, expect_src);
    }
    bool pass = r.pass;
    free(proofs);
    graph_fuse_free(&given_fp);
    json_decref(nonfinite);
    for (int32_t j = 0; j < nout; j++) free(expect[j]);
    free(expect);
    free(expect_src);
    free(out_specs);
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    free(inputs);
    free(source);
    free(specs);
    check_result_free(&r);
    compile_info_free(&ci);
    graph_free(g);
    if (rc) return cli_report(&d);
    return pass ? 0 : EXIT_CHECK_FAILED;
}
