/* tables.c: every tile's exchange tables (docs/placement.md, "Exchange
 * tables"), planned once from the program's phases, then counted for
 * placement (they sit below data_base) and encoded into the package by the
 * same plan, so the bytes counted are the bytes written.
 *
 *   plan   per phase: each fragment's slot (the place of its destination,
 *          buffer and offset, in the phase's delivery order); each tile's
 *          sends and each tile's incoming fragments, in slot order
 *   rows   per tile taking part in a phase: a header; a send row per
 *          fragment it sends (a multicast is one, naming its group); a
 *          receive row per run of incoming fragments that land back to back
 *          in one buffer with one iteration stride (from any senders: they
 *          arrive in address order and stream through one pointer); a patch
 *          row per row whose address moves with the repeat iteration
 *
 * A repeat body's phases are encoded once: iterations patch addresses, not
 * rows. Contiguity is decided on buffer and offset, before addresses exist
 * (the tables' size sets where data starts), so two buffers placed back to
 * back still take two receive rows. */
#include "place.h"

#include <stdlib.h>
#include <string.h>

typedef struct xt_phase {
    int32_t step;
    uint32_t first, n;          /* the program's fragments [first, first + n) */
    uint32_t *slot;             /* per fragment of the phase (from first) */
    uint32_t nsenders, nreceivers;
    uint32_t *send_tile;        /* ascending */
    uint64_t *send_at;          /* nsenders + 1: send_frag[send_at[k], send_at[k + 1]) */
    uint32_t *send_frag;        /* fragments, by sender, in slot order */
    uint32_t *recv_tile;
    uint64_t *recv_at;
    uint32_t *recv_frag;        /* fragments, by receiver, in slot order */
} xt_phase;

struct place_xt {
    const low_program *lp;
    const machine *m;
    kernel_xt_format f;
    arena a;
    uint32_t ngroups;
    int32_t *group_of;          /* per fragment of the program: its multicast group, -1: one destination */
    VEC(uint32_t) group_at;     /* ngroups + 1 */
    VEC(uint32_t) group_tiles;
    int32_t nphases;
    xt_phase *ph;
};

/* ---- multicast groups -------------------------------------------------- */

typedef struct group_map {
    uint32_t *slot;             /* group + 1, 0: empty */
    uint64_t *hash;
    uint32_t cap;               /* a power of two */
} group_map;

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static bool same_group(const place_xt *x, uint32_t g, const uint32_t *t, uint32_t n) {
    uint32_t a = x->group_at.v[g];
    return x->group_at.v[g + 1] - a == n && memcmp(x->group_tiles.v + a, t, sizeof(uint32_t) * n) == 0;
}

static void map_grow(group_map *gm, const place_xt *x) {
    uint32_t cap = gm->cap ? 2 * gm->cap : 1024;
    uint32_t *slot = xcalloc(cap, sizeof(uint32_t));
    uint64_t *hash = xcalloc(cap, sizeof(uint64_t));
    for (uint32_t i = 0; i < gm->cap; i++) {
        if (!gm->slot[i]) continue;
        uint32_t k = (uint32_t)gm->hash[i] & (cap - 1);
        while (slot[k]) k = (k + 1) & (cap - 1);
        slot[k] = gm->slot[i];
        hash[k] = gm->hash[i];
    }
    (void)x;
    free(gm->slot);
    free(gm->hash);
    gm->slot = slot;
    gm->hash = hash;
    gm->cap = cap;
}

/* The group of destination list t[0..n): found, or added as the next one. */
static uint32_t group_find(place_xt *x, group_map *gm, const uint32_t *t, uint32_t n) {
    if (2 * (x->ngroups + 1) > gm->cap) map_grow(gm, x);
    uint64_t h = util_hash_bytes(t, sizeof(uint32_t) * n, 0x9e3779b97f4a7c15ull);
    uint32_t k = (uint32_t)h & (gm->cap - 1);
    for (; gm->slot[k]; k = (k + 1) & (gm->cap - 1))
        if (gm->hash[k] == h && same_group(x, gm->slot[k] - 1, t, n)) return gm->slot[k] - 1;
    uint32_t g = x->ngroups++;
    gm->slot[k] = g + 1;
    gm->hash[k] = h;
    for (uint32_t i = 0; i < n; i++) vec_push(&x->a, &x->group_tiles, t[i]);
    vec_push(&x->a, &x->group_at, (uint32_t)x->group_tiles.n);
    return g;
}

/* Every multicast destination list of the program's phases as a group, in
 * order of first use; fragments cut from one copy share their list. */
static void plan_groups(place_xt *x) {
    const low_program *lp = x->lp;
    x->group_of = arena_alloc(&x->a, sizeof(int32_t) * ((size_t)lp->frags.n + 1));
    vec_push(&x->a, &x->group_at, 0u);
    group_map gm = {0};
    uint32_t *sorted = NULL, cap = 0, last_dst0 = UINT32_MAX, last_ndst = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < lp->frags.n; i++) x->group_of[i] = -1;
    for (int32_t s = 0; s < lp->steps.n; s++) {
        const low_step *st = &lp->steps.v[s];
        if (st->kind != LOW_STEP_EXCHANGE) continue;
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            const low_frag *f = &lp->frags.v[k];
            TS_ASSERT(f->ndst >= 1);
            if (f->ndst == 1) continue;
            if (f->dst0 != last_dst0 || f->ndst != last_ndst) {
                if (f->ndst > cap) {
                    cap = f->ndst;
                    sorted = xrealloc(sorted, sizeof(uint32_t) * cap);
                }
                memcpy(sorted, lp->dst_tiles.v + f->dst0, sizeof(uint32_t) * f->ndst);
                qsort(sorted, f->ndst, sizeof(uint32_t), cmp_u32);
                for (uint32_t j = 1; j < f->ndst; j++) TS_ASSERT(sorted[j] != sorted[j - 1]); /* each tile once */
                last = (int32_t)group_find(x, &gm, sorted, f->ndst);
                last_dst0 = f->dst0;
                last_ndst = f->ndst;
            }
            x->group_of[k] = last;
        }
    }
    free(sorted);
    free(gm.slot);
    free(gm.hash);
}

/* ---- phases ------------------------------------------------------------ */

static const low_program *g_lp; /* qsort has no context in C11; planning is single-threaded */

static uint64_t dst_key(const low_frag *f) { return (uint64_t)f->dst.buf << 32 | f->dst.off; }

static int cmp_delivery(const void *a, const void *b) {
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint64_t x = dst_key(&g_lp->frags.v[i]), y = dst_key(&g_lp->frags.v[j]);
    if (x != y) return x < y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* The destination tiles of fragment k. */
static const uint32_t *frag_dests(const place_xt *x, uint32_t k, uint32_t *n) {
    const low_frag *f = &x->lp->frags.v[k];
    if (x->group_of[k] < 0) {
        *n = 1;
        return x->lp->dst_tiles.v + f->dst0;
    }
    uint32_t g = (uint32_t)x->group_of[k], a = x->group_at.v[g];
    *n = x->group_at.v[g + 1] - a;
    return x->group_tiles.v + a;
}

/* Tiles touched by one phase, with a count each (a counting sort by tile). */
typedef struct tally {
    uint64_t *count;            /* per tile of the machine */
    uint32_t *touched;
    uint32_t ntouched;
} tally;

static void tally_add(tally *t, uint32_t tile) {
    if (!t->count[tile]++) t->touched[t->ntouched++] = tile;
}

/* Turns the counts into the ascending tile list and its offsets, and the
 * counts into fill positions; leaves count[] zero again at the end of fill. */
static void tally_close(place_xt *x, tally *t, uint32_t *ntiles, uint32_t **tiles, uint64_t **at) {
    qsort(t->touched, t->ntouched, sizeof(uint32_t), cmp_u32);
    *ntiles = t->ntouched;
    *tiles = arena_alloc(&x->a, sizeof(uint32_t) * ((size_t)t->ntouched + 1));
    *at = arena_alloc(&x->a, sizeof(uint64_t) * ((size_t)t->ntouched + 1));
    uint64_t sum = 0;
    for (uint32_t k = 0; k < t->ntouched; k++) {
        uint32_t tile = t->touched[k];
        (*tiles)[k] = tile;
        (*at)[k] = sum;
        sum += t->count[tile];
        t->count[tile] = (*at)[k]; /* now: where its next entry goes */
    }
    (*at)[t->ntouched] = sum;
}

static void tally_reset(tally *t, const uint32_t *tiles, uint32_t n) {
    for (uint32_t k = 0; k < n; k++) t->count[tiles[k]] = 0;
    t->ntouched = 0;
}

static void plan_phase(place_xt *x, xt_phase *P, tally *t) {
    const low_program *lp = x->lp;
    uint32_t n = P->n;
    uint32_t *order = xmalloc(sizeof(uint32_t) * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) order[i] = P->first + i;
    g_lp = lp;
    if (n) qsort(order, n, sizeof(uint32_t), cmp_delivery);
    P->slot = arena_alloc(&x->a, sizeof(uint32_t) * ((size_t)n + 1));
    for (uint32_t q = 0, s = 0; q < n; q++) {
        if (q && dst_key(&lp->frags.v[order[q]]) != dst_key(&lp->frags.v[order[q - 1]])) s++;
        P->slot[order[q] - P->first] = s;
    }
    /* Senders. */
    for (uint32_t q = 0; q < n; q++) tally_add(t, lp->frags.v[order[q]].src_tile);
    tally_close(x, t, &P->nsenders, &P->send_tile, &P->send_at);
    P->send_frag = arena_alloc(&x->a, sizeof(uint32_t) * ((size_t)n + 1));
    for (uint32_t q = 0; q < n; q++) P->send_frag[t->count[lp->frags.v[order[q]].src_tile]++] = order[q];
    tally_reset(t, P->send_tile, P->nsenders);
    /* Receivers. */
    for (uint32_t q = 0; q < n; q++) {
        uint32_t nd;
        const uint32_t *d = frag_dests(x, order[q], &nd);
        for (uint32_t j = 0; j < nd; j++) tally_add(t, d[j]);
    }
    tally_close(x, t, &P->nreceivers, &P->recv_tile, &P->recv_at);
    P->recv_frag = arena_alloc(&x->a, sizeof(uint32_t) * ((size_t)P->recv_at[P->nreceivers] + 1));
    for (uint32_t q = 0; q < n; q++) {
        uint32_t nd;
        const uint32_t *d = frag_dests(x, order[q], &nd);
        for (uint32_t j = 0; j < nd; j++) P->recv_frag[t->count[d[j]]++] = order[q];
    }
    tally_reset(t, P->recv_tile, P->nreceivers);
    free(order);
}

place_xt *place_tables_plan(const low_program *lp, const machine *m) {
    place_xt *x = xcalloc(1, sizeof *x);
    x->lp = lp;
    x->m = m;
    arena_init(&x->a);
    plan_groups(x);
    kernel_xt_format_init(&x->f, m, x->ngroups);
    for (int32_t s = 0; s < lp->steps.n; s++) x->nphases += lp->steps.v[s].kind == LOW_STEP_EXCHANGE;
    x->ph = arena_alloc(&x->a, sizeof(xt_phase) * ((size_t)x->nphases + 1));
    tally t = {xcalloc(m->tiles, sizeof(uint64_t)), xmalloc(sizeof(uint32_t) * m->tiles), 0};
    for (int32_t s = 0, k = 0; s < lp->steps.n; s++) {
        const low_step *st = &lp->steps.v[s];
        if (st->kind != LOW_STEP_EXCHANGE) continue;
        xt_phase *P = &x->ph[k++];
        P->step = s;
        P->first = st->first;
        P->n = st->count;
        plan_phase(x, P, &t);
    }
    free(t.count);
    free(t.touched);
    return x;
}

void place_tables_free(place_xt *x) {
    if (!x) return;
    arena_free(&x->a);
    free(x);
}

/* ---- rows -------------------------------------------------------------- */

/* The receive row starting at incoming fragment k of a receiver's [k, end):
 * it takes [k, return) -- fragments back to back in one buffer with one
 * stride, at most as many as the row's count field holds. */
static uint64_t recv_row_end(const place_xt *x, const xt_phase *P, uint64_t k, uint64_t end) {
    const low_frag *f = x->lp->frags.v;
    uint64_t most = x->f.count_bits >= 32 ? UINT32_MAX : (1ull << x->f.count_bits);
    uint64_t j = k + 1;
    while (j < end && j - k < most) {
        const low_frag *a = &f[P->recv_frag[j - 1]], *b = &f[P->recv_frag[j]];
        if (a->dst.buf != b->dst.buf || (uint64_t)a->dst.off + a->bytes != b->dst.off || a->dst.iter_stride != b->dst.iter_stride)
            break;
        j++;
    }
    return j;
}

/* One tile's rows in one phase. */
typedef struct tile_rows {
    uint64_t nsend, nrecv, npatch;
    uint64_t send0, send1;      /* its sends: P->send_frag[send0, send1) */
    uint64_t recv0, recv1;      /* its incoming fragments: P->recv_frag[recv0, recv1) */
} tile_rows;

static void count_recv_rows(const place_xt *x, const xt_phase *P, tile_rows *r) {
    for (uint64_t k = r->recv0; k < r->recv1;) {
        uint64_t j = recv_row_end(x, P, k, r->recv1);
        r->nrecv++;
        r->npatch += x->lp->frags.v[P->recv_frag[k]].dst.iter_stride != 0;
        k = j;
    }
}

/* Calls fn for every tile taking part in phase P, ascending, with its rows. */
typedef void tile_fn(void *ctx, const place_xt *x, const xt_phase *P, uint32_t tile, const tile_rows *r);

static void each_tile(const place_xt *x, const xt_phase *P, tile_fn *fn, void *ctx) {
    uint32_t i = 0, j = 0;
    while (i < P->nsenders || j < P->nreceivers) {
        uint32_t ts = i < P->nsenders ? P->send_tile[i] : UINT32_MAX, tr = j < P->nreceivers ? P->recv_tile[j] : UINT32_MAX;
        uint32_t tile = ts < tr ? ts : tr;
        tile_rows r = {0};
        if (ts == tile) {
            r.send0 = P->send_at[i], r.send1 = P->send_at[i + 1];
            r.nsend = r.send1 - r.send0;
            for (uint64_t k = r.send0; k < r.send1; k++) r.npatch += x->lp->frags.v[P->send_frag[k]].src.iter_stride != 0;
            i++;
        }
        if (tr == tile) {
            r.recv0 = P->recv_at[j], r.recv1 = P->recv_at[j + 1];
            count_recv_rows(x, P, &r);
            j++;
        }
        fn(ctx, x, P, tile, &r);
    }
}

typedef struct count_ctx {
    uint32_t *per_tile;
    int32_t tile;
    uint32_t *per_step;
} count_ctx;

static void count_tile(void *vctx, const place_xt *x, const xt_phase *P, uint32_t tile, const tile_rows *r) {
    count_ctx *c = vctx;
    uint64_t b = kernel_xt_block_bytes(&x->f, r->nsend, r->nrecv, r->npatch);
    uint64_t sum = c->per_tile[tile] + b;
    c->per_tile[tile] = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    if (c->per_step && (int32_t)tile == c->tile) c->per_step[P->step] += (uint32_t)b;
}

void place_tables_count(const place_xt *x, uint32_t *per_tile, int32_t tile, uint32_t *per_step) {
    memset(per_tile, 0, sizeof(uint32_t) * x->m->tiles);
    count_ctx c = {per_tile, tile, per_step};
    for (int32_t k = 0; k < x->nphases; k++) each_tile(x, &x->ph[k], count_tile, &c);
}

void place_table_bytes(const low_program *lp, const machine *m, uint32_t *per_tile) { place_table_rows(lp, m, per_tile, -1, NULL); }

void place_table_rows(const low_program *lp, const machine *m, uint32_t *per_tile, int32_t tile, uint32_t *per_step) {
    place_xt *x = place_tables_plan(lp, m);
    place_tables_count(x, per_tile, tile, per_step);
    place_tables_free(x);
}

/* ---- encoding ---------------------------------------------------------- */

typedef struct encode_ctx {
    const uint32_t *buf_addr;   /* per buffer its address; NULL: addresses are absolute */
    uint8_t *bytes;
    uint64_t *cursor;           /* per tile: where its next block goes */
    uint32_t phase;
    int rc;
    const char *why;            /* the first failure */
    uint32_t why_tile;
} encode_ctx;

/* A row's address: inside tile memory, or its field would not hold it. */
static uint32_t address_of(const encode_ctx *e, const place_xt *x, kernel_addr a) {
    uint32_t v = a.buf == KERNEL_ABSOLUTE || !e->buf_addr ? a.off : e->buf_addr[a.buf] + a.off;
    TS_ASSERT(v >= x->m->tile_memory_base && v < x->m->tile_memory_end);
    return v;
}

static void encode_tile(void *vctx, const place_xt *x, const xt_phase *P, uint32_t tile, const tile_rows *r) {
    encode_ctx *e = vctx;
    const low_frag *frags = x->lp->frags.v;
    if (r->nsend > PKG_XT_MAX_ROWS || r->nrecv > PKG_XT_MAX_ROWS || r->npatch > PKG_XT_MAX_ROWS) {
        if (!e->rc) e->rc = -1, e->why = "more than 65535 rows of one kind in one phase", e->why_tile = tile;
        return;
    }
    uint8_t *out = e->bytes + e->cursor[tile];
    pkg_xt_header h = {e->phase, (uint32_t)r->nsend, (uint32_t)r->nrecv, (uint32_t)r->npatch};
    pkg_xt_put_header(out, &h);
    uint8_t *row = out + KERNEL_XT_HEADER_BYTES;
    uint8_t *patch = row + r->nsend * x->f.send_bytes + r->nrecv * x->f.recv_bytes;
    for (uint64_t k = r->send0; k < r->send1; k++, row += x->f.send_bytes) {
        uint32_t i = P->send_frag[k];
        const low_frag *f = &frags[i];
        TS_ASSERT(f->bytes >= 1 && f->bytes <= x->m->max_send_bytes && (uint64_t)P->slot[i - P->first] >> x->f.addr_bits == 0);
        pkg_xt_send s = {address_of(e, x, f->src), f->bytes, P->slot[i - P->first],
                         x->group_of[i] < 0 ? x->lp->dst_tiles.v[f->dst0] : x->m->tiles + (uint32_t)x->group_of[i]};
        pkg_xt_put_send(&x->f, row, &s);
        if (f->src.iter_stride) {
            pkg_xt_patch p = {(uint32_t)(k - r->send0), f->src.iter_stride};
            pkg_xt_put_patch(patch, &p);
            patch += KERNEL_XT_PATCH_BYTES;
        }
    }
    uint32_t n = 0;
    for (uint64_t k = r->recv0; k < r->recv1; n++, row += x->f.recv_bytes) {
        uint64_t j = recv_row_end(x, P, k, r->recv1);
        const low_frag *f = &frags[P->recv_frag[k]];
        pkg_xt_recv rv = {address_of(e, x, f->dst), (uint32_t)(j - k)};
        pkg_xt_put_recv(&x->f, row, &rv);
        if (f->dst.iter_stride) {
            pkg_xt_patch p = {PKG_XT_RECV_ROW | n, f->dst.iter_stride};
            pkg_xt_put_patch(patch, &p);
            patch += KERNEL_XT_PATCH_BYTES;
        }
        k = j;
    }
    uint64_t b = kernel_xt_block_bytes(&x->f, r->nsend, r->nrecv, r->npatch);
    TS_ASSERT(n == r->nrecv && patch == out + b);
    e->cursor[tile] += b;
}

int place_tables_encode(const place_xt *x, const uint32_t *buf_addr, package *out, diag *d) {
    uint32_t tiles = x->m->tiles;
    if (x->nphases > PKG_XT_MAX_PHASES)
        return diag_fail(d, "tessel: error: %d exchange phases, more than the %d an exchange table header can name", x->nphases,
                         PKG_XT_MAX_PHASES);
    uint64_t *per_tile = xcalloc(tiles, sizeof(uint64_t));
    uint32_t *bytes = xmalloc(sizeof(uint32_t) * tiles);
    place_tables_count(x, bytes, -1, NULL);
    pkg_tables *t = &out->tables;
    t->at = arena_alloc(&out->arena, sizeof(uint64_t) * ((size_t)tiles + 1));
    for (uint32_t k = 0; k < tiles; k++) t->at[k + 1] = t->at[k] + bytes[k];
    t->bytes = arena_alloc(&out->arena, (size_t)t->at[tiles] + 1);
    for (uint32_t k = 0; k < tiles; k++) per_tile[k] = t->at[k];
    encode_ctx e = {buf_addr, t->bytes, per_tile, 0, 0, NULL, 0};
    for (int32_t k = 0; k < x->nphases && !e.rc; k++) {
        e.phase = (uint32_t)k;
        each_tile(x, &x->ph[k], encode_tile, &e);
    }
    int rc = 0;
    if (e.rc) {
        rc = diag_fail(d, "tessel: error: tile %u's exchange table for phase %u has %s", e.why_tile, e.phase, e.why);
    } else {
        for (uint32_t k = 0; k < tiles; k++) TS_ASSERT(per_tile[k] == t->at[k + 1]); /* what was counted is what was written */
        t->ngroups = x->ngroups;
        t->group_at = arena_alloc(&out->arena, sizeof(uint32_t) * ((size_t)x->ngroups + 1));
        t->group_tiles = arena_alloc(&out->arena, sizeof(uint32_t) * ((size_t)x->group_tiles.n + 1));
        memcpy(t->group_at, x->group_at.v, sizeof(uint32_t) * ((size_t)x->ngroups + 1));
        if (x->group_tiles.n) memcpy(t->group_tiles, x->group_tiles.v, sizeof(uint32_t) * (size_t)x->group_tiles.n);
        /* An exchange step names its phase; the tables hold what it moves. */
        for (int32_t s = 0, k = 0; s < out->prog.steps.n; s++) {
            low_step *st = &out->prog.steps.v[s];
            if (st->kind != LOW_STEP_EXCHANGE) continue;
            st->first = (uint32_t)k++;
            st->count = 0;
        }
    }
    free(per_tile);
    free(bytes);
    return rc;
}

int place_package_tables(package *p, diag *d) {
    place_xt *x = place_tables_plan(&p->prog, &p->machine);
    int rc = place_tables_encode(x, NULL, p, d);
    place_tables_free(x);
    p->prog.frags.n = 0;
    p->prog.dst_tiles.n = 0;
    return rc;
}
