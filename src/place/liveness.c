/* liveness.c: when each buffer is live, in steps (place.h, "liveness.c").
 *
 * A buffer is live from its first access to its last, in program order,
 * widened across repeats:
 *
 *   - live before a repeat it is used in (an input, a parameter, a value
 *     made earlier): it must survive every iteration, so it lives to the
 *     repeat's END;
 *   - first read inside a repeat before it is written there (a carried
 *     value, read at the top of the body, written at the bottom): it crosses
 *     the back edge, so it lives over the whole repeat, REPEAT to END;
 *   - first written inside a repeat (a body temporary): its span inside the
 *     body is enough, whatever the iteration.
 *
 * Repeats are treated innermost first, so nested bodies compose. Host
 * inputs and parameters are live from step 0; outputs to the end (nsteps).
 * A buffer is live on every tile at once: placement gives it one address. */
#include "place.h"

#include <stdlib.h>
#include <string.h>

typedef struct scope {
    int32_t begin, end;   /* REPEAT and END step indices */
    int depth;
} scope;

typedef struct first_in {
    int32_t step;         /* first access inside the scope, -1 none */
    bool write;
} first_in;

typedef struct lv {
    const low_program *lp;
    place_live *live;
    scope *scopes;
    int32_t nscopes;
    int32_t *inner;       /* per step: innermost enclosing scope, -1 */
    int32_t *parent;      /* per scope: enclosing scope, -1 */
    first_in *first;      /* [scope][buffer] */
    int32_t nbufs;
} lv;

static void access(lv *x, int32_t step, uint32_t buf, bool write) {
    if (buf == KERNEL_ABSOLUTE || (int32_t)buf >= x->nbufs) return;
    place_live *l = &x->live[buf];
    if (l->first < 0 || step < l->first) l->first = step;
    if (step > l->last) l->last = step;
    for (int32_t s = x->inner[step]; s >= 0; s = x->parent[s]) {
        first_in *f = &x->first[(size_t)s * (size_t)x->nbufs + buf];
        /* Steps come in order. Within one, a read counts as first (an
         * exchange reads before it writes; compute_step says which came
         * first on a compute step's tiles). */
        if (f->step < 0) *f = (first_in){step, write};
        else if (f->step == step && !write) f->write = false;
    }
}

/* Per buffer, what a compute step's scan has seen of it. */
typedef struct seen {
    int32_t step;         /* the step last scanned that touched it, -1 none */
    uint32_t tile;        /* the tile whose runs touched it last */
    bool rfirst;          /* in this step: read first on some tile */
    bool wrote;           /* on this tile: [lo, hi) written */
    uint64_t lo, hi;
} seen;

/* A compute step's accesses. A buffer is read first in it when, on some
 * tile, a run reads bytes of it that no run before it there wrote (a run
 * reads its operands before it writes; SUMSQ reads what it adds to). A step
 * joined from two (schedule.c) may write a buffer and then read what it
 * wrote: that is a temporary made in the step, not a value carried into it.
 * Written bytes are kept as one interval per buffer and tile, each write's
 * hull (kernel_run_extent); an access that moves with the iteration counts as
 * unwritten. A hull over-counts a strided write's gaps, which matters only
 * for a carried buffer whose first access in the body is such a write
 * followed by a read of a gap: tessel writes a carried value whole, with the
 * yield's copies. touched: scratch of one entry per buffer. */
static void compute_step(lv *x, int32_t i, seen *sn, uint32_t *touched) {
    const low_step *st = &x->lp->steps.v[i];
    int32_t ntouched = 0;
    for (uint32_t k = st->first; k < st->first + st->count; k++) {
        const kernel_run *r = &x->lp->runs.v[k];
        for (int pass = 0; pass < 2; pass++) /* reads, then writes */
            for (int op = 0; op < KERNEL_MAX_OPERANDS; op++) {
                if (!kernel_run_uses(r, op)) continue;
                uint32_t b = r->ptr[op].buf;
                bool w = kernel_run_writes(r, op), rd = !w || r->kernel == KERNEL_K_SUMSQ;
                if (b == KERNEL_ABSOLUTE || (int32_t)b >= x->nbufs || (pass == 0 ? !rd : !w)) continue;
                seen *e = &sn[b];
                if (e->step != i) *e = (seen){.step = i, .tile = UINT32_MAX}, touched[ntouched++] = b;
                if (e->tile != r->tile) e->tile = r->tile, e->wrote = false;
                uint64_t lo = r->ptr[op].off, hi = lo + kernel_run_extent(r, op);
                bool fixed = r->ptr[op].iter_stride == 0;
                if (pass == 0 && !(e->wrote && fixed && lo >= e->lo && hi <= e->hi)) e->rfirst = true;
                if (pass == 1 && fixed) {
                    if (!e->wrote) e->lo = lo, e->hi = hi;
                    else if (lo <= e->hi && hi >= e->lo) /* overlapping or adjacent: one interval */
                        e->lo = lo < e->lo ? lo : e->lo, e->hi = hi > e->hi ? hi : e->hi;
                    else if (hi - lo > e->hi - e->lo) e->lo = lo, e->hi = hi;
                    e->wrote = true;
                }
            }
    }
    for (int32_t t = 0; t < ntouched; t++) {
        if (sn[touched[t]].rfirst) access(x, i, touched[t], false);
        access(x, i, touched[t], true);
    }
}

static int cmp_depth(const void *a, const void *b) {
    const scope *x = a, *y = b;
    if (x->depth != y->depth) return x->depth > y->depth ? -1 : 1;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

void place_liveness(const low_program *lp, const uint8_t *flags, place_live *live) {
    int32_t n = lp->steps.n, nb = lp->bufs.n;
    lv x = {.lp = lp, .live = live, .nbufs = nb};
    x.inner = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    x.scopes = xmalloc(sizeof(scope) * (size_t)(n + 1));
    x.parent = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    int32_t stack[64], depth = 0;
    for (int32_t i = 0; i < n; i++) {
        const low_step *st = &lp->steps.v[i];
        if (st->kind == LOW_STEP_REPEAT) {
            TS_ASSERT(depth < 64);
            x.scopes[x.nscopes] = (scope){i, -1, depth};
            x.parent[x.nscopes] = depth ? stack[depth - 1] : -1;
            stack[depth++] = x.nscopes++;
        }
        x.inner[i] = depth ? stack[depth - 1] : -1;
        if (st->kind == LOW_STEP_END) {
            TS_ASSERT(depth > 0);
            x.scopes[stack[--depth]].end = i;
        }
    }
    x.first = xmalloc(sizeof(first_in) * ((size_t)x.nscopes * (size_t)nb + 1));
    for (size_t i = 0; i < (size_t)x.nscopes * (size_t)nb; i++) x.first[i] = (first_in){-1, false};
    for (int32_t b = 0; b < nb; b++) live[b] = (place_live){-1, -1};
    seen *sn = xmalloc(sizeof(seen) * (size_t)(nb + 1));
    uint32_t *touched = xmalloc(sizeof(uint32_t) * (size_t)(nb + 1));
    for (int32_t b = 0; b < nb; b++) sn[b].step = -1;
    for (int32_t i = 0; i < n; i++) {
        const low_step *st = &lp->steps.v[i];
        if (st->kind == LOW_STEP_COMPUTE) {
            compute_step(&x, i, sn, touched);
        } else if (st->kind == LOW_STEP_EXCHANGE) {
            for (uint32_t k = st->first; k < st->first + st->count; k++) access(&x, i, lp->frags.v[k].src.buf, false);
            for (uint32_t k = st->first; k < st->first + st->count; k++) access(&x, i, lp->frags.v[k].dst.buf, true);
        }
    }
    for (int32_t b = 0; b < nb; b++) {
        if (flags[b] & PLACE_LIVE_AT_START) {
            if (live[b].last < 0) live[b].last = 0;
            live[b].first = 0;
        }
        if (flags[b] & PLACE_LIVE_AT_END) {
            if (live[b].first < 0) live[b].first = n;
            live[b].last = n;
        }
    }
    /* Innermost repeats first. The scope array is sorted for the walk;
     * first_in stays indexed by the original scope numbers. */
    int32_t *by_depth = xmalloc(sizeof(int32_t) * (size_t)(x.nscopes + 1));
    scope *sorted = xmalloc(sizeof(scope) * (size_t)(x.nscopes + 1));
    memcpy(sorted, x.scopes, sizeof(scope) * (size_t)x.nscopes);
    qsort(sorted, (size_t)x.nscopes, sizeof(scope), cmp_depth);
    for (int32_t k = 0; k < x.nscopes; k++)
        for (int32_t s = 0; s < x.nscopes; s++)
            if (x.scopes[s].begin == sorted[k].begin) by_depth[k] = s;
    for (int32_t k = 0; k < x.nscopes; k++) {
        int32_t s = by_depth[k];
        const scope *sc = &x.scopes[s];
        for (int32_t b = 0; b < nb; b++) {
            const first_in *f = &x.first[(size_t)s * (size_t)nb + b];
            if (f->step < 0) continue;
            place_live *l = &live[b];
            if (l->first < sc->begin) {
                if (l->last < sc->end) l->last = sc->end;
            } else if (!f->write) {
                l->first = sc->begin;
                if (l->last < sc->end) l->last = sc->end;
            }
        }
    }
    free(by_depth);
    free(sn);
    free(touched);
    free(sorted);
    free(x.first);
    free(x.inner);
    free(x.scopes);
    free(x.parent);
}
