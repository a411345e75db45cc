/* alloc.c: addresses for buffers with live ranges in one tile's memory map
 * (place.h, "alloc.c").
 *
 *   base ─ code ─ data_base ─── ordinary region ───┬── interleaved region ──┐ loader_limit
 *                             packed, aligned       │ whole logical elements │ (the last element
 *                                                   │ of interleave_factor x │  usable up to it)
 *                                                   │ memory_element_bytes   │
 *
 * Offline, greedy by size as good allocators plan (ggml-alloc's free blocks,
 * TFLite's greedy-by-size): requests in order of reservation, then lifetime,
 * largest first; each takes the best-fitting gap among the buffers already
 * placed whose lifetimes overlap its own, in its preferred region first.
 * Ownership is exclusive while live; a buffer's bytes are reused once it is
 * dead. The interleaved region is reserved in whole logical elements only: a
 * buffer there owns its elements (what makes interleaved loads conflict-free),
 * except that one whose payload and tail end below loader_limit may take the
 * usable part of the last, partial element. No other gap is ever clipped.
 * A request keeps out of the memory elements of the requests it is to stay
 * apart from (place_req.apart) where some gap lets it: the first placement
 * orders prefer such a gap (or a later element boundary in one), and only
 * when none of them places everything do the orders run again without. */
#include "place.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

typedef struct region {
    uint64_t lo, hi;   /* [lo, hi) bytes */
    uint64_t unit;     /* interleaved: bytes per logical element; ordinary: 0 */
} region;

static void regions(const machine *m, uint32_t data_base, region *ord, region *il) {
    kernel_regions k = kernel_tile_regions(m, data_base);
    *ord = (region){k.ord_lo, k.ord_hi, 0};
    *il = (region){k.il_lo, k.il_hi, k.unit};
}

/* Whether a and b may need the same bytes: live at once on a common tile. */
static bool overlaps_time(const place_req *a, const place_req *b) {
    if (a->first > b->last || b->first > a->last) return false;
    if (!a->tiles || !b->tiles) return true;
    for (int32_t k = 0; k < a->tile_words && k < b->tile_words; k++)
        if (a->tiles[k] & b->tiles[k]) return true;
    return false;
}

typedef struct busy {
    uint64_t lo, hi;
    int32_t req;
} busy;

static int cmp_busy(const void *a, const void *b) {
    const busy *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The placed buffers in r live while q is, sorted by address. */
static int32_t occupied(const place_req *req, const place_slot *slot, const bool *done, int32_t n, const place_req *q,
                        const region *r, busy *out) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!done[i] || !overlaps_time(&req[i], q)) continue;
        uint64_t lo = slot[i].addr, hi = lo + slot[i].reserved;
        if (hi <= r->lo || lo >= r->hi) continue;
        out[k++] = (busy){lo, hi, i};
    }
    qsort(out, (size_t)k, sizeof(busy), cmp_busy);
    return k;
}

/* Where q fits in gap [lo, hi) of region r: its address and reservation.
 * Ordinary: aligned, payload + tail rounded to the alignment. Interleaved:
 * from an element boundary, whole elements, except up to loader_limit in the
 * last, partial element. */
static bool fit(const place_req *q, const region *r, uint64_t lo, uint64_t hi, uint64_t *at, uint64_t *res) {
    uint64_t need = q->payload + q->tail;
    if (!r->unit) {
        uint64_t a = align_up(lo, q->align), rv = align_up(need ? need : 1, q->align);
        if (a + rv > hi) return false;
        *at = a, *res = rv;
        return true;
    }
    uint64_t a = r->lo + align_up(lo - r->lo, r->unit), rv = align_up(need ? need : 1, r->unit);
    /* Only the last element may be taken in part: the gap must run to the
     * end of the region, and the whole payload and tail end below it. There
     * the buffer goes as high as it can, so it takes the partial element and
     * leaves whole ones below for others. */
    if (hi == r->hi && a + need <= hi) {
        uint64_t top = r->lo + (hi - need - r->lo) / r->unit * r->unit;
        *at = top, *res = hi - top;
        return true;
    }
    if (a + rv <= hi) {
        *at = a, *res = rv;
        return true;
    }
    return false;
}

/* Memory elements as bits (folded modulo 64 past the 64th: more conflicts, never fewer). */
typedef struct elements {
    uint64_t base, bytes;
} elements;

static uint64_t element_bits(const elements *e, uint64_t lo, uint64_t hi) {
    uint64_t bits = 0;
    for (uint64_t k = (lo - e->base) / e->bytes; k <= (hi - 1 - e->base) / e->bytes && bits != UINT64_MAX; k++) bits |= 1ull << (k % 64);
    return bits;
}

/* Best fit: the smallest gap that takes q; ties to the lower address. With
 * avoid (element bits q is to stay out of), a placement clear of them wins
 * over any that is not: in each gap its start and then each later element
 * boundary is tried. */
static bool place_in(const place_req *q, const region *r, const busy *b, int32_t nb, const elements *el, uint64_t avoid,
                     uint64_t *at, uint64_t *res, bool *is_clear) {
    bool found = false, found_clear = false;
    uint64_t best_gap = UINT64_MAX, lo = r->lo;
    for (int32_t i = 0; i <= nb; i++) {
        uint64_t hi = i < nb ? b[i].lo : r->hi;
        if (hi > lo) {
            uint64_t a, rv;
            for (uint64_t from = lo; from < hi; from = el->base + ((from - el->base) / el->bytes + 1) * el->bytes) {
                if (!fit(q, r, from, hi, &a, &rv)) break;
                bool clear = avoid == 0 || (element_bits(el, a, a + rv) & avoid) == 0;
                if ((clear && !found_clear) || (clear == found_clear && hi - lo < best_gap)) {
                    best_gap = hi - lo;
                    *at = a, *res = rv;
                    found = true;
                    found_clear = clear;
                }
                if (clear || avoid == 0) break; /* later in this gap is no better */
            }
        }
        if (i < nb && b[i].hi > lo) lo = b[i].hi;
    }
    *is_clear = found_clear;
    return found;
}

/* The orders requests are placed in, tried in turn until one fits
 * (deterministic, whatever the thread count). Those live for most of the
 * program (weights, inputs, carried values) go first in orders 0 and 1, so
 * they pack together and leave each region in one piece for the
 * temporaries, which follow largest first:
 *   0  the resident ones that would waste most in whole interleaved
 *      elements first (small parameters, then weights just past a whole
 *      element), so they take the packed region;
 *   1  the resident ones largest first;
 *   2  largest first, whatever the lifetime (greedy by size).
 * Ties go to the longer lifetime, then to request order. Where an order
 * keeping partners apart places everything but leaves some request in a
 * partner's memory element, it runs again with those requests first
 * (place_assign), up to PROMOTE_ROUNDS times. When all six fail, a last
 * order splits the regions as the estimate's memory model does (the
 * largest buffers interleaved, where they waste least, leaving the packed
 * region to the small ones, which whole elements would waste most on):
 * order 0 without the apart rule, a request that wastes at most an eighth
 * in whole elements kept out of the ordinary region.
 *
 * With the requests' tiles known, the seven run again apart only from
 * requests on a common tile, and then one more (STARTS_FIRST): those live
 * from the first step (parameters, inputs) first, then the rest, each
 * largest first. Where a parameter is held on many tiles, its address must
 * be free on all of them for as long as it lives; placed after the
 * temporaries it finds their addresses taken on one tile or another
 * (resnet50: a stem convolution's 261 KB im2col operand beside hundreds of
 * small weights replicated over the tiles), placed first it packs with the
 * other parameters below them. */
enum { ORDERS = 3, PROMOTE_ROUNDS = 4, ALL_ORDERS = 2 * ORDERS + 1, STARTS_FIRST = ALL_ORDERS };

/* Bytes a request would waste rounded up to whole logical elements. */
static int64_t element_waste(const place_req *q, uint64_t unit) {
    uint64_t need = q->payload + q->tail;
    return unit ? (int64_t)(align_up(need ? need : 1, unit) - need) : 0;
}

/* Whole interleaved elements would waste at most an eighth of what the
 * request reserves there: the order of last resort (the seventh, ALL_ORDERS) keeps it
 * out of the packed region, as the estimate's memory model does. */
static bool il_fits_well(const place_req *q, uint64_t unit) {
    uint64_t need = q->payload + q->tail;
    return unit && (uint64_t)element_waste(q, unit) * 8 <= align_up(need ? need : 1, unit);
}

typedef struct order_key {
    int first;          /* 1: promoted ahead of every other (place_assign) */
    int resident;       /* 1: live over more than half of the program */
    int64_t size;       /* bytes; order 0 puts the resident ones' element waste here */
    int64_t life;
    int32_t index;
} order_key;

static int cmp_order(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->first != y->first) return x->first > y->first ? -1 : 1;
    if (x->resident != y->resident) return x->resident > y->resident ? -1 : 1;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->life != y->life) return x->life > y->life ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static void describe_failure(const place_req *req, const place_slot *slot, const bool *done, int32_t n, int32_t i,
                             const region *ord, const region *il, busy *b, char *why, size_t cap, place_shortfall *sf) {
    const place_req *q = &req[i];
    size_t at = 0;
#define PUT(...) at += (size_t)snprintf(why + at, at < cap ? cap - at : 0, __VA_ARGS__)
    PUT("cannot place '%s': payload %" PRIu64 " bytes + access tail %" PRIu32 ", alignment %" PRIu32 ", region %s, live at steps %" PRId32
        "..%" PRId32 "; ",
        q->name ? q->name : "?", q->payload, q->tail, q->align,
        q->region == PLACE_INTERLEAVED ? "interleaved (whole elements)" : q->region == PLACE_ORDINARY ? "ordinary" : "any",
        q->first, q->last);
    uint64_t room = (ord->hi - ord->lo) + (il->hi > il->lo ? il->hi - il->lo : 0);
    *sf = (place_shortfall){q->payload + q->tail, room};
    if (q->payload + q->tail > room) {
        PUT("it alone is more than the %" PRIu64 " bytes a tile has for data (0x%" PRIx64 "..0x%" PRIx64 ")", room, ord->lo,
            il->hi > ord->hi ? il->hi : ord->hi);
        return;
    }
    int32_t nb = occupied(req, slot, done, n, q, &(region){ord->lo, il->hi > ord->hi ? il->hi : ord->hi, 0}, b);
    /* What is live at once: the placed buffers' reservations at the busiest
     * step of q's life (the buffers live at some step of it, summed, would
     * count a reused address once per occupant). */
    int32_t span = q->last - q->first + 1;
    int64_t *delta = xcalloc((size_t)span + 1, sizeof(int64_t));
    for (int32_t k = 0; k < nb; k++) {
        const place_req *o = &req[b[k].req];
        delta[(o->first > q->first ? o->first : q->first) - q->first] += (int64_t)(b[k].hi - b[k].lo);
        delta[(o->last < q->last ? o->last : q->last) - q->first + 1] -= (int64_t)(b[k].hi - b[k].lo);
    }
    int64_t live = 0, peak = 0;
    int32_t peak_step = q->first;
    for (int32_t t = 0; t < span; t++) {
        live += delta[t];
        if (live > peak) peak = live, peak_step = q->first + t;
    }
    free(delta);
    sf->need += (uint64_t)peak;
    PUT("%" PRId32 " buffers live beside it, at most %" PRId64 " bytes at once (step %" PRId32 ")", nb, peak, peak_step);
    /* The largest of them (what to shrink first), each at its address. */
    int32_t shown[6];
    int ns = 0;
    for (; ns < 6 && ns < nb; ns++) {
        int32_t best = -1;
        for (int32_t k = 0; k < nb; k++) {
            bool taken = false;
            for (int t = 0; t < ns; t++) taken |= shown[t] == k;
            if (!taken && (best < 0 || b[k].hi - b[k].lo > b[best].hi - b[best].lo)) best = k;
        }
        shown[ns] = best;
        PUT("%s'%s' 0x%" PRIx64 "+%" PRIu64, ns ? ", " : ", the largest (", req[b[best].req].name ? req[b[best].req].name : "?",
            b[best].lo, b[best].hi - b[best].lo);
    }
    if (nb) PUT("%s)", nb > ns ? ", ..." : "");
    PUT("; free:");
    uint64_t lo = ord->lo, end = il->hi > ord->hi ? il->hi : ord->hi;
    int gaps = 0;
    for (int32_t k = 0; k <= nb; k++) {
        uint64_t hi = k < nb ? b[k].lo : end;
        if (hi > lo && gaps < 8) {
            PUT(" 0x%" PRIx64 "..0x%" PRIx64 " (%" PRIu64 ")", lo, hi, hi - lo);
            gaps++;
        }
        if (k < nb && b[k].hi > lo) lo = b[k].hi;
    }
    if (!gaps) PUT(" none");
#undef PUT
}

static int assign_in_order(const region *ordp, const region *ilp, const elements *el, const place_req *req, int32_t n, int mode,
                           place_slot *slot, int32_t *failed, int32_t *placed, const bool *first, int32_t *unclear,
                           int32_t *nunclear, char *why, size_t cap, place_shortfall *sf);

/* Requests an apart order left in a partner's memory element (no clear gap
 * was left when their turn came: unclear[0..nunclear)) go first in the same
 * order, a few rounds, while that leaves fewer such; slot takes each better
 * placement. */
static void promote(const region *ord, const region *il, const elements *el, const place_req *req, int32_t n, int mode,
                    place_slot *slot, int32_t *unclear, int32_t nunclear) {
    int32_t *again = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    place_slot *trial = xmalloc(sizeof(place_slot) * (size_t)(n + 1));
    bool *first = xcalloc((size_t)n + 1, sizeof(bool));
    for (int round = 0; round < PROMOTE_ROUNDS && nunclear; round++) {
        for (int32_t k = 0; k < nunclear; k++) first[unclear[k]] = true;
        int32_t nagain = 0, f, placed;
        char w[2048];
        place_shortfall sf;
        if (assign_in_order(ord, il, el, req, n, mode, trial, &f, &placed, first, again, &nagain, w, sizeof w, &sf) ||
            nagain >= nunclear)
            break;
        memcpy(slot, trial, sizeof(place_slot) * (size_t)n);
        memcpy(unclear, again, sizeof(int32_t) * (size_t)nagain);
        nunclear = nagain;
    }
    free(again);
    free(trial);
    free(first);
}

int place_assign(const machine *m, uint32_t data_base, const place_req *req, int32_t n, place_slot *slot, int32_t *failed,
                 char *why, size_t cap, place_shortfall *shortfall,
                 bool *shared) {
    region ord, il;
    regions(m, data_base, &ord, &il);
    elements el = {m->tile_memory_base, m->memory_element_bytes};
    int rc = -1, furthest = -1;
    int32_t *unclear = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    if (shared) *shared = false;
    /* First every request apart from every other live with it (its address
     * its own on every tile), then, when none of the orders places them and
     * the requests say their tiles, apart only from those live with it on a
     * common tile. */
    place_req *apart_everywhere = xmalloc(sizeof(place_req) * (size_t)(n + 1));
    bool tiled = false;
    for (int32_t i = 0; i < n; i++) {
        apart_everywhere[i] = req[i];
        apart_everywhere[i].tiles = NULL;
        tiled |= req[i].tiles != NULL;
    }
    int norders = tiled ? 2 * ALL_ORDERS + 1 : ALL_ORDERS;
    for (int k = 0; k < norders && rc; k++) { /* the orders keeping requests apart, then without, then split; then starts first */
        int mode = k < 2 * ALL_ORDERS ? k % ALL_ORDERS : STARTS_FIRST;
        const place_req *rq = k < ALL_ORDERS ? apart_everywhere : req;
        if (k) {
            char what[64];
            snprintf(what, sizeof what, "buffer order %d of %d", k + 1, norders);
            progress_stage("place", what);
        }
        int32_t f = -1, placed = 0, nunclear = 0;
        char w[2048];
        place_shortfall sf = {0};
        rc = assign_in_order(&ord, &il, &el, rq, n, mode, slot, &f, &placed, NULL, unclear, &nunclear, w, sizeof w, &sf);
        if (rc && (placed > furthest || (placed == furthest && k >= ALL_ORDERS))) { /* the furthest (tile-aware on a tie) */
            furthest = placed;
            *failed = f;
            if (shortfall) *shortfall = sf;
            snprintf(why, cap, "%s (the furthest of %d placement orders)", w, norders);
        }
        if (rc == 0 && (mode < ORDERS || mode == STARTS_FIRST) && nunclear) promote(&ord, &il, &el, rq, n, mode, slot, unclear, nunclear);
        if (rc == 0 && shared) *shared = k >= ALL_ORDERS;
    }
    free(apart_everywhere);
    free(unclear);
    return rc;
}

static int assign_in_order(const region *ordp, const region *ilp, const elements *el, const place_req *req, int32_t n, int mode,
                           place_slot *slot, int32_t *failed, int32_t *placed, const bool *first, int32_t *unclear,
                           int32_t *nunclear, char *why, size_t cap, place_shortfall *sf) {
    region ord = *ordp, il = *ilp;
    bool apart = mode < ORDERS || mode == STARTS_FIRST, split = mode == 2 * ORDERS, starts = mode == STARTS_FIRST;
    mode = split ? 0 : mode % ORDERS;
    order_key *order = xmalloc(sizeof(order_key) * (size_t)(n + 1));
    bool *done = xcalloc((size_t)n + 1, sizeof(bool));
    busy *b = xmalloc(sizeof(busy) * (size_t)(n + 1));
    int32_t span = 0;
    for (int32_t i = 0; i < n; i++)
        if (req[i].last > span) span = req[i].last;
    for (int32_t i = 0; i < n; i++) {
        int64_t life = (int64_t)req[i].last - req[i].first, size = (int64_t)(req[i].payload + req[i].tail);
        int resident = mode < 2 && 2 * life > span;
        order[i] = starts ? (order_key){first && first[i], req[i].first == 0, size, life, i}
                          : (order_key){first && first[i], resident, mode == 0 && resident ? element_waste(&req[i], il.unit) : size, life, i};
    }
    qsort(order, (size_t)n, sizeof(order_key), cmp_order);
    int rc = 0;
    for (int32_t k = 0; k < n && rc == 0; k++) {
        int32_t i = order[k].index;
        const place_req *q = &req[i];
        /* Of the regions the request allows, the one where it wastes least
         * (whole interleaved elements round up; packing does not), the
         * interleaved one on a tie; then the best-fitting gap there. */
        const region *cand[2] = {q->region != PLACE_ORDINARY ? &il : NULL, q->region != PLACE_INTERLEAVED ? &ord : NULL};
        if (split && cand[0] && il_fits_well(q, il.unit)) cand[1] = NULL; /* the packed region is for the small ones */
        bool ok = false;
        uint64_t best_waste = UINT64_MAX, avoid = 0;
        bool best_clear = false;
        for (int32_t k2 = 0; apart && k2 < q->napart; k2++) {
            int32_t j = q->apart[k2];
            if (done[j] && overlaps_time(&req[j], q)) avoid |= element_bits(el, slot[j].addr, slot[j].addr + slot[j].reserved);
        }
        for (int t = 0; t < 2; t++) {
            const region *r = cand[t];
            if (!r || r->hi <= r->lo) continue;
            int32_t nb = occupied(req, slot, done, n, q, r, b);
            uint64_t at, res;
            bool clear;
            if (place_in(q, r, b, nb, el, avoid, &at, &res, &clear) &&
                ((clear && !best_clear) || (clear == best_clear && res - q->payload < best_waste))) {
                best_waste = res - q->payload;
                best_clear = clear;
                slot[i] = (place_slot){(uint32_t)at, res};
                done[i] = ok = true;
            }
        }
        if (ok && avoid && !best_clear) unclear[(*nunclear)++] = i;
        if (!ok) {
            *failed = i;
            *placed = k;
            describe_failure(req, slot, done, n, i, &ord, &il, b, why, cap, sf);
            rc = -1;
        }
    }
    free(order);
    free(done);
    free(b);
    return rc;
}
