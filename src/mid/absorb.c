/* absorb.c: the consumer absorptions, a mid pass (docs/lowering.md).
 *
 *   t = producer(...)          producer'(...) writes u itself: t is never
 *   u = consumer(t, ...)  ──►  stored, u is watched after the producer
 *
 * One sweep over each block in program order; a consumer is absorbed by the
 * first rewrite that takes it, in this order: cast, bias, gelu, residual,
 * panels, yield (prescale is tried at each softmax). Each rewrite can run
 * alone (`tessel opt --passes=absorb.cast`), which is how its tests pin it.
 * Precondition: a program as expansion makes it (or parsed from text), every
 * consumer after its producer in one block. */
#include "mid.h"

#include <stdlib.h>
#include <string.h>

const char *const mid_absorb_names[MID_ABSORB_COUNT] = {
#define X(id, name) [MID_ABSORB_##id] = #name,
    MID_ABSORB_REWRITES(X)
#undef X
};

/* Two consumers of a temporary only they read, made by a prim earlier in the
 * same block, are done by that producer in its own pass, with the bits the
 * two kernels give; the temporary is not stored, so nothing watches it, and
 * the consumer's result is watched after the producer:
 *   a saturating cast to an 8-bit type, of an EWISE or LAYER_NORM result in
 *     the same partition: the producer rounds to the temporary's dtype first
 *     (prim.acc), then to the cast's;
 *   a bias add (a vector along the last axis) to a K-partials REDUCE's
 *     row-major result: the sum rounds to the product's dtype (prim.grad),
 *     then the bias is added;
 *   a residual add to that result (absorb_residual).
 * And a scale by s > 0 whose result only a softmax reads (through a copy or
 * not) is done by the softmax: the copy moves the unscaled values and the
 * softmax takes exp(s * (x - max)) (prim.f[0] = s), a multiply its pass
 * already makes room for; the plan's numerics say so (graph.h). */
typedef struct absorber {
    mid_program *p;
    int32_t *reads, *maker;  /* per tensor: live prims reading it; the prim making it (-1 none, -2 several) */
    uint32_t on;             /* the rewrites to make: bit MID_ABSORB_x */
} absorber;

#define ON(f, r) (((f)->on & MID_ABSORB_BIT(r)) != 0)

static bool same_partition(layout a, layout b) {
    a.elem_bytes = b.elem_bytes = 1;
    return layout_equal(&a, &b);
}

/* The cast reads t, or (via >= 0) a reduction's result t through its alias
 * via, whose partition holds t's shards in t's order (row-major only). */
static bool absorb_cast(mid_program *p, mid_prim *pp, const mid_prim *cp, int32_t t, int32_t via) {
    const mid_tensor *mt = mid_t(p, t), *mv = mid_t(p, via >= 0 ? via : t), *mu = mid_t(p, cp->out[0]);
    if (cp->kind != MID_EWISE || cp->ew != KERNEL_EW_CAST || cp->f[0] != 0.0f || !dtype_is_f8(mu->dtype) || dtype_is_f8(mt->dtype))
        return false;
    if (!same_partition(mv->lay, mu->lay) || pp->nout != 1) return false;
    if (via >= 0 && (pp->kind != MID_REDUCE || mu->lay.enc != ENC_ROW_MAJOR || mt->lay.enc != ENC_ROW_MAJOR)) return false;
    /* A K-partials reduction without a bias rounds its sum to the temporary's
     * dtype (prim.grad, as for a bias) before it writes the 8-bit result. */
    if (pp->kind == MID_REDUCE && pp->nin == 1 && pp->grad == DT_F32) {
        pp->out[0] = cp->out[0];
        pp->grad = mt->dtype;
        return true;
    }
    /* A reduction that takes a GeLU writes an 8-bit result from the GeLU's
     * f16 value (kern.h). */
    if (pp->kind == MID_REDUCE && pp->f[0] != 0 && via < 0 && mt->dtype == DT_F16) {
        pp->out[0] = cp->out[0];
        return true;
    }
    if ((pp->kind != MID_EWISE && pp->kind != MID_LAYER_NORM) || pp->acc != DT_F32) return false;
    pp->out[0] = cp->out[0];
    pp->acc = mt->dtype;
    return true;
}

static bool absorb_bias(mid_program *p, mid_prim *pp, const mid_prim *cp, int32_t t) {
    if (cp->kind != MID_EWISE || cp->ew != KERNEL_EW_ADD || pp->kind != MID_REDUCE || pp->nin != 1) return false;
    const mid_tensor *mt = mid_t(p, t), *mu = mid_t(p, cp->out[0]);
    const mid_tensor *mb = mid_t(p, cp->in[cp->in[0] == t ? 1 : 0]);
    const layout *lt = &mt->lay, *lb = &mb->lay;
    int last = lt->rank - 1;
    if ((lt->enc != ENC_ROW_MAJOR && lt->enc != ENC_ROW_MAJOR_T) || !same_partition(*lt, mu->lay) || lb->rank != 1 ||
        lb->enc != ENC_ROW_MAJOR ||
        lb->dim[0] != lt->dim[last] || lb->parts[0] != lt->parts[last] || lb->block[0] != lt->block[last] ||
        dtype_is_f8(mb->dtype) || dtype_is_f8(mu->dtype))
        return false;
    pp->in[pp->nin++] = cp->in[cp->in[0] == t ? 1 : 0];
    pp->out[0] = cp->out[0];
    pp->grad = mt->dtype;
    return true;
}

/* l without its leading axes of one element (broadcasting's missing axes):
 * the same shards on the same tiles, stored alike. */
static layout squeezed(layout l) {
    int k = 0;
    while (k < l.rank - 1 && l.dim[k] == 1) k++;
    for (int a = k; a < l.rank; a++) {
        l.dim[a - k] = l.dim[a], l.parts[a - k] = l.parts[a], l.block[a - k] = l.block[a];
        l.tile_stride[a - k] = l.tile_stride[a];
    }
    l.rank -= k;
    return l;
}

/* A residual add of a K-partials REDUCE's row-major result (after its bias,
 * if any) and another tensor stored as the result is, all three of one
 * dtype: the reduction rounds its value to that dtype (what the temporary
 * held), adds the other operand and writes the add's result (kern.h). */
static bool absorb_residual(mid_program *p, mid_prim *pp, const mid_prim *cp, int32_t t) {
    if (cp->kind != MID_EWISE || cp->ew != KERNEL_EW_ADD || pp->kind != MID_REDUCE || pp->f[0] != 0 || pp->residual ||
        pp->own || pp->nout != 1 || pp->nin >= MID_MAX_IN - 1)
        return false;
    int32_t other = cp->in[cp->in[0] == t ? 1 : 0];
    const mid_tensor *mt = mid_t(p, t), *mu = mid_t(p, cp->out[0]), *mo = mid_t(p, other);
    if (mt->lay.enc != ENC_ROW_MAJOR || !layout_equal(&mt->lay, &mu->lay) ||
        !same_partition(squeezed(mo->lay), squeezed(mt->lay)) ||
        mo->lay.enc != ENC_ROW_MAJOR || mo->lay.nrep != mt->lay.nrep || mt->dtype != mu->dtype ||
        mo->dtype != mt->dtype || dtype_is_f8(mt->dtype) || mo->stack != 1)
        return false;
    pp->in[pp->nin++] = other;
    pp->residual = true;
    pp->out[0] = cp->out[0];
    return true;
}

/* A GeLU (tanh or erf form) of a K-partials REDUCE's result (its bias added or not), in the
 * same row-major partition, writing its own dtype or, rounded to f16 first,
 * an 8-bit one: the reduction rounds the value to the temporary's dtype (the
 * bias's, or prim.grad without one), takes the GeLU, and writes it. */
static bool absorb_gelu(mid_program *p, mid_prim *pp, const mid_prim *cp, int32_t t) {
    if (cp->kind != MID_EWISE || (cp->ew != KERNEL_EW_GELU && cp->ew != KERNEL_EW_GELU_ERF) || pp->kind != MID_REDUCE ||
        pp->f[0] != KERNEL_REDUCE_NO_GELU || pp->nout != 1)
        return false;
    const mid_tensor *mt = mid_t(p, t), *mu = mid_t(p, cp->out[0]);
    bool bias = mid_reduce_has_bias(pp);
    if ((mt->lay.enc != ENC_ROW_MAJOR && mt->lay.enc != ENC_ROW_MAJOR_T) || !same_partition(mt->lay, mu->lay) ||
        mu->lay.enc != mt->lay.enc || dtype_is_f8(mt->dtype) || cp->acc != (dtype_is_f8(mu->dtype) ? DT_F16 : DT_F32))
        return false;
    if (bias ? mid_t(p, pp->in[1])->dtype != mt->dtype : pp->grad != DT_F32) return false;
    if (!bias) pp->grad = mt->dtype;
    pp->out[0] = cp->out[0];
    pp->f[0] = cp->ew == KERNEL_EW_GELU_ERF ? KERNEL_REDUCE_GELU_ERF : KERNEL_REDUCE_GELU;
    return true;
}

/* An absorbed temporary t is watched no more; probes watching after prim
 * `gone` (removed) are watched after `now`. */
void mid_drop_probes(mid_program *p, int32_t t, int32_t gone, int32_t now) {
    int32_t kept = 0;
    for (int32_t i = 0; i < p->probes.n; i++)
        if (p->probes.v[i].tensor != t) {
            if (p->probes.v[i].after == gone) p->probes.v[i].after = now;
            p->probes.v[kept++] = p->probes.v[i];
        }
    p->probes.n = kept;
}

/* The tensor whose storage t views through a chain of aliases that only
 * the next link reads (t itself if it is no alias). */
static int32_t alias_root(const absorber *f, int32_t t) {
    while (mid_t(f->p, t)->alias_of >= 0 && f->reads[t] == 1 && mid_t(f->p, t)->stack == 1 && mid_t(f->p, t)->slice_of < 0)
        t = mid_t(f->p, t)->alias_of;
    return t;
}

static bool only_temp(const absorber *f, int32_t t) {
    const mid_tensor *mt = mid_t(f->p, t);
    return f->reads[t] == 1 && f->maker[t] >= 0 && mt->kind == MT_TEMP && mt->alias_of < 0 && mt->stack == 1 &&
           mt->slice_of < 0;
}

/* The scale feeding softmax prim s (directly or through one copy) absorbed into
 * it; blk->v[0, n) holds the prims before s. Returns whether it was absorbed. */
static bool absorb_prescale(absorber *f, int32_t *v, int32_t *n, mid_prim *sp) {
    mid_program *p = f->p;
    if (sp->kind != MID_SOFTMAX || sp->f[0] != 0 || !only_temp(f, sp->in[0])) return false;
    int32_t u = sp->in[0], via = f->maker[u], t = u;
    if (mid_p(p, via)->kind == MID_COPY) {
        t = mid_p(p, via)->in[0];
        if (mid_p(p, via)->nin != 1 || !only_temp(f, t)) return false;
    }
    int32_t pid = f->maker[t], at = -1;
    mid_prim *pp = mid_p(p, pid);
    for (int32_t i = 0; i < *n; i++)
        if (v[i] == pid) at = i;
    if (at < 0 || pp->kind != MID_EWISE || pp->ew != KERNEL_EW_SCALE || !(pp->f[0] > 0)) return false;
    const mid_tensor *ma = mid_t(p, pp->in[0]), *mt = mid_t(p, t);
    if (ma->dtype != mt->dtype || ma->scale != mt->scale || !layout_equal(&ma->lay, &mt->lay) ||
        graph_opr(p->g, sp->origin)->in[0] != mt->value)
        return false;
    if (via == pid) sp->in[0] = pp->in[0];
    else mid_p(p, via)->in[0] = pp->in[0];
    sp->f[0] = pp->f[0];
    memmove(&v[at], &v[at + 1], sizeof(int32_t) * (size_t)(*n - at - 1));
    (*n)--;
    mid_drop_probes(p, t, pid, via);
    return true;
}

/* A copy that only changes a row kernel's or a K-partials reduction's result
 * to AMP-left panels (the next GEMM's operand encoding, same partition): the
 * SOFTMAX, LAYER_NORM or REDUCE writes the panels itself (kern.h:
 * stride[0][1]); watched where it lands. */
static bool absorb_panels(absorber *f, mid_prim *pp, const mid_prim *cp, int32_t t) {
    mid_program *p = f->p;
    if (cp->kind != MID_COPY || cp->has_view || cp->nin != 1 ||
        (pp->kind != MID_SOFTMAX && pp->kind != MID_LAYER_NORM && pp->kind != MID_REDUCE))
        return false;
    const mid_tensor *mt = mid_t(p, t), *mu = mid_t(p, cp->out[0]);
    layout a = mt->lay, b = mu->lay;
    if (a.enc != ENC_ROW_MAJOR || b.enc != ENC_AMP_LEFT || mu->kind != MT_TEMP || mu->alias_of >= 0 || mu->stack != 1 ||
        mu->dtype != mt->dtype || mu->scale != mt->scale)
        return false;
    b.enc = ENC_ROW_MAJOR;
    if (!layout_equal(&a, &b)) return false;
    pp->out[0] = cp->out[0];
    for (int32_t i = 0; i < p->probes.n; i++)
        if (p->probes.v[i].tensor == t) p->probes.v[i].tensor = cp->out[0];
    return true;
}

/* Whether a prim in v(at, end) reads or writes storage st (a repeat may touch anything). */
static bool touched_between(const mid_program *p, const int32_t *v, int32_t at, int32_t end, int32_t st) {
    for (int32_t i = at + 1; i < end; i++) {
        const mid_prim *q = mid_p(p, v[i]);
        if (q->kind == MID_REPEAT) return true;
        for (int k = 0; k < q->nin; k++)
            if (mid_storage(p, q->in[k]) == st) return true;
        for (int k = 0; k < q->nout; k++)
            if (mid_storage(p, q->out[k]) == st) return true;
    }
    return false;
}

/* A repeat body's yield copy of an elementwise result into the carried
 * value, in the same layout (the residual stream's last add): the add writes
 * the carried value itself, when nothing between the two reads or writes it
 * and the add does not read it; watched where it lands. */
static bool absorb_yield(absorber *f, const int32_t *v, int32_t at, int32_t end, mid_prim *pp, const mid_prim *cp, int32_t t) {
    mid_program *p = f->p;
    if (cp->kind != MID_COPY || cp->has_view || cp->nin != 1 || (pp->kind != MID_EWISE && !pp->residual) || pp->nout != 1)
        return false;
    int32_t c = cp->out[0];
    const mid_tensor *mt = mid_t(p, t), *mc = mid_t(p, c);
    if (mc->kind != MT_TEMP || mc->alias_of >= 0 || mc->slice_of >= 0 || mc->stack != 1 || mc->value < 0 ||
        mc->dtype != mt->dtype || mc->scale != mt->scale || !layout_equal(&mc->lay, &mt->lay) ||
        !graph_val(p->g, mc->value)->is_arg || touched_between(p, v, at, end, c))
        return false;
    for (int k = 0; k < pp->nin; k++)
        if (mid_storage(p, pp->in[k]) == c) return false;
    pp->out[0] = c;
    for (int32_t i = 0; i < p->probes.n; i++)
        if (p->probes.v[i].tensor == t) p->probes.v[i].tensor = c;
    return true;
}

/* Whether consumer cp's operands other than t are ready where the producer
 * at v[at] runs: nothing after it in v[0, n) writes their storage (an alias,
 * a concat's pieces, a repeat), except one copy of a value nothing there
 * writes (a bias computed in a loop body, copied where the add wants it),
 * which the absorption then moves to just before the producer: *move is its
 * place, else -1. */
static bool ready_at(const absorber *f, const int32_t *v, int32_t n, int32_t at, const mid_prim *cp, int32_t t,
                     int32_t *move) {
    const mid_program *p = f->p;
    *move = -1;
    for (int k = 0; k < cp->nin; k++) {
        int32_t u = cp->in[k];
        if (u == t) continue;
        int32_t pos = mid_writer_after(p, v, n, at, mid_storage(p, u));
        if (pos == -1) continue;
        if (pos < 0 || *move >= 0) return false;
        const mid_prim *mp = mid_p(p, v[pos]);
        if (mp->kind != MID_COPY || mp->nin != 1 || mp->nout != 1 || mp->out[0] != u ||
            mid_writer_after(p, v, n, at, mid_storage(p, mp->in[0])) != -1)
            return false;
        *move = pos;
    }
    return true;
}

static void absorb_block(absorber *f, mid_block *blk) {
    mid_program *p = f->p;
    int32_t n = 0;
    for (int32_t j = 0; j < blk->n; j++) {
        int32_t c = blk->v[j];
        mid_prim *cp = mid_p(p, c);
        if (cp->kind == MID_REPEAT) absorb_block(f, &cp->body);
        blk->v[n++] = c;
        if (cp->kind == MID_SOFTMAX) {
            n--; /* v[0, n): the prims before it, one of which the absorption may take out */
            if (f->on & MID_ABSORB_BIT(PRESCALE)) absorb_prescale(f, blk->v, &n, cp);
            blk->v[n++] = c;
        }
        if (cp->kind != MID_EWISE && cp->kind != MID_COPY) continue;
        for (int k = 0; k < cp->nin; k++) {
            int32_t t = cp->in[k], via = -1;
            /* A cast of a reduction's result seen through an alias (the head
             * merge's transpose and reshape) reads the reduction's storage in
             * its order: the reduction, which sweeps its shards flat, can
             * write the cast's result instead. */
            if (cp->kind == MID_EWISE && cp->ew == KERNEL_EW_CAST) {
                int32_t u = alias_root(f, t);
                if (u != t && f->maker[u] >= 0 && mid_p(p, f->maker[u])->kind == MID_REDUCE &&
                    layout_block_elems(&mid_t(p, t)->lay) == layout_block_elems(&mid_t(p, u)->lay))
                    via = t, t = u;
            }
            int32_t pid = f->maker[t];
            if (!only_temp(f, t)) continue;
            if (cp->nin == 2 && cp->in[0] == cp->in[1]) continue;
            int32_t at = -1; /* the producer's place, earlier in this block */
            for (int32_t i = 0; i < n - 1 && at < 0; i++)
                if (blk->v[i] == pid) at = i;
            mid_prim *pp = mid_p(p, pid);
            int32_t move;
            if (at < 0 || !ready_at(f, blk->v, n - 1, at, cp, via >= 0 ? via : t, &move) ||
                !((ON(f, CAST) && absorb_cast(p, pp, cp, t, via)) ||
                  (via < 0 && ((ON(f, BIAS) && absorb_bias(p, pp, cp, t)) || (ON(f, GELU) && absorb_gelu(p, pp, cp, t)) ||
                               (ON(f, RESIDUAL) && absorb_residual(p, pp, cp, t)) || (ON(f, PANELS) && absorb_panels(f, pp, cp, t)) ||
                               (ON(f, YIELD) && absorb_yield(f, blk->v, at, n - 1, pp, cp, t))))))
                continue;
            if (move >= 0) {
                int32_t mk = blk->v[move];
                memmove(&blk->v[at + 1], &blk->v[at], sizeof(int32_t) * (size_t)(move - at));
                blk->v[at] = mk;
            }
            f->maker[cp->out[0]] = pid;
            n--; /* the consumer is gone */
            mid_drop_probes(p, t, c, pid);
            for (int32_t a = via; a >= 0 && a != t; a = mid_t(p, a)->alias_of) mid_drop_probes(p, a, c, pid);
            break;
        }
    }
    blk->n = n;
}


int mid_absorb(mid_program *p, uint32_t rewrites, diag *d) {
    (void)d;
    absorber f = {p, NULL, NULL, rewrites};
    mid_uses(p, &f.reads, &f.maker);
    absorb_block(&f, &p->top);
    free(f.reads);
    free(f.maker);
    return 0;
}
bool mid_reduce_has_bias(const mid_prim *pr) {
    return pr->kind == MID_REDUCE && pr->nin - (pr->own ? 1 : 0) - (pr->residual ? 1 : 0) == 2;
}

int32_t mid_reduce_residual(const mid_prim *pr) {
    return pr->kind == MID_REDUCE && pr->residual ? pr->in[pr->nin - 1 - (pr->own ? 1 : 0)] : -1;
}

