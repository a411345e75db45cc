/* tables.c: the bytes each tile's exchange tables take once encoded
 * (docs/placement.md, "Exchange tables"). A tile taking part in a phase has
 * a header row; every fragment it sends is a send row (source address and
 * length; a multicast is one row whatever its destinations); what it
 * receives costs a receive row per contiguous destination range: the
 * exchange schedule delivers a tile's incoming fragments in address order,
 * so fragments that land back to back (from any senders) stream through one
 * destination pointer. A repeat body's phases are encoded once: iterations
 * patch addresses, not rows. */
#include "place.h"

#include <stdlib.h>
#include <string.h>

enum {
    TABLE_HEADER_BYTES = 8,  /* phase id, row counts */
    TABLE_SEND_BYTES = 8,    /* source address, length and destination set */
    TABLE_RECV_BYTES = 4,    /* destination pointer */
};

typedef struct recv {
    uint32_t tile;
    uint64_t at, end;  /* buffer << 32 | offset, before placement */
} recv;

static int cmp_recv(const void *a, const void *b) {
    const recv *x = a, *y = b;
    if (x->tile != y->tile) return x->tile < y->tile ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

void place_table_bytes(const low_program *lp, const machine *m, uint32_t *per_tile) { place_table_rows(lp, m, per_tile, -1, NULL); }

void place_table_rows(const low_program *lp, const machine *m, uint32_t *per_tile, int32_t tile, uint32_t *per_step) {
    uint32_t tiles = m->tiles;
    memset(per_tile, 0, sizeof(uint32_t) * tiles);
    int32_t *seen = xmalloc(sizeof(int32_t) * tiles); /* the phase a tile last took part in */
    for (uint32_t t = 0; t < tiles; t++) seen[t] = -1;
    recv *rv = NULL;
    size_t cap = 0;
    for (int32_t i = 0; i < lp->steps.n; i++) {
        const low_step *st = &lp->steps.v[i];
        if (st->kind != LOW_STEP_EXCHANGE) continue;
        uint32_t before = tile >= 0 ? per_tile[tile] : 0;
        size_t n = 0;
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            const low_frag *f = &lp->frags.v[k];
            if (seen[f->src_tile] != i) {
                seen[f->src_tile] = i;
                per_tile[f->src_tile] += TABLE_HEADER_BYTES;
            }
            per_tile[f->src_tile] += TABLE_SEND_BYTES;
            if (n + f->ndst > cap) {
                cap = (n + f->ndst) * 2;
                rv = xrealloc(rv, sizeof(recv) * cap);
            }
            uint64_t at = ((uint64_t)f->dst.buf << 32) | f->dst.off;
            for (uint32_t d = 0; d < f->ndst; d++) rv[n++] = (recv){lp->dst_tiles.v[f->dst0 + d], at, at + f->bytes};
        }
        if (n) qsort(rv, n, sizeof(recv), cmp_recv);
        for (size_t k = 0; k < n; k++) {
            uint32_t t = rv[k].tile;
            if (seen[t] != i) {
                seen[t] = i;
                per_tile[t] += TABLE_HEADER_BYTES;
            }
            if (k == 0 || rv[k - 1].tile != t || rv[k - 1].end != rv[k].at) per_tile[t] += TABLE_RECV_BYTES;
        }
        if (per_step && tile >= 0) per_step[i] += per_tile[tile] - before;
    }
    free(rv);
    free(seen);
}
