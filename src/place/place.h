/* place: where every buffer lives in tile memory, and the package that
 * results.
 *
 *   buffers      one address range per buffer, the same on every tile that
 *                uses it; initialised ones (parameters) first, below the
 *                loader limit; placed by bumping up from tile_memory_base
 *   program      the low program with every (buffer, offset) turned into an
 *                absolute address
 *   segments     each parameter shard encoded once into the blob and pointed
 *                at by every replica's tile
 *   bindings     host inputs and outputs with their layouts and addresses,
 *                and a probe for every op result the program computes
 *
 * This is the simple placement the first end-to-end compile needs: nothing
 * is reused, so a model fits when the sum of its buffers fits one tile.
 */
#ifndef TESSEL_PLACE_H
#define TESSEL_PLACE_H

#include "../mid/mid.h"
#include "../package/package.h"

typedef struct place_stats {
    uint32_t tile_bytes;   /* bytes from tile_memory_base to the end of the last buffer */
    uint32_t param_bytes;  /* of which initialised parameter buffers */
    int32_t buffers;
} place_stats;

/* Assembles out from the expanded and lowered program. A program that does
 * not fit the tile memory is a user-level failure: -1 with d saying by how
 * much and which buffers are largest. */
int place_package(const mid_program *mp, const low_program *lp, const int32_t *buf_of, const low_prim_steps *prim_steps,
                  const char *meta_json, package *out, place_stats *st, diag *d);

#endif
