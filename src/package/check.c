/* check.c: validation of a whole package against the machine it carries:
 * every index, range and address the simulator will follow, over every
 * repeat iteration. One pass over each array (segments are sorted once), so
 * a package of a million runs checks in linear time. */
#include "format.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct checker {
    const package *p;
    const machine *m;
    const char *path;
    diag *d;
    uint8_t *run_owned;   /* per run: 1 once a compute step has claimed it */
    uint32_t *phase_iters; /* per exchange phase: its innermost repeat's iterations, 0 outside any */
    int32_t *tile_step;   /* per tile: the last compute step with a run on it, -1 none */
    uint32_t *tile_run;   /* per tile: its last run in that step */
    uint32_t next_run;    /* where the next compute step's runs start */
    uint32_t phases;      /* exchange steps so far */
} checker;

static int fail(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(checker *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = diag_vfail_in(c->d, c->path, "", fmt, ap);
    va_end(ap);
    return rc;
}

/* The message of a diag another layer filled, without its "error: " prefix
 * and final newline, to be wrapped in ours. */
static void inner_message(const diag *d, char *buf, size_t cap) {
    const char *t = strstr(d->text, "error: ");
    t = t ? t + 7 : d->text;
    size_t n = strcspn(t, "\n");
    snprintf(buf, cap, "%.*s", (int)n, t);
}

static bool label_ok(const checker *c, uint32_t off) {
    return pkg_string_ok(c->p->prog.strings.v, (uint64_t)c->p->prog.strings.n, off);
}

/* "0x4c000", or "-0x40" for an address a negative stride walked below 0. */
static void fmt_addr(char *buf, size_t cap, int64_t a) {
    if (a < 0) snprintf(buf, cap, "-0x%" PRIx64, (uint64_t)0 - (uint64_t)a);
    else snprintf(buf, cap, "0x%" PRIx64, (uint64_t)a);
}

/* Whether [a + it * stride, + extent) lies inside [lo, hi) for it = 0 and
 * it = iters - 1 (the span moves linearly, so the ends bound every
 * iteration); iters = 0 means outside any repeat, where the stride must be
 * 0. On failure why says what of `what` lies where. */
static bool span_ok(const kernel_addr *a, uint64_t extent, uint32_t iters, uint32_t lo, uint32_t hi, const char *hi_name,
                    const char *what, char *why, size_t cap) {
    if (a->buf != KERNEL_ABSOLUTE) {
        snprintf(why, cap, "%s is in buffer %" PRIu32 ", not at an absolute address (the program is not placed)", what,
                 a->buf);
        return false;
    }
    if (!iters && a->iter_stride) {
        snprintf(why, cap, "%s has an iteration stride of %" PRId32 " bytes outside any repeat", what, a->iter_stride);
        return false;
    }
    uint32_t last = iters > 1 ? iters - 1 : 0;
    for (int k = 0; k < 2; k++) {
        uint32_t it = k ? last : 0;
        /* |stride| < 2^31 and it < 2^32, so this cannot overflow int64. */
        int64_t start = (int64_t)a->off + (int64_t)a->iter_stride * it;
        if (start >= lo && start <= hi && extent <= (uint64_t)(hi - start)) continue;
        char when[64] = "", s0[32], s1[32];
        if (k) snprintf(when, sizeof when, " at iteration %" PRIu32 " (of %" PRIu32 ")", it, iters);
        fmt_addr(s0, sizeof s0, start);
        if (start < lo) {
            snprintf(why, cap, "%s%s starts at %s, below the start of tile memory 0x%" PRIx32, what, when, s0, lo);
        } else {
            fmt_addr(s1, sizeof s1, (int64_t)((uint64_t)start + extent));  /* start >= 0, extent < 2^63 */
            snprintf(why, cap, "%s%s spans %s..%s, past %s 0x%" PRIx32, what, when, s0, s1, hi_name, hi);
        }
        return false;
    }
    return true;
}

/* ---- runs -------------------------------------------------------------- */

static const char *const OPERAND[KERNEL_MAX_OPERANDS] = {
    "operand 0", "operand 1", "operand 2", "operand 3", "operand 4", "operand 5", "operand 6",
};

static int fail_run(checker *c, uint32_t i, const char *why) {
    const kernel_run *r = &c->p->prog.runs.v[i];
    char kernel[24];
    if (r->kernel < KERNEL_K_COUNT) snprintf(kernel, sizeof kernel, "%s", kernel_names[r->kernel]);
    else snprintf(kernel, sizeof kernel, "kernel %u", r->kernel);
    return fail(c, "section RUNS: run %" PRIu32 " (%s on tile %" PRIu32 "): %s", i, kernel, r->tile, why);
}

static int check_run(checker *c, uint32_t i, int32_t step, uint32_t iters) {
    const machine *m = c->m;
    const kernel_run *r = &c->p->prog.runs.v[i];
    char why[512];
    if (r->tile >= m->tiles) {
        snprintf(why, sizeof why, "tile %" PRIu32 " is outside the machine's %" PRIu32 " tiles", r->tile, m->tiles);
        return fail_run(c, i, why);
    }
    if (!kernel_run_valid(r, why, sizeof why)) return fail_run(c, i, why);
    for (int k = 0; k < kernel_operands[r->kernel]; k++)
        if (kernel_run_uses(r, k) && !span_ok(&r->ptr[k], kernel_run_extent(r, k), iters, m->tile_memory_base,
                                           m->tile_memory_end, "the end of tile memory", OPERAND[k], why, sizeof why))
            return fail_run(c, i, why);
    /* Runs of one compute set are grouped by tile (kern.h): the simulator
     * runs each contiguous group on its own thread, so two groups of one
     * tile would race. */
    if (c->tile_step[r->tile] == step && c->tile_run[r->tile] != i - 1) {
        snprintf(why, sizeof why, "tile %" PRIu32 " already ran run %" PRIu32 " in step %" PRId32
                 ", not just before: a compute set's runs are grouped by tile", r->tile, c->tile_run[r->tile], step);
        return fail_run(c, i, why);
    }
    c->tile_step[r->tile] = step;
    c->tile_run[r->tile] = i;
    return 0;
}

/* ---- steps ------------------------------------------------------------ */

static int fail_step(checker *c, int32_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_step(checker *c, int32_t i, const char *fmt, ...) {
    static const char *const KIND[] = {"compute", "exchange", "repeat", "end"};
    const low_step *s = &c->p->prog.steps.v[i];
    char what[128], msg[512];
    if (s->kind < TS_COUNT(KIND) && label_ok(c, s->label) && c->p->prog.strings.v[s->label])
        snprintf(what, sizeof what, "%s '%.60s'", KIND[s->kind], c->p->prog.strings.v + s->label);
    else if (s->kind < TS_COUNT(KIND))
        snprintf(what, sizeof what, "%s", KIND[s->kind]);
    else
        snprintf(what, sizeof what, "kind %u", s->kind);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(c, "section STEP: step %" PRId32 " (%s): %s", i, what, msg);
}

/* The runs of compute step i: inside the array, each where the previous
 * compute step's end, and so each claimed by this step alone and checked
 * once, with its repeat. */
static int check_range(checker *c, int32_t i, uint32_t iters) {
    const low_step *s = &c->p->prog.steps.v[i];
    int32_t have = c->p->prog.runs.n;
    if ((uint64_t)s->first + s->count > (uint64_t)have)
        return fail_step(c, i, "runs %" PRIu32 "..%" PRIu64 " run past the %" PRId32 " runs of the package", s->first,
                         (uint64_t)s->first + s->count, have);
    /* The file stores only counts: each step's runs follow the previous one's. */
    if (s->first != c->next_run)
        return fail_step(c, i, "its runs start at %" PRIu32 ", not at %" PRIu32 " where the previous step's end", s->first,
                         c->next_run);
    c->next_run = s->first + s->count;
    for (uint32_t k = s->first; k < s->first + s->count; k++) {
        if (c->run_owned[k]) return fail_step(c, i, "run %" PRIu32 " also belongs to an earlier step", k);
        c->run_owned[k] = 1;
        if (check_run(c, k, i, iters) != 0) return -1;
    }
    return 0;
}

static int check_steps(checker *c) {
    const low_program *g = &c->p->prog;
    uint32_t iters[PKG_MAX_REPEAT_DEPTH];
    int32_t opened[PKG_MAX_REPEAT_DEPTH];
    int depth = 0;
    for (int32_t i = 0; i < g->steps.n; i++) {
        const low_step *s = &g->steps.v[i];
        if (!label_ok(c, s->label))
            return fail_step(c, i, "label offset %" PRIu32 " is outside the string table (%" PRId32 " bytes)", s->label,
                             g->strings.n);
        uint32_t inner = depth ? iters[depth - 1] : 0;
        switch (s->kind) {
        case LOW_STEP_COMPUTE:
            if (check_range(c, i, inner) != 0) return -1;
            break;
        case LOW_STEP_EXCHANGE:
            /* What it moves is in the tables, under its phase: its place among the exchange steps. */
            if (s->first != c->phases || s->count)
                return fail_step(c, i, "phase %" PRIu32 " with count %" PRIu32 "; as exchange step %" PRIu32
                                 " it is phase %" PRIu32 " with count 0", s->first, s->count, c->phases, c->phases);
            c->phase_iters[c->phases++] = inner;
            break;
        case LOW_STEP_REPEAT:
            if (s->iterations < 1) return fail_step(c, i, "a repeat needs at least 1 iteration");
            if (depth == PKG_MAX_REPEAT_DEPTH)
                return fail_step(c, i, "repeats nest deeper than %d", PKG_MAX_REPEAT_DEPTH);
            iters[depth] = s->iterations;
            opened[depth++] = i;
            break;
        case LOW_STEP_END:
            if (!depth) return fail_step(c, i, "an END with no open REPEAT");
            depth--;
            break;
        default: return fail_step(c, i, "unknown step kind");
        }
    }
    if (depth) return fail_step(c, opened[depth - 1], "this REPEAT has no matching END");
    for (int32_t k = 0; k < g->runs.n; k++)
        if (!c->run_owned[k]) return fail_run(c, (uint32_t)k, "no compute step runs it");
    return 0;
}

/* ---- exchange tables --------------------------------------------------- */

/* Every address a phase's rows reach, over every iteration of its repeat:
 * what pkg_xplan_build leaves (it decodes and cross-checks the rows). */
static int check_tables(checker *c) {
    const package *p = c->p;
    const machine *m = c->m;
    if (p->prog.frags.n || p->prog.dst_tiles.n)
        return fail(c, "the program still holds %" PRId32 " exchange fragments: a package's exchanges are its encoded tables",
                    p->prog.frags.n);
    pkg_xplan x;
    if (pkg_xplan_build(p, c->path, &x, c->d) != 0) return -1;
    int rc = 0;
    char why[512];
    for (uint32_t ph = 0; ph < x.nphases && !rc; ph++) {
        const pkg_xphase *P = &x.phase[ph];
        uint32_t iters = c->phase_iters[ph];
        const low_step *st = &p->prog.steps.v[P->step];
        const char *label = p->prog.strings.v + st->label;
        for (uint32_t k = 0; k < P->nsenders && !rc; k++) {
            const pkg_xtile *t = &x.tiles[P->senders + k];
            for (uint32_t i = 0; i < t->n && !rc; i++) {
                const pkg_xsend *s = &x.send[t->first + i];
                kernel_addr a = {KERNEL_ABSOLUTE, s->addr, s->stride};
                if (!span_ok(&a, s->bytes, iters, m->tile_memory_base, m->tile_memory_end, "the end of tile memory", "its source",
                             why, sizeof why))
                    rc = fail(c, "section XTAB: tile %" PRIu32 ", phase %" PRIu32 " (step %" PRId32 " '%.60s'), send row %" PRIu32 ": %s",
                              t->tile, ph, P->step, label, i, why);
            }
        }
        for (uint32_t k = 0; k < P->nreceivers && !rc; k++) {
            const pkg_xtile *t = &x.tiles[P->receivers + k];
            for (uint32_t i = 0; i < t->n && !rc; i++) {
                const pkg_xrecv *r = &x.recv[t->first + i];
                const pkg_xsend *s = &x.send[r->send];
                kernel_addr a = {KERNEL_ABSOLUTE, r->addr, r->stride};
                if (!span_ok(&a, s->bytes, iters, m->tile_memory_base, m->tile_memory_end, "the end of tile memory",
                             "the fragment", why, sizeof why))
                    rc = fail(c, "section XTAB: tile %" PRIu32 ", phase %" PRIu32 " (step %" PRId32 " '%.60s'), receive row %" PRIu32
                              ": %s (fragment %" PRIu32 " it receives, %" PRIu32 " bytes from tile %" PRIu32 ")",
                              t->tile, ph, P->step, label, pkg_xt_recv_row_of(p, t->tile, ph, i), why, i, s->bytes, s->tile);
            }
        }
    }
    pkg_xplan_free(&x);
    return rc;
}

/* ---- buffers, segments ------------------------------------------------ */

static int check_bufs(checker *c) {
    const low_program *g = &c->p->prog;
    for (int32_t i = 0; i < g->bufs.n; i++) {
        const low_buf *b = &g->bufs.v[i];
        if (!label_ok(c, b->label))
            return fail(c, "section BUFS: buffer %" PRId32 ": label offset %" PRIu32 " is outside the string table (%" PRId32 " bytes)", i,
                        b->label, g->strings.n);
        if (b->first < -1 || b->first > g->steps.n || b->last < -1 || b->last > g->steps.n || b->first > b->last)
            return fail(c, "section BUFS: buffer %" PRId32 ": steps %" PRId32 "..%" PRId32 " are not steps of the program (%" PRId32 " steps)",
                        i, b->first, b->last, g->steps.n);
        /* Placed (an address), it owns at least its payload inside what the loader fills. */
        if ((b->addr || b->reserved) &&
            (b->reserved < b->bytes || b->addr < c->m->tile_memory_base || (uint64_t)b->addr + b->reserved > c->m->loader_limit))
            return fail(c, "section BUFS: buffer %" PRId32 ": %" PRIu32 " bytes reserved at 0x%" PRIx32 " for %" PRIu32
                        " of payload, outside tile memory below the loader limit 0x%" PRIx32,
                        i, b->reserved, b->addr, b->bytes, c->m->loader_limit);
    }
    return 0;
}

typedef struct seg_key {
    uint32_t tile, addr, bytes;
    int32_t index;
} seg_key;

static int seg_order(const void *pa, const void *pb) {
    const seg_key *a = pa, *b = pb;
    if (a->tile != b->tile) return a->tile < b->tile ? -1 : 1;
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

static int check_segment(checker *c, int32_t i) {
    const machine *m = c->m;
    const pkg_segment *s = &c->p->segments.v[i];
    kernel_addr at = {KERNEL_ABSOLUTE, s->addr, 0};
    char why[512];
    if (s->tile >= m->tiles)
        snprintf(why, sizeof why, "tile %" PRIu32 " is outside the machine's %" PRIu32 " tiles", s->tile, m->tiles);
    else if (!s->bytes)
        snprintf(why, sizeof why, "it is empty");
    else if (s->blob_off > c->p->blob_bytes || s->bytes > c->p->blob_bytes - s->blob_off)
        snprintf(why, sizeof why, "blob bytes %" PRIu64 "..%" PRIu64 " run past the %" PRIu64 "-byte blob", s->blob_off,
                 s->blob_off + s->bytes, c->p->blob_bytes);
    else if (span_ok(&at, s->bytes, 0, m->tile_memory_base, m->loader_limit, "the loader limit", "it", why, sizeof why))
        return 0;
    return fail(c, "section SEGS: segment %" PRId32 " (tile %" PRIu32 ", 0x%" PRIx32 ", %" PRIu32 " bytes): %s", i, s->tile, s->addr,
                s->bytes, why);
}

/* Each segment in bounds, then no two on one tile overlapping: sorted by
 * (tile, address), only neighbours can overlap first. */
static int check_segments(checker *c) {
    int32_t n = c->p->segments.n;
    for (int32_t i = 0; i < n; i++)
        if (check_segment(c, i) != 0) return -1;
    seg_key *keys = xmalloc((size_t)(n ? n : 1) * sizeof *keys);
    for (int32_t i = 0; i < n; i++) {
        const pkg_segment *s = &c->p->segments.v[i];
        keys[i] = (seg_key){s->tile, s->addr, s->bytes, i};
    }
    qsort(keys, (size_t)n, sizeof *keys, seg_order);
    int rc = 0;
    for (int32_t k = 1; k < n && rc == 0; k++) {
        const seg_key *a = &keys[k - 1], *b = &keys[k];
        if (a->tile == b->tile && (uint64_t)a->addr + a->bytes > b->addr)
            rc = fail(c, "section SEGS: segment %" PRId32 " (tile %" PRIu32 ", 0x%" PRIx32 "..0x%" PRIx64 ") overlaps segment %" PRId32
                      " (0x%" PRIx32 "..0x%" PRIx64 ")", b->index, b->tile, b->addr, (uint64_t)b->addr + b->bytes,
                      a->index, a->addr, (uint64_t)a->addr + a->bytes);
    }
    free(keys);
    return rc;
}

/* ---- bindings --------------------------------------------------------- */

/* layout_check is written for untrusted layouts (it checks every field and
 * guards its products against overflow), so it runs first. */
static bool check_layout(const checker *c, const layout *l, dtype t, char *why, size_t cap) {
    diag ld = {0};
    if (layout_check(l, (int32_t)c->m->tiles, &ld) != 0) {
        inner_message(&ld, why, cap);
        return false;
    }
    if (l->elem_bytes != dtype_bytes(t)) {
        snprintf(why, cap, "layout element size %" PRId32 " bytes is not the %s's %d", l->elem_bytes, dtype_name(t),
                 dtype_bytes(t));
        return false;
    }
    return true;
}

/* Everything about binding b except its name. */
static bool binding_ok(const checker *c, const pkg_binding *b, char *why, size_t cap) {
    const machine *m = c->m;
    if ((uint32_t)b->dtype >= DT_COUNT) {
        snprintf(why, cap, "dtype %u is not f32, f16, bf16, an 8-bit float or i32", (unsigned)b->dtype);
        return false;
    }
    bool b8 = dtype_is_f8(b->dtype);
    if (b8 ? b->scale < NUM_SCALE_MIN || b->scale > NUM_SCALE_MAX : b->scale != 0) {
        snprintf(why, cap, "scale %d is not %s", b->scale, b8 ? "in -16..15" : "0 (only 8-bit types are scaled)");
        return false;
    }
    if (!check_layout(c, &b->layout, b->dtype, why, cap)) return false;
    kernel_addr at = {KERNEL_ABSOLUTE, b->addr, 0};
    return span_ok(&at, (uint64_t)layout_shard_bytes(&b->layout), 0, m->tile_memory_base, m->tile_memory_end,
                   "the end of tile memory", "its buffer", why, cap);
}

static const char *const role_names[] = {"input", "output", "probe"};

static int check_bindings(checker *c) {
    /* Names are unique within each role (a graph may output one of its
     * inputs under the same name); roles come in order: inputs, outputs,
     * probes. Only probes name a step. */
    strmap names[3] = {{0}, {0}, {0}};
    int rc = 0;
    uint8_t last = PKG_INPUT;
    for (int32_t i = 0; i < c->p->bindings.n && rc == 0; i++) {
        const pkg_binding *b = &c->p->bindings.v[i];
        char why[512];
        int32_t other;
        if (!b->name || !b->name[0]) {
            rc = fail(c, "section BIND: binding %" PRId32 " has no name", i);
        } else if (strmap_get(&names[b->role], b->name, &other)) {
            rc = fail(c, "section BIND: binding %" PRId32 ": the name '%.64s' is also binding %" PRId32 "'s", i, b->name, other);
        } else if (b->role < last) {
            rc = fail(c, "section BIND: binding %" PRId32 " ('%.64s'): a%s %s after a%s %s (inputs, then outputs, then probes)", i, b->name,
                      b->role == PKG_PROBE ? "" : "n", role_names[b->role], last == PKG_PROBE ? "" : "n", role_names[last]);
        } else if (b->role == PKG_PROBE ? b->step < 0 || b->step >= c->p->prog.steps.n : b->step != -1) {
            rc = fail(c, "section BIND: binding %" PRId32 " ('%.64s'): step %" PRId32 " is not %s", i, b->name, b->step,
                      b->role == PKG_PROBE ? "a step of the program" : "-1 (only probes name a step)");
        } else if (!binding_ok(c, b, why, sizeof why)) {
            rc = fail(c, "section BIND: binding %" PRId32 " ('%.64s'): %s", i, b->name, why);
        } else {
            strmap_put(&names[b->role], b->name, i);
            last = b->role;
        }
    }
    for (int k = 0; k < 3; k++) strmap_free(&names[k]);
    return rc;
}

/* ---- the whole package ------------------------------------------------ */

static int check_all(checker *c) {
    const low_program *g = &c->p->prog;
    diag md = {0};
    if (machine_validate(c->m, &md) != 0) {
        char msg[1024];
        inner_message(&md, msg, sizeof msg);
        return fail(c, "%s", msg);
    }
    if (g->strings.n && g->strings.v[g->strings.n - 1] != 0)
        return fail(c, "the string table does not end with a NUL byte");
    if (check_steps(c) != 0 || check_tables(c) != 0 || check_bufs(c) != 0 || check_segments(c) != 0) return -1;
    return check_bindings(c);
}

int pkg_check(const package *p, const char *path, diag *d) {
    checker c = {.p = p, .m = &p->machine, .path = path, .d = d};
    uint32_t tiles = p->machine.tiles;
    /* machine_validate caps tiles at 2^20 before these per-tile arrays are used;
     * an unvalidated count only sizes them (at least 1). */
    size_t nt = tiles && tiles <= (1u << 20) ? tiles : 1;
    c.run_owned = xcalloc((size_t)p->prog.runs.n + 1, 1);
    c.phase_iters = xcalloc((size_t)p->prog.steps.n + 1, sizeof(uint32_t));
    c.tile_step = xmalloc(nt * sizeof *c.tile_step);
    c.tile_run = xcalloc(nt, sizeof *c.tile_run);
    for (size_t t = 0; t < nt; t++) c.tile_step[t] = -1;
    int rc = check_all(&c);
    free(c.run_owned);
    free(c.phase_iters);
    free(c.tile_step);
    free(c.tile_run);
    return rc;
}
