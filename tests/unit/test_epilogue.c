/* test_epilogue.c: the optimizer epilogue fusion (docs/epilogue.md).
 *
 *   - every refusal rule, each with a model that triggers it, and the legal
 *     cases it must not refuse;
 *   - P1: the fused step equals the unfused one bit for bit through the
 *     simulator, on machines whose grids partition the gradient differently,
 *     with and without K split across tiles;
 *   - AdamW and SGD against PyTorch's formulas over several steps (bias
 *     correction included), computed here in double, through the simulator;
 *   - P6: the precision of an f32 gradient against a bf16 one over 20 steps,
 *     with f32 and bf16 optimizer state (the seed's oracles);
 *   - the proof of non-materialization: it holds on fused packages and fails
 *     on unfused ones, from the package alone;
 *   - the rewritten graph's text round-trips and computes what the original
 *     does; packages are byte-identical from run to run. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "models/models.h"

static graph *parse(const char *text) {
    diag d = {0};
    graph *g = graph_parse("test.tsl", text, strlen(text), &d);
    if (!g) fail_msg("%s", d.text);
    return g;
}

static const fuse_candidate *candidate(const fuse_plan *fp, const graph *g, const char *consumer) {
    for (int32_t i = 0; i < fp->n; i++)
        if (strcmp(graph_op_name(g, fp->c[i].consumer), consumer) == 0) return &fp->c[i];
    fail_msg("no candidate '%s'", consumer);
    return NULL;
}

/* ---- the rules ---------------------------------------------------------------------------- */

#define HEAD                                      \
    "graph t\n"                                   \
    "input %x : f16[16, 8]\n"                     \
    "input %d : f16[16, 4]\n"                     \
    "param %w : f32[8, 4] = normal(0.0, 0.1, seed = 1)\n" \
    "param %m : f32[8, 4] = zeros\n"              \
    "param %v : f32[8, 4] = zeros\n"

#define GRAD "%g = matmul(%x, %d) {transpose_a = true} : f32[8, 4]\n"
#define ADAMW(gv) "%w_new, %m_new, %v_new = adamw(%w, " gv ", %m, %v) {lr = 0.001} : f32[8, 4], f32[8, 4], f32[8, 4]\n"

typedef struct rule_case {
    const char *name, *text, *consumer;
    fuse_rule rule;
    const char *why; /* a substring of the reason */
} rule_case;

static const rule_case RULES[] = {
    {"adamw", HEAD GRAD ADAMW("%g") "output %w_new, %m_new, %v_new\n", "w_new", FUSE_OK, "the update runs in the GEMM's epilogue"},
    {"sgd momentum", HEAD GRAD "%w_new, %b_new = sgd(%w, %g, %m) {lr = 0.1, momentum = 0.9} : f32[8, 4], f32[8, 4]\noutput %w_new, %b_new\n",
     "w_new", FUSE_OK, "element locality"},
    {"plain sgd", HEAD GRAD "%w_new = sgd(%w, %g) {lr = 0.1} : f32[8, 4]\noutput %w_new\n", "w_new", FUSE_OK, "epilogue"},
    {"tied", HEAD "input %x2 : f16[16, 8]\n" GRAD "%g2 = matmul(%x2, %d) {transpose_a = true} : f32[8, 4]\n"
                  "%gs = add(%g, %g2) : f32[8, 4]\n" ADAMW("%gs") "output %w_new, %m_new, %v_new\n",
     "w_new", FUSE_TIED, "sum of 2 products"},
    {"multi-use", HEAD GRAD ADAMW("%g") "%n = reduce_sum(%g) {axes = [0, 1]} : f32[]\noutput %w_new, %m_new, %v_new, %n\n", "w_new",
     FUSE_MULTI_USE, "also read by reduce_sum 'n'"},
    {"escapes", HEAD GRAD ADAMW("%g") "output %w_new, %m_new, %v_new, %g\n", "w_new", FUSE_ESCAPES, "graph output"},
    {"clip (P2)", HEAD GRAD "%gc = global_norm_clip(%g) {max_norm = 1.0} : f32[8, 4]\n" ADAMW("%gc") "output %w_new, %m_new, %v_new\n",
     "w_new", FUSE_CLIP, "(P2)"},
    {"clip, plain sgd", HEAD GRAD "%gc = global_norm_clip(%g) {max_norm = 1.0} : f32[8, 4]\n%w_new = sgd(%w, %gc) {lr = 0.1} : f32[8, 4]\n"
                        "output %w_new\n",
     "w_new", FUSE_CLIP_SCALE, "clipping equals scaling the learning rate"},
    {"clip, sgd momentum", HEAD GRAD "%gc = global_norm_clip(%g) {max_norm = 1.0} : f32[8, 4]\n"
                           "%w_new, %b_new = sgd(%w, %gc, %m) {lr = 0.1, momentum = 0.9} : f32[8, 4], f32[8, 4]\noutput %w_new, %b_new\n",
     "w_new", FUSE_CLIP, "nonlinear state update"},
    {"routed (P5)", HEAD "input %route : f16[16, 1]\n%dr = mul(%d, %route) : f16[16, 4]\n"
                    "%g = matmul(%x, %dr) {transpose_a = true} : f32[8, 4]\n" ADAMW("%g") "output %w_new, %m_new, %v_new\n",
     "w_new", FUSE_ROUTED, "(P5)"},
    {"routed, plain sgd", HEAD "input %route : f16[16, 1]\n%dr = mul(%d, %route) : f16[16, 4]\n"
                          "%g = matmul(%x, %dr) {transpose_a = true} : f32[8, 4]\n%w_new = sgd(%w, %g) {lr = 0.1} : f32[8, 4]\noutput %w_new\n",
     "w_new", FUSE_OK, "epilogue"}, /* no state to decay: nothing to fold */
    {"producer", HEAD "%g = reduce_sum(%w) {axes = [1], keepdims = true} : f32[8, 1]\n%gb = reshape(%g) : f32[8]\n"
                      "param %bb : f32[8] = zeros\n%b_new = sgd(%bb, %gb) {lr = 0.1} : f32[8]\noutput %b_new\n",
     "b_new", FUSE_PRODUCER, "no tiled epilogue"},
    /* P3: an owner's sum of the partials the replicas handed in, over their first axis. */
    {"sum of partials", HEAD "input %p : f32[3, 8, 4]\n%g = reduce_sum(%p) {axes = [0]} : f32[8, 4]\n" ADAMW("%g")
                        "output %w_new, %m_new, %v_new\n",
     "w_new", FUSE_OK, "a tile of reduce_sum 'g' completes an element of it"},
    {"sum over another axis", HEAD "input %p : f32[8, 3, 4]\n%g = reduce_sum(%p) {axes = [1]} : f32[8, 4]\n" ADAMW("%g")
                              "output %w_new, %m_new, %v_new\n",
     "w_new", FUSE_PRODUCER, "other axes than the first alone"},
    {"sum of a computed value", HEAD "input %p : f32[3, 8, 4]\n%q = scale(%p) {by = 2.0} : f32[3, 8, 4]\n"
                                "%g = reduce_sum(%q) {axes = [0]} : f32[8, 4]\n" ADAMW("%g") "output %w_new, %m_new, %v_new\n",
     "w_new", FUSE_PRODUCER, "not partials handed in"},
    {"sum of partials, read twice", HEAD "input %p : f32[3, 8, 4]\n%g = reduce_sum(%p) {axes = [0]} : f32[8, 4]\n" ADAMW("%g")
                                    "output %w_new, %m_new, %v_new, %g\n",
     "w_new", FUSE_ESCAPES, "graph output"},
    {"shape", "graph t\ninput %x : f16[2, 16, 8]\ninput %d : f16[2, 16, 4]\nparam %w : f32[2, 8, 4] = zeros\n"
              "%g = matmul(%x, %d) {transpose_a = true} : f32[2, 8, 4]\n%w_new = sgd(%w, %g) {lr = 0.1} : f32[2, 8, 4]\noutput %w_new\n",
     "w_new", FUSE_SHAPE, "2-D"},
    {"scope", HEAD GRAD "%wf = repeat 2 carry(%wc = %w) {\n  %wn = sgd(%wc, %g) {lr = 0.1} : f32[8, 4]\n  yield %wn\n}\noutput %wf\n", "wn",
     FUSE_SCOPE, "different blocks"},
    {"operand", HEAD GRAD "%w_new = sgd(%g, %g) {lr = 0.1} : f32[8, 4]\noutput %w_new\n", "w_new", FUSE_OPERAND, "also as its weight"},
    /* Two fused ops due at one point: both read a weight computed after both matmuls. */
    {"two at one point", HEAD GRAD "%g2 = matmul(%x, %d) {transpose_a = true} : f32[8, 4]\n%ws = scale(%w) {by = 2.0} : f32[8, 4]\n"
                         "%w1 = sgd(%ws, %g) {lr = 0.1} : f32[8, 4]\n%w2 = sgd(%ws, %g2) {lr = 0.2} : f32[8, 4]\noutput %w1, %w2\n",
     "w2", FUSE_OK, "epilogue"},
};

static void every_rule_with_its_model(void **state) {
    (void)state;
    for (size_t i = 0; i < TS_COUNT(RULES); i++) {
        const rule_case *rc = &RULES[i];
        graph *g = parse(rc->text);
        fuse_plan fp;
        graph_fuse_analyze(g, true, &fp);
        const fuse_candidate *c = candidate(&fp, g, rc->consumer);
        if (c->rule != rc->rule || !strstr(c->why, rc->why))
            fail_msg("%s: rule %s (%s), want %s with \"%s\"", rc->name, fuse_rule_names[c->rule], c->why, fuse_rule_names[rc->rule],
                     rc->why);
        assert_int_equal(c->fused, rc->rule == FUSE_OK);
        /* Refused or not, the rewrite keeps the graph valid and the analysis
         * of what it made finds nothing left to fuse. */
        diag d = {0};
        graph *f = graph_fuse_count(&fp) ? graph_fuse_apply(g, &fp, &d) : NULL;
        if (graph_fuse_count(&fp) && !f) fail_msg("%s: %s", rc->name, d.text);
        if (f) {
            fuse_plan again;
            graph_fuse_analyze(f, true, &again);
            assert_int_equal(graph_fuse_count(&again), 0);
            graph_fuse_free(&again);
            graph_free(f);
        }
        graph_fuse_free(&fp);
        graph_free(g);
    }
}

/* The lattice: row and column are incomparable, global fits nothing. */
static void locality_lattice(void **state) {
    (void)state;
    for (int a = 0; a < FUSE_LOCALITY_COUNT; a++) {
        assert_true(fuse_locality_fits(FUSE_ELEMENT, (fuse_locality)a));
        assert_true(fuse_locality_fits((fuse_locality)a, (fuse_locality)a) || a == FUSE_GLOBAL);
        assert_false(fuse_locality_fits(FUSE_GLOBAL, (fuse_locality)a) && a != FUSE_GLOBAL);
    }
    assert_false(fuse_locality_fits(FUSE_ROW, FUSE_COLUMN));
    assert_false(fuse_locality_fits(FUSE_COLUMN, FUSE_ROW));
    assert_false(fuse_locality_fits(FUSE_ROW, FUSE_BLOCK));
    assert_true(fuse_locality_fits(FUSE_ROW, FUSE_TENSOR));
    assert_true(fuse_locality_fits(FUSE_BLOCK, FUSE_TENSOR));
    assert_int_equal(fuse_gemm_partition(4, 1), FUSE_ROW);
    assert_int_equal(fuse_gemm_partition(1, 4), FUSE_COLUMN);
    assert_int_equal(fuse_gemm_partition(3, 5), FUSE_BLOCK);
    assert_int_equal(fuse_gemm_partition(1, 1), FUSE_TENSOR);
}

/* ---- compiling and simulating -------------------------------------------------------------- */

typedef struct run {
    package p;         /* parsed from the written image */
    uint8_t *img;
    size_t len;
    int32_t nout;
    int64_t *numel;
    float **out;       /* simulator outputs */
    compile_info ci;   /* its fusions: ci.fusions */
    uint64_t cycles;
} run;

static float **default_inputs(const graph *g, int32_t *nin) {
    *nin = graph_inputs(g, NULL, 0);
    int32_t *ids = calloc((size_t)*nin + 1, sizeof(int32_t));
    graph_inputs(g, ids, *nin);
    float **in = calloc((size_t)*nin + 1, sizeof(float *));
    for (int32_t k = 0; k < *nin; k++) {
        in[k] = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(g, ids[k])->type));
        graph_input_default(g, ids[k], k, in[k]);
    }
    free(ids);
    return in;
}

static run compile_run_recipe(const graph *g, const machine *m, bool no_fuse, const char *what, const char *recipe) {
    run r;
    memset(&r, 0, sizeof r);
    diag d = {0};
    package built;
    /* No local search: fused and unfused take each GEMM's best-scoring grid,
     * the same for a fused op as for its matmul (the same site), or the recipe's. */
    compile_options co = {.model = what, .recipe = recipe, .no_fuse = no_fuse, .search_steps = 0, .quiet = true};
    if (driver_compile(g, m, &co, &built, &r.ci, &d)) fail_msg("%s on %s: %s", what, m->name, d.text);
    r.img = package_image(&built, &r.len, "test", NULL);
    package_free(&built);
    if (package_parse(r.img, r.len, what, &r.p, &d)) fail_msg("%s", d.text);
    r.nout = graph_outputs(g, NULL, 0);
    int32_t *ids = calloc((size_t)r.nout + 1, sizeof(int32_t));
    graph_outputs(g, ids, r.nout);
    r.numel = calloc((size_t)r.nout + 1, sizeof(int64_t));
    for (int32_t j = 0; j < r.nout; j++) r.numel[j] = graph_type_numel(&graph_val(g, ids[j])->type);
    free(ids);
    int32_t nin;
    float **in = default_inputs(g, &nin);
    r.out = calloc((size_t)r.nout + 1, sizeof(float *));
    sim_options so = {.quiet = true};
    sim_stats st;
    if (sim_run(&r.p, &so, in, r.out, &st, &d)) fail_msg("%s", d.text);
    r.cycles = st.cycles;
    sim_stats_free(&st);
    for (int32_t k = 0; k < nin; k++) free(in[k]);
    free(in);
    return r;
}

static run compile_run(const graph *g, const machine *m, bool no_fuse, const char *what) {
    return compile_run_recipe(g, m, no_fuse, what, NULL);
}

static void run_free(run *r) {
    for (int32_t j = 0; j < r->nout; j++) free(r->out[j]);
    free(r->out);
    free(r->numel);
    free(r->img);
    package_free(&r->p);
    compile_info_free(&r->ci);
}

static int count_kernel(const package *p, kernel_id k) {
    int n = 0;
    for (int32_t i = 0; i < p->prog.runs.n; i++) n += p->prog.runs.v[i].kernel == k;
    return n;
}

static machine with_tiles(const char *preset, uint32_t tiles) {
    machine m;
    assert_int_equal(machine_preset(preset, &m), 0);
    if (tiles) m.tiles = tiles;
    return m;
}

/* ---- P1 ------------------------------------------------------------------------------------ */

/* The fused step equals the unfused one bit for bit, whatever grid
 * partitions the gradient (tile counts from 3 to 1472 give different R x C
 * x K grids), with K split across tiles (long token axes) or not. */
static void p1_bitwise_on_every_partition(void **state) {
    (void)state;
    static const char *const models[] = {
        "zoo:train-mlp:optimizer=adamw,tokens=40,width=48,hidden=80",
        "zoo:train-mlp:optimizer=sgd,tokens=40,width=48,hidden=80",
        "zoo:train-mlp:optimizer=adamw,tokens=1024,width=16,hidden=24,state=bf16",
        "zoo:train-mlp:optimizer=sgd,momentum=0,tokens=1024,width=16,hidden=24,grad=bf16",
    };
    const machine machines[] = {with_tiles("tiny", 0), with_tiles("c600", 3), with_tiles("c600", 37), with_tiles("c600", 200),
                                with_tiles("mk2", 0), with_tiles("c600", 0)};
    int split = 0, whole = 0;
    for (size_t i = 0; i < TS_COUNT(models); i++) {
        diag d = {0};
        graph *g = models_load(models[i], &d);
        if (!g) fail_msg("%s", d.text);
        for (size_t k = 0; k < TS_COUNT(machines); k++) {
            run f = compile_run(g, &machines[k], false, models[i]), u = compile_run(g, &machines[k], true, models[i]);
            assert_int_equal(graph_fuse_count(&f.ci.fusions), 2);
            assert_int_equal(graph_fuse_count(&u.ci.fusions), 0);
            int epi = count_kernel(&f.p, KERNEL_K_GEMM_EPI), red = count_kernel(&f.p, KERNEL_K_REDUCE_EPI);
            assert_true(epi + red > 0);
            assert_int_equal(count_kernel(&u.p, KERNEL_K_GEMM_EPI) + count_kernel(&u.p, KERNEL_K_REDUCE_EPI), 0);
            split += red > 0;
            whole += epi > 0;
            /* The same accumulation order: every matmul split at the same K bounds. */
            graph_numerics nf, nu;
            if (graph_numerics_parse(g, f.p.meta, "fused", &nf, &d) || graph_numerics_parse(g, u.p.meta, "unfused", &nu, &d))
                fail_msg("%s", d.text);
            for (int32_t op = 0; op < g->ops.n; op++) {
                if (graph_opr(g, op)->kind != OP_MATMUL) continue;
                assert_int_equal(nf.op[op].gemm.nk, nu.op[op].gemm.nk);
                for (int32_t b = 0; b <= nf.op[op].gemm.nk; b++) assert_int_equal(nf.op[op].gemm.k_bounds[b], nu.op[op].gemm.k_bounds[b]);
            }
            graph_numerics_free(&nf);
            graph_numerics_free(&nu);
            for (int32_t j = 0; j < f.nout; j++) {
                num_mismatch mm = num_mismatches(f.out[j], u.out[j], (size_t)f.numel[j]);
                if (mm.count)
                    fail_msg("%s on %s (%u tiles): output %d differs fused against unfused in %lld elements", models[i],
                             machines[k].name, machines[k].tiles, (int)j, (long long)mm.count);
            }
            run_free(&f);
            run_free(&u);
        }
        graph_free(g);
    }
    assert_true(split > 0); /* some K was split across tiles: the reduction's epilogue */
    assert_true(whole > 0); /* and some was whole on each tile: the GEMM's */
}

/* ---- AdamW and SGD against PyTorch's formulas, several steps --------------------------------- */

enum { PT_STEPS = 4, PT_K = 48, PT_M = 24, PT_N = 16 };

/* torch.optim.AdamW and SGD(momentum=0.9, weight_decay=0.01) for PT_STEPS
 * steps on gradients a_t^T b_t, each step its own op. */
static char *pytorch_graph(void) {
    static char text[16384];
    size_t at = 0;
#define P(...) at += (size_t)snprintf(text + at, sizeof text - at, __VA_ARGS__)
    P("graph steps\n");
    for (int t = 1; t <= PT_STEPS; t++) P("input %%a%d : f16[%d, %d]\ninput %%b%d : f16[%d, %d]\n", t, PT_K, PT_M, t, PT_K, PT_N);
    P("param %%w0 : f32[%d, %d] = normal(0.0, 0.1, seed = 7)\nparam %%m0 : f32[%d, %d] = zeros\nparam %%v0 : f32[%d, %d] = zeros\n",
      PT_M, PT_N, PT_M, PT_N, PT_M, PT_N);
    P("param %%u0 : f32[%d, %d] = normal(0.0, 0.1, seed = 8)\nparam %%k0 : f32[%d, %d] = zeros\n", PT_M, PT_N, PT_M, PT_N);
    for (int t = 1; t <= PT_STEPS; t++) {
        P("%%g%d = matmul(%%a%d, %%b%d) {transpose_a = true} : f32[%d, %d]\n", t, t, t, PT_M, PT_N);
        P("%%w%d, %%m%d, %%v%d = adamw(%%w%d, %%g%d, %%m%d, %%v%d) {lr = 0.01, step = %d} : f32[%d, %d], f32[%d, %d], f32[%d, %d]\n", t, t,
          t, t - 1, t, t - 1, t - 1, t, PT_M, PT_N, PT_M, PT_N, PT_M, PT_N);
        P("%%h%d = matmul(%%a%d, %%b%d) {transpose_a = true} : f32[%d, %d]\n", t, t, t, PT_M, PT_N);
        P("%%u%d, %%k%d = sgd(%%u%d, %%h%d, %%k%d) {lr = 0.01, momentum = 0.9, weight_decay = 0.01} : f32[%d, %d], f32[%d, %d]\n", t, t,
          t - 1, t, t - 1, PT_M, PT_N, PT_M, PT_N);
    }
    P("output %%w%d, %%m%d, %%v%d, %%u%d, %%k%d\n", PT_STEPS, PT_STEPS, PT_STEPS, PT_STEPS, PT_STEPS);
#undef P
    return text;
}

static double max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static void pytorch_formulas_over_steps(void **state) {
    (void)state;
    graph *g = parse(pytorch_graph());
    machine m = with_tiles("c600", 0);
    run f = compile_run(g, &m, false, "steps");
    assert_int_equal(graph_fuse_count(&f.ci.fusions), 2 * PT_STEPS);
    /* The same steps in double, as torch.optim writes them. */
    int32_t nin;
    float **in = default_inputs(g, &nin);
    size_t E = (size_t)PT_M * PT_N;
    double *w = malloc(sizeof(double) * E), *mm = calloc(E, sizeof(double)), *vv = calloc(E, sizeof(double));
    double *u = malloc(sizeof(double) * E), *buf = calloc(E, sizeof(double)), *gr = malloc(sizeof(double) * E);
    float *init = malloc(sizeof(float) * E);
    diag d = {0};
    int32_t pw = graph_val(g, graph_lookup(g, "w0"))->def, pu = graph_val(g, graph_lookup(g, "u0"))->def;
    assert_int_equal(graph_param_values(g, pw, false, init, &d), 0);
    for (size_t e = 0; e < E; e++) w[e] = init[e];
    assert_int_equal(graph_param_values(g, pu, false, init, &d), 0);
    for (size_t e = 0; e < E; e++) u[e] = init[e];
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, mu = 0.9, swd = 0.01;
    for (int t = 1; t <= PT_STEPS; t++) {
        const float *a = in[2 * (t - 1)], *b = in[2 * (t - 1) + 1];
        for (int i = 0; i < PT_M; i++)
            for (int j = 0; j < PT_N; j++) {
                double s = 0;
                for (int k = 0; k < PT_K; k++) s += (double)a[k * PT_M + i] * b[k * PT_N + j];
                gr[i * PT_N + j] = s;
            }
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (size_t e = 0; e < E; e++) {
            /* AdamW: decoupled decay first, then the bias-corrected step. */
            w[e] *= 1 - lr * wd;
            mm[e] = b1 * mm[e] + (1 - b1) * gr[e];
            vv[e] = b2 * vv[e] + (1 - b2) * gr[e] * gr[e];
            w[e] -= lr / bc1 * mm[e] / (sqrt(vv[e]) / sqrt(bc2) + eps);
            /* SGD: weight decay into the gradient, momentum buffer (the first step's is the gradient). */
            double gg = gr[e] + swd * u[e];
            buf[e] = t == 1 ? gg : mu * buf[e] + gg;
            u[e] -= lr * buf[e];
        }
    }
    const double *want[5] = {w, mm, vv, u, buf};
    static const char *const names[5] = {"w", "m", "v", "u", "buf"};
    for (int j = 0; j < 5; j++) {
        double scale = max_abs(want[j], E), worst = 0;
        for (size_t e = 0; e < E; e++) worst = fmax(worst, fabs((double)f.out[j][e] - want[j][e]));
        printf("pytorch steps: %-3s max |sim - torch| = %.3g (of max |torch| %.3g)\n", names[j], worst, scale);
        if (!(worst <= 2e-5 * scale + 1e-9)) fail_msg("%s after %d steps: %.3g off PyTorch's formulas", names[j], PT_STEPS, worst);
    }
    /* The unfused plan agrees bit for bit. */
    run u2 = compile_run(g, &m, true, "steps");
    for (int32_t j = 0; j < f.nout; j++) assert_int_equal(num_mismatches(f.out[j], u2.out[j], (size_t)f.numel[j]).count, 0);
    run_free(&u2);
    for (int32_t k = 0; k < nin; k++) free(in[k]);
    free(in), free(w), free(mm), free(vv), free(u), free(buf), free(gr), free(init);
    run_free(&f);
    graph_free(g);
}

/* ---- P6 ------------------------------------------------------------------------------------ */

enum { P6_V = 128, P6_H = 256, P6_BT = 256, P6_STEPS = 20 };

/* AdamW on W [V, H] for P6_STEPS steps, gradient dY_t^T X_t of f32 inputs
 * rounded to `grad`, weights and states of their dtypes. */
static char *p6_graph(const char *grad, const char *wdt, const char *sdt) {
    static char text[32768];
    size_t at = 0;
#define P(...) at += (size_t)snprintf(text + at, sizeof text - at, __VA_ARGS__)
    P("graph p6\n");
    for (int t = 1; t <= P6_STEPS; t++)
        P("input %%dy%d : f32[%d, %d]\ninput %%x%d : f32[%d, %d]\n", t, P6_BT, P6_V, t, P6_BT, P6_H);
    P("param %%w0 : %s[%d, %d] = normal(0.0, 0.02, seed = 5)\n", wdt, P6_V, P6_H);
    P("param %%m0 : %s[%d, %d] = zeros\nparam %%v0 : %s[%d, %d] = zeros\n", sdt, P6_V, P6_H, sdt, P6_V, P6_H);
    for (int t = 1; t <= P6_STEPS; t++) {
        P("%%g%d = matmul(%%dy%d, %%x%d) {transpose_a = true} : %s[%d, %d]\n", t, t, t, grad, P6_V, P6_H);
        P("%%w%d, %%m%d, %%v%d = adamw(%%w%d, %%g%d, %%m%d, %%v%d) {lr = 0.001, step = %d} : %s[%d, %d], %s[%d, %d], %s[%d, %d]\n", t, t, t,
          t - 1, t, t - 1, t - 1, t, wdt, P6_V, P6_H, sdt, P6_V, P6_H, sdt, P6_V, P6_H);
    }
    P("output %%w%d\n", P6_STEPS);
#undef P
    return text;
}

/* Relative RMS error of P6_STEPS AdamW steps with the given dtypes against
 * the same steps in double on double gradients. */
/* The plan's grids with every K split's partials stored in f32: f16
 * partials (a search variant) would round the gradient before any
 * gradient dtype does, and this measures the gradient's and the state's
 * dtypes. */
static run p6_compile(const graph *g, const machine *m) {
    run r0 = compile_run(g, m, false, "p6");
    assert_non_null(r0.ci.recipe);
    size_t n = strlen(r0.ci.recipe);
    char *rec = malloc(n + 1);
    memcpy(rec, r0.ci.recipe, n + 1);
    static const char f16[] = "\"partials\": \"f16\"";
    for (char *at = strstr(rec, f16); at; at = strstr(at, f16)) memcpy(at + sizeof f16 - 5, "f32", 3);
    run_free(&r0);
    char path[] = "/tmp/tessel_p6_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(rec, f);
    fclose(f);
    free(rec);
    run r = compile_run_recipe(g, m, false, "p6", path);
    remove(path);
    return r;
}

static double p6_error(const char *grad, const char *wdt, const char *sdt, const machine *m, const double *ref) {
    graph *g = parse(p6_graph(grad, wdt, sdt));
    run r = p6_compile(g, m);
    assert_int_equal(graph_fuse_count(&r.ci.fusions), P6_STEPS);
    /* Every partial the step stores is f32. */
    diag d = {0};
    graph_numerics nr;
    if (graph_numerics_parse(g, r.p.meta, "p6", &nr, &d)) fail_msg("%s", d.text);
    for (int32_t op = 0; op < g->ops.n; op++)
        if (graph_opr(g, op)->kind == OP_MATMUL && nr.op[op].gemm.nk > 1) assert_int_equal(nr.op[op].gemm.partials, DT_F32);
    graph_numerics_free(&nr);
    double num = 0, den = 0;
    for (size_t e = 0; e < (size_t)P6_V * P6_H; e++) {
        double x = r.out[0][e] - ref[e];
        num += x * x;
        den += ref[e] * ref[e];
    }
    run_free(&r);
    graph_free(g);
    return sqrt(num / den);
}

static void p6_precision_depends_on_state_dtype(void **state) {
    (void)state;
    machine m = with_tiles("c600", 0);
    graph *g = parse(p6_graph("f32", "f32", "f32"));
    int32_t nin;
    float **in = default_inputs(g, &nin);
    size_t E = (size_t)P6_V * P6_H;
    double *w = malloc(sizeof(double) * E), *mm = calloc(E, sizeof(double)), *vv = calloc(E, sizeof(double));
    double *gr = malloc(sizeof(double) * E), *row = malloc(sizeof(double) * P6_H);
    float *init = malloc(sizeof(float) * E);
    diag d = {0};
    assert_int_equal(graph_param_values(g, graph_val(g, graph_lookup(g, "w0"))->def, false, init, &d), 0);
    for (size_t e = 0; e < E; e++) w[e] = init[e];
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    for (int t = 1; t <= P6_STEPS; t++) {
        const float *dy = in[2 * (t - 1)], *x = in[2 * (t - 1) + 1];
        memset(gr, 0, sizeof(double) * E);
        for (int k = 0; k < P6_BT; k++) {
            for (int j = 0; j < P6_H; j++) row[j] = x[k * P6_H + j];
            for (int i = 0; i < P6_V; i++) {
                double a = dy[k * P6_V + i];
                double *gi = gr + (size_t)i * P6_H;
                for (int j = 0; j < P6_H; j++) gi[j] += a * row[j];
            }
        }
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (size_t e = 0; e < E; e++) {
            mm[e] = b1 * mm[e] + (1 - b1) * gr[e];
            vv[e] = b2 * vv[e] + (1 - b2) * gr[e] * gr[e];
            w[e] = w[e] * (1 - lr * wd) - lr * (mm[e] / bc1) / (sqrt(vv[e] / bc2) + eps);
        }
    }
    for (int32_t k = 0; k < nin; k++) free(in[k]);
    free(in);
    graph_free(g);
    /* An f32 gradient (what a fused epilogue consumes for free) against one
     * stored in bf16, per weight and state dtype. */
    static const struct { const char *w, *s; double min_gain, max_gain; } rows[] = {
        {"f32", "f32", 100.0, 1e30}, /* unmasked: the f32 gradient is worth orders of magnitude */
        {"f32", "f16", 0.0, 1e30},   /* measured, documented */
        {"f32", "bf16", 0.0, 2.0},   /* masked by bf16 state rounding */
        {"bf16", "bf16", 0.0, 2.0},  /* bf16 everywhere */
    };
    for (size_t i = 0; i < TS_COUNT(rows); i++) {
        double eb = p6_error("bf16", rows[i].w, rows[i].s, &m, w), ef = p6_error("f32", rows[i].w, rows[i].s, &m, w);
        double gain = eb / ef;
        printf("P6: weights %-4s state %-4s: error after %d steps with a bf16 gradient %.3g, with an f32 gradient %.3g: %.1fx\n",
               rows[i].w, rows[i].s, P6_STEPS, eb, ef, gain);
        if (!(gain > rows[i].min_gain && gain < rows[i].max_gain))
            fail_msg("P6: weights %s, state %s: gain %.2fx outside (%.3g, %.3g)", rows[i].w, rows[i].s, gain, rows[i].min_gain,
                     rows[i].max_gain);
    }
    free(w), free(mm), free(vv), free(gr), free(row), free(init);
}

/* ---- the proof ------------------------------------------------------------------------------- */

static void proof_holds_fused_and_fails_unfused(void **state) {
    (void)state;
    static const char *const models[] = {
        "zoo:train-mlp:optimizer=adamw,tokens=40,width=48,hidden=80",
        "zoo:train-mlp:optimizer=sgd,tokens=3000,width=16,hidden=24",
    };
    machine m = with_tiles("c600", 0);
    for (size_t i = 0; i < TS_COUNT(models); i++) {
        diag d = {0};
        graph *g = models_load(models[i], &d);
        for (int unfused = 0; unfused < 2; unfused++) {
            run r = compile_run(g, &m, unfused, models[i]);
            fuse_plan all;
            graph_fuse_analyze(g, true, &all);
            epilogue_proof *pr = calloc((size_t)all.n + 1, sizeof(epilogue_proof));
            assert_int_equal(driver_fusion_proofs(g, &all, &r.p, pr, &d), 0);
            for (int32_t k = 0; k < all.n; k++) {
                const char *name = graph_op_name(g, all.c[k].consumer);
                bool weight = all.c[k].rule == FUSE_OK;
                printf("proof: %s %s %s: %s\n", models[i], unfused ? "unfused" : "fused", name, pr[k].evidence);
                assert_true(pr[k].update_runs > 0);
                /* Biases (reduce_sum gradients) are always stored; weight gradients only unfused. */
                if (weight && !unfused) {
                    assert_false(pr[k].materialized);
                    assert_int_equal(pr[k].buffer_bytes, 0);
                } else {
                    assert_true(pr[k].materialized);
                    assert_true(pr[k].buffer_bytes > 0);
                    assert_non_null(strstr(pr[k].evidence, "bytes per tile, live steps"));
                }
                if (weight && unfused) {
                    assert_non_null(strstr(pr[k].evidence, "reads its gradient"));
                    /* Traced back through the exchange tables to the GEMM (REDUCE) that made it. */
                    assert_non_null(strstr(pr[k].evidence, "copied from"));
                }
            }
            free(pr);
            graph_fuse_free(&all);
            run_free(&r);
        }
        graph_free(g);
    }
}

/* ---- the rewrite ------------------------------------------------------------------------------ */

static void rewrite_round_trips_and_computes_the_same(void **state) {
    (void)state;
    static const char *const models[] = {"zoo:train-mlp:optimizer=adamw,tokens=16,width=24,hidden=40,steps=2",
                                         "zoo:train-mlp:optimizer=sgd,momentum=0,tokens=16,width=24,hidden=40"};
    for (size_t i = 0; i < TS_COUNT(models); i++) {
        diag d = {0};
        graph *g = models_load(models[i], &d);
        fuse_plan fp;
        graph_fuse_analyze(g, true, &fp);
        graph *f = graph_fuse_apply(g, &fp, &d);
        if (!f) fail_msg("%s", d.text);
        char *text = graph_print(f);
        graph *back = parse(text);
        char *again = graph_print(back);
        assert_string_equal(text, again);
        assert_non_null(strstr(text, i == 0 ? "matmul_adamw(" : "matmul_sgd("));
        assert_null(strstr(text, "%g_w1 =")); /* the gradient is no value */
        /* Same inputs and outputs, in order; the pure FP32 reference of both. */
        assert_int_equal(graph_inputs(f, NULL, 0), graph_inputs(g, NULL, 0));
        int32_t nout = graph_outputs(g, NULL, 0);
        assert_int_equal(graph_outputs(f, NULL, 0), nout);
        int32_t nin;
        float **in = default_inputs(g, &nin);
        float **a = calloc((size_t)nout + 1, sizeof(float *)), **b = calloc((size_t)nout + 1, sizeof(float *));
        ref_options ro = {.strip_precision = true, .quiet = true};
        assert_int_equal(ref_run(g, &ro, in, a, &d), 0);
        assert_int_equal(ref_run(f, &ro, in, b, &d), 0);
        int32_t *ids = calloc((size_t)nout + 1, sizeof(int32_t));
        graph_outputs(g, ids, nout);
        for (int32_t j = 0; j < nout; j++) {
            size_t n = (size_t)graph_type_numel(&graph_val(g, ids[j])->type);
            assert_int_equal(num_mismatches(a[j], b[j], n).count, 0);
            free(a[j]), free(b[j]);
        }
        for (int32_t k = 0; k < nin; k++) free(in[k]);
        free(in), free(a), free(b), free(ids), free(text), free(again);
        graph_free(back);
        graph_free(f);
        graph_fuse_free(&fp);
        graph_free(g);
    }
}

/* The same model compiles to the same bytes, and a fused package checks
 * exactly against the model as given (the plan keyed to its matmuls). */
static void deterministic_and_checked(void **state) {
    (void)state;
    const char *model = "zoo:train-mlp:optimizer=adamw,tokens=24,width=40,hidden=72";
    diag d = {0};
    graph *g = models_load(model, &d);
    machine m = with_tiles("tiny", 0);
    run a = compile_run(g, &m, false, model), b = compile_run(g, &m, false, model);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.img, b.img, a.len);
    check_options co = {.package = model, .sim = {.quiet = true}};
    check_result r;
    assert_int_equal(driver_check(g, &a.p, &co, &r, &d), 0);
    assert_true(r.pass);
    assert_int_equal(r.differing, 0);
    check_result_free(&r);
    run_free(&a);
    run_free(&b);
    graph_free(g);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_rule_with_its_model),
        cmocka_unit_test(locality_lattice),
        cmocka_unit_test(p1_bitwise_on_every_partition),
        cmocka_unit_test(pytorch_formulas_over_steps),
        cmocka_unit_test(p6_precision_depends_on_state_dtype),
        cmocka_unit_test(proof_holds_fused_and_fails_unfused),
        cmocka_unit_test(rewrite_round_trips_and_computes_the_same),
        cmocka_unit_test(deterministic_and_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
