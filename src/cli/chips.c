/* chips.c: the commands on a machine of several chips (docs/chips.md):
 * compile writes a package for several chips, run and check run its
 * chips' stages in order and time them as a pipeline. */
#include <jansson.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../report/report.h"
#include "cli.h"

/* "a pipeline of 4 stages, 2 micro-batches" / "2 replicas of a pipeline of 2 stages, ...". */
static const char *plan_words(int32_t stages, int32_t replicas, int64_t micro) {
    static char buf[160];
    char rep[48] = "";
    if (replicas > 1) snprintf(rep, sizeof rep, "%d data-parallel replicas of ", (int)replicas);
    snprintf(buf, sizeof buf, "%sa pipeline of %d stage%s, %lld micro-batch%s", rep, (int)stages, stages > 1 ? "s" : "",
             (long long)micro, micro > 1 ? "es" : "");
    return buf;
}

/* batch: the inputs' first axis: t->replicas shares, each in t->micro_batches pieces. */
static void print_timing(FILE *f, const char *what, const machine *m, const chips_timing *t, int64_t batch) {
    for (int32_t s = 0; s < t->n; s++) {
        fprintf(f, "  stage %d %12llu cycles", (int)s, (unsigned long long)t->stage[s]);
        if (s + 1 < t->n)
            fprintf(f, "  then %llu bytes to stage %d over a link: %llu cycles", (unsigned long long)t->link_bytes[s],
                    (int)s + 1, (unsigned long long)t->link[s]);
        fputc('\n', f);
    }
    double hz = m->clock_hz, micro = (double)batch / (double)t->replicas / (double)t->micro_batches;
    char rep[64] = "";
    if (t->replicas > 1) snprintf(rep, sizeof rep, " on each of %d replicas", (int)t->replicas);
    fprintf(f, "  %s: the batch of %lld in %lld micro-batch%s%s: %llu cycles (%.3f ms), the first micro-batch through every "
               "stage in %llu, then one every %llu (the busiest stage)\n",
            what, (long long)batch, (long long)t->micro_batches, t->micro_batches > 1 ? "es" : "", rep,
            (unsigned long long)t->cycles, (double)t->cycles / hz * 1e3, (unsigned long long)t->latency,
            (unsigned long long)t->interval);
    fprintf(f, "  steady state: %.1f samples/s (%g per micro-batch, one every %llu cycles at %.2f GHz%s); one batch alone %.1f/s\n",
            t->interval ? micro * t->replicas * hz / (double)t->interval : 0.0, micro, (unsigned long long)t->interval,
            hz / 1e9, t->replicas > 1 ? ", on every replica" : "", t->cycles ? (double)batch * hz / (double)t->cycles : 0.0);
    fprintf(f, "  bubble: %.1f %% of chip time idle over the batch (fill and drain); %.1f %% in the steady state "
               "(stages unequal)\n",
            100 * t->bubble, 100 * t->imbalance);
}

static json_t *timing_json(const chips_timing *t, const machine *m, int64_t batch) {
    json_t *st = json_array();
    for (int32_t s = 0; s < t->n; s++)
        json_array_append_new(st, json_pack("{s:i, s:I, s:I, s:I}", "stage", (int)s, "cycles", (json_int_t)t->stage[s],
                                            "link_bytes", (json_int_t)t->link_bytes[s], "link_cycles",
                                            (json_int_t)t->link[s]));
    double micro = (double)batch / (double)t->replicas / (double)t->micro_batches;
    return json_pack("{s:o, s:I, s:i, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "stages", st, "batch", (json_int_t)batch,
                     "replicas", (int)t->replicas, "micro_batches", (json_int_t)t->micro_batches, "cycles",
                     (json_int_t)t->cycles, "latency_cycles", (json_int_t)t->latency, "interval_cycles",
                     (json_int_t)t->interval, "samples_per_second",
                     t->interval ? micro * t->replicas * m->clock_hz / (double)t->interval : 0.0, "bubble", t->bubble,
                     "steady_state_idle", t->imbalance);
}

int cli_compile_outputs(outset *os, const char *out, const char *save, const char *report, FILE **f, FILE **fr, FILE **fp,
                        diag *d) {
    *os = (outset){0};
    *fr = *fp = NULL;
    *f = outset_open(os, out, d);
    if (*f && save && !(*fr = outset_open(os, save, d))) *f = NULL;
    if (*f && report && !(*fp = outset_open(os, report, d))) *f = NULL;
    if (!*f) outset_abort(os);
    return *f ? 0 : -1;
}

int cli_compile_report(outset *os, FILE *fp, const char *report, struct json_t *j, diag *d) {
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    int rc = fputs(text, fp) < 0 || fputc('\n', fp) < 0 || outset_close(os, fp, report, d) ? -1 : 0;
    free(text);
    return rc;
}

int cli_compile_chips(const char *model, const graph *g, const machine *m, const compile_options *co, const char *out,
                      const char *save, const char *report, diag *d) {
    if (graph_is_training(g)) return cli_compile_train(model, g, m, co, out, save, report, d);
    outset os;
    FILE *f, *fr, *fp;
    if (cli_compile_outputs(&os, out, save, report, &f, &fr, &fp, d)) return -1;
    chips_compiled cc;
    int rc = driver_compile_chips(g, m, co, &cc, d);
    if (rc == 0) rc = pkg_chips_write(m, cc.manifest, cc.pkg, cc.stages.n, cc.replicas, PKG_CHIPS_PIPELINE, f, out, d);
    if (outset_close(&os, f, out, d)) rc = -1;
    if (rc == 0 && fr && (fputs(cc.recipe, fr) < 0 || outset_close(&os, fr, save, d))) rc = -1;
    if (rc == 0 && fp) {
        json_t *stages = json_array();
        for (int32_t s = 0; s < cc.stages.n; s++) {
            char *text = report_compile_json(cc.stages.g[s], &cc.one, &cc.info[s]);
            json_array_append_new(stages, json_loads(text, 0, NULL));
            free(text);
        }
        rc = cli_compile_report(&os, fp, report,
                                json_pack("{s:s, s:s, s:s, s:i, s:o, s:o}", "format", "tessel-chips-report", "model", model,
                                          "machine", m->name, "chips", (int)m->chips, "predicted",
                                          timing_json(&cc.predicted, m, cc.batch), "stages", stages),
                                d);
    }
    if (rc == 0) rc = outset_commit(&os, d);
    else outset_abort(&os);
    if (rc == 0) {
        progress_done();
        printf("compiled %s for %s: %d chips, %s, in %.1f s\n", model, m->name, (int)m->chips,
               plan_words(cc.stages.n, cc.replicas, cc.micro_batches), cc.seconds);
        for (int32_t s = 0; s < cc.stages.n; s++) {
            const compile_info *ci = &cc.info[s];
            printf("  stage %d: layers %lld..%lld, %lld steps, peak tile %.1f KiB of %.1f%s\n", (int)s,
                   (long long)cc.stages.first[s], (long long)(cc.stages.first[s] + cc.stages.count[s] - 1),
                   (long long)ci->steps, ci->place.tile_bytes / 1024.0, machine_tile_bytes(&cc.one) / 1024.0,
                   ci->start_plan_fallback ? " (the start plan: no searched plan placed)" : "");
        }
        if (cc.even_interval) {
            char even[256] = "";
            for (int32_t s = 0, at = 0; s < cc.stages.n && at < (int)sizeof even; s++)
                at += snprintf(even + at, sizeof even - (size_t)at, "%s%lld", s ? ", " : "", (long long)cc.even_count[s]);
            printf("  layers cut to balance the stages' predicted cycles: the even cut (%s) had its busiest stage at %llu "
                   "cycles, this one at %llu\n", even, (unsigned long long)cc.even_interval,
                   (unsigned long long)cc.predicted.interval);
        }
        print_timing(stdout, "predicted", m, &cc.predicted, cc.batch);
        printf("  package %s\n", out);
    }
    if (rc == 0 || cc.pkg) chips_compiled_free(&cc);
    return rc;
}

const chips_transport *cli_transport; /* set by main() under mpirun (src/cli/mpi.c) */

/* An error every rank meets alike: said once, by rank 0. */
static int uniform_fail(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int uniform_fail(diag *d, const char *fmt, ...) {
    if (cli_transport && cli_transport->rank != 0) {
        *d = (diag){.set = true};
        return -1;
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = diag_vfail(d, fmt, ap);
    va_end(ap);
    return rc;
}

int cli_run_chips(const cmd *c, const parsed *p, const char *path, diag *d) {
    const chips_transport *tp = cli_transport;
    int rank = tp ? tp->rank : 0, ranks = tp ? tp->ranks : 1;
    pkg_chips pc;
    /* Each rank reads only its own chips' programs (chip c runs program c % programs). */
    bool want[CHIPS_MAX] = {0};
    int32_t chips, first, end;
    {
        int32_t n, replicas;
        pkg_chips_kind kind;
        if (pkg_chips_count(path, &n, &replicas, &kind, d)) return -1;
        if (kind == PKG_CHIPS_TRAIN) return cli_run_train(c, p, path, n, d);
        chips = n * replicas;
        if (ranks > chips)
            return uniform_fail(d, "tessel run: error: %d MPI ranks for %d chips: run with at most %d (mpirun -np %d)", ranks,
                                (int)chips, (int)chips, (int)chips);
        first = driver_chips_first(chips, rank, ranks), end = driver_chips_first(chips, rank + 1, ranks);
        for (int32_t k = first; k < end; k++) want[k % n] = true;
    }
    if (pkg_chips_load(path, want, &pc, d)) return -1;
    if (cli_opt(c, p, "--trace")) {
        pkg_chips_free(&pc);
        return diag_fail(d, "tessel run: error: option '--trace': a package for several chips has no trace yet");
    }
    int32_t S = pc.n;
    /* Host inputs: every rank whose chips include a replica's first stage; outputs: the rank with the last chip. */
    bool json = cli_flag(c, p, "--json"), reads = want[0], writes = end == chips, last = false;
    sim_options so = {.quiet = json || !writes};
    host_spec *ins = NULL, *outs = NULL, *other = NULL;
    int32_t nin = 0, nout = 0, nother;
    if (reads) driver_package_specs(&pc.pkg[0], &ins, &nin, &other, &nother), free(other);
    if (writes) driver_package_specs(&pc.pkg[S - 1], &other, &nother, &outs, &nout), free(other);
    /* The host sees the whole batch: every replica's micro-batches along the first axis. */
    int64_t pieces = (int64_t)pc.replicas * pc.micro_batches;
    for (int32_t j = 0; j < nin; j++) ins[j].dim[0] *= pieces;
    for (int32_t j = 0; j < nout; j++) outs[j].dim[0] *= pieces;
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    sim_stats *st = xcalloc((size_t)chips, sizeof(sim_stats));
    chips_timing t;
    cli_outputs files = {0};
    int rc = cli_max_host_memory(c, p, &so.max_host_bytes, d);
    if (rc == 0) rc = sim_host_check(&pc.pkg[first % S].machine, so.max_host_bytes, "--max-host-memory", d);
    if (rc == 0 && writes) rc = cli_outputs_open(&files, cli_opt(c, p, "--output-dir"), outs, nout, NULL, d);
    if (rc == 0 && reads) rc = cli_load_inputs(c, p, ins, nin, inputs, source, d);
    if (rc == 0) rc = driver_run_chips(&pc, path, tp, &so, inputs, outputs, st, &t, &last, d);
    else driver_chips_hand_on_failure(&pc, tp, d); /* the next rank fails saying why, instead of waiting */
    if (rc == 0 && last) rc = cli_outputs_commit(&files, outs, outputs, &st[chips - 1], &pc.pkg[S - 1], path, NULL, d);
    else if (writes) cli_outputs_abort(&files);
    if (rc == 0 && last && json) {
        json_t *j = timing_json(&t, &pc.machine, pc.batch);
        json_object_set_new(j, "package", json_string(path));
        json_object_set_new(j, "machine", json_string(pc.machine.name));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(s);
        free(s);
        json_decref(j);
    } else if (rc == 0 && last) {
        progress_done();
        printf("ran %s on %s: %d chips, %s\n", path, pc.machine.name, (int)chips, plan_words(S, pc.replicas, pc.micro_batches));
        print_timing(stdout, "simulated", &pc.machine, &t, pc.batch);
        /* Outputs only: under mpirun the inputs are another rank's, and the
         * report is the same whatever the number of ranks. */
        for (int32_t j = 0; j < nout; j++) cli_print_stats("output", &outs[j], outputs[j], NULL);
    }
    for (int32_t k = 0; k < chips; k++) sim_stats_free(&st[k]);
    free(st);
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    for (int32_t j = 0; j < nout; j++) free(outputs[j]);
    free(inputs), free(outputs), free(source);
    free(ins), free(outs);
    pkg_chips_free(&pc);
    return rc;
}

/* Stage s's inputs, in its graph's order, from the values named by the
 * previous stage's graph outputs. */
static void stage_inputs(const graph *prev, float **prev_out, const graph *g, float **in) {
    int32_t nin = graph_inputs(g, NULL, 0), nout = graph_outputs(prev, NULL, 0);
    int32_t *iv = xcalloc((size_t)nin + 1, sizeof(int32_t)), *ov = xcalloc((size_t)nout + 1, sizeof(int32_t));
    graph_inputs(g, iv, nin);
    graph_outputs(prev, ov, nout);
    for (int32_t k = 0; k < nin; k++)
        for (int32_t j = 0; j < nout; j++)
            if (strcmp(graph_val(g, iv[k])->name, graph_val(prev, ov[j])->name) == 0) in[k] = prev_out[j];
    free(iv);
    free(ov);
}

/* The stages of a check: a saved package's, the model cut as its manifest
 * says it was (refused when its chips run other layers), or the model
 * compiled for m. */
typedef struct chips_under_check {
    chips_compiled cc;     /* stages (and, compiled, the packages) */
    pkg_chips pc;          /* a saved package */
    const package *pkgs;
    const machine *m;
    const char *given;
} chips_under_check;

static int saved_stages(const parsed *p, const graph *g, chips_under_check *u, diag *d) {
    chips_compiled *cc = &u->cc;
    pkg_chips *pc = &u->pc;
    if (pkg_chips_load(u->given, NULL, pc, d)) return -1;
    u->m = &pc->machine;
    u->pkgs = pc->pkg;
    cc->batch = pc->batch, cc->micro_batches = pc->micro_batches, cc->replicas = pc->replicas;
    int64_t batch = 1, pieces = (int64_t)pc->replicas * pc->micro_batches;
    int rc = 0;
    if (pieces > 1 && !(cc->micro = graph_micro_batch(g, pc->batch / pieces, &batch, d))) rc = -1;
    if (rc == 0 && cc->micro && batch != pc->batch)
        rc = diag_fail(d, "%s: error: the package runs a batch of %lld; %s has %lld", u->given, (long long)pc->batch,
                       p->pos[0], (long long)batch);
    /* The cut the package's manifest records (each stage's layers). */
    json_t *man = rc == 0 ? json_loads(pc->manifest, 0, NULL) : NULL, *stages = json_object_get(man, "stages");
    int64_t cut[CHIPS_MAX];
    bool given = json_is_array(stages) && json_array_size(stages) == (size_t)pc->n;
    for (int32_t s = 0; given && s < pc->n; s++) {
        json_t *l = json_object_get(json_array_get(stages, (size_t)s), "layers");
        given = json_is_integer(l) && json_integer_value(l) >= 1;
        cut[s] = given ? json_integer_value(l) : 0;
    }
    if (rc == 0 && graph_split_stages(cc->micro ? cc->micro : g, pc->n, given ? cut : NULL, &cc->stages, d)) {
        char layers[256] = "";
        for (int32_t s = 0, at = 0; given && s < pc->n && at < (int)sizeof layers; s++)
            at += snprintf(layers + at, sizeof layers - (size_t)at, "%s%lld", s ? ", " : "", (long long)cut[s]);
        char why[sizeof d->text];
        snprintf(why, sizeof why, "%s", d->text);
        *d = (diag){0};
        rc = diag_fail(d, "%s: error: the package's chips run (%s) layers of the model it was compiled from; %s "
                          "cannot be cut so:\n%s", u->given, layers, p->pos[0], why);
    }
    for (int32_t s = 0; s < pc->n && rc == 0; s++) {
        char name[1024];
        snprintf(name, sizeof name, "%s (chip %d)", u->given, (int)s);
        json_t *st = json_array_get(stages, (size_t)s);
        json_int_t first = json_integer_value(json_object_get(st, "first_layer"));
        json_int_t count = json_integer_value(json_object_get(st, "layers"));
        if (first != cc->stages.first[s] || count != cc->stages.count[s])
            rc = diag_fail(d, "%s: error: chip %d runs layers %lld..%lld of the model it was compiled from; %s cut "
                              "over %d chips gives it layers %lld..%lld",
                           u->given, (int)s, (long long)first, (long long)(first + count - 1), p->pos[0], (int)pc->n,
                           (long long)cc->stages.first[s], (long long)(cc->stages.first[s] + cc->stages.count[s] - 1));
        if (rc == 0) rc = driver_package_matches(cc->stages.g[s], &pc->pkg[s], name, d);
    }
    json_decref(man);
    return rc;
}

static void under_check_free(chips_under_check *u) {
    if (u->given) graph_stages_free(&u->cc.stages), graph_free(u->cc.micro), pkg_chips_free(&u->pc);
    else chips_compiled_free(&u->cc);
}

/* What checking every stage on every micro-batch found. */
typedef struct chips_found {
    check_result *r;       /* per stage, over every micro-batch: pass, differing, worst cosine, fp8 */
    uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
    float **whole;         /* the last chip's outputs, the whole batch */
} chips_found;

/* Every micro-batch through every stage, each stage checked by
 * driver_check (simulated, bit for bit against its plan-exact reference,
 * by cosine against itself in FP32) on what the stage before it produced. */
static int check_stages(chips_under_check *u, const char *title, bool quiet, float *const *inputs, chips_found *f,
                        diag *d) {
    const chips_compiled *cc = &u->cc;
    int32_t n = cc->stages.n;
    int64_t micro = cc->micro_batches;
    const graph *glast = cc->stages.g[n - 1];
    int32_t nout = graph_outputs(glast, NULL, 0);
    float ***outs = xcalloc((size_t)n, sizeof(float **));
    package *pk = xcalloc((size_t)n, sizeof(package));
    f->r = xcalloc((size_t)n, sizeof(check_result));
    f->whole = xcalloc((size_t)nout + 1, sizeof(float *));
    int rc = 0;
    /* Through the file format and its reader, as check does on one chip. */
    for (int32_t s = 0; s < n && rc == 0; s++) {
        size_t len;
        uint8_t *img = package_image(&u->pkgs[s], &len, title, d);
        rc = img ? package_parse(img, len, title, &pk[s], d) : -1;
        free(img);
        if (!u->given) package_free(&u->cc.pkg[s]); /* what the file holds is checked: the compiled copy is done with */
        if (rc == 0 && s + 1 < n) f->link[s] = driver_chips_handed_bytes(&pk[s]);
        f->r[s].pass = true, f->r[s].cosine = 1;
    }
    for (int64_t piece = 0; piece < cc->replicas * micro && rc == 0; piece++) { /* every replica's micro-batches */
        int64_t mb = piece;
        for (int32_t s = 0; s < n && rc == 0; s++) {
            const graph *gs = cc->stages.g[s];
            int32_t sin = graph_inputs(gs, NULL, 0), sout = graph_outputs(gs, NULL, 0);
            float **in = xcalloc((size_t)sin + 1, sizeof(float *));
            if (s == 0) { /* micro-batch mb of each input */
                int32_t *iv = xcalloc((size_t)sin + 1, sizeof(int32_t));
                graph_inputs(gs, iv, sin);
                for (int32_t k = 0; k < sin; k++) in[k] = inputs[k] + mb * graph_type_numel(&graph_val(gs, iv[k])->type);
                free(iv);
            } else {
                stage_inputs(cc->stages.g[s - 1], outs[s - 1], gs, in);
            }
            float **prev = outs[s];
            outs[s] = xcalloc((size_t)sout + 1, sizeof(float *));
            char name[256];
            snprintf(name, sizeof name, "%s (stage %d, replica %lld, micro-batch %lld)", title, (int)s,
                     (long long)(piece / micro), (long long)(piece % micro));
            check_options o = {.package = name, .inputs = in, .sim = {.quiet = quiet}, .outputs = outs[s]};
            check_result one;
            rc = driver_check(gs, &pk[s], &o, &one, d);
            if (rc == 0) { /* the stage over every micro-batch: its worst */
                check_result *r = &f->r[s];
                if (one.sim.cycles > f->stage[s]) f->stage[s] = one.sim.cycles;
                r->pass &= one.pass, r->differing += one.differing, r->fp8 |= one.fp8;
                if (!(one.cosine >= r->cosine)) r->cosine = one.cosine;
                check_result_free(&one);
            }
            for (int32_t j = 0; prev && j < sout; j++) free(prev[j]);
            free(prev);
            free(in);
        }
        int32_t *ov = xcalloc((size_t)nout + 1, sizeof(int32_t));
        graph_outputs(glast, ov, nout);
        for (int32_t j = 0; rc == 0 && j < nout; j++) { /* the last chip's outputs at their place in the batch */
            int64_t k = graph_type_numel(&graph_val(glast, ov[j])->type);
            if (mb == 0) f->whole[j] = xmalloc(sizeof(float) * (size_t)(k * micro * cc->replicas + 1));
            memcpy(f->whole[j] + mb * k, outs[n - 1][j], sizeof(float) * (size_t)k);
        }
        free(ov);
    }
    for (int32_t s = 0; s < n; s++) {
        for (int32_t j = 0; outs[s] && j < graph_outputs(cc->stages.g[s], NULL, 0); j++) free(outs[s][j]);
        free(outs[s]);
        package_free(&pk[s]);
    }
    free(outs), free(pk);
    return rc;
}

/* What the check found, as --json prints it (and the HTML report draws). */
static json_t *check_json(const parsed *p, const chips_under_check *u, const chips_found *f, const chips_timing *t,
                          double cosine, double max_abs, int64_t differing, bool ok) {
    const chips_compiled *cc = &u->cc;
    int32_t n = cc->stages.n;
    json_t *st = json_array();
    for (int32_t s = 0; s < n; s++)
        json_array_append_new(st, json_pack("{s:i, s:I, s:I, s:I, s:b, s:f}", "stage", (int)s, "first_layer",
                                            (json_int_t)cc->stages.first[s], "layers", (json_int_t)cc->stages.count[s],
                                            "differing", (json_int_t)f->r[s].differing, "pass", f->r[s].pass,
                                            "cosine_stage_fp32", f->r[s].cosine));
    return json_pack("{s:s, s:s, s:i, s:s, s:o, s:o, s:I, s:f, s:f, s:b}", "model", p->pos[0], "machine", u->m->name,
                     "chips", (int)n, "plan", "pipeline", "stages", st, "simulated", timing_json(t, u->m, cc->batch),
                     "differing", (json_int_t)differing, "cosine", cosine, "max_abs_err", max_abs, "pass", ok);
}

static void print_check(const parsed *p, const chips_under_check *u, const chips_found *f, const chips_timing *t,
                        double cosine, double max_abs, bool fp8, bool ok, json_t *j) {
    const chips_compiled *cc = &u->cc;
    int32_t n = cc->stages.n;
    if (j) {
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(s);
        free(s);
        return;
    }
    const char *plan = plan_words(n, cc->replicas, cc->micro_batches);
    if (u->given) printf("checked %s against %s on %s: %s\n", u->given, p->pos[0], u->m->name, plan);
    else printf("checked %s on %s: %s\n", p->pos[0], u->m->name, plan);
    for (int32_t s = 0; s < n; s++)
        printf("  stage %d: layers %lld..%lld, %llu cycles, %s (%lld differing from the plan-exact reference), "
               "cosine %.6f against the stage in FP32\n",
               (int)s, (long long)cc->stages.first[s], (long long)(cc->stages.first[s] + cc->stages.count[s] - 1),
               (unsigned long long)f->stage[s], f->r[s].differing ? "NOT bit-exact" : "bit-exact",
               (long long)f->r[s].differing, f->r[s].cosine);
    print_timing(stdout, "simulated", u->m, t, cc->batch);
    printf("  outputs against the whole model in FP32: cosine %.6f, max |err| %.4g (needs %.3f)\n", cosine, max_abs,
           fp8 ? 0.99 : 0.999);
    printf("%s\n", ok ? "PASS" : "FAIL");
}

int cli_check_on_chips(const cmd *c, const parsed *p, diag *d) {
    const char *given = cli_opt(c, p, "--package");
    if (given) return pkg_chips_file(given);
    machine m;
    if (cli_machine(c, p, &m, d)) return -1;
    const char *chip_opt = cli_opt(c, p, "--micro-batches") ? "--micro-batches" : cli_opt(c, p, "--replicas") ? "--replicas" : NULL;
    if (m.chips == 1 && chip_opt)
        return diag_fail(d, "tessel check: error: option '%s': for a machine of several chips (%s has one)", chip_opt, m.name);
    return m.chips > 1;
}

static int cli_check_pipeline(const cmd *c, const parsed *p, const graph *g, bool *pass, FILE *html, diag *d);

int cli_check_chips(const cmd *c, const parsed *p, const graph *g, bool *pass, diag *d) {
    static const char *const one_chip[] = {"--trace", "--locate", "--expect"};
    for (size_t k = 0; k < sizeof one_chip / sizeof one_chip[0]; k++)
        if (cli_flag(c, p, one_chip[k]))
            return diag_fail(d, "tessel check: error: option '%s': not yet on several chips (docs/chips.md)", one_chip[k]);
    outset os = {0};
    const char *html = cli_opt(c, p, "--html");
    FILE *fh = html ? outset_open(&os, html, d) : NULL; /* an unwritable page fails before the work */
    if (html && !fh) return outset_abort(&os), -1;
    int rc = graph_is_training(g) ? cli_check_train(c, p, g, pass, fh, d) : cli_check_pipeline(c, p, g, pass, fh, d);
    if (fh && outset_close(&os, fh, html, d)) rc = -1;
    if (rc == 0 && html) rc = outset_commit(&os, d);
    else if (html) outset_abort(&os);
    return rc;
}

/* The check of a pipeline; html: the page's file, or NULL. */
static int cli_check_pipeline(const cmd *c, const parsed *p, const graph *g, bool *pass, FILE *html, diag *d) {
    bool json = cli_flag(c, p, "--json"), quiet = json || cli_flag(c, p, "--quiet");
    machine m;
    chips_under_check u = {.m = &m, .given = cli_opt(c, p, "--package")};
    if (u.given && cli_opt(c, p, "--machine"))
        return diag_fail(d, "tessel check: error: option '--machine': a package carries its machine (--package %s)", u.given);
    if (u.given && saved_stages(p, g, &u, d)) return under_check_free(&u), -1;
    if (!u.given) {
        compile_options co;
        if (cli_machine(c, p, &m, d) || cli_plan_options(c, p, p->pos[0], quiet, &co, d)) return -1;
        co.no_fuse = cli_flag(c, p, "--no-fuse");
        co.no_siblings = cli_flag(c, p, "--no-siblings");
        if (driver_compile_chips(g, &m, &co, &u.cc, d)) return -1;
        u.pkgs = u.cc.pkg;
    }
    int32_t n = u.cc.stages.n, nout = graph_outputs(g, NULL, 0), nin;
    host_spec *specs = driver_graph_specs(g, false, &nin);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    chips_found f = {0};
    float **pure = xcalloc((size_t)nout + 1, sizeof(float *));
    int rc = cli_load_inputs(c, p, specs, nin, inputs, source, d);
    if (rc == 0) rc = check_stages(&u, u.given ? u.given : p->pos[0], quiet, inputs, &f, d);
    /* The whole model in FP32 against the last chip's outputs. */
    ref_options ro = {.strip_precision = true, .quiet = quiet, .what = "reference (FP32, whole model)"};
    if (rc == 0) rc = ref_run(g, &ro, inputs, pure, d);
    chips_timing t;
    double cosine = 1, max_abs = 0;
    int64_t differing = 0;
    bool fp8 = false, ok = rc == 0;
    if (rc == 0) {
        driver_chips_timing(u.m, f.stage, f.link, n, u.cc.micro_batches, &t);
        t.replicas = u.cc.replicas;
        int32_t *ov = xcalloc((size_t)nout + 1, sizeof(int32_t));
        graph_outputs(g, ov, nout);
        for (int32_t s = 0; s < n; s++) ok &= f.r[s].pass, differing += f.r[s].differing, fp8 |= f.r[s].fp8;
        for (int32_t j = 0; j < nout; j++) {
            num_diff df = num_compare(f.whole[j], pure[j], (size_t)graph_type_numel(&graph_val(g, ov[j])->type));
            if (!(df.cosine >= cosine)) cosine = df.cosine;
            if (!(df.max_abs_err <= max_abs)) max_abs = df.max_abs_err;
            ok &= df.nonfinite == 0;
        }
        ok &= cosine >= (fp8 ? 0.99 : 0.999);
        free(ov);
        progress_done();
        json_t *j = json || html ? check_json(p, &u, &f, &t, cosine, max_abs, differing, ok) : NULL;
        if (html && report_chips_html_write(html, p->pos[0], u.m, plan_words(n, u.cc.replicas, u.cc.micro_batches), j))
            rc = diag_fail(d, "%s: error: write failed", cli_opt(c, p, "--html"));
        print_check(p, &u, &f, &t, cosine, max_abs, fp8, ok, json ? j : NULL);
        json_decref(j);
    }
    *pass = ok;
    for (int32_t j = 0; j < nout; j++) free(pure[j]), free(f.whole ? f.whole[j] : NULL);
    free(pure), free(f.whole), free(f.r);
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    free(inputs), free(source), free(specs);
    under_check_free(&u);
    return rc;
}
