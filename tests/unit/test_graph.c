/* test_graph.c: graph construction, the text format, the verifier and the zoo. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "models/models.h"

static graph *parse(const char *text, diag *d) { return graph_parse("t.tsl", text, strlen(text), d); }

static const char *mlp_text =
    "# an MLP block with FP8 GEMM operands\n"
    "graph mlp_block\n"
    "input %x : f16[128, 768]\n"
    "param %w1 : f143[768, 3072] {scale = -4} = normal(0.0, 0.02, seed = 1)\n"
    "param %b1 : f16[3072] = zeros\n"
    "param %w2 : f143[3072, 768] {scale = -4} = normal(0.0, 0.02, seed = 2)\n"
    "%x8 = cast(%x) {to = f143, scale = 0} : f143[128, 768]\n"
    "%h = matmul(%x8, %w1) {acc = f32} : f16[128, 3072]\n"
    "%hb = add(%h, %b1) : f16[128, 3072]\n"
    "%g = gelu(%hb) : f16[128, 3072]\n"
    "%g8 = cast(%g) {to = f143, scale = 0} : f143[128, 3072]\n"
    "%y = matmul(%g8, %w2) {acc = f32} : f16[128, 768]\n"
    "output %y\n";

static void example_parses_with_its_structure(void **state) {
    (void)state;
    diag d = {0};
    graph *g = parse(mlp_text, &d);
    assert_non_null(g);
    assert_string_equal(g->name, "mlp_block");
    assert_int_equal(g->body.n, 11);
    int32_t w1 = graph_lookup(g, "w1");
    assert_true(w1 >= 0);
    const graph_value *v = graph_val(g, w1);
    assert_int_equal(v->type.dtype, DT_F143);
    assert_int_equal(v->type.scale, -4);
    assert_int_equal(v->type.rank, 2);
    assert_int_equal(v->type.dim[1], 3072);
    const graph_op *p = graph_opr(g, v->def);
    assert_int_equal(p->kind, OP_PARAM);
    assert_int_equal(p->init.kind, INIT_NORMAL);
    assert_true(p->init.std == 0.02);
    int32_t h = graph_lookup(g, "h");
    const graph_op *mm = graph_opr(g, graph_val(g, h)->def);
    assert_int_equal(mm->kind, OP_MATMUL);
    assert_int_equal(graph_attr_dtype(mm, ATTR_ACC), DT_F32);
    assert_false(graph_attr_bool(mm, ATTR_TRANSPOSE_A));
    assert_string_equal(graph_op_name(g, graph_val(g, h)->def), "h");
    int32_t x8 = graph_lookup(g, "x8");
    assert_int_equal(graph_val(g, x8)->type.dtype, DT_F143);
    assert_int_equal(graph_val(g, x8)->type.scale, 0);
    int32_t outs[4];
    assert_int_equal(graph_outputs(g, outs, 4), 1);
    assert_int_equal(outs[0], graph_lookup(g, "y"));
    assert_string_equal(g->lead, "# an MLP block with FP8 GEMM operands\n");
    char *text = graph_print(g);
    assert_string_equal(text, mlp_text);
    free(text);
    graph_free(g);
}

/* Comments, blank lines and end-of-line comments survive the round trip. */
static void trivia_round_trips(void **state) {
    (void)state;
    const char *t = "\n# lead\n\ngraph g   # header note\n"
                    "  # indented comment\n"
                    "input %x : f16[4]\n\n"
                    "%y = repeat 2 carry(%h = %x) {   # body\n"
                    "  # inside\n"
                    "  %h2 = gelu(%h) : f16[4]\n"
                    "  # before yield\n"
                    "  yield %h2\n"
                    "  # after yield\n"
                    "} # closing\n"
                    "output %y\n"
                    "# trailing\n";
    diag d = {0};
    graph *g = parse(t, &d);
    assert_non_null(g);
    char *text = graph_print(g);
    assert_string_equal(text, t);
    free(text);
    graph_free(g);
}

/* A graph built in code prints as text that parses back to the same text. */
static void builder_output_round_trips(void **state) {
    (void)state;
    diag d = {0};
    graph *g = graph_new("built", NULL);
    int64_t dims[2] = {8, 16};
    int32_t x = graph_result(g, graph_add_input(g, "x", graph_type_make(DT_F16, 2, dims)), 0);
    int32_t op = graph_begin_op(g, OP_SOFTMAX, &x, 1);
    graph_set_int(g, op, ATTR_AXIS, 0);
    assert_int_equal(graph_finish_op(g, op, NULL, NULL, &d), 0);
    int32_t s = graph_result(g, op, 0);
    int32_t c = graph_begin_op(g, OP_CAST, &s, 1);
    graph_set_dtype(g, c, ATTR_TO, DT_F8E5M2);
    graph_set_int(g, c, ATTR_SCALE, -3);
    const char *names[1] = {"s8"};
    assert_int_equal(graph_finish_op(g, c, names, NULL, &d), 0);
    int32_t out = graph_result(g, c, 0);
    graph_add_output(g, &out, 1);
    assert_int_equal(graph_verify(g, &d), 0);
    char *text = graph_print(g);
    assert_non_null(strstr(text, "%s8 = cast(%t1) {to = f8e5m2, scale = -3} : f8e5m2[8, 16]\n"));
    graph *h = parse(text, &d);
    assert_non_null(h);
    char *again = graph_print(h);
    assert_string_equal(text, again);
    assert_int_equal(graph_val(h, graph_lookup(h, "s8"))->type.scale, -3);
    free(text);
    free(again);
    graph_free(g);
    graph_free(h);
}

/* The verifier catches what a buggy builder or pass could leave behind. */
static void verifier_rejects_broken_graphs(void **state) {
    (void)state;
    diag d = {0};
    graph *g = parse("graph g\ninput %x : f16[4, 8]\n%y = gelu(%x) : f16[4, 8]\noutput %y\n", &d);
    assert_non_null(g);
    assert_int_equal(graph_verify(g, &d), 0);
    /* A result whose recorded type no longer matches its op. */
    graph_val(g, graph_lookup(g, "y"))->type.dim[1] = 9;
    assert_int_equal(graph_verify(g, &d), -1);
    assert_non_null(strstr(d.text, "result 1 has type f16[4, 9] but gelu gives f16[4, 8]"));
    assert_non_null(strstr(d.text, "t.tsl:3:6: error:"));
    graph_val(g, graph_lookup(g, "y"))->type.dim[1] = 8;
    /* An operand used before its definition. */
    graph_op *gl = graph_opr(g, graph_val(g, graph_lookup(g, "y"))->def);
    gl->in[0] = graph_lookup(g, "y");
    diag d2 = {0};
    assert_int_equal(graph_verify(g, &d2), -1);
    assert_non_null(strstr(d2.text, "'%y' is used before it is defined"));
    graph_free(g);
}

static void verifier_names_built_ops(void **state) {
    (void)state;
    diag d = {0};
    graph *g = graph_new("g", "zoo:test");
    int64_t dims[1] = {4};
    int32_t x = graph_result(g, graph_add_input(g, "x", graph_type_make(DT_F16, 1, dims)), 0);
    int32_t op = graph_begin_op(g, OP_TRANSPOSE, &x, 1);
    int64_t perm[1] = {1};
    graph_set_ints(g, op, ATTR_PERM, perm, 1);
    const char *names[1] = {"bad"};
    assert_int_equal(graph_finish_op(g, op, names, NULL, &d), -1);
    assert_string_equal(d.text, "zoo:test: error: transpose 'transpose': perm must be a permutation of 0..0\n");
    graph_free(g);
}

static void parse_errors_are_located(void **state) {
    (void)state;
    struct {
        const char *text, *want;
    } cases[] = {
        {"graph g\ninput %x : f16[4]\n%y = gelu(%x, %x) : f16[4]\noutput %y\n", "t.tsl:3:6: error: gelu takes 1 operand, got 2"},
        {"graph g\ninput %x : f16[0]\noutput %x\n", "t.tsl:2:16: error: dimension 0 must be between 1 and 2^40"},
        {"graph g\ninput %x : f16[4]\n%a, %b = gelu(%x) : f16[4], f16[4]\noutput %a\n",
         "t.tsl:3:1: error: gelu with 1 operand gives 1 result, not 2"},
        {"graph g\ninput %x : f16[4]\noutput %x\n}\n", "t.tsl:4:1: error: '}' without an open repeat"},
        {"graph g\nparam %w : f16[4] = uniform\noutput %w\n",
         "t.tsl:2:21: error: unknown initializer 'uniform' (normal, zeros, ones, npy)"},
        {"graph g\nparam %w : f16[4] = normal(0.0, -1.0, seed = 1)\noutput %w\n",
         "t.tsl:2:33: error: standard deviation must be >= 0"},
        {"graph g\ninput %x : f16[4]\n%y = cast(%x) {to = f16, scale = 2} : f16[4]\noutput %y\n",
         "t.tsl:3:6: error: scale and saturate apply to 8-bit targets only"},
        {"graph g\ninput %x : f16[4]\n%y = softmax(%x) {axis = 1} : f16[4]\noutput %y\n",
         "t.tsl:3:6: error: axis 1 is out of range for rank 1"},
        {"graph g\ninput %x : f143[4] {scale = 1}\n%y = gelu(%x) : f143[4]\noutput %y\n",
         "t.tsl:3:6: error: operand 1 of gelu must be f32, f16 or bf16, not f143"},
        {"graph g\ninput %x : f16[4]\n%y = scale(%x) {by = 1e999} : f16[4]\noutput %y\n",
         "t.tsl:3:22: error: number '1e999' is not finite"},
        {"graph g\ninput %x : f16[4]\n%y = repeat 2 carry(%x = %x) {\n  yield %x\n}\noutput %y\n",
         "t.tsl:3:21: error: '%x' is already defined (line 2)"},
        {"graph g\ninput %x : f16[4]\n%y = repeat 2 carry(%h = %x) {\n  %y = gelu(%h) : f16[4]\n  yield %y\n}\noutput %y\n",
         "t.tsl:3:1: error: '%y' is also defined inside the repeat body"},
        {"graph g\ninput %x : f16[4]\noutput %x\n\x01\n", "t.tsl:4:1: error: expected a statement, found '?'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        diag d = {0};
        graph *g = parse(cases[i].text, &d);
        if (g || strncmp(d.text, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: want \"%s\"\n got \"%s\"", i, cases[i].want, d.text);
    }
}

/* Every zoo model builds, verifies and prints text that parses back to the
 * same text (so the zoo and the format describe the same graphs). */
static void zoo_models_round_trip(void **state) {
    (void)state;
    const char *specs[] = {
        "zoo:mlp",
        "zoo:mlp:tokens=7,width=32,hidden=48,precision=fp8",
        "zoo:qk",
        "zoo:qk:qk=fp8,pv=fp8",
        "zoo:vit:layers=2,width=48,heads=3,mlp=64,image=32,patch=8",
        "zoo:vit:layers=1,width=32,heads=2,mlp=40,image=16,patch=8,batch=2,precision=fp8",
        "zoo:train-mlp",
        "zoo:train-mlp:optimizer=adamw,clip=global_norm,tokens=5,width=8,hidden=12",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        diag d = {0};
        graph *g = models_load(specs[i], &d);
        if (!g) fail_msg("%s: %s", specs[i], d.text);
        char *text = graph_print(g);
        graph *h = parse(text, &d);
        if (!h) fail_msg("%s printed text does not parse: %s", specs[i], d.text);
        char *again = graph_print(h);
        assert_string_equal(text, again);
        free(text);
        free(again);
        graph_free(g);
        graph_free(h);
    }
}

static void zoo_vit_structure(void **state) {
    (void)state;
    diag d = {0};
    graph *g = models_load("zoo:vit", &d);
    assert_non_null(g);
    /* Defaults: SigLIP So400m/14 at 384 px: 729 tokens, 27 layers in one repeat. */
    int32_t pix = graph_lookup(g, "patches");
    assert_int_equal(graph_val(g, pix)->type.dim[1], 729);
    assert_int_equal(graph_val(g, pix)->type.dim[2], 588);
    int repeats = 0;
    for (int32_t i = 0; i < g->body.n; i++) {
        const graph_op *o = graph_opr(g, g->body.v[i]);
        if (o->kind == OP_REPEAT) {
            repeats++;
            assert_int_equal(o->count, 27);
        }
    }
    assert_int_equal(repeats, 1);
    const graph_type *w1 = &graph_val(g, graph_lookup(g, "layers.w1"))->type;
    assert_int_equal(w1->rank, 3);
    assert_int_equal(w1->dim[0], 27);
    assert_int_equal(w1->dim[1], 1152);
    assert_int_equal(w1->dim[2], 4304);
    assert_int_equal(w1->dtype, DT_F16);
    graph_free(g);
    /* FP8: weights in f143 with the scale their largest value asks for. */
    g = models_load("zoo:mlp:precision=fp8", &d);
    assert_non_null(g);
    const graph_type *w = &graph_val(g, graph_lookup(g, "w1"))->type;
    assert_int_equal(w->dtype, DT_F143);
    float *vals = malloc(sizeof(float) * 768 * 3072);
    assert_int_equal(graph_param_values(g, graph_val(g, graph_lookup(g, "w1"))->def, true, vals, &d), 0);
    float mx = 0;
    for (int i = 0; i < 768 * 3072; i++) mx = fabsf(vals[i]) > mx ? fabsf(vals[i]) : mx;
    assert_true(mx <= 240.0f * ldexpf(1, w->scale));
    assert_true(mx > 240.0f * ldexpf(1, w->scale - 1));
    free(vals);
    graph_free(g);
}

static void zoo_spec_errors(void **state) {
    (void)state;
    struct {
        const char *spec, *want;
    } cases[] = {
        {"zoo:resnet", "zoo:resnet: error: unknown zoo model 'resnet' (mlp, qk, vit, train-mlp; see tessel zoo)\n"},
        {"zoo:mlp:tokns=3", "zoo:mlp:tokns=3: error: model 'mlp' has no parameter 'tokns' (tokens, width, hidden, precision, acc)\n"},
        {"zoo:mlp:tokens=0", "zoo:mlp:tokens=0: error: tokens must be an integer between 1 and 2^24, not '0'\n"},
        {"zoo:mlp:tokens=12x", "zoo:mlp:tokens=12x: error: tokens must be an integer between 1 and 2^24, not '12x'\n"},
        {"zoo:mlp:precision=int4", "zoo:mlp:precision=int4: error: precision must be one of f16|fp8, not 'int4'\n"},
        {"zoo:mlp:tokens", "zoo:mlp:tokens: error: expected key=value, found 'tokens'\n"},
        {"zoo:vit:width=100,heads=3", "zoo:vit:width=100,heads=3: error: width 100 is not a multiple of heads 3\n"},
        {"model.pt", "model.pt: error: a model is a .tsl or .onnx file, or zoo:NAME[:key=value,...]\n"},
        {"missing.onnx", "missing.onnx: error: cannot open: No such file or directory\n"},
        {"zoo:mlp:tokens=1,tokens=2", "zoo:mlp:tokens=1,tokens=2: error: parameter 'tokens' given twice\n"},
        {"zoo:mlp:tokens=1,,width=3", "zoo:mlp:tokens=1,,width=3: error: expected key=value, found ''\n"},
        {"zoo:mlp:tokens=+5", "zoo:mlp:tokens=+5: error: tokens must be an integer between 1 and 2^24, not '+5'\n"},
        {"zoo:mlp:tokens= 5", "zoo:mlp:tokens= 5: error: tokens must be an integer between 1 and 2^24, not ' 5'\n"},
        {"zoo:train-mlp:optimizer=adamw,state=f16",
         "zoo:train-mlp:optimizer=adamw,state=f16: error: state=f16 with optimizer=adamw: AdamW's second moment (squared "
         "gradients, about 1e-8) underflows f16 and the update blows up; use state=bf16 or state=f32\n"},
        /* Choosing an fp8 scale generates every weight: a 2^48-element one is refused, not hours of work. */
        {"zoo:mlp:width=16777216,hidden=16777216,precision=fp8",
         "zoo:mlp:width=16777216,hidden=16777216,precision=fp8: error: fp8 weight 'w1' has 281474976710656 elements; the zoo "
         "generates at most 2^32\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        diag d = {0};
        graph *g = models_load(cases[i].spec, &d);
        assert_null(g);
        assert_string_equal(d.text, cases[i].want);
    }
}

/* The blanks before an end-of-line comment are kept on every kind of
 * statement, including those whose parser looks ahead for ',' or '{'. */
static void tail_comment_keeps_its_blanks(void **state) {
    (void)state;
    const char *t = "graph g  # a\n"
                    "input %x : f16[4]   # three\n"
                    "input %q : f143[4] {scale = 0}\t# tab\n"
                    "param %w : f16[4] = zeros    # four\n"
                    "%y = repeat 2 carry(%h = %x) {  # two\n"
                    "  %h2 = gelu(%h) : f16[4]   # op\n"
                    "  yield %h2     # five\n"
                    "}   # brace\n"
                    "output %y, %w  # out\n";
    diag d = {0};
    graph *g = parse(t, &d);
    if (!g) fail_msg("%s", d.text);
    char *text = graph_print(g);
    assert_string_equal(text, t);
    free(text);
    graph_free(g);
}

/* A CRLF file parses, points at the right columns, and prints with LF line
 * ends throughout (not LF for statements and CRLF for comments). */
static void crlf_prints_as_lf(void **state) {
    (void)state;
    const char *crlf = "# lead\r\n\r\ngraph g # tail\r\ninput %x : f16[4]  # note\r\n%y = gelu(%x) : f16[4]\r\noutput %y\r\n# end\r\n";
    const char *lf = "# lead\n\ngraph g # tail\ninput %x : f16[4]  # note\n%y = gelu(%x) : f16[4]\noutput %y\n# end\n";
    diag d = {0};
    graph *g = parse(crlf, &d);
    if (!g) fail_msg("%s", d.text);
    char *text = graph_print(g);
    assert_string_equal(text, lf);
    free(text);
    graph_free(g);
    diag e = {0};
    assert_null(parse("graph g\r\ninput %x : f16[4]\r\noutput %z\r\n", &e));
    assert_string_equal(e.text, "t.tsl:3:8: error: '%z' is not defined\n    output %z\n           ^\n");
    /* Runs of CRs end a line too, and printing stays a fixed point. */
    const char *odd = "# a\r\r\n\r\r\ngraph g # b\r\r\ninput %x : f16[4] # c\rd\r\noutput %x\n";
    diag f = {0};
    g = parse(odd, &f);
    if (!g) fail_msg("%s", f.text);
    text = graph_print(g);
    assert_string_equal(text, "# a\n\ngraph g # b\ninput %x : f16[4] # c\rd\noutput %x\n");
    graph *h = parse(text, &f);
    assert_non_null(h);
    char *again = graph_print(h);
    assert_string_equal(again, text);
    free(again);
    free(text);
    graph_free(h);
    graph_free(g);
}

/* The caret sits under the fault when the line is indented with tabs, and
 * a long line is shown as a window around the column. */
static void caret_under_tabs_and_long_lines(void **state) {
    (void)state;
    diag d = {0};
    assert_null(parse("graph g\ninput %x : f16[4]\n%y = repeat 2 carry(%h = %x) {\n\t%z = gelu(%h, %h) : f16[4]\n\tyield %z\n}\noutput %y\n", &d));
    assert_string_equal(d.text, "t.tsl:4:7: error: gelu takes 1 operand, got 2\n    \t%z = gelu(%h, %h) : f16[4]\n    \t     ^\n");
    char text[1024], name[301];
    memset(name, 'n', 300);
    name[300] = 0;
    snprintf(text, sizeof text, "graph g\ninput %%%s : f16[4]\n%%y = add(%%%s, %%q) : f16[4]\noutput %%y\n", name, name);
    diag e = {0};
    assert_null(parse(text, &e));
    /* Column 313 of a 327-byte line: the window ends with the line. */
    assert_non_null(strstr(e.text, "t.tsl:3:313: error: '%q' is not defined\n    ...nnnn"));
    /* The caret is as far in as the '%q' of the shown line. */
    const char *shown = strstr(e.text, "    ...");
    const char *under = strchr(shown, '\n') + 1;
    assert_int_equal((int)(strchr(under, '^') - under), (int)(strstr(shown, "%q") - shown));
}

/* Positions come from a cache that scans forward: parsing is linear, so
 * a 100,000-statement file parses in well under a second (it took minutes
 * when every op rescanned the file from its start for its line number). */
static void large_files_parse_in_linear_time(void **state) {
    (void)state;
    enum { N = 100000 };
    size_t cap = (size_t)N * 40 + 100, n = 0;
    char *t = malloc(cap);
    n += (size_t)snprintf(t + n, cap - n, "graph big\ninput %%v0 : f32[4]\n");
    for (int i = 0; i < N; i++) n += (size_t)snprintf(t + n, cap - n, "%%v%d = gelu(%%v%d) : f32[4]\n", i + 1, i);
    n += (size_t)snprintf(t + n, cap - n, "output %%v%d\n%%bad\n", N);
    double t0 = util_now_seconds();
    diag d = {0};
    assert_null(parse(t, &d));
    double secs = util_now_seconds() - t0;
    /* The error at the end still has the right line. */
    if (!strstr(d.text, "t.tsl:100004:5: error:")) fail_msg("%s", d.text);
    if (secs > 10) fail_msg("parsing %d statements took %.1f s", N, secs);
    t[n - 5] = 0; /* drop "%bad\n" */
    graph *g = parse(t, &d);
    assert_non_null(g);
    assert_int_equal(graph_opr(g, graph_val(g, graph_lookup(g, "v77777"))->def)->line, 77779);
    graph_free(g);
    free(t);
}

/* More carried and sliced values than the builder once had room for. */
static void repeat_with_many_arguments(void **state) {
    (void)state;
    enum { N = 300 };
    size_t cap = (size_t)N * 40 + 200, n = 0;
    char *t = malloc(cap);
    n += (size_t)snprintf(t + n, cap - n, "graph g\ninput %%x : f32[2]\n");
    for (int i = 0; i < N; i++) n += (size_t)snprintf(t + n, cap - n, "%s%%r%d", i ? ", " : "", i);
    n += (size_t)snprintf(t + n, cap - n, " = repeat 2 carry(");
    for (int i = 0; i < N; i++) n += (size_t)snprintf(t + n, cap - n, "%s%%h%d = %%x", i ? ", " : "", i);
    n += (size_t)snprintf(t + n, cap - n, ") {\n  yield ");
    for (int i = 0; i < N; i++) n += (size_t)snprintf(t + n, cap - n, "%s%%h%d", i ? ", " : "", i);
    n += (size_t)snprintf(t + n, cap - n, "\n}\noutput %%r0, %%r299\n");
    diag d = {0};
    graph *g = parse(t, &d);
    if (!g) fail_msg("%s", d.text);
    char *text = graph_print(g);
    assert_string_equal(text, t);
    free(text);
    graph_free(g);
    free(t);
}

/* Outputs are written to files named after their values, so a value is an
 * output once; and a graph without an output says where one is missing. */
static void output_rules_are_located(void **state) {
    (void)state;
    diag d = {0};
    assert_null(parse("graph g\ninput %x : f16[4]\n%y = gelu(%x) : f16[4]\noutput %y\noutput %x, %y\n", &d));
    assert_string_equal(d.text, "t.tsl:5:1: error: '%y' is an output twice\n    output %x, %y\n    ^\n");
    diag e = {0};
    assert_null(parse("graph g\ninput %x : f16[4]\n%y = gelu(%x) : f16[4]\n", &e));
    assert_string_equal(e.text, "t.tsl:4:1: error: the graph has no output (add 'output %NAME')\n    \n    ^\n");
}

/* Built graphs meet the documented limits and name rules too: a zoo spec
 * whose tensors exceed them fails cleanly instead of overflowing. */
static void verifier_enforces_limits_on_built_graphs(void **state) {
    (void)state;
    diag d = {0};
    assert_null(models_load("zoo:vit:image=16777216,patch=1,batch=16777216,layers=1,width=16,heads=1,mlp=16", &d));
    assert_string_equal(d.text, "zoo:vit:image=16777216,patch=1,batch=16777216,layers=1,width=16,heads=1,mlp=16: error: "
                                "input 'patches': dimension 1 is 281474976710656; dimensions are between 1 and 2^40\n");
    graph *g = graph_new("g", "built");
    int64_t dims[2] = {1 << 25, 1 << 24};
    int32_t x = graph_result(g, graph_add_input(g, "x", graph_type_make(DT_F16, 2, dims)), 0);
    graph_add_output(g, &x, 1);
    diag e = {0};
    assert_int_equal(graph_verify(g, &e), -1);
    assert_string_equal(e.text, "built: error: input 'x': a tensor has more than 2^48 elements\n");
    graph_free(g);
    g = graph_new("g", "built");
    x = graph_result(g, graph_add_input(g, "a b", graph_type_make(DT_F16, 1, dims + 1)), 0);
    graph_add_output(g, &x, 1);
    diag f = {0};
    assert_int_equal(graph_verify(g, &f), -1);
    assert_string_equal(f.text, "built: error: input 'a b': 'a b' is not a value name (letters, digits, '_' and '.')\n");
    graph_free(g);
}

static void shortest_float_text(void **state) {
    (void)state;
    struct {
        double x;
        const char *s;
    } cases[] = {{0.0, "0.0"}, {0.02, "0.02"}, {1e-6, "1e-6"}, {-2.5, "-2.5"}, {1e20, "1e20"}, {100.0, "100.0"},
                 {0.1 + 0.2, "0.30000000000000004"}, {1.0 / 3, "0.3333333333333333"}, {-1e-300, "-1e-300"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[48];
        fmt_double(buf, sizeof buf, cases[i].x);
        assert_string_equal(buf, cases[i].s);
        assert_true(strtod(buf, NULL) == cases[i].x);
    }
}

/* A model cut into stages computes what the model computes: each stacked
 * parameter's window holds the model's values for its layers, and the
 * reference run stage after stage, each on the last one's outputs, gives
 * the model's outputs bit for bit. */
static void stages_compute_the_model(void **state) {
    (void)state;
    diag d = {0};
    graph *g = models_load("zoo:vit:layers=5,width=32,heads=2,mlp=48,image=16,patch=4", &d);
    if (!g) fail_msg("%s", d.text);
    graph_stages st;
    if (graph_split_stages(g, 3, NULL, &st, &d)) fail_msg("%s", d.text);
    assert_int_equal(st.n, 3);
    int64_t want_first[] = {0, 2, 4}, want_count[] = {2, 2, 1};
    for (int s = 0; s < 3; s++) {
        assert_int_equal(st.first[s], want_first[s]);
        assert_int_equal(st.count[s], want_count[s]);
    }
    /* Windows: every stacked parameter of every stage against the model's layers. */
    for (int s = 0; s < 3; s++) {
        const graph *gs = st.g[s];
        int32_t windows = 0;
        for (int32_t op = 0; op < gs->ops.n; op++) {
            const graph_op *o = graph_opr(gs, op);
            if (o->kind != OP_PARAM) continue;
            const graph_value *v = graph_val(gs, o->out[0]);
            int32_t w = graph_lookup(g, v->name);
            assert_true(w >= 0);
            const graph_type *whole = &graph_val(g, w)->type;
            int64_t n = graph_type_numel(&v->type), skip = 0;
            if (whole->dim[0] != v->type.dim[0]) skip = st.first[s] * (graph_type_numel(whole) / whole->dim[0]), windows++;
            float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
            assert_int_equal(graph_param_values(gs, op, false, a, &d), 0);
            assert_int_equal(graph_param_values_at(g, graph_val(g, w)->def, false, skip, n, b, &d), 0);
            assert_memory_equal(a, b, sizeof(float) * (size_t)n);
            free(a);
            free(b);
        }
        assert_int_equal(windows, 16);  /* the sixteen stacked parameters of a layer */
    }
    /* The stage texts parse back to themselves (skip = N included). */
    for (int s = 0; s < 3; s++) {
        char *text = graph_print(st.g[s]);
        graph *back = graph_parse("stage.tsl", text, strlen(text), &d);
        if (!back) fail_msg("%s", d.text);
        char *again = graph_print(back);
        assert_string_equal(text, again);
        free(text), free(again);
        graph_free(back);
    }
    /* The reference, stage after stage. */
    float *x = malloc(sizeof(float) * 16 * 48), *whole_out[1] = {0}, *mid[1] = {0}, *mid2[1] = {0}, *last[1] = {0};
    graph_input_default(g, graph_lookup(g, "patches"), 0, x);
    ref_options ro = {.quiet = true};
    assert_int_equal(ref_run(g, &ro, &x, whole_out, &d), 0);
    assert_int_equal(ref_run(st.g[0], &ro, &x, mid, &d), 0);
    assert_int_equal(ref_run(st.g[1], &ro, mid, mid2, &d), 0);
    assert_int_equal(ref_run(st.g[2], &ro, mid2, last, &d), 0);
    assert_memory_equal(whole_out[0], last[0], sizeof(float) * 16 * 32);
    assert_true(graph_lookup(st.g[1], "encoded.after2") >= 0 && graph_lookup(st.g[1], "encoded.after4") >= 0);
    graph_stages_free(&st);
    /* A cut given layer by layer (1, 3, 1): the same model, stage after stage. */
    int64_t cut[3] = {1, 3, 1};
    if (graph_split_stages(g, 3, cut, &st, &d)) fail_msg("%s", d.text);
    assert_int_equal(st.first[1], 1);
    assert_int_equal(st.count[1], 3);
    assert_int_equal(st.first[2], 4);
    assert_true(graph_lookup(st.g[1], "encoded.after1") >= 0 && graph_lookup(st.g[1], "encoded.after4") >= 0);
    free(mid[0]), free(mid2[0]), free(last[0]);
    mid[0] = mid2[0] = last[0] = NULL;
    assert_int_equal(ref_run(st.g[0], &ro, &x, mid, &d), 0);
    assert_int_equal(ref_run(st.g[1], &ro, mid, mid2, &d), 0);
    assert_int_equal(ref_run(st.g[2], &ro, mid2, last, &d), 0);
    assert_memory_equal(whole_out[0], last[0], sizeof(float) * 16 * 32);
    graph_stages_free(&st);
    int64_t bad[2][3] = {{0, 4, 1}, {2, 2, 2}};
    for (int k = 0; k < 2; k++) {
        d = (diag){0};
        assert_int_equal(graph_split_stages(g, 3, bad[k], &st, &d), -1);
        if (!strstr(d.text, "at least one each and 5 in all")) fail_msg("%s", d.text);
    }
    free(x), free(whole_out[0]), free(mid[0]), free(mid2[0]), free(last[0]);

    /* Refusals: more chips than layers; a model without a repeat. */
    d = (diag){0};
    assert_int_equal(graph_split_stages(g, 6, NULL, &st, &d), -1);
    if (!strstr(d.text, "6 chips need at least 6 layers")) fail_msg("%s", d.text);
    graph_free(g);
    d = (diag){0};
    g = models_load("zoo:mlp:tokens=8,width=16,hidden=32", &d);
    assert_non_null(g);
    assert_int_equal(graph_split_stages(g, 2, NULL, &st, &d), -1);
    if (!strstr(d.text, "through its repeat")) fail_msg("%s", d.text);
    graph_free(g);
}

/* Runs g's reference on in; its outputs. */
static float **ref_outputs(const graph *g, float *const *in) {
    diag d = {0};
    float **out = calloc((size_t)graph_outputs(g, NULL, 0) + 1, sizeof(float *));
    ref_options ro = {.quiet = true};
    if (ref_run(g, &ro, in, out, &d)) fail_msg("%s", d.text);
    return out;
}

static int32_t output_index(const graph *g, const char *name) {
    int32_t n = graph_outputs(g, NULL, 0), ids[64], found = -1;
    assert_true(n <= 64);
    graph_outputs(g, ids, n);
    for (int32_t j = 0; j < n; j++)
        if (strcmp(graph_val(g, ids[j])->name, name) == 0) found = j;
    return found;
}

/* A training step split over data-parallel replicas: the replicas on their
 * samples, the owners on their rows of the summed gradients, put together,
 * compute what the whole step computes (up to the order of the sums); the
 * optimizers' states are not in the replica; what cannot be split is
 * refused, naming the op. */
static void replicas_compute_the_step(void **state) {
    (void)state;
    static const char *const specs[] = {"zoo:train-mlp:tokens=16,width=8,hidden=12",
                                        "zoo:train-mlp:tokens=16,width=8,hidden=12,optimizer=adamw",
                                        "zoo:train-mlp:tokens=16,width=8,hidden=12,optimizer=adamw"};
    static const int64_t micros[] = {1, 1, 2}; /* 2: gradient accumulation over two micro-batches */
    for (int m = 0; m < 3; m++) {
        diag d = {0};
        graph *g = models_load(specs[m], &d);
        if (!g) fail_msg("%s", d.text);
        graph_replicas r;
        int64_t M = micros[m], rows = 4 / M;
        if (graph_split_replicas(g, 4, M, &r, &d)) fail_msg("%s", d.text);
        assert_int_equal(r.n, 4);
        assert_int_equal(r.batch, 16);
        /* The replica: four rows of each input (or two, a micro-batch), no
         * optimizer, no state; its outputs the partial loss, then the four
         * gradients (with micro-batches, each added to its ".acc_in"). */
        assert_int_equal(graph_val(r.replica, graph_lookup(r.replica, "x"))->type.dim[0], rows);
        assert_true(graph_lookup(r.replica, m ? "w1_m" : "w1_buf") < 0);
        for (int32_t i = 0; i < r.replica->ops.n; i++) assert_false(graph_opr(r.replica, i)->kind == OP_SGD ||
                                                                     graph_opr(r.replica, i)->kind == OP_ADAMW);
        static const char *const outs[] = {"loss", "g_w1", "g_b1", "g_w2", "g_b2"};
        assert_int_equal(graph_outputs(r.replica, NULL, 0), 5);
        assert_int_equal(graph_inputs(r.replica, NULL, 0), M > 1 ? 7 : 2);
        for (int k = 0; k < 5; k++) {
            char name[32];
            snprintf(name, sizeof name, M > 1 ? "%s.acc" : "%s", outs[k]);
            assert_int_equal(output_index(r.replica, name), k);
        }
        /* Owners: rows of w1 (8 of them) two each; the loss is owner 0's. */
        for (int32_t o = 0; o < 4; o++) {
            const graph_type *w1 = &graph_val(r.owner[o], graph_lookup(r.owner[o], "w1"))->type;
            assert_int_equal(w1->dim[0], 2);
            assert_int_equal(r.nfeed[o], o == 0 ? 5 : 4);
            assert_true((graph_lookup(r.owner[o], "loss.partials") >= 0) == (o == 0));
            char *text = graph_print(r.owner[o]);  /* owners and replica print and parse back */
            graph *back = graph_parse("owner.tsl", text, strlen(text), &d);
            if (!back) fail_msg("%s\n%s", d.text, text);
            graph_free(back), free(text);
        }
        /* Put together by name: replicas' per-sample outputs concatenated,
         * owners' rows concatenated in owner order. */
        int32_t nin = graph_inputs(g, NULL, 0), nout = graph_outputs(g, NULL, 0), iv[2];
        assert_int_equal(nin, 2);
        graph_inputs(g, iv, 2);
        float *x[2];
        for (int k = 0; k < 2; k++) {
            x[k] = malloc(sizeof(float) * 16 * 8);
            graph_input_default(g, iv[k], k, x[k]);
        }
        float **whole = ref_outputs(g, x), **part[4];
        int32_t rin = graph_inputs(r.replica, NULL, 0), riv[8];
        graph_inputs(r.replica, riv, rin);
        for (int32_t rep = 0; rep < 4; rep++) {
            part[rep] = NULL;
            for (int64_t mb = 0; mb < M; mb++) { /* each micro-batch adds to the sums so far, from zeros */
                float *in[8], zeros[256] = {0}; /* the largest sum: 96 values */
                for (int32_t k = 0; k < rin; k++) {
                    const char *name = graph_val(r.replica, riv[k])->name;
                    if (k < 2) in[k] = x[k] + (rep * M + mb) * rows * 8;
                    else {
                        char acc[64];
                        snprintf(acc, sizeof acc, "%.*s.acc", (int)(strlen(name) - 7), name); /* "<v>.acc_in" */
                        in[k] = part[rep] ? part[rep][output_index(r.replica, acc)] : zeros;
                    }
                }
                float **got = ref_outputs(r.replica, in);
                for (int k = 0; part[rep] && k < 5; k++) free(part[rep][k]);
                free(part[rep]);
                part[rep] = got;
            }
        }
        int32_t *ov = calloc((size_t)nout, sizeof(int32_t));
        graph_outputs(g, ov, nout);
        int64_t *filled = calloc((size_t)nout, sizeof(int64_t));
        for (int32_t o = 0; o < 4; o++) {
            const graph *og = r.owner[o];
            int32_t oin = graph_inputs(og, NULL, 0), oiv[16];
            assert_int_equal(oin, r.nfeed[o]);
            graph_inputs(og, oiv, oin);
            float *in[16];
            for (int32_t k = 0; k < oin; k++) {
                const graph_feed *f = &r.feed[o][k];
                assert_string_equal(f->input, graph_val(og, oiv[k])->name);
                const graph_type *ft = &graph_val(r.replica, graph_lookup(r.replica, f->from))->type;
                int64_t row = ft->rank ? graph_type_numel(ft) / ft->dim[0] : 1, n = f->rows < 0 ? graph_type_numel(ft) : f->rows * row;
                in[k] = malloc(sizeof(float) * (size_t)(4 * n));
                for (int32_t rep = 0; rep < 4; rep++)
                    memcpy(in[k] + rep * n, part[rep][output_index(r.replica, f->from)] + f->first * row, sizeof(float) * (size_t)n);
            }
            float **got = ref_outputs(og, in);
            int32_t on = graph_outputs(og, NULL, 0), ids[16];
            graph_outputs(og, ids, on);
            for (int32_t j = 0; j < on; j++) {
                int32_t k = output_index(g, graph_val(og, ids[j])->name);
                assert_true(k >= 0);
                int64_t n = graph_type_numel(&graph_val(og, ids[j])->type);
                for (int64_t e = 0; e < n; e++) {
                    double want = whole[k][filled[k] + e], have = got[j][e];
                    if (fabs(want - have) > 1e-6 + 1e-5 * fabs(want))
                        fail_msg("%s: %s[%lld] is %g, the whole step's %g", specs[m], graph_val(og, ids[j])->name,
                                 (long long)(filled[k] + e), have, want);
                }
                filled[k] += n;
                free(got[j]);
            }
            free(got);
            for (int32_t k = 0; k < oin; k++) free(in[k]);
        }
        for (int32_t k = 0; k < nout; k++) assert_int_equal(filled[k], graph_type_numel(&graph_val(g, ov[k])->type));
        for (int32_t rep = 0; rep < 4; rep++) {
            for (int k = 0; k < 5; k++) free(part[rep][k]);
            free(part[rep]);
        }
        for (int32_t k = 0; k < nout; k++) free(whole[k]);
        free(whole), free(ov), free(filled), free(x[0]), free(x[1]);
        graph_replicas_free(&r);
        graph_free(g);
    }
    /* Refusals. */
    static const struct { const char *spec; int32_t n; const char *why; } bad[] = {
        {"zoo:train-mlp:tokens=16,width=8,hidden=12,clip=global_norm", 4, "the norm needs every replica's whole gradients"},
        {"zoo:train-mlp:tokens=16,width=8,hidden=12,steps=2", 4, "is read again"},
        {"zoo:train-mlp:tokens=16,width=8,hidden=12", 3, "does not split over 3"},
        {"zoo:train-mlp:tokens=16,width=2,hidden=2", 4, "would own no rows"},
        {"zoo:mlp:tokens=16,width=8,hidden=12", 2, "not a training step"},
        {"zoo:train-mlp:tokens=12,width=8,hidden=12", 2, "do not split into 4 micro-batches"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        diag d = {0};
        graph *g = models_load(bad[k].spec, &d);
        if (!g) fail_msg("%s", d.text);
        graph_replicas r;
        if (graph_split_replicas(g, bad[k].n, strstr(bad[k].why, "micro") ? 4 : 1, &r, &d) != -1) fail_msg("%s over %d: not refused", bad[k].spec, (int)bad[k].n);
        if (!strstr(d.text, bad[k].why)) fail_msg("%s: %s", bad[k].spec, d.text);
        graph_free(g);
    }
}

/* A model in micro-batches computes, piece by piece, what it computes on
 * the whole batch; what mixes the batch is refused, naming the op. */
static void micro_batches_compute_the_model(void **state) {
    (void)state;
    diag d = {0};
    graph *g = models_load("zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4,batch=4", &d);
    if (!g) fail_msg("%s", d.text);
    int64_t batch = 0;
    graph *gm = graph_micro_batch(g, 1, &batch, &d);
    if (!gm) fail_msg("%s", d.text);
    assert_int_equal(batch, 4);
    int32_t in, out;
    graph_inputs(gm, &in, 1);
    graph_outputs(gm, &out, 1);
    assert_int_equal(graph_val(gm, in)->type.dim[0], 1);
    assert_int_equal(graph_val(gm, out)->type.dim[0], 1);
    int64_t nin = graph_type_numel(&graph_val(g, graph_lookup(g, "patches"))->type), nout = 4 * 16 * 32;
    float *x = malloc(sizeof(float) * (size_t)nin), *whole[1] = {0}, *piece[1] = {0};
    graph_input_default(g, graph_lookup(g, "patches"), 0, x);
    ref_options ro = {.quiet = true};
    assert_int_equal(ref_run(g, &ro, &x, whole, &d), 0);
    for (int m = 0; m < 4; m++) {
        float *xm = x + m * nin / 4;
        assert_int_equal(ref_run(gm, &ro, &xm, piece, &d), 0);
        assert_memory_equal(piece[0], whole[0] + m * nout / 4, sizeof(float) * (size_t)nout / 4);
        free(piece[0]);
    }
    free(x), free(whole[0]);
    graph_free(gm);
    assert_null(graph_micro_batch(g, 3, &batch, &d));
    if (!strstr(d.text, "a batch of 4 does not split into micro-batches of 3")) fail_msg("%s", d.text);
    graph_free(g);

    d = (diag){0};
    g = models_load("zoo:train-mlp:tokens=8,width=16,hidden=32", &d);
    assert_non_null(g);
    assert_null(graph_micro_batch(g, 4, &batch, &d));
    if (!strstr(d.text, "'loss' is a scalar, not 8 long there")) fail_msg("%s", d.text);
    graph_free(g);

    static const char mix[] = "graph mix\ninput %x : f16[4, 8]\n%p = softmax(%x) {axis = 0} : f16[4, 8]\noutput %p\n";
    d = (diag){0};
    g = graph_parse("mix.tsl", mix, strlen(mix), &d);
    assert_non_null(g);
    assert_null(graph_micro_batch(g, 2, &batch, &d));
    if (!strstr(d.text, "'p' normalises over the batch: the batch cannot be split into micro-batches")) fail_msg("%s", d.text);
    graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(example_parses_with_its_structure),
        cmocka_unit_test(stages_compute_the_model),
        cmocka_unit_test(micro_batches_compute_the_model),
        cmocka_unit_test(replicas_compute_the_step),
        cmocka_unit_test(trivia_round_trips),
        cmocka_unit_test(builder_output_round_trips),
        cmocka_unit_test(verifier_rejects_broken_graphs),
        cmocka_unit_test(verifier_names_built_ops),
        cmocka_unit_test(parse_errors_are_located),
        cmocka_unit_test(zoo_models_round_trip),
        cmocka_unit_test(zoo_vit_structure),
        cmocka_unit_test(zoo_spec_errors),
        cmocka_unit_test(tail_comment_keeps_its_blanks),
        cmocka_unit_test(crlf_prints_as_lf),
        cmocka_unit_test(caret_under_tabs_and_long_lines),
        cmocka_unit_test(large_files_parse_in_linear_time),
        cmocka_unit_test(repeat_with_many_arguments),
        cmocka_unit_test(output_rules_are_located),
        cmocka_unit_test(verifier_enforces_limits_on_built_graphs),
        cmocka_unit_test(shortest_float_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
