/* calib.c: builds each measured point as a one-kernel or one-phase package and runs it
 * through sim_run; the summary per kind. See calib.h for the picture. */
#define _POSIX_C_SOURCE 200809L
#include "calib.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../place/place.h"
#include "../sim/sim.h"

/* ---- the file's fields ------------------------------------------------------------- */

static const char *const POINT_KEYS[] = {"id", "kind", "shape", "dtypes", "measured_cycles",
                                         "what_it_includes", "source", "confidence"};
static const char *const SHAPE_KEYS[] = {
    "rows", "k", "cols", "output", "weights", "partials", "elements", "epilogue", "op", "padded_cols",
    "schedule", "fused", "stage", "stats_parts", "from", "to", "bytes", "runs", "phase", "max_tile_bytes_in",
    "max_tile_bytes_out", "max_tile_fragments", "tiles", "multicast", "repeat_patch_words",
    "repeat_patch_max_words", "model", "description"};
static const char *const DTYPE_KEYS[] = {"a", "b", "acc", "out", "data", "stats", "weights", "activations", "state"};

static bool known(const char *key, const char *const *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(key, keys[i]) == 0) return true;
    return false;
}

/* Offset of the first `"key"` at or after from (jansson keeps no positions). */
static size_t find_key(const src_text *s, size_t from, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = s->text + from; (p = strchr(p, '"')) != NULL; p++)
        if (strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '"') return (size_t)(p - s->text);
    return from;
}

/* Where point i starts: its `"id"` key, found by counting ids from the top. */
static size_t point_offset(const src_text *s, int i) {
    size_t off = 0;
    for (int k = 0; k <= i; k++) {
        size_t next = find_key(s, off, "id");
        if (next == off && k > 0) return off;
        off = next + 1;
    }
    return off ? off - 1 : 0;
}

static int fail_point(diag *d, const src_text *s, int i, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* An error at point i's key (or its start), as path:line:col with the line and a caret. */
static int fail_point(diag *d, const src_text *s, int i, const char *key, const char *fmt, ...) {
    size_t at = point_offset(s, i);
    if (key) at = find_key(s, at, key);
    int line, col;
    src_line_col(s, at, &line, &col);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return diag_fail_at(d, s, line, col, "%s", msg);
}

/* A point's own fields are the file format's: one it does not have is an
 * error (a typo of measured_cycles must not pass unnoticed). */
static int check_keys(const src_text *s, int i, json_t *obj, const char *const *keys, size_t n, const char *id, diag *d) {
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        (void)v;
        if (!known(k, keys, n)) {
            const char *near = util_closest(k, keys, n);
            return fail_point(d, s, i, k, "unknown field '%s' in point '%s'%s%s%s", k, id, near ? " (did you mean '" : "",
                              near ? near : "", near ? "'?)" : "");
        }
    }
    return 0;
}

/* Whether obj (a point's `what`) has a field not in keys; why says which,
 * with the known one it is nearest to. */
static bool unknown_field(json_t *obj, const char *what, const char *const *keys, size_t n, char *why) {
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        (void)v;
        if (known(k, keys, n)) continue;
        const char *near = util_closest(k, keys, n);
        snprintf(why, CALIB_WHY_CAP, "unknown %s field '%.40s'%s%s%s: skipped", what, k, near ? " (did you mean '" : "",
                 near ? near : "", near ? "'?)" : "");
        return true;
    }
    return false;
}

/* ---- shape access -------------------------------------------------------------------- */

static int64_t num(json_t *o, const char *key, int64_t dflt) {
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v)) return json_integer_value(v);
    if (json_is_real(v)) return (int64_t)json_real_value(v);
    return dflt;
}

static const char *str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool str_is(json_t *o, const char *key, const char *val) {
    const char *s = str(o, key);
    return s && strcmp(s, val) == 0;
}

static bool dtype_of(json_t *dt, const char *key, dtype dflt, dtype *out) {
    const char *s = str(dt, key);
    *out = dflt;
    return !s || dtype_parse(s, strlen(s), out);
}

/* ---- building ----------------------------------------------------------------------- */

typedef struct build {
    package p;
    uint32_t phases;  /* exchange steps the run will execute */
    bool overhead;    /* the point measures the phase overhead only */
} build;

static void build_init(build *b, const machine *m, uint32_t tiles) {
    memset(b, 0, sizeof *b);
    package_init(&b->p);
    b->p.machine = *m;
    b->p.machine.tiles = tiles;
    b->p.fingerprint = machine_fingerprint(&b->p.machine);
    vec_push(&b->p.arena, &b->p.prog.strings, 0);
}

static void step(build *b, low_step_kind k, uint32_t first, uint32_t count, uint32_t it) {
    low_step s = {.kind = (uint8_t)k, .first = first, .count = count, .iterations = it};
    vec_push(&b->p.arena, &b->p.prog.steps, s);
}

static kernel_addr abs_at(uint64_t a) { return (kernel_addr){.buf = KERNEL_ABSOLUTE, .off = (uint32_t)a}; }

static void run_init(kernel_run *r, kernel_id k) {
    memset(r, 0, sizeof *r);
    r->kernel = (uint8_t)k;
    for (int i = 0; i < KERNEL_MAX_BOX; i++) r->n[i] = 1;
}

/* Adds the run as a one-run compute set, if it is valid and fits the tile. */
static bool add_run(build *b, kernel_run *r, char *why) {
    const machine *m = &b->p.machine;
    if (!kernel_run_valid(r, why, CALIB_WHY_CAP)) return false;
    for (int i = 0; i < kernel_operands[r->kernel]; i++) {
        if (!kernel_run_uses(r, i)) continue;
        if ((uint64_t)r->ptr[i].off + kernel_run_extent(r, i) > m->tile_memory_end) {
            snprintf(why, CALIB_WHY_CAP, "operand %d does not fit in one tile", i);
            return false;
        }
    }
    vec_push(&b->p.arena, &b->p.prog.runs, *r);
    step(b, LOW_STEP_COMPUTE, (uint32_t)b->p.prog.runs.n - 1, 1, 0);
    return true;
}

/* A one-tile GEMM: A AMP-left in the ordinary region, B in the interleaved one unless the point
 * says standard weights, C row-major after A. Native output is the AMP's panel order: one batch
 * entry per 16-column panel, sharing A. */
static bool build_gemm(build *b, json_t *sh, json_t *dt, char *why) {
    const machine *m = &b->p.machine;
    int64_t rows = num(sh, "rows", 0), k = num(sh, "k", 0), cols = num(sh, "cols", 0);
    dtype ta, tb, acc, to;
    if (!dtype_of(dt, "a", DT_F16, &ta) || !dtype_of(dt, "b", ta, &tb) || !dtype_of(dt, "acc", DT_F16, &acc) ||
        !dtype_of(dt, "out", DT_F16, &to)) {
        snprintf(why, CALIB_WHY_CAP, "unknown dtype");
        return false;
    }
    if (rows <= 0 || k <= 0 || cols <= 0) {
        snprintf(why, CALIB_WHY_CAP, "rows, k and cols must be positive");
        return false;
    }
    bool packed = str_is(sh, "output", "packed");
    uint64_t pc = m->amp_col_panel;
    if (!packed && cols % (int64_t)pc) {
        snprintf(why, CALIB_WHY_CAP, "native output needs whole %u-column panels", (unsigned)pc);
        return false;
    }
    kernel_run r;
    run_init(&r, KERNEL_K_GEMM);
    r.dt[0] = (uint8_t)ta, r.dt[1] = (uint8_t)tb, r.dt[2] = (uint8_t)to, r.acc = (uint8_t)acc;
    uint64_t ab = (uint64_t)dtype_bytes(ta), bb = (uint64_t)dtype_bytes(tb), ob = (uint64_t)dtype_bytes(to);
    uint64_t w = KERNEL_AMP_PANEL_BYTES / ab, kblocks = ((uint64_t)k + w - 1) / w;
    uint64_t a = m->tile_memory_base, c = a + kblocks * (uint64_t)rows * KERNEL_AMP_PANEL_BYTES;
    bool standard = str_is(sh, "weights", "standard");
    uint64_t bsz = (uint64_t)k * cols * bb;
    uint64_t baddr = standard ? c : m->interleaved_base;
    if (standard) c += (bsz + 7) / 8 * 8;
    r.ptr[0] = abs_at(a), r.ptr[1] = abs_at(baddr), r.ptr[2] = abs_at(c);
    r.stride[0][1] = (int32_t)(rows * KERNEL_AMP_PANEL_BYTES);
    r.stride[1][1] = (int32_t)(cols * bb);
    if (packed) {
        r.n[0] = 1, r.n[1] = (uint32_t)rows, r.n[2] = (uint32_t)cols, r.n[3] = (uint32_t)k;
        r.stride[2][1] = (int32_t)(cols * ob);
    } else {
        r.n[0] = (uint32_t)(cols / (int64_t)pc), r.n[1] = (uint32_t)rows, r.n[2] = (uint32_t)pc, r.n[3] = (uint32_t)k;
        r.stride[0][0] = 0;
        r.stride[1][0] = (int32_t)(pc * bb);
        r.stride[2][0] = (int32_t)(rows * pc * ob);
        r.stride[2][1] = (int32_t)(pc * ob);
    }
    return add_run(b, &r, why);
}

static bool build_reduce(build *b, json_t *sh, json_t *dt, char *why) {
    const machine *m = &b->p.machine;
    bool gelu = str_is(sh, "epilogue", "bias_gelu"); /* a bias, then a GeLU done by the reduction */
    if (str(sh, "epilogue") && !gelu) {
        snprintf(why, CALIB_WHY_CAP, "a reduction with a fused %s epilogue: tessel has no such kernel", str(sh, "epilogue"));
        return false;
    }
    int64_t parts = num(sh, "partials", 0), e = num(sh, "elements", 0), cols = num(sh, "cols", 0);
    if (gelu && (cols <= 0 || e % cols)) {
        snprintf(why, CALIB_WHY_CAP, "a bias needs cols dividing the elements");
        return false;
    }
    dtype t;
    if (!dtype_of(dt, "data", DT_F16, &t) || parts <= 0 || e <= 0) {
        snprintf(why, CALIB_WHY_CAP, "needs partials, elements and a known data dtype");
        return false;
    }
    kernel_run r;
    run_init(&r, KERNEL_K_REDUCE);
    r.dt[0] = r.dt[1] = (uint8_t)t, r.acc = (uint8_t)t;
    r.n[0] = (uint32_t)parts, r.n[1] = (uint32_t)e, r.n[2] = 0; /* no bias */
    r.ptr[0] = abs_at(m->tile_memory_base), r.ptr[1] = abs_at(m->interleaved_base);
    r.stride[1][0] = (int32_t)(e * dtype_bytes(t));
    if (gelu) { /* the bias after the result */
        r.ptr[2] = abs_at(m->tile_memory_base + ((uint64_t)e * dtype_bytes(t) + 15) / 16 * 16);
        r.dt[2] = (uint8_t)t, r.n[2] = (uint32_t)cols, r.grad = (uint8_t)t, r.gelu = KERNEL_REDUCE_GELU;
    }
    return add_run(b, &r, why);
}

/* A dense run of `elements` (rows of cols when the point pays setup per row: rows padded apart). */
static bool build_ewise(build *b, kernel_ew_op op, json_t *sh, dtype tin, dtype tout, char *why) {
    const machine *m = &b->p.machine;
    int64_t e = num(sh, "elements", 0), rows = num(sh, "rows", 1), cols = num(sh, "cols", 0);
    if (e <= 0 || rows <= 0) {
        snprintf(why, CALIB_WHY_CAP, "needs a positive element count");
        return false;
    }
    if (rows == 1 || cols <= 0) cols = e / rows;
    kernel_run r;
    run_init(&r, KERNEL_K_EWISE);
    r.ew = (uint8_t)op;
    r.dt[0] = (uint8_t)tout, r.dt[1] = r.dt[2] = (uint8_t)tin;
    r.n[2] = (uint32_t)rows, r.n[3] = (uint32_t)cols;
    int nops = 1 + kernel_ew_arity[op];
    uint64_t at[3] = {m->interleaved_base, m->tile_memory_base, m->tile_memory_base + 0x18000};
    for (int i = 0; i < nops; i++) {
        uint64_t eb = (uint64_t)dtype_bytes((dtype)r.dt[i]);
        r.ptr[i] = abs_at(at[i]);
        r.stride[i][3] = (int32_t)eb;
        r.stride[i][2] = (int32_t)(cols * eb + (rows > 1 ? 8 : 0));  /* padded: rows stay rows */
    }
    return add_run(b, &r, why);
}

static bool build_ewise_point(build *b, json_t *sh, json_t *dt, char *why) {
    const char *op = str(sh, "op");
    dtype tin, tout;
    if (!dtype_of(dt, "data", DT_F16, &tin) || !dtype_of(dt, "out", tin, &tout)) {
        snprintf(why, CALIB_WHY_CAP, "unknown dtype");
        return false;
    }
    if (op && strcmp(op, "fill") == 0) {
        int64_t e = num(sh, "elements", 0);
        kernel_run r;
        run_init(&r, KERNEL_K_FILL);
        r.dt[0] = (uint8_t)tout;
        r.n[0] = (uint32_t)e;
        r.ptr[0] = abs_at(b->p.machine.interleaved_base);
        return add_run(b, &r, why);
    }
    if (op && strcmp(op, "add") == 0) return build_ewise(b, KERNEL_EW_ADD, sh, tin, tout, why);
    if (op && strcmp(op, "gelu") == 0) return build_ewise(b, KERNEL_EW_GELU, sh, tin, tout, why);
    snprintf(why, CALIB_WHY_CAP, "op '%s': tessel has no fused kernel for it (it runs an add, then a GeLU)",
             op ? op : "?");
    return false;
}

static bool build_cast(build *b, json_t *sh, char *why) {
    dtype tin, tout;
    const char *f = str(sh, "from"), *t = str(sh, "to");
    if (!f || !t || !dtype_parse(f, strlen(f), &tin) || !dtype_parse(t, strlen(t), &tout)) {
        snprintf(why, CALIB_WHY_CAP, "needs known from and to dtypes");
        return false;
    }
    return build_ewise(b, KERNEL_EW_CAST, sh, tin, tout, why);
}

static bool build_softmax(build *b, const char *id, json_t *sh, json_t *dt, char *why) {
    const machine *m = &b->p.machine;
    if (str_is(sh, "schedule", "whole rows") || strstr(id, "-whole")) {
        snprintf(why, CALIB_WHY_CAP,
                 "times the whole-row schedule; tessel's kernel is priced with the best split of each row over the workers");
        return false;
    }
    int64_t rows = num(sh, "rows", 0), cols = num(sh, "cols", 0);
    dtype t;
    if (!dtype_of(dt, "data", DT_F16, &t) || rows <= 0 || cols <= 0) {
        snprintf(why, CALIB_WHY_CAP, "needs rows, cols and a known data dtype");
        return false;
    }
    kernel_run r;
    run_init(&r, KERNEL_K_SOFTMAX);
    r.dt[0] = r.dt[1] = (uint8_t)t;
    r.n[0] = (uint32_t)rows, r.n[1] = (uint32_t)cols;
    r.ptr[0] = abs_at(m->interleaved_base), r.ptr[1] = abs_at(m->tile_memory_base);
    r.stride[0][0] = r.stride[1][0] = (int32_t)(cols * dtype_bytes(t));
    return add_run(b, &r, why);
}

/* The whole kernel, or a stage of a row cut into parts: its statistics
 * (LN_MOMENTS) or the layer norm applying `stats_parts` parts' statistics. */
static bool build_layer_norm(build *b, json_t *sh, json_t *dt, char *why) {
    const machine *m = &b->p.machine;
    const char *stage = str(sh, "stage");
    if (str(sh, "fused") || (stage && strcmp(stage, "moments") != 0 && strcmp(stage, "apply") != 0)) {
        snprintf(why, CALIB_WHY_CAP, "a fused layer norm: tessel's adds run apart");
        return false;
    }
    int64_t rows = num(sh, "rows", 0), cols = num(sh, "cols", 0), parts = num(sh, "stats_parts", 1);
    dtype t, to;
    if (!dtype_of(dt, "data", DT_F16, &t) || !dtype_of(dt, "out", t, &to) || rows <= 0 || cols <= 0 || parts < 1 ||
        parts > KERNEL_MAX_PARTS) {
        snprintf(why, CALIB_WHY_CAP, "needs rows, cols and known dtypes");
        return false;
    }
    kernel_run r;
    uint64_t row = (uint64_t)cols * dtype_bytes(t);
    if (stage && strcmp(stage, "moments") == 0) {
        run_init(&r, KERNEL_K_LN_MOMENTS);
        r.n[2] = 0; /* no gathered statistics' slot */
        r.dt[0] = DT_F32, r.dt[1] = (uint8_t)t;
        r.n[0] = (uint32_t)rows, r.n[1] = (uint32_t)cols;
        r.ptr[0] = abs_at(m->interleaved_base), r.ptr[1] = abs_at(m->tile_memory_base);
        r.stride[1][0] = (int32_t)row;
        return add_run(b, &r, why);
    }
    run_init(&r, KERNEL_K_LAYER_NORM);
    r.dt[0] = (uint8_t)to, r.dt[1] = r.dt[2] = r.dt[3] = (uint8_t)t;
    r.n[0] = (uint32_t)rows, r.n[1] = (uint32_t)cols;
    r.f[0] = 1e-6f;
    r.ptr[0] = abs_at(m->interleaved_base), r.ptr[1] = abs_at(m->tile_memory_base);
    r.ptr[2] = abs_at(m->tile_memory_base + 0x18000), r.ptr[3] = abs_at(m->tile_memory_base + 0x18000 + row);
    r.stride[0][0] = (int32_t)((uint64_t)cols * dtype_bytes(to)), r.stride[1][0] = (int32_t)row;
    r.n[2] = 0; /* its own statistics */
    if (stage) { /* the statistics after gamma and beta */
        r.n[2] = (uint32_t)parts;
        r.dt[4] = DT_F32;
        r.ptr[4] = abs_at(m->tile_memory_base + 0x18000 + 2 * row);
    }
    return add_run(b, &r, why);
}

/* `runs` spans of bytes/runs bytes; scattered word patches land 8 bytes apart. */
static bool build_copy(build *b, json_t *sh, char *why) {
    const machine *m = &b->p.machine;
    const char *op = str(sh, "op");
    int64_t bytes = num(sh, "bytes", 0), runs = num(sh, "runs", 0);
    if (op && strstr(op, "supervisor")) {
        snprintf(why, CALIB_WHY_CAP, "the single-thread supervisor loop: tessel's copy runs on the workers");
        return false;
    }
    if (runs <= 0 || bytes <= 0 || bytes % runs) {
        snprintf(why, CALIB_WHY_CAP, "the number of copy runs (spans) is not known");
        return false;
    }
    int64_t span = bytes / runs;
    bool scattered = op && strstr(op, "scattered");
    kernel_run r;
    run_init(&r, KERNEL_K_COPY);
    r.dt[0] = r.dt[1] = DT_F32;
    r.n[2] = (uint32_t)runs, r.n[3] = (uint32_t)span;
    r.ptr[0] = abs_at(m->interleaved_base), r.ptr[1] = abs_at(m->tile_memory_base);
    r.stride[0][2] = (int32_t)(scattered ? 2 * span : span), r.stride[1][2] = (int32_t)span;
    return add_run(b, &r, why);
}

/* One sender multicasting to the point's other tiles, in sends of at most max_send_bytes. */
static bool build_exchange(build *b, json_t *sh, char *why) {
    const machine *m = &b->p.machine;
    int64_t out = num(sh, "max_tile_bytes_out", 0), tiles = num(sh, "tiles", 0);
    if (out <= 0 || tiles < 2) {
        snprintf(why, CALIB_WHY_CAP, "the point does not give the phase's per-tile traffic");
        return false;
    }
    if ((uint64_t)out > m->interleaved_base - m->tile_memory_base) {
        snprintf(why, CALIB_WHY_CAP, "the traffic does not fit the machine");
        return false;
    }
    bool mcast = json_is_true(json_object_get(sh, "multicast"));
    uint32_t first = (uint32_t)b->p.prog.frags.n;
    for (int64_t off = 0; off < out; off += m->max_send_bytes) {
        uint32_t n = (uint32_t)(out - off < m->max_send_bytes ? out - off : m->max_send_bytes);
        uint32_t ndst = mcast ? (uint32_t)(tiles - 1) : 1;
        low_frag f = {.src_tile = 0, .src = abs_at(m->tile_memory_base + (uint64_t)off),
                      .dst = abs_at(m->interleaved_base + (uint64_t)off), .bytes = n,
                      .dst0 = (uint32_t)b->p.prog.dst_tiles.n, .ndst = ndst};
        vec_push(&b->p.arena, &b->p.prog.frags, f);
        for (uint32_t t = 1; t <= ndst; t++) vec_push(&b->p.arena, &b->p.prog.dst_tiles, t);
    }
    step(b, LOW_STEP_EXCHANGE, first, (uint32_t)b->p.prog.frags.n - first, 0);
    b->phases = 1;
    return true;
}

/* An empty phase; with repeat patch words, that many strided 4-byte sends from tile 0 inside a
 * two-iteration repeat, so that each pass repatches them. */
static bool build_sync(build *b, json_t *sh) {
    const machine *m = &b->p.machine;
    int64_t words = num(sh, "repeat_patch_max_words", num(sh, "repeat_patch_words", 0));
    b->overhead = true;
    if (words <= 0) {
        step(b, LOW_STEP_EXCHANGE, 0, 0, 0);
        b->phases = 1;
        return true;
    }
    step(b, LOW_STEP_REPEAT, 0, 0, 2);
    for (int64_t w = 0; w < words; w++) {
        low_frag f = {.src_tile = 0, .src = {KERNEL_ABSOLUTE, (uint32_t)(m->tile_memory_base + 4 * (uint64_t)w), 4 * (int32_t)words},
                      .dst = abs_at(m->interleaved_base + 4 * (uint64_t)w), .bytes = 4,
                      .dst0 = (uint32_t)b->p.prog.dst_tiles.n, .ndst = 1};
        vec_push(&b->p.arena, &b->p.prog.frags, f);
        vec_push(&b->p.arena, &b->p.prog.dst_tiles, 1u);
    }
    step(b, LOW_STEP_EXCHANGE, 0, (uint32_t)words, 0);
    step(b, LOW_STEP_END, 0, 0, 0);
    b->phases = 2;
    return true;
}

/* Builds point pt and simulates it; false with why when tessel cannot build it. */
static bool simulate(json_t *pt, const machine *m, calib_point *out) {
    json_t *sh = json_object_get(pt, "shape"), *dt = json_object_get(pt, "dtypes");
    if (!json_is_object(dt)) dt = NULL;
    const char *k = out->kind;
    /* Kernels need one tile, a sync point two; an exchange point as many as it names (at most a
     * small fan-out: the whole-device phases are skipped for want of traffic). */
    int64_t named = num(sh, "tiles", 0);
    uint32_t tiles = 1;
    if (strcmp(k, "exchange") == 0) tiles = named > 1 && named <= 64 ? (uint32_t)named : 2;
    if (strcmp(k, "sync") == 0) tiles = 2;
    if (tiles > m->tiles) {
        snprintf(out->why, CALIB_WHY_CAP, "needs %u tiles", (unsigned)tiles);
        return false;
    }
    build b;
    build_init(&b, m, tiles);
    bool ok;
    if (strcmp(k, "gemm") == 0) ok = build_gemm(&b, sh, dt, out->why);
    else if (strcmp(k, "reduce") == 0) ok = build_reduce(&b, sh, dt, out->why);
    else if (strcmp(k, "ewise") == 0) ok = build_ewise_point(&b, sh, dt, out->why);
    else if (strcmp(k, "cast") == 0) ok = build_cast(&b, sh, out->why);
    else if (strcmp(k, "softmax") == 0) ok = build_softmax(&b, out->id, sh, dt, out->why);
    else if (strcmp(k, "layer_norm") == 0) ok = build_layer_norm(&b, sh, dt, out->why);
    else if (strcmp(k, "copy") == 0) ok = build_copy(&b, sh, out->why);
    else if (strcmp(k, "exchange") == 0) ok = build_exchange(&b, sh, out->why);
    else if (strcmp(k, "sync") == 0) ok = build_sync(&b, sh);
    else if (strcmp(k, "workload") == 0) {
        snprintf(out->why, CALIB_WHY_CAP, "a whole program with the predecessor's plan: compare with 'tessel check'");
        ok = false;
    } else {
        snprintf(out->why, CALIB_WHY_CAP, "kind '%s' has no builder", k);
        ok = false;
    }
    if (ok) {
        sim_stats st;
        sim_options so = {.quiet = true};
        diag d = {0};
        if (place_package_tables(&b.p, &d) || sim_run(&b.p, &so, NULL, NULL, &st, &d)) {
            snprintf(out->why, CALIB_WHY_CAP, "the simulator refused it: %.120s", d.text);
            ok = false;
        } else if (st.cycles >= MACHINE_CYCLES_UNSUPPORTED) {
            snprintf(out->why, CALIB_WHY_CAP, "the machine's AMP cannot take these operands");
            ok = false;
        } else {
            out->simulated = b.overhead ? (double)st.sync_cycles / (b.phases ? b.phases : 1) : (double)st.cycles;
        }
    }
    package_free(&b.p);
    return ok;
}

/* ---- the summary -------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summarise(calib_result *r) {
    r->kinds = xcalloc((size_t)r->n + 1, sizeof(calib_kind));
    double *errs = xmalloc(sizeof(double) * ((size_t)r->n + 1));
    for (int i = 0; i < r->n; i++) {
        int k = 0;
        while (k < r->nkinds && strcmp(r->kinds[k].kind, r->pts[i].kind) != 0) k++;
        if (k == r->nkinds) snprintf(r->kinds[r->nkinds++].kind, CALIB_KIND_CAP, "%s", r->pts[i].kind);
    }
    for (int k = 0; k < r->nkinds; k++) {
        int n = 0;
        for (int i = 0; i < r->n; i++) {
            const calib_point *p = &r->pts[i];
            if (!p->built || p->superseded || strcmp(p->kind, r->kinds[k].kind) != 0) continue;
            errs[n++] = fabs(p->simulated / p->measured - 1.0);
        }
        qsort(errs, (size_t)n, sizeof(double), cmp_double);
        r->kinds[k].points = n;
        if (n) {
            r->kinds[k].median_abs_error = n % 2 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
            r->kinds[k].worst_abs_error = errs[n - 1];
        }
    }
    free(errs);
}

/* ---- loading ------------------------------------------------------------------------ */

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

int calib_run_text(const char *text, size_t len, const char *path, const machine *m, calib_result *r, diag *d) {
    memset(r, 0, sizeof *r);
    src_text s = {path, text, len};
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return diag_fail_at(d, &s, je.line, je.column, "%s", je.text);
    int rc = 0;
    if (!json_is_array(root)) {
        rc = diag_fail_at(d, &s, 1, 1, "a points file is a JSON array of points");
        goto done;
    }
    size_t n = json_array_size(root);
    r->pts = xcalloc(n + 1, sizeof(calib_point));
    for (size_t i = 0; i < n; i++) {
        json_t *pt = json_array_get(root, i);
        calib_point *p = &r->pts[i];
        if (!json_is_object(pt)) {
            rc = fail_point(d, &s, (int)i, NULL, "point %zu is not an object", i + 1);
            goto done;
        }
        const char *id = str(pt, "id"), *kind = str(pt, "kind");
        json_t *mc = json_object_get(pt, "measured_cycles"), *sh = json_object_get(pt, "shape");
        if (!id || !kind) {
            rc = fail_point(d, &s, (int)i, NULL, "every point needs a string 'id' and 'kind'");
            goto done;
        }
        if (check_keys(&s, (int)i, pt, POINT_KEYS, TS_COUNT(POINT_KEYS), id, d)) goto fail;
        if (!json_is_object(sh)) {
            rc = fail_point(d, &s, (int)i, "shape", "point '%s': 'shape' must be an object", id);
            goto done;
        }
        json_t *dt = json_object_get(pt, "dtypes");
        if (dt && !json_is_object(dt)) {
            rc = fail_point(d, &s, (int)i, "dtypes", "point '%s': 'dtypes' must be an object", id);
            goto done;
        }
        if (!json_is_number(mc) || json_number_value(mc) <= 0) {
            rc = fail_point(d, &s, (int)i, "measured_cycles", "point '%s': 'measured_cycles' must be a positive number", id);
            goto done;
        }
        snprintf(p->id, sizeof p->id, "%s", id);
        snprintf(p->kind, sizeof p->kind, "%s", kind);
        p->measured = json_number_value(mc);
        p->superseded = ends_with(id, "-0909") || ends_with(id, "-old");
        r->n = (int)i + 1;
        /* A shape or dtype field this tessel does not know (a newer file's,
         * or a typo) skips the point, saying which: the rest still count. */
        if (unknown_field(sh, "shape", SHAPE_KEYS, TS_COUNT(SHAPE_KEYS), p->why) ||
            (dt && unknown_field(dt, "dtypes", DTYPE_KEYS, TS_COUNT(DTYPE_KEYS), p->why)))
            p->built = false;
        else
            p->built = simulate(pt, m, p);
    }
    summarise(r);
    goto done;
fail:
    rc = -1;
done:
    json_decref(root);
    if (rc) calib_result_free(r);
    return rc;
}

int calib_run_file(const char *path, const machine *m, calib_result *r, diag *d) {
    char *text;
    size_t len;
    memset(r, 0, sizeof *r);
    if (file_read_all(path, &text, &len, d)) return -1;
    int rc = calib_run_text(text, len, path, m, r, d);
    free(text);
    return rc;
}

void calib_result_free(calib_result *r) {
    free(r->pts);
    free(r->kinds);
    memset(r, 0, sizeof *r);
}
