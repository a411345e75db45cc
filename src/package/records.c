/* records.c: the variable-length records of a package (docs/package.md,
 * "Records"): steps and runs. Each is written and read by a pair of
 * functions side by side, field by field, so the two cannot drift; a run
 * holds only what its kernel reads (KERNEL_TABLE's columns in kern.h). */
#include "format.h"

#include <inttypes.h>
#include <string.h>

/* ---- bytes out and in --------------------------------------------------- */

void pkg_out_le(pkg_out *o, uint64_t v, int bytes) {
    if (o->n + (size_t)bytes > o->cap) {
        o->cap = o->cap ? o->cap * 2 : 4096;
        if (o->cap < o->n + (size_t)bytes) o->cap = o->n + (size_t)bytes;
        o->v = xrealloc(o->v, o->cap);
    }
    pkg_put_le(o->v + o->n, v, bytes);
    o->n += (size_t)bytes;
}

/* The next `bytes` bytes as an integer; false (with the field named in
 * why) when the payload ends first. */
static bool take(pkg_in *in, int bytes, uint64_t *v, const char *field, char *why, size_t cap) {
    if (in->n - in->at < (uint64_t)bytes) {
        snprintf(why, cap, "the section ends inside field %s", field);
        return false;
    }
    *v = pkg_get_le(in->p + in->at, bytes);
    in->at += (uint64_t)bytes;
    return true;
}

static int32_t sext32(uint64_t v) { return (int32_t)(uint32_t)v; }

/* ---- steps -------------------------------------------------------------- */

/* step: u8 kind, u32 label, then COMPUTE: u32 runs (they follow the runs of
 * the compute steps before it); REPEAT: u32 iterations; EXCHANGE and END:
 * nothing (an exchange step's phase is its place among the exchange steps;
 * the tables hold what it moves). */
static const char *const STEP_KIND[] = {"compute", "exchange", "repeat", "end"};

void pkg_steps_encode(pkg_out *o, const low_program *g) {
    pkg_out_le(o, (uint64_t)g->steps.n, 4);
    for (int32_t i = 0; i < g->steps.n; i++) {
        const low_step *s = &g->steps.v[i];
        pkg_out_le(o, s->kind, 1);
        pkg_out_le(o, s->label, 4);
        if (s->kind == LOW_STEP_COMPUTE) pkg_out_le(o, s->count, 4);
        else if (s->kind == LOW_STEP_REPEAT) pkg_out_le(o, s->iterations, 4);
    }
}

static int step_fail(pkg_in_ctx *c, uint32_t i, const char *kind, const char *why) {
    return diag_fail(c->d, "%s: error: section STEP: step %" PRIu32 " (%s): %s", c->path, i, kind, why);
}

int pkg_steps_decode(pkg_in_ctx *c, pkg_in *in, low_program *g) {
    char why[256], kind[24];
    uint64_t n, v;
    if (!take(in, 4, &n, "count", why, sizeof why))
        return diag_fail(c->d, "%s: error: section STEP: %s", c->path, why);
    uint64_t runs = 0, phases = 0;
    for (uint64_t i = 0; i < n; i++) {
        low_step s;
        memset(&s, 0, sizeof s);  /* padding too: a decoded step compares with memcmp */
        snprintf(kind, sizeof kind, "?");
        if (i > INT32_MAX - 1 || !take(in, 1, &v, "kind", why, sizeof why)) return step_fail(c, (uint32_t)i, kind, why);
        s.kind = (uint8_t)v;
        if (s.kind < TS_COUNT(STEP_KIND)) snprintf(kind, sizeof kind, "%s", STEP_KIND[s.kind]);
        else snprintf(kind, sizeof kind, "kind %u", s.kind);
        if (s.kind >= TS_COUNT(STEP_KIND)) return step_fail(c, (uint32_t)i, kind, "unknown step kind");
        if (!take(in, 4, &v, "label", why, sizeof why)) return step_fail(c, (uint32_t)i, kind, why);
        s.label = (uint32_t)v;
        if (s.kind == LOW_STEP_COMPUTE) {
            if (!take(in, 4, &v, "count", why, sizeof why)) return step_fail(c, (uint32_t)i, kind, why);
            if (runs > UINT32_MAX) return step_fail(c, (uint32_t)i, kind, "its runs start past 2^32");
            s.first = (uint32_t)runs;
            s.count = (uint32_t)v;
            runs += v;
        } else if (s.kind == LOW_STEP_EXCHANGE) {
            s.first = (uint32_t)phases++;
        } else if (s.kind == LOW_STEP_REPEAT) {
            if (!take(in, 4, &v, "iterations", why, sizeof why)) return step_fail(c, (uint32_t)i, kind, why);
            s.iterations = (uint32_t)v;
        }
        vec_push(c->a, &g->steps, s);
    }
    if (in->at != in->n)
        return diag_fail(c->d, "%s: error: section STEP: %" PRIu64 " bytes after its %" PRIu64 " steps", c->path,
                         in->n - in->at, n);
    return 0;
}

/* ---- runs --------------------------------------------------------------- */

/* run: u32 tile, u8 kernel, [u8 op], [u8 acc], [u8 grad], u32 n[box], f32 f[floats],
 * then per operand the run uses: u8 dtype, i8 scale, u32 address, i32
 * iteration stride; then i32 stride[i][d] for every bit 4i + d of the
 * kernel's stride mask whose operand i the run uses, operand-major. */
void pkg_runs_encode(pkg_out *o, const low_program *g) {
    pkg_out_le(o, (uint64_t)g->runs.n, 4);
    for (int32_t k = 0; k < g->runs.n; k++) {
        const kernel_run *r = &g->runs.v[k];
        pkg_out_le(o, r->tile, 4);
        pkg_out_le(o, r->kernel, 1);
        if (r->kernel >= KERNEL_K_COUNT) continue; /* a damaged run: the reader stops here */
        const kernel_fields *u = &kernel_used[r->kernel];
        if (u->params & KERNEL_P_OP) pkg_out_le(o, kernel_run_op_byte(r), 1);
        if (u->params & KERNEL_P_ACC) pkg_out_le(o, r->acc, 1);
        if (u->params & KERNEL_P_GRAD) pkg_out_le(o, r->grad, 1);
        for (int d = 0; d < u->box; d++) pkg_out_le(o, r->n[d], 4);
        for (int f = 0; f < u->floats; f++) {
            float v = kernel_run_float(r, f);
            uint32_t bits;
            memcpy(&bits, &v, 4);
            pkg_out_le(o, bits, 4);
        }
        for (int i = 0; i < kernel_operands[r->kernel]; i++) {
            if (!kernel_run_uses(r, i)) continue;
            pkg_out_le(o, r->dt[i], 1);
            pkg_out_le(o, (uint8_t)r->scale[i], 1);
            pkg_out_le(o, r->ptr[i].off, 4);
            pkg_out_le(o, (uint32_t)r->ptr[i].iter_stride, 4);
        }
        for (int i = 0; i < KERNEL_STRIDED_OPERANDS; i++)
            for (int d = 0; d < KERNEL_MAX_BOX; d++)
                if ((u->strides >> (4 * i + d) & 1) && kernel_run_uses(r, i)) pkg_out_le(o, (uint32_t)r->stride[i][d], 4);
    }
}

static int run_fail(pkg_in_ctx *c, uint64_t k, const kernel_run *r, const char *why) {
    char kernel[24];
    if (r->kernel < KERNEL_K_COUNT) snprintf(kernel, sizeof kernel, "%s", kernel_names[r->kernel]);
    else snprintf(kernel, sizeof kernel, "kernel %u", r->kernel);
    return diag_fail(c->d, "%s: error: section RUNS: run %" PRIu64 " (%s on tile %" PRIu32 "): %s", c->path, k, kernel,
                     r->tile, why);
}

/* One run; false with the reason in why. */
static bool run_decode(pkg_in *in, kernel_run *r, char *why, size_t cap) {
    static const char *const OPERAND_FIELD[KERNEL_MAX_OPERANDS][4] = {
#define OPF(i) {"dt[" #i "]", "scale[" #i "]", "ptr[" #i "].off", "ptr[" #i "].iter_stride"}
        OPF(0), OPF(1), OPF(2), OPF(3), OPF(4), OPF(5), OPF(6),
#undef OPF
    };
    static const char *const N_FIELD[KERNEL_MAX_BOX] = {"n[0]", "n[1]", "n[2]", "n[3]"};
    static const char *const F_FIELD[5] = {"f[0]", "f[1]", "f[2]", "f[3]", "f[4]"};
    static const char *const STRIDE_FIELD[KERNEL_STRIDED_OPERANDS][KERNEL_MAX_BOX] = {
#define SF(i) {"stride[" #i "][0]", "stride[" #i "][1]", "stride[" #i "][2]", "stride[" #i "][3]"}
        SF(0), SF(1), SF(2), SF(3),
#undef SF
    };
    _Static_assert(KERNEL_STRIDED_OPERANDS == 4 && KERNEL_MAX_BOX == 4, "STRIDE_FIELD names every stride");
    uint64_t v;
    if (!take(in, 4, &v, "tile", why, cap)) return false;
    r->tile = (uint32_t)v;
    if (!take(in, 1, &v, "kernel", why, cap)) return false;
    r->kernel = (uint8_t)v;
    if (r->kernel >= KERNEL_K_COUNT) {
        snprintf(why, cap, "unknown kernel");
        return false;
    }
    const kernel_fields *u = &kernel_used[r->kernel];
    if (u->params & KERNEL_P_OP) {
        if (!take(in, 1, &v, "op", why, cap)) return false;
        kernel_run_set_op_byte(r, (uint8_t)v);
    }
    if (u->params & KERNEL_P_ACC) {
        if (!take(in, 1, &v, "acc", why, cap)) return false;
        r->acc = (uint8_t)v;
    }
    if (u->params & KERNEL_P_GRAD) {
        if (!take(in, 1, &v, "grad", why, cap)) return false;
        r->grad = (uint8_t)v;
    }
    for (int d = 0; d < u->box; d++) {
        if (!take(in, 4, &v, N_FIELD[d], why, cap)) return false;
        r->n[d] = (uint32_t)v;
    }
    for (int f = 0; f < u->floats; f++) {
        if (!take(in, 4, &v, F_FIELD[f], why, cap)) return false;
        uint32_t bits = (uint32_t)v;
        float x;
        memcpy(&x, &bits, 4);
        if (!kernel_run_set_float(r, f, x)) {
            snprintf(why, cap, "%s: %s", F_FIELD[f],
                     f == 0 ? "a reduction's epilogue is none (0) or a GeLU (1: tanh form, 2: erf form)" : "a residual flag is 0 or 1");
            return false;
        }
    }
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++) r->ptr[i].buf = KERNEL_ABSOLUTE;
    for (int i = 0; i < kernel_operands[r->kernel]; i++) {
        if (!kernel_run_uses(r, i)) continue;
        if (!take(in, 1, &v, OPERAND_FIELD[i][0], why, cap)) return false;
        r->dt[i] = (uint8_t)v;
        if (!take(in, 1, &v, OPERAND_FIELD[i][1], why, cap)) return false;
        r->scale[i] = (int8_t)(uint8_t)v;
        if (!take(in, 4, &v, OPERAND_FIELD[i][2], why, cap)) return false;
        r->ptr[i].off = (uint32_t)v;
        if (!take(in, 4, &v, OPERAND_FIELD[i][3], why, cap)) return false;
        r->ptr[i].iter_stride = sext32(v);
    }
    for (int i = 0; i < KERNEL_STRIDED_OPERANDS; i++)
        for (int d = 0; d < KERNEL_MAX_BOX; d++)
            if ((u->strides >> (4 * i + d) & 1) && kernel_run_uses(r, i)) {
                if (!take(in, 4, &v, STRIDE_FIELD[i][d], why, cap)) return false;
                r->stride[i][d] = sext32(v);
            }
    return true;
}

int pkg_runs_decode(pkg_in_ctx *c, pkg_in *in, low_program *g) {
    char why[256];
    uint64_t n;
    if (!take(in, 4, &n, "count", why, sizeof why))
        return diag_fail(c->d, "%s: error: section RUNS: %s", c->path, why);
    for (uint64_t k = 0; k < n; k++) {
        kernel_run r;
        memset(&r, 0, sizeof r);  /* padding too: a decoded run compares with memcmp */
        if (k > INT32_MAX - 1 || !run_decode(in, &r, why, sizeof why)) return run_fail(c, k, &r, why);
        vec_push(c->a, &g->runs, r);
    }
    if (in->at != in->n)
        return diag_fail(c->d, "%s: error: section RUNS: %" PRIu64 " bytes after its %" PRIu64 " runs", c->path,
                         in->n - in->at, n);
    return 0;
}

/* ---- multicast groups and exchange tables ------------------------------- */

/* GRPS: u32 groups, then per group u32 tiles and that many u32 tiles. */
void pkg_groups_encode(pkg_out *o, const pkg_tables *t) {
    pkg_out_le(o, t->ngroups, 4);
    for (uint32_t g = 0; g < t->ngroups; g++) {
        pkg_out_le(o, t->group_at[g + 1] - t->group_at[g], 4);
        for (uint32_t k = t->group_at[g]; k < t->group_at[g + 1]; k++) pkg_out_le(o, t->group_tiles[k], 4);
    }
}

int pkg_groups_decode(pkg_in_ctx *c, pkg_in *in, pkg_tables *t) {
    char why[256];
    uint64_t n, m, v = 0;
    if (!take(in, 4, &n, "count", why, sizeof why)) return diag_fail(c->d, "%s: error: section GRPS: %s", c->path, why);
    /* Every group takes at least 4 bytes, so a count the bytes cannot hold fails before any allocation. */
    if (n > (in->n - in->at) / 4)
        return diag_fail(c->d, "%s: error: section GRPS: %" PRIu64 " groups do not fit its %" PRIu64 " bytes", c->path, n, in->n);
    t->ngroups = (uint32_t)n;
    t->group_at = arena_alloc(c->a, sizeof(uint32_t) * ((size_t)n + 1));
    t->group_tiles = arena_alloc(c->a, (size_t)(in->n - in->at) + 4); /* at most one tile per 4 bytes */
    uint64_t k = 0;
    for (uint64_t g = 0; g < n; g++) {
        t->group_at[g] = (uint32_t)k;
        if (!take(in, 4, &m, "tiles", why, sizeof why))
            return diag_fail(c->d, "%s: error: section GRPS: group %" PRIu64 ": %s", c->path, g, why);
        if (m > (in->n - in->at) / 4)
            return diag_fail(c->d, "%s: error: section GRPS: group %" PRIu64 ": %" PRIu64 " tiles run past the section", c->path, g, m);
        for (uint64_t j = 0; j < m; j++) {
            take(in, 4, &v, "tile", why, sizeof why);
            t->group_tiles[k++] = (uint32_t)v;
        }
    }
    t->group_at[n] = (uint32_t)k;
    if (in->at != in->n)
        return diag_fail(c->d, "%s: error: section GRPS: %" PRIu64 " bytes after its %" PRIu64 " groups", c->path, in->n - in->at, n);
    return 0;
}

/* XTAB: u32 bytes per tile (every tile of the machine), then the tables,
 * tile after tile. */
void pkg_tables_encode(pkg_out *o, const pkg_tables *t, uint32_t tiles) {
    for (uint32_t k = 0; k < tiles; k++) pkg_out_le(o, t->at ? t->at[k + 1] - t->at[k] : 0, 4);
    uint64_t n = t->at ? t->at[tiles] : 0;
    for (uint64_t k = 0; k < n; k++) pkg_out_le(o, t->bytes[k], 1);
}

int pkg_tables_decode(pkg_in_ctx *c, pkg_in *in, pkg_tables *t, uint32_t tiles) {
    char why[256];
    if ((in->n - in->at) / 4 < tiles)
        return diag_fail(c->d, "%s: error: section XTAB: %" PRIu64 " bytes cannot hold the table sizes of the machine's %" PRIu32 " tiles",
                         c->path, in->n, tiles);
    t->at = arena_alloc(c->a, sizeof(uint64_t) * ((size_t)tiles + 1));
    uint64_t v = 0;
    for (uint32_t k = 0; k < tiles; k++) {
        take(in, 4, &v, "bytes", why, sizeof why);
        t->at[k + 1] = t->at[k] + v;
    }
    if (t->at[tiles] != in->n - in->at)
        return diag_fail(c->d, "%s: error: section XTAB: the tiles' tables add up to %" PRIu64 " bytes, the section holds %" PRIu64,
                         c->path, t->at[tiles], in->n - in->at);
    t->bytes = arena_alloc(c->a, (size_t)t->at[tiles] + 1);
    if (t->at[tiles]) memcpy(t->bytes, in->p + in->at, (size_t)t->at[tiles]);
    in->at = in->n;
    return 0;
}

/* ---- buffer tiles ------------------------------------------------------- */

/* BTIL: per buffer (in BUFS order) its tile bitmap, package_tile_words u64
 * words, tile t at bit t % 64 of word t / 64; bits past the machine's tiles
 * are 0. A package built without them holds every buffer on every tile. */
void pkg_buf_tiles_encode(pkg_out *o, const package *p) {
    uint32_t w = package_tile_words(&p->machine), tiles = p->machine.tiles;
    for (int32_t b = 0; b < p->prog.bufs.n; b++)
        for (uint32_t k = 0; k < w; k++) {
            uint64_t all = tiles - 64 * k >= 64 ? ~0ull : (1ull << (tiles - 64 * k)) - 1;
            pkg_out_le(o, p->buf_tiles ? p->buf_tiles[(size_t)b * w + k] : all, 8);
        }
}

int pkg_buf_tiles_decode(pkg_in_ctx *c, pkg_in *in, package *p) {
    uint32_t w = package_tile_words(&p->machine), tiles = p->machine.tiles;
    uint64_t nb = (uint64_t)p->prog.bufs.n, want = nb * w * 8;
    if (in->n != want)
        return diag_fail(c->d, "%s: error: section BTIL: %" PRIu64 " bytes, but %" PRIu64 " buffers of %" PRIu32
                         " tiles take %" PRIu64, c->path, in->n, nb, tiles, want);
    p->buf_tiles = arena_alloc(c->a, sizeof(uint64_t) * (size_t)(nb * w + 1));
    for (uint64_t i = 0; i < nb * w; i++) {
        uint64_t v = pkg_get_le(in->p + 8 * i, 8), k = i % w;
        if (tiles - 64 * k < 64 && v >> (tiles - 64 * k))
            return diag_fail(c->d, "%s: error: section BTIL: buffer %" PRIu64 " names a tile past the machine's %" PRIu32,
                             c->path, i / w, tiles);
        p->buf_tiles[i] = v;
    }
    in->at = in->n;
    return 0;
}
