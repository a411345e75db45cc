/* locate.c: the first graph op whose result differs from the plan-exact
 * reference, in program order (repeat iterations counted).
 *
 * Every package carries a probe per op result: the buffer and layout that
 * hold it and the step that completes it (package.h). The simulator hands
 * each probe over as its step completes; we keep one hash per (probe,
 * iteration). The emulated reference then runs in program order and stops
 * at the first result whose hash differs; a second simulation captures just
 * that probe, to name the element, its tile and both values. Nothing here
 * reads an address or layout to compute anything: the probes only say where
 * the simulated values can be read. */
#include "driver.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct seen {
    int32_t binding;
    uint64_t hash;
} seen;

typedef struct loc {
    const graph *g;
    const package *p;
    arena a;              /* keys */
    strmap keys;          /* "binding/i0/i1..." -> index into recs */
    VEC(seen) recs;
    int32_t *probe_of;    /* graph value -> probe binding, -1 */
    /* the first mismatch */
    locate_result *r;
    float *want;          /* the reference's values of it (malloc'd) */
    /* the capture run */
    float *got;
} loc;

/* NaNs compare equal whatever their payload (num_mismatches does the same). */
static uint64_t values_hash(const float *x, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        if (isnan(x[i])) b = 0x7fc00000u;
        h = (h ^ b) * 0x100000001b3ull;
    }
    return h ^ (uint64_t)n;
}

static const char *key_of(loc *l, int32_t binding, const int64_t *iters, int depth) {
    char buf[32 * (GRAPH_MAX_REPEAT_DEPTH + 1)];
    int at = snprintf(buf, sizeof buf, "%d", (int)binding);
    for (int k = 0; k < depth && at < (int)sizeof buf; k++) at += snprintf(buf + at, sizeof buf - (size_t)at, "/%lld", (long long)iters[k]);
    return arena_strdup(&l->a, buf);
}

static void on_probe(void *ctx, int32_t binding, const uint32_t *iters, int depth, const float *values, int64_t n) {
    loc *l = ctx;
    int64_t it[GRAPH_MAX_REPEAT_DEPTH];
    for (int k = 0; k < depth && k < GRAPH_MAX_REPEAT_DEPTH; k++) it[k] = iters[k];
    const char *key = key_of(l, binding, it, depth < GRAPH_MAX_REPEAT_DEPTH ? depth : GRAPH_MAX_REPEAT_DEPTH);
    seen s = {binding, values_hash(values, n)};
    int32_t at;
    if (strmap_get(&l->keys, key, &at)) {
        l->recs.v[at] = s; /* a step run again in the same iteration: the last reading counts */
        return;
    }
    vec_push(&l->a, &l->recs, s);
    strmap_put(&l->keys, key, l->recs.n - 1);
}

static int on_value(void *ctx, int32_t value, const int64_t *iters, int depth, const float *data, int64_t n) {
    loc *l = ctx;
    int32_t b = l->probe_of[value];
    if (b < 0) return 0;
    l->r->compared++;
    int32_t at;
    bool have = strmap_get(&l->keys, key_of(l, b, iters, depth), &at);
    if (have && l->recs.v[at].hash == values_hash(data, n)) return 0;
    locate_result *r = l->r;
    r->found = true;
    r->missing = !have;
    r->value = value;
    r->binding = b;
    r->op = graph_val(l->g, value)->def;
    r->depth = depth;
    for (int k = 0; k < depth; k++) r->iters[k] = iters[k];
    r->numel = n;
    l->want = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(l->want, data, sizeof(float) * (size_t)n);
    return 1;
}

static void on_capture(void *ctx, int32_t binding, const uint32_t *iters, int depth, const float *values, int64_t n) {
    loc *l = ctx;
    if (binding != l->r->binding || depth != l->r->depth) return;
    for (int k = 0; k < depth; k++)
        if ((int64_t)iters[k] != l->r->iters[k]) return;
    if (!l->got) l->got = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(l->got, values, sizeof(float) * (size_t)n);
}

/* Coordinates of element e of the binding's tensor and the tile holding it. */
static void where(const pkg_binding *b, int64_t e, locate_result *r) {
    const layout *lay = &b->layout;
    int64_t shard[LAYOUT_MAX_RANK] = {0}, rep[LAYOUT_MAX_RANK] = {0};
    r->rank = lay->rank;
    for (int a = lay->rank - 1; a >= 0; a--) {
        r->coord[a] = e % lay->dim[a];
        e /= lay->dim[a];
        shard[a] = r->coord[a] / lay->block[a];
    }
    r->tile = layout_tile(lay, shard, rep);
}

int driver_locate(const graph *g, const package *p, const graph_numerics *plan, float *const *inputs, bool quiet,
                  locate_result *r, diag *d) {
    memset(r, 0, sizeof *r);
    r->binding = -1;
    loc l = {.g = g, .p = p, .r = r};
    arena_init(&l.a);
    l.probe_of = xmalloc(sizeof(int32_t) * (size_t)(g->values.n + 1));
    for (int32_t v = 0; v < g->values.n; v++) l.probe_of[v] = -1;
    for (int32_t i = 0; i < p->bindings.n; i++) {
        const pkg_binding *b = &p->bindings.v[i];
        int32_t v = b->role == PKG_PROBE ? graph_lookup(g, b->name) : -1;
        if (v >= 0 && graph_type_numel(&graph_val(g, v)->type) == sim_binding_numel(b)) {
            l.probe_of[v] = i;
            r->probes++;
        }
    }
    sim_options so = {.quiet = quiet, .probe = on_probe, .probe_ctx = &l};
    sim_stats st;
    int32_t nout = graph_outputs(g, NULL, 0);
    float **outs = xcalloc((size_t)nout + 1, sizeof(float *));
    int rc = sim_run(p, &so, inputs, outs, &st, d);
    sim_stats_free(&st);
    ref_options eo = {.plan = plan, .quiet = quiet, .what = "locate (plan-exact)", .on_value = on_value, .on_value_ctx = &l};
    float **ref = xcalloc((size_t)nout + 1, sizeof(float *));
    if (rc == 0) {
        rc = ref_run(g, &eo, inputs, ref, d);
        if (rc == 1) rc = 0; /* stopped at the first difference */
    }
    if (rc == 0 && r->found && !r->missing) {
        so.probe = on_capture;
        float **again = xcalloc((size_t)nout + 1, sizeof(float *));
        rc = sim_run(p, &so, inputs, again, &st, d);
        sim_stats_free(&st);
        for (int32_t j = 0; j < nout; j++) free(again[j]);
        free(again);
        if (rc == 0 && l.got) {
            r->diff = num_mismatches(l.got, l.want, (size_t)r->numel);
            if (r->diff.first >= 0) where(&p->bindings.v[r->binding], r->diff.first, r);
        }
    }
    for (int32_t j = 0; j < nout; j++) {
        free(outs[j]);
        free(ref[j]);
    }
    free(outs);
    free(ref);
    free(l.want);
    free(l.got);
    free(l.probe_of);
    strmap_free(&l.keys);
    arena_free(&l.a);
    return rc;
}
