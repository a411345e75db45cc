/* place.c: bump placement of buffers and assembly of the package. */
#include "place.h"

#include <stdlib.h>
#include <string.h>

enum { ALIGN = 16 }; /* bytes: every buffer starts on a 16-byte boundary */

typedef struct placer {
    const mid_program *mp;
    const low_program *lp;
    const int32_t *buf_of;
    const machine *m;
    package *pkg;
    uint32_t *addr;      /* per buffer */
    int32_t *tensor_of;  /* buffer -> its storage tensor */
    diag *d;
    uint8_t *blob;       /* parameter bytes being gathered (malloc'd) */
    uint64_t blob_bytes, blob_cap;
} placer;

static uint32_t align_up(uint64_t x) { return (uint32_t)((x + ALIGN - 1) / ALIGN * ALIGN); }


/* Names the largest buffers in a does-not-fit message. */
static void largest(const placer *p, char *buf, size_t cap) {
    int32_t n = p->lp->bufs.n, best[3] = {-1, -1, -1};
    for (int32_t i = 0; i < n; i++)
        for (int k = 0; k < 3; k++)
            if (best[k] < 0 || p->lp->bufs.v[i].bytes > p->lp->bufs.v[best[k]].bytes) {
                for (int j = 2; j > k; j--) best[j] = best[j - 1];
                best[k] = i;
                break;
            }
    size_t at = 0;
    for (int k = 0; k < 3 && best[k] >= 0; k++) {
        char sz[32];
        fmt_bytes(sz, sizeof sz, p->lp->bufs.v[best[k]].bytes);
        at += (size_t)snprintf(buf + at, at < cap ? cap - at : 0, "%s'%s' %s", k ? ", " : "",
                               p->lp->strings.v + p->lp->bufs.v[best[k]].label, sz);
    }
}

static int assign_addresses(placer *p, place_stats *st) {
    int32_t n = p->lp->bufs.n;
    uint64_t at = p->m->tile_memory_base;
    /* Initialised buffers first: the loader writes only below loader_limit. */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t b = 0; b < n; b++) {
            bool init = p->tensor_of[b] >= 0 && mid_t(p->mp, p->tensor_of[b])->kind == MT_PARAM;
            if (init != (pass == 0)) continue;
            p->addr[b] = (uint32_t)at;
            at = align_up(at + p->lp->bufs.v[b].bytes);
        }
        if (pass == 0) st->param_bytes = (uint32_t)(at - p->m->tile_memory_base);
        uint64_t limit = pass == 0 ? p->m->loader_limit : p->m->tile_memory_end;
        if (at > limit) {
            char big[512], need[32], have[32];
            largest(p, big, sizeof big);
            fmt_bytes(need, sizeof need, (double)(at - p->m->tile_memory_base));
            fmt_bytes(have, sizeof have, (double)(limit - p->m->tile_memory_base));
            return diag_fail(p->d,
                             "%s: error: does not fit: %s needs %s per tile %s, machine '%s' has %s (largest buffers: %s)",
                             p->mp->g->path, p->mp->g->name, need, pass == 0 ? "of parameters" : "in all", p->m->name,
                             have, big);
        }
    }
    st->tile_bytes = (uint32_t)(at - p->m->tile_memory_base);
    st->buffers = n;
    return 0;
}

static low_addr absolute(const placer *p, low_addr a) {
    TS_ASSERT(a.buf < (uint32_t)p->lp->bufs.n);
    return (low_addr){.buf = LOW_ABSOLUTE, .off = p->addr[a.buf] + a.off, .iter_stride = a.iter_stride};
}

static void copy_program(placer *p) {
    low_program *dst = &p->pkg->prog;
    arena *a = &p->pkg->arena;
    const low_program *src = p->lp;
    for (int32_t i = 0; i < src->steps.n; i++) vec_push(a, &dst->steps, src->steps.v[i]);
    for (int32_t i = 0; i < src->runs.n; i++) {
        low_run r = src->runs.v[i];
        for (int k = 0; k < LOW_MAX_OPERANDS; k++)
            r.ptr[k] = low_run_uses(&r, k) ? absolute(p, r.ptr[k]) : (low_addr){.buf = LOW_ABSOLUTE};
        vec_push(a, &dst->runs, r);
    }
    for (int32_t i = 0; i < src->frags.n; i++) {
        low_frag f = src->frags.v[i];
        f.src = absolute(p, f.src);
        f.dst = absolute(p, f.dst);
        vec_push(a, &dst->frags, f);
    }
    for (int32_t i = 0; i < src->dst_tiles.n; i++) vec_push(a, &dst->dst_tiles, src->dst_tiles.v[i]);
    for (int32_t i = 0; i < src->strings.n; i++) vec_push(a, &dst->strings, src->strings.v[i]);
}

/* ---- parameter data ------------------------------------------------------------- */

typedef struct shard_img {
    const float *values;   /* one layer of the parameter, row-major */
    dtype dt;
    int scale;
    uint8_t *bytes;        /* that layer's storage in one shard */
} shard_img;

static void encode_span(void *ctx, const int64_t *s, int64_t off, int64_t elem, int64_t n) {
    (void)s;
    shard_img *c = ctx;
    num_encode_buf(c->dt, c->scale, c->values + elem, c->bytes + off, (size_t)n);
}

static void blob_append(placer *p, const uint8_t *b, uint64_t n) {
    if (p->blob_bytes + n > p->blob_cap) {
        while (p->blob_bytes + n > p->blob_cap) p->blob_cap = p->blob_cap ? p->blob_cap * 2 : 1 << 20;
        p->blob = xrealloc(p->blob, p->blob_cap);
    }
    memcpy(p->blob + p->blob_bytes, b, n);
    p->blob_bytes += n;
}

static void next_shard(const layout *l, int64_t *s) {
    for (int a = l->rank - 1; a >= 0; a--) {
        if (++s[a] < l->parts[a]) return;
        s[a] = 0;
    }
}

/* A parameter's shards, encoded layer by layer (a stacked parameter is
 * generated one layer at a time, never whole in f32), then one blob range per
 * shard that every replica's tile points at. */
static int add_param(placer *p, int32_t t) {
    const mid_tensor *mt = mid_t(p->mp, t);
    const graph *g = p->mp->g;
    int64_t layer = graph_type_numel(&graph_val(g, mt->value)->type) / mt->stack;
    const layout *l = &mt->lay;
    int64_t sb = layout_shard_bytes(l), shards = layout_shards(l), stride = sb * mt->stack;
    uint8_t *img = xcalloc((size_t)(stride * shards), 1); /* every shard's image, layer after layer */
    float *values = xmalloc(sizeof(float) * (size_t)(layer ? layer : 1));
    int64_t s[LAYOUT_MAX_RANK] = {0}, reps = layout_replicas(l);
    for (int64_t i = 0; i < mt->stack; i++) {
        if (graph_param_values_at(g, mt->param_op, false, i * layer, layer, values, p->d)) {
            free(values);
            free(img);
            return -1;
        }
        memset(s, 0, sizeof s);
        for (int64_t k = 0; k < shards; k++, next_shard(l, s)) {
            shard_img c = {values, mt->dtype, mt->scale, img + k * stride + i * sb};
            layout_spans(l, s, encode_span, &c);
        }
    }
    free(values);
    int32_t b = p->buf_of[t], *tiles = xmalloc(sizeof(int32_t) * (size_t)reps);
    memset(s, 0, sizeof s);
    for (int64_t k = 0; k < shards; k++) {
        uint64_t off = p->blob_bytes;
        blob_append(p, img + k * stride, (uint64_t)stride);
        int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
        layout_shard_extent(l, s, lo, hi);
        int64_t nt = layout_owners(l, lo, tiles, reps);
        TS_ASSERT(nt <= reps);
        for (int64_t r = 0; r < nt; r++) {
            pkg_segment seg = {.tile = (uint32_t)tiles[r], .addr = p->addr[b], .bytes = (uint32_t)stride, .blob_off = off};
            vec_push(&p->pkg->arena, &p->pkg->segments, seg);
        }
        next_shard(l, s);
    }
    free(tiles);
    free(img);
    return 0;
}

static int cmp_segment(const void *a, const void *b) {
    const pkg_segment *x = a, *y = b;
    if (x->tile != y->tile) return x->tile < y->tile ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Binds tensor t as graph value v: the binding takes the value's name (a
 * repeat's result lives in the tensor of its body argument, named after
 * that). */
static void add_binding(placer *p, int32_t t, int32_t v, pkg_role role, int32_t step) {
    const mid_tensor *mt = mid_t(p->mp, t);
    int32_t s = mid_storage(p->mp, t);
    pkg_binding b = {.name = arena_strdup(&p->pkg->arena, graph_val(p->mp->g, v)->name),
                     .role = (uint8_t)role,
                     .dtype = mt->dtype,
                     .scale = mt->scale,
                     .layout = mt->lay,
                     .addr = p->addr[p->buf_of[s]],
                     .step = step};
    vec_push(&p->pkg->arena, &p->pkg->bindings, b);
}

/* Probes in program order; a value complete at the start of a body is read
 * at its REPEAT step, each iteration. */
static void add_probes(placer *p, const low_prim_steps *steps) {
    for (int32_t i = 0; i < p->mp->probes.n; i++) {
        const mid_probe *pb = &p->mp->probes.v[i];
        int32_t step = pb->after >= 0 ? steps[pb->after].last : pb->scope >= 0 ? steps[pb->scope].first : -1;
        if (step >= 0) add_binding(p, pb->tensor, pb->value, PKG_PROBE, step);
    }
}

int place_package(const mid_program *mp, const low_program *lp, const int32_t *buf_of, const low_prim_steps *prim_steps,
                  const char *meta_json, package *out, place_stats *st, diag *d) {
    memset(st, 0, sizeof *st);
    package_init(out);
    out->machine = *mp->m;
    out->fingerprint = machine_fingerprint(mp->m);
    placer p = {.mp = mp, .lp = lp, .buf_of = buf_of, .m = mp->m, .pkg = out, .d = d,
                .addr = xcalloc((size_t)lp->bufs.n + 1, sizeof(uint32_t)),
                .tensor_of = xmalloc(sizeof(int32_t) * ((size_t)lp->bufs.n + 1))};
    for (int32_t b = 0; b < lp->bufs.n; b++) p.tensor_of[b] = -1;
    for (int32_t t = 0; t < mp->tensors.n; t++)
        if (buf_of[t] >= 0) p.tensor_of[buf_of[t]] = t;
    int rc = assign_addresses(&p, st);
    if (rc == 0) {
        copy_program(&p);
        for (int32_t t = 0; t < mp->tensors.n && rc == 0; t++)
            if (buf_of[t] >= 0 && mid_t(mp, t)->kind == MT_PARAM) rc = add_param(&p, t);
        if (out->segments.n) qsort(out->segments.v, (size_t)out->segments.n, sizeof(pkg_segment), cmp_segment);
        /* The package owns its blob through its arena, as a loaded one does. */
        out->blob = arena_alloc(&out->arena, p.blob_bytes);
        out->blob_bytes = p.blob_bytes;
        if (p.blob_bytes) memcpy(out->blob, p.blob, p.blob_bytes);
        for (int32_t i = 0; i < mp->inputs.n; i++) add_binding(&p, mp->inputs.v[i], mid_t(mp, mp->inputs.v[i])->value, PKG_INPUT, -1);
        int32_t nout = graph_outputs(mp->g, NULL, 0), *vals = xmalloc(sizeof(int32_t) * ((size_t)nout + 1));
        graph_outputs(mp->g, vals, nout);
        TS_ASSERT(nout == mp->outputs.n);
        for (int32_t i = 0; i < mp->outputs.n; i++) add_binding(&p, mp->outputs.v[i], vals[i], PKG_OUTPUT, -1);
        free(vals);
        add_probes(&p, prim_steps);
        out->meta = arena_strdup(&out->arena, meta_json ? meta_json : "{}");
    }
    free(p.addr);
    free(p.tensor_of);
    free(p.blob);
    if (rc) package_free(out);
    return rc;
}
