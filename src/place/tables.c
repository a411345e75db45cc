/* tables.c: the bytes each tile's exchange tables take once encoded
 * (docs/placement.md, "Exchange tables"). A tile taking part in a phase has
 * a header row; every fragment it sends is a send row (source address and
 * length; a multicast is one row whatever its destinations); every fragment
 * it receives whose destination does not continue the one it received just
 * before in the phase is a receive row (a new destination pointer). A repeat
 * body's phases are encoded once: iterations patch addresses, not rows. */
#include "place.h"

#include <stdlib.h>
#include <string.h>

enum {
    TABLE_HEADER_BYTES = 8,  /* phase id, row counts */
    TABLE_SEND_BYTES = 8,    /* source address, length and destination set */
    TABLE_RECV_BYTES = 4,    /* destination pointer */
};

void place_table_bytes(const low_program *lp, const machine *m, uint32_t *per_tile) { place_table_rows(lp, m, per_tile, -1, NULL); }

void place_table_rows(const low_program *lp, const machine *m, uint32_t *per_tile, int32_t tile, uint32_t *per_step) {
    uint32_t tiles = m->tiles;
    memset(per_tile, 0, sizeof(uint32_t) * tiles);
    int32_t *seen = xmalloc(sizeof(int32_t) * tiles);  /* phase a tile last took part in */
    uint64_t *next = xmalloc(sizeof(uint64_t) * tiles); /* where its next contiguous receive would land */
    for (uint32_t t = 0; t < tiles; t++) seen[t] = -1;
    for (int32_t i = 0; i < lp->steps.n; i++) {
        const low_step *st = &lp->steps.v[i];
        if (st->kind != LOW_STEP_EXCHANGE) continue;
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            const low_frag *f = &lp->frags.v[k];
            uint32_t before = tile >= 0 ? per_tile[tile] : 0;
            if (seen[f->src_tile] != i) {
                seen[f->src_tile] = i;
                next[f->src_tile] = UINT64_MAX;
                per_tile[f->src_tile] += TABLE_HEADER_BYTES;
            }
            per_tile[f->src_tile] += TABLE_SEND_BYTES;
            /* buffer and offset: before placement, contiguous means the same
             * buffer and the next byte */
            uint64_t at = ((uint64_t)f->dst.buf << 32) | f->dst.off;
            for (uint32_t d = 0; d < f->ndst; d++) {
                uint32_t t = lp->dst_tiles.v[f->dst0 + d];
                if (seen[t] != i) {
                    seen[t] = i;
                    next[t] = UINT64_MAX;
                    per_tile[t] += TABLE_HEADER_BYTES;
                }
                if (at != next[t]) per_tile[t] += TABLE_RECV_BYTES;
                next[t] = at + f->bytes;
            }
            if (per_step && tile >= 0) per_step[i] += per_tile[tile] - before;
        }
    }
    free(seen);
    free(next);
}
