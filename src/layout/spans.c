/* spans.c: contiguous element spans of every shard, for moving whole tensors
 * between host arrays and tile memory (parameters, inputs, outputs), and the
 * grouping of on-tile copy spans into strided boxes. */
#include "layout.h"

#include <stdlib.h>
#include <string.h>

void layout_spans(const layout *l, const int64_t *shard, layout_span_fn fn, void *ctx) {
    int last = l->rank - 1;
    int64_t s[LAYOUT_MAX_RANK] = {0}, rowstride[LAYOUT_MAX_RANK];
    int64_t st = 1;
    for (int a = last; a >= 0; a--) {
        rowstride[a] = st;
        st *= l->dim[a];
    }
    /* A transposed shard is contiguous along the last axis nowhere. */
    int64_t pw = layout_transposed(l) ? 1 : layout_panel_width(l);
    if (shard) memcpy(s, shard, sizeof(int64_t) * (size_t)l->rank);
    for (;;) {
        int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], e[LAYOUT_MAX_RANK];
        layout_shard_extent(l, s, lo, hi);
        memcpy(e, lo, sizeof e);
        for (;;) {
            int64_t n = hi[last] - lo[last];
            for (int64_t i = 0; i < n;) {
                int64_t take = pw - i % pw < n - i ? pw - i % pw : n - i;
                e[last] = lo[last] + i;
                int64_t elem = 0;
                for (int a = 0; a <= last; a++) elem += e[a] * rowstride[a];
                fn(ctx, s, layout_offset(l, e), elem, take);
                i += take;
            }
            int a = last - 1;
            for (; a >= 0; a--) {
                if (++e[a] < hi[a]) break;
                e[a] = lo[a];
            }
            if (a < 0) break;
        }
        if (shard) return;
        int a = last;
        for (; a >= 0; a--) {
            if (++s[a] < l->parts[a]) break;
            s[a] = 0;
        }
        if (a < 0) return;
    }
}

static bool extends(const layout_copy_box *b, int level, int64_t dst, int64_t src) {
    int64_t k = b->n[level];
    if (k == 1) return dst > b->dst && src >= b->src;
    return dst == b->dst + k * b->dstep[level] && src == b->src + k * b->sstep[level];
}

/* Two passes: spans into rows, rows into planes. */
void layout_copy_boxes(const layout_run *runs, int64_t n, void (*fn)(void *ctx, const layout_copy_box *b), void *ctx) {
    layout_copy_box *rows = xmalloc(sizeof(layout_copy_box) * (size_t)(n ? n : 1));
    int64_t nrows = 0;
    for (int64_t i = 0; i < n; i++) {
        layout_copy_box *b = nrows ? &rows[nrows - 1] : NULL;
        const layout_run *r = &runs[i];
        if (b && b->tile == r->dst_tile && b->len == r->bytes && extends(b, 1, r->dst_off, r->src_off)) {
            if (b->n[1] == 1) b->dstep[1] = r->dst_off - b->dst, b->sstep[1] = r->src_off - b->src;
            b->n[1]++;
            continue;
        }
        rows[nrows++] = (layout_copy_box){r->dst_tile, r->dst_off, r->src_off, r->bytes, {1, 1}, {0, 0}, {0, 0}};
    }
    layout_copy_box plane = {0};
    bool open = false;
    for (int64_t i = 0; i < nrows; i++) {
        const layout_copy_box *r = &rows[i];
        if (open && plane.tile == r->tile && plane.len == r->len && plane.n[1] == r->n[1] && plane.dstep[1] == r->dstep[1] &&
            plane.sstep[1] == r->sstep[1] && extends(&plane, 0, r->dst, r->src)) {
            if (plane.n[0] == 1) plane.dstep[0] = r->dst - plane.dst, plane.sstep[0] = r->src - plane.src;
            plane.n[0]++;
            continue;
        }
        if (open) fn(ctx, &plane);
        plane = *r;
        open = true;
    }
    if (open) fn(ctx, &plane);
    free(rows);
}

/* Source order: source tile, offset, length, destination offset, destination
 * tile. A total order (equal runs are the same run), so any sort gives one result. */
static inline bool before(const layout_run *x, const layout_run *y) {
    if (x->src_tile != y->src_tile) return x->src_tile < y->src_tile;
    if (x->src_off != y->src_off) return x->src_off < y->src_off;
    if (x->bytes != y->bytes) return x->bytes < y->bytes;
    if (x->dst_off != y->dst_off) return x->dst_off < y->dst_off;
    return x->dst_tile < y->dst_tile;
}

void layout_merge_remote(const layout_run *a, int64_t na, const layout_run *b, int64_t nb, layout_run *out) {
    int64_t x = 0, y = 0, k = 0;
    while (x < na && y < nb) out[k++] = before(&b[y], &a[x]) ? b[y++] : a[x++];
    while (x < na) out[k++] = a[x++];
    while (y < nb) out[k++] = b[y++];
}

/* Bottom-up merge sort with the comparison inlined (qsort's indirect calls
 * were a fifth of a SigLIP compile): sorts a[0, n) with b as room, the
 * result in b. */
static void merge_sort_into(layout_run *a, int64_t n, layout_run *b) {
    int64_t i = 1;
    while (i < n && !before(&a[i], &a[i - 1])) i++;
    if (i >= n) { /* in order already */
        memcpy(b, a, sizeof *a * (size_t)n);
        return;
    }
    layout_run *from = a, *to = b;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            layout_merge_remote(from + lo, mid - lo, from + mid, hi - mid, to + lo);
        }
        layout_run *t = from;
        from = to, to = t;
    }
    if (from != b) memcpy(b, from, sizeof *a * (size_t)n);
}

/* Runs already in order cost one pass. A long array is first dealt into
 * buckets by source tile (one pass, in order), and each bucket, a few
 * thousand runs that stay in cache, merge-sorted on its own: rather than
 * twenty passes over the whole of it. */
enum { BUCKET_SORT_MIN = 1 << 12 };

void layout_sort_remote(layout_run *v, int64_t n, layout_run *scratch) {
    int64_t i = 1;
    while (i < n && !before(&v[i], &v[i - 1])) i++;
    if (i >= n) return;
    layout_run *tmp = scratch ? scratch : xmalloc(sizeof *v * (size_t)n);
    if (n < BUCKET_SORT_MIN) {
        memcpy(tmp, v, sizeof *v * (size_t)n);
        merge_sort_into(tmp, n, v);
    } else {
        int32_t top = 0;
        for (int64_t k = 0; k < n; k++) {
            TS_ASSERT(v[k].src_tile >= 0);
            top = v[k].src_tile > top ? v[k].src_tile : top;
        }
        int64_t *at = xcalloc((size_t)top + 2, sizeof(int64_t));
        for (int64_t k = 0; k < n; k++) at[v[k].src_tile + 1]++;
        for (int32_t t = 0; t <= top; t++) at[t + 1] += at[t];
        for (int64_t k = 0; k < n; k++) tmp[at[v[k].src_tile]++] = v[k]; /* at[t]: bucket t's end now */
        for (int32_t t = 0; t <= top; t++) {
            int64_t b = t ? at[t - 1] : 0;
            merge_sort_into(tmp + b, at[t] - b, v + b);
        }
        free(at);
    }
    if (!scratch) free(tmp);
}

void layout_fragments(layout_run *runs, int64_t n, int64_t max_send, void (*fn)(void *ctx, const layout_fragment *f),
                      void *ctx) {
    layout_sort_remote(runs, n, NULL);
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && runs[j].src_tile == runs[i].src_tile && runs[j].src_off == runs[i].src_off &&
               runs[j].bytes == runs[i].bytes && runs[j].dst_off == runs[i].dst_off)
            j++;
        for (int64_t at = 0; at < runs[i].bytes; at += max_send) {
            layout_fragment f = {runs[i].src_tile, runs[i].src_off + at, runs[i].dst_off + at,
                                 runs[i].bytes - at < max_send ? runs[i].bytes - at : max_send, &runs[i], j - i};
            fn(ctx, &f);
        }
        i = j;
    }
}

void layout_own_slots(const layout *src, const layout *dst, const layout_run *local, int64_t n, int32_t tiles,
                      int32_t max_slot, int32_t *slot, int64_t *off) {
    for (int32_t t = 0; t < tiles; t++) slot[t] = -1;
    if (dst->rank < 2 || dst->parts[0] != 1 || dst->nrep) return;
    /* The valid bytes of one slot of each tile's shard. */
    int64_t *valid = xcalloc((size_t)tiles, sizeof(int64_t)), ns = layout_shards(dst), s[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK] = {0};
    for (int64_t i = 0; i < ns; i++) {
        for (int64_t k = i, a = dst->rank - 1; a >= 0; a--) s[a] = k % dst->parts[a], k /= dst->parts[a];
        int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], v = dst->elem_bytes;
        layout_shard_extent(dst, s, lo, hi);
        for (int a = 1; a < dst->rank; a++) v *= hi[a] - lo[a];
        int32_t t = layout_tile(dst, s, r);
        if (t >= 0 && t < tiles) valid[t] = v;
    }
    int64_t S = layout_axis_stride(dst, 0), src_bytes = layout_shard_bytes(src);
    for (int64_t i = 0; i < n;) {
        int64_t j = i, bytes = 0, delta = local[i].src_off - local[i].dst_off, k = local[i].dst_off / S;
        int32_t t = local[i].dst_tile;
        bool ok = t >= 0 && t < tiles;
        for (; j < n && local[j].dst_tile == t; j++) {
            ok = ok && local[j].src_off - local[j].dst_off == delta && local[j].dst_off >= k * S &&
                 local[j].dst_off + local[j].bytes <= (k + 1) * S;
            bytes += local[j].bytes;
        }
        if (ok && k < max_slot && bytes == valid[t] && k * S + delta >= 0 && (k + 1) * S + delta <= src_bytes) {
            slot[t] = (int32_t)k;
            off[t] = k * S + delta;
        }
        i = j;
    }
    free(valid);
}

int64_t layout_drop_owned(layout_run *local, int64_t n, const int32_t *slot) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++)
        if (slot[local[i].dst_tile] < 0) local[kept++] = local[i];
    return kept;
}
