/* test_layout.c: layout geometry and checks on hand-computed cases, and
 * layout_runs against a brute-force per-element oracle on random layout pairs.
 *
 * Oracle: every destination element of every destination (shard, replica) is
 * mapped through the view to its source element; the source replica comes
 * from layout_pick_source, tiles and offsets from layout_tile/layout_offset
 * (themselves checked by hand below). The multiset of (src tile, src offset,
 * dst tile, dst offset) must equal the runs expanded element by element.
 * The estimator's fragment counts are checked against the same oracle: its
 * elements merged into maximal spans contiguous on both sides, on-tile
 * spans dropped, one send per (source span, destination offset) however
 * many tiles receive it, each cut at the machine's largest send.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "estimate/estimate.h"
#include "layout/layout.h"

/* ---- helpers ---------------------------------------------------------- */

static uint64_t rng_state = 0x243f6a8885a308d3u;
static uint64_t rng(void) { /* xorshift64*: deterministic test inputs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}
static int64_t rng_below(int64_t n) { return (int64_t)(rng() % (uint64_t)n); }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

typedef struct run_list {
    layout_run *v;
    int64_t n, cap;
} run_list;

static int collect(void *ctx, const layout_run *r) {
    run_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = *r;
    return 0;
}

static run_list runs_of(const layout *src, const layout *dst, const layout_view *v) {
    run_list l = {0};
    assert_int_equal(layout_runs(src, dst, v, collect, &l), 0);
    return l;
}

static void expect_run(const layout_run *r, int32_t st, int64_t so, int32_t dt, int64_t doff, int64_t bytes) {
    assert_int_equal(r->src_tile, st);
    assert_int_equal(r->src_off, so);
    assert_int_equal(r->dst_tile, dt);
    assert_int_equal(r->dst_off, doff);
    assert_int_equal(r->bytes, bytes);
}

static void expect_error(const layout *l, int32_t tiles, const char *needle) {
    diag d = {0};
    assert_int_equal(layout_check(l, tiles, &d), -1);
    if (!strstr(d.text, needle)) fail_msg("message '%s' lacks '%s'", d.text, needle);
}

/* ---- geometry --------------------------------------------------------- */

static void test_uneven_tail(void **state) {
    (void)state;
    int64_t dim[1] = {17}, s[1], lo[1], hi[1];
    layout l = layout_single(1, dim, 2);
    layout_split(&l, 0, 4, 1);
    assert_int_equal(l.block[0], 5);
    int64_t want[4] = {5, 5, 5, 2};
    for (s[0] = 0; s[0] < 4; s[0]++) {
        layout_shard_extent(&l, s, lo, hi);
        assert_int_equal(lo[0], 5 * s[0]);
        assert_int_equal(hi[0] - lo[0], want[s[0]]);
    }
    assert_int_equal(layout_shard_bytes(&l), 10); /* the tail is stored at full extent */
    assert_int_equal(layout_shards(&l), 4);
    diag d = {0};
    assert_int_equal(layout_check(&l, 4, &d), 0);
    int64_t e[1] = {16};
    assert_int_equal(layout_offset(&l, e), 2);
    int32_t t;
    assert_int_equal(layout_owners(&l, e, &t, 1), 1);
    assert_int_equal(t, 3);
}

static void test_offsets_by_encoding(void **state) {
    (void)state;
    int64_t dim[2] = {3, 40}, e[2] = {1, 17};
    layout l = layout_single(2, dim, 2);
    assert_int_equal(layout_offset(&l, e), (1 * 40 + 17) * 2);
    assert_int_equal(layout_shard_bytes(&l), 240);
    l.enc = ENC_AMP_LEFT; /* 16 f16 per 32-byte panel, 3 panels (the last half padding) */
    assert_int_equal(layout_panel_width(&l), 16);
    assert_int_equal(layout_offset(&l, e), ((17 / 16) * 3 + 1) * 32 + (17 % 16) * 2);
    assert_int_equal(layout_shard_bytes(&l), 3 * 3 * 32);
    l.enc = ENC_AMP_OUT;
    assert_int_equal(layout_offset(&l, e), ((17 / 16) * 3 + 1) * 32 + (17 % 16) * 2);
    l = layout_single(2, dim, 4);
    l.enc = ENC_AMP_LEFT; /* 8 f32 per panel, 5 panels */
    assert_int_equal(layout_offset(&l, e), ((17 / 8) * 3 + 1) * 32 + (17 % 8) * 4);
    assert_int_equal(layout_shard_bytes(&l), 5 * 3 * 32);
    l.enc = ENC_AMP_OUT; /* 16 f32 per panel: 64 bytes */
    assert_int_equal(layout_offset(&l, e), ((17 / 16) * 3 + 1) * 64 + (17 % 16) * 4);
    l = layout_single(2, dim, 1);
    l.enc = ENC_AMP_LEFT; /* 32 bytes per panel, 2 panels */
    assert_int_equal(layout_offset(&l, e), 1 * 32 + 17);
    assert_int_equal(layout_shard_bytes(&l), 2 * 3 * 32);
}

/* A transposed shard stores the transpose: [2, 3, 40] ROW_MAJOR_T puts
 * (b, r, c) at b*40*3 + c*3 + r; AMP_LEFT_T cuts axis 1 into panels with
 * rows over (b, c). Every element agrees with the untransposed layout of the
 * transposed tensor (blocks and parts swapped with the axes). */
static void test_offsets_transposed(void **state) {
    (void)state;
    int64_t dim[3] = {2, 3, 40}, e[3] = {1, 2, 17};
    layout l = layout_single(3, dim, 2);
    l.enc = ENC_ROW_MAJOR_T;
    assert_true(layout_transposed(&l));
    assert_int_equal(layout_panel_axis(&l), 1);
    assert_int_equal(layout_offset(&l, e), ((1 * 40 + 17) * 3 + 2) * 2);
    assert_int_equal(layout_axis_stride(&l, 1), 2);
    assert_int_equal(layout_axis_stride(&l, 2), 3 * 2);
    assert_int_equal(layout_axis_stride(&l, 0), 40 * 3 * 2);
    assert_int_equal(layout_shard_bytes(&l), 240 * 2);
    l = layout_single(3, dim, 1);
    l.enc = ENC_AMP_LEFT_T; /* 32 bytes per panel: axis 1's 3 elements padded to one panel of 32 */
    assert_int_equal(layout_offset(&l, e), (1 * 40 + 17) * 32 + 2);
    assert_int_equal(layout_shard_bytes(&l), 80 * 32);
    for (int enc = 0; enc < 2; enc++) {
        int64_t d3[3] = {3, 19, 72}, dt[3] = {3, 72, 19};
        layout a = layout_single(3, d3, 2), b = layout_single(3, dt, 2);
        layout_split(&a, 1, 3, 1);
        layout_split(&a, 2, 4, 3);
        layout_split(&b, 1, 4, 3);
        layout_split(&b, 2, 3, 1);
        a.enc = enc ? ENC_AMP_LEFT_T : ENC_ROW_MAJOR_T;
        b.enc = enc ? ENC_AMP_LEFT : ENC_ROW_MAJOR;
        assert_int_equal(layout_check(&a, 64, &(diag){0}), 0);
        assert_int_equal(layout_shard_bytes(&a), layout_shard_bytes(&b));
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 19; j++)
                for (int64_t k = 0; k < 72; k++) {
                    int64_t x[3] = {i, j, k}, y[3] = {i, k, j};
                    assert_int_equal(layout_offset(&a, x), layout_offset(&b, y));
                }
        for (int ax = 0; ax < 3; ax++) assert_int_equal(layout_axis_stride(&a, ax), layout_axis_stride(&b, ax == 0 ? 0 : 3 - ax));
        assert_int_equal(layout_panel_stride(&a), layout_panel_stride(&b));
    }
    int64_t d1[1] = {5};
    layout one = layout_single(1, d1, 2);
    one.enc = ENC_ROW_MAJOR_T;
    expect_error(&one, 4, "needs two axes");
}

static void test_offsets_in_a_split(void **state) {
    (void)state;
    int64_t dim[3] = {4, 5, 40}, e[3] = {3, 4, 33};
    layout l = layout_single(3, dim, 2);
    layout_split(&l, 0, 2, 1); /* blocks [2, 3, 20] */
    layout_split(&l, 1, 2, 2);
    layout_split(&l, 2, 2, 4);
    l.enc = ENC_AMP_LEFT;
    /* local (1, 1, 13): rows 2 * 3 = 6, row 1 * 3 + 1 = 4, panel 0 */
    assert_int_equal(layout_offset(&l, e), (0 * 6 + 4) * 32 + 13 * 2);
    assert_int_equal(layout_shard_bytes(&l), 2 * 6 * 32);
    int32_t t;
    layout_owners(&l, e, &t, 1);
    assert_int_equal(t, 1 + 2 + 4);
}

static void test_padding(void **state) {
    (void)state;
    int64_t dim[2] = {10, 3};
    layout l = layout_single(2, dim, 4);
    l.block[0] = 16; /* one shard, padded beyond the tensor */
    diag d = {0};
    assert_int_equal(layout_check(&l, 1, &d), 0);
    assert_int_equal(layout_shard_bytes(&l), 16 * 3 * 4);
    l.parts[0] = 2;
    l.block[0] = 7; /* 7, 3 */
    l.tile_stride[0] = 1;
    assert_int_equal(layout_check(&l, 2, &d), 0);
    l.block[0] = 9; /* ceil(10 / 9) = 2 parts still */
    assert_int_equal(layout_check(&l, 2, &d), 0);
    assert_int_equal(layout_shard_bytes(&l), 9 * 3 * 4);
}

static void test_owners_with_replicas(void **state) {
    (void)state;
    int64_t dim[2] = {8, 8}, e[2] = {5, 2};
    layout l = layout_single(2, dim, 2);
    layout_split(&l, 0, 2, 2);
    layout_split(&l, 1, 2, 1);
    layout_replicate(&l, 3, 4);
    layout_replicate(&l, 2, 12);
    l.tile_base = 1;
    diag d = {0};
    assert_int_equal(layout_check(&l, 25, &d), 0);
    assert_int_equal(layout_replicas(&l), 6);
    int32_t t[6];
    assert_int_equal(layout_owners(&l, e, t, 6), 6);
    /* shard (1, 0): tile 1 + 2; replicas row-major (r0, r1) */
    int32_t want[6] = {3, 15, 7, 19, 11, 23};
    for (int i = 0; i < 6; i++) assert_int_equal(t[i], want[i]);
    int32_t few[2] = {-1, -1};
    assert_int_equal(layout_owners(&l, e, few, 1), 6);
    assert_int_equal(few[0], 3);
    assert_int_equal(few[1], -1);
}

static void test_check_errors(void **state) {
    (void)state;
    int64_t dim[2] = {10, 8};
    layout l = layout_single(2, dim, 2);
    layout_split(&l, 0, 2, 0); /* both row shards on tile 0 */
    expect_error(&l, 8, "shard (0, 0) and shard (1, 0) share tile 0");
    layout_split(&l, 0, 2, 1);
    layout_replicate(&l, 2, 1); /* replica 1 of shard 0 lands on shard 1 */
    expect_error(&l, 8, "shard (0, 0) replica (1) and shard (1, 0) replica (0) share tile 1");
    l.rep_stride[0] = 2;
    diag d = {0};
    assert_int_equal(layout_check(&l, 4, &d), 0);
    l.tile_base = 1;
    expect_error(&l, 4, "shard (1, 0) replica (1) lands on tile 4, outside [0, 4)");
    l.tile_base = -1;
    expect_error(&l, 8, "shard (0, 0) replica (0) lands on tile -1");
    l = layout_single(2, dim, 2);
    layout_split(&l, 0, 6, 1); /* blocks of 2: split makes 5 shards, not 6 */
    assert_int_equal(l.parts[0], 5);
    l.parts[0] = 6; /* a hand-made sixth shard would be empty */
    expect_error(&l, 8, "leave shard 5 empty");
    l.block[0] = 1;
    expect_error(&l, 8, "do not cover");
    l = layout_single(2, dim, 2);
    layout_split(&l, 1, 8, 1);
    expect_error(&l, 7, "more tiles than the machine's 7");
    l.tile_stride[1] = INT32_MAX; /* tile indices beyond int32 */
    expect_error(&l, 8, "outside [0, 8)");
    l = layout_single(2, dim, 2);
    l.block[1] = INT64_C(1) << 40;
    expect_error(&l, 8, "shards are limited");
    l.block[1] = INT64_MAX;
    expect_error(&l, 8, "more than 2^63");
    l = layout_single(2, dim, 3);
    expect_error(&l, 8, "element size 3");
    dim[1] = 0;
    l = layout_single(2, dim, 2);
    expect_error(&l, 8, "axis 1 has extent 0");
}

static void test_equal(void **state) {
    (void)state;
    int64_t dim[2] = {6, 4};
    layout a = layout_single(2, dim, 2), b = a;
    assert_true(layout_equal(&a, &b));
    b.tile_stride[1] = 5; /* one shard along axis 1: the stride moves nothing */
    assert_true(layout_equal(&a, &b));
    layout_split(&b, 0, 2, 1);
    assert_false(layout_equal(&a, &b));
    b = a;
    b.enc = ENC_AMP_LEFT;
    assert_false(layout_equal(&a, &b));
}

static void test_pick_source(void **state) {
    (void)state;
    int64_t dim[1] = {8}, s[1] = {1}, r[2];
    layout l = layout_single(1, dim, 2);
    layout_split(&l, 0, 2, 1);
    layout_replicate(&l, 2, 2);
    layout_replicate(&l, 3, 4); /* shard 1 lives on tiles 1, 5, 9, 3, 7, 11 */
    layout_pick_source(&l, s, 7, 0, 0, r);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 1);
    layout_pick_source(&l, s, 20, 3, 1, r); /* no replica there: (3 + 1) mod 6 = 4 = (1, 1) */
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 1);
    layout_pick_source(&l, s, 20, 6, 2, r); /* 8 mod 6 = 2 = (0, 2) */
    assert_int_equal(r[0], 0);
    assert_int_equal(r[1], 2);
}

/* ---- runs by hand ----------------------------------------------------- */

static void test_runs_identity(void **state) {
    (void)state;
    int64_t dim[2] = {6, 4};
    layout l = layout_single(2, dim, 2);
    layout_split(&l, 0, 2, 1);
    run_list rl = runs_of(&l, &l, NULL);
    assert_int_equal(rl.n, 2);
    expect_run(&rl.v[0], 0, 0, 0, 0, 24);
    expect_run(&rl.v[1], 1, 0, 1, 0, 24);
    free(rl.v);
}

static void test_runs_transpose(void **state) {
    (void)state;
    int64_t sd[2] = {2, 3}, dd[2] = {3, 2};
    layout src = layout_single(2, sd, 4), dst = layout_single(2, dd, 4);
    dst.tile_base = 1;
    layout_view v = layout_view_identity(2);
    v.axis[0] = 1;
    v.axis[1] = 0;
    run_list rl = runs_of(&src, &dst, &v);
    assert_int_equal(rl.n, 6);
    int64_t want_src[6] = {0, 12, 4, 16, 8, 20}; /* dst (i, j) reads src (j, i) */
    for (int i = 0; i < 6; i++) expect_run(&rl.v[i], 0, want_src[i], 1, 4 * i, 4);
    free(rl.v);
}

static void test_runs_pad_and_panels(void **state) {
    (void)state;
    int64_t sd[1] = {3}, dd[1] = {5};
    layout src = layout_single(1, sd, 4), dst = layout_single(1, dd, 4);
    layout_view v = layout_view_identity(1);
    v.off[0] = -1; /* dst[i] = src[i - 1]: a pad of one on each side */
    run_list rl = runs_of(&src, &dst, &v);
    assert_int_equal(rl.n, 1);
    expect_run(&rl.v[0], 0, 0, 0, 4, 12);
    free(rl.v);
    /* row-major [2, 40] f16 into AMP_LEFT: one run per (row, panel), the
     * last panel holding 8 columns. */
    int64_t d2[2] = {2, 40};
    src = layout_single(2, d2, 2);
    dst = layout_single(2, d2, 2);
    dst.enc = ENC_AMP_LEFT;
    rl = runs_of(&src, &dst, NULL);
    assert_int_equal(rl.n, 6);
    expect_run(&rl.v[1], 0, 80, 0, 32, 32);
    expect_run(&rl.v[4], 0, 64, 0, 128, 16);
    free(rl.v);
    /* one-row AMP panels follow each other: back to a single run */
    int64_t d3[2] = {1, 40};
    src = layout_single(2, d3, 2);
    src.enc = ENC_AMP_LEFT;
    dst = layout_single(2, d3, 2);
    rl = runs_of(&src, &dst, NULL);
    assert_int_equal(rl.n, 1);
    expect_run(&rl.v[0], 0, 0, 0, 0, 80);
    free(rl.v);
}

static int stop_after_one(void *ctx, const layout_run *r) {
    (void)r;
    ++*(int *)ctx;
    return 7;
}

static void test_runs_stop_early(void **state) {
    (void)state;
    int64_t dim[1] = {8};
    layout l = layout_single(1, dim, 1);
    layout_split(&l, 0, 4, 1);
    int calls = 0;
    assert_int_equal(layout_runs(&l, &l, NULL, stop_after_one, &calls), 7);
    assert_int_equal(calls, 1);
}

/* ---- property test against the per-element oracle --------------------- */

enum { PROP_TILES = 128, PROP_PAIRS = 1500, PROP_MAX_ELEMS = 8000 };

typedef struct quad {
    int32_t src_tile, dst_tile;
    int64_t src_off, dst_off;
} quad;

typedef struct quad_list {
    quad *v;
    int64_t n, cap;
} quad_list;

static void quad_push(quad_list *l, quad q) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = q;
}

static int quad_cmp(const void *pa, const void *pb) {
    const quad *a = pa, *b = pb;
    if (a->dst_tile != b->dst_tile) return a->dst_tile < b->dst_tile ? -1 : 1;
    if (a->dst_off != b->dst_off) return a->dst_off < b->dst_off ? -1 : 1;
    if (a->src_tile != b->src_tile) return a->src_tile < b->src_tile ? -1 : 1;
    return (a->src_off > b->src_off) - (a->src_off < b->src_off);
}

static void decode(int n, const int64_t *ext, int64_t lin, int64_t *idx) {
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

static void shuffle(int *v, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static void sort_ints(int *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

/* Strides over the partitioned and replicated axes in a random nesting
 * order, some reversed, optionally spaced out, from a small random base. */
static void random_tiles(layout *l) {
    int order[2 * LAYOUT_MAX_RANK], n = 0;
    for (int a = 0; a < l->rank; a++) {
        l->tile_stride[a] = (int32_t)rng_below(5); /* irrelevant unless parts > 1 */
        if (l->parts[a] > 1) order[n++] = a;
    }
    for (int k = 0; k < l->nrep; k++) order[n++] = LAYOUT_MAX_RANK + k;
    shuffle(order, n);
    int64_t spacing = 1 + rng_below(2), mult = spacing, base = 0;
    for (int i = 0; i < n; i++) {
        bool rep = order[i] >= LAYOUT_MAX_RANK;
        int idx = rep ? order[i] - LAYOUT_MAX_RANK : order[i];
        int64_t count = rep ? l->rep[idx] : l->parts[idx], stride = mult;
        if (rng_below(4) == 0) {
            stride = -mult;
            base += (count - 1) * mult;
        }
        if (rep) l->rep_stride[idx] = (int32_t)stride;
        else l->tile_stride[idx] = (int32_t)stride;
        mult *= count;
    }
    int64_t span = mult - spacing + 1; /* tiles from the lowest to the highest used */
    l->tile_base = (int32_t)(base + rng_below(PROP_TILES - span < 8 ? PROP_TILES - span : 8));
}

/* A random valid layout of dims: blocks from a target part count, sometimes
 * padded further, up to two replica axes, at most 64 tiles. With `like` (a
 * layout of the same dims) most axes and often the encoding copy it, so runs
 * that span many rows are common. */
static layout random_layout(int rank, const int64_t *dim, int eb, const layout *like) {
    for (;;) {
        layout l = layout_single(rank, dim, eb);
        l.enc = like && rng_below(2) ? like->enc : (layout_encoding)rng_below(rank >= 2 ? 5 : 3);
        for (int a = 0; a < rank; a++) {
            int64_t target = 1 + rng_below(dim[a] < 4 ? dim[a] : 4);
            int64_t block = ceil_div(dim[a], target) + (rng_below(4) == 0 ? rng_below(5) : 0);
            if (like && rng_below(3)) block = like->block[a];
            l.block[a] = block;
            l.parts[a] = ceil_div(dim[a], block);
        }
        l.nrep = (int32_t)rng_below(3);
        for (int k = 0; k < l.nrep; k++) l.rep[k] = 1 + rng_below(3);
        if (layout_shards(&l) * layout_replicas(&l) > 64) continue;
        random_tiles(&l);
        diag d = {0};
        if (layout_check(&l, PROP_TILES, &d)) fail_msg("generated layout invalid: %s", d.text);
        return l;
    }
}

static int64_t random_dim(void) {
    static const int64_t sizes[] = {1, 3, 17, 19, 72, 100, 2, 5, 8};
    return sizes[rng_below((int64_t)(sizeof sizes / sizeof sizes[0]))];
}

/* A random view from src dims: identity, transpose, window (slice, pad,
 * concat piece), or fewer destination axes with fixed source axes. Fills dst
 * rank and dims; returns NULL for the identity. */
static const layout_view *random_view(layout_view *v, int srank, const int64_t *sdim, int *drank, int64_t *ddim) {
    int kind = (int)rng_below(4), perm[LAYOUT_MAX_RANK];
    for (int j = 0; j < srank; j++) perm[j] = j;
    *drank = srank;
    if (kind == 0) {
        memcpy(ddim, sdim, (size_t)srank * sizeof *ddim);
        return NULL;
    }
    *v = layout_view_identity(srank);
    shuffle(perm, srank);
    if (kind == 3 && srank > 1) *drank = 1 + (int)rng_below(srank - 1);
    /* Windows and fixed axes keep the source's axis order half the time, so
     * that long runs are common. */
    if (kind != 1 && rng_below(2)) sort_ints(perm, *drank);
    for (int j = 0; j < srank; j++) v->src_fix[j] = rng_below(sdim[j] + (rng_below(8) == 0)); /* rarely outside */
    for (int i = 0; i < *drank; i++) {
        int64_t n = sdim[perm[i]];
        v->axis[i] = perm[i];
        ddim[i] = n;
        if (kind >= 2) {
            ddim[i] = 1 + rng_below(n + 4);
            v->off[i] = rng_below(n + 4) - 3;
        }
    }
    return v;
}

static void oracle(const layout *src, const layout *dst, const layout_view *v, quad_list *out) {
    layout_view id = layout_view_identity(dst->rank);
    if (!v) v = &id;
    int64_t ns = layout_shards(dst), nr = layout_replicas(dst);
    int64_t s[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK], lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], ext[LAYOUT_MAX_RANK];
    int64_t x[LAYOUT_MAX_RANK], e[LAYOUT_MAX_RANK], ss[LAYOUT_MAX_RANK], sr[LAYOUT_MAX_RANK];
    for (int64_t si = 0; si < ns; si++) {
        decode(dst->rank, dst->parts, si, s);
        layout_shard_extent(dst, s, lo, hi);
        for (int i = 0; i < dst->rank; i++) ext[i] = hi[i] - lo[i];
        for (int64_t ri = 0; ri < nr; ri++) {
            decode(dst->nrep, dst->rep, ri, r);
            int32_t dt = layout_tile(dst, s, r);
            for (int64_t k = 0; k < product(dst->rank, ext); k++) {
                decode(dst->rank, ext, k, x);
                for (int i = 0; i < dst->rank; i++) x[i] += lo[i];
                for (int j = 0; j < src->rank; j++) e[j] = v->src_fix[j];
                for (int i = 0; i < dst->rank; i++) e[v->axis[i]] = x[i] + v->off[i];
                bool inside = true;
                for (int j = 0; j < src->rank; j++) inside = inside && e[j] >= 0 && e[j] < src->dim[j];
                if (!inside) continue;
                for (int j = 0; j < src->rank; j++) ss[j] = e[j] / src->block[j];
                layout_pick_source(src, ss, dt, si, ri, sr);
                quad_push(out, (quad){layout_tile(src, ss, sr), dt, layout_offset(src, e), layout_offset(dst, x)});
            }
        }
    }
}

/* Order, bounds and maximality of the runs; returns their element expansion. */
static void check_runs(const layout *src, const layout *dst, const run_list *rl, quad_list *out) {
    int64_t eb = dst->elem_bytes, sb = layout_shard_bytes(src), db = layout_shard_bytes(dst);
    for (int64_t i = 0; i < rl->n; i++) {
        const layout_run *r = &rl->v[i];
        assert_true(r->bytes > 0 && r->bytes % eb == 0);
        assert_true(r->src_off >= 0 && r->src_off + r->bytes <= sb);
        assert_true(r->dst_off >= 0 && r->dst_off + r->bytes <= db);
        if (i > 0) {
            const layout_run *p = &rl->v[i - 1];
            assert_true(p->dst_tile <= r->dst_tile);
            if (p->dst_tile == r->dst_tile) {
                assert_true(p->dst_off + p->bytes <= r->dst_off);
                bool mergeable = p->src_tile == r->src_tile && p->dst_off + p->bytes == r->dst_off &&
                                 p->src_off + p->bytes == r->src_off;
                assert_false(mergeable);
            }
        }
        for (int64_t j = 0; j < r->bytes; j += eb)
            quad_push(out, (quad){r->src_tile, r->dst_tile, r->src_off + j, r->dst_off + j});
    }
}

static void print_layout(const char *name, const layout *l) {
    print_message("%s: rank %d eb %d enc %d base %d\n", name, l->rank, l->elem_bytes, (int)l->enc, l->tile_base);
    for (int a = 0; a < l->rank; a++)
        print_message("  axis %d: dim %lld parts %lld block %lld stride %d\n", a, (long long)l->dim[a],
                      (long long)l->parts[a], (long long)l->block[a], l->tile_stride[a]);
    for (int k = 0; k < l->nrep; k++)
        print_message("  rep %d: %lld stride %d\n", k, (long long)l->rep[k], l->rep_stride[k]);
}

static void test_runs_match_oracle(void **state) {
    (void)state;
    static const int sizes[3] = {1, 2, 4};
    int64_t total_runs = 0, total_elems = 0;
    for (int pair = 0; pair < PROP_PAIRS; pair++) {
        int srank = 1 + (int)rng_below(4), drank;
        int64_t sdim[LAYOUT_MAX_RANK], ddim[LAYOUT_MAX_RANK];
        for (int a = 0; a < srank; a++) sdim[a] = random_dim();
        layout_view view;
        const layout_view *v = random_view(&view, srank, sdim, &drank, ddim);
        if (product(srank, sdim) > PROP_MAX_ELEMS || product(drank, ddim) > PROP_MAX_ELEMS) {
            pair--;
            continue;
        }
        int eb = sizes[rng_below(3)];
        layout src = random_layout(srank, sdim, eb, NULL);
        layout dst = random_layout(drank, ddim, eb, !v && rng_below(2) ? &src : NULL);
        run_list rl = runs_of(&src, &dst, v);
        quad_list want = {0}, got = {0};
        oracle(&src, &dst, v, &want);
        check_runs(&src, &dst, &rl, &got);
        if (want.n) qsort(want.v, (size_t)want.n, sizeof *want.v, quad_cmp);
        if (got.n) qsort(got.v, (size_t)got.n, sizeof *got.v, quad_cmp);
        bool same = want.n == got.n && (want.n == 0 || !memcmp(want.v, got.v, (size_t)want.n * sizeof *want.v));
        if (!same) {
            print_message("pair %d: %lld expected elements, %lld from runs\n", pair, (long long)want.n,
                          (long long)got.n);
            print_layout("src", &src);
            print_layout("dst", &dst);
            fail();
        }
        total_runs += rl.n;
        total_elems += want.n;
        free(rl.v);
        free(want.v);
        free(got.v);
    }
    print_message("%d pairs: %lld runs cover %lld element copies\n", PROP_PAIRS, (long long)total_runs,
                  (long long)total_elems);
}

/* Fragments a copy sends, by brute force over the oracle's elements. */
static uint64_t oracle_fragments(quad_list *q, int64_t eb, int64_t max_send) {
    if (q->n) qsort(q->v, (size_t)q->n, sizeof *q->v, quad_cmp);
    typedef struct span {
        int32_t src_tile;
        int64_t src_off, dst_off, bytes;
    } span;
    span *sp = malloc(sizeof(span) * (size_t)(q->n + 1));
    int64_t n = 0;
    for (int64_t i = 0; i < q->n; i++) {
        const quad *e = &q->v[i];
        if (e->src_tile == e->dst_tile) continue;
        span *last = n ? &sp[n - 1] : NULL;
        bool extends = last && i > 0 && q->v[i - 1].dst_tile == e->dst_tile && q->v[i - 1].src_tile != q->v[i - 1].dst_tile &&
                       last->src_tile == e->src_tile && last->dst_off + last->bytes == e->dst_off &&
                       last->src_off + last->bytes == e->src_off;
        if (extends) last->bytes += eb;
        else sp[n++] = (span){e->src_tile, e->src_off, e->dst_off, eb};
    }
    uint64_t frags = 0;
    for (int64_t i = 0; i < n; i++) {
        bool dup = false;
        for (int64_t j = 0; j < i && !dup; j++)
            dup = sp[j].src_tile == sp[i].src_tile && sp[j].src_off == sp[i].src_off && sp[j].bytes == sp[i].bytes &&
                  sp[j].dst_off == sp[i].dst_off;
        if (!dup) frags += (uint64_t)ceil_div(sp[i].bytes, max_send);
    }
    free(sp);
    return frags;
}

/* A random copy for the estimate's tests: a view (NULL: the identity),
 * layouts of at most 3000 elements on each side, an element size, and the
 * machine's send size (m->max_send_bytes). */
/* The c600 cut down to PROP_TILES tiles: the random-pair tests' machine. */
static machine prop_machine(void) {
    machine m;
    assert_int_equal(machine_preset("c600", &m), 0);
    m.tiles = PROP_TILES;
    return m;
}

static const layout_view *random_copy(machine *m, layout *src, layout *dst, layout_view *view) {
    static const int sizes[3] = {1, 2, 4};
    static const uint32_t sends[3] = {256, 16, 8};
    for (;;) {
        int srank = 1 + (int)rng_below(4), drank;
        int64_t sdim[LAYOUT_MAX_RANK], ddim[LAYOUT_MAX_RANK];
        for (int a = 0; a < srank; a++) sdim[a] = random_dim();
        const layout_view *v = random_view(view, srank, sdim, &drank, ddim);
        if (product(srank, sdim) > 3000 || product(drank, ddim) > 3000) continue;
        int eb = sizes[rng_below(3)];
        m->max_send_bytes = sends[rng_below(3)];
        *src = random_layout(srank, sdim, eb, NULL);
        *dst = random_layout(drank, ddim, eb, !v && rng_below(2) ? src : NULL);
        return v;
    }
}

static void test_fragments_match_oracle(void **state) {
    (void)state;
    machine m = prop_machine();
    uint64_t total = 0;
    enum { PAIRS = 400 };
    for (int pair = 0; pair < PAIRS; pair++) {
        layout src, dst;
        layout_view view;
        const layout_view *v = random_copy(&m, &src, &dst, &view);
        int eb = src.elem_bytes;
        quad_list q = {0};
        oracle(&src, &dst, v, &q);
        uint64_t want = oracle_fragments(&q, eb, m.max_send_bytes);
        est_cache *c = est_cache_new(&m);
        est_copy_info got;
        est_copy(c, &src, &dst, v, &got);
        est_cache_free(c);
        if (got.fragments != want) {
            print_message("pair %d: oracle %llu fragments, estimate %llu (max send %u)\n", pair, (unsigned long long)want,
                          (unsigned long long)got.fragments, m.max_send_bytes);
            print_layout("src", &src);
            print_layout("dst", &dst);
            fail();
        }
        total += want;
        free(q.v);
    }
    print_message("%d pairs: %llu fragments, estimate equal on every one\n", PAIRS, (unsigned long long)total);
}

/* A copy into a replicated destination from an unreplicated source is priced
 * by walking each destination shard once and handing its runs to every
 * replica (estimate.c, by_shard): every figure must equal walking each
 * replica on its own, on random pairs (views, encodings, blocks, up to two
 * replica axes) and a few machine send sizes. */
static void test_replicas_walked_once(void **state) {
    (void)state;
    machine m = prop_machine();
    enum { PAIRS = 500 };
    int locals = 0;
    for (int pair = 0; pair < PAIRS; pair++) {
        layout src, dst;
        layout_view view;
        const layout_view *v = random_copy(&m, &src, &dst, &view);
        if (src.nrep || !dst.nrep) {
            pair--;
            continue;
        }
        est_cache *once = est_cache_new(&m), *each = est_cache_new(&m);
        est_cache_walk_every_replica(each);
        est_copy_info a, b;
        est_copy(once, &src, &dst, v, &a);
        est_copy(each, &src, &dst, v, &b);
        est_cache_free(once);
        est_cache_free(each);
        locals += b.local != 0;
        if (memcmp(&a, &b, sizeof a) != 0) {
            print_message("pair %d: once per shard %llu fragments, %llu busiest, %llu local, %llu/%llu table, %llu moved;"
                          " every replica %llu, %llu, %llu, %llu/%llu, %llu\n",
                          pair, (unsigned long long)a.fragments, (unsigned long long)a.busiest, (unsigned long long)a.local,
                          (unsigned long long)a.table_sum, (unsigned long long)a.table_max, (unsigned long long)a.moved_sum,
                          (unsigned long long)b.fragments, (unsigned long long)b.busiest, (unsigned long long)b.local,
                          (unsigned long long)b.table_sum, (unsigned long long)b.table_max, (unsigned long long)b.moved_sum);
            print_layout("src", &src);
            print_layout("dst", &dst);
            fail();
        }
    }
    /* Some pairs must copy on-tile too: their runs are reordered by tile. */
    assert_true(locals > PAIRS / 10);
    print_message("%d pairs (%d with on-tile runs): the same figures walked once per shard\n", PAIRS, locals);
}

/* The lowering walks a large copy's destination pairs in ranges on several
 * threads and merges their sorted remote runs (lower.c, copy_runs): on
 * random pairs, the runs of consecutive ranges (cut at random points)
 * concatenated are layout_runs' own, and their remote runs, each range's
 * sorted apart and merged, are the whole walk's sorted. */
static void test_runs_in_ranges(void **state) {
    (void)state;
    machine m = prop_machine();
    enum { PAIRS = 300 };
    int split = 0;
    for (int pair = 0; pair < PAIRS; pair++) {
        layout src, dst;
        layout_view view;
        const layout_view *v = random_copy(&m, &src, &dst, &view);
        run_list whole = runs_of(&src, &dst, v);
        int64_t targets = layout_run_targets(&dst), cut[4] = {0, rng_below(targets + 1), 0, targets};
        cut[2] = cut[1] + rng_below(targets - cut[1] + 1);
        run_list parts[3] = {{0}};
        int64_t at = 0;
        for (int k = 0; k < 3; k++) {
            assert_int_equal(layout_runs_range(&src, &dst, v, cut[k], cut[k + 1], collect, &parts[k]), 0);
            for (int64_t i = 0; i < parts[k].n; i++, at++) {
                assert_true(at < whole.n);
                assert_memory_equal(&parts[k].v[i], &whole.v[at], sizeof(layout_run));
            }
            split += parts[k].n > 0 && parts[k].n < whole.n;
        }
        assert_int_equal(at, whole.n);
        /* Remote runs: the whole's sorted against the parts' sorted and merged. */
        layout_run *rem[3], *merged = malloc(sizeof(layout_run) * (size_t)(whole.n + 1)),
                            *tmp = malloc(sizeof(layout_run) * (size_t)(whole.n + 1));
        int64_t nrem[3] = {0}, n = 0, nwhole = 0;
        for (int k = 0; k < 3; k++) {
            rem[k] = malloc(sizeof(layout_run) * (size_t)(parts[k].n + 1));
            for (int64_t i = 0; i < parts[k].n; i++)
                if (parts[k].v[i].src_tile != parts[k].v[i].dst_tile) rem[k][nrem[k]++] = parts[k].v[i];
            layout_sort_remote(rem[k], nrem[k], k == 1 ? tmp : NULL);
            layout_merge_remote(merged, n, rem[k], nrem[k], tmp);
            n += nrem[k];
            memcpy(merged, tmp, sizeof(layout_run) * (size_t)n);
        }
        for (int64_t i = 0; i < whole.n; i++)
            if (whole.v[i].src_tile != whole.v[i].dst_tile) whole.v[nwhole++] = whole.v[i];
        layout_sort_remote(whole.v, nwhole, NULL);
        assert_int_equal(n, nwhole);
        for (int64_t i = 0; i < n; i++) assert_memory_equal(&merged[i], &whole.v[i], sizeof(layout_run));
        for (int64_t i = 1; i < n; i++) /* sorted: source tile, then offset */
            assert_true(merged[i - 1].src_tile < merged[i].src_tile ||
                        (merged[i - 1].src_tile == merged[i].src_tile && merged[i - 1].src_off <= merged[i].src_off));
        for (int k = 0; k < 3; k++) free(rem[k]), free(parts[k].v);
        free(merged);
        free(tmp);
        free(whole.v);
    }
    /* Most pairs must really be cut: some ranges hold part of the runs. */
    assert_true(split > PAIRS / 2);
    print_message("%d pairs cut in three ranges (%d ranges holding part of the runs): the same runs\n", PAIRS, split);
}

/* layout_sort_remote on arrays past its bucket threshold (dealt by source
 * tile, then each bucket merge-sorted) and below it, against qsort with the
 * documented order: source tile, offset, length, destination offset,
 * destination tile. Fields drawn from small ranges, so equal keys and equal
 * runs occur. */
static int run_order(const void *pa, const void *pb) {
    const layout_run *a = pa, *b = pb;
    int64_t ka[5] = {a->src_tile, a->src_off, a->bytes, a->dst_off, a->dst_tile};
    int64_t kb[5] = {b->src_tile, b->src_off, b->bytes, b->dst_off, b->dst_tile};
    for (int i = 0; i < 5; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

static void test_sort_remote(void **state) {
    (void)state;
    static const int64_t sizes[] = {0, 1, 2, 100, 4095, 4096, 30000, 100000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k];
        layout_run *v = malloc(sizeof(layout_run) * (size_t)(n + 1)), *want = malloc(sizeof(layout_run) * (size_t)(n + 1)),
                   *scratch = malloc(sizeof(layout_run) * (size_t)(n + 1));
        for (int64_t i = 0; i < n; i++)
            v[i] = (layout_run){.src_tile = (int32_t)rng_below(k % 2 ? 1472 : 7), .dst_tile = (int32_t)rng_below(50),
                                .src_off = rng_below(300) * 4, .dst_off = rng_below(20) * 4, .bytes = 4 * (1 + rng_below(3))};
        memcpy(want, v, sizeof(layout_run) * (size_t)n);
        qsort(want, (size_t)n, sizeof(layout_run), run_order);
        layout_sort_remote(v, n, k % 2 ? scratch : NULL);
        for (int64_t i = 0; i < n; i++) assert_int_equal(run_order(&v[i], &want[i]), 0);
        layout_sort_remote(v, n, NULL); /* sorted already: unchanged */
        for (int64_t i = 0; i < n; i++) assert_int_equal(run_order(&v[i], &want[i]), 0);
        free(v), free(want), free(scratch);
    }
}

/* The seed's worked case: an FP8 [2, 74, 192] tensor held one row per tile
 * (148 tiles) re-tiled into one AMP-left shard of six 32-byte panels of 148
 * rows on another tile: every row lands as six separate 32-byte pieces, 888
 * fragments (not 111, what counting whole rows in 256-byte sends gives). */
static void test_fragments_seed_case(void **state) {
    (void)state;
    machine m;
    assert_int_equal(machine_preset("c600", &m), 0);
    int64_t dim[3] = {2, 74, 192};
    layout src = layout_single(3, dim, 1), dst = layout_single(3, dim, 1);
    layout_split(&src, 0, 2, 74);
    layout_split(&src, 1, 74, 1);
    dst.enc = ENC_AMP_LEFT;
    dst.tile_base = 200;
    diag d = {0};
    assert_int_equal(layout_check(&src, (int32_t)m.tiles, &d), 0);
    assert_int_equal(layout_check(&dst, (int32_t)m.tiles, &d), 0);
    est_cache *c = est_cache_new(&m);
    est_copy_info got;
    est_copy(c, &src, &dst, NULL, &got);
    assert_int_equal(got.fragments, 888);
    /* The destination tile receives all 28,416 bytes in 888 fragments: the
     * larger of payload and controls bounds it. */
    uint64_t payload = (28416 + m.exchange_bytes_per_cycle - 1) / m.exchange_bytes_per_cycle, controls = 888 * m.fragment_cycles;
    assert_int_equal(got.busiest, payload > controls ? payload : controls);
    est_cache_free(c);
}

/* ---- scale ------------------------------------------------------------ */

typedef struct run_count {
    int64_t all, on_tile;
    int32_t tile; /* destination tile counted in on_tile */
} run_count;

static int count_runs(void *ctx, const layout_run *r) {
    run_count *c = ctx;
    c->all++;
    c->on_tile += r->dst_tile == c->tile;
    return 0;
}

/* [729, 1152] f16 from a row-major 46 x 32 grid (1,472 tiles) to AMP_LEFT
 * 27 row x 6 K shards, 9 replicas. Each row is cut at every 16-column panel
 * and every 36-column source shard: 71 + 31 - 7 common cuts = 96 pieces, none
 * contiguous with the next on both sides: 729 * 96 runs per replica. */
static void test_runs_at_scale(void **state) {
    (void)state;
    int64_t dim[2] = {729, 1152};
    layout src = layout_single(2, dim, 2), dst = layout_single(2, dim, 2);
    layout_split(&src, 0, 46, 32);
    layout_split(&src, 1, 32, 1);
    layout_split(&dst, 0, 27, 6);
    layout_split(&dst, 1, 6, 1);
    layout_replicate(&dst, 9, 162);
    dst.enc = ENC_AMP_LEFT;
    diag d = {0};
    assert_int_equal(layout_check(&src, 1472, &d), 0);
    assert_int_equal(layout_check(&dst, 1472, &d), 0);
    run_count c = {.tile = 0};
    double t0 = util_now_seconds();
    assert_int_equal(layout_runs(&src, &dst, NULL, count_runs, &c), 0);
    fprintf(stderr, "[729, 1152] f16 retile, 1472 -> 162 x 9 tiles: %lld runs in %.1f ms\n", (long long)c.all,
            (util_now_seconds() - t0) * 1e3);
    assert_int_equal(c.all, 729 * 96 * 9);
}

/* The predecessor's B2 Q retile (EARLY_EXCHANGE_GEOMETRY): FP8 [2, 729, 1152]
 * cast one row per tile (1,458 owners), redistributed into AMP_LEFT shards of
 * [2, 74, 192] (60 unique, 24 replicas, 1,440 tiles). The largest consumer
 * shard has 148 rows x six 32-byte panels, each from a different source row:
 * 888 runs. */
static void test_runs_b2_retile(void **state) {
    (void)state;
    int64_t dim[3] = {2, 729, 1152};
    layout src = layout_single(3, dim, 1), dst = layout_single(3, dim, 1);
    layout_split(&src, 0, 2, 729);
    layout_split(&src, 1, 729, 1);
    layout_split(&dst, 1, 10, 6);
    dst.block[1] = 74; /* the predecessor's blocks: 9 x 74 + 63, padded beyond ceil(729 / 10) */
    layout_split(&dst, 2, 6, 1);
    layout_replicate(&dst, 24, 60);
    dst.enc = ENC_AMP_LEFT;
    assert_int_equal(dst.block[1], 74);
    assert_int_equal(dst.block[2], 192);
    assert_int_equal(layout_shard_bytes(&dst), 28416);
    diag d = {0};
    assert_int_equal(layout_check(&src, 1472, &d), 0);
    assert_int_equal(layout_check(&dst, 1472, &d), 0);
    run_count c = {.tile = 0}; /* shard (0, 0, 0), replica 0 */
    double t0 = util_now_seconds();
    assert_int_equal(layout_runs(&src, &dst, NULL, count_runs, &c), 0);
    fprintf(stderr, "B2 FP8 retile, 1458 -> 60 x 24 tiles: %lld runs in %.1f ms\n", (long long)c.all,
            (util_now_seconds() - t0) * 1e3);
    assert_int_equal(c.on_tile, 888);
    assert_int_equal(c.all, 2 * 729 * (1152 / 32) * 24);
}

typedef struct local_runs {
    layout_run v[64];
    int64_t n;
} local_runs;

static int keep_local(void *ctx, const layout_run *r) {
    local_runs *l = ctx;
    if (r->src_tile == r->dst_tile) {
        assert_true(l->n < 64);
        l->v[l->n++] = *r;
    }
    return 0;
}

/* K partials [2, 8, 4] f16 computed on tiles (p, row half) = 2p + i, gathered
 * so each tile holds both partials of finer row blocks: a tile finds a whole
 * slot of its own (layout_own_slots) only where every valid element of it
 * was its own partial. */
static void test_own_slots(void **state) {
    (void)state;
    int64_t dim[3] = {2, 8, 4};
    layout p = layout_single(3, dim, 2);
    layout_split(&p, 0, 2, 2);
    layout_split(&p, 1, 2, 1);
    int32_t slot[8];
    int64_t off[8];
    /* Rows in blocks of 2: tile 0 keeps rows 0-1 of partial 0, tile 3 rows 6-7 of partial 1. */
    layout g = layout_single(3, dim, 2);
    layout_split(&g, 1, 4, 1);
    local_runs l = {.n = 0};
    layout_runs(&p, &g, NULL, keep_local, &l);
    layout_own_slots(&p, &g, l.v, l.n, 8, INT32_MAX, slot, off);
    assert_int_equal(slot[0], 0);
    assert_int_equal(off[0], 0);
    assert_int_equal(slot[1], -1);
    assert_int_equal(slot[2], -1);
    assert_int_equal(slot[3], 1);
    assert_int_equal(off[3], 16); /* slot 1 is bytes 16..32 of tile 3's shard: its rows 6-7 */
    /* Blocks of 3 rows: tile 0's slot 0 is its own; tile 1 holds rows 4-5 of
     * partial 0 but row 3 comes from tile 0, so it keeps its copy; tile 2's
     * tail block (rows 6-7) has nothing of its own. */
    layout u = layout_single(3, dim, 2);
    layout_split(&u, 1, 3, 1);
    l.n = 0;
    layout_runs(&p, &u, NULL, keep_local, &l);
    layout_own_slots(&p, &u, l.v, l.n, 8, INT32_MAX, slot, off);
    assert_int_equal(slot[0], 0);
    assert_true(l.n >= 2);
    assert_int_equal(slot[1], -1);
    assert_int_equal(slot[2], -1);
    /* A split partials axis is no gathering: nothing qualifies. */
    layout_own_slots(&p, &p, l.v, l.n, 8, INT32_MAX, slot, off);
    for (int t = 0; t < 8; t++) assert_int_equal(slot[t], -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uneven_tail),       cmocka_unit_test(test_offsets_by_encoding), cmocka_unit_test(test_offsets_transposed),
        cmocka_unit_test(test_offsets_in_a_split), cmocka_unit_test(test_padding),
        cmocka_unit_test(test_owners_with_replicas), cmocka_unit_test(test_check_errors),
        cmocka_unit_test(test_equal),             cmocka_unit_test(test_pick_source),
        cmocka_unit_test(test_runs_identity),     cmocka_unit_test(test_runs_transpose),
        cmocka_unit_test(test_runs_pad_and_panels), cmocka_unit_test(test_runs_stop_early),
        cmocka_unit_test(test_runs_match_oracle), cmocka_unit_test(test_runs_at_scale),
        cmocka_unit_test(test_fragments_match_oracle), cmocka_unit_test(test_replicas_walked_once), cmocka_unit_test(test_runs_in_ranges), cmocka_unit_test(test_sort_remote),
        cmocka_unit_test(test_fragments_seed_case),
        cmocka_unit_test(test_runs_b2_retile),    cmocka_unit_test(test_own_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
