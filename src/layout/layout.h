/* layout: how a logical tensor lies over tiles, and the ownership math every
 * later stage shares (expansion, estimation, lowering, the simulator's host
 * bindings, the tests).
 *
 *   tensor dim[0..rank)      e.g. [17, 40] f16
 *   partition  parts[a] shards along axis a, each `block[a]` elements long:
 *              shard i covers [i*block, min(dim, (i+1)*block)); block >=
 *              ceil(dim/parts), so 17 rows over 4 shards are 5, 5, 5, 2.
 *              Every shard is stored with the full block extent (the tail
 *              shard's storage is padded), so all shards have one size.
 *   replicas   rep[k] copies of every shard along replica axis k
 *   tiles      tile(shard s, replica r) = tile_base + sum_a s[a]*tile_stride[a]
 *                                                  + sum_k r[k]*rep_stride[k]
 *   encoding   inside one shard the last axis is cut into panels of `pw`
 *              elements; storage is [panel][rows][pw], rows = the other axes'
 *              blocks in row-major order:
 *                ROW_MAJOR  pw = block[last]        (one panel: plain row-major)
 *                AMP_LEFT   pw = 32 bytes / element (16 f16, 32 8-bit, 8 f32)
 *                AMP_OUT    pw = 16 elements        (AMP output micro-panels)
 *              the last axis is padded to whole panels. ROW_MAJOR_T and
 *              AMP_LEFT_T store the shard transposed (rank >= 2): the last two
 *              axes trade places in storage, so the panels cut axis rank-2 and
 *              the rows run over the other axes with the last one innermost;
 *              a GEMM that streams its weights writes its product this way.
 *
 *   element e of shard s at local coordinates l = e - s*block, with p the
 *   panel axis (the last, or rank-2 when transposed) and row(l) the other
 *   axes' row-major index in storage order:
 *     offset(l) = ((l[p] / pw) * rows + row(l)) * pw * bytes + (l[p] % pw) * bytes
 *
 * Copies between two layouts (optionally through a view: transposes, slices,
 * pads, concats) come out of layout_runs as ownership runs: byte spans that are
 * contiguous on both the source and the destination tile.
 */
#ifndef TESSEL_LAYOUT_H
#define TESSEL_LAYOUT_H

#include "../num/num.h"
#include "../util/util.h"

enum { LAYOUT_MAX_RANK = 6, LAYOUT_AMP_PANEL_BYTES = 32, LAYOUT_AMP_OUT_COLS = 16 };

typedef enum { ENC_ROW_MAJOR, ENC_AMP_LEFT, ENC_AMP_OUT, ENC_ROW_MAJOR_T, ENC_AMP_LEFT_T } layout_encoding;

typedef struct layout {
    int32_t rank;                        /* >= 1 (scalars are [1]) */
    int32_t elem_bytes;                  /* bytes per element: 1, 2 or 4 */
    layout_encoding enc;
    int64_t dim[LAYOUT_MAX_RANK];        /* logical extent, elements */
    int64_t parts[LAYOUT_MAX_RANK];      /* shards along the axis */
    int64_t block[LAYOUT_MAX_RANK];      /* elements per shard along the axis */
    int32_t tile_stride[LAYOUT_MAX_RANK];/* tiles per shard step along the axis */
    int32_t nrep;                        /* replica axes in use */
    int64_t rep[LAYOUT_MAX_RANK];        /* copies along replica axis k */
    int32_t rep_stride[LAYOUT_MAX_RANK]; /* tiles per replica step along axis k */
    int32_t tile_base;                   /* tile of shard 0, replica 0 */
} layout;

/* A row-major layout of dims over one tile (tile 0, no replicas). */
layout layout_single(int rank, const int64_t *dim, int elem_bytes);
/* Splits axis a into at most `parts` shards: block = ceil(dim / parts), and
 * parts = ceil(dim / block) so no shard is empty (10 over 6 gives 5 of 2). */
void layout_split(layout *l, int axis, int64_t parts, int32_t tile_stride);
/* Adds a replica axis of n copies, tile_stride apart. */
void layout_replicate(layout *l, int64_t n, int32_t tile_stride);

/* Checks the layout is well formed for a machine of `tiles` tiles: blocks
 * cover the tensor without empty shards, every (shard, replica) has its own
 * tile in [0, tiles). The message names the first problem. */
int layout_check(const layout *l, int32_t tiles, diag *d);
/* The same but for the shard's size: well formed, whether or not it could
 * ever fit a tile (what a plan that does not fit still is). */
int layout_check_form(const layout *l, int32_t tiles, diag *d);
bool layout_equal(const layout *a, const layout *b);

/* Whether shards are stored transposed (ROW_MAJOR_T, AMP_LEFT_T); the
 * encoding's untransposed form; the axis the panels cut (the last, or
 * rank-2 when transposed). */
static inline bool layout_transposed(const layout *l) { return l->enc == ENC_ROW_MAJOR_T || l->enc == ENC_AMP_LEFT_T; }
static inline layout_encoding layout_base_encoding(layout_encoding e) {
    return e == ENC_ROW_MAJOR_T ? ENC_ROW_MAJOR : e == ENC_AMP_LEFT_T ? ENC_AMP_LEFT : e;
}
static inline int layout_panel_axis(const layout *l) { return layout_transposed(l) ? l->rank - 2 : l->rank - 1; }

/* Where a copy from src into AMP-left panels dst is better staged: src
 * packed into panels on its own tiles first (a local strided copy), so the
 * exchange moves runs of whole panel rows instead of one fragment per row
 * and panel. Only a row-major src without replicas whose last-axis blocks
 * are whole panels of dst's element size, in another partition than dst's;
 * false otherwise. */
bool layout_amp_left_stage(const layout *src, const layout *dst, layout *stage);

int64_t layout_shards(const layout *l);        /* product of parts */
int64_t layout_replicas(const layout *l);      /* product of rep */
/* pw, elements (inline: the copy walks ask it per row). */
static inline int64_t layout_panel_width(const layout *l) {
    switch (layout_base_encoding(l->enc)) {
    case ENC_ROW_MAJOR: return l->block[layout_panel_axis(l)];
    case ENC_AMP_LEFT: return LAYOUT_AMP_PANEL_BYTES / l->elem_bytes;
    case ENC_AMP_OUT: return LAYOUT_AMP_OUT_COLS;
    default: break;
    }
    TS_UNREACHABLE();
}
int64_t layout_shard_bytes(const layout *l);   /* storage of one shard, padding included */
/* Tile of the shard with per-axis index s, replica with per-axis index r. */
static inline int32_t layout_tile(const layout *l, const int64_t *s, const int64_t *r) {
    int64_t t = l->tile_base;
    for (int a = 0; a < l->rank; a++) t += s[a] * l->tile_stride[a];
    for (int k = 0; k < l->nrep; k++) t += r[k] * l->rep_stride[k];
    return (int32_t)t;
}
/* Byte offset of element e (global coordinates) inside the shard holding it. */
int64_t layout_offset(const layout *l, const int64_t *e);
/* Tiles holding element e (every replica): returns the count, fills tiles
 * (capacity cap) in replica order. */
int64_t layout_owners(const layout *l, const int64_t *e, int32_t *tiles, int64_t cap);
/* The valid extent of shard s along each axis (the tail shard is shorter). */
void layout_shard_extent(const layout *l, const int64_t *s, int64_t *lo, int64_t *hi);

/* ---- copies ---------------------------------------------------------------- */

/* A view maps each destination coordinate to a source coordinate:
 * src[axis[i]] = dst[i] + off[i] for destination axes i; source axes no
 * destination axis maps to are fixed at src_fix[]. A destination element
 * whose source coordinate falls outside the source tensor has no source (a
 * pad fills it). NULL means identity (same tensor, same dims). */
typedef struct layout_view {
    int32_t axis[LAYOUT_MAX_RANK];
    int64_t off[LAYOUT_MAX_RANK];
    int64_t src_fix[LAYOUT_MAX_RANK];
} layout_view;

layout_view layout_view_identity(int rank);

typedef struct layout_run {
    int32_t src_tile, dst_tile;
    int64_t src_off, dst_off;  /* bytes inside the shard */
    int64_t bytes;
} layout_run;

/* Emits maximal runs, in destination tile order then destination storage
 * order, covering every destination element (on every replica) that has a
 * source. The source replica for a destination tile is the one on that tile
 * if there is one, else replica (dst shard linear index + dst replica linear
 * index) mod source replicas, so transfers spread over the replicas. Both
 * layouts need the same element size. sink returns nonzero to stop early;
 * layout_runs returns that value, or 0 once every run was emitted. Both
 * layouts must pass layout_check; view axes must be distinct source axes. */
typedef int (*layout_run_sink)(void *ctx, const layout_run *r);
int layout_runs(const layout *src, const layout *dst, const layout_view *view, layout_run_sink sink, void *ctx);
/* The same walk over destination (shard, replica) pairs [first, end) of the
 * layout_run_targets(dst) it visits in tile order: a run never spans two
 * pairs, so the runs of consecutive ranges, concatenated, are layout_runs'
 * (ranges can be walked on different threads). */
int64_t layout_run_targets(const layout *dst);
int layout_runs_range(const layout *src, const layout *dst, const layout_view *view, int64_t first, int64_t end,
                      layout_run_sink sink, void *ctx);

/* The source replica layout_runs uses for destination shard / replica indices
 * (exposed so tests and estimators agree with it). */
void layout_pick_source(const layout *src, const int64_t *src_shard, int32_t dst_tile, int64_t dst_shard_lin,
                        int64_t dst_rep_lin, int64_t *src_rep);

/* On-tile runs (src_tile == dst_tile, in layout_runs' order) grouped as the
 * lowering copies them: runs of one length at constant steps on both sides
 * become rows, rows of one shape at constant steps become planes; fn gets
 * each box, in order. The estimator counts the same boxes. */
typedef struct layout_copy_box {
    int32_t tile;
    int64_t dst, src, len;                /* first span's offsets, bytes per span */
    int64_t n[2], dstep[2], sstep[2];     /* [0] planes, [1] rows: counts and byte steps */
} layout_copy_box;
void layout_copy_boxes(const layout_run *runs, int64_t n, void (*fn)(void *ctx, const layout_copy_box *b), void *ctx);

/* Which tiles of a copy src -> dst (dst [n, ...] with axis 0 whole and no
 * replicas: K partials gathered for a reduce) find one whole slot j of their
 * destination shard, bytes [j * S, (j + 1) * S) with S the stride of axis 0,
 * in their own source shard: every valid element of slot j comes from the
 * tile itself, its on-tile runs (local[0, n), in layout_runs' order) keep one
 * offset between source and destination, and the slot so translated lies in
 * the source shard (a K-partials reduce then reads it there, padding
 * included), j below max_slot. slot[tile] = j (-1: not so) and off[tile]
 * the source offset of the slot's first byte, for every tile below `tiles`.
 * layout_drop_owned then keeps the runs of the other tiles (in order) and
 * returns how many. */
void layout_own_slots(const layout *src, const layout *dst, const layout_run *local, int64_t n, int32_t tiles,
                      int32_t max_slot, int32_t *slot, int64_t *off);
int64_t layout_drop_owned(layout_run *local, int64_t n, const int32_t *slot);

/* Runs between tiles (src_tile != dst_tile) as the exchange sends them:
 * runs with one source span and destination offset are one multicast
 * fragment whatever the number of receivers, cut into sends of at most
 * max_send bytes. Sorts runs (source tile, offset, length, destination
 * offset, destination tile) and calls fn per send, in that order; f->dst
 * points at the group's runs, whose dst_tile are the receivers. The
 * lowering emits these and the estimator prices them. */
typedef struct layout_fragment {
    int32_t src_tile;
    int64_t src_off, dst_off, bytes;  /* this send */
    const layout_run *dst;            /* the group's runs (receivers), ndst of them */
    int64_t ndst;
} layout_fragment;
void layout_fragments(layout_run *runs, int64_t n, int64_t max_send, void (*fn)(void *ctx, const layout_fragment *f),
                      void *ctx);
/* layout_fragments' order on runs between tiles (a total order: equal runs
 * are the same run): sorts v (with scratch room for n runs, or NULL to
 * allocate it); merges sorted a and b into out (na + nb runs, apart from
 * both), so that parts sorted apart give the one sorted whole. */
void layout_sort_remote(layout_run *v, int64_t n, layout_run *scratch);
void layout_merge_remote(const layout_run *a, int64_t na, const layout_run *b, int64_t nb, layout_run *out);

/* ---- spans.c ----------------------------------------------------------------- */

/* Walks the valid elements of one shard (or, with shard NULL, of every
 * shard) one span at a time: consecutive elements along the last axis
 * inside one panel, so contiguous in storage, in storage order (a
 * transposed shard: one element per span, in row-major order). fn gets the shard
 * index, the span's byte offset inside the shard, the row-major index of its
 * first element in the whole tensor, and its length in elements. Replicas
 * hold identical bytes and are not visited separately (layout_owners lists
 * their tiles). */
typedef void (*layout_span_fn)(void *ctx, const int64_t *shard, int64_t off, int64_t elem, int64_t n);
void layout_spans(const layout *l, const int64_t *shard, layout_span_fn fn, void *ctx);

/* Bytes between neighbours along axis a inside a shard (for the panel
 * axis: within one panel), and between panels. */
int64_t layout_axis_stride(const layout *l, int a);
int64_t layout_panel_stride(const layout *l);

/* Elements of one whole shard, padding included (what a flat sweep visits). */
int64_t layout_block_elems(const layout *l);

#endif
