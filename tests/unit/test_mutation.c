/* test_mutation.c: the exact check catches every corruption that changes an
 * output bit. Each exchange fragment is corrupted (destination offset moved
 * by 2 bytes, length cut by 2 bytes, source tile moved by one) and each
 * kernel run's operands are moved by one element, one at a time, in small
 * f16 and fp8 models of every zoo family. A mutant the package loader
 * refuses is caught there; one the loader accepts is simulated, and if any
 * output bit differs from the unmutated run, the comparison tessel check
 * makes (bit for bit against the plan-exact reference) must fail. A sample
 * of the caught ones also goes through tessel_check with --locate, which
 * must name an op.
 *
 * CI runs a fixed-seed sample of each model's corruptions; the full sweep
 * (every corruption, c600 models too) runs by hand:
 *     TESSEL_MUTATION_SWEEP=full build/tests/test_mutation
 * It prints per model the counts and what the old whole-tensor check
 * (cosine and rms thresholds) would have caught. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cli/tessel.h"
#include "models/models.h"

typedef enum { MUT_FRAG_DST, MUT_FRAG_LEN, MUT_FRAG_SRC, MUT_RUN_OPERAND } mut_kind;

typedef struct mutation {
    mut_kind kind;
    int32_t index;    /* fragment or run */
    int operand;      /* runs */
} mutation;

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
    if (tessel_compile(s->g, &m, &co, &built, &ci, &d)) fail_msg("%s: %s", model, d.text);
    compile_info_free(&ci);
    size_t n;
    uint8_t *img = package_image(&built, &n);
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
    int64_t cap = 3 * (int64_t)p->prog.frags.n + LOW_MAX_OPERANDS * (int64_t)p->prog.runs.n + 1, k = 0;
    mutation *m = malloc(sizeof(mutation) * (size_t)cap);
    for (int32_t i = 0; i < p->prog.frags.n; i++) {
        m[k++] = (mutation){MUT_FRAG_DST, i, 0};
        if (p->prog.frags.v[i].bytes > 2) m[k++] = (mutation){MUT_FRAG_LEN, i, 0};
        if (p->machine.tiles > 1) m[k++] = (mutation){MUT_FRAG_SRC, i, 0};
    }
    for (int32_t i = 0; i < p->prog.runs.n; i++)
        for (int op = 0; op < LOW_MAX_OPERANDS; op++)
            if (low_run_uses(&p->prog.runs.v[i], op)) m[k++] = (mutation){MUT_RUN_OPERAND, i, op};
    *n = k;
    return m;
}

/* One element of operand i: its dtype's size (a copy moves bytes: one). */
static uint32_t element(const low_run *r, int i) {
    return r->kernel == LOW_K_COPY ? 1u : (uint32_t)dtype_bytes((dtype)r->dt[i]);
}

/* Applies m (sign +1) or its mirror image (sign -1, for a shift that
 * leaves the tile); undo restores the saved record. */
static void apply(package *p, const mutation *m, int sign) {
    if (m->kind == MUT_RUN_OPERAND) {
        low_run *r = &p->prog.runs.v[m->index];
        r->ptr[m->operand].off += (uint32_t)sign * element(r, m->operand);
        return;
    }
    low_frag *f = &p->prog.frags.v[m->index];
    switch (m->kind) {
    case MUT_FRAG_DST: f->dst.off += (uint32_t)(2 * sign); break;
    case MUT_FRAG_LEN: f->bytes -= 2; break;
    case MUT_FRAG_SRC: f->src_tile = (f->src_tile + (sign > 0 ? 1 : p->machine.tiles - 1)) % p->machine.tiles; break;
    default: break;
    }
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
    low_run run_saved;
    low_frag frag_saved;
    if (m->kind == MUT_RUN_OPERAND) run_saved = s->p.prog.runs.v[m->index];
    else frag_saved = s->p.prog.frags.v[m->index];
    package mutant;
    diag d = {0};
    bool loaded = false;
    for (int sign = 1; sign >= -1 && !loaded; sign -= 2) {
        if (sign < 0 && m->kind == MUT_FRAG_LEN) break;
        apply(&s->p, m, sign);
        size_t n;
        uint8_t *img = package_image(&s->p, &n);
        memset(&d, 0, sizeof d);
        loaded = package_parse(img, n, "mutant.tpk", &mutant, &d) == 0;
        free(img);
        if (m->kind == MUT_RUN_OPERAND) s->p.prog.runs.v[m->index] = run_saved;
        else s->p.prog.frags.v[m->index] = frag_saved;
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
        if (!caught) fail_msg("mutation %d of %s %d (operand %d) changes an output but the check passes", (int)m->kind,
                              m->kind == MUT_RUN_OPERAND ? "run" : "fragment", (int)m->index, m->operand);
        if (locate_it) {
            /* The whole check, as the command runs it, names an op. */
            check_options co = {.package = "mutant.tpk", .inputs = in, .sim = {.quiet = true}};
            check_result r;
            assert_int_equal(tessel_check(s->g, &mutant, &co, &r, &d), 0);
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
    if (only && !strstr(model, only)) return;
    subject s;
    load(&s, model, mach);
    int64_t n;
    mutation *all = mutations(&s.p, &n);
    tally t = {0};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    if (sample <= 0 || sample >= n) {
        for (int64_t i = 0; i < n; i++) try_one(&s, &all[i], &t, i % 97 == 0);
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
    "zoo:mlp:tokens=19,width=40,hidden=56,precision=fp8",
    "zoo:qk:heads=3,queries=23,keys=31,channels=40,qk=fp8",
    "zoo:qk:heads=2,queries=9,keys=13,channels=24,pv=fp8",
    "zoo:qk:heads=2,queries=9,keys=13,channels=24",
    "zoo:vit:layers=2,width=64,heads=2,mlp=128,image=32,patch=8,precision=fp8",
    "zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4",
    "zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=adamw",
    "zoo:train-mlp:tokens=24,width=40,hidden=72,optimizer=sgd",
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
