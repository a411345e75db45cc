/* train.c: the commands for a training step over data-parallel replicas,
 * one per chip (docs/chips.md, "Training across replicas"): compile writes
 * a package of the replica's program and every owner's, run and check run
 * the step (every replica, then every owner) and time it. */
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../report/report.h"
#include "cli.h"

static void print_timing(FILE *f, const char *what, const machine *m, const train_timing *t, int64_t batch) {
    char b1[32], b2[32];
    char mb[96] = "";
    if (t->micro > 1) snprintf(mb, sizeof mb, " in %lld micro-batches of %lld, accumulated", (long long)t->micro,
                               (long long)(batch / t->n / t->micro));
    fprintf(f, "  %s: replicas %llu cycles (each on %lld samples%s), then their gradients' rows to the owners: %s over the "
               "busiest link, %llu cycles\n",
            what, (unsigned long long)t->replica, (long long)(batch / t->n), mb,
            (fmt_bytes(b1, sizeof b1, (double)t->scatter_bytes), b1), (unsigned long long)t->scatter);
    fprintf(f, "  owners %llu cycles (the slowest of", (unsigned long long)t->owner_max);
    for (int32_t o = 0; o < t->n; o++) fprintf(f, "%s %llu", o ? "," : "", (unsigned long long)t->owner[o]);
    fprintf(f, "), then the new rows to every chip: %s over the busiest link, %llu cycles\n",
            (fmt_bytes(b2, sizeof b2, (double)t->gather_bytes), b2), (unsigned long long)t->gather);
    fprintf(f, "  the step: %llu cycles (%.3f ms), %.1f samples/s over %d chips\n", (unsigned long long)t->cycles,
            (double)t->cycles / m->clock_hz * 1e3, t->cycles ? (double)batch * m->clock_hz / (double)t->cycles : 0.0,
            (int)t->n);
}

static json_t *timing_json(const train_timing *t, const machine *m, int64_t batch) {
    json_t *owners = json_array();
    for (int32_t o = 0; o < t->n; o++) json_array_append_new(owners, json_integer((json_int_t)t->owner[o]));
    return json_pack("{s:I, s:i, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "batch", (json_int_t)batch,
                     "replicas", (int)t->n, "micro_batches", (json_int_t)t->micro, "replica_cycles", (json_int_t)t->replica, "owner_cycles", owners,
                     "scatter_bytes_busiest_link", (json_int_t)t->scatter_bytes, "scatter_bytes", (json_int_t)t->scatter_total,
                     "scatter_cycles", (json_int_t)t->scatter, "gather_bytes_busiest_link", (json_int_t)t->gather_bytes,
                     "gather_bytes", (json_int_t)t->gather_total, "gather_cycles", (json_int_t)t->gather, "cycles",
                     (json_int_t)t->cycles, "samples_per_second",
                     t->cycles ? (double)batch * m->clock_hz / (double)t->cycles : 0.0);
}

/* "updates w1 rows 64..127, b1 rows 256..511; sums loss": what owner o does. */
static void owner_words(const graph_replicas *r, int32_t o, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "updates");
    for (int32_t k = 0, n = 0; k < r->nfeed[o] && at < cap; k++) {
        const graph_feed *f = &r->feed[o][k];
        if (!f->updates) continue;
        if (f->rows < 0) at += (size_t)snprintf(buf + at, cap - at, "%s %s", n++ ? "," : "", f->updates);
        else at += (size_t)snprintf(buf + at, cap - at, "%s %s rows %lld..%lld", n++ ? "," : "", f->updates,
                                    (long long)f->first, (long long)(f->first + f->rows - 1));
    }
    for (int32_t k = 0, n = 0; k < r->nfeed[o] && at < cap; k++) {
        const char *in = r->feed[o][k].input, *dot = strrchr(in, '.'); /* "<v>.partials" */
        if (!r->feed[o][k].updates)
            at += (size_t)snprintf(buf + at, cap - at, "%s %.*s", n++ ? "," : "; sums the replicas'",
                                   (int)(dot ? dot - in : (ptrdiff_t)strlen(in)), in);
    }
}

/* Its optimizer steps fused into the sum's epilogue or not (and why not),
 * and what the fused ones save: the gradient rows the unfused plan would
 * store, per tile. */
static void owner_fusion(const graph *g, const compile_info *ci, char *buf, size_t cap) {
    const fuse_plan *fp = &ci->fusions;
    const graph *gm = driver_model_graph(g, ci);
    int32_t fused = (int32_t)graph_fuse_fused(fp);
    int64_t saved = 0, most = 0;
    for (int32_t k = 0; ci->fusion_saved && k < fp->n; k++)
        if (fp->c[k].fused) saved += ci->fusion_saved[k], most = ci->fusion_saved[k] > most ? ci->fusion_saved[k] : most;
    char b1[32], b2[32];
    fmt_bytes(b1, sizeof b1, (double)saved);
    fmt_bytes(b2, sizeof b2, (double)most);
    size_t at = (size_t)snprintf(buf, cap, "%d of %d updates fused into the sum's epilogue", (int)fused, (int)fp->n);
    if (fused) at += (size_t)snprintf(buf + at, cap - at, " (no gradient stored: up to %s per tile saved, %s the largest)", b1, b2);
    for (int32_t k = 0; k < fp->n && at < cap; k++)
        if (!fp->c[k].fused)
            at += (size_t)snprintf(buf + at, cap - at, "%s %s [%s]", k ? ";" : ":", graph_op_name(gm, fp->c[k].consumer),
                                   fuse_rule_names[fp->c[k].rule]);
}

int cli_compile_train(const char *model, const graph *g, const machine *m, const compile_options *co, const char *out,
                      const char *save, const char *report, diag *d) {
    outset os;
    FILE *f, *fr, *fp;
    if (cli_compile_outputs(&os, out, save, report, &f, &fr, &fp, d)) return -1;
    train_compiled tc;
    int rc = driver_compile_train(g, m, co, &tc, d);
    int32_t n = (int32_t)m->chips;
    if (rc == 0) rc = pkg_chips_write(m, tc.manifest, tc.pkg, n + 1, n, PKG_CHIPS_TRAIN, f, out, d);
    if (outset_close(&os, f, out, d)) rc = -1;
    if (rc == 0 && fr && (fputs(tc.recipe, fr) < 0 || outset_close(&os, fr, save, d))) rc = -1;
    if (rc == 0 && fp) {
        json_t *progs = json_array();
        for (int32_t p = 0; p <= n; p++) {
            char *text = report_compile_json(p ? tc.split.owner[p - 1] : tc.split.replica, &tc.one, &tc.info[p]);
            json_array_append_new(progs, json_loads(text, 0, NULL));
            free(text);
        }
        rc = cli_compile_report(&os, fp, report,
                                json_pack("{s:s, s:s, s:s, s:i, s:s, s:o, s:o}", "format", "tessel-chips-report", "model",
                                          model, "machine", m->name, "chips", (int)m->chips, "plan",
                                          "data-parallel training", "predicted",
                                          timing_json(&tc.predicted, m, tc.split.batch), "programs", progs),
                                d);
    }
    if (rc == 0) rc = outset_commit(&os, d);
    else outset_abort(&os);
    if (rc == 0) {
        progress_done();
        printf("compiled %s for %s: a training step over %d data-parallel replicas, one per chip, %lld of the batch's %lld "
               "samples each, in %.1f s\n",
               model, m->name, (int)n, (long long)(tc.split.batch / n), (long long)tc.split.batch, tc.seconds);
        for (int32_t p = 0; p <= n; p++) {
            const compile_info *ci = &tc.info[p];
            char what[1024] = "the step to its gradients", fus[1024] = "";
            if (p) owner_words(&tc.split, p - 1, what, sizeof what), owner_fusion(tc.split.owner[p - 1], ci, fus, sizeof fus);
            char who[32] = "replica";
            if (p) snprintf(who, sizeof who, "owner %d", (int)p - 1);
            printf("  %s: %s; %lld steps, peak tile %.1f KiB of %.1f%s%s\n", who, what, (long long)ci->steps, ci->place.tile_bytes / 1024.0, machine_tile_bytes(&tc.one) / 1024.0,
                   *fus ? "; " : "", fus);
        }
        print_timing(stdout, "predicted", m, &tc.predicted, tc.split.batch);
        printf("  package %s\n", out);
    }
    if (rc == 0 || tc.pkg) train_compiled_free(&tc);
    return rc;
}

/* ---- running ------------------------------------------------------------- */

typedef struct sim_ctx {
    const pkg_chips *pc;
    sim_options so;
} sim_ctx;

static int run_sim(void *ctx, int32_t p, int32_t who, float *const *in, float **out, uint64_t *cycles, diag *d) {
    (void)who;
    sim_ctx *x = ctx;
    sim_stats st = {0};
    int rc = sim_run(&x->pc->pkg[p], &x->so, in, out, &st, d);
    if (rc == 0 && st.cycles > *cycles) *cycles = st.cycles;
    sim_stats_free(&st);
    return rc;
}

/* The model's inputs and outputs as the host sees them: the replica's
 * inputs over the whole batch, the outputs the manifest names. */
static int model_specs(const pkg_chips *pc, const train_shape *s, const char *path, host_spec **ins, int32_t *nin,
                       host_spec **outs, int32_t *nout, diag *d) { /* outs NULL: the inputs only */
    *nin = 0;
    *ins = xcalloc((size_t)s->nin[0] + 1, sizeof(host_spec));
    for (int32_t k = 0; k < s->nin[0]; k++)
        if (!driver_train_carried(s->in[0][k].name))
            (*ins)[*nin] = s->in[0][k], (*ins)[(*nin)++].dim[0] *= s->n * (s->micro > 1 ? s->micro : 1);
    if (!outs) return 0;
    json_t *man = json_loads(pc->manifest, 0, NULL), *names = json_object_get(man, "outputs");
    *nout = json_is_array(names) ? (int32_t)json_array_size(names) : 0;
    *outs = xcalloc((size_t)*nout + 1, sizeof(host_spec));
    int rc = *nout > 0 ? 0 : diag_fail(d, "%s: error: the manifest names no outputs", path);
    for (int32_t j = 0; j < *nout && rc == 0; j++) {
        const char *name = json_string_value(json_array_get(names, (size_t)j));
        /* the spec's name points into a package, which outlives it */
        if (!name || driver_train_output_spec(s, name, &(*outs)[j]))
            rc = diag_fail(d, "%s: error: no program makes the output '%s'", path, name ? name : "?");
    }
    json_decref(man);
    return rc;
}

/* tessel run of a training package: in one process, or under mpirun with
 * each rank running its chips' replicas and owners (driver_train_step_ranks:
 * it parses program 0 and its owners' programs; the last rank, which puts
 * the outputs together, every owner's). */
int cli_run_train(const cmd *c, const parsed *p, const char *path, int32_t programs, diag *d) {
    const chips_transport *tp = cli_transport;
    int rank = tp ? tp->rank : 0, ranks = tp ? tp->ranks : 1;
    int32_t n = programs - 1;
    if (ranks > n)
        return rank == 0 ? diag_fail(d, "tessel run: error: %d MPI ranks for %d chips: run with at most %d (mpirun -np %d)",
                                     ranks, (int)n, (int)n, (int)n)
                         : (*d = (diag){.set = true}, -1);
    if (cli_opt(c, p, "--trace"))
        return rank == 0 ? diag_fail(d, "tessel run: error: option '--trace': a package for several chips has no trace yet")
                         : (*d = (diag){.set = true}, -1);
    bool last = rank == ranks - 1, *want = xcalloc((size_t)programs + 1, sizeof(bool));
    int32_t first = driver_chips_first(n, rank, ranks), end = driver_chips_first(n, rank + 1, ranks);
    want[0] = true;
    for (int32_t o = 0; o < n; o++) want[1 + o] = last || (o >= first && o < end);
    pkg_chips pc;
    int rc = pkg_chips_load(path, want, &pc, d);
    free(want);
    if (rc) return -1;
    graph_feed **feed;
    int32_t *nfeed;
    int64_t *gather;
    if (driver_train_feeds(pc.manifest, n, &feed, &nfeed, &gather, path, d)) return pkg_chips_free(&pc), -1;
    train_shape s;
    driver_train_shape_of_packages(pc.pkg, n, pc.micro_batches, feed, nfeed, gather, true, &s);
    host_spec *ins = NULL, *outs = NULL;
    int32_t nin = 0, nout = 0;
    bool json = cli_flag(c, p, "--json");
    if (last) rc = model_specs(&pc, &s, path, &ins, &nin, &outs, &nout, d);
    else model_specs(&pc, &s, path, &ins, &nin, NULL, NULL, d); /* the inputs only */
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    uint64_t cycles[CHIPS_MAX + 1] = {0};
    sim_ctx x = {&pc, {.quiet = true}};
    cli_outputs files = {0};
    if (rc == 0) rc = cli_max_host_memory(c, p, &x.so.max_host_bytes, d);
    if (rc == 0 && last) rc = cli_outputs_open(&files, cli_opt(c, p, "--output-dir"), outs, nout, NULL, d);
    if (rc == 0) rc = cli_load_inputs(c, p, ins, nin, inputs, source, d);
    if (rc == 0 && last) progress_stage("run", "every replica, then every owner");
    if (tp) /* a rank that failed already takes part, saying why, so no other waits for it */
        rc = driver_train_step_ranks(&s, tp, rc ? d : NULL, ins, nin, inputs, outs, nout, outputs, run_sim, &x, cycles,
                                     rc ? &(diag){0} : d) || rc ? -1 : 0;
    else if (rc == 0)
        rc = driver_train_step(&s, ins, nin, inputs, outs, nout, outputs, run_sim, &x, cycles, d);
    if (rc && tp && !last) *d = (diag){.set = true}; /* the last rank says why */
    sim_stats none = {0};
    if (rc == 0 && last) rc = cli_outputs_commit(&files, outs, outputs, &none, &pc.pkg[0], path, NULL, d);
    else cli_outputs_abort(&files);
    train_timing t;
    if (rc == 0 && last) driver_train_timing(&pc.machine, &s, cycles, &t);
    if (rc || !last) {
    } else if (json) {
        json_t *j = timing_json(&t, &pc.machine, pc.batch);
        json_object_set_new(j, "package", json_string(path));
        json_object_set_new(j, "machine", json_string(pc.machine.name));
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(text);
        free(text);
        json_decref(j);
    } else if (rc == 0) {
        progress_done();
        printf("ran %s on %s: a training step over %d data-parallel replicas, one per chip\n", path, pc.machine.name, (int)n);
        print_timing(stdout, "simulated", &pc.machine, &t, pc.batch);
        for (int32_t j = 0; j < nout; j++) cli_print_stats("output", &outs[j], outputs[j], NULL);
    }
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    for (int32_t j = 0; j < nout; j++) free(outputs[j]);
    free(inputs), free(outputs), free(source), free(ins), free(outs);
    train_shape_free(&s);
    pkg_chips_free(&pc);
    return rc;
}

/* ---- checking ------------------------------------------------------------ */

typedef struct check_ctx {
    const graph_replicas *split;
    const compile_info *info; /* per program when compiled here, else NULL */
    package *pk;            /* per program, read back from its file image */
    const char *title;
    bool quiet;
    check_result *r;        /* per program: over every replica (program 0) */
    int32_t *fused, *stored; /* per owner: updates fused, and of those whose gradient the package stores */
} check_ctx;

static int run_check(void *ctx, int32_t p, int32_t who, float *const *in, float **out, uint64_t *cycles, diag *d) {
    check_ctx *x = ctx;
    char name[1024];
    snprintf(name, sizeof name, "%s (%s %d)", x->title, p ? "owner" : "replica", (int)who);
    check_options o = {.package = name, .inputs = in, .sim = {.quiet = x->quiet}, .outputs = out};
    check_result one;
    const graph *g = p ? x->split->owner[p - 1] : x->split->replica;
    int rc = driver_check(g, &x->pk[p], &o, &one, d);
    if (rc) return rc;
    if (p) { /* the proof that a fused update's gradient is nowhere stored */
        check_proofs pv = {0};
        rc = driver_check_proofs(g, x->info ? &x->info[p] : NULL, &x->pk[p], &pv, d);
        for (int32_t k = 0; rc == 0 && k < pv.fp->n; k++)
            x->fused[p - 1] += pv.fp->c[k].fused, x->stored[p - 1] += pv.fp->c[k].fused && pv.proofs[k].materialized;
        if (rc == 0 && pv.fail) one.pass = false;
        check_proofs_free(&pv);
        if (rc) return check_result_free(&one), rc;
    }
    check_result *r = &x->r[p];
    if (one.sim.cycles > *cycles) *cycles = one.sim.cycles;
    r->pass &= one.pass, r->differing += one.differing, r->fp8 |= one.fp8;
    if (!(one.cosine >= r->cosine)) r->cosine = one.cosine;
    check_result_free(&one);
    return 0;
}

/* What a check of the whole step found. */
typedef struct train_verdict {
    bool ok, fp8;
    double cosine, max_abs;  /* the outputs against the whole step in FP32 */
    int64_t differing;       /* from the programs' plan-exact references */
} train_verdict;

/* The check as --json prints it (and the HTML report draws). */
static json_t *train_check_json(const parsed *p, const machine *m, const graph_replicas *split, const check_ctx *x,
                                const train_timing *t, const train_verdict *v) {
    json_t *progs = json_array();
    for (int32_t k = 0; k <= split->n; k++) {
        char what[1024] = "every replica on its samples";
        if (k) owner_words(split, k - 1, what, sizeof what);
        json_array_append_new(progs, json_pack("{s:i, s:s, s:s, s:I, s:b, s:f, s:i, s:i}", "program", (int)k, "role",
                                               k ? "owner" : "replica", "what", what, "differing",
                                               (json_int_t)x->r[k].differing, "pass", x->r[k].pass, "cosine_program_fp32",
                                               x->r[k].cosine, "fused", k ? (int)x->fused[k - 1] : 0,
                                               "fused_gradients_stored", k ? (int)x->stored[k - 1] : 0));
    }
    return json_pack("{s:s, s:s, s:i, s:s, s:o, s:o, s:I, s:f, s:f, s:b}", "model", p->pos[0], "machine", m->name, "chips",
                     (int)split->n, "plan", "data-parallel training", "programs", progs, "simulated",
                     timing_json(t, m, split->batch), "differing", (json_int_t)v->differing, "cosine", v->cosine,
                     "max_abs_err", v->max_abs, "pass", v->ok);
}

static void print_train_check(const parsed *p, const char *given, const machine *m, const graph_replicas *split,
                              const check_ctx *x, const train_timing *t, const train_verdict *v) {
    int32_t n = split->n;
    if (given) printf("checked %s against %s on %s: a training step over %d data-parallel replicas\n", given, p->pos[0],
                      m->name, (int)n);
    else printf("checked %s on %s: a training step over %d data-parallel replicas, one per chip\n", p->pos[0], m->name,
                (int)n);
    for (int32_t k = 0; k <= n; k++) {
        char what[1024] = "every replica on its samples";
        if (k) owner_words(split, k - 1, what, sizeof what);
        if (k && x->fused[k - 1]) {
            size_t at = strlen(what);
            snprintf(what + at, sizeof what - at, "; %d update%s fused: %s", (int)x->fused[k - 1],
                     x->fused[k - 1] > 1 ? "s" : "", x->stored[k - 1] ? "FAIL, a fused gradient is stored"
                                                                       : "no gradient stored (proof from the package)");
        }
        char who[32] = "replica";
        if (k) snprintf(who, sizeof who, "owner %d", (int)k - 1);
        printf("  %s: %s; %s (%lld differing from the plan-exact reference), cosine %.6f against it in FP32\n", who, what,
               x->r[k].differing ? "NOT bit-exact" : "bit-exact", (long long)x->r[k].differing, x->r[k].cosine);
    }
    print_timing(stdout, "simulated", m, t, split->batch);
    printf("  outputs against the whole step in FP32: cosine %.6f, max |err| %.4g (needs %.3f)\n", v->cosine, v->max_abs,
           v->fp8 ? 0.99 : 0.999);
    printf("%s\n", v->ok ? "PASS" : "FAIL");
}

int cli_check_train(const cmd *c, const parsed *p, const graph *g, bool *pass, FILE *html, diag *d) {
    bool json = cli_flag(c, p, "--json"), quiet = json || cli_flag(c, p, "--quiet");
    const char *given = cli_opt(c, p, "--package");
    machine m;
    train_compiled tc = {0};
    pkg_chips pc = {0};
    const package *pkgs = NULL;
    const machine *mm = &m;
    int rc = 0;
    if (given) { /* the model split as the package was, each program matched against its package */
        if (cli_opt(c, p, "--machine"))
            return diag_fail(d, "tessel check: error: option '--machine': a package carries its machine (--package %s)", given);
        if (pkg_chips_load(given, NULL, &pc, d)) return -1;
        mm = &pc.machine;
        pkgs = pc.pkg;
        if (pc.kind != PKG_CHIPS_TRAIN)
            rc = diag_fail(d, "%s: error: a package of a pipeline; %s is a training step", given, p->pos[0]);
        if (rc == 0) rc = graph_split_replicas(g, pc.replicas, pc.micro_batches, &tc.split, d);
        for (int32_t k = 0; k <= tc.split.n && rc == 0; k++) {
            char name[1024];
            snprintf(name, sizeof name, "%s (program %d)", given, (int)k);
            rc = driver_package_matches(k ? tc.split.owner[k - 1] : tc.split.replica, &pc.pkg[k], name, d);
        }
    } else {
        compile_options co;
        if (cli_machine(c, p, &m, d) || cli_plan_options(c, p, p->pos[0], quiet, &co, d)) return -1;
        co.no_fuse = cli_flag(c, p, "--no-fuse");
        co.no_siblings = cli_flag(c, p, "--no-siblings");
        if (driver_compile_train(g, &m, &co, &tc, d)) return -1;
        pkgs = tc.pkg;
    }
    int32_t n = tc.split.n, nin = 0, nout = 0;
    host_spec *ins = driver_graph_specs(g, false, &nin), *outs = driver_graph_specs(g, true, &nout);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    float **pure = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    check_ctx x = {&tc.split, given ? NULL : tc.info, xcalloc((size_t)n + 2, sizeof(package)), given ? given : p->pos[0],
                   quiet, xcalloc((size_t)n + 2, sizeof(check_result)), xcalloc((size_t)n + 1, sizeof(int32_t)),
                   xcalloc((size_t)n + 1, sizeof(int32_t))};
    /* Through the file format and its reader, as check does on one chip. */
    for (int32_t k = 0; k <= n && rc == 0; k++) {
        size_t len;
        uint8_t *img = package_image(&pkgs[k], &len, x.title, d);
        rc = img ? package_parse(img, len, x.title, &x.pk[k], d) : -1;
        free(img);
        x.r[k].pass = true, x.r[k].cosine = 1;
    }
    uint64_t cycles[CHIPS_MAX + 1] = {0};
    train_shape s = {0};
    if (rc == 0) rc = cli_load_inputs(c, p, ins, nin, inputs, source, d);
    if (rc == 0) {
        driver_train_shape_of_graphs(&tc.split, &s);
        rc = driver_train_step(&s, ins, nin, inputs, outs, nout, outputs, run_check, &x, cycles, d);
    }
    ref_options ro = {.strip_precision = true, .quiet = quiet, .what = "reference (FP32, the whole step)"};
    if (rc == 0) rc = ref_run(g, &ro, inputs, pure, d);
    bool ok = rc == 0, fp8 = false;
    double cosine = 1, max_abs = 0;
    int64_t differing = 0;
    if (rc == 0) {
        train_timing t;
        driver_train_timing(mm, &s, cycles, &t);
        for (int32_t k = 0; k <= n; k++) ok &= x.r[k].pass, differing += x.r[k].differing, fp8 |= x.r[k].fp8;
        for (int32_t j = 0; j < nout; j++) {
            num_diff df = num_compare(outputs[j], pure[j], (size_t)host_numel(&outs[j]));
            if (!(df.cosine >= cosine)) cosine = df.cosine;
            if (!(df.max_abs_err <= max_abs)) max_abs = df.max_abs_err;
            ok &= df.nonfinite == 0;
        }
        ok &= cosine >= (fp8 ? 0.99 : 0.999);
        progress_done();
        train_verdict v = {ok, fp8, cosine, max_abs, differing};
        json_t *j = json || html ? train_check_json(p, mm, &tc.split, &x, &t, &v) : NULL;
        if (html) {
            char words[160];
            snprintf(words, sizeof words, "a training step over %d data-parallel replicas, %lld micro-batch%s each", (int)n,
                     (long long)tc.split.micro, tc.split.micro > 1 ? "es" : "");
            if (report_chips_html_write(html, p->pos[0], mm, words, j))
                rc = diag_fail(d, "%s: error: write failed", cli_opt(c, p, "--html"));
        }
        if (json) {
            char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
            puts(text);
            free(text);
        } else {
            print_train_check(p, given, mm, &tc.split, &x, &t, &v);
        }
        json_decref(j);
    }
    *pass = ok;
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    for (int32_t j = 0; j < nout; j++) free(outputs[j]), free(pure[j]);
    free(inputs), free(outputs), free(pure), free(source), free(ins), free(outs);
    for (int32_t k = 0; k <= n; k++) package_free(&x.pk[k]);
    free(x.pk), free(x.r), free(x.fused), free(x.stored);
    train_shape_free(&s);
    if (given) graph_replicas_free(&tc.split), pkg_chips_free(&pc);
    else train_compiled_free(&tc);
    return rc;
}
