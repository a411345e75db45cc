/* lower.c: mid -> low. Each prim becomes compute sets of kernel runs (one
 * run per tile share, from the layouts' shards) and, for copies, an exchange
 * phase of fragments cut from the ownership runs. Repeat bodies are lowered
 * once inside REPEAT ... END; a stacked slice advances one shard per
 * iteration through its address's iteration stride. */
#include "lower.h"

#include <stdlib.h>
#include <string.h>

_Static_assert((int)MID_MAX_ROW_PARTS <= (int)KERNEL_MAX_PARTS, "the kernel joins every part a plan makes");

/* The steps a mid prim became: first is its first step (a REPEAT prim's
 * REPEAT step), last the last step emitted up to and including it (-1 when
 * none has been yet), so a value a prim completes is complete after `last`. */
typedef struct prim_steps {
    int32_t first, last;
} prim_steps;

typedef struct lx {
    const mid_program *p;
    const machine *m;
    low_program *out;
    arena *a;
    diag *d;
    int32_t *buf_of;    /* storage tensor -> buffer id, -1 if none yet */
    prim_steps *steps_of;       /* per prim: the steps it became */
    int32_t repeat;     /* innermost repeat prim being lowered, -1 at top */
    int32_t prim;       /* prim being lowered, for labels and messages */
    /* The last copy that left own partials (mid_prim.own): its destination,
     * and per tile the partial left (-1: none) and where it starts in the
     * copy's source. */
    int32_t own_dst;
    int32_t *own_slot;
    int64_t *own_off;
    /* A copy's runs, kept between copies and reset (not freed), so each
     * copy grows into pages the last one mapped: [0] remote and [1] on-tile
     * runs of the whole copy, then two per range of a parallel walk. */
    arena *copy_scratch;
    int ncopy_scratch;
} lx;

static uint32_t intern(lx *x, const char *s) {
    uint32_t off = (uint32_t)x->out->strings.n;
    for (const char *c = s;; c++) {
        vec_push(x->a, &x->out->strings, *c);
        if (!*c) break;
    }
    return off;
}

/* ---- addresses ---------------------------------------------------------------- */

static int32_t buffer(lx *x, int32_t t) {
    int32_t s = mid_storage(x->p, t);
    if (x->buf_of[s] < 0) {
        const mid_tensor *mt = mid_t(x->p, s);
        int64_t bytes = layout_shard_bytes(&mt->lay) * mt->stack;
        TS_ASSERT(bytes < (1ll << 32));
        low_buf b = {.bytes = (uint32_t)bytes, .label = intern(x, mt->name), .first = -1, .last = -1,
                     .role = (uint8_t)(mt->kind == MT_PARAM ? LOW_BUF_PARAM : mt->kind == MT_INPUT ? LOW_BUF_INPUT : LOW_BUF_TEMP)};
        vec_push(x->a, &x->out->bufs, b);
        x->buf_of[s] = x->out->bufs.n - 1;
    }
    return x->buf_of[s];
}

/* The repeat slice whose bytes t is (itself, or through free reshapes), or
 * -1. */
static int32_t slice_through(const mid_program *p, int32_t t) {
    for (;;) {
        const mid_tensor *mt = mid_t(p, t);
        if (mt->slice_of >= 0) return t;
        if (mt->alias_of < 0) return -1;
        t = mt->alias_of;
    }
}

/* Tensor t at byte offset off inside its shard. */
static kernel_addr addr(lx *x, int32_t t, int64_t off) {
    int32_t b = buffer(x, t), sl = slice_through(x->p, t);
    kernel_addr a = {.buf = (uint32_t)b, .off = (uint32_t)off, .iter_stride = 0};
    if (sl >= 0) a.iter_stride = (int32_t)layout_shard_bytes(&mid_t(x->p, sl)->lay);
    return a;
}

/* ---- shards ---------------------------------------------------------------------- */

typedef void (*shard_fn)(lx *x, const int64_t *s, int32_t tile, void *ctx);
/* Calls fn for every shard of l on its replica 0's tile, in order of the
 * shard grid, and with `replicas` on every replica's tile too: a replicated
 * result (a late cast in its consumer's layout, expand.c) is computed by
 * each of its tiles, from operands replicated as it is. */
static void each_shard_of(lx *x, const layout *l, bool replicas, shard_fn fn, void *ctx) {
    int64_t s[LAYOUT_MAX_RANK] = {0}, r[LAYOUT_MAX_RANK] = {0}, nr = replicas ? layout_replicas(l) : 1;
    for (;;) {
        for (int64_t j = 0; j < nr; j++) {
            for (int64_t q = j, a = l->nrep - 1; a >= 0 && replicas; a--) r[a] = q % l->rep[a], q /= l->rep[a];
            fn(x, s, layout_tile(l, s, r), ctx);
        }
        int a = l->rank - 1;
        for (; a >= 0; a--) {
            if (++s[a] < l->parts[a]) break;
            s[a] = 0;
        }
        if (a < 0) return;
    }
}

static void each_shard(lx *x, const layout *l, shard_fn fn, void *ctx) { each_shard_of(x, l, false, fn, ctx); }

/* ---- steps and runs -------------------------------------------------------------------- */

static void label_step(lx *x, low_step *st, const char *what) {
    char name[300];
    const mid_prim *pr = mid_p(x->p, x->prim);
    snprintf(name, sizeof name, "%s:%s", graph_op_name(x->p->g, pr->origin), what);
    st->label = intern(x, name);
}

/* Closes a compute set made of the runs from `first` on (sorted by tile,
 * stable in emission order within a tile). */
static void end_compute(lx *x, uint32_t first, const char *what) {
    uint32_t n = (uint32_t)x->out->runs.n - first;
    if (!n) return;
    /* Stable: qsort is not, so sort (tile, index) keys. */
    kernel_run *r = x->out->runs.v + first;
    bool sorted = true;
    for (uint32_t i = 1; i < n && sorted; i++) sorted = r[i - 1].tile <= r[i].tile;
    if (!sorted) {
        kernel_run *tmp = xmalloc(sizeof(kernel_run) * n);
        uint32_t *idx = xmalloc(sizeof(uint32_t) * n);
        /* Counting sort by tile keeps emission order within a tile. */
        uint32_t tiles = x->m->tiles, *count = xcalloc(tiles + 1, sizeof(uint32_t));
        for (uint32_t i = 0; i < n; i++) count[r[i].tile + 1]++;
        for (uint32_t t = 0; t < tiles; t++) count[t + 1] += count[t];
        for (uint32_t i = 0; i < n; i++) idx[count[r[i].tile]++] = i;
        for (uint32_t i = 0; i < n; i++) tmp[i] = r[idx[i]];
        memcpy(r, tmp, sizeof(kernel_run) * n);
        free(tmp);
        free(idx);
        free(count);
    }
    low_step st = {.kind = LOW_STEP_COMPUTE, .first = first, .count = n};
    label_step(x, &st, what);
    vec_push(x->a, &x->out->steps, st);
}

static kernel_run *new_run(lx *x, kernel_id k, int32_t tile) {
    kernel_run r;
    memset(&r, 0, sizeof r);
    r.kernel = (uint8_t)k;
    r.tile = (uint32_t)tile;
    r.acc = DT_F32;
    for (int d = 0; d < KERNEL_MAX_BOX; d++) r.n[d] = 1;
    vec_push(x->a, &x->out->runs, r);
    return &x->out->runs.v[x->out->runs.n - 1];
}

static void set_operand(lx *x, kernel_run *r, int i, int32_t t, int64_t off) {
    const mid_tensor *mt = mid_t(x->p, t);
    r->ptr[i] = addr(x, t, off);
    r->dt[i] = (uint8_t)mt->dtype;
    r->scale[i] = mt->scale;
}

/* Emits a run of mid's run templates (mid/runs.c) on the sink's tile. */
typedef struct run_sink {
    lx *x;
    int32_t tile;
} run_sink;

static void emit_run(void *vctx, const mid_run *m) {
    run_sink *c = vctx;
    kernel_run *r = new_run(c->x, (kernel_id)m->r.kernel, c->tile);
    *r = m->r;
    r->tile = (uint32_t)c->tile;
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++)
        if (m->t[i] >= 0) set_operand(c->x, r, i, m->t[i], m->off[i]);
}

/* ---- boxes: elementwise-like kernels over up to four strided axes ------------------------ */

/* Emits one run per index of the axes beyond the kernel's `keep` innermost
 * ones; the template gives kernel, dtypes and parameters, base offsets come
 * from off[]. */
typedef struct box_emit {
    kernel_id kernel;
    int32_t tile;
    int32_t t[KERNEL_BOX_OPS];         /* tensors per operand */
    int64_t off[KERNEL_BOX_OPS];       /* base offsets */
    int keep;                          /* innermost axes one run can take */
    const kernel_run *tmpl;
} box_emit;

static void emit_box(lx *x, const kernel_box *b, const box_emit *e) {
    kernel_run shape = *e->tmpl;
    shape.kernel = (uint8_t)e->kernel;
    kernel_box_run(b, e->keep, &shape);
    int outer = b->nd > e->keep ? b->nd - e->keep : 0;
    int64_t idx[LAYOUT_MAX_RANK] = {0};
    for (;;) {
        kernel_run *r = new_run(x, e->kernel, e->tile);
        uint32_t tile = r->tile;
        *r = shape;
        r->tile = tile;
        for (int i = 0; i < b->nops; i++) {
            int64_t off = e->off[i];
            for (int a = 0; a < outer; a++) off += idx[a] * b->st[i][a];
            set_operand(x, r, i, e->t[i], off);
        }
        int a = outer - 1;
        for (; a >= 0; a--) {
            if (++idx[a] < b->n[a]) break;
            idx[a] = 0;
        }
        if (a < 0) return;
    }
}

/* ---- prims ------------------------------------------------------------------------------- */

typedef struct ew_ctx {
    const mid_prim *pr;
    const kernel_run *tmpl;
} ew_ctx;

static void ewise_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    ew_ctx *c = vctx;
    const mid_prim *pr = c->pr;
    int64_t lo_[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], ext[LAYOUT_MAX_RANK];
    const layout *lo = &mid_t(x->p, pr->out[0])->lay;
    layout_shard_extent(lo, s, lo_, hi);
    for (int a = 0; a < lo->rank; a++) ext[a] = hi[a] - lo_[a];
    kernel_box b = mid_ewise_box(x->p, pr, ext);
    box_emit e = {.kernel = KERNEL_K_EWISE, .tile = tile, .keep = KERNEL_MAX_BOX, .tmpl = c->tmpl};
    e.t[0] = pr->out[0];
    for (int i = 0; i < pr->nin; i++) e.t[1 + i] = pr->in[i];
    emit_box(x, &b, &e);
}

static void lower_ewise(lx *x, const mid_prim *pr) {
    kernel_run tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    tmpl.ew = (uint8_t)pr->ew;
    tmpl.acc = (uint8_t)pr->acc;
    tmpl.f[0] = pr->f[0];
    ew_ctx c = {pr, &tmpl};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard_of(x, &mid_t(x->p, pr->out[0])->lay, true, ewise_shard, &c);
    end_compute(x, first, kernel_ew_names[pr->ew]);
}

/* Softmax and layer norm: rows of this shard's part of the last axis (the
 * whole axis, unless a layer norm's rows are cut over tiles); LN_MOMENTS
 * likewise over its input's shard, writing one statistics triple per row. */
static void rows_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    ew_ctx *c = vctx;
    const mid_prim *pr = c->pr;
    bool moments = pr->kind == MID_LN_MOMENTS;
    const layout *lo = &mid_t(x->p, pr->out[0])->lay, *li = &mid_t(x->p, pr->in[0])->lay, *lr = moments ? li : lo;
    int64_t lo_[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
    layout_shard_extent(lr, s, lo_, hi);
    int last = lr->rank - 1;
    int64_t parts = mid_layer_norm_parts(x->p, pr), ext[LAYOUT_MAX_RANK];
    for (int a = 0; a < lr->rank; a++) ext[a] = hi[a] - lo_[a];
    kernel_box b = mid_rows_box(x->p, pr, ext);
    kernel_run tmpl = *c->tmpl;
    kernel_id k = moments ? KERNEL_K_LN_MOMENTS : pr->kind == MID_SOFTMAX ? KERNEL_K_SOFTMAX : KERNEL_K_LAYER_NORM;
    box_emit e = {.kernel = k, .tile = tile, .keep = 1, .tmpl = &tmpl};
    e.t[0] = pr->out[0];
    e.t[1] = pr->in[0];
    if (pr->kind == MID_LAYER_NORM) { /* gamma, beta, and the parts' statistics (mid_rows_box) */
        e.t[2] = pr->in[1];
        e.t[3] = pr->in[2];
        if (parts) e.t[4] = pr->in[3];
    }
    /* The kernel's row count is n[0] with stride[i][0]; emit_box fills the
     * innermost box axis, so move it to the front. */
    TS_ASSERT(!parts || b.n[b.nd - 1] == 1 || b.st[4][b.nd - 1] == parts * KERNEL_MOMENTS_BYTES);
    TS_ASSERT(!moments || b.n[b.nd - 1] == 1 || b.st[0][b.nd - 1] == KERNEL_MOMENTS_BYTES);
    size_t before = (size_t)x->out->runs.n;
    emit_box(x, &b, &e);
    for (size_t i = before; i < (size_t)x->out->runs.n; i++) {
        kernel_run *r = &x->out->runs.v[i];
        r->n[0] = r->n[KERNEL_MAX_BOX - 1];
        r->n[1] = (uint32_t)(hi[last] - lo_[last]);
        r->n[2] = (uint32_t)parts;
        r->n[3] = 1;
        for (int k2 = 0; k2 < KERNEL_STRIDED_OPERANDS; k2++) {
            r->stride[k2][0] = r->stride[k2][KERNEL_MAX_BOX - 1];
            r->stride[k2][1] = r->stride[k2][2] = r->stride[k2][3] = 0;
        }
        /* An AMP-left result (the next GEMM's operand, absorb.c's panels rewrite) is written in panels. */
        if (lo->enc == ENC_AMP_LEFT) r->stride[0][1] = (int32_t)layout_panel_stride(lo);
    }
    if (moments && pr->nout > 1) { /* the own slot of the gathered statistics: part s[last] of each row */
        const layout *lg = &mid_t(x->p, pr->out[1])->lay;
        int64_t P = lg->dim[lg->rank - 2];
        for (size_t i = before; i < (size_t)x->out->runs.n; i++) {
            kernel_run *r = &x->out->runs.v[i];
            int64_t row = (int64_t)(r->ptr[0].off - addr(x, pr->out[0], 0).off) / KERNEL_MOMENTS_BYTES;
            set_operand(x, r, 2, pr->out[1], (row * P + s[last]) * KERNEL_MOMENTS_BYTES);
            r->n[2] = (uint32_t)P;
        }
    }
}

static void lower_rows(lx *x, const mid_prim *pr) {
    kernel_run tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    tmpl.f[0] = pr->f[0];
    if (pr->kind == MID_LAYER_NORM) tmpl.acc = (uint8_t)pr->acc;
    ew_ctx c = {pr, &tmpl};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard(x, &mid_t(x->p, pr->kind == MID_LN_MOMENTS ? pr->in[0] : pr->out[0])->lay, rows_shard, &c);
    end_compute(x, first, mid_kind_names[pr->kind]);
}

/* GEMM: mid_gemm_runs of each result shard; the A and B shards on the same
 * tile are its operands. */
static void gemm_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    const mid_prim *pr = ((ew_ctx *)vctx)->pr;
    const layout *lc = &mid_t(x->p, pr->out[0])->lay;
    int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], ext[LAYOUT_MAX_RANK], k0, k1;
    layout_shard_extent(lc, s, lo, hi);
    for (int a = 0; a < lc->rank; a++) ext[a] = hi[a] - lo[a];
    mid_gemm_k_range(x->p, pr, s, &k0, &k1);
    run_sink c = {x, tile};
    mid_gemm_runs(x->p, pr, ext, k1 - k0, emit_run, &c);
}

static void lower_gemm(lx *x, const mid_prim *pr) {
    ew_ctx c = {pr, NULL};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard(x, &mid_t(x->p, pr->out[0])->lay, gemm_shard, &c);
    end_compute(x, first, "gemm");
}

/* GEMM_EPI: mid_gemm_epi_runs of each result shard. */
static void gemm_epi_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    const mid_prim *pr = ((ew_ctx *)vctx)->pr;
    const layout *lc = &mid_t(x->p, pr->out[0])->lay;
    int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], ext[LAYOUT_MAX_RANK];
    layout_shard_extent(lc, s, lo, hi);
    for (int a = 0; a < lc->rank; a++) ext[a] = hi[a] - lo[a];
    run_sink c = {x, tile};
    mid_gemm_epi_runs(x->p, pr, ext, emit_run, &c);
}

static void lower_gemm_epi(lx *x, const mid_prim *pr) {
    ew_ctx c = {pr, NULL};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard(x, &mid_t(x->p, pr->out[0])->lay, gemm_epi_shard, &c);
    end_compute(x, first, kernel_epi_names[pr->epi]);
}

/* Whole-shard kernels: the partial sums, the optimizers, sums of squares.
 * They sweep every stored element; padding is zero and stays zero. */
typedef struct flat_ctx {
    const mid_prim *pr;
} flat_ctx;

static void flat_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    (void)s;
    const mid_prim *pr = ((flat_ctx *)vctx)->pr;
    run_sink c = {x, tile};
    mid_run m = mid_flat_run(x->p, pr);
    emit_run(&c, &m);
    /* A REDUCE reads the tile's own partial where its GEMM left it (lower_copy kept it there). */
    kernel_run *r = &x->out->runs.v[x->out->runs.n - 1];
    if (pr->kind == MID_REDUCE && pr->own && x->own_dst == pr->in[0] && x->own_slot[tile] >= 0) {
        set_operand(x, r, 3, pr->in[pr->nin - 1], x->own_off[tile]);
        r->own = (uint8_t)(x->own_slot[tile] + 1);
    }
}

/* Sums of squares read only a shard's elements, never its padding (a
 * reused buffer's padding holds old bytes): one run per contiguous span,
 * in storage order, each continuing the column's chain. */
typedef struct sumsq_ctx {
    lx *x;
    const mid_prim *pr;
    int32_t tile;
    int64_t start, n;  /* pending span: byte offset, elements */
} sumsq_ctx;

static void sumsq_flush(sumsq_ctx *c) {
    if (!c->n) return;
    kernel_run *r = new_run(c->x, KERNEL_K_SUMSQ, c->tile);
    set_operand(c->x, r, 0, c->pr->out[0], (int64_t)c->pr->column * 4);
    set_operand(c->x, r, 1, c->pr->in[0], c->start);
    r->n[0] = (uint32_t)c->n;
    c->n = 0;
}

static void sumsq_span(void *vctx, const int64_t *s, int64_t off, int64_t elem, int64_t n) {
    (void)s, (void)elem;
    sumsq_ctx *c = vctx;
    int64_t eb = mid_t(c->x->p, c->pr->in[0])->lay.elem_bytes;
    if (c->n && c->start + c->n * eb == off) {
        c->n += n;
        return;
    }
    sumsq_flush(c);
    c->start = off;
    c->n = n;
}

static void sumsq_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    sumsq_ctx c = {x, ((flat_ctx *)vctx)->pr, tile, 0, 0};
    layout_spans(&mid_t(x->p, c.pr->in[0])->lay, s, sumsq_span, &c);
    sumsq_flush(&c);
}

static void lower_flat(lx *x, const mid_prim *pr) {
    flat_ctx c = {pr};
    uint32_t first = (uint32_t)x->out->runs.n;
    if (pr->kind == MID_SUMSQ) each_shard(x, &mid_t(x->p, pr->in[0])->lay, sumsq_shard, &c);
    else each_shard(x, &mid_t(x->p, pr->out[0])->lay, flat_shard, &c);
    end_compute(x, first, mid_kind_names[pr->kind]);
}

static void lower_clip_coef(lx *x, const mid_prim *pr) {
    uint32_t first = (uint32_t)x->out->runs.n;
    const layout *l = &mid_t(x->p, pr->in[0])->lay;
    kernel_run *r = new_run(x, KERNEL_K_CLIP_COEF, layout_tile(l, (int64_t[LAYOUT_MAX_RANK]){0}, (int64_t[LAYOUT_MAX_RANK]){0}));
    set_operand(x, r, 0, pr->out[0], 0);
    set_operand(x, r, 1, pr->in[0], 0);
    r->n[0] = (uint32_t)layout_block_elems(l);
    r->f[0] = pr->f[0];
    end_compute(x, first, "clip_coef");
}

/* gather: per result shard (a block of the table's columns, every index),
 * one run over the tile's own table columns and its replica of the indices;
 * the result and the table are row-major, rows their blocks' width apart. */
static void gather_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    const mid_prim *pr = ((flat_ctx *)vctx)->pr;
    const layout *lo = &mid_t(x->p, pr->out[0])->lay;
    int64_t lo_[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
    layout_shard_extent(lo, s, lo_, hi);
    int64_t ext[LAYOUT_MAX_RANK];
    for (int a = 0; a < lo->rank; a++) ext[a] = hi[a] - lo_[a];
    kernel_run *r = new_run(x, KERNEL_K_GATHER, tile);
    *r = mid_gather_run(x->p, pr, ext);
    r->tile = (uint32_t)tile;
    set_operand(x, r, 0, pr->out[0], 0);
    set_operand(x, r, 1, pr->in[0], 0);
    set_operand(x, r, 2, pr->in[1], 0);
}

static void lower_gather(lx *x, const mid_prim *pr) {
    flat_ctx c = {pr};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard(x, &mid_t(x->p, pr->out[0])->lay, gather_shard, &c);
    end_compute(x, first, "gather");
}

/* reduce_sum: the input shard's box, with the result's strides 0 along the
 * summed axes. */
static void reduce_sum_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    const mid_prim *pr = ((flat_ctx *)vctx)->pr;
    const layout *li = &mid_t(x->p, pr->in[0])->lay;
    int64_t a0[LAYOUT_MAX_RANK], a1[LAYOUT_MAX_RANK], ext[LAYOUT_MAX_RANK];
    layout_shard_extent(li, s, a0, a1);
    for (int a = 0; a < li->rank; a++) ext[a] = a1[a] - a0[a];
    kernel_box b = mid_reduce_sum_box(x->p, pr, ext);
    kernel_box_collapse(&b);
    kernel_run tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    box_emit e = {.kernel = KERNEL_K_REDUCE_SUM, .tile = tile, .keep = KERNEL_MAX_BOX, .tmpl = &tmpl};
    e.t[0] = pr->out[0];
    e.t[1] = pr->in[0];
    emit_box(x, &b, &e);
}

static void lower_reduce_sum(lx *x, const mid_prim *pr) {
    flat_ctx c = {pr};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard(x, &mid_t(x->p, pr->in[0])->lay, reduce_sum_shard, &c);
    end_compute(x, first, "reduce_sum");
}

/* FILL: the valid box of every shard and replica, in contiguous spans. */
typedef struct fill_ctx {
    lx *x;
    const mid_prim *pr;
    int32_t tile;
    int64_t start, len;  /* pending span, bytes */
} fill_ctx;

static void fill_flush(fill_ctx *c) {
    if (!c->len) return;
    const mid_tensor *t = mid_t(c->x->p, c->pr->out[0]);
    kernel_run *r = new_run(c->x, KERNEL_K_FILL, c->tile);
    set_operand(c->x, r, 0, c->pr->out[0], c->start);
    r->n[0] = (uint32_t)(c->len / t->lay.elem_bytes);
    r->f[0] = c->pr->f[0];
    c->len = 0;
}

/* Spans come in storage order; adjacent ones merge into one fill. */
static void fill_span(void *vctx, const int64_t *s, int64_t off, int64_t elem, int64_t n) {
    (void)s, (void)elem;
    fill_ctx *c = vctx;
    int64_t bytes = n * mid_t(c->x->p, c->pr->out[0])->lay.elem_bytes;
    if (c->len && c->start + c->len == off) {
        c->len += bytes;
        return;
    }
    fill_flush(c);
    c->start = off;
    c->len = bytes;
}

static void fill_shard_replicas(lx *x, const mid_prim *pr, const layout *l, const int64_t *s) {
    int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
    layout_shard_extent(l, s, lo, hi);
    int64_t reps = layout_replicas(l);
    int32_t *tiles = xmalloc(sizeof(int32_t) * (size_t)reps);
    int64_t nt = layout_owners(l, lo, tiles, reps);
    TS_ASSERT(nt <= reps);
    for (int64_t k = 0; k < nt; k++) {
        fill_ctx c = {x, pr, tiles[k], 0, 0};
        layout_spans(l, s, fill_span, &c);
        fill_flush(&c);
    }
    free(tiles);
}

static void fill_shard(lx *x, const int64_t *s, int32_t tile, void *vctx) {
    (void)tile;
    const mid_prim *pr = ((flat_ctx *)vctx)->pr;
    fill_shard_replicas(x, pr, &mid_t(x->p, pr->out[0])->lay, s);
}

static void lower_fill(lx *x, const mid_prim *pr) {
    flat_ctx c = {pr};
    uint32_t first = (uint32_t)x->out->runs.n;
    each_shard(x, &mid_t(x->p, pr->out[0])->lay, fill_shard, &c);
    end_compute(x, first, "fill");
}

/* ---- copies ----------------------------------------------------------------------------------- */

typedef struct copy_ctx {
    lx *x;
    const mid_prim *pr;
    VEC(layout_run) rem;   /* between tiles: exchange fragments */
    VEC(layout_run) loc;   /* on one tile: copy programs */
    arena *rem_a, *loc_a;  /* their storage (lx.copy_scratch), one arena each so they grow in place */
} copy_ctx;

static int copy_sink(void *vctx, const layout_run *run) {
    copy_ctx *c = vctx;
    if (run->src_tile == run->dst_tile) vec_push(c->loc_a, &c->loc, *run);
    else vec_push(c->rem_a, &c->rem, *run);
    return 0;
}

/* n scratch arenas of lx.copy_scratch from the k-th on, reset: two for
 * the copy, then two per thread (made once, so pointers to them hold). */
static arena *copy_scratch(lx *x, int k, int n) {
    if (!x->copy_scratch) {
        x->ncopy_scratch = 2 + 2 * util_threads();
        x->copy_scratch = xmalloc(sizeof(arena) * (size_t)x->ncopy_scratch);
        for (int i = 0; i < x->ncopy_scratch; i++) arena_init(&x->copy_scratch[i]);
    }
    TS_ASSERT(k + n <= x->ncopy_scratch);
    for (int i = k; i < k + n; i++) arena_reset(&x->copy_scratch[i]);
    return &x->copy_scratch[k];
}

/* count runs, uninitialized, in a (arena_grow does not zero what it adds). */
static layout_run *run_array(arena *a, int64_t count) {
    return arena_grow(a, NULL, 0, sizeof(layout_run) * (size_t)(count ? count : 1));
}

static void emit_copy_box(void *ctx, const layout_copy_box *b) {
    lx *x = ((void **)ctx)[0];
    const mid_prim *pr = ((void **)ctx)[1];
    kernel_run *r = new_run(x, KERNEL_K_COPY, b->tile);
    set_operand(x, r, 0, pr->out[0], b->dst);
    set_operand(x, r, 1, pr->in[0], b->src);
    r->dt[0] = r->dt[1] = DT_F32; /* bytes: the dtype is immaterial to a copy */
    r->n[1] = (uint32_t)b->n[0];
    r->n[2] = (uint32_t)b->n[1];
    r->n[3] = (uint32_t)b->len;
    r->stride[0][1] = (int32_t)b->dstep[0], r->stride[1][1] = (int32_t)b->sstep[0];
    r->stride[0][2] = (int32_t)b->dstep[1], r->stride[1][2] = (int32_t)b->sstep[1];
}

static void emit_local_copies(lx *x, const mid_prim *pr, const layout_run *loc, int32_t n) {
    void *ctx[2] = {x, (void *)pr};
    layout_copy_boxes(loc, n, emit_copy_box, ctx);
}

typedef struct frag_ctx {
    lx *x;
    const mid_prim *pr;
    const layout_run *group;  /* the multicast group whose destination tiles were last listed */
    uint32_t dst0;
} frag_ctx;

static void emit_fragment(void *vctx, const layout_fragment *lf) {
    frag_ctx *c = vctx;
    lx *x = c->x;
    if (lf->dst != c->group) {
        c->group = lf->dst;
        c->dst0 = (uint32_t)x->out->dst_tiles.n;
        for (int64_t k = 0; k < lf->ndst; k++) vec_push(x->a, &x->out->dst_tiles, (uint32_t)lf->dst[k].dst_tile);
    }
    low_frag f = {.src_tile = (uint32_t)lf->src_tile,
                  .src = addr(x, c->pr->in[0], lf->src_off),
                  .dst = addr(x, c->pr->out[0], lf->dst_off),
                  .bytes = (uint32_t)lf->bytes,
                  .dst0 = c->dst0,
                  .ndst = (uint32_t)lf->ndst};
    vec_push(x->a, &x->out->frags, f);
}

/* The exchange phase of a copy: its fragments (layout_fragments). */
static void emit_fragments(lx *x, const mid_prim *pr, layout_run *rem, int32_t n) {
    uint32_t first = (uint32_t)x->out->frags.n;
    frag_ctx c = {x, pr, NULL, 0};
    layout_fragments(rem, n, x->m->max_send_bytes, emit_fragment, &c);
    uint32_t count = (uint32_t)x->out->frags.n - first;
    if (!count) return;
    low_step st = {.kind = LOW_STEP_EXCHANGE, .first = first, .count = count};
    label_step(x, &st, "exchange");
    vec_push(x->a, &x->out->steps, st);
}

/* A copy gathering K partials for its reduce (mid_prim.own): each tile whose
 * on-tile runs are one whole partial keeps it where it is, for the reduce. */
static void leave_own_partials(lx *x, const mid_prim *pr, copy_ctx *c) {
    if (!x->own_slot) {
        x->own_slot = xmalloc(sizeof(int32_t) * x->m->tiles);
        x->own_off = xmalloc(sizeof(int64_t) * x->m->tiles);
    }
    x->own_dst = pr->out[0];
    layout_own_slots(&mid_t(x->p, pr->in[0])->lay, &mid_t(x->p, pr->out[0])->lay, c->loc.v, c->loc.n, (int32_t)x->m->tiles,
                     MID_OWN_SLOTS, x->own_slot, x->own_off);
    c->loc.n = (int32_t)layout_drop_owned(c->loc.v, c->loc.n, x->own_slot);
}

/* A large copy's runs are walked on every core: the destination pairs cut
 * into one range per thread, each range's runs collected and its remote
 * runs sorted apart (layout_runs_range), then joined in range order (on-tile
 * runs) and merged (remote runs): the runs one walk and layout_fragments'
 * sort give, whatever the thread count. */
enum {
    PARALLEL_COPY_BYTES = 1 << 20, /* destination bytes (all replicas) worth a thread */
    COPY_SCRATCH_KEEP = 256 << 20   /* a copy of at most this many run bytes leaves its scratch kept for the
                                       next (with a parallel walk's ranges and their sort room: up to about
                                       three times this) */
};

typedef struct copy_parts {
    const layout *ls, *ld;
    const layout_view *view;
    int64_t targets;
    int n;
    copy_ctx *part;
} copy_parts;

static void walk_parts(void *vctx, int64_t begin, int64_t end) {
    copy_parts *cp = vctx;
    for (int64_t k = begin; k < end; k++) {
        copy_ctx *c = &cp->part[k];
        layout_runs_range(cp->ls, cp->ld, cp->view, cp->targets * k / cp->n, cp->targets * (k + 1) / cp->n, copy_sink, c);
        layout_sort_remote(c->rem.v, c->rem.n, run_array(c->loc_a, c->rem.n));
    }
}

static void copy_runs(lx *x, copy_ctx *c, const layout *ls, const layout *ld, const layout_view *view) {
    int64_t targets = layout_run_targets(ld);
    int n = (x->ncopy_scratch - 2) / 2; /* the threads copy_scratch counted once for the whole lowering */
    if (n > targets) n = (int)targets;
    if (n <= 1 || layout_shard_bytes(ld) * targets < PARALLEL_COPY_BYTES) {
        layout_runs(ls, ld, view, copy_sink, c);
        return;
    }
    arena *pa = copy_scratch(x, 2, 2 * n);
    copy_parts cp = {ls, ld, view, targets, n, xcalloc((size_t)n, sizeof(copy_ctx))};
    for (int k = 0; k < n; k++) cp.part[k].rem_a = &pa[2 * k], cp.part[k].loc_a = &pa[2 * k + 1];
    util_parallel(n, 1, walk_parts, &cp);
    int64_t nloc = 0, nrem = 0;
    for (int k = 0; k < n; k++) nloc += cp.part[k].loc.n, nrem += cp.part[k].rem.n;
    TS_ASSERT(nloc <= INT32_MAX && nrem <= INT32_MAX); /* a VEC's count, as one walk's vec_push would need */
    c->loc.v = run_array(c->loc_a, nloc);
    c->loc.cap = c->loc.n = (int32_t)nloc;
    nloc = 0;
    for (int k = 0; k < n; k++) {
        if (!cp.part[k].loc.n) continue; /* its array is NULL, not to be handed to memcpy */
        memcpy(c->loc.v + nloc, cp.part[k].loc.v, sizeof(layout_run) * (size_t)cp.part[k].loc.n);
        nloc += cp.part[k].loc.n;
    }
    /* Merged part by part, ping-ponging between two arrays. */
    layout_run *merged = run_array(c->rem_a, nrem);
    layout_run *spare = n > 2 ? xmalloc(sizeof(layout_run) * (size_t)(nrem ? nrem : 1)) : NULL;
    const layout_run *have = cp.part[0].rem.v;
    int64_t nhave = cp.part[0].rem.n;
    for (int k = 1; k < n; k++) {
        layout_run *into = (n - k) % 2 ? merged : spare; /* the last merge lands in merged */
        layout_merge_remote(have, nhave, cp.part[k].rem.v, cp.part[k].rem.n, into);
        have = into;
        nhave += cp.part[k].rem.n;
    }
    c->rem.v = merged;
    c->rem.cap = c->rem.n = (int32_t)nrem;
    free(spare);
    free(cp.part);
}

static void lower_copy(lx *x, const mid_prim *pr) {
    arena *ca = copy_scratch(x, 0, 2); /* first: it sizes lx.copy_scratch */
    copy_ctx c = {.x = x, .pr = pr, .rem_a = &ca[0], .loc_a = &ca[1]};
    const layout *ls = &mid_t(x->p, pr->in[0])->lay, *ld = &mid_t(x->p, pr->out[0])->lay;
    uint32_t first = (uint32_t)x->out->runs.n;
    copy_runs(x, &c, ls, ld, pr->has_view ? &pr->view : NULL);
    if (pr->own) leave_own_partials(x, pr, &c);
    if (pr->remote) c.loc.n = 0; /* the producer wrote each tile's own share (mid_prim.remote) */
    /* The exchange phase, then the on-tile copies: they write disjoint bytes. */
    emit_fragments(x, pr, c.rem.v, c.rem.n);
    emit_local_copies(x, pr, c.loc.v, c.loc.n);
    end_compute(x, first, "copy");
    /* A copy this large is rare: its pages are given back, not kept. */
    if (((int64_t)c.rem.cap + c.loc.cap) * (int64_t)sizeof(layout_run) > COPY_SCRATCH_KEEP)
        for (int i = 0; i < x->ncopy_scratch; i++) arena_free(&x->copy_scratch[i]);
}

/* ---- structure ------------------------------------------------------------------------------ */

static int lower_block(lx *x, const mid_block *b);

static int check_slices(lx *x, const mid_prim *pr) {
    for (int i = 0; i < pr->nin; i++) {
        int32_t sl = slice_through(x->p, pr->in[i]);
        if (sl >= 0 && mid_t(x->p, sl)->scope != x->repeat)
            return graph_fail_op(x->p->g, pr->origin, x->d,
                                 "a repeat slice read inside a nested repeat is not supported by the compiler yet");
    }
    return 0;
}

static int lower_prim_kind(lx *x, int32_t id);

static int lower_prim(lx *x, int32_t id) {
    x->steps_of[id].first = x->out->steps.n;
    int rc = lower_prim_kind(x, id);
    x->steps_of[id].last = x->out->steps.n - 1;
    return rc;
}

static int lower_prim_kind(lx *x, int32_t id) {
    const mid_prim *pr = mid_p(x->p, id);
    x->prim = id;
    if (check_slices(x, pr)) return -1;
    switch (pr->kind) {
    case MID_COPY: lower_copy(x, pr); return 0;
    case MID_FILL: lower_fill(x, pr); return 0;
    case MID_GEMM: lower_gemm(x, pr); return 0;
    case MID_EWISE: lower_ewise(x, pr); return 0;
    case MID_SOFTMAX:
    case MID_LAYER_NORM:
    case MID_LN_MOMENTS: lower_rows(x, pr); return 0;
    case MID_REDUCE_SUM: lower_reduce_sum(x, pr); return 0;
    case MID_REDUCE:
    case MID_SGD:
    case MID_ADAMW:
    case MID_SUMSQ:
    case MID_REDUCE_EPI:
    case MID_ADAMW_APPLY: lower_flat(x, pr); return 0;
    case MID_GEMM_EPI: lower_gemm_epi(x, pr); return 0;
    case MID_CLIP_COEF: lower_clip_coef(x, pr); return 0;
    case MID_GATHER: lower_gather(x, pr); return 0;
    case MID_REPEAT: {
        low_step st = {.kind = LOW_STEP_REPEAT, .iterations = (uint32_t)pr->count};
        label_step(x, &st, "repeat");
        vec_push(x->a, &x->out->steps, st);
        int32_t saved = x->repeat;
        x->repeat = id;
        int rc = lower_block(x, &pr->body);
        x->repeat = saved;
        x->prim = id;
        low_step end = {.kind = LOW_STEP_END};
        label_step(x, &end, "end");
        vec_push(x->a, &x->out->steps, end);
        return rc;
    }
    case MID_COUNT: break;
    }
    TS_UNREACHABLE();
}

static int lower_block(lx *x, const mid_block *b) {
    for (int32_t i = 0; i < b->n; i++)
        if (lower_prim(x, b->v[i])) return -1;
    return 0;
}

/* ---- what placement needs besides the program ------------------------------------------- */

static int graph_values(const void *ctx, int32_t source, int64_t first, int64_t n, float *out, diag *d) {
    return graph_param_values_at((const graph *)ctx, source, false, first, n, out, d);
}

/* Tensor t bound as graph value v: the binding takes the value's name (a
 * repeat's result lives in the tensor of its body argument, named after
 * that). */
static void bind(lx *x, int32_t t, int32_t v, low_bind_role role, int32_t step) {
    const mid_tensor *mt = mid_t(x->p, t);
    int32_t b = x->buf_of[mid_storage(x->p, t)];
    TS_ASSERT(b >= 0);
    low_binding lb = {.name = arena_strdup(x->a, graph_val(x->p->g, v)->name), .role = (uint8_t)role, .dtype = (uint8_t)mt->dtype,
                      .scale = mt->scale, .lay = mt->lay, .buf = (uint32_t)b, .step = step};
    vec_push(x->a, &x->out->bindings, lb);
}

/* The program's outputs, parameters (their data by the graph's values) and
 * host bindings: inputs, outputs, then a probe for every value the program
 * completes (after the step of the prim that completes it; a value complete
 * at the start of a body, at its REPEAT step). */
static void host_view(lx *x) {
    const mid_program *p = x->p;
    low_program *out = x->out;
    for (int32_t i = 0; i < p->outputs.n; i++) {
        int32_t b = x->buf_of[mid_storage(p, p->outputs.v[i])];
        if (b >= 0) out->bufs.v[b].output = true;
    }
    for (int32_t t = 0; t < p->tensors.n; t++) {
        const mid_tensor *mt = mid_t(p, t);
        if (x->buf_of[t] < 0 || mt->kind != MT_PARAM) continue;
        low_param pp = {.buf = (uint32_t)x->buf_of[t], .name = arena_strdup(x->a, mt->name), .lay = mt->lay, .dtype = (uint8_t)mt->dtype,
                        .scale = mt->scale, .stack = mt->stack,
                        .layer = graph_type_numel(&graph_val(p->g, mt->value)->type) / mt->stack, .source = mt->param_op};
        vec_push(x->a, &out->params, pp);
    }
    for (int32_t i = 0; i < p->inputs.n; i++) bind(x, p->inputs.v[i], mid_t(p, p->inputs.v[i])->value, LOW_BIND_INPUT, -1);
    int32_t nout = graph_outputs(p->g, NULL, 0), *vals = xmalloc(sizeof(int32_t) * ((size_t)nout + 1));
    graph_outputs(p->g, vals, nout);
    TS_ASSERT(nout == p->outputs.n);
    for (int32_t i = 0; i < p->outputs.n; i++) bind(x, p->outputs.v[i], vals[i], LOW_BIND_OUTPUT, -1);
    free(vals);
    for (int32_t i = 0; i < p->probes.n; i++) {
        const mid_probe *pb = &p->probes.v[i];
        int32_t step = pb->after >= 0 ? x->steps_of[pb->after].last : pb->scope >= 0 ? x->steps_of[pb->scope].first : -1;
        if (step >= 0) bind(x, pb->tensor, pb->value, LOW_BIND_PROBE, step);
    }
    out->values = graph_values;
    out->values_ctx = p->g;
    out->model_path = p->g->path;
    out->model_name = p->g->name;
    for (int32_t i = 0; i < p->g->ops.n; i++)
        if (graph_opr(p->g, i)->kind == OP_PARAM) {
            const graph_type *t = &graph_val(p->g, graph_opr(p->g, i)->out[0])->type;
            out->param_bytes += (double)graph_type_numel(t) * dtype_bytes(t->dtype);
        }
}

int low_lower(const mid_program *p, const machine *m, arena *a, low_program *out, diag *d) {
    memset(out, 0, sizeof *out);
    int32_t *buf_of = xmalloc(sizeof(int32_t) * ((size_t)p->tensors.n + 1));
    prim_steps *steps_of = xmalloc(sizeof(prim_steps) * ((size_t)p->prims.n + 1));
    lx x = {.p = p, .m = m, .out = out, .a = a, .d = d, .buf_of = buf_of, .steps_of = steps_of, .repeat = -1, .prim = -1,
            .own_dst = -1};
    for (int32_t i = 0; i < p->prims.n; i++) steps_of[i] = (prim_steps){-1, -1};
    for (int32_t t = 0; t < p->tensors.n; t++) buf_of[t] = -1;
    vec_push(a, &out->strings, 0); /* offset 0: the empty label */
    /* A buffer of 4 GiB or more fits no tile (tile memory is addressed in 32
     * bits) nor low.h's 32-bit sizes: say so now; placement names smaller
     * misfits with the largest buffers. */
    for (int32_t t = 0; t < p->tensors.n; t++) {
        const mid_tensor *mt = mid_t(p, t);
        if (!mt->placed || mid_storage(p, t) != t) continue;
        double bytes = (double)layout_shard_bytes(&mt->lay) * (double)mt->stack;
        if (bytes >= 4294967296.0) {
            char need[32], have[32];
            fmt_bytes(need, sizeof need, bytes);
            fmt_bytes(have, sizeof have, machine_tile_bytes(m));
            free(buf_of);
            free(steps_of);
            return diag_fail_fit(d, "%s: error: does not fit: %s needs %s per tile for '%s' alone, machine '%s' has %s",
                                 p->g->path, p->g->name, need, mt->name, m->name, have);
        }
    }
    /* Every tensor the host or the data touches gets its buffer, used or not. */
    for (int32_t t = 0; t < p->tensors.n; t++)
        if (mid_t(p, t)->kind != MT_TEMP && mid_t(p, t)->placed) buffer(&x, t);
    int rc = lower_block(&x, &p->top);
    if (rc == 0) host_view(&x);
    free(x.own_slot);
    free(x.own_off);
    for (int i = 0; i < x.ncopy_scratch; i++) arena_free(&x.copy_scratch[i]);
    free(x.copy_scratch);
    free(buf_of);
    free(steps_of);
    return rc;
}
