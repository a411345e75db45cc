/* layout.c: tile layouts of tensors: shard geometry, well-formedness, and the
 * ownership runs of a copy between two layouts. */
#include "layout.h"

#include <stdlib.h>
#include <string.h>

/* ---- index helpers ---------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ceil(a / b) for a >= 0, b >= 1, without the overflow of a + b - 1. */
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* The row-major multi-index (last index fastest) of lin over extents ext. */
static void lin_decode(int n, const int64_t *ext, int64_t lin, int64_t *idx) {
    for (int k = n - 1; k >= 0; k--) {
        idx[k] = lin % ext[k];
        lin /= ext[k];
    }
}

static int64_t product(int n, const int64_t *x) {
    int64_t p = 1;
    for (int k = 0; k < n; k++) p *= x[k];
    return p;
}

/* ---- construction ----------------------------------------------------- */

layout layout_single(int rank, const int64_t *dim, int elem_bytes) {
    TS_ASSERT(rank >= 1 && rank <= LAYOUT_MAX_RANK);
    layout l;
    memset(&l, 0, sizeof l);
    l.rank = rank;
    l.elem_bytes = elem_bytes;
    l.enc = ENC_ROW_MAJOR;
    /* Unused axes are extent 1 so products over all axes stay neutral. */
    for (int a = 0; a < LAYOUT_MAX_RANK; a++) {
        l.dim[a] = a < rank ? dim[a] : 1;
        l.parts[a] = 1;
        l.block[a] = l.dim[a];
    }
    return l;
}

void layout_split(layout *l, int axis, int64_t parts, int32_t tile_stride) {
    TS_ASSERT(axis >= 0 && axis < l->rank && parts >= 1);
    /* Fewer shards when the blocks cover the axis early: none is ever empty
     * (10 over 6 is 5 shards of 2). */
    l->block[axis] = ceil_div(l->dim[axis], parts);
    l->parts[axis] = ceil_div(l->dim[axis], l->block[axis]);
    l->tile_stride[axis] = tile_stride;
}

void layout_replicate(layout *l, int64_t n, int32_t tile_stride) {
    TS_ASSERT(l->nrep >= 0 && l->nrep < LAYOUT_MAX_RANK && n >= 1);
    l->rep[l->nrep] = n;
    l->rep_stride[l->nrep] = tile_stride;
    l->nrep++;
}

/* ---- geometry --------------------------------------------------------- */

int64_t layout_shards(const layout *l) { return product(l->rank, l->parts); }
int64_t layout_replicas(const layout *l) { return product(l->nrep, l->rep); }


/* The logical axis at storage position i: the identity, with the last two
 * swapped when the shard is stored transposed. Position rank-1 is the panel
 * axis; the positions before it are the rows, outermost first. */
static int storage_axis(const layout *l, int i) {
    if (!layout_transposed(l) || i < l->rank - 2) return i;
    return i == l->rank - 2 ? l->rank - 1 : l->rank - 2;
}


/* Rows of one shard's storage: the product of every block but the panel axis's. */
static int64_t shard_rows(const layout *l) {
    int64_t r = 1;
    for (int a = 0; a < l->rank; a++)
        if (a != layout_panel_axis(l)) r *= l->block[a];
    return r;
}

int64_t layout_shard_bytes(const layout *l) {
    int64_t pw = layout_panel_width(l);
    return ceil_div(l->block[layout_panel_axis(l)], pw) * shard_rows(l) * pw * l->elem_bytes;
}


int64_t layout_offset(const layout *l, const int64_t *e) {
    int pa = layout_panel_axis(l);
    int64_t row = 0;
    for (int i = 0; i < l->rank - 1; i++) {
        int a = storage_axis(l, i);
        row = row * l->block[a] + e[a] % l->block[a];
    }
    int64_t pw = layout_panel_width(l), col = e[pa] % l->block[pa];
    return ((col / pw) * shard_rows(l) + row) * pw * l->elem_bytes + (col % pw) * l->elem_bytes;
}

int64_t layout_owners(const layout *l, const int64_t *e, int32_t *tiles, int64_t cap) {
    int64_t s[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK];
    for (int a = 0; a < l->rank; a++) s[a] = e[a] / l->block[a];
    int64_t n = layout_replicas(l);
    for (int64_t i = 0; i < n && i < cap; i++) {
        lin_decode(l->nrep, l->rep, i, r);
        tiles[i] = layout_tile(l, s, r);
    }
    return n;
}

void layout_shard_extent(const layout *l, const int64_t *s, int64_t *lo, int64_t *hi) {
    for (int a = 0; a < l->rank; a++) {
        lo[a] = s[a] * l->block[a];
        hi[a] = min64(l->dim[a], lo[a] + l->block[a]);
    }
}

bool layout_equal(const layout *a, const layout *b) {
    if (a->rank != b->rank || a->elem_bytes != b->elem_bytes || a->enc != b->enc || a->nrep != b->nrep ||
        a->tile_base != b->tile_base)
        return false;
    /* A stride along an axis of one shard or copy never moves a tile. */
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i] || a->parts[i] != b->parts[i] || a->block[i] != b->block[i] ||
            (a->parts[i] > 1 && a->tile_stride[i] != b->tile_stride[i]))
            return false;
    for (int k = 0; k < a->nrep; k++)
        if (a->rep[k] != b->rep[k] || (a->rep[k] > 1 && a->rep_stride[k] != b->rep_stride[k])) return false;
    return true;
}

/* ---- well-formedness -------------------------------------------------- */

/* "shard (1, 0) replica (2)" for messages. */
static const char *pair_text(char *buf, size_t cap, const layout *l, const int64_t *s, const int64_t *r) {
    size_t n = (size_t)snprintf(buf, cap, "shard (");
    for (int a = 0; a < l->rank && n < cap; a++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", a ? ", " : "", (long long)s[a]);
    if (l->nrep > 0 && n < cap) n += (size_t)snprintf(buf + n, cap - n, ") replica (");
    for (int k = 0; k < l->nrep && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", k ? ", " : "", (long long)r[k]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}

static int check_axis(const layout *l, int a, diag *d) {
    long long dim = l->dim[a], parts = l->parts[a], block = l->block[a];
    if (dim < 1) return diag_fail(d, "layout: axis %d has extent %lld; extents must be positive", a, dim);
    if (parts < 1 || block < 1)
        return diag_fail(d, "layout: axis %d has %lld parts of %lld elements; both must be positive", a, parts, block);
    if (block < ceil_div(dim, parts))
        return diag_fail(d, "layout: axis %d: %lld parts of %lld elements do not cover its %lld elements", a, parts,
                         block, dim);
    if (parts > ceil_div(dim, block))
        return diag_fail(d, "layout: axis %d: %lld parts of %lld elements over %lld elements leave shard %lld empty", a,
                         parts, block, dim, (long long)ceil_div(dim, block));
    return 0;
}

static int check_fields(const layout *l, diag *d) {
    if (l->rank < 1 || l->rank > LAYOUT_MAX_RANK)
        return diag_fail(d, "layout: rank %d is outside [1, %d]", l->rank, LAYOUT_MAX_RANK);
    if (l->elem_bytes != 1 && l->elem_bytes != 2 && l->elem_bytes != 4)
        return diag_fail(d, "layout: element size %d bytes is not 1, 2 or 4", l->elem_bytes);
    if (l->enc != ENC_ROW_MAJOR && l->enc != ENC_AMP_LEFT && l->enc != ENC_AMP_OUT && l->enc != ENC_ROW_MAJOR_T &&
        l->enc != ENC_AMP_LEFT_T)
        return diag_fail(d, "layout: unknown encoding %d", (int)l->enc);
    if (layout_transposed(l) && l->rank < 2)
        return diag_fail(d, "layout: a transposed shard needs two axes, it has %d", l->rank);
    for (int a = 0; a < l->rank; a++)
        if (check_axis(l, a, d)) return -1;
    if (l->nrep < 0 || l->nrep > LAYOUT_MAX_RANK)
        return diag_fail(d, "layout: %d replica axes is outside [0, %d]", l->nrep, LAYOUT_MAX_RANK);
    for (int k = 0; k < l->nrep; k++)
        if (l->rep[k] < 1)
            return diag_fail(d, "layout: replica axis %d has %lld copies; it needs at least one", k,
                             (long long)l->rep[k]);
    return 0;
}

/* Shard offsets are 32-bit in programs and packages. */
static int check_shard_bytes(const layout *l, diag *d) {
    int pa = layout_panel_axis(l);
    int64_t pw = layout_panel_width(l), bytes = ceil_div(l->block[pa], pw);
    bool over = __builtin_mul_overflow(bytes, pw, &bytes) || __builtin_mul_overflow(bytes, l->elem_bytes, &bytes);
    for (int a = 0; a < l->rank; a++)
        if (a != pa) over = over || __builtin_mul_overflow(bytes, l->block[a], &bytes);
    if (over) return diag_fail(d, "layout: a shard needs more than 2^63 bytes; shards are limited to 2^31 - 1");
    if (bytes > INT32_MAX)
        return diag_fail(d, "layout: a shard needs %lld bytes; shards are limited to 2^31 - 1", (long long)bytes);
    return 0;
}

/* Multiplies *acc by x; false once the product passes cap. */
static bool mul_capped(int64_t *acc, int64_t x, int64_t cap) {
    return !__builtin_mul_overflow(*acc, x, acc) && *acc <= cap;
}

static int check_tile_count(const layout *l, int32_t tiles, diag *d) {
    int64_t n = 1;
    bool ok = true;
    for (int a = 0; a < l->rank && ok; a++) ok = mul_capped(&n, l->parts[a], tiles);
    for (int k = 0; k < l->nrep && ok; k++) ok = mul_capped(&n, l->rep[k], tiles);
    if (!ok)
        return diag_fail(d, "layout: its shards and replicas need more tiles than the machine's %d", (int)tiles);
    return 0;
}

/* The (shard, replica) with the highest tile (or the lowest), and that tile.
 * After check_tile_count every sum of (n - 1) * |stride| is below 2^62. */
static int64_t extreme_pair(const layout *l, bool highest, int64_t *s, int64_t *r) {
    int64_t t = l->tile_base;
    for (int a = 0; a < l->rank; a++) {
        s[a] = (l->tile_stride[a] > 0) == highest && l->tile_stride[a] != 0 ? l->parts[a] - 1 : 0;
        t += s[a] * l->tile_stride[a];
    }
    for (int k = 0; k < l->nrep; k++) {
        r[k] = (l->rep_stride[k] > 0) == highest && l->rep_stride[k] != 0 ? l->rep[k] - 1 : 0;
        t += r[k] * l->rep_stride[k];
    }
    return t;
}

static int check_tile_range(const layout *l, int32_t tiles, diag *d) {
    int64_t s[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK];
    char buf[256];
    for (int highest = 0; highest < 2; highest++) {
        int64_t t = extreme_pair(l, highest, s, r);
        if (t < 0 || t >= tiles)
            return diag_fail(d, "layout: %s lands on tile %lld, outside [0, %d)", pair_text(buf, sizeof buf, l, s, r),
                             (long long)t, (int)tiles);
    }
    return 0;
}

/* The (shard, replica) pair with linear index i (replicas fastest). */
static void pair_decode(const layout *l, int64_t i, int64_t *s, int64_t *r) {
    int64_t nr = layout_replicas(l);
    lin_decode(l->rank, l->parts, i / nr, s);
    lin_decode(l->nrep, l->rep, i % nr, r);
}

/* Two pairs on one tile: an open-addressing map tile -> first pair, sized
 * to the pair count so a sparse tile range costs nothing. */
static int check_tile_overlap(const layout *l, diag *d) {
    int64_t n = layout_shards(l) * layout_replicas(l), cap = 2;
    while (cap < 2 * n) cap *= 2;
    int32_t *key = xmalloc((size_t)cap * sizeof *key);
    int64_t *first = xmalloc((size_t)cap * sizeof *first);
    memset(key, 0xff, (size_t)cap * sizeof *key); /* -1: empty; tiles are >= 0 here */
    int64_t s[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK], clash = -1, other = -1;
    int32_t tile = 0;
    for (int64_t i = 0; i < n && clash < 0; i++) {
        pair_decode(l, i, s, r);
        tile = layout_tile(l, s, r);
        uint64_t h = ((uint64_t)tile * 0x9e3779b97f4a7c15u) >> 17;
        while (key[h & (uint64_t)(cap - 1)] >= 0 && key[h & (uint64_t)(cap - 1)] != tile) h++;
        int64_t slot = (int64_t)(h & (uint64_t)(cap - 1));
        if (key[slot] == tile) {
            clash = i;
            other = first[slot];
        }
        key[slot] = tile;
        first[slot] = i;
    }
    free(key);
    free(first);
    if (clash < 0) return 0;
    char a[256], b[256];
    pair_decode(l, other, s, r);
    pair_text(a, sizeof a, l, s, r);
    pair_decode(l, clash, s, r);
    return diag_fail(d, "layout: %s and %s share tile %d", a, pair_text(b, sizeof b, l, s, r), (int)tile);
}

static int check_tiles(const layout *l, int32_t tiles, diag *d) {
    return check_tile_count(l, tiles, d) || check_tile_range(l, tiles, d) || check_tile_overlap(l, d) ? -1 : 0;
}

int layout_check(const layout *l, int32_t tiles, diag *d) {
    return check_fields(l, d) || check_shard_bytes(l, d) || check_tiles(l, tiles, d) ? -1 : 0;
}

int layout_check_form(const layout *l, int32_t tiles, diag *d) { return check_fields(l, d) || check_tiles(l, tiles, d) ? -1 : 0; }

/* ---- copies ----------------------------------------------------------- */

layout_view layout_view_identity(int rank) {
    layout_view v;
    memset(&v, 0, sizeof v);
    for (int i = 0; i < rank; i++) v.axis[i] = i;
    return v;
}

/* Whether a replica of src_shard lies on tile; if so rep is the first one in
 * replica order. The last replica axis is solved by division, so the search
 * takes replicas / rep[last] steps. */
static bool replica_on_tile(const layout *src, const int64_t *src_shard, int64_t tile, int64_t *rep) {
    int n = src->nrep;
    int64_t zero[LAYOUT_MAX_RANK] = {0};
    int64_t diff = tile - layout_tile(src, src_shard, zero);
    if (n == 0) return diff == 0;
    int64_t outer = product(n - 1, src->rep), stride = src->rep_stride[n - 1];
    for (int64_t o = 0; o < outer; o++) {
        lin_decode(n - 1, src->rep, o, rep);
        int64_t rem = diff;
        for (int k = 0; k < n - 1; k++) rem -= rep[k] * src->rep_stride[k];
        int64_t q = stride ? rem / stride : 0;
        if (q * stride == rem && q >= 0 && q < src->rep[n - 1]) {
            rep[n - 1] = q;
            return true;
        }
    }
    return false;
}

void layout_pick_source(const layout *src, const int64_t *src_shard, int32_t dst_tile, int64_t dst_shard_lin,
                        int64_t dst_rep_lin, int64_t *src_rep) {
    if (replica_on_tile(src, src_shard, dst_tile, src_rep)) return;
    lin_decode(src->nrep, src->rep, (dst_shard_lin + dst_rep_lin) % layout_replicas(src), src_rep);
}

/* One destination (shard, replica), visited in tile order. */
typedef struct dst_target {
    int32_t tile;
    int64_t shard_lin, rep_lin; /* row-major linear indices */
} dst_target;

static int target_cmp(const void *pa, const void *pb) {
    const dst_target *a = pa, *b = pb;
    if (a->tile != b->tile) return a->tile < b->tile ? -1 : 1;
    if (a->shard_lin != b->shard_lin) return a->shard_lin < b->shard_lin ? -1 : 1;
    return (a->rep_lin > b->rep_lin) - (a->rep_lin < b->rep_lin);
}

static dst_target *targets_by_tile(const layout *dst, int64_t *count) {
    int64_t n = layout_shards(dst) * layout_replicas(dst), s[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK];
    dst_target *t = xmalloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) {
        pair_decode(dst, i, s, r);
        t[i] = (dst_target){layout_tile(dst, s, r), i / layout_replicas(dst), i % layout_replicas(dst)};
    }
    qsort(t, (size_t)n, sizeof *t, target_cmp);
    *count = n;
    return t;
}

/* The state of one layout_runs call. Per destination (shard, replica) the walk
 * covers the box of its elements that have a source, one destination row
 * segment (one panel, one row) at a time, cut where the source changes shard
 * or panel; pieces contiguous on both sides fold into the pending run. */
typedef struct walk {
    const layout *src, *dst;
    const layout_view *v;
    int32_t dst_of_src[LAYOUT_MAX_RANK]; /* destination axis reading each source axis, -1 if fixed */
    int64_t src_step_bytes;              /* source bytes between neighbours along the innermost dst axis */
    layout_run_sink sink;
    void *ctx;
    int stop;                            /* the sink's nonzero answer */
    layout_run pend;                     /* the run being extended */
    bool have_pend;
    /* the destination (shard, replica) being walked */
    int32_t dst_tile;
    int64_t dst_shard[LAYOUT_MAX_RANK];
    int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];   /* dst box, global elements, all with a source */
    int64_t sfirst[LAYOUT_MAX_RANK], scount[LAYOUT_MAX_RANK]; /* overlapping source shards per source axis */
    int32_t *src_tiles;                  /* tile of each overlapping source shard, row-major */
    int64_t src_tiles_cap;               /* entries */
    int64_t tmul[LAYOUT_MAX_RANK];       /* src_tiles index step per source axis */
    /* Offsets without layout_offset's divisions: byte strides of every axis
     * but the panel axis (whose offset is (l / pw) * panel stride + (l % pw)
     * * element), and the current destination shard's first element. */
    int64_t sstride[LAYOUT_MAX_RANK], dstride[LAYOUT_MAX_RANK], dorg[LAYOUT_MAX_RANK];
    int s_pa;
    int64_t s_pw, s_pstride, d_pw, d_pstride;
    /* Per source axis, the last coordinate asked and its shard and place in
     * it: neighbouring segments differ in one coordinate, by one. */
    int64_t cg[LAYOUT_MAX_RANK], cq[LAYOUT_MAX_RANK], cr[LAYOUT_MAX_RANK];
} walk;

/* False when the view reads a fixed source coordinate outside the source:
 * then no destination element has a source. */
static bool walk_init(walk *w, const layout *src, const layout *dst, const layout_view *v) {
    TS_ASSERT(dst->rank <= src->rank);
    for (int j = 0; j < src->rank; j++) w->dst_of_src[j] = -1;
    for (int i = 0; i < dst->rank; i++) {
        int a = v->axis[i];
        TS_ASSERT(a >= 0 && a < src->rank && w->dst_of_src[a] < 0);
        TS_ASSERT(v->off[i] > -(INT64_C(1) << 62) && v->off[i] < (INT64_C(1) << 62));
        w->dst_of_src[a] = i;
    }
    for (int j = 0; j < src->rank; j++) {
        if (w->dst_of_src[j] >= 0) continue;
        if (v->src_fix[j] < 0 || v->src_fix[j] >= src->dim[j]) return false;
        w->sfirst[j] = v->src_fix[j] / src->block[j];
        w->scount[j] = 1;
    }
    w->src_step_bytes = layout_axis_stride(src, v->axis[layout_panel_axis(dst)]);
    w->s_pa = layout_panel_axis(src);
    w->s_pw = layout_panel_width(src);
    w->s_pstride = layout_panel_stride(src);
    w->d_pw = layout_panel_width(dst);
    w->d_pstride = layout_panel_stride(dst);
    for (int j = 0; j < src->rank; j++) {
        w->sstride[j] = j == w->s_pa ? 0 : layout_axis_stride(src, j);
        w->cg[j] = -1; /* nothing asked yet */
    }
    for (int i = 0; i < dst->rank; i++) w->dstride[i] = i == layout_panel_axis(dst) ? 0 : layout_axis_stride(dst, i);
    return true;
}

/* Source coordinate g along axis j: its shard (cq) and place in it (cr),
 * from the last one asked when g is at or a little past it. */
static inline void src_axis_at(walk *w, int j, int64_t g) {
    int64_t b = w->src->block[j], dg = g - w->cg[j];
    if (dg == 0) return;
    if (dg > 0 && w->cg[j] >= 0 && w->cr[j] + dg < b) {
        w->cr[j] += dg;
    } else {
        w->cq[j] = g / b;
        w->cr[j] = g - w->cq[j] * b;
    }
    w->cg[j] = g;
}

/* Byte offset of place r along axis j of a shard of l (stride or panels). */
static inline int64_t axis_bytes(int64_t r, int64_t stride, bool panel, int64_t pw, int64_t pstride, int64_t eb) {
    return panel ? (r / pw) * pstride + (r % pw) * eb : r * stride;
}

/* The box of the current destination shard whose elements have a source, and
 * the source shards it overlaps; false when the box is empty. */
static bool walk_box(walk *w) {
    const layout *s = w->src, *d = w->dst;
    for (int i = 0; i < d->rank; i++) {
        int a = w->v->axis[i];
        int64_t off = w->v->off[i], lo = w->dst_shard[i] * d->block[i];
        int64_t hi = min64(min64(d->dim[i], lo + d->block[i]), s->dim[a] - off);
        lo = max64(lo, -off);
        if (lo >= hi) return false;
        w->lo[i] = lo;
        w->hi[i] = hi;
        w->sfirst[a] = (lo + off) / s->block[a];
        w->scount[a] = (hi - 1 + off) / s->block[a] - w->sfirst[a] + 1;
    }
    return true;
}

/* Source tiles of the overlapping source shards, chosen once per destination
 * (shard, replica) rather than once per piece. */
static void fill_src_tiles(walk *w, const dst_target *t) {
    const layout *s = w->src;
    int64_t n = product(s->rank, w->scount), idx[LAYOUT_MAX_RANK], rep[LAYOUT_MAX_RANK];
    if (n > w->src_tiles_cap) {
        w->src_tiles = xrealloc(w->src_tiles, (size_t)n * sizeof *w->src_tiles);
        w->src_tiles_cap = n;
    }
    int64_t m = 1;
    for (int j = s->rank - 1; j >= 0; j--) w->tmul[j] = m, m *= w->scount[j];
    for (int64_t k = 0; k < n; k++) {
        lin_decode(s->rank, w->scount, k, idx);
        for (int j = 0; j < s->rank; j++) idx[j] += w->sfirst[j];
        layout_pick_source(s, idx, t->tile, t->shard_lin, t->rep_lin, rep);
        w->src_tiles[k] = layout_tile(s, idx, rep);
    }
}

static void flush(walk *w) {
    if (w->have_pend && !w->stop) w->stop = w->sink(w->ctx, &w->pend);
    w->have_pend = false;
}

static void emit(walk *w, int32_t src_tile, int64_t src_off, int64_t dst_off, int64_t bytes) {
    layout_run *p = &w->pend;
    if (w->have_pend && p->src_tile == src_tile && p->src_off + p->bytes == src_off &&
        p->dst_off + p->bytes == dst_off) {
        p->bytes += bytes;
        return;
    }
    flush(w);
    *p = (layout_run){.src_tile = src_tile, .dst_tile = w->dst_tile, .src_off = src_off, .dst_off = dst_off,
                      .bytes = bytes};
    w->have_pend = true;
}

/* The destination row segment x (panel-axis coordinate from c0 to c1, one
 * panel) cut into pieces that are contiguous on the source too: each piece
 * ends where the source changes shard or, on its panel axis, panel. x[panel
 * axis] is unused: the caller iterates only the other axes. */
static void walk_segment(walk *w, const int64_t *x, int64_t c0, int64_t c1) {
    const layout *s = w->src, *d = w->dst;
    int pa = layout_panel_axis(d), a_pa = w->v->axis[pa];
    int64_t eb = d->elem_bytes, off = w->v->off[pa], step = w->src_step_bytes;
    /* The destination offset of (x, c0) and the source's over every axis
     * but a_pa (fixed for the segment), with the tile index it contributes. */
    int64_t dst_off = axis_bytes(c0 - w->dorg[pa], 0, true, w->d_pw, w->d_pstride, eb);
    for (int i = 0; i < d->rank; i++)
        if (i != pa) {
            dst_off += (x[i] - w->dorg[i]) * w->dstride[i];
            src_axis_at(w, w->v->axis[i], x[i] + w->v->off[i]);
        }
    int64_t src_base = 0, k_base = 0;
    for (int j = 0; j < s->rank; j++) {
        if (j == a_pa) continue;
        if (w->dst_of_src[j] < 0) src_axis_at(w, j, w->v->src_fix[j]);
        src_base += axis_bytes(w->cr[j], w->sstride[j], j == w->s_pa, w->s_pw, w->s_pstride, eb);
        k_base += (w->cq[j] - w->sfirst[j]) * w->tmul[j];
    }
    bool panel = a_pa == w->s_pa;
    int64_t b = s->block[a_pa];
    for (int64_t u = c0; u < c1 && !w->stop;) {
        int64_t g = u + off;
        src_axis_at(w, a_pa, g);
        int64_t q = w->cq[a_pa], r = w->cr[a_pa];
        int64_t piece_end = panel ? min64((q + 1) * b, g - r % w->s_pw + w->s_pw) : (q + 1) * b;
        int64_t end = min64(c1, piece_end - off), n = end - u;
        int32_t tile = w->src_tiles[k_base + (q - w->sfirst[a_pa]) * w->tmul[a_pa]];
        int64_t src_off = src_base + axis_bytes(r, w->sstride[a_pa], panel, w->s_pw, w->s_pstride, eb);
        if (step == eb) {
            emit(w, tile, src_off, dst_off, n * eb);
        } else {
            for (int64_t k = 0; k < n; k++) emit(w, tile, src_off + k * step, dst_off + k * eb, eb);
        }
        dst_off += n * eb;
        u = end;
    }
}

/* Advances x over the box's axes ord[0..n) (ord[n-1] fastest). */
static bool next_row(int64_t *x, const int64_t *lo, const int64_t *hi, const int *ord, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if (++x[ord[i]] < hi[ord[i]]) return true;
        x[ord[i]] = lo[ord[i]];
    }
    return false;
}

/* Destination storage order: panel, then row (the other axes in storage
 * order), then the panel axis. */
static void walk_rows(walk *w) {
    const layout *d = w->dst;
    int pa = layout_panel_axis(d), ord[LAYOUT_MAX_RANK], n = d->rank - 1;
    for (int i = 0; i < n; i++) ord[i] = storage_axis(d, i);
    int64_t pw = layout_panel_width(d), base = w->dst_shard[pa] * d->block[pa];
    int64_t p_end = (w->hi[pa] - 1 - base) / pw, x[LAYOUT_MAX_RANK];
    for (int64_t p = (w->lo[pa] - base) / pw; p <= p_end && !w->stop; p++) {
        int64_t c0 = max64(w->lo[pa], base + p * pw), c1 = min64(w->hi[pa], base + (p + 1) * pw);
        memcpy(x, w->lo, sizeof x);
        do walk_segment(w, x, c0, c1);
        while (!w->stop && next_row(x, w->lo, w->hi, ord, n));
    }
}

static void walk_target(walk *w, const dst_target *t) {
    lin_decode(w->dst->rank, w->dst->parts, t->shard_lin, w->dst_shard);
    for (int i = 0; i < w->dst->rank; i++) w->dorg[i] = w->dst_shard[i] * w->dst->block[i];
    if (!walk_box(w)) return;
    w->dst_tile = t->tile;
    fill_src_tiles(w, t);
    walk_rows(w);
    flush(w);
}

int64_t layout_run_targets(const layout *dst) { return layout_shards(dst) * layout_replicas(dst); }

int layout_runs(const layout *src, const layout *dst, const layout_view *view, layout_run_sink sink, void *ctx) {
    return layout_runs_range(src, dst, view, 0, layout_run_targets(dst), sink, ctx);
}

int layout_runs_range(const layout *src, const layout *dst, const layout_view *view, int64_t first, int64_t end,
                      layout_run_sink sink, void *ctx) {
    TS_ASSERT(src->elem_bytes == dst->elem_bytes);
    layout_view identity;
    if (!view) {
        TS_ASSERT(src->rank == dst->rank);
        for (int a = 0; a < dst->rank; a++) TS_ASSERT(src->dim[a] == dst->dim[a]);
        identity = layout_view_identity(dst->rank);
        view = &identity;
    }
    walk w;
    memset(&w, 0, sizeof w);
    w.src = src;
    w.dst = dst;
    w.v = view;
    w.sink = sink;
    w.ctx = ctx;
    if (!walk_init(&w, src, dst, view)) return 0;
    int64_t n;
    dst_target *order = targets_by_tile(dst, &n);
    if (end > n) end = n;
    for (int64_t i = first < 0 ? 0 : first; i < end && !w.stop; i++) walk_target(&w, &order[i]);
    free(order);
    free(w.src_tiles);
    return w.stop;
}

bool layout_amp_left_stage(const layout *src, const layout *dst, layout *stage) {
    if (dst->enc != ENC_AMP_LEFT || src->enc != ENC_ROW_MAJOR || src->nrep) return false;
    *stage = *src;
    stage->enc = ENC_AMP_LEFT;
    stage->elem_bytes = dst->elem_bytes;
    int last = src->rank - 1;
    int64_t pw = layout_panel_width(stage);
    if (src->parts[last] > 1 && src->block[last] % pw) return false;
    layout a = *dst, b = *stage;
    a.nrep = b.nrep = 0;
    return !layout_equal(&a, &b); /* same partition: the copy is local anyway */
}

int64_t layout_axis_stride(const layout *l, int a) {
    if (a == layout_panel_axis(l)) return l->elem_bytes;
    int64_t s = l->elem_bytes * layout_panel_width(l);
    TS_ASSERT(a >= 0 && a < l->rank);
    int i = 0;
    while (storage_axis(l, i) != a) i++;
    for (i++; i < l->rank - 1; i++) s *= l->block[storage_axis(l, i)];
    return s;
}

int64_t layout_panel_stride(const layout *l) { return shard_rows(l) * layout_panel_width(l) * l->elem_bytes; }

int64_t layout_block_elems(const layout *l) {
    int64_t n = 1;
    for (int a = 0; a < l->rank; a++) n *= l->block[a];
    return n;
}

