/* check.c: a package against its model: the simulator's outputs bit for bit
 * against the plan-exact reference, and by cosine against the FP32 model. */
#include "driver.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Why a package and a model differ, for the end of a message: the model the
 * package's metadata says it was compiled from, when it says. */
static void which_model(const package *p, const graph *g, char *out, size_t cap) {
    json_t *meta = p->meta ? json_loads(p->meta, 0, NULL) : NULL;
    const char *model = meta ? json_string_value(json_object_get(meta, "model")) : NULL;
    if (model) snprintf(out, cap, "the package was compiled from %s, not from %s", model, g->path);
    else snprintf(out, cap, "the package was not compiled from %s", g->path);
    json_decref(meta);
}

int driver_package_matches(const graph *g, const package *p, const char *path, diag *d) {
    int32_t nin = graph_inputs(g, NULL, 0), nout = graph_outputs(g, NULL, 0), n = nin + nout, k = 0;
    int32_t *ids = xcalloc((size_t)n + 1, sizeof(int32_t));
    graph_inputs(g, ids, nin);
    graph_outputs(g, ids + nin, nout);
    int rc = 0;
    for (int32_t i = 0; i < p->bindings.n && rc == 0; i++) {
        const pkg_binding *b = &p->bindings.v[i];
        if (b->role == PKG_PROBE) continue;
        const char *role = b->role == PKG_INPUT ? "input" : "output";
        if (k >= n || (b->role == PKG_INPUT) != (k < nin)) {
            char why[512];
            which_model(p, g, why, sizeof why);
            rc = diag_fail(d, "%s: error: the package's %s '%s' is not the model's (%s)", path, role, b->name, why);
            break;
        }
        const graph_type *t = &graph_val(g, ids[k])->type;
        bool same = strcmp(b->name, graph_val(g, ids[k])->name) == 0 && b->dtype == t->dtype &&
                    sim_binding_numel(b) == graph_type_numel(t);
        if (!same) {
            char want[160], why[512];
            graph_type_str(t, want, sizeof want);
            which_model(p, g, why, sizeof why);
            rc = diag_fail(d, "%s: error: the package's %s %d is '%s', but the model's is '%%%s' %s (%s)", path, role,
                           (int)(b->role == PKG_INPUT ? k : k - nin), b->name, graph_val(g, ids[k])->name, want, why);
        }
        k++;
    }
    if (rc == 0 && k != n) {
        char why[512];
        which_model(p, g, why, sizeof why);
        rc = diag_fail(d, "%s: error: the package has %d host inputs and outputs, the model %d (%s)", path, (int)k, (int)n, why);
    }
    free(ids);
    return rc;
}

static bool has_fp8(const graph *g) {
    for (int32_t v = 0; v < g->values.n; v++)
        if (dtype_is_f8(graph_val(g, v)->type.dtype)) return true;
    return false;
}

/* A reference run on a thread of its own. A job it stops early (cancel,
 * read at every op result) ends with rc 1. */
typedef struct ref_job {
    const graph *g;
    ref_options o;
    float **inputs;
    float **out;
    int rc;
    double seconds; /* its own wall time */
    diag d;
    pthread_t th;
    bool threaded, finished;
    bool background; /* at a lower priority (started before the compile, which should not wait for it) */
    atomic_bool cancel;
} ref_job;

static void *run_ref(void *arg) {
    ref_job *j = arg;
    if (j->background) util_thread_background();
    double t0 = util_now_seconds();
    j->rc = ref_run(j->g, &j->o, j->inputs, j->out, &j->d);
    j->seconds = util_now_seconds() - t0;
    return NULL;
}

static int ref_cancelled(void *ctx, int32_t value, const int64_t *iters, int depth, const float *data, int64_t n) {
    (void)value, (void)iters, (void)depth, (void)data, (void)n;
    return atomic_load(&((ref_job *)ctx)->cancel) ? 1 : 0;
}

static void ref_start(ref_job *j) {
    j->o.on_value = ref_cancelled;
    j->o.on_value_ctx = j;
    atomic_init(&j->cancel, false);
    j->threaded = pthread_create(&j->th, NULL, run_ref, j) == 0;
}

/* Waits for the job (or runs it here when no thread could be had): its
 * outputs are there when rc is 0, its error in d otherwise. */
static void ref_finish(ref_job *j) {
    if (j->finished) return;
    if (j->threaded) pthread_join(j->th, NULL);
    else j->background = false, run_ref(j); /* here, on the caller's thread: at its priority */
    j->finished = true;
}

static void ref_cancel(ref_job *j) {
    atomic_store(&j->cancel, true);
    ref_finish(j);
}

static void free_inputs(const graph *g, float **inputs) {
    for (int32_t k = 0, nin = graph_inputs(g, NULL, 0); inputs && k < nin; k++) free(inputs[k]);
    free(inputs);
}

/* Every graph input's data: the given, or the seeded default. NULL with a
 * diagnostic when the host cannot hold one. */
static float **check_inputs(const graph *g, float *const *given, diag *d) {
    int32_t nin = graph_inputs(g, NULL, 0);
    int32_t *ids = xcalloc((size_t)nin + 1, sizeof(int32_t));
    graph_inputs(g, ids, nin);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *));
    int rc = 0;
    for (int32_t k = 0; k < nin && rc == 0; k++) {
        const graph_value *x = graph_val(g, ids[k]);
        size_t n = (size_t)graph_type_numel(&x->type);
        char ty[160];
        graph_type_str(&x->type, ty, sizeof ty);
        inputs[k] = util_try_malloc(n ? n : 1, sizeof(float), d, "tessel check: error: input '%s' (%s)", x->name, ty);
        if (!inputs[k]) rc = -1;
        else if (given && given[k]) memcpy(inputs[k], given[k], sizeof(float) * n);
        else graph_input_default(g, ids[k], k, inputs[k]);
    }
    free(ids);
    if (rc) free_inputs(g, inputs);
    return rc ? NULL : inputs;
}

/* The pure FP32 model needs no package: check from scratch starts it before
 * the compile (driver_pure_start) and driver_check takes it over. */
struct driver_pure {
    ref_job job;
    float **pure;
};

static driver_pure *pure_new(const graph *g, float **inputs, bool quiet, bool background) {
    driver_pure *p = xcalloc(1, sizeof *p);
    int32_t nout = graph_outputs(g, NULL, 0);
    p->pure = xcalloc((size_t)nout + 1, sizeof(float *));
    /* BLAS on one thread: the compile, then the simulation and the
     * plan-exact reference, have the cores. */
    p->job = (ref_job){.g = g,
                       .o = {.strip_precision = true, .quiet = quiet, .blas_one_thread = true, .what = "reference (FP32)"},
                       .inputs = inputs, .out = p->pure, .background = background};
    ref_start(&p->job);
    return p;
}

driver_pure *driver_pure_start(const graph *g, float *const *given, bool quiet, diag *d) {
    float **inputs = check_inputs(g, given, d);
    return inputs ? pure_new(g, inputs, quiet, true) : NULL;
}

static void pure_free(driver_pure *p) {
    ref_cancel(&p->job); /* a no-op when it finished */
    const graph *g = p->job.g;
    for (int32_t j = 0, nout = graph_outputs(g, NULL, 0); j < nout; j++) free(p->pure[j]);
    free(p->pure);
    free_inputs(g, p->job.inputs);
    free(p);
}

void driver_pure_cancel(driver_pure *p) {
    if (p) pure_free(p);
}

int driver_check(const graph *g, const package *p, const check_options *co, check_result *r, diag *d) {
    memset(r, 0, sizeof *r);
    int32_t nout = graph_outputs(g, NULL, 0);
    int32_t *out_ids = xcalloc((size_t)nout + 1, sizeof(int32_t));
    graph_outputs(g, out_ids, nout);
    float **got = xcalloc((size_t)nout + 1, sizeof(float *)), **emu = xcalloc((size_t)nout + 1, sizeof(float *));
    driver_pure *pure = co->pure; /* started before the compile, or here */
    float **inputs = pure ? pure->job.inputs : check_inputs(g, co->inputs, d);
    int rc = inputs ? 0 : -1;
    graph_numerics plan = {0};
    if (rc == 0) rc = graph_numerics_parse(g, p->meta, co->package, &plan, d);
    if (rc == 0) {
        /* The references need nothing of the simulation or of each other: each
         * runs on a thread of its own beside the simulation (the FP32 one is
         * mostly one core's work, the others use both cores in bursts) and
         * writes only its own outputs, so nothing depends on the overlap. */
        double t0 = util_now_seconds();
        if (!pure) pure = pure_new(g, inputs, co->sim.quiet, false);
        ref_job exact = {.g = g, .o = {.plan = &plan, .quiet = co->sim.quiet, .what = "reference (plan-exact)"},
                         .inputs = inputs, .out = emu};
        ref_start(&exact);
        rc = sim_run(p, &co->sim, inputs, got, &r->sim, d);
        if (rc) ref_cancel(&exact), ref_cancel(&pure->job);
        ref_finish(&exact);
        ref_finish(&pure->job);
        if (rc == 0 && pure->job.rc) *d = pure->job.d, rc = -1;
        if (rc == 0 && exact.rc) *d = exact.d, rc = -1;
        r->ref_seconds = util_now_seconds() - t0; /* beside the simulation: at most its time and theirs */
        r->pure_seconds = pure->job.seconds;
        r->exact_seconds = exact.seconds;
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
            o->pure = num_compare(got[j], pure->pure[j], n);
            o->exact = num_mismatches(got[j], emu[j], n);
            o->min_cosine = r->fp8 ? 0.99 : 0.999;
            o->pass_refs = o->pure.nonfinite == 0 && o->pure.cosine >= o->min_cosine && o->exact.count == 0;
            o->pass_expect = true;
            if (co->expect && co->expect[j]) {
                /* An independent implementation's answer (PyTorch): the same bar as the pure model. */
                o->has_expect = true;
                o->expect = num_compare(got[j], co->expect[j], n);
                o->pass_expect = o->expect.nonfinite == 0 && o->expect.cosine >= o->min_cosine;
                if (!r->has_expect) r->expect_cosine = 1;
                r->has_expect = true;
                if (!(o->expect.cosine >= r->expect_cosine)) r->expect_cosine = o->expect.cosine;
                if (!(o->expect.max_abs_err <= r->expect_max_abs_err)) r->expect_max_abs_err = o->expect.max_abs_err;
            }
            o->pass = o->pass_refs && o->pass_expect;
            r->pass &= o->pass;
            r->differing += o->exact.count;
            if (!(o->pure.cosine >= r->cosine)) r->cosine = o->pure.cosine;
            if (!(o->pure.max_abs_err <= r->max_abs_err)) r->max_abs_err = o->pure.max_abs_err;
        }
        if (co->locate || r->differing) {
            rc = driver_locate(g, p, &plan, inputs, co->sim.quiet, &r->loc, d);
            r->located = rc == 0;
        }
    }
    if (plan.op) graph_numerics_free(&plan);
    if (pure) pure_free(pure); /* the inputs with it */
    else free_inputs(g, inputs);
    for (int32_t j = 0; j < nout; j++) {
        if (rc == 0 && co->outputs) co->outputs[j] = got[j];
        else free(got[j]);
        free(emu[j]);
    }
    free(got);
    free(emu);
    free(out_ids);
    return rc;
}

void check_result_free(check_result *r) {
    sim_stats_free(&r->sim);
    free(r->out);
    r->out = NULL;
}


int driver_check_proofs(const graph *g, const compile_info *ci, const package *pkg, check_proofs *pv, diag *d) {
    memset(pv, 0, sizeof *pv);
    if (ci) {
        pv->fp = &ci->fusions;
        pv->gf = driver_model_graph(g, ci);
    } else { /* a given package: what it shows, not what we would do */
        graph_fuse_analyze(g, false, &pv->given);
        pv->fp = &pv->given;
        pv->gf = g;
    }
    pv->proofs = xcalloc((size_t)pv->fp->n + 1, sizeof(epilogue_proof));
    if (driver_fusion_proofs(pv->gf, pv->fp, pkg, pv->proofs, d)) return -1;
    for (int32_t k = 0; k < pv->given.n; k++)
        if (pv->given.c[k].rule == FUSE_DISABLED && !pv->proofs[k].materialized)
            pv->given.c[k].rule = FUSE_OK, pv->given.c[k].fused = true;
    for (int32_t k = 0; k < pv->fp->n; k++) pv->fail |= pv->fp->c[k].fused && pv->proofs[k].materialized;
    return package_live_peak(pkg, &pv->peak, d);
}

void check_proofs_free(check_proofs *pv) {
    free(pv->proofs);
    graph_fuse_free(&pv->given);
    memset(pv, 0, sizeof *pv);
}
