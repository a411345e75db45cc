/* expand_gemm.c: a matmul expanded on the plan's (batch, rows, columns, K)
 * tile grid (docs/lowering.md): operands gathered into the grid's layouts,
 * one GEMM prim of partials per K part, their reduction (or the fused
 * optimizer's epilogue); and the plan's choices, their validity and the
 * sites the search sees. */
#include "expand.h"

#include <stdlib.h>
#include <string.h>

/* ---- matmul ---------------------------------------------------------------------- */

/* The layout of one GEMM operand or result over the grid. axes[i] names the
 * role of logical axis i: 'b' + batch index, 'm', 'n', 'k' or 'p' (the
 * partials axis); roles missing from the tensor become replica axes. */
typedef struct role {
    char kind;   /* 'b', 'm', 'n', 'k', 'p' */
    int batch;   /* batch axis of the result, for 'b' */
} role;

static layout grid_layout(const gemm_plan *gp, const role *roles, int rank, const int64_t *dim, int es, bool m_fine) {
    layout l = {.rank = rank, .elem_bytes = es, .enc = ENC_ROW_MAJOR, .tile_base = gp->base};
    bool has_b[LAYOUT_MAX_RANK] = {0}, has_m = false, has_n = false, has_k = false;
    /* Tiles: K parts innermost, then row blocks, then column blocks (with B
     * streaming columns, then rows, so the reduction's finer blocks of the
     * transposed result's rows take consecutive tiles). */
    int32_t sm = (int32_t)(gp->swap ? gp->C * gp->Kp : gp->Kp), sn = (int32_t)(gp->swap ? gp->Kp : gp->R * gp->Kp), sk = 1;
    bool fm = m_fine && !gp->swap, fn = m_fine && gp->swap;
    for (int i = 0; i < rank; i++) {
        l.dim[i] = dim[i];
        l.parts[i] = 1;
        l.block[i] = dim[i];
        l.tile_stride[i] = 0;
        switch (roles[i].kind) {
        case 'b':
            if (dim[i] > 1 || gp->gp[roles[i].batch] == 1) {
                has_b[roles[i].batch] = true;
                l.block[i] = cdiv(dim[i], gp->gp[roles[i].batch]);
                l.parts[i] = cdiv(dim[i], l.block[i]);
                l.tile_stride[i] = gp->gstride[roles[i].batch];
            }
            break;
        case 'm':
            has_m = true;
            /* After a K split each tile sums ceil(bm / Kp) rows, cut over all
             * M rows; a single row block need not store more than M rows. */
            l.block[i] = min64(fm ? gp->sub : gp->bm, dim[i]);
            l.parts[i] = cdiv(dim[i], l.block[i]);
            l.tile_stride[i] = fm ? 1 : sm;
            break;
        case 'n':
            has_n = true;
            l.block[i] = min64(fn ? gp->sub : gp->bn, dim[i]);
            l.parts[i] = cdiv(dim[i], l.block[i]);
            l.tile_stride[i] = fn ? 1 : sn;
            break;
        case 'k':
            has_k = true;
            l.block[i] = gp->bk;
            l.parts[i] = cdiv(dim[i], l.block[i]);
            l.tile_stride[i] = sk;
            break;
        case 'p':
            has_k = !m_fine;
            if (!m_fine) {
                l.block[i] = 1;
                l.parts[i] = dim[i];
                l.tile_stride[i] = 1;
            }
            break;
        }
    }
    for (int j = 0; j < gp->nb; j++)
        if (!has_b[j] && gp->gp[j] > 1) layout_replicate(&l, gp->gp[j], gp->gstride[j]);
    if (!has_m && gp->R > 1) layout_replicate(&l, gp->R, sm);
    if (!has_n && gp->C > 1) layout_replicate(&l, gp->C, sn);
    if (!has_k && !m_fine && gp->Kp > 1) layout_replicate(&l, gp->Kp, sk);
    return l;
}

/* Whether value v is (a slice or view of) a parameter: data that stays
 * resident for the whole run. */
static bool is_param(const mx *x, int32_t v) {
    int32_t t = x->vt[v];
    if (t < 0) /* not expanded yet (a fused op's grid, asked for early): the graph says */
        return !graph_val(x->g, v)->is_arg && graph_opr(x->g, graph_val(x->g, v)->def)->kind == OP_PARAM;
    return mid_t(x->p, mid_storage(x->p, t))->kind == MT_PARAM;
}

void mid_gemm_k_range(const mid_program *p, const mid_prim *pr, const int64_t *s, int64_t *k0, int64_t *k1) {
    const layout *la = &mid_t(p, pr->in[0])->lay, *lb = &mid_t(p, pr->in[1])->lay, *lc = &mid_t(p, pr->out[0])->lay;
    bool split = lc->rank - 2 > (la->rank - 2 > lb->rank - 2 ? la->rank - 2 : lb->rank - 2); /* a partials axis first */
    int64_t K = la->dim[la->rank - 1], bk = la->block[la->rank - 1];
    *k0 = (split ? s[0] : 0) * bk;
    *k1 = *k0 + bk < K ? *k0 + bk : K;
}

kernel_box mid_reduce_sum_box(const mid_program *p, const mid_prim *pr, const int64_t *ext) {
    const layout *li = &mid_t(p, pr->in[0])->lay, *lo = &mid_t(p, pr->out[0])->lay;
    kernel_box b = {.nd = li->rank, .nops = 2};
    for (int a = 0, j = 0; a < li->rank; a++) {
        b.n[a] = ext[a];
        b.st[1][a] = layout_axis_stride(li, a);
        if (pr->axes >> a & 1) {
            if (pr->keepdims && j < lo->rank) j++;
        } else {
            b.st[0][a] = j < lo->rank ? layout_axis_stride(lo, j) : 0;
            j++;
        }
    }
    return b;
}

mid_gemm_kernel mid_gemm_kernel_of(const mid_program *p, const mid_prim *pr, const int64_t *ext) {
    const layout *la = &mid_t(p, pr->in[0])->lay, *lb = &mid_t(p, pr->in[1])->lay, *lc = &mid_t(p, pr->out[0])->lay;
    /* Result axes: [p,] batch..., M, N; A: [batch...], M, K; B: [batch...], K, N. */
    int rc = lc->rank, nb = la->rank - 2 > lb->rank - 2 ? la->rank - 2 : lb->rank - 2;
    int cb = rc - 2 - nb; /* 1 when the result carries the partials axis */
    mid_gemm_kernel k = {.a = pr->swap ? pr->in[1] : pr->in[0], .b = pr->swap ? pr->in[0] : pr->in[1],
                         .row = pr->swap ? rc - 1 : rc - 2, .col = pr->swap ? rc - 2 : rc - 1,
                         .batch = {.nd = nb > 0 ? nb : 1, .nops = 3}};
    const layout *ka = &mid_t(p, k.a)->lay, *kb = &mid_t(p, k.b)->lay;
    for (int j = 0; j < nb; j++) {
        k.batch.n[j] = ext[cb + j];
        int ia = j - (nb - (ka->rank - 2)), ib = j - (nb - (kb->rank - 2));
        k.batch.st[0][j] = ia >= 0 && ka->dim[ia] > 1 ? layout_axis_stride(ka, ia) : 0;
        k.batch.st[1][j] = ib >= 0 && kb->dim[ib] > 1 ? layout_axis_stride(kb, ib) : 0;
        k.batch.st[2][j] = layout_axis_stride(lc, cb + j);
    }
    if (nb == 0) k.batch.n[0] = 1;
    return k;
}

/* ---- plans ---------------------------------------------------------------------- */

void mid_plan_init(mid_plan *pl, const graph *g) {
    memset(pl, 0, sizeof *pl);
    pl->nops = g->ops.n;
    pl->gemm = xcalloc((size_t)pl->nops + 1, sizeof(mid_gemm_plan));
    pl->has = xcalloc((size_t)pl->nops + 1, sizeof(bool));
    pl->row_parts = xcalloc((size_t)pl->nops + 1, sizeof(int32_t));
    pl->ew_layout = xcalloc((size_t)pl->nops + 1, sizeof(int8_t));
    pl->cast_early = xcalloc((size_t)pl->nops + 1, sizeof(uint64_t));
}

void mid_plan_copy(mid_plan *dst, const mid_plan *src) {
    *dst = *src;
    dst->gemm = xmalloc(sizeof(mid_gemm_plan) * ((size_t)src->nops + 1));
    dst->has = xmalloc(sizeof(bool) * ((size_t)src->nops + 1));
    memcpy(dst->gemm, src->gemm, sizeof(mid_gemm_plan) * (size_t)src->nops);
    memcpy(dst->has, src->has, sizeof(bool) * (size_t)src->nops);
    dst->row_parts = xmalloc(sizeof(int32_t) * ((size_t)src->nops + 1));
    memcpy(dst->row_parts, src->row_parts, sizeof(int32_t) * (size_t)src->nops);
    dst->ew_layout = xmalloc(sizeof(int8_t) * ((size_t)src->nops + 1));
    memcpy(dst->ew_layout, src->ew_layout, sizeof(int8_t) * (size_t)src->nops);
    dst->cast_early = xmalloc(sizeof(uint64_t) * ((size_t)src->nops + 1));
    memcpy(dst->cast_early, src->cast_early, sizeof(uint64_t) * (size_t)src->nops);
}

void mid_plan_free(mid_plan *pl) {
    free(pl->gemm);
    free(pl->has);
    free(pl->row_parts);
    free(pl->ew_layout);
    free(pl->cast_early);
    memset(pl, 0, sizeof *pl);
}

bool mid_gemm_plan_equal(const mid_gemm_plan *a, const mid_gemm_plan *b) {
    return memcmp(a->batch_parts, b->batch_parts, sizeof a->batch_parts) == 0 && a->bm == b->bm && a->bn == b->bn &&
           a->bk == b->bk && a->col_run == b->col_run && a->partials == b->partials && a->stage_b == b->stage_b &&
           a->panel_batch == b->panel_batch && a->sum_at_consumer == b->sum_at_consumer && a->swap == b->swap;
}

#define WHY(...) (snprintf(why, cap, __VA_ARGS__), false)

bool mid_gemm_plan_valid(const machine *m, const mid_gemm_site *s, const mid_gemm_plan *c, char *why, size_t cap) {
    int64_t tiles = 1;
    for (int j = 0; j < s->nb; j++) {
        if (c->batch_parts[j] < 1 || c->batch_parts[j] > s->batch[j])
            return WHY("batch axis %d in %lld parts, it has %lld", j, (long long)c->batch_parts[j], (long long)s->batch[j]);
        if (s->b_broadcast && c->batch_parts[j] != 1)
            return WHY("batch axis %d must stay whole: an operand is shared by every batch", j);
        tiles *= c->batch_parts[j];
    }
    int64_t kp = cdiv(s->K, c->bk < 1 ? 1 : c->bk);
    /* A row block (with B streaming, a column block) rounded up to a multiple
     * of the K parts may pass M (N). */
    if (c->bm < 1 || c->bm > (c->swap ? s->M : round_up(s->M, kp)) || c->bn < 1 ||
        c->bn > (c->swap ? round_up(s->N, kp) : s->N) || c->bk < 1 || c->bk > s->K)
        return WHY("blocks %lldx%lldx%lld outside the %lldx%lldx%lld product", (long long)c->bm, (long long)c->bn,
                   (long long)c->bk, (long long)s->M, (long long)s->N, (long long)s->K);
    if (c->bk != s->K && c->bk % m->amp_k_block)
        return WHY("K block %lld is not whole AMP K blocks of %u", (long long)c->bk, m->amp_k_block);
    tiles *= cdiv(s->M, c->bm) * cdiv(s->N, c->bn) * kp;
    if (tiles > m->tiles) return WHY("the grid needs %lld tiles, the machine has %u", (long long)tiles, m->tiles);
    if (c->swap && !s->swappable)
        return WHY("B streams only in a plain matmul: not fused, neither operand transposed");
    int64_t kc = c->swap ? c->bm : c->bn; /* the kernel's columns: B's, or A's rows when B streams */
    if (c->col_run < 1 || c->col_run > kc || (c->col_run != kc && c->col_run % m->amp_col_panel))
        return WHY("%lld columns per run: the whole block of %lld, or whole AMP column panels of %u", (long long)c->col_run,
                   (long long)kc, m->amp_col_panel);
    if (c->panel_batch && c->col_run != kc)
        return WHY("a batch of panels needs one run per block (col_run %lld = cols)", (long long)kc);
    if (c->panel_batch && s->fused) return WHY("a batch of panels is not for a GEMM with an optimizer epilogue");
    if (c->sum_at_consumer && (kp == 1 || s->fused))
        return WHY("partials summed where the result is wanted need a K split and no optimizer epilogue");
    if (c->sum_at_consumer && c->swap)
        return WHY("B streaming sums its partials in the grid: a consumer's row-major layout would transpose them element by element");
    if (kp > 1 && c->partials != DT_F32 && c->partials != DT_F16)
        return WHY("partials stored as %s (f32 or f16)", dtype_name(c->partials));
    if (kp > 1 && s->acc == DT_F16 && c->partials != DT_F16) return WHY("f16 chains store f16 partials");
    return true;
}

#undef WHY

/* The plan's choice for matmul o (asking the chooser when there is none),
 * checked against the op. */
static int gemm_choice(mx *x, const mid_gemm_site *s, mid_gemm_plan *c) {
    mid_plan *pl = x->plan;
    if (s->op >= pl->nops) return FAIL(x, "the plan does not cover this op");
    if (!pl->has[s->op]) {
        if (!pl->choose) return FAIL(x, "the plan has no grid for this matmul");
        if (pl->choose(pl->ctx, s, &pl->gemm[s->op], x->d)) return -1;
        pl->has[s->op] = true;
    }
    *c = pl->gemm[s->op];
    char why[200];
    if (!mid_gemm_plan_valid(x->m, s, c, why, sizeof why)) return FAIL(x, "the plan's grid does not fit: %s", why);
    return 0;
}

void mid_gemm_site_of(const graph *g, int32_t op, mid_gemm_site *site) {
    const graph_op *o = graph_opr(g, op);
    const graph_type *ta = &graph_val(g, o->in[0])->type, *tb = &graph_val(g, o->in[1])->type;
    const graph_type *tc = &graph_val(g, o->out[0])->type;
    bool tra = graph_attr_bool(o, ATTR_TRANSPOSE_A);
    int nb = tc->rank - 2;
    /* A fused op's product is its gradient, of dtype `grad` (no tensor holds it). */
    dtype out = o->kind == OP_MATMUL ? tc->dtype : graph_attr_dtype(o, ATTR_GRAD);
    *site = (mid_gemm_site){.op = op, .a = ta->dtype, .b = tb->dtype, .acc = graph_attr_dtype(o, ATTR_ACC), .out = out,
                            .nb = nb, .M = tc->dim[nb], .N = tc->dim[nb + 1], .K = ta->dim[ta->rank - (tra ? 2 : 1)]};
    for (int j = 0; j < nb; j++) site->batch[j] = tc->dim[j];
    /* An operand lacking batch axes (a weight shared by every image) would be
     * copied per batch part, so such batches stay on one grid. */
    site->b_broadcast = tb->rank - 2 < nb || ta->rank - 2 < nb;
    site->fused = o->kind != OP_MATMUL;
    site->swappable = !site->fused && !tra && !graph_attr_bool(o, ATTR_TRANSPOSE_B);
}

/* The product matmul (or a fused op) o computes: its result type, whose
 * dtype a fused op takes from `grad` (no tensor holds its gradient). */
static graph_type gemm_result_type(const mx *x, const graph_op *o) {
    graph_type t = graph_val(x->g, o->out[0])->type;
    if (o->kind != OP_MATMUL) t.dtype = graph_attr_dtype(o, ATTR_GRAD), t.scale = 0;
    return t;
}

/* The plan's grid for the GEMM of op (a matmul or a fused op). */
int ex_gemm_grid(mx *x, int32_t op, gemm_plan *gp, mid_gemm_plan *ch) {
    const graph_op *o = graph_opr(x->g, op);
    mid_gemm_site site;
    mid_gemm_site_of(x->g, op, &site);
    /* A parameter operand is copied once per grid part it does not span. */
    site.a_param = is_param(x, o->in[0]);
    site.b_param = is_param(x, o->in[1]);
    site.b_stageable = site.b_param && graph_val(x->g, o->in[1])->type.rank == 2 && !graph_attr_bool(o, ATTR_TRANSPOSE_B);
    if (gemm_choice(x, &site, ch)) return -1;
    if (ch->stage_b && !site.b_stageable)
        return FAIL(x, "the plan stages B, which is not a parameter [K, N] used untransposed");
    int nb = site.nb;
    int64_t M = site.M, N = site.N, K = site.K;
    *gp = (gemm_plan){.nb = nb};
    for (int j = 0; j < nb; j++) gp->gp[j] = ch->batch_parts[j];
    gp->bm = ch->bm, gp->bn = ch->bn, gp->bk = ch->bk;
    gp->R = cdiv(M, gp->bm), gp->C = cdiv(N, gp->bn), gp->Kp = cdiv(K, gp->bk);
    gp->swap = ch->swap;
    gp->sub = cdiv(gp->swap ? gp->bn : gp->bm, gp->Kp);
    int64_t per_batch = gp->R * gp->C * gp->Kp, grid = per_batch;
    for (int j = nb - 1, s = 1; j >= 0; j--) {
        gp->gstride[j] = (int32_t)(per_batch * s);
        s *= (int32_t)gp->gp[j];
        grid *= gp->gp[j];
    }
    /* A grid whose A is a weight (a convolution's [O, taps * C]) keeps a
     * block of it on each of its tiles for the whole run: grids that leave
     * tiles over start apart, by op, or every such weight would have a
     * block on tile 0. (B weights stage apart instead, staged_layout.) */
    int64_t room = (int64_t)x->m->tiles - grid;
    if (site.a_param && room > 0) gp->base = ex_spread_base(op, room);
    return 0;
}

/* The layout of o's finished product over grid gp: rows of the output
 * blocks, or with K partials the finer row blocks their reduction writes. */
layout ex_gemm_result_layout(const mx *x, const graph_op *o, const gemm_plan *gp) {
    graph_type tc = gemm_result_type(x, o);
    int nb = tc.rank - 2;
    role rc[LAYOUT_MAX_RANK];
    int64_t dc[LAYOUT_MAX_RANK];
    for (int j = 0; j < nb; j++) rc[j] = (role){'b', j}, dc[j] = tc.dim[j];
    rc[nb] = (role){'m', 0}, rc[nb + 1] = (role){'n', 0};
    dc[nb] = tc.dim[nb], dc[nb + 1] = tc.dim[nb + 1];
    return grid_layout(gp, rc, tc.rank, dc, dtype_bytes(tc.dtype), gp->Kp > 1);
}

static int expand_epilogue(mx *x, const graph_op *o, int base, mid_kind k, const int32_t *src, int nsrc, const layout *lc,
                           dtype acc, int64_t col_run);

/* Where a staged B [K, N] lives (mid_gemm_plan.stage_b): the grid's column
 * blocks, and K cut R times finer than the grid's K blocks, in dense tile
 * order over the grid's tiles, so each tile stores about 1/R of a block and
 * one copy a run gathers every block onto its R replica tiles, a contiguous
 * run of rows from each piece. */
static layout staged_layout(const mx *x, const gemm_plan *gp, const layout *lb, int32_t param_op) {
    layout l = ex_unreplicated(*lb);
    /* Stored as the grid takes it (AMP_LEFT_T when B streams: K in whole panels). */
    int64_t step = layout_transposed(&l) ? layout_panel_width(&l) : 1;
    for (int64_t blk = round_up(cdiv(gp->bk, gp->R), step);; blk += step) {
        l.block[0] = min64(blk, l.dim[0]);
        l.parts[0] = cdiv(l.dim[0], l.block[0]);
        ex_row_major_tiles(&l);
        if (l.parts[0] * l.parts[1] <= x->m->tiles) break;
    }
    /* Whole panels may leave K in fewer pieces than R: then the columns are
     * cut finer too, as far as the tiles go (a piece stays a run of panel rows). */
    if (step > 1)
        for (int64_t f = 2; f <= lb->block[1]; f++) {
            int64_t bn = cdiv(lb->block[1], f), parts = cdiv(l.dim[1], bn);
            if (l.parts[0] * parts > x->m->tiles || l.parts[0] * parts > gp->R * cdiv(l.dim[0], gp->bk) * gp->C) break;
            l.block[1] = bn;
            l.parts[1] = parts;
        }
    ex_row_major_tiles(&l);
    /* Weights that leave tiles over start apart, by op, as stacked homes do:
     * not every one of them on tile 0. */
    int64_t room = x->m->tiles - l.parts[0] * l.parts[1];
    l.tile_base = ex_spread_base(param_op, room);
    return l;
}

/* A K-split GEMM sums its partials where its result's consumer wants it
 * (consumer layouts, above: a reshape whose alias that is, through a bias
 * add) when that spreads the sum at least as thin as the grid's own rows:
 * row-major, no replicas, no more elements on a tile. The partials then
 * cross the exchange once, straight into it. */
static bool reduce_where_wanted(const mx *x, int32_t v, layout *lc) {
    if (!x->hinted[v]) return false;
    layout h = x->hint[v];
    if (h.enc != ENC_ROW_MAJOR || h.nrep != 0 || h.rank != lc->rank) return false;
    int64_t mine = 1, grid = 1;
    for (int a = 0; a < h.rank; a++) {
        if (h.dim[a] != lc->dim[a]) return false;
        mine *= h.block[a];
        grid *= lc->block[a];
    }
    h.elem_bytes = lc->elem_bytes;
    if (mine > grid || layout_check(&h, (int32_t)x->m->tiles, &(diag){0}) != 0) return false;
    *lc = h;
    return true;
}

/* Kp partials of every element of lc, whole on its tile: [Kp, lc...]. */
static layout gathered_over(const layout *lc, int64_t kp, int es) {
    layout q = *lc;
    q.rank = lc->rank + 1;
    q.elem_bytes = es;
    q.dim[0] = q.block[0] = kp;
    q.parts[0] = 1;
    q.tile_stride[0] = 0;
    for (int a = 0; a < lc->rank; a++) {
        q.dim[a + 1] = lc->dim[a];
        q.parts[a + 1] = lc->parts[a];
        q.block[a + 1] = lc->block[a];
        q.tile_stride[a + 1] = lc->tile_stride[a];
    }
    return q;
}

/* matmul, or the GEMM of a fused op, whose result then goes to its
 * optimizer epilogue instead of a tensor. */
/* Operand v of a matmul in layout lay, through the swap of its last two
 * axes when the matmul reads it transposed. */
static int32_t operand(mx *x, int32_t v, const layout *lay, bool transposed, const char *what) {
    if (!transposed) return ex_want(x, v, lay);
    int rank = graph_val(x->g, v)->type.rank;
    layout_view view = layout_view_identity(rank);
    view.axis[rank - 2] = rank - 1, view.axis[rank - 1] = rank - 2;
    return ex_want_view(x, v, lay, &view, what);
}

/* The GEMM prim of operands in[0..2) into out, run as choice ch says. */
static void emit_gemm(mx *x, const int32_t *in, int32_t out, dtype acc, const mid_gemm_plan *ch) {
    mid_prim *g = mid_p(x->p, ex_emit(x, MID_GEMM, in, 2, &out, 1));
    g->acc = acc;
    g->col_run = ch->col_run;
    g->panel_batch = ch->panel_batch;
    g->swap = ch->swap;
}

int ex_expand_matmul(mx *x, const graph_op *o) {
    const graph_type *ta = &graph_val(x->g, o->in[0])->type, *tb = &graph_val(x->g, o->in[1])->type;
    graph_type tcv = gemm_result_type(x, o);
    const graph_type *tc = &tcv;
    bool fused = o->kind != OP_MATMUL;
    bool tra = graph_attr_bool(o, ATTR_TRANSPOSE_A), trb = graph_attr_bool(o, ATTR_TRANSPOSE_B);
    dtype acc = graph_attr_dtype(o, ATTR_ACC), in_dt = ta->dtype;
    if (!machine_amp_macs(x->m, in_dt))
        return FAIL(x, "machine '%s' has no AMP path for %s operands", x->m->name, dtype_name(in_dt));
    int nb = tc->rank - 2;
    gemm_plan gp;
    mid_gemm_plan ch;
    if (ex_gemm_grid(x, x->origin, &gp, &ch)) return -1;
    int64_t M = tc->dim[nb], N = tc->dim[nb + 1], K = ta->dim[ta->rank - (tra ? 2 : 1)];
    /* A as [batch..., M, K] AMP-left, B as [batch..., K, N] row-major. */
    role ra[LAYOUT_MAX_RANK], rb[LAYOUT_MAX_RANK], rc[LAYOUT_MAX_RANK + 1];
    int64_t da[LAYOUT_MAX_RANK], db[LAYOUT_MAX_RANK], dc[LAYOUT_MAX_RANK + 1];
    int na = ta->rank - 2, nbb = tb->rank - 2;
    for (int i = 0; i < na; i++) ra[i] = (role){'b', i + nb - na}, da[i] = ta->dim[i];
    for (int i = 0; i < nbb; i++) rb[i] = (role){'b', i + nb - nbb}, db[i] = tb->dim[i];
    ra[na] = (role){'m', 0}, ra[na + 1] = (role){'k', 0};
    da[na] = M, da[na + 1] = K;
    rb[nbb] = (role){'k', 0}, rb[nbb + 1] = (role){'n', 0};
    db[nbb] = K, db[nbb + 1] = N;
    /* B streaming (ch.swap): A row-major as the coefficients (or transposed,
     * as its producer left it), B as AMP-left panels of B^T, the product
     * transposed. */
    layout_encoding out_enc = ch.swap ? ENC_ROW_MAJOR_T : ENC_ROW_MAJOR;
    layout la = grid_layout(&gp, ra, ta->rank, da, dtype_bytes(in_dt), false);
    la.enc = ENC_AMP_LEFT;
    if (ch.swap) {
        const mid_tensor *at = mid_t(x->p, x->vt[o->in[0]]);
        la.enc = at->placed && at->lay.enc == ENC_ROW_MAJOR_T && ta->rank >= 2 ? ENC_ROW_MAJOR_T : ENC_ROW_MAJOR;
    }
    layout lb = grid_layout(&gp, rb, tb->rank, db, dtype_bytes(tb->dtype), false);
    /* A transposed B (B^T stored [N, K], as attention's keys) keeps its
     * storage order: each column's K stretch contiguous, read through B's
     * column stride, so neither the exchange nor a tile permutes it. */
    if (ch.swap) lb.enc = ENC_AMP_LEFT_T;
    else if (trb) lb.enc = ENC_ROW_MAJOR_T;
    if (ch.stage_b && !mid_t(x->p, x->vt[o->in[1]])->placed) {
        const mid_tensor *wt = mid_t(x->p, x->vt[o->in[1]]);
        layout ls = staged_layout(x, &gp, &lb, wt->slice_of >= 0 ? mid_t(x->p, wt->slice_of)->param_op : wt->param_op);
        ex_place(x, x->vt[o->in[1]], &ls); /* ex_want() below copies it into the grid */
    }
    int32_t a = operand(x, o->in[0], &la, tra, "a_t"), b = operand(x, o->in[1], &lb, trb, "b_t");
    for (int j = 0; j < nb; j++) rc[j + 1] = (role){'b', j}, dc[j + 1] = tc->dim[j];
    rc[nb + 1] = (role){'m', 0}, rc[nb + 2] = (role){'n', 0};
    dc[nb + 1] = M, dc[nb + 2] = N;
    int32_t in2[2] = {a, b};
    if (gp.Kp == 1) {
        layout lc = grid_layout(&gp, rc + 1, tc->rank, dc + 1, dtype_bytes(tc->dtype), false);
        lc.enc = out_enc;
        if (fused) return expand_epilogue(x, o, 2, MID_GEMM_EPI, in2, 2, &lc, acc, ch.col_run);
        emit_gemm(x, in2, ex_result(x, o->out[0], &lc), acc, &ch);
        return 0;
    }
    /* K partials [Kp, batch..., M, N], moved so each tile holds all Kp
     * partials of a finer row block, then summed in the accumulation dtype.
     * They are stored in it too, unless that would not leave the tile room:
     * then in f16, as the IPU's AMP writes them (each tile's chain stays in
     * acc; the plan's numeric record says where the rounding happens). */
    rc[0] = (role){'p', 0}, dc[0] = gp.Kp;
    const char *name = graph_val(x->g, o->out[0])->name;
    char pn[256];
    dtype pdt = ch.partials;
    layout lp = grid_layout(&gp, rc, tc->rank + 1, dc, dtype_bytes(pdt), false);
    lp.enc = out_enc;
    snprintf(pn, sizeof pn, "%s.partials", name);
    int32_t part = ex_new_tensor(x, pn, pdt, 0, &lp, -1);
    emit_gemm(x, in2, part, acc, &ch);
    layout lq = grid_layout(&gp, rc, tc->rank + 1, dc, dtype_bytes(pdt), true);
    layout lc = grid_layout(&gp, rc + 1, tc->rank, dc + 1, dtype_bytes(tc->dtype), true);
    lq.enc = lc.enc = out_enc;
    if (ch.sum_at_consumer && reduce_where_wanted(x, o->out[0], &lc)) lq = gathered_over(&lc, gp.Kp, dtype_bytes(pdt));
    snprintf(pn, sizeof pn, "%s.gathered", name);
    int32_t gath = ex_new_tensor(x, pn, pdt, 0, &lq, -1);
    ex_emit_copy(x, part, gath, NULL);
    if (fused) return expand_epilogue(x, o, 2, MID_REDUCE_EPI, &gath, 1, &lc, acc, 0);
    int32_t out = ex_result(x, o->out[0], &lc);
    mid_p(x->p, ex_emit(x, MID_REDUCE, &gath, 1, &out, 1))->acc = acc;
    return 0;
}

/* ---- the optimizer epilogue of a fused op (docs/epilogue.md) ------------------------------------ */

/* AdamW's kernel parameters (ADAMW, ADAMW_APPLY): lr, beta1, beta2, eps, weight decay, step. */
void ex_adamw_params(const graph_op *o, mid_prim *p) {
    p->f[0] = (float)graph_attr_float(o, ATTR_LR);
    p->f[1] = (float)graph_attr_float(o, ATTR_BETA1);
    p->f[2] = (float)graph_attr_float(o, ATTR_BETA2);
    p->f[3] = (float)graph_attr_float(o, ATTR_EPS);
    p->f[4] = (float)graph_attr_float(o, ATTR_WEIGHT_DECAY);
    p->step = graph_attr_int(o, ATTR_STEP);
}

/* The weight and states of fused op o (operands base.., after the
 * producer's) lie in the gradient's layout lc (a parameter was placed there
 * when expanded, see expand_op): prim k (GEMM_EPI on the operands, or
 * REDUCE_EPI on gathered partials) hands every gradient value to the
 * optimizer and writes the updated states (SGD: the weight too); AdamW's
 * weight line, which needs only w and the new moments, follows as
 * ADAMW_APPLY. No tensor holds the gradient. */
static int expand_epilogue(mx *x, const graph_op *o, int base, mid_kind k, const int32_t *src, int nsrc, const layout *lc,
                           dtype acc, int64_t col_run) {
    bool adam = o->kind == OP_MATMUL_ADAMW || o->kind == OP_SUM_ADAMW;
    int32_t in[MID_MAX_IN], out[MID_MAX_OUT];
    int nin = 0, nout = 0;
    for (int i = 0; i < nsrc; i++) in[nin++] = src[i];
    /* E0, E1 in; E2, E3 out: (m, v; m', v') or (w, buf; w', buf'). */
    for (int32_t i = adam ? base + 1 : base; i < o->nin; i++) in[nin++] = ex_want(x, o->in[i], lc);
    for (int32_t i = adam ? 1 : 0; i < o->nout; i++) out[nout++] = ex_result(x, o->out[i], lc);
    mid_prim *p = mid_p(x->p, ex_emit(x, k, in, nin, out, nout));
    p->acc = acc;
    p->col_run = col_run;
    p->grad = graph_attr_dtype(o, ATTR_GRAD);
    p->epi = adam ? KERNEL_EPI_ADAM : KERNEL_EPI_SGD;
    if (!adam) {
        p->f[0] = (float)graph_attr_float(o, ATTR_LR);
        p->f[1] = (float)graph_attr_float(o, ATTR_MOMENTUM);
        p->f[2] = (float)graph_attr_float(o, ATTR_WEIGHT_DECAY);
        return 0;
    }
    p->f[0] = (float)graph_attr_float(o, ATTR_BETA1);
    p->f[1] = (float)graph_attr_float(o, ATTR_BETA2);
    int32_t ain[3] = {ex_want(x, o->in[base], lc), out[0], out[1]}, w2 = ex_result(x, o->out[0], lc);
    mid_prim *ap = mid_p(x->p, ex_emit(x, MID_ADAMW_APPLY, ain, 3, &w2, 1));
    ex_adamw_params(o, ap);
    return 0;
}


/* sum_sgd, sum_adamw: an owner's gradient rows from every replica, p =
 * [n, w's shape], summed where each element's n partials meet and handed to
 * the optimizer (REDUCE_EPI). The gradient takes the weight's layout (as
 * the unfused optimizer would: its own, or a fresh plan when it is not
 * row-major); the partials are wanted gathered over it, so a host input is
 * placed there directly and every tile sums its own elements. */
int ex_expand_sum_optimizer(mx *x, const graph_op *o) {
    int32_t w = ex_read(x, o->in[1]);
    layout lc = ex_unreplicated(mid_t(x->p, w)->lay);
    if (lc.enc != ENC_ROW_MAJOR) {
        graph_type t = graph_val(x->g, o->in[1])->type;
        lc = ex_plan(x, &t);
    }
    const graph_type *tp = &graph_val(x->g, o->in[0])->type;
    lc.elem_bytes = dtype_bytes(graph_attr_dtype(o, ATTR_GRAD));
    layout lq = gathered_over(&lc, tp->dim[0], dtype_bytes(tp->dtype));
    int32_t gath = ex_want(x, o->in[0], &lq);
    return expand_epilogue(x, o, 1, MID_REDUCE_EPI, &gath, 1, &lc, DT_F32, 0);
}
