/* xtab.c: the exchange tables of a package (docs/package.md, "Exchange
 * tables"): the bit layout of every row, and the decoder that turns every
 * tile's table back into what each phase moves, checking it on the way.
 *
 *   tile table  block | block | ...            one per phase the tile takes part in, ascending
 *   block       header | send rows | receive rows | patch rows
 *   send        source, bytes - 1, slot, destination (a tile, or tiles + group)
 *   receive     pointer, fragments - 1: the next fragments delivered to the
 *               tile, in slot order, land back to back from the pointer
 *   patch       a row whose address moves by `stride` bytes per iteration
 *
 * The fabric delivers to each tile the fragments addressed to it (the send
 * rows naming it, or a group holding it) in slot order; the receive rows
 * say where they land. */
#include "format.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- row layouts -------------------------------------------------------- */

/* A row is at most 128 bits, little-endian; fields are at most 32 bits. */
typedef struct row_bits {
    uint64_t w[2];
} row_bits;

static void put_field(row_bits *r, unsigned at, unsigned n, uint64_t v) {
    v &= n >= 64 ? ~0ull : (1ull << n) - 1;
    unsigned i = at / 64, o = at % 64;
    r->w[i] |= v << o;
    if (o + n > 64) r->w[i + 1] |= v >> (64 - o);
}

static uint64_t get_field(const row_bits *r, unsigned at, unsigned n) {
    unsigned i = at / 64, o = at % 64;
    uint64_t v = r->w[i] >> o;
    if (o + n > 64) v |= r->w[i + 1] << (64 - o);
    return n >= 64 ? v : v & ((1ull << n) - 1);
}

static void row_store(const row_bits *r, uint8_t *out, unsigned bytes) {
    for (unsigned k = 0; k < bytes; k++) out[k] = (uint8_t)(r->w[k / 8] >> (8 * (k % 8)));
}

static row_bits row_load(const uint8_t *in, unsigned bytes) {
    row_bits r = {{0, 0}};
    for (unsigned k = 0; k < bytes && k < 16; k++) r.w[k / 8] |= (uint64_t)in[k] << (8 * (k % 8));
    return r;
}

void pkg_xt_put_header(uint8_t *out, const pkg_xt_header *h) {
    pkg_put_le(out, h->phase, 2);
    pkg_put_le(out + 2, h->nsend, 2);
    pkg_put_le(out + 4, h->nrecv, 2);
    pkg_put_le(out + 6, h->npatch, 2);
}

void pkg_xt_get_header(const uint8_t *in, pkg_xt_header *h) {
    h->phase = (uint32_t)pkg_get_le(in, 2);
    h->nsend = (uint32_t)pkg_get_le(in + 2, 2);
    h->nrecv = (uint32_t)pkg_get_le(in + 4, 2);
    h->npatch = (uint32_t)pkg_get_le(in + 6, 2);
}

void pkg_xt_put_send(const kernel_xt_format *f, uint8_t *out, const pkg_xt_send *s) {
    row_bits r = {{0, 0}};
    unsigned a = f->addr_bits, l = f->len_bits;
    put_field(&r, 0, a, (uint64_t)s->addr - f->base);
    put_field(&r, a, l, (uint64_t)s->bytes - 1);
    put_field(&r, a + l, a, s->slot);
    put_field(&r, 2 * a + l, f->dst_bits, s->dst);
    row_store(&r, out, f->send_bytes);
}

bool pkg_xt_get_send(const kernel_xt_format *f, const uint8_t *in, pkg_xt_send *s) {
    row_bits r = row_load(in, f->send_bytes);
    unsigned a = f->addr_bits, l = f->len_bits;
    s->addr = (uint32_t)(f->base + get_field(&r, 0, a));
    s->bytes = (uint32_t)(get_field(&r, a, l) + 1);
    s->slot = (uint32_t)get_field(&r, a + l, a);
    s->dst = (uint32_t)get_field(&r, 2 * a + l, f->dst_bits);
    uint8_t again[16];
    pkg_xt_put_send(f, again, s);
    return memcmp(again, in, f->send_bytes) == 0;
}

void pkg_xt_put_recv(const kernel_xt_format *f, uint8_t *out, const pkg_xt_recv *rv) {
    row_bits r = {{0, 0}};
    put_field(&r, 0, f->addr_bits, (uint64_t)rv->addr - f->base);
    put_field(&r, f->addr_bits, f->count_bits, (uint64_t)rv->count - 1);
    row_store(&r, out, f->recv_bytes);
}

bool pkg_xt_get_recv(const kernel_xt_format *f, const uint8_t *in, pkg_xt_recv *rv) {
    row_bits r = row_load(in, f->recv_bytes);
    rv->addr = (uint32_t)(f->base + get_field(&r, 0, f->addr_bits));
    rv->count = (uint32_t)(get_field(&r, f->addr_bits, f->count_bits) + 1);
    uint8_t again[16];
    pkg_xt_put_recv(f, again, rv);
    return memcmp(again, in, f->recv_bytes) == 0;
}

void pkg_xt_put_patch(uint8_t *out, const pkg_xt_patch *p) {
    pkg_put_le(out, p->row, 4);
    pkg_put_le(out + 4, (uint32_t)p->stride, 4);
}

void pkg_xt_get_patch(const uint8_t *in, pkg_xt_patch *p) {
    p->row = (uint32_t)pkg_get_le(in, 4);
    p->stride = (int32_t)(uint32_t)pkg_get_le(in + 4, 4);
}

/* ---- the decoder ------------------------------------------------------- */

typedef struct block {
    uint32_t tile;
    uint64_t at;            /* its header, in tables.bytes */
    pkg_xt_header h;
} block;

typedef struct decoder {
    const package *p;
    const char *path;
    diag *d;
    kernel_xt_format f;
    uint32_t nphases;
    int32_t *step_of;       /* per phase: its EXCHANGE step */
    block *blocks;          /* by phase, then tile */
    uint64_t nblocks;
} decoder;

static int failf(decoder *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(decoder *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = diag_vfail_in(x->d, x->path, "", fmt, ap);
    va_end(ap);
    return rc;
}

/* "tile 5, phase 2 (step 7 'xchg')", in buf; formatted only for a message
 * (a load checks millions of rows and formats none of them). */
static const char *where(const decoder *x, uint32_t tile, uint32_t phase, char *buf, size_t cap) {
    const low_program *g = &x->p->prog;
    if (phase >= x->nphases) {
        snprintf(buf, cap, "tile %" PRIu32 ", phase %" PRIu32, tile, phase);
        return buf;
    }
    int32_t s = x->step_of[phase];
    uint32_t l = g->steps.v[s].label;
    const char *label = pkg_string_ok(g->strings.v, (uint64_t)g->strings.n, l) ? g->strings.v + l : "";
    snprintf(buf, cap, "tile %" PRIu32 ", phase %" PRIu32 " (step %" PRId32 "%s%.60s%s)", tile, phase, s, *label ? " '" : "",
             label, *label ? "'" : "");
    return buf;
}

static int check_groups(decoder *x) {
    const pkg_tables *t = &x->p->tables;
    uint32_t tiles = x->p->machine.tiles;
    if (t->ngroups && (!t->group_at || !t->group_tiles)) return failf(x, "section GRPS: %u groups without their tiles", t->ngroups);
    for (uint32_t g = 0; g < t->ngroups; g++) {
        uint32_t a = t->group_at[g], b = t->group_at[g + 1];
        if (b < a + 2)
            return failf(x, "section GRPS: group %" PRIu32 " has %" PRId64 " tiles; a multicast group has at least 2", g,
                         (int64_t)b - (int64_t)a);
        for (uint32_t k = a; k < b; k++) {
            uint32_t tile = t->group_tiles[k];
            if (tile >= tiles)
                return failf(x, "section GRPS: group %" PRIu32 " names tile %" PRIu32 ", outside the machine's %" PRIu32 " tiles", g,
                             tile, tiles);
            if (k > a && tile <= t->group_tiles[k - 1])
                return failf(x, "section GRPS: group %" PRIu32 " lists tile %" PRIu32 " after tile %" PRIu32
                             " (a group's tiles ascend, each once)", g, tile, t->group_tiles[k - 1]);
        }
    }
    return 0;
}

/* Every block of every tile, checked for shape, then sorted by phase. */
static int read_blocks(decoder *x) {
    const pkg_tables *t = &x->p->tables;
    uint32_t tiles = x->p->machine.tiles;
    char at[160];
    uint64_t cap = 0;
    block *all = NULL;
    uint64_t n = 0;
    for (uint32_t tile = 0; tile < tiles && t->at; tile++) {
        uint64_t pos = t->at[tile], end = t->at[tile + 1];
        int64_t last = -1;
        while (pos < end) {
            if (end - pos < KERNEL_XT_HEADER_BYTES) {
                free(all);
                return failf(x, "section XTAB: tile %" PRIu32 ": the table ends inside a phase header (%" PRIu64 " bytes left)", tile,
                             end - pos);
            }
            block b = {.tile = tile, .at = pos};
            pkg_xt_get_header(t->bytes + pos, &b.h);
            const char *bad = NULL;
            if (b.h.phase >= x->nphases) bad = "the program has fewer exchange phases";
            else if ((int64_t)b.h.phase <= last) bad = "it comes after a later phase (a table's phases ascend, each once)";
            else if (!b.h.nsend && !b.h.nrecv) bad = "a phase block with no send and no receive rows";
            else if (kernel_xt_block_bytes(&x->f, b.h.nsend, b.h.nrecv, b.h.npatch) > end - pos) bad = "its rows run past the end of the table";
            if (bad) {
                free(all);
                return failf(x, "section XTAB: %s: %s (%" PRIu32 " send, %" PRIu32 " receive and %" PRIu32 " patch rows)",
                             where(x, tile, b.h.phase, at, sizeof at), bad,
                             b.h.nsend, b.h.nrecv, b.h.npatch);
            }
            last = b.h.phase;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                all = xrealloc(all, sizeof(block) * cap);
            }
            all[n++] = b;
            pos += kernel_xt_block_bytes(&x->f, b.h.nsend, b.h.nrecv, b.h.npatch);
        }
    }
    /* Phase by phase, tiles ascending within each (a stable counting sort). */
    uint64_t *start = xcalloc((size_t)x->nphases + 1, sizeof(uint64_t));
    for (uint64_t i = 0; i < n; i++) start[all[i].h.phase + 1]++;
    for (uint32_t ph = 0; ph < x->nphases; ph++) start[ph + 1] += start[ph];
    x->blocks = xmalloc(sizeof(block) * (size_t)(n ? n : 1));
    for (uint64_t i = 0; i < n; i++) x->blocks[start[all[i].h.phase]++] = all[i];
    x->nblocks = n;
    free(start);
    free(all);
    return 0;
}

/* Per tile scratch, reset only where a phase touched it. */
typedef struct per_tile {
    uint32_t *stamp;        /* 1 + the phase that last touched the tile */
    uint64_t *count;        /* fragments sent to it in this phase */
    uint64_t *pos;          /* where its next one goes in recv[] */
    uint32_t *last_slot;    /* the slot of the last one placed */
} per_tile;

typedef struct plan_alloc {
    uint64_t sends, recvs, tiles;
    uint64_t cap_recv, cap_tiles;
} plan_alloc;

static void push_tile(pkg_xplan *out, plan_alloc *al, pkg_xtile e) {
    if (al->tiles == al->cap_tiles) {
        al->cap_tiles = al->cap_tiles ? 2 * al->cap_tiles : 1024;
        out->tiles = xrealloc(out->tiles, sizeof(pkg_xtile) * al->cap_tiles);
    }
    out->tiles[al->tiles++] = e;
}

/* The destinations of a send row: one tile or a group's tiles. */
static const uint32_t *dests(const decoder *x, const pkg_xt_send *s, uint32_t *n, uint32_t *one) {
    const pkg_tables *t = &x->p->tables;
    if (s->dst < x->f.tiles) {
        *one = s->dst;
        *n = 1;
        return one;
    }
    uint32_t g = s->dst - x->f.tiles;
    *n = t->group_at[g + 1] - t->group_at[g];
    return t->group_tiles + t->group_at[g];
}

static int decode_phase(decoder *x, uint32_t ph, uint64_t b0, uint64_t b1, pkg_xplan *out, plan_alloc *al, per_tile *pt) {
    const pkg_tables *t = &x->p->tables;
    const uint8_t *bytes = t->bytes;
    pkg_xphase *P = &out->phase[ph];
    char at[160];
    P->step = x->step_of[ph];
    P->first_send = al->sends;
    P->senders = al->tiles;
    /* Send rows and their patches. */
    uint32_t *slot = NULL;
    uint64_t nsend = 0;
    for (uint64_t k = b0; k < b1; k++) nsend += x->blocks[k].h.nsend;
    slot = xmalloc(sizeof(uint32_t) * (size_t)(nsend ? nsend : 1));
    uint64_t s0 = al->sends, stage = 0;
    for (uint64_t k = b0; k < b1; k++) {
        const block *b = &x->blocks[k];
        const uint8_t *row = bytes + b->at + KERNEL_XT_HEADER_BYTES;
        const uint8_t *patch = row + (uint64_t)b->h.nsend * x->f.send_bytes + (uint64_t)b->h.nrecv * x->f.recv_bytes;
        if (b->h.nsend) push_tile(out, al, (pkg_xtile){b->tile, b->h.nsend, al->sends});
        for (uint32_t i = 0; i < b->h.nsend; i++, row += x->f.send_bytes) {
            pkg_xt_send s;
            const char *bad = NULL;
            if (!pkg_xt_get_send(&x->f, row, &s)) bad = "bits past its fields are set";
            else if (s.bytes > x->f.max_send) bad = "it sends more than max_send_bytes";
            else if (s.dst >= x->f.tiles + t->ngroups) bad = "its destination is neither a tile nor a group";
            else if (s.slot >= nsend) bad = "its slot is not below the phase's number of send rows";
            if (bad) {
                free(slot);
                return failf(x, "section XTAB: %s: send row %" PRIu32 ": %s (source 0x%" PRIx32 ", %" PRIu32 " bytes, slot %" PRIu32
                             ", destination %" PRIu32 "; %" PRIu32 " tiles, %" PRIu32 " groups)", where(x, b->tile, ph, at, sizeof at), i, bad, s.addr, s.bytes,
                             s.slot, s.dst, x->f.tiles, t->ngroups);
            }
            out->send[al->sends] = (pkg_xsend){b->tile, s.addr, 0, s.bytes, stage};
            slot[al->sends - s0] = s.slot;
            stage += s.bytes;
            al->sends++;
        }
        int64_t last = -1;
        for (uint32_t i = 0; i < b->h.npatch; i++) {
            pkg_xt_patch pr;
            pkg_xt_get_patch(patch + (uint64_t)i * KERNEL_XT_PATCH_BYTES, &pr);
            bool recv = pr.row & PKG_XT_RECV_ROW;
            uint32_t r = pr.row & ~PKG_XT_RECV_ROW;
            int64_t key = recv ? (int64_t)b->h.nsend + r : (int64_t)r;
            const char *bad = NULL;
            if (r >= (recv ? b->h.nrecv : b->h.nsend)) bad = "it names a row the block does not have";
            else if (key <= last) bad = "it comes after a patch of a later row (sends first, each row once)";
            else if (!pr.stride) bad = "a stride of 0";
            if (bad) {
                free(slot);
                return failf(x, "section XTAB: %s: patch row %" PRIu32 " (%s row %" PRIu32 ", %" PRId32 " bytes): %s",
                             where(x, b->tile, ph, at, sizeof at), i,
                             recv ? "receive" : "send", r, pr.stride, bad);
            }
            last = key;
            if (!recv) out->send[al->sends - b->h.nsend + r].stride = pr.stride;
        }
    }
    P->nsenders = (uint32_t)(al->tiles - P->senders);
    P->nsend = al->sends - s0;
    P->bytes = stage;
    /* The fragments in slot order (counting sort: slots are below nsend). */
    uint64_t *by_slot = xcalloc((size_t)nsend + 1, sizeof(uint64_t));
    uint32_t *order = xmalloc(sizeof(uint32_t) * (size_t)(nsend ? nsend : 1));
    for (uint64_t i = 0; i < nsend; i++) by_slot[slot[i] + 1]++;
    for (uint64_t v = 0; v < nsend; v++) by_slot[v + 1] += by_slot[v];
    for (uint64_t i = 0; i < nsend; i++) order[by_slot[slot[i]]++] = (uint32_t)i;
    free(by_slot);
    /* The receivers: their blocks, then how many fragments each is sent. */
    uint32_t stamp = ph + 1;
    P->receivers = al->tiles;
    P->first_recv = al->recvs;
    for (uint64_t k = b0; k < b1; k++) {
        const block *b = &x->blocks[k];
        if (!b->h.nrecv) continue;
        pt->stamp[b->tile] = stamp;
        pt->count[b->tile] = 0;
        pt->last_slot[b->tile] = UINT32_MAX;
    }
    int rc = 0;
    /* Destinations are needed twice (count, then place): kept per send. */
    uint32_t *dst = xmalloc(sizeof(uint32_t) * (size_t)(nsend ? nsend : 1));
    {
        uint64_t i = 0;
        for (uint64_t k = b0; k < b1; k++) {
            const block *b = &x->blocks[k];
            const uint8_t *row = bytes + b->at + KERNEL_XT_HEADER_BYTES;
            for (uint32_t j = 0; j < b->h.nsend; j++, row += x->f.send_bytes, i++) {
                pkg_xt_send s;
                pkg_xt_get_send(&x->f, row, &s);
                dst[i] = s.dst;
            }
        }
    }
    uint64_t incoming = 0;
    for (uint64_t i = 0; i < nsend && !rc; i++) {
        pkg_xt_send s = {.dst = dst[i]};
        uint32_t n, one;
        const uint32_t *d = dests(x, &s, &n, &one);
        for (uint32_t j = 0; j < n; j++) {
            if (pt->stamp[d[j]] != stamp) {
                const pkg_xsend *snd = &out->send[s0 + i];
                where(x, d[j], ph, at, sizeof at);
                rc = failf(x, "section XTAB: %s: tile %" PRIu32 " sends it %" PRIu32 " bytes from 0x%" PRIx32
                           " (slot %" PRIu32 "), but its table has no receive rows in the phase", at, snd->tile, snd->bytes,
                           snd->addr, slot[i]);
                break;
            }
            pt->count[d[j]]++;
            incoming++;
        }
    }
    if (!rc && al->recvs + incoming > al->cap_recv) {
        while (al->recvs + incoming > al->cap_recv) al->cap_recv = al->cap_recv ? 2 * al->cap_recv : 1 << 16;
        out->recv = xrealloc(out->recv, sizeof(pkg_xrecv) * al->cap_recv);
    }
    uint64_t pos = al->recvs;
    for (uint64_t k = b0; k < b1 && !rc; k++) {
        const block *b = &x->blocks[k];
        if (!b->h.nrecv) continue;
        pt->pos[b->tile] = pos;
        push_tile(out, al, (pkg_xtile){b->tile, (uint32_t)pt->count[b->tile], pos});
        if (pt->count[b->tile] > UINT32_MAX) {
            where(x, b->tile, ph, at, sizeof at);
            rc = failf(x, "section XTAB: %s: more than 2^32 fragments are sent to it", at);
        }
        pos += pt->count[b->tile];
    }
    /* Place them, in slot order; two in one slot at one tile have no order. */
    for (uint64_t q = 0; q < nsend && !rc; q++) {
        uint32_t i = order[q];
        pkg_xt_send s = {.dst = dst[i]};
        uint32_t n, one;
        const uint32_t *d = dests(x, &s, &n, &one);
        for (uint32_t j = 0; j < n; j++) {
            uint32_t tile = d[j];
            if (pt->last_slot[tile] == slot[i]) {
                where(x, tile, ph, at, sizeof at);
                rc = failf(x, "section XTAB: %s: two fragments sent to it share slot %" PRIu32, at, slot[i]);
                break;
            }
            pt->last_slot[tile] = slot[i];
            out->recv[pt->pos[tile]++] = (pkg_xrecv){(uint32_t)(s0 + i), 0, 0};
        }
    }
    /* Each receiver's rows: a pointer, then that many fragments back to back. */
    uint64_t r = P->receivers;
    for (uint64_t k = b0; k < b1 && !rc; k++) {
        const block *b = &x->blocks[k];
        if (!b->h.nrecv) continue;
        const pkg_xtile *rt = &out->tiles[r++];
        const uint8_t *row = bytes + b->at + KERNEL_XT_HEADER_BYTES + (uint64_t)b->h.nsend * x->f.send_bytes;
        const uint8_t *patch = row + (uint64_t)b->h.nrecv * x->f.recv_bytes;
        uint32_t np = 0;
        uint64_t taken = 0;
        for (uint32_t i = 0; i < b->h.nrecv && !rc; i++, row += x->f.recv_bytes) {
            pkg_xt_recv rv;
            if (!pkg_xt_get_recv(&x->f, row, &rv)) {
                rc = failf(x, "section XTAB: %s: receive row %" PRIu32 ": bits past its fields are set", where(x, b->tile, ph, at, sizeof at), i);
                break;
            }
            int32_t stride = 0;
            while (np < b->h.npatch) {
                pkg_xt_patch pr;
                pkg_xt_get_patch(patch + (uint64_t)np * KERNEL_XT_PATCH_BYTES, &pr);
                if (!(pr.row & PKG_XT_RECV_ROW) || (pr.row & ~PKG_XT_RECV_ROW) < i) {
                    np++;
                    continue;
                }
                if ((pr.row & ~PKG_XT_RECV_ROW) == i) stride = pr.stride;
                break;
            }
            if (taken + rv.count > rt->n) {
                rc = failf(x, "section XTAB: %s: receive row %" PRIu32 " (0x%" PRIx32 ", %" PRIu32 " fragments): its rows take more than the %" PRIu32
                           " fragments sent to the tile", where(x, b->tile, ph, at, sizeof at), i, rv.addr, rv.count, rt->n);
                break;
            }
            uint64_t addr = rv.addr;
            for (uint32_t j = 0; j < rv.count; j++) {
                pkg_xrecv *e = &out->recv[rt->first + taken + j];
                if (addr > UINT32_MAX) {
                    rc = failf(x, "section XTAB: %s: receive row %" PRIu32 " (0x%" PRIx32 ", %" PRIu32 " fragments) runs past 2^32", where(x, b->tile, ph, at, sizeof at), i,
                               rv.addr, rv.count);
                    break;
                }
                e->addr = (uint32_t)addr;
                e->stride = stride;
                addr += out->send[e->send].bytes;
            }
            taken += rv.count;
        }
        if (!rc && taken != rt->n)
            rc = failf(x, "section XTAB: %s: its receive rows take %" PRIu64 " fragments, but %" PRIu32 " are sent to it",
                       where(x, b->tile, ph, at, sizeof at), taken, rt->n);
    }
    P->nreceivers = (uint32_t)(al->tiles - P->receivers);
    al->recvs = pos;
    P->nrecv = al->recvs - P->first_recv;
    free(dst);
    free(order);
    free(slot);
    return rc;
}

int pkg_xplan_build(const package *p, const char *path, pkg_xplan *out, diag *d) {
    memset(out, 0, sizeof *out);
    decoder x = {.p = p, .path = path, .d = d};
    const low_program *g = &p->prog;
    kernel_xt_format_init(&x.f, &p->machine, p->tables.ngroups);
    for (int32_t i = 0; i < g->steps.n; i++) x.nphases += g->steps.v[i].kind == LOW_STEP_EXCHANGE;
    x.step_of = xmalloc(sizeof(int32_t) * ((size_t)x.nphases + 1));
    for (int32_t i = 0, k = 0; i < g->steps.n; i++)
        if (g->steps.v[i].kind == LOW_STEP_EXCHANGE) x.step_of[k++] = i;
    int rc = check_groups(&x);
    if (!rc) rc = read_blocks(&x);
    uint64_t total_send = 0;
    for (uint64_t k = 0; k < x.nblocks; k++) total_send += x.blocks[k].h.nsend;
    if (!rc && total_send >= UINT32_MAX) rc = failf(&x, "section XTAB: more than 2^32 send rows");
    if (!rc) {
        uint32_t tiles = p->machine.tiles ? p->machine.tiles : 1;
        per_tile pt = {xcalloc(tiles, sizeof(uint32_t)), xcalloc(tiles, sizeof(uint64_t)), xcalloc(tiles, sizeof(uint64_t)),
                       xcalloc(tiles, sizeof(uint32_t))};
        out->nphases = x.nphases;
        out->phase = xcalloc((size_t)x.nphases + 1, sizeof(pkg_xphase));
        out->send = xmalloc(sizeof(pkg_xsend) * (size_t)(total_send ? total_send : 1));
        plan_alloc al = {0};
        uint64_t b = 0;
        for (uint32_t ph = 0; ph < x.nphases && !rc; ph++) {
            uint64_t e = b;
            while (e < x.nblocks && x.blocks[e].h.phase == ph) e++;
            rc = decode_phase(&x, ph, b, e, out, &al, &pt);
            b = e;
        }
        free(pt.stamp);
        free(pt.count);
        free(pt.pos);
        free(pt.last_slot);
    }
    free(x.blocks);
    free(x.step_of);
    if (rc) pkg_xplan_free(out);
    return rc;
}

void pkg_xplan_free(pkg_xplan *x) {
    free(x->phase);
    free(x->send);
    free(x->recv);
    free(x->tiles);
    memset(x, 0, sizeof *x);
}

uint32_t pkg_xt_recv_row_of(const package *p, uint32_t tile, uint32_t phase, uint64_t k) {
    const pkg_tables *t = &p->tables;
    kernel_xt_format f;
    kernel_xt_format_init(&f, &p->machine, t->ngroups);
    if (!t->at || tile >= p->machine.tiles) return 0;
    for (uint64_t pos = t->at[tile]; pos + KERNEL_XT_HEADER_BYTES <= t->at[tile + 1];) {
        pkg_xt_header h;
        pkg_xt_get_header(t->bytes + pos, &h);
        if (h.phase == phase) {
            const uint8_t *row = t->bytes + pos + KERNEL_XT_HEADER_BYTES + (uint64_t)h.nsend * f.send_bytes;
            uint64_t taken = 0;
            for (uint32_t i = 0; i < h.nrecv; i++, row += f.recv_bytes) {
                pkg_xt_recv r;
                pkg_xt_get_recv(&f, row, &r);
                taken += r.count;
                if (k < taken) return i;
            }
            return h.nrecv;
        }
        pos += kernel_xt_block_bytes(&f, h.nsend, h.nrecv, h.npatch);
    }
    return 0;
}
