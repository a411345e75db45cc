/* test_package.c: a hand-built placed package on the tiny machine survives
 * save and load unchanged and byte for byte; every kind of damage (truncation,
 * bad header, bad sections, addresses out of memory, overlapping segments,
 * bad bindings) is refused with a message naming the file. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "package/package.h"
#include "place/place.h"

#define PATH "t.tpk"

/* ---- the package -------------------------------------------------------- */

/* tiny: tile memory 0x4c000..0x6c000, interleaved from 0x5c000, loader
 * limit 0x6bbb0, 256-byte sends, 16 tiles. */
enum { BASE = 0x4c000, INTERLEAVED = 0x5c000 };

/* Labels: "" at 0, then these. */
enum { L_MAIN = 1, L_LAYER = 6, L_XCHG = 12 };
static const char STRINGS[] = "\0main\0layer\0xchg";  /* the literal's own NUL ends "xchg" */

static kernel_addr at(uint32_t addr, int32_t stride) { return (kernel_addr){KERNEL_ABSOLUTE, addr, stride}; }

static kernel_run run_on(uint32_t tile, kernel_id k) {
    kernel_run r;
    memset(&r, 0, sizeof r);  /* padding too, so loaded runs compare with memcmp */
    r.tile = tile;
    r.kernel = (uint8_t)k;
    return r;
}

static void add_step(package *p, low_step_kind kind, uint32_t first, uint32_t count, uint32_t iterations,
                     uint32_t label) {
    low_step s;
    memset(&s, 0, sizeof s);
    s.kind = (uint8_t)kind;
    s.first = first;
    s.count = count;
    s.iterations = iterations;
    s.label = label;
    vec_push(&p->arena, &p->prog.steps, s);
}

static void add_fill(package *p, uint32_t tile, uint32_t addr) {
    kernel_run r = run_on(tile, KERNEL_K_FILL);
    r.dt[0] = DT_F32;
    r.ptr[0] = at(addr, 0);
    r.n[0] = 64;  /* 256 bytes */
    r.f[0] = 0.5f;
    vec_push(&p->arena, &p->prog.runs, r);
}

/* Before the repeat: fills on tiles 5 and 6 and a copy on tile 3. */
static void add_prologue(package *p) {
    add_fill(p, 5, BASE + 0x400);
    kernel_run r = run_on(3, KERNEL_K_COPY);
    r.ptr[0] = at(BASE + 0xa00, 0);
    r.ptr[1] = at(INTERLEAVED + 0x1000, 0);
    r.n[0] = r.n[1] = r.n[2] = 1;
    r.n[3] = 64;
    vec_push(&p->arena, &p->prog.runs, r);
    add_fill(p, 6, BASE + 0x400);
}

/* Layer i of 4: C = x . W[i] (W stacked in the interleaved region, 1 KiB per
 * layer), then out = C + bias, all on tile 3. */
static void add_layer(package *p) {
    kernel_run g = run_on(3, KERNEL_K_GEMM);
    g.dt[0] = DT_F16, g.dt[1] = DT_F16, g.dt[2] = DT_F32, g.acc = DT_F32;
    g.n[0] = 1, g.n[1] = 16, g.n[2] = 16, g.n[3] = 32;  /* 16 x 32 times 32 x 16 */
    g.ptr[0] = at(BASE, 0);                              /* AMP-left x: two 16-column panels */
    g.stride[0][1] = 16 * 32;
    g.ptr[1] = at(INTERLEAVED, 1024);                    /* W[i]: rows of 16 f16 */
    g.stride[1][1] = 32;
    g.ptr[2] = at(BASE + 0x400, 0);                      /* C: rows of 16 f32 */
    g.stride[2][1] = 64;
    vec_push(&p->arena, &p->prog.runs, g);

    kernel_run e = run_on(3, KERNEL_K_EWISE);
    e.ew = KERNEL_EW_ADD;
    e.dt[0] = e.dt[1] = e.dt[2] = DT_F32;
    e.n[0] = 1, e.n[1] = 1, e.n[2] = 16, e.n[3] = 16;
    e.ptr[0] = at(BASE + 0x800, 0);
    e.ptr[1] = at(BASE + 0x400, 0);
    e.ptr[2] = at(INTERLEAVED + 0x1000, 0);              /* bias row, broadcast over rows */
    for (int i = 0; i < 3; i++) e.stride[i][3] = 4;
    e.stride[0][2] = e.stride[1][2] = 64;
    vec_push(&p->arena, &p->prog.runs, e);
}

static void add_frag(package *p, uint32_t src_tile, kernel_addr src, kernel_addr dst, uint32_t bytes, uint32_t dst0,
                     uint32_t ndst) {
    low_frag f;
    memset(&f, 0, sizeof f);
    f.src_tile = src_tile, f.src = src, f.dst = dst, f.bytes = bytes, f.dst0 = dst0, f.ndst = ndst;
    vec_push(&p->arena, &p->prog.frags, f);
}

/* Each layer multicasts rows 4i..4i+3 of its output to tiles 4, 5, 6 (the
 * address walks with the iteration) and sends a fixed block to tile 7. */
static void add_exchange(package *p) {
    static const uint32_t dsts[] = {4, 5, 6, 7};
    for (size_t i = 0; i < TS_COUNT(dsts); i++) vec_push(&p->arena, &p->prog.dst_tiles, dsts[i]);
    add_frag(p, 3, at(BASE + 0x800, 256), at(BASE, 256), 256, 0, 3);
    add_frag(p, 3, at(BASE + 0x900, 0), at(BASE, 0), 256, 3, 1);
}

/* After the repeat: softmax over the 16 x 16 f32 rows tile 4 received. */
static void add_epilogue(package *p) {
    kernel_run s = run_on(4, KERNEL_K_SOFTMAX);
    s.dt[0] = s.dt[1] = DT_F32;
    s.n[0] = 16, s.n[1] = 16;
    s.ptr[0] = at(BASE + 0x400, 0);
    s.ptr[1] = at(BASE, 0);
    s.stride[0][0] = s.stride[1][0] = 64;
    vec_push(&p->arena, &p->prog.runs, s);
}

static void add_segment(package *p, uint32_t tile, uint32_t addr, uint32_t bytes, uint64_t blob_off) {
    pkg_segment s;
    memset(&s, 0, sizeof s);
    s.tile = tile, s.addr = addr, s.bytes = bytes, s.blob_off = blob_off;
    vec_push(&p->arena, &p->segments, s);
}

/* Weights (4 KiB) and bias (64 bytes) on tile 3; a replica of the bias on
 * tile 4 shares its blob bytes. */
static void add_image(package *p) {
    p->blob_bytes = 4096 + 64;
    p->blob = arena_alloc(&p->arena, (size_t)p->blob_bytes);
    for (uint64_t i = 0; i < p->blob_bytes; i++) p->blob[i] = (uint8_t)(i * 37 + 11);
    add_segment(p, 3, INTERLEAVED, 4096, 0);
    add_segment(p, 3, INTERLEAVED + 0x1000, 64, 4096);
    add_segment(p, 4, INTERLEAVED + 0x1000, 64, 4096);
}

static void add_binding(package *p, const char *name, bool output, dtype t, layout l, uint32_t addr) {
    pkg_binding b;
    memset(&b, 0, sizeof b);
    b.name = arena_strdup(&p->arena, name);
    b.role = output ? PKG_OUTPUT : PKG_INPUT;
    b.step = -1;
    b.dtype = t;
    b.layout = l;
    b.addr = addr;
    vec_push(&p->arena, &p->bindings, b);
}

/* Input x [16, 32] f16 on tile 3; output y [32, 16] f32 in two row blocks
 * on tiles 4 and 5. "main" doubles as a binding name already in the table. */
static void add_bindings(package *p) {
    int64_t xd[] = {16, 32}, yd[] = {32, 16}, md[] = {16};
    layout x = layout_single(2, xd, 2);
    x.tile_base = 3;
    layout y = layout_single(2, yd, 4);
    layout_split(&y, 0, 2, 1);
    y.tile_base = 4;
    add_binding(p, "x", false, DT_F16, x, BASE);
    add_binding(p, "main", false, DT_F16, layout_single(1, md, 2), BASE + 0x1000);
    add_binding(p, "y", true, DT_F32, y, BASE + 0x400);
    add_binding(p, "y", true, DT_F32, y, BASE + 0x400); /* a probe of y after the repeat */
    p->bindings.v[3].role = PKG_PROBE;
    p->bindings.v[3].step = 4;
}

/*   step 0  compute 'main'   fill (5), copy (3), fill (6)
 *   step 1  repeat 'layer' x4
 *   step 2    compute         gemm (3), ewise add (3)
 *   step 3    exchange 'xchg' multicast 3 -> 4,5,6; 3 -> 7
 *   step 4  end
 *   step 5  compute           softmax (4)                                  */
static void build(package *p) {
    package_init(p);
    assert_int_equal(machine_preset("tiny", &p->machine), 0);
    p->fingerprint = machine_fingerprint(&p->machine);
    for (size_t i = 0; i < sizeof STRINGS; i++) vec_push(&p->arena, &p->prog.strings, STRINGS[i]);
    add_prologue(p);
    add_layer(p);
    add_epilogue(p);
    add_exchange(p);
    add_step(p, LOW_STEP_COMPUTE, 0, 3, 0, L_MAIN);
    add_step(p, LOW_STEP_REPEAT, 0, 0, 4, L_LAYER);
    add_step(p, LOW_STEP_COMPUTE, 3, 2, 0, 0);
    add_step(p, LOW_STEP_EXCHANGE, 0, 2, 0, L_XCHG);
    add_step(p, LOW_STEP_END, 0, 0, 0, 0);
    add_step(p, LOW_STEP_COMPUTE, 5, 1, 0, 0);
    low_buf b = {.bytes = 1024, .label = L_LAYER, .first = 2, .last = 3};
    vec_push(&p->arena, &p->prog.bufs, b);
    add_image(p);
    add_bindings(p);
    p->meta = arena_strdup(&p->arena, "{\"model\": \"test\", \"cycles\": 1234}");
    /* What placement does: a placed run holds only what its kernel reads,
     * and the exchanges become every tile's tables. */
    for (int32_t i = 0; i < p->prog.runs.n; i++) kernel_run_canonical(&p->prog.runs.v[i]);
    diag d = {0};
    if (place_package_tables(p, &d)) fail_msg("%s", d.text);
}

/* ---- helpers ------------------------------------------------------------ */

/* Parses from an exactly-sized heap copy, so a sanitizer sees any overread. */
static int parse_exact(const uint8_t *img, size_t len, package *out, diag *d) {
    uint8_t *copy = malloc(len ? len : 1);
    if (len) memcpy(copy, img, len);
    int rc = package_parse(copy, len, PATH, out, d);
    free(copy);
    return rc;
}

/* A refused image leaves the package empty and says why, naming the file. */
/* img refused with a message containing want. Tests damage a section to
 * reach a check behind the checksums, so those are fixed up first, except
 * in expect_damaged, which is about the checksums. */
static void refused(const uint8_t *img, size_t len, const char *want, bool fix) {
    package q;
    diag d = {0};
    uint8_t *copy = malloc(len + 1);
    memcpy(copy, img, len);
    if (fix) package_fix_checksums(copy, len);
    int rc = parse_exact(copy, len, &q, &d);
    free(copy);
    if (rc != -1 || !d.set || strncmp(d.text, PATH, strlen(PATH)) != 0 || (want && !strstr(d.text, want)))
        fail_msg("length %zu: want an error with '%s', got rc %d: %s", len, want ? want : "", rc, d.text);
    assert_null(q.arena.head);
    assert_int_equal(q.prog.runs.n, 0);
    package_free(&q);
}

static void expect_refused(const uint8_t *img, size_t len, const char *want) { refused(img, len, want, true); }
static void expect_damaged(const uint8_t *img, size_t len, const char *want) { refused(img, len, want, false); }

typedef void (*mutator)(package *p);

/* Damages a fresh package in memory; both the reader and the writer must
 * refuse it with the same message. */
static void expect_bad(mutator damage, const char *want) {
    package p;
    build(&p);
    damage(&p);
    size_t len;
    uint8_t *img = package_image(&p, &len, "test", NULL);
    expect_refused(img, len, want);
    diag d = {0};
    char path[64];
    snprintf(path, sizeof path, "/tmp/tessel-pkg-bad-%ld.tpk", (long)getpid());
    assert_int_equal(package_save(&p, path, &d), -1);
    assert_non_null(strstr(d.text, want));
    assert_int_not_equal(access(path, F_OK), 0);  /* nothing written */
    free(img);
    package_free(&p);
}

/* Byte offset of section `tag`'s header in an image. */
static size_t section_at(const uint8_t *img, size_t len, const char *tag) {
    size_t at = 24;
    while (at + 16 <= len) {
        uint64_t bytes = 0;
        for (int i = 0; i < 8; i++) bytes |= (uint64_t)img[at + 8 + i] << (8 * i);
        if (memcmp(img + at, tag, 4) == 0) return at;
        at += 16 + (size_t)bytes;
    }
    fail_msg("no section %s", tag);
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint8_t *good_image(size_t *len) {
    package p;
    build(&p);
    uint8_t *img = package_image(&p, len, "test", NULL);
    package_free(&p);
    return img;
}

/* ---- round trip --------------------------------------------------------- */

#define SAME_ARRAY(a, b)                                                         \
    do {                                                                         \
        assert_int_equal((a).n, (b).n);                                          \
        if ((a).n) assert_memory_equal((a).v, (b).v, (size_t)(a).n * sizeof *(a).v); \
    } while (0)

static void expect_equal(const package *a, const package *b) {
    assert_true(machine_equal(&a->machine, &b->machine));
    assert_true(a->fingerprint == b->fingerprint);
    SAME_ARRAY(a->prog.steps, b->prog.steps);
    SAME_ARRAY(a->prog.runs, b->prog.runs);
    assert_int_equal(b->prog.frags.n + b->prog.dst_tiles.n, 0);
    uint32_t tiles = a->machine.tiles;
    assert_memory_equal(a->tables.at, b->tables.at, sizeof(uint64_t) * (tiles + 1));
    assert_memory_equal(a->tables.bytes, b->tables.bytes, (size_t)a->tables.at[tiles]);
    assert_int_equal(a->tables.ngroups, b->tables.ngroups);
    assert_memory_equal(a->tables.group_at, b->tables.group_at, sizeof(uint32_t) * (a->tables.ngroups + 1));
    assert_memory_equal(a->tables.group_tiles, b->tables.group_tiles, sizeof(uint32_t) * a->tables.group_at[a->tables.ngroups]);
    SAME_ARRAY(a->prog.bufs, b->prog.bufs);
    SAME_ARRAY(a->segments, b->segments);
    /* b's string table may hold binding names after a's labels. */
    assert_true(b->prog.strings.n >= a->prog.strings.n);
    assert_memory_equal(a->prog.strings.v, b->prog.strings.v, (size_t)a->prog.strings.n);
    assert_true(a->blob_bytes == b->blob_bytes);
    assert_memory_equal(a->blob, b->blob, (size_t)a->blob_bytes);
    assert_int_equal(a->bindings.n, b->bindings.n);
    for (int32_t i = 0; i < a->bindings.n; i++) {
        const pkg_binding *x = &a->bindings.v[i], *y = &b->bindings.v[i];
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->role, y->role);
        assert_int_equal(x->step, y->step);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->scale, y->scale);
        assert_int_equal(x->addr, y->addr);
        assert_true(layout_equal(&x->layout, &y->layout));
        assert_memory_equal(&x->layout, &y->layout, sizeof x->layout);
    }
    assert_string_equal(a->meta, b->meta);
}

static void test_round_trip(void **state) {
    (void)state;
    package p, q, r;
    build(&p);
    size_t len1, len2, len3;
    uint8_t *img1 = package_image(&p, &len1, "test", NULL);
    diag d = {0};
    if (parse_exact(img1, len1, &q, &d) != 0) fail_msg("%s", d.text);
    expect_equal(&p, &q);
    /* Binding names: "main" reused the label's offset, x and y were appended. */
    assert_true(q.bindings.v[1].name == q.prog.strings.v + L_MAIN);
    assert_int_equal(q.prog.strings.n, (int32_t)sizeof STRINGS + 4);
    uint8_t *img2 = package_image(&q, &len2, "test", NULL);
    assert_int_equal(len1, len2);
    assert_memory_equal(img1, img2, len1);

    /* Through a file, and once more: still the same bytes. */
    char path[64];
    snprintf(path, sizeof path, "/tmp/tessel-pkg-%ld.tpk", (long)getpid());
    if (package_save(&q, path, &d) != 0) fail_msg("%s", d.text);
    if (package_load(path, &r, &d) != 0) fail_msg("%s", d.text);
    expect_equal(&q, &r);
    uint8_t *img3 = package_image(&r, &len3, "test", NULL);
    assert_int_equal(len1, len3);
    assert_memory_equal(img1, img3, len1);
    unlink(path);

    /* Seeds for fuzz/corpus/pkg, written on request. */
    const char *corpus = getenv("TESSEL_PKG_CORPUS");
    if (corpus) {
        char *f = path_join(corpus, "ok_tiny.tpk");
        assert_int_equal(package_save(&p, f, &d), 0);
        free(f);
    }
    free(img1);
    free(img2);
    free(img3);
    package_free(&p);
    package_free(&q);
    package_free(&r);
}

/* Buffer tiles: a package built without them holds every buffer on every
 * tile; set, they round-trip, and a bit past the machine's tiles is refused. */
static void test_buffer_tiles(void **state) {
    (void)state;
    package p, q;
    build(&p);
    size_t len;
    uint8_t *img = package_image(&p, &len, "test", NULL);
    diag d = {0};
    assert_int_equal(package_parse(img, len, "t.tpk", &q, &d), 0);
    for (uint32_t t = 0; t < q.machine.tiles; t++) assert_true(package_buf_on_tile(&q, 0, t));
    package_free(&q);
    free(img);
    uint64_t bits = 1ull << 3 | 1ull << 5;
    p.buf_tiles = &bits;
    img = package_image(&p, &len, "test", NULL);
    assert_int_equal(package_parse(img, len, "t.tpk", &q, &d), 0);
    for (uint32_t t = 0; t < q.machine.tiles; t++) assert_int_equal(package_buf_on_tile(&q, 0, t), t == 3 || t == 5);
    size_t len2;
    uint8_t *again = package_image(&q, &len2, "test", NULL);
    assert_int_equal(len2, len);
    assert_memory_equal(again, img, len);
    free(again);
    package_free(&q);
    free(img);
    bits |= 1ull << 16; /* tiny has 16 tiles */
    img = package_image(&p, &len, "test", NULL);
    expect_refused(img, len, "section BTIL: buffer 0 names a tile past the machine's 16");
    free(img);
    p.buf_tiles = NULL;
    package_free(&p);
}

/* The record sizes docs/package.md gives, pinned: header 24, section
 * headers 16; steps and runs a count and variable records (a step 5 bytes
 * and its count or iterations; a run its tile and kernel, op or acc, the
 * kernel's box axes and floats, 10 bytes per operand it uses, 4 per stride
 * its kernel reads); groups a count and their tile lists; the tables a
 * size per tile and the rows docs/package.md gives; buffer 24, its tile
 * bitmap 8 bytes per 64 tiles, segment 20, binding 278 bytes. */
static void test_documented_sizes(void **state) {
    (void)state;
    package p;
    build(&p);
    size_t len;
    uint8_t *img = package_image(&p, &len, "test", NULL);
    char *json = machine_to_json(&p.machine);
    size_t steps = 4 + 4 * 9 + 2 * 5;              /* compute, repeat, compute, compute; exchange, end */
    size_t runs = 4 + (5 + 4 + 4 + 10)              /* fill: n[0], f[0], one operand */
                  + (5 + 16 + 2 * 10 + 6 * 4)       /* copy: n[0..4), two operands, strides [0..1][0..3) */
                  + (5 + 4 + 4 + 10)                /* fill */
                  + (5 + 1 + 16 + 3 * 10 + 7 * 4)   /* gemm: acc, n[0..4), three operands, strides [0..3][0..2) and B's [1][2] */
                  + (5 + 2 + 16 + 4 + 3 * 10 + 12 * 4) /* ewise add: op, acc, n, f[0], three operands, all strides */
                  + (5 + 8 + 4 + 2 * 10 + 3 * 4);   /* softmax: n[0..2), f[0], two operands, stride[0][0..2), stride[1][0] */
    size_t groups = 4 + 4 + 3 * 4;                 /* one group: tiles 4, 5, 6 */
    /* Tables: a u32 size per tile, then tile 3 sends two rows (8 bytes on
     * tiny), the multicast's source patched; tiles 4, 5, 6 receive it through
     * one 4-byte row, patched; tile 7 the other through one row. */
    size_t tables = 16 * 4 + (8 + 2 * 8 + 8) + 3 * (8 + 4 + 8) + (8 + 4);
    size_t want = 24 + 12 * 16 + strlen(json) + (sizeof STRINGS + 4) + steps + runs + groups + tables + 1 * 24 + 1 * 8 +
                  3 * 20 + (size_t)p.blob_bytes + 4 * 278 + strlen(p.meta);
    assert_int_equal(len, want);
    assert_memory_equal(img, "TESSPKG\0\17\0\0\0\14\0\0\0", 16);
    assert_memory_equal(img + 24, "MACH", 4);
    uint32_t crc = (uint32_t)img[28] | (uint32_t)img[29] << 8 | (uint32_t)img[30] << 16 | (uint32_t)img[31] << 24;
    assert_int_equal(crc, util_crc32c(img + 40, strlen(json))); /* the payload's CRC-32C */
    assert_memory_equal(img + 40, json, strlen(json));
    free(json);
    free(img);
    package_free(&p);
}

/* An empty program on a machine is a valid package too. */
static void test_empty(void **state) {
    (void)state;
    package p, q;
    package_init(&p);
    machine_preset("c600", &p.machine);
    size_t len;
    uint8_t *img = package_image(&p, &len, "test", NULL);
    diag d = {0};
    if (parse_exact(img, len, &q, &d) != 0) fail_msg("%s", d.text);
    assert_int_equal(q.machine.tiles, 1472);
    assert_string_equal(q.meta, "");
    assert_int_equal(q.prog.steps.n + q.prog.runs.n + q.bindings.n + q.segments.n, 0);
    const char *corpus = getenv("TESSEL_PKG_CORPUS");
    if (corpus) {
        char *f = path_join(corpus, "ok_empty_c600.tpk");
        assert_int_equal(package_save(&p, f, &d), 0);
        free(f);
    }
    free(img);
    package_free(&p);
    package_free(&q);
}

static void test_load_errors(void **state) {
    (void)state;
    package q;
    diag d = {0};
    assert_int_equal(package_load("/nonexistent/x.tpk", &q, &d), -1);
    assert_non_null(strstr(d.text, "/nonexistent/x.tpk: error: cannot open"));
    package_free(&q);

    package p;
    build(&p);
    d = (diag){0};
    assert_int_equal(package_save(&p, "/nonexistent/x.tpk", &d), -1);
    assert_non_null(strstr(d.text, "/nonexistent/x.tpk: error: cannot create"));
    /* The writer checks what package_image would assert on. */
    p.prog.strings.v[p.prog.strings.n - 1] = 'x';
    d = (diag){0};
    assert_int_equal(package_save(&p, "/tmp/never-written.tpk", &d), -1);
    assert_string_equal(d.text, "/tmp/never-written.tpk: error: the string table does not end with a NUL byte\n");
    package_free(&p);
}

/* ---- damaged bytes ------------------------------------------------------ */

static void test_truncation(void **state) {
    (void)state;
    size_t len;
    uint8_t *img = good_image(&len);
    const char *corpus = getenv("TESSEL_PKG_CORPUS");
    if (corpus) {
        char *f = path_join(corpus, "bad_truncated.tpk");
        FILE *out = fopen(f, "wb");
        assert_non_null(out);
        assert_int_equal(fwrite(img, 1, len / 2, out), len / 2);
        fclose(out);
        free(f);
    }
    for (size_t n = 0; n < len; n++) expect_refused(img, n, NULL);
    expect_refused(img, 10, "truncated header: the file has 10 bytes");
    expect_refused(img, 24, "truncated: section 0 (of 12) has its header at byte 24, but only 0 bytes remain");
    expect_refused(img, 30, "truncated: section 0 (of 12) has its header at byte 24, but only 6 bytes remain");
    expect_refused(img, len - 1, "truncated: section META");
    free(img);
}

static void test_header(void **state) {
    (void)state;
    size_t len;
    uint8_t *img = good_image(&len);

    img[0] = 'X';
    expect_refused(img, len, "not a tessel package");
    img[0] = 'T';

    put_u32(img + 8, 5);
    expect_refused(img, len, "package format version 5, but this tessel reads only version 15");
    put_u32(img + 8, PACKAGE_VERSION);

    img[16] ^= 1;
    expect_refused(img, len, "the header's machine fingerprint");
    img[16] ^= 1;

    put_u32(img + 12, 11);  /* one section fewer */
    expect_refused(img, len, "missing section META");
    put_u32(img + 12, 13);
    expect_refused(img, len, "truncated: section 12 (of 13)");
    put_u32(img + 12, 12);

    uint8_t *longer = malloc(len + 1);
    memcpy(longer, img, len);
    longer[len] = 0;
    expect_refused(longer, len + 1, "1 unexpected byte after the last section, at byte");
    free(longer);
    free(img);
}

static void test_sections(void **state) {
    (void)state;
    size_t len;
    uint8_t *img = good_image(&len);
    size_t mach = section_at(img, len, "MACH"), strs = section_at(img, len, "STRS");

    put_u64(img + mach + 8, (uint64_t)1 << 40);
    expect_refused(img, len, "truncated: section MACH at byte 24 holds 1099511627776 bytes, but only");
    free(img);
    img = good_image(&len);

    put_u64(img + mach + 8, strs - mach - 16 - 1);  /* one byte short: STRS's header is misread */
    expect_refused(img, len, "unknown section tag");
    put_u64(img + mach + 8, strs - mach - 16);

    memcpy(img + strs, "MACH", 4);
    expect_refused(img, len, "duplicate section MACH");
    memcpy(img + strs, "RUNS", 4);
    expect_refused(img, len, "section STEP at byte");  /* STEP after RUNS: out of order */
    memcpy(img + strs, "STRS", 4);

    /* Every section's checksum is verified before anything in it is read:
     * one flipped bit anywhere is refused, naming the section. */
    img[strs + 4] ^= 1;
    expect_damaged(img, len, "section STRS at byte");
    img[strs + 4] ^= 1;
    for (size_t at = 24; at + 16 <= len;) {
        uint64_t bytes = 0;
        for (int k = 7; k >= 0; k--) bytes = bytes << 8 | img[at + 8 + k];
        if (bytes) {
            size_t mid = at + 16 + (size_t)bytes / 2;
            img[mid] ^= 0x10;
            expect_damaged(img, len, "is damaged: its checksum is 0x");
            img[mid] ^= 0x10;
        }
        at += 16 + (size_t)bytes;
    }

    /* The machine's JSON: a syntax error points into the section; a changed
     * value no longer matches the header's fingerprint. */
    uint8_t *json = img + mach + 16;
    char *tiles = strstr((char *)json, "\"tiles\": 16");
    assert_non_null(tiles);
    tiles[10] = '7';
    expect_refused(img, len, "does not match the machine in the package");
    tiles[10] = '6';
    json[0] = '[';
    expect_refused(img, len, PATH " (machine section):");
    json[0] = '{';

    size_t meta = section_at(img, len, "META");
    img[meta + 16 + 3] = 0;
    expect_refused(img, len, "holds a NUL byte at offset 3");
    free(img);
}

/* Removes the last byte of a section's payload (and from its length). */
static uint8_t *shorten_section(const uint8_t *img, size_t len, const char *tag, size_t *out_len) {
    size_t s = section_at(img, len, tag);
    uint64_t bytes = 0;
    for (int i = 0; i < 8; i++) bytes |= (uint64_t)img[s + 8 + i] << (8 * i);
    assert_true(bytes > 0);
    uint8_t *out = malloc(len - 1);
    size_t cut = s + 16 + (size_t)bytes - 1;
    memcpy(out, img, cut);
    memcpy(out + cut, img + cut + 1, len - cut - 1);
    put_u64(out + s + 8, bytes - 1);
    *out_len = len - 1;
    return out;
}

static void test_records(void **state) {
    (void)state;
    size_t len, short_len;
    uint8_t *img = good_image(&len);

    uint8_t *cut = shorten_section(img, len, "STEP", &short_len);
    expect_refused(cut, short_len, "section STEP: step 5 (compute): the section ends inside field count");
    free(cut);
    cut = shorten_section(img, len, "RUNS", &short_len);
    expect_refused(cut, short_len, "section RUNS: run 5 (softmax on tile 4): the section ends inside field stride[1][0]");
    free(cut);

    /* Step and run records, field by field: a count, then kind u8, label u32, ... */
    size_t step = section_at(img, len, "STEP") + 16, runs = section_at(img, len, "RUNS") + 16;
    put_u32(img + step, 7);
    expect_refused(img, len, "section STEP: step 6 (?): the section ends inside field kind");
    put_u32(img + step, 5);
    expect_refused(img, len, "section STEP: 9 bytes after its 5 steps");
    put_u32(img + step, 6);
    img[step + 4 + 9] = 9;  /* the second step's kind */
    expect_refused(img, len, "section STEP: step 1 (kind 9): unknown step kind");
    img[step + 4 + 9] = LOW_STEP_REPEAT;
    img[runs + 4 + 4] = 99;  /* the first run's kernel */
    expect_refused(img, len, "section RUNS: run 0 (kernel 99 on tile 5): unknown kernel");
    img[runs + 4 + 4] = KERNEL_K_FILL;
    put_u32(img + runs + 4 + 5, 0);  /* its n[0] */
    expect_refused(img, len, "section RUNS: run 0 (fill on tile 5): empty run");
    put_u32(img + runs + 4 + 5, 64);
    put_u32(img + runs + 4 + 13 + 2, 0x6bf80);  /* its address: 256 bytes from there cross the end */
    expect_refused(img, len, "section RUNS: run 0 (fill on tile 5): operand 0 spans 0x6bf80..0x6c080, past the end of tile memory 0x6c000");
    free(img);
    img = good_image(&len);
    cut = shorten_section(img, len, "STRS", &short_len);
    expect_refused(cut, short_len, "the string table (section STRS) does not end with a NUL byte");
    free(cut);

    /* Binding record: name u32, role u8, dtype u32, ... */
    size_t bind = section_at(img, len, "BIND") + 16;
    put_u32(img + bind, 9999);
    expect_refused(img, len, "binding 0: field name = 9999 is outside the string table (21 bytes)");
    put_u32(img + bind, 0);
    expect_refused(img, len, "binding 0 has no name");
    free(img);
    img = good_image(&len);
    img[bind + 4] = 3;
    expect_refused(img, len, "binding 0: field role = 3 is out of range (at most 2)");
    img[bind + 4] = 0;
    put_u32(img + bind + 5, 200);
    expect_refused(img, len, "binding 0: field dtype = 200 is out of range (at most 6)");
    put_u32(img + bind + 5, DT_F16);
    /* layout.enc follows rank and elem_bytes */
    put_u32(img + bind + 10 + 8, 7);
    expect_refused(img, len, "binding 0: field layout.enc = 7 is out of range (at most 4)");
    free(img);
}

/* ---- damaged programs --------------------------------------------------- */

static kernel_run *run(package *p, int i) { return &p->prog.runs.v[i]; }

static void gemm_c_past_end(package *p) { run(p, 3)->ptr[2].off = 0x6bf00; }
static void gemm_w_walks_out(package *p) { run(p, 3)->ptr[1].iter_stride = 0x6000; }
static void gemm_x_walks_below(package *p) { run(p, 3)->ptr[0].iter_stride = -0x8000; }
static void fill_stride_outside(package *p) { run(p, 0)->ptr[0].iter_stride = 4; }
static void run_tile_16(package *p) { run(p, 5)->tile = 16; }
static void run_kernel_99(package *p) { run(p, 5)->kernel = 99; }
static void run_bad_dtype(package *p) { run(p, 3)->dt[1] = DT_I32; }
static void runs_not_grouped(package *p) { run(p, 2)->tile = 5; }
/* The exchange step's tables, edited in place: tile's block for phase 0. */
static uint8_t *block0(package *p, uint32_t tile, pkg_xt_header *h) {
    assert_true(p->tables.at[tile + 1] > p->tables.at[tile]);
    uint8_t *b = p->tables.bytes + p->tables.at[tile];
    pkg_xt_get_header(b, h);
    return b;
}

static void edit_send(package *p, uint32_t tile, uint32_t k, int field, uint32_t v) {
    kernel_xt_format f;
    kernel_xt_format_init(&f, &p->machine, p->tables.ngroups);
    pkg_xt_header h;
    uint8_t *row = block0(p, tile, &h) + KERNEL_XT_HEADER_BYTES + k * f.send_bytes;
    pkg_xt_send s;
    assert_true(pkg_xt_get_send(&f, row, &s));
    uint32_t *at[] = {&s.addr, &s.bytes, &s.slot, &s.dst};
    *at[field] = v;
    pkg_xt_put_send(&f, row, &s);
}

static void edit_recv(package *p, uint32_t tile, uint32_t k, int field, uint32_t v) {
    kernel_xt_format f;
    kernel_xt_format_init(&f, &p->machine, p->tables.ngroups);
    pkg_xt_header h;
    uint8_t *b = block0(p, tile, &h);
    uint8_t *row = b + KERNEL_XT_HEADER_BYTES + h.nsend * f.send_bytes + k * f.recv_bytes;
    pkg_xt_recv r;
    assert_true(pkg_xt_get_recv(&f, row, &r));
    uint32_t *at[] = {&r.addr, &r.count};
    *at[field] = v;
    pkg_xt_put_recv(&f, row, &r);
}

/* Tile 3 sends row 0 (the multicast to group 0: tiles 4, 5, 6) and row 1 (to tile 7), both in slot 0. */
static void send_dst_bad(package *p) { edit_send(p, 3, 1, 3, 18); }
static void send_slot_big(package *p) { edit_send(p, 3, 1, 2, 2); }
static void send_src_past(package *p) { edit_send(p, 3, 1, 0, 0x6bf80); }
static void send_to_unlisted(package *p) { edit_send(p, 3, 1, 3, 8); }
static void slots_tie(package *p) { edit_send(p, 3, 1, 3, 4); }
static void send_bits(package *p) {
    pkg_xt_header h;
    block0(p, 3, &h)[KERNEL_XT_HEADER_BYTES + 8 + 7] = 0x80;  /* the top bit of tile 3's second send row */
}
static void recv_takes_more(package *p) { edit_recv(p, 7, 0, 1, 2); }
static void recv_walks_out(package *p) {
    pkg_xt_header h;
    uint8_t *b = block0(p, 4, &h);
    pkg_xt_patch pr;
    pkg_xt_get_patch(b + KERNEL_XT_HEADER_BYTES + 4, &pr);  /* tile 4: one receive row, then its patch */
    assert_int_equal(pr.row, PKG_XT_RECV_ROW);
    pr.stride = 0xb000;
    pkg_xt_put_patch(b + KERNEL_XT_HEADER_BYTES + 4, &pr);
}
static void phase_past(package *p) {
    pkg_xt_header h;
    uint8_t *b = block0(p, 7, &h);
    h.phase = 3;
    pkg_xt_put_header(b, &h);
}
static void group_tile_16(package *p) { p->tables.group_tiles[2] = 16; }
static void group_unsorted(package *p) { p->tables.group_tiles[1] = 4; }
static void step_range_past(package *p) { p->prog.steps.v[5].count = 2; }
static void run_unclaimed(package *p) { p->prog.steps.v[5].count = 0; }
static void repeat_no_end(package *p) {
    p->prog.steps.v[4].kind = LOW_STEP_EXCHANGE;
    p->prog.steps.v[4].first = 1;  /* the second exchange phase, as a loaded step has it */
}
static void end_no_repeat(package *p) { p->prog.steps.v[1].kind = LOW_STEP_END; }
static void repeat_zero(package *p) { p->prog.steps.v[1].iterations = 0; }
static void step_kind_9(package *p) { p->prog.steps.v[2].kind = 9; }
static void step_label(package *p) { p->prog.steps.v[0].label = 999; }
static void buf_label(package *p) { p->prog.bufs.v[0].label = 999; }
static void segments_overlap(package *p) { p->segments.v[1].addr = INTERLEAVED + 0xff0; }
static void segment_past_loader(package *p) { p->segments.v[2].addr = 0x6bb80; }
static void segment_past_blob(package *p) { p->segments.v[2].blob_off = 4097; }
static void segment_tile(package *p) { p->segments.v[0].tile = 99; }
static void names_twice(package *p) { p->bindings.v[1].name = "x"; }
static void input_after_output(package *p) {
    pkg_binding t = p->bindings.v[1];
    p->bindings.v[1] = p->bindings.v[2];
    p->bindings.v[2] = t;
}
static void probe_without_step(package *p) { p->bindings.v[3].step = -1; }
static void probe_past_program(package *p) { p->bindings.v[3].step = 6; }
static void output_with_step(package *p) { p->bindings.v[2].step = 0; }
static void probe_before_output(package *p) {
    p->bindings.v[1].role = PKG_PROBE;
    p->bindings.v[1].step = 0;
}
static void binding_i32(package *p) { p->bindings.v[0].dtype = DT_I32; } /* token ids: 4-byte elements */
static void binding_scale(package *p) { p->bindings.v[0].scale = 3; }
static void binding_f8_scale(package *p) {
    p->bindings.v[1].dtype = DT_F8E4M3;
    p->bindings.v[1].layout.elem_bytes = 1;
    p->bindings.v[1].scale = 20;
}
static void binding_elem(package *p) { p->bindings.v[0].layout.elem_bytes = 4; }
static void binding_tiles(package *p) { p->bindings.v[2].layout.tile_base = 15; }
static void binding_rank(package *p) { p->bindings.v[0].layout.rank = 7; }
static void binding_past_end(package *p) { p->bindings.v[2].addr = 0x6bd00; }
static void machine_bad(package *p) { p->machine.tile_memory_end = 0x4c000; }

static const struct {
    mutator damage;
    const char *want;
} BAD[] = {
    {gemm_c_past_end, "run 3 (gemm on tile 3): operand 2 spans 0x6bf00..0x6c300, past the end of tile memory 0x6c000"},
    {gemm_w_walks_out,
     "run 3 (gemm on tile 3): operand 1 at iteration 3 (of 4) spans 0x6e000..0x6e400, past the end of tile memory"},
    {gemm_x_walks_below, "operand 0 at iteration 3 (of 4) starts at 0x34000, below the start of tile memory 0x4c000"},
    {fill_stride_outside, "run 0 (fill on tile 5): operand 0 has an iteration stride of 4 bytes outside any repeat"},
    {run_tile_16, "run 5 (softmax on tile 16): tile 16 is outside the machine's 16 tiles"},
    {run_kernel_99, "run 5 (kernel 99 on tile 4): unknown kernel"},
    {run_bad_dtype, "run 3 (gemm on tile 3): bad operand dtype"},
    {runs_not_grouped, "run 2 (fill on tile 5): tile 5 already ran run 0 in step 0, not just before"},
    {send_dst_bad, "section XTAB: tile 3, phase 0 (step 3 'xchg'): send row 1: its destination is neither a tile nor a group"},
    {send_slot_big, "section XTAB: tile 3, phase 0 (step 3 'xchg'): send row 1: its slot is not below the phase's number of send rows"},
    {send_src_past, "section XTAB: tile 3, phase 0 (step 3 'xchg'), send row 1: its source spans 0x6bf80..0x6c080, past the end of tile memory 0x6c000"},
    {send_to_unlisted, "section XTAB: tile 8, phase 0 (step 3 'xchg'): tile 3 sends it 256 bytes from 0x4c900 (slot 0), but its table has no receive rows in the phase"},
    {slots_tie, "section XTAB: tile 4, phase 0 (step 3 'xchg'): two fragments sent to it share slot 0"},
    {send_bits, "section XTAB: tile 3, phase 0 (step 3 'xchg'): send row 1: bits past its fields are set"},
    {recv_takes_more, "section XTAB: tile 7, phase 0 (step 3 'xchg'): receive row 0 (0x4c000, 2 fragments): its rows take more than the 1 fragments sent to the tile"},
    {recv_walks_out, "section XTAB: tile 4, phase 0 (step 3 'xchg'), receive row 0: the fragment at iteration 3 (of 4) spans 0x6d000..0x6d100, past the end of tile memory 0x6c000 (fragment 0 it receives, 256 bytes from tile 3)"},
    {phase_past, "section XTAB: tile 7, phase 3: the program has fewer exchange phases"},
    {group_tile_16, "section GRPS: group 0 names tile 16, outside the machine's 16 tiles"},
    {group_unsorted, "section GRPS: group 0 lists tile 4 after tile 4 (a group's tiles ascend, each once)"},
    {step_range_past, "step 5 (compute): runs 5..7 run past the 6 runs of the package"},
    {run_unclaimed, "run 5 (softmax on tile 4): no compute step runs it"},
    {repeat_no_end, "step 1 (repeat 'layer'): this REPEAT has no matching END"},
    {end_no_repeat, "step 1 (end 'layer'): an END with no open REPEAT"},
    {repeat_zero, "step 1 (repeat 'layer'): a repeat needs at least 1 iteration"},
    {step_kind_9, "step 2 (kind 9): unknown step kind"},
    {step_label, "step 0 (compute): label offset 999 is outside the string table"},
    {buf_label, "buffer 0: label offset 999 is outside the string table"},
    {segments_overlap, "segment 1 (tile 3, 0x5cff0..0x5d030) overlaps segment 0 (0x5c000..0x5d000)"},
    {segment_past_loader, "segment 2 (tile 4, 0x6bb80, 64 bytes): it spans 0x6bb80..0x6bbc0, past the loader limit 0x6bbb0"},
    {segment_past_blob, "segment 2 (tile 4, 0x5d000, 64 bytes): blob bytes 4097..4161 run past the 4160-byte blob"},
    {segment_tile, "segment 0 (tile 99, 0x5c000, 4096 bytes): tile 99 is outside the machine's 16 tiles"},
    {names_twice, "binding 1: the name 'x' is also binding 0's"},
    {input_after_output, "binding 2 ('main'): an input after an output (inputs, then outputs, then probes)"},
    {probe_without_step, "binding 3 ('y'): step -1 is not a step of the program"},
    {probe_past_program, "binding 3 ('y'): step 6 is not a step of the program"},
    {output_with_step, "binding 2 ('y'): step 0 is not -1 (only probes name a step)"},
    {probe_before_output, "binding 2 ('y'): an output after a probe (inputs, then outputs, then probes)"},
    {binding_i32, "binding 0 ('x'): layout element size 2 bytes is not the i32's 4"},
    {binding_scale, "binding 0 ('x'): scale 3 is not 0 (only 8-bit types are scaled)"},
    {binding_f8_scale, "binding 1 ('main'): scale 20 is not in -16..15"},
    {binding_elem, "binding 0 ('x'): layout element size 4 bytes is not the f16's 2"},
    {binding_tiles, "binding 2 ('y'): layout: shard (1, 0) lands on tile 16, outside [0, 16)"},
    {binding_rank, "binding 0 ('x'): layout: rank 7 is outside [1, 6]"},
    {binding_past_end, "binding 2 ('y'): its buffer spans 0x6bd00..0x6c100, past the end of tile memory 0x6c000"},
    {machine_bad, "tile_memory_end (0x4c000) must be above tile_memory_base"},
};

static void test_bad_programs(void **state) {
    (void)state;
    for (size_t i = 0; i < TS_COUNT(BAD); i++) {
        print_message("case %zu: %s\n", i, BAD[i].want);
        expect_bad(BAD[i].damage, BAD[i].want);
    }
}

/* Damage only a package in memory can have (the file has no field for it):
 * the writer refuses it. */
static void copy_unplaced(package *p) { run(p, 1)->ptr[1].buf = 2; }
static void step_claims_twice(package *p) { p->prog.steps.v[5].first = 4; }
static void exchange_phase_wrong(package *p) { p->prog.steps.v[3].first = 1; }
static void fragments_left(package *p) {
    low_frag f = {.src_tile = 3, .src = at(BASE, 0), .dst = at(BASE, 0), .bytes = 4, .dst0 = 0, .ndst = 1};
    vec_push(&p->arena, &p->prog.frags, f);
}

static const struct {
    mutator damage;
    const char *want;
} BAD_IN_MEMORY[] = {
    {copy_unplaced, "section RUNS: run 1 (copy on tile 3): operand 1 is in buffer 2, not at an absolute address"},
    {step_claims_twice, "section STEP: step 5 (compute): its runs start at 4, not at 5 where the previous step's end"},
    {exchange_phase_wrong, "section STEP: step 3 (exchange 'xchg'): phase 1 with count 0; as exchange step 0 it is phase 0 with count 0"},
    {fragments_left, "the program still holds 1 exchange fragments: a package's exchanges are its encoded tables"},
};

static void test_bad_in_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < TS_COUNT(BAD_IN_MEMORY); i++) {
        package p;
        build(&p);
        BAD_IN_MEMORY[i].damage(&p);
        diag d = {0};
        assert_int_equal(package_save(&p, "/tmp/never-written.tpk", &d), -1);
        if (!strstr(d.text, BAD_IN_MEMORY[i].want)) fail_msg("want '%s', got %s", BAD_IN_MEMORY[i].want, d.text);
        package_free(&p);
    }
}

/* An image larger than the host's memory fails with a status and a
 * message and does not abort (the blob's length claims far more than it
 * holds: the image is refused before a byte of it is read). package_save
 * builds no image: it streams (test_save_streams_the_image). */
static void test_image_too_large(void **state) {
    (void)state;
    package p;
    build(&p);
    uint64_t held = p.blob_bytes;
    p.blob_bytes = (uint64_t)1 << 50;
    diag d = {0};
    size_t len = 0;
    assert_null(package_image(&p, &len, "big.tpk", &d));
    assert_non_null(strstr(d.text, "big.tpk: error: the package image needs "));
    assert_non_null(strstr(d.text, "bytes of host memory, more than this host has"));
    p.blob_bytes = held;
    package_free(&p);
}

/* package_save streams the sections to the file, never holding the whole
 * image (a SigLIP package is 421 MiB): the file holds package_image's bytes. */
static void test_save_streams_the_image(void **state) {
    (void)state;
    package p;
    build(&p);
    diag d = {0};
    size_t len = 0;
    uint8_t *img = package_image(&p, &len, "x.tpk", &d);
    assert_non_null(img);
    char path[64];
    snprintf(path, sizeof path, "/tmp/tessel-pkg-stream-%ld.tpk", (long)getpid());
    assert_int_equal(package_save(&p, path, &d), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *back = malloc(len + 1);
    size_t got = fread(back, 1, len + 1, f);
    fclose(f);
    unlink(path);
    assert_int_equal(got, len);
    assert_memory_equal(back, img, len);
    free(back);
    free(img);
    package_free(&p);
}

/* Damage the writer cannot produce: a machine the reader refuses outright. */
static void test_bad_machine_bytes(void **state) {
    (void)state;
    size_t len;
    uint8_t *img = good_image(&len);
    size_t mach = section_at(img, len, "MACH") + 16;
    char *tiles = strstr((char *)img + mach, "\"tiles\": 16");
    assert_non_null(tiles);
    memcpy(tiles, "\"tiles\":  0", 11);
    expect_refused(img, len, PATH " (machine section):3:3: error: tiles must be at least 1");
    free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_documented_sizes),
        cmocka_unit_test(test_buffer_tiles),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_sections),
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_bad_programs),
        cmocka_unit_test(test_bad_in_memory),
        cmocka_unit_test(test_bad_machine_bytes),
        cmocka_unit_test(test_image_too_large),
        cmocka_unit_test(test_save_streams_the_image),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
