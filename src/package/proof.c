/* proof.c: whether a package stores an optimizer's gradient, read off the
 * placed program alone (docs/epilogue.md, "The proof"), and how much of a
 * tile its buffers hold at once.
 *
 * The program is seen at buffer granularity: a buffer has one address
 * range and one live range (steps) on every tile, and while it is live no
 * other buffer shares a byte, so (step, address) names exactly one buffer.
 * From every run and every fragment of the exchange tables (decoded from
 * the package, pkg_xplan_build) the pass records which kernels
 * write each buffer and which buffers are copied into it (COPY runs and
 * fragments only move bytes). Then, from the runs that write the
 * optimizer's results (found through their bindings):
 *
 *   - an SGD or ADAMW run reads its gradient operand from a buffer: the
 *     gradient is stored there, whatever made it;
 *   - any other operand such a run reads (a weight, a state) is traced back
 *     through the copies into it; if a GEMM or a REDUCE wrote it, it holds a
 *     completed product, which is a stored gradient too;
 *   - the factors of a fused GEMM (A and B of GEMM_EPI) and the partial sums
 *     a REDUCE_EPI completes are not the gradient: the product exists only
 *     inside that run, one value at a time.
 *
 * Nothing here reads the metadata, the recipe or a flag: a package that
 * stores the gradient fails whatever it claims. */
#include "package.h"

#include <stdlib.h>
#include <string.h>

typedef struct step_live {
    int32_t *ids;      /* live buffers at the step, by address */
    uint64_t *reach;   /* reach[i]: the furthest end of ids[0..i] */
    int32_t n;
    bool built;
} step_live;

typedef struct edge {
    int32_t dst, src;  /* buffer src is copied into buffer dst */
} edge;

typedef struct px {
    const package *p;
    int32_t nb;
    step_live *live;     /* per step */
    uint32_t *writers;   /* per buffer: bit k, kernel k writes it */
    edge *edges;
    int64_t nedges;
} px;

static uint64_t buf_end(const low_buf *b) { return (uint64_t)b->addr + (b->reserved > b->bytes ? b->reserved : b->bytes); }

static bool live_at(const px *x, const low_buf *b, int32_t step) {
    int32_t last = b->last >= (int32_t)x->p->prog.steps.n ? INT32_MAX : b->last;
    return b->first >= 0 && b->first <= step && step <= last;
}

typedef struct addr_id {
    uint32_t addr;
    int32_t id;
} addr_id;

static int cmp_addr(const void *a, const void *b) {
    const addr_id *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The buffer live at `step` that holds byte `addr` on `tile`, -1 if none.
 * Buffers live at once overlap only on no common tile, so the one found is
 * the one of that tile: by address, back from the last starting at or
 * below addr while an earlier one could still reach it. */
static int32_t buf_at(px *x, uint32_t tile, int32_t step, uint64_t addr) {
    step_live *sl = &x->live[step];
    if (!sl->built) {
        addr_id *tmp = xmalloc(sizeof(addr_id) * ((size_t)x->nb + 1));
        for (int32_t b = 0; b < x->nb; b++)
            if (live_at(x, &x->p->prog.bufs.v[b], step)) tmp[sl->n++] = (addr_id){x->p->prog.bufs.v[b].addr, b};
        qsort(tmp, (size_t)sl->n, sizeof(addr_id), cmp_addr);
        sl->ids = xmalloc(sizeof(int32_t) * ((size_t)sl->n + 1));
        sl->reach = xmalloc(sizeof(uint64_t) * ((size_t)sl->n + 1));
        for (int32_t i = 0; i < sl->n; i++) {
            uint64_t e = buf_end(&x->p->prog.bufs.v[tmp[i].id]);
            sl->ids[i] = tmp[i].id;
            sl->reach[i] = i && sl->reach[i - 1] > e ? sl->reach[i - 1] : e;
        }
        free(tmp);
        sl->built = true;
    }
    int32_t lo = 0, hi = sl->n - 1, at = -1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (x->p->prog.bufs.v[sl->ids[mid]].addr <= addr) at = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    for (; at >= 0 && sl->reach[at] > addr; at--)
        if (addr < buf_end(&x->p->prog.bufs.v[sl->ids[at]]) && package_buf_on_tile(x->p, sl->ids[at], tile)) return sl->ids[at];
    return -1;
}

static void add_edge(px *x, int64_t *cap, int32_t dst, int32_t src) {
    if (dst < 0 || src < 0 || dst == src) return;
    if (x->nedges && x->edges[x->nedges - 1].dst == dst && x->edges[x->nedges - 1].src == src) return;
    if (x->nedges == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        x->edges = xrealloc(x->edges, sizeof(edge) * (size_t)*cap);
    }
    x->edges[x->nedges++] = (edge){dst, src};
}

static int cmp_edge(const void *a, const void *b) {
    const edge *x = a, *y = b;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    return (x->src > y->src) - (x->src < y->src);
}

/* Writers and copies of every buffer, over the whole program: its runs and
 * the fragments of its exchange tables (xp, decoded from the package). */
static void scan(px *x, const pkg_xplan *xp, int32_t **step_of_run) {
    const low_program *lp = &x->p->prog;
    int64_t cap = 0;
    *step_of_run = xmalloc(sizeof(int32_t) * ((size_t)lp->runs.n + 1));
    for (int32_t s = 0; s < lp->steps.n; s++) {
        const low_step *st = &lp->steps.v[s];
        if (st->kind == LOW_STEP_COMPUTE)
            for (uint32_t i = st->first; i < st->first + st->count; i++) {
                const kernel_run *r = &lp->runs.v[i];
                (*step_of_run)[i] = s;
                for (int op = 0; op < KERNEL_MAX_OPERANDS; op++) {
                    if (!kernel_run_writes(r, op)) continue;
                    int32_t b = buf_at(x, r->tile, s, r->ptr[op].off);
                    if (b < 0) continue;
                    x->writers[b] |= 1u << r->kernel;
                    if (r->kernel == KERNEL_K_COPY) add_edge(x, &cap, b, buf_at(x, r->tile, s, r->ptr[1].off));
                }
            }
    }
    for (uint32_t ph = 0; ph < xp->nphases; ph++) {
        const pkg_xphase *P = &xp->phase[ph];
        for (uint32_t k = 0; k < P->nreceivers; k++) {
            const pkg_xtile *t = &xp->tiles[P->receivers + k];
            for (uint64_t i = t->first; i < t->first + t->n; i++) {
                const pkg_xsend *sd = &xp->send[xp->recv[i].send];
                add_edge(x, &cap, buf_at(x, t->tile, P->step, xp->recv[i].addr), buf_at(x, sd->tile, P->step, sd->addr));
            }
        }
    }
    if (x->nedges) qsort(x->edges, (size_t)x->nedges, sizeof(edge), cmp_edge);
}

static const char *label(const px *x, int32_t b) { return x->p->prog.strings.v + x->p->prog.bufs.v[b].label; }

/* Buffer b, or one copied into it, holding a completed product (written by
 * GEMM or REDUCE): that buffer, else -1. seen guards against cycles. */
static int32_t product_in(const px *x, int32_t b, uint8_t *seen) {
    if (seen[b]) return -1;
    seen[b] = 1;
    if (x->writers[b] & ((1u << KERNEL_K_GEMM) | (1u << KERNEL_K_REDUCE))) return b;
    for (int64_t i = 0; i < x->nedges; i++)
        if (x->edges[i].dst == b) {
            int32_t f = product_in(x, x->edges[i].src, seen);
            if (f >= 0) return f;
        }
    return -1;
}

/* The buffers of the bindings named in outs (outputs, else probes). */
static int32_t result_bufs(px *x, const char *const *outs, int nouts, int32_t *bufs) {
    int32_t n = 0, last = x->p->prog.steps.n - 1;
    for (int k = 0; k < nouts; k++) {
        int32_t b = -1;
        for (int32_t i = 0; i < x->p->bindings.n && b < 0; i++) {
            const pkg_binding *bd = &x->p->bindings.v[i];
            if (bd->role == PKG_INPUT || strcmp(bd->name, outs[k]) != 0) continue;
            int64_t e0[LAYOUT_MAX_RANK] = {0};
            int32_t tile = 0;
            layout_owners(&bd->layout, e0, &tile, 1); /* its element 0's first replica: a tile of its buffer */
            b = buf_at(x, (uint32_t)tile, bd->role == PKG_PROBE && bd->step >= 0 ? bd->step : last, bd->addr);
        }
        if (b >= 0) bufs[n++] = b;
    }
    return n;
}

static bool is_factor(const kernel_run *r, int op) {
    return ((r->kernel == KERNEL_K_GEMM || r->kernel == KERNEL_K_GEMM_EPI) && op < 2) || (r->kernel == KERNEL_K_REDUCE_EPI && op == 0);
}

int package_epilogue_proof(const package *p, const char *const *outs, int nouts, epilogue_proof *out, diag *d) {
    memset(out, 0, sizeof *out);
    const low_program *lp = &p->prog;
    pkg_xplan xp;
    if (pkg_xplan_build(p, "package", &xp, d) != 0) return -1;
    px x = {.p = p, .nb = lp->bufs.n};
    x.live = xcalloc((size_t)lp->steps.n + 1, sizeof(step_live));
    x.writers = xcalloc((size_t)x.nb + 1, sizeof(uint32_t));
    int32_t *step_of_run;
    scan(&x, &xp, &step_of_run);
    pkg_xplan_free(&xp);
    int32_t *res = xmalloc(sizeof(int32_t) * ((size_t)nouts + 1));
    int32_t nres = result_bufs(&x, outs, nouts, res);
    uint8_t *seen = xmalloc((size_t)x.nb + 1);
    int32_t first_kernel = -1;
    bool read_factor = false;
    for (int32_t i = 0; i < lp->runs.n && !out->materialized; i++) {
        const kernel_run *r = &lp->runs.v[i];
        int32_t s = step_of_run[i];
        bool update = false;
        for (int op = 0; op < KERNEL_MAX_OPERANDS && !update; op++)
            if (kernel_run_writes(r, op)) {
                int32_t b = buf_at(&x, r->tile, s, r->ptr[op].off);
                for (int32_t k = 0; k < nres && !update; k++) update = b == res[k];
            }
        if (!update) continue;
        out->update_runs++;
        if (first_kernel < 0) first_kernel = r->kernel;
        for (int op = 0; op < KERNEL_MAX_OPERANDS && !out->materialized; op++) {
            if (!kernel_run_uses(r, op) || (kernel_run_writes(r, op) && r->kernel != KERNEL_K_SUMSQ)) continue;
            if (is_factor(r, op)) {
                read_factor = true;
                continue;
            }
            int32_t b = buf_at(&x, r->tile, s, r->ptr[op].off);
            if (b < 0) continue;
            bool grad_operand = (r->kernel == KERNEL_K_SGD && op == 3) || (r->kernel == KERNEL_K_ADAMW && op == 4);
            memset(seen, 0, (size_t)x.nb + 1);
            int32_t prod = product_in(&x, b, seen);
            if (!grad_operand && prod < 0) continue;
            const low_buf *bb = &lp->bufs.v[b];
            out->materialized = true;
            out->buffer_bytes = bb->bytes;
            if (prod >= 0 && lp->bufs.v[prod].bytes > out->buffer_bytes) out->buffer_bytes = lp->bufs.v[prod].bytes;
            int at = snprintf(out->evidence, sizeof out->evidence,
                              "%s run on tile %u (step %d) reads %s from buffer '%s' (%u bytes per tile, live steps %d to %d)",
                              kernel_names[r->kernel], r->tile, (int)s, grad_operand ? "its gradient" : "a completed product",
                              label(&x, b), bb->bytes, (int)bb->first, (int)bb->last);
            if (prod >= 0 && prod != b && at > 0 && at < (int)sizeof out->evidence)
                snprintf(out->evidence + at, sizeof out->evidence - (size_t)at,
                         ", copied from '%s' (%u bytes per tile, live steps %d to %d), which a %s wrote", label(&x, prod),
                         lp->bufs.v[prod].bytes, (int)lp->bufs.v[prod].first, (int)lp->bufs.v[prod].last,
                         x.writers[prod] & (1u << KERNEL_K_REDUCE) ? "REDUCE" : "GEMM");
        }
    }
    if (!out->materialized) {
        if (!out->update_runs)
            snprintf(out->evidence, sizeof out->evidence, "no run writes the results' buffers (%d of %d found)", (int)nres, nouts);
        else
            snprintf(out->evidence, sizeof out->evidence,
                     "%d runs write the results (the first a %s); they read %sthe weight and states, none of them a stored "
                     "or copied product, and no SGD or ADAMW run reads a gradient operand",
                     (int)out->update_runs, kernel_names[first_kernel], read_factor ? "the GEMM's factors or partial sums, " : "");
    }
    free(seen);
    free(res);
    free(step_of_run);
    for (int32_t s = 0; s < lp->steps.n; s++) free(x.live[s].ids), free(x.live[s].reach);
    free(x.live);
    free(x.writers);
    free(x.edges);
    return 0;
}

/* ---- the live peak -------------------------------------------------------------------- */

int package_live_peak(const package *p, package_peak *out, diag *d) {
    memset(out, 0, sizeof *out);
    const low_program *lp = &p->prog;
    uint32_t tiles = p->machine.tiles;
    pkg_xplan xp;
    if (pkg_xplan_build(p, "package", &xp, d) != 0) return -1;
    px x = {.p = p, .nb = lp->bufs.n};
    x.live = xcalloc((size_t)lp->steps.n + 1, sizeof(step_live));
    /* held[b * tiles + t]: tile t touches buffer b (a run's operand, a fragment's end, initial data). */
    uint8_t *held = xcalloc((size_t)x.nb * tiles + 1, 1);
#define HOLD(b, t)                                                    \
    do {                                                              \
        int32_t b_ = (b);                                             \
        if (b_ >= 0) held[(size_t)b_ * tiles + (t)] = 1;              \
    } while (0)
    for (int32_t s = 0; s < lp->steps.n; s++) {
        const low_step *st = &lp->steps.v[s];
        if (st->kind == LOW_STEP_COMPUTE)
            for (uint32_t i = st->first; i < st->first + st->count; i++) {
                const kernel_run *r = &lp->runs.v[i];
                for (int op = 0; op < KERNEL_MAX_OPERANDS; op++)
                    if (kernel_run_uses(r, op)) HOLD(buf_at(&x, r->tile, s, r->ptr[op].off), r->tile);
            }
    }
    for (uint32_t ph = 0; ph < xp.nphases; ph++) {
        const pkg_xphase *P = &xp.phase[ph];
        for (uint64_t i = P->first_send; i < P->first_send + P->nsend; i++)
            HOLD(buf_at(&x, xp.send[i].tile, P->step, xp.send[i].addr), xp.send[i].tile);
        for (uint32_t k = 0; k < P->nreceivers; k++) {
            const pkg_xtile *t = &xp.tiles[P->receivers + k];
            for (uint64_t i = t->first; i < t->first + t->n; i++) HOLD(buf_at(&x, t->tile, P->step, xp.recv[i].addr), t->tile);
        }
    }
    pkg_xplan_free(&xp);
    for (int32_t i = 0; i < p->segments.n; i++) HOLD(buf_at(&x, p->segments.v[i].tile, 0, p->segments.v[i].addr), p->segments.v[i].tile);
#undef HOLD
    /* Per tile, the bytes reserved by the buffers it holds, at each step: changes at first and last + 1. */
    int32_t ns = lp->steps.n;
    int64_t *delta = xmalloc(sizeof(int64_t) * ((size_t)ns + 2)), *dpay = xmalloc(sizeof(int64_t) * ((size_t)ns + 2));
    for (uint32_t t = 0; t < tiles; t++) {
        memset(delta, 0, sizeof(int64_t) * ((size_t)ns + 2));
        memset(dpay, 0, sizeof(int64_t) * ((size_t)ns + 2));
        bool any = false;
        for (int32_t b = 0; b < x.nb; b++) {
            const low_buf *bf = &lp->bufs.v[b];
            if (!held[(size_t)b * tiles + t] || bf->first < 0) continue;
            int32_t last = bf->last >= ns ? ns - 1 : bf->last;
            delta[bf->first] += bf->reserved;
            delta[last + 1] -= bf->reserved;
            dpay[bf->first] += bf->bytes;
            dpay[last + 1] -= bf->bytes;
            any = true;
        }
        if (!any) continue;
        int64_t live = 0, pay = 0;
        for (int32_t s = 0; s < ns; s++) {
            live += delta[s];
            pay += dpay[s];
            if (live > (int64_t)out->bytes) out->bytes = (uint64_t)live, out->tile = t, out->step = s;
            if (pay > (int64_t)out->payload) out->payload = (uint64_t)pay, out->payload_tile = t, out->payload_step = s;
        }
    }
    free(delta);
    free(dpay);
    free(held);
    for (int32_t s = 0; s < lp->steps.n; s++) free(x.live[s].ids), free(x.live[s].reach);
    free(x.live);
    return 0;
}
