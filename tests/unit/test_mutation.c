/* test_mutation.c: the exact check catches every corruption that changes an
 * output bit. Each row of the encoded exchange tables is corrupted (a
 * receive row's destination pointer moved by 2 bytes, a send row's length
 * cut by 2 bytes, a send row moved to the next tile, which then sends it
 * from its own memory) and each kernel run's operands are moved by one
 * element, and the top exponent bit of each weight segment's first element
 * is flipped (its checksum written anew, as a forger would), one at a time,
 * in small f16 and fp8 models of every zoo family.
 * A mutant the package loader refuses is caught there; one the loader
 * accepts is simulated, and if any output bit differs from the unmutated
 * run, the comparison tessel check makes (bit for bit against the
 * plan-exact reference) must fail. A sample of the caught ones also goes
 * through driver_check with --locate, which must name an op.
 *
 * CI runs a fixed-seed sample of each model's corruptions; the full sweep
 * (every corruption, c600 models too) runs by hand:
 *     TESSEL_MUTATION_SWEEP=full build/tests/test_mutation
 * It prints per model the counts and what the old whole-tensor check
 * (cosine and rms thresholds) would have caught. A c600 training step has
 * some 50,000 corruptions (most of an hour on 2 cores), so the full sweep can
 * be spread over processes, each in its own directory (a sweep writes
 * mutant.tpk in its working directory):
 *     TESSEL_MUTATION_MACHINE=tiny|c600   that half only
 *     TESSEL_MUTATION_ONLY=text           the models whose name contains text
 *     TESSEL_MUTATION_SHARD=k/n           corruptions i with i % n == k
 * and reports its progress on stderr every 5,000 corruptions. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/driver.h"
#include "models/models.h"

typedef enum { MUT_RECV_DST, MUT_SEND_LEN, MUT_SEND_TILE, MUT_RUN_OPERAND, MUT_WEIGHT } mut_kind;
static const char *const MUT_NAMES[] = {"receive pointer", "send length", "send tile", "run operand", "weight bit"};

typedef struct mutation {
    mut_kind kind;
    int32_t index;    /* run, tile, or weight segment */
    int32_t block;    /* tables: the tile's block */
    int32_t row;      /* tables: the send or receive row */
    int operand;      /* runs */
} mutation;

/* ---- the tables as rows, to edit and encode again ---------------------- */

typedef struct ed_send {
    pkg_xt_send s;
    int32_t stride;
} ed_send;
typedef struct ed_recv {
    pkg_xt_recv r;
    int32_t stride;
} ed_recv;
typedef struct ed_block {
    uint32_t phase, ns, nr;
    ed_send *s;
    ed_recv *r;
} ed_block;
typedef struct ed_tile {
    uint32_t nb;
    ed_block *b;
} ed_tile;
typedef struct tables_ed {
    kernel_xt_format f;
    uint32_t tiles;
    ed_tile *t;
} tables_ed;

static void ed_decode(const package *p, tables_ed *e) {
    kernel_xt_format_init(&e->f, &p->machine, p->tables.ngroups);
    e->tiles = p->machine.tiles;
    e->t = calloc(e->tiles, sizeof(ed_tile));
    for (uint32_t t = 0; t < e->tiles; t++) {
        ed_tile *et = &e->t[t];
        for (uint64_t at = p->tables.at[t]; at < p->tables.at[t + 1];) {
            const uint8_t *b = p->tables.bytes + at;
            pkg_xt_header h;
            pkg_xt_get_header(b, &h);
            et->b = realloc(et->b, sizeof(ed_block) * (et->nb + 1));
            ed_block *eb = &et->b[et->nb++];
            eb->phase = h.phase, eb->ns = h.nsend, eb->nr = h.nrecv;
            eb->s = calloc(h.nsend + 1, sizeof(ed_send));
            eb->r = calloc(h.nrecv + 1, sizeof(ed_recv));
            const uint8_t *row = b + KERNEL_XT_HEADER_BYTES;
            for (uint32_t i = 0; i < h.nsend; i++, row += e->f.send_bytes) pkg_xt_get_send(&e->f, row, &eb->s[i].s);
            for (uint32_t i = 0; i < h.nrecv; i++, row += e->f.recv_bytes) pkg_xt_get_recv(&e->f, row, &eb->r[i].r);
            for (uint32_t i = 0; i < h.npatch; i++, row += KERNEL_XT_PATCH_BYTES) {
                pkg_xt_patch pr;
                pkg_xt_get_patch(row, &pr);
                if (pr.row & PKG_XT_RECV_ROW) eb->r[pr.row & ~PKG_XT_RECV_ROW].stride = pr.stride;
                else eb->s[pr.row].stride = pr.stride;
            }
            at += kernel_xt_block_bytes(&e->f, h.nsend, h.nrecv, h.npatch);
        }
    }
}

/* The edited rows as p's tables (malloc'd: *bytes and *at, freed by the caller). */
static void ed_encode(const tables_ed *e, package *p, uint8_t **bytes, uint64_t **at) {
    uint64_t total = 0;
    *at = calloc(e->tiles + 1, sizeof(uint64_t));
    for (uint32_t t = 0; t < e->tiles; t++) {
        for (uint32_t k = 0; k < e->t[t].nb; k++) {
            const ed_block *b = &e->t[t].b[k];
            uint32_t np = 0;
            for (uint32_t i = 0; i < b->ns; i++) np += b->s[i].stride != 0;
            for (uint32_t i = 0; i < b->nr; i++) np += b->r[i].stride != 0;
            total += b->ns + b->nr ? kernel_xt_block_bytes(&e->f, b->ns, b->nr, np) : 0;
        }
        (*at)[t + 1] = total;
    }
    *bytes = malloc(total + 1);
    uint8_t *out = *bytes;
    for (uint32_t t = 0; t < e->tiles; t++)
        for (uint32_t k = 0; k < e->t[t].nb; k++) {
            const ed_block *b = &e->t[t].b[k];
            if (!b->ns && !b->nr) continue;  /* a block whose last row moved away */
            uint32_t np = 0;
            for (uint32_t i = 0; i < b->ns; i++) np += b->s[i].stride != 0;
            for (uint32_t i = 0; i < b->nr; i++) np += b->r[i].stride != 0;
            pkg_xt_header h = {b->phase, b->ns, b->nr, np};
            pkg_xt_put_header(out, &h);
            out += KERNEL_XT_HEADER_BYTES;
            for (uint32_t i = 0; i < b->ns; i++, out += e->f.send_bytes) pkg_xt_put_send(&e->f, out, &b->s[i].s);
            for (uint32_t i = 0; i < b->nr; i++, out += e->f.recv_bytes) pkg_xt_put_recv(&e->f, out, &b->r[i].r);
            for (uint32_t i = 0; i < b->ns; i++)
                if (b->s[i].stride) {
                    pkg_xt_patch pr = {i, b->s[i].stride};
                    pkg_xt_put_patch(out, &pr);
                    out += KERNEL_XT_PATCH_BYTES;
                }
            for (uint32_t i = 0; i < b->nr; i++)
                if (b->r[i].stride) {
                    pkg_xt_patch pr = {PKG_XT_RECV_ROW | i, b->r[i].stride};
                    pkg_xt_put_patch(out, &pr);
                    out += KERNEL_XT_PATCH_BYTES;
                }
        }
    p->tables.bytes = *bytes;
    p->tables.at = *at;
}

static void ed_free(tables_ed *e) {
    for (uint32_t t = 0; t < e->tiles; t++) {
        for (uint32_t k = 0; k < e->t[t].nb; k++) {
            free(e->t[t].b[k].s);
            free(e->t[t].b[k].r);
        }
        free(e->t[t].b);
    }
    free(e->t);
}

/* Moves send row `row` of tile's block k to tile `to`'s block of the same
 * phase (made if it has none), in slot order there. */
static void ed_move_send(tables_ed *e, uint32_t tile, int32_t k, int32_t row, uint32_t to) {
    ed_block *from = &e->t[tile].b[k];
    ed_send s = from->s[row];
    memmove(from->s + row, from->s + row + 1, sizeof(ed_send) * (from->ns - (uint32_t)row - 1));
    from->ns--;
    ed_tile *dt = &e->t[to];
    uint32_t j = 0;
    while (j < dt->nb && dt->b[j].phase < from->phase) j++;
    if (j == dt->nb || dt->b[j].phase != from->phase) {
        uint32_t phase = from->phase;  /* from may move with the realloc when tile == to: it never is */
        dt->b = realloc(dt->b, sizeof(ed_block) * (dt->nb + 1));
        memmove(dt->b + j + 1, dt->b + j, sizeof(ed_block) * (dt->nb - j));
        dt->nb++;
        dt->b[j] = (ed_block){phase, 0, 0, calloc(1, sizeof(ed_send)), calloc(1, sizeof(ed_recv))};
    }
    ed_block *b = &dt->b[j];
    b->s = realloc(b->s, sizeof(ed_send) * (b->ns + 1));
    uint32_t at = 0;
    while (at < b->ns && b->s[at].s.slot <= s.s.slot) at++;
    memmove(b->s + at + 1, b->s + at, sizeof(ed_send) * (b->ns - at));
    b->s[at] = s;
    b->ns++;
}

typedef struct subject {
    graph *g;
    package p;        /* parsed, mutated in place and restored */
    int32_t nout;
    int64_t *numel;
    float **base;     /* unmutated simulator outputs */
    float **emu;      /* the plan-exact reference */
} subject;

typedef struct tally {
    int64_t tried, rejected, changed, caught, old_caught, located;
} tally;

static void load(subject *s, const char *model, const char *mach) {
    memset(s, 0, sizeof *s);
    diag d = {0};
    s->g = models_load(model, &d);
    if (!s->g) fail_msg("%s", d.text);
    machine m;
    assert_int_equal(machine_preset(mach, &m), 0);
    package built;
    compile_info ci;
    compile_options co = {.model = model, .search_steps = 8, .quiet = true};
    if (driver_compile(s->g, &m, &co, &built, &ci, &d)) fail_msg("%s: %s", model, d.text);
    compile_info_free(&ci);
    size_t n;
    uint8_t *img = package_image(&built, &n, "test", NULL);
    package_free(&built);
    if (package_parse(img, n, model, &s->p, &d)) fail_msg("%s", d.text);
    free(img);
    s->nout = graph_outputs(s->g, NULL, 0);
    int32_t *ids = calloc((size_t)s->nout + 1, sizeof(int32_t));
    graph_outputs(s->g, ids, s->nout);
    s->numel = calloc((size_t)s->nout + 1, sizeof(int64_t));
    for (int32_t j = 0; j < s->nout; j++) s->numel[j] = graph_type_numel(&graph_val(s->g, ids[j])->type);
    free(ids);
    /* The inputs every run uses: the seeded defaults. */
    int32_t nin = graph_inputs(s->g, NULL, 0);
    int32_t *in_ids = calloc((size_t)nin + 1, sizeof(int32_t));
    graph_inputs(s->g, in_ids, nin);
    float **in = calloc((size_t)nin + 1, sizeof(float *));
    for (int32_t k = 0; k < nin; k++) {
        in[k] = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(s->g, in_ids[k])->type));
        graph_input_default(s->g, in_ids[k], k, in[k]);
    }
    s->base = calloc((size_t)s->nout + 1, sizeof(float *));
    s->emu = calloc((size_t)s->nout + 1, sizeof(float *));
    sim_options so = {.quiet = true};
    sim_stats st;
    assert_int_equal(sim_run(&s->p, &so, in, s->base, &st, &d), 0);
    sim_stats_free(&st);
    graph_numerics plan;
    if (graph_numerics_parse(s->g, s->p.meta, model, &plan, &d)) fail_msg("%s", d.text);
    ref_options eo = {.plan = &plan, .quiet = true};
    assert_int_equal(ref_run(s->g, &eo, in, s->emu, &d), 0);
    graph_numerics_free(&plan);
    /* The precondition of everything below: unmutated, the check is exact. */
    for (int32_t j = 0; j < s->nout; j++) {
        num_mismatch mm = num_mismatches(s->base[j], s->emu[j], (size_t)s->numel[j]);
        if (mm.count) fail_msg("%s on %s: unmutated output %d differs from the plan-exact reference in %lld elements", model,
                               mach, (int)j, (long long)mm.count);
    }
    for (int32_t k = 0; k < nin; k++) free(in[k]);
    free(in);
    free(in_ids);
}

static void unload(subject *s) {
    for (int32_t j = 0; j < s->nout; j++) {
        free(s->base[j]);
        free(s->emu[j]);
    }
    free(s->base);
    free(s->emu);
    free(s->numel);
    package_free(&s->p);
    graph_free(s->g);
}

/* Every corruption of the package, in a fixed order. */
static mutation *mutations(const package *p, int64_t *n) {
    tables_ed e;
    ed_decode(p, &e);
    int64_t cap = KERNEL_MAX_OPERANDS * (int64_t)p->prog.runs.n + p->segments.n + 1, k = 0;
    for (uint32_t t = 0; t < e.tiles; t++)
        for (uint32_t b = 0; b < e.t[t].nb; b++) cap += 2 * e.t[t].b[b].ns + e.t[t].b[b].nr;
    mutation *m = malloc(sizeof(mutation) * (size_t)cap);
    for (uint32_t t = 0; t < e.tiles; t++)
        for (uint32_t b = 0; b < e.t[t].nb; b++) {
            const ed_block *eb = &e.t[t].b[b];
            for (uint32_t i = 0; i < eb->nr; i++) m[k++] = (mutation){MUT_RECV_DST, (int32_t)t, (int32_t)b, (int32_t)i, 0};
            for (uint32_t i = 0; i < eb->ns; i++) {
                if (eb->s[i].s.bytes > 2) m[k++] = (mutation){MUT_SEND_LEN, (int32_t)t, (int32_t)b, (int32_t)i, 0};
                if (p->machine.tiles > 1) m[k++] = (mutation){MUT_SEND_TILE, (int32_t)t, (int32_t)b, (int32_t)i, 0};
            }
        }
    for (int32_t i = 0; i < p->prog.runs.n; i++)
        for (int op = 0; op < KERNEL_MAX_OPERANDS; op++)
            if (kernel_run_uses(&p->prog.runs.v[i], op)) m[k++] = (mutation){MUT_RUN_OPERAND, i, 0, 0, op};
    for (int32_t i = 0; i < p->segments.n; i++)
        if (p->segments.v[i].bytes >= 2) m[k++] = (mutation){MUT_WEIGHT, i, 0, 0, 0};
    ed_free(&e);
    *n = k;
    return m;
}

/* One element of operand i: its dtype's size (a copy moves bytes: one). */
static uint32_t element(const kernel_run *r, int i) {
    return r->kernel == KERNEL_K_COPY ? 1u : (uint32_t)dtype_bytes((dtype)r->dt[i]);
}

/* The image of p with m applied (sign +1) or its mirror image (sign -1,
 * for a shift that leaves the tile); p is left as it was. */
static uint8_t *mutant_image(package *p, const mutation *m, int sign, size_t *len) {
    if (m->kind == MUT_RUN_OPERAND) {
        kernel_run *r = &p->prog.runs.v[m->index];
        kernel_run saved = *r;
        r->ptr[m->operand].off += (uint32_t)sign * element(r, m->operand);
        uint8_t *img = package_image(p, len, "test", NULL);
        *r = saved;
        return img;
    }
    if (m->kind == MUT_WEIGHT) { /* byte 1 of an element holds an f16's exponent; of an f8 pair, the second */
        uint8_t *at = p->blob + p->segments.v[m->index].blob_off + 1;
        *at ^= 0x40;
        uint8_t *img = package_image(p, len, "test", NULL);
        *at ^= 0x40;
        return img;
    }
    tables_ed e;
    ed_decode(p, &e);
    ed_block *b = &e.t[m->index].b[m->block];
    switch (m->kind) {
    case MUT_RECV_DST: b->r[m->row].r.addr += (uint32_t)(2 * sign); break;
    case MUT_SEND_LEN: b->s[m->row].s.bytes -= 2; break;
    case MUT_SEND_TILE:
        ed_move_send(&e, (uint32_t)m->index, m->block, m->row,
                     ((uint32_t)m->index + (sign > 0 ? 1 : p->machine.tiles - 1)) % p->machine.tiles);
        break;
    default: break;
    }
    pkg_tables saved = p->tables;
    uint8_t *bytes;
    uint64_t *at;
    ed_encode(&e, p, &bytes, &at);
    uint8_t *img = package_image(p, len, "test", NULL);
    p->tables = saved;
    free(bytes);
    free(at);
    ed_free(&e);
    return img;
}

/* The old check: cosine and rms thresholds against the rounded reference. */
static bool old_check_passes(const num_diff *e, bool fp8) {
    return e->nonfinite == 0 && e->cosine >= (fp8 ? 0.995 : 0.99999) && e->rms_err <= (fp8 ? 0.1 : 0.003) * e->want_rms + 1e-6;
}

static bool graph_has_fp8(const graph *g) {
    for (int32_t v = 0; v < g->values.n; v++)
        if (dtype_is_f8(graph_val(g, v)->type.dtype)) return true;
    return false;
}

/* Runs mutant m: rejected by the loader, or simulated and compared. */
static void try_one(subject *s, const mutation *m, tally *t, bool locate_it) {
    package mutant;
    diag d = {0};
    bool loaded = false;
    for (int sign = 1; sign >= -1 && !loaded; sign -= 2) {
        if (sign < 0 && (m->kind == MUT_SEND_LEN || m->kind == MUT_WEIGHT)) break;
        size_t n;
        uint8_t *img = mutant_image(&s->p, m, sign, &n);
        memset(&d, 0, sizeof d);
        loaded = package_parse(img, n, "mutant.tpk", &mutant, &d) == 0;
        free(img);
    }
    t->tried++;
    if (!loaded) {
        t->rejected++;
        return;
    }
    int32_t nin = graph_inputs(s->g, NULL, 0);
    int32_t *in_ids = calloc((size_t)nin + 1, sizeof(int32_t));
    graph_inputs(s->g, in_ids, nin);
    float **in = calloc((size_t)nin + 1, sizeof(float *)), **got = calloc((size_t)s->nout + 1, sizeof(float *));
    for (int32_t k = 0; k < nin; k++) {
        in[k] = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(s->g, in_ids[k])->type));
        graph_input_default(s->g, in_ids[k], k, in[k]);
    }
    sim_options so = {.quiet = true};
    sim_stats st;
    assert_int_equal(sim_run(&mutant, &so, in, got, &st, &d), 0);
    sim_stats_free(&st);
    bool changed = false, caught = false, old_caught = false, fp8 = graph_has_fp8(s->g);
    for (int32_t j = 0; j < s->nout; j++) {
        changed |= num_mismatches(got[j], s->base[j], (size_t)s->numel[j]).count > 0;
        caught |= num_mismatches(got[j], s->emu[j], (size_t)s->numel[j]).count > 0;
        num_diff e = num_compare(got[j], s->emu[j], (size_t)s->numel[j]);
        old_caught |= !old_check_passes(&e, fp8);
    }
    if (changed) {
        t->changed++;
        t->caught += caught;
        t->old_caught += old_caught;
        if (!caught)
            fail_msg("mutation (%s) of %s %d (block %d, row %d, operand %d) changes an output but the check passes",
                     MUT_NAMES[m->kind], m->kind == MUT_RUN_OPERAND ? "run" : "tile", (int)m->index, (int)m->block, (int)m->row,
                     m->operand);
        if (locate_it) {
            /* The whole check, as the command runs it, names an op. */
            check_options co = {.package = "mutant.tpk", .inputs = in, .sim = {.quiet = true}};
            check_result r;
            assert_int_equal(driver_check(s->g, &mutant, &co, &r, &d), 0);
            assert_false(r.pass);
            assert_true(r.located && r.loc.found);
            t->located++;
            check_result_free(&r);
        }
    }
    for (int32_t k = 0; k < nin; k++) free(in[k]);
    for (int32_t j = 0; j < s->nout; j++) free(got[j]);
    free(in);
    free(got);
    free(in_ids);
    package_free(&mutant);
}

/* A fixed-seed sample: the same corruptions every run. */
static uint64_t next_rand(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void sweep(const char *model, const char *mach, int64_t sample) {
    const char *only = getenv("TESSEL_MUTATION_ONLY"); /* a substring of the model, to run one by hand */
    const char *on = getenv("TESSEL_MUTATION_MACHINE"); /* tiny or c600: that half only */
    if ((only && !strstr(model, only)) || (on && strcmp(mach, on) != 0)) return;
    subject s;
    load(&s, model, mach);
    int64_t n;
    mutation *all = mutations(&s.p, &n);
    tally t = {0};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    if (sample <= 0 || sample >= n) {
        int64_t k = 0, of = 1;
        const char *shard = getenv("TESSEL_MUTATION_SHARD");
        if (shard && (sscanf(shard, "%lld/%lld", (long long *)&k, (long long *)&of) != 2 || of < 1 || k < 0 || k >= of))
            fail_msg("TESSEL_MUTATION_SHARD=%s: expected k/n with 0 <= k < n", shard);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int64_t i = k; i < n; i += of) {
            try_one(&s, &all[i], &t, i % 97 == 0);
            if (t.tried % 5000 == 0) {
                clock_gettime(CLOCK_MONOTONIC, &t1);
                fprintf(stderr, "mutation sweep: %s on %s: %lld of %lld corruptions tried, %.0f s\n", model, mach,
                        (long long)t.tried, (long long)((n - k + of - 1) / of),
                        (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
            }
        }
    } else {
        for (int64_t i = 0; i < sample; i++) try_one(&s, &all[next_rand(&seed) % (uint64_t)n], &t, i % 25 == 0);
    }
    printf("mutation sweep: %s on %s: %lld corruptions (of %lld), %lld refused by the loader, %lld change an output, "
           "%lld caught (the whole-tensor check: %lld, %.1f%%), %lld located\n",
           model, mach, (long long)t.tried, (long long)n, (long long)t.rejected, (long long)t.changed, (long long)t.caught,
           (long long)t.old_caught, t.changed ? 100.0 * (double)t.old_caught / (double)t.changed : 100.0,
           (long long)t.located);
    assert_int_equal(t.caught, t.changed);
    assert_true(t.changed > 0); /* a sweep that changes nothing tests nothing */
    free(all);
    unload(&s);
}

static bool full(void) {
    const char *e = getenv("TESSEL_MUTATION_SWEEP");
    return e && strcmp(e, "full") == 0;
}

/* Every zoo family, f16 and fp8, on tiny; the shapes and others. */
static const char *const TINY[] = {
    "zoo:mlp:tokens=37,width=96,hidden=200,precision=fp8",
    "zoo:mlp:tokens=37,width=96,hidden=200",
    "zoo:mlp:tokens=19,width=40,hidden=56,precision=fp8,acc=f32",
    "zoo:qk:heads=3,queries=23,keys=31,channels=40,qk=fp8",
    "zoo:qk:heads=2,queries=9,keys=13,channels=24,pv=fp8",
    "zoo:qk:heads=2,queries=9,keys=13,channels=24",
    "zoo:vit:layers=2,width=64,heads=2,mlp=128,image=32,patch=8,precision=fp8",
    "zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4",
    /* Training steps: the weight updates run in their gradient GEMM's epilogue
     * (GEMM_EPI, ADAMW_APPLY; with K split, REDUCE_EPI), except under clipping. */
    "zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=adamw",
    "zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=sgd",
    "zoo:train-mlp:tokens=512,width=16,hidden=24,optimizer=adamw,state=bf16",
    "zoo:train-mlp:tokens=12,width=24,hidden=40,optimizer=adamw,clip=global_norm",
};

static const char *const C600[] = {
    "zoo:mlp:tokens=37,width=96,hidden=200,precision=fp8",
    "zoo:mlp:tokens=29,width=80,hidden=144",
    "zoo:qk:heads=3,queries=23,keys=31,channels=40,qk=fp8",
    "zoo:vit:layers=2,width=64,heads=2,mlp=128,image=32,patch=8,precision=fp8",
    "zoo:vit:layers=1,width=48,heads=3,mlp=96,image=24,patch=6",
    "zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=adamw,clip=global_norm",
    "zoo:train-mlp:tokens=16,width=48,hidden=64,optimizer=sgd",
    "zoo:train-mlp:tokens=16,width=48,hidden=64,optimizer=adamw,steps=2",
};

static void sweep_tiny(void **state) {
    (void)state;
    for (size_t i = 0; i < TS_COUNT(TINY); i++) sweep(TINY[i], "tiny", full() ? 0 : 250);
}

static void sweep_c600(void **state) {
    (void)state;
    for (size_t i = 0; i < TS_COUNT(C600); i++) sweep(C600[i], "c600", full() ? 0 : 60);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* a long sweep reports as it goes */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sweep_tiny),
        cmocka_unit_test(sweep_c600),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
