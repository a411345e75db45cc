/* test_midtext.c: the mid text form (docs/ir.md, "Mid text") and the mid
 * verifier, on programs mid_build makes for zoo models (expansion and the mid passes):
 *
 *   - printing is a fixed point, print(parse(print(p))) == print(p), and the
 *     parsed program equals the expanded one field by field (the text loses
 *     nothing), with its graph sibling-joined or epilogue-fused where the
 *     model has such ops;
 *   - mid_verify passes on every one, and refuses programs broken on purpose;
 *   - malformed texts give located errors on the right line. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "models/models.h"

/* A model expanded by the plan a zero-step search starts from, after the
 * graph passes a compile runs (siblings joined, then epilogue fusion). */
typedef struct expanded {
    graph *model, *joined, *fused;
    const graph *g;  /* what was expanded */
    machine m;
    mid_program p;
} expanded;

static void expand(expanded *e, const char *spec, const char *mach) {
    memset(e, 0, sizeof *e);
    diag d = {0};
    e->model = models_load(spec, &d);
    if (!e->model) fail_msg("%s: %s", spec, d.text);
    assert_int_equal(machine_preset(mach, &e->m), 0);
    sib_plan sp;
    graph_siblings_analyze(e->model, &sp);
    if (sp.n && !(e->joined = graph_siblings_apply(e->model, &sp, &d))) fail_msg("%s: %s", spec, d.text);
    graph_siblings_free(&sp);
    const graph *gm = e->joined ? e->joined : e->model;
    fuse_plan fp;
    graph_fuse_analyze(gm, true, &fp);
    if (graph_fuse_count(&fp) && !(e->fused = graph_fuse_apply(gm, &fp, &d))) fail_msg("%s: %s", spec, d.text);
    graph_fuse_free(&fp);
    e->g = e->fused ? e->fused : gm;
    mid_plan start;
    mid_plan_init(&start, e->g);
    search_options so = {.steps = 0, .quiet = true};
    search_result r;
    if (search_plan(e->g, &e->m, &start, &so, &r, &d)) fail_msg("%s: %s", spec, d.text);
    mid_plan pl;
    mid_plan_copy(&pl, &r.finalist[0]);
    if (mid_build(e->g, &e->m, &pl, &e->p, NULL, &d)) fail_msg("%s: %s", spec, d.text);
    mid_plan_free(&pl);
    search_result_free(&r);
    mid_plan_free(&start);
}

static void expanded_free(expanded *e) {
    mid_free(&e->p);
    graph_free(e->fused);
    graph_free(e->joined);
    graph_free(e->model);
}

/* ---- field by field ----------------------------------------------------------------------- */

static bool same_layout(const layout *a, const layout *b) {
    if (a->rank != b->rank || a->elem_bytes != b->elem_bytes || a->enc != b->enc || a->nrep != b->nrep ||
        a->tile_base != b->tile_base)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i] || a->parts[i] != b->parts[i] || a->block[i] != b->block[i] ||
            a->tile_stride[i] != b->tile_stride[i])
            return false;
    for (int k = 0; k < a->nrep; k++)
        if (a->rep[k] != b->rep[k] || a->rep_stride[k] != b->rep_stride[k]) return false;
    return true;
}

static bool same_block(const mid_block *a, const mid_block *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->v, b->v, sizeof(int32_t) * (size_t)a->n) == 0);
}

/* Graph ids may differ between the model and its parsed text: compare by name. */
static const char *value_name(const graph *g, int32_t v) { return v < 0 ? "-" : graph_val(g, v)->name; }
static const char *op_name(const graph *g, int32_t op) { return op < 0 ? "-" : graph_op_name(g, op); }

static void assert_same_program(const mid_program *a, const mid_program *b) {
    assert_int_equal(a->tensors.n, b->tensors.n);
    for (int32_t t = 0; t < a->tensors.n; t++) {
        const mid_tensor *x = mid_t(a, t), *y = mid_t(b, t);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->scale, y->scale);
        assert_int_equal(x->placed, y->placed);
        if (x->placed) assert_true(same_layout(&x->lay, &y->lay));
        assert_int_equal(x->kind, y->kind);
        assert_string_equal(value_name(a->g, x->value), value_name(b->g, y->value));
        assert_string_equal(op_name(a->g, x->param_op), op_name(b->g, y->param_op));
        assert_int_equal(x->stack, y->stack);
        assert_int_equal(x->slice_of, y->slice_of);
        assert_int_equal(x->alias_of, y->alias_of);
        assert_int_equal(x->scope, y->scope);
    }
    assert_int_equal(a->prims.n, b->prims.n);
    for (int32_t i = 0; i < a->prims.n; i++) {
        const mid_prim *x = mid_p(a, i), *y = mid_p(b, i);
        assert_int_equal(x->kind, y->kind);
        assert_int_equal(x->nin, y->nin);
        assert_int_equal(x->nout, y->nout);
        assert_memory_equal(x->in, y->in, sizeof(int32_t) * (size_t)x->nin);
        assert_memory_equal(x->out, y->out, sizeof(int32_t) * (size_t)x->nout);
        assert_int_equal(x->ew, y->ew);
        assert_int_equal(x->epi, y->epi);
        assert_int_equal(x->grad, y->grad);
        assert_int_equal(x->acc, y->acc);
        assert_memory_equal(x->f, y->f, sizeof x->f); /* bit for bit */
        assert_int_equal(x->axes, y->axes);
        assert_int_equal(x->keepdims, y->keepdims);
        assert_int_equal(x->step, y->step);
        assert_int_equal(x->col_run, y->col_run);
        assert_int_equal(x->panel_batch, y->panel_batch);
        assert_int_equal(x->swap, y->swap);
        assert_int_equal(x->column, y->column);
        assert_int_equal(x->has_view, y->has_view);
        if (x->has_view) assert_memory_equal(&x->view, &y->view, sizeof x->view);
        assert_int_equal(x->own, y->own);
        assert_int_equal(x->remote, y->remote);
        assert_int_equal(x->residual, y->residual);
        assert_string_equal(op_name(a->g, x->origin), op_name(b->g, y->origin));
        assert_int_equal(x->cast_ordinal, y->cast_ordinal);
        assert_int_equal(x->count, y->count);
        assert_true(same_block(&x->body, &y->body));
    }
    assert_true(same_block(&a->top, &b->top));
    assert_true(same_block((const mid_block *)&a->inputs, (const mid_block *)&b->inputs));
    assert_true(same_block((const mid_block *)&a->outputs, (const mid_block *)&b->outputs));
    assert_int_equal(a->probes.n, b->probes.n);
    for (int32_t i = 0; i < a->probes.n; i++) {
        const mid_probe *x = &a->probes.v[i], *y = &b->probes.v[i];
        assert_string_equal(value_name(a->g, x->value), value_name(b->g, y->value));
        assert_int_equal(x->tensor, y->tensor);
        assert_int_equal(x->after, y->after);
        assert_int_equal(x->scope, y->scope);
    }
}

/* ---- round trips -------------------------------------------------------------------------- */

static void round_trip(const char *spec, const char *mach, bool want_fused, bool want_joined) {
    expanded e;
    expand(&e, spec, mach);
    assert_int_equal(e.fused != NULL, want_fused);
    assert_int_equal(e.joined != NULL, want_joined);
    diag d = {0};
    if (mid_verify(&e.p, &d)) fail_msg("%s: %s", spec, d.text);
    size_t n1, n2;
    char *t1 = mid_print_text(&e.p, &n1);
    graph *g;
    mid_program q;
    if (mid_parse(t1, n1, "test.mid", &e.m, &g, &q, &d)) fail_msg("%s: %s", spec, d.text);
    assert_same_program(&e.p, &q);
    if (mid_verify(&q, &d)) fail_msg("%s (parsed): %s", spec, d.text);
    char *t2 = mid_print_text(&q, &n2);
    if (n1 != n2 || memcmp(t1, t2, n1) != 0) {
        size_t k = 0;
        while (k < n1 && k < n2 && t1[k] == t2[k]) k++;
        fail_msg("%s: the second print differs at byte %zu:\n%.200s\n---\n%.200s", spec, k, t1 + k, t2 + k);
    }
    free(t2);
    mid_free(&q);
    graph_free(g);
    free(t1);
    expanded_free(&e);
}

static void mlp_f16(void **state) {
    (void)state;
    round_trip("zoo:mlp:tokens=24,width=64,hidden=96", "tiny", false, false);
}

static void mlp_fp8(void **state) {
    (void)state;
    round_trip("zoo:mlp:tokens=24,width=64,hidden=96,precision=fp8", "tiny", false, false);
}

static void qk(void **state) {
    (void)state;
    round_trip("zoo:qk", "tiny", false, false);
}

static void small_vit(void **state) {
    (void)state;
    round_trip("zoo:vit:layers=2,width=64,heads=2,mlp=128,image=32,patch=8", "tiny", false, true);
}

static void train_mlp_fused(void **state) {
    (void)state;
    round_trip("zoo:train-mlp:tokens=32,width=64,hidden=128", "tiny", true, false);
}

static void vit_fp8_c600(void **state) {
    (void)state;
    round_trip("zoo:vit:layers=2,width=128,heads=2,mlp=256,image=32,patch=8,precision=fp8", "c600", false, true);
}

/* ---- the verifier refuses -------------------------------------------------------------------- */

static void verifier_refuses(void **state) {
    (void)state;
    expanded e;
    expand(&e, "zoo:mlp:tokens=24,width=64,hidden=96", "tiny");
    diag d = {0};
    int32_t first = e.p.top.v[0], last = e.p.top.v[e.p.top.n - 1];
    mid_prim *pf = mid_p(&e.p, first), *pl = mid_p(&e.p, last);
    /* An operand out of range. */
    int32_t saved = pf->in[0];
    pf->in[0] = e.p.tensors.n + 3;
    assert_int_equal(mid_verify(&e.p, &d), -1);
    assert_non_null(strstr(d.text, "p"));
    pf->in[0] = saved;
    /* A temporary read before anything writes it: the last prim's result read by the first. */
    memset(&d, 0, sizeof d);
    pf->in[0] = pl->out[0];
    assert_int_equal(mid_verify(&e.p, &d), -1);
    assert_non_null(strstr(d.text, "before"));
    pf->in[0] = saved;
    /* A prim in two blocks. */
    memset(&d, 0, sizeof d);
    vec_push(&e.p.arena, &e.p.top, first);
    assert_int_equal(mid_verify(&e.p, &d), -1);
    assert_non_null(strstr(d.text, "twice"));
    e.p.top.n--;
    /* A layout that does not fit its shape. */
    memset(&d, 0, sizeof d);
    mid_tensor *t = mid_t(&e.p, pf->out[0]);
    int64_t dim = t->lay.dim[0];
    t->lay.dim[0] = dim + 1;
    assert_int_equal(mid_verify(&e.p, &d), -1);
    t->lay.dim[0] = dim;
    memset(&d, 0, sizeof d);
    assert_int_equal(mid_verify(&e.p, &d), 0);
    expanded_free(&e);
}

/* ---- malformed text ------------------------------------------------------------------------- */

/* The printed mlp with line `line` (1-based) of its mid part replaced. */
static char *with_line(const char *text, const char *starts, const char *replacement, int *lineno) {
    const char *mid = strstr(text, MID_SEPARATOR "\n");
    assert_non_null(mid);
    const char *p = mid;
    while (*p && strncmp(p, starts, strlen(starts)) != 0) {
        p = strchr(p, '\n');
        assert_non_null(p);
        p++;
    }
    assert_true(*p);
    const char *e = strchr(p, '\n');
    *lineno = 1;
    for (const char *q = text; q < p; q++) *lineno += *q == '\n';
    size_t a = (size_t)(p - text), r = strlen(replacement);
    char *out = malloc(strlen(text) + r + 1);
    memcpy(out, text, a);
    memcpy(out + a, replacement, r);
    strcpy(out + a + r, e ? e : "");
    return out;
}

static void expect_error(const expanded *e, const char *text, const char *path, int line, const char *msg) {
    graph *g;
    mid_program q;
    diag d = {0};
    int rc = mid_parse(text, strlen(text), path, &e->m, &g, &q, &d);
    if (rc == 0) fail_msg("parsed: want line %d: %s", line, msg);
    char where[64];
    snprintf(where, sizeof where, "%s:%d:", path, line);
    if (strncmp(d.text, where, strlen(where)) != 0 || !strstr(d.text, msg))
        fail_msg("want %s ... %s, got %s", where, msg, d.text);
}

static void malformed(void **state) {
    (void)state;
    expanded e;
    expand(&e, "zoo:mlp:tokens=24,width=64,hidden=96", "tiny");
    char *text = mid_print_text(&e.p, NULL);
    int line;
    char *bad;
    /* An unknown tensor in a prim. */
    const char *p1 = strstr(text, "\n  p1 ");
    assert_non_null(p1);
    const char *open = strchr(p1, '(');
    char buf[4096];
    snprintf(buf, sizeof buf, "%.*s(%%nosuch:f16)  # h", (int)(open - p1 - 1), p1 + 1);
    bad = with_line(text, "  p1 ", buf, &line);
    expect_error(&e, bad, "bad.mid", line, "unknown tensor '%nosuch'");
    free(bad);
    /* A layout with more parts than the axis has elements. */
    const char *t0 = strstr(text, "\ntensors ");
    t0 = strchr(t0 + 1, '\n') + 1;
    const char *br = strchr(t0, '[');
    snprintf(buf, sizeof buf, "%.*s[999999/999999]rm {block=[1], stride=[1], base=0}", (int)(br - t0), t0);
    bad = with_line(text, "  %", buf, &line);
    expect_error(&e, bad, "bad.mid", line, "layout");
    free(bad);
    /* A truncated prim line. */
    snprintf(buf, sizeof buf, "%.*s", (int)(strchr(p1, '(') - p1 - 1), p1 + 1);
    bad = with_line(text, "  p1 ", buf, &line);
    expect_error(&e, bad, "bad.mid", line, "expected '('");
    free(bad);
    /* An unknown prim kind. */
    snprintf(buf, sizeof buf, "%.*s= frobnicate()  # h", (int)(strchr(p1, '=') - p1 - 1), p1 + 1);
    bad = with_line(text, "  p1 ", buf, &line);
    expect_error(&e, bad, "bad.mid", line, "unknown prim kind 'frobnicate'");
    free(bad);
    /* Another machine. */
    bad = with_line(text, "machine ", "machine c600", &line);
    expect_error(&e, bad, "bad.mid", line, "the program is for machine 'c600', not 'tiny'");
    free(bad);
    /* A prim defined twice. */
    bad = with_line(text, "  p1 ", "  p0 %x:f16 = copy()  # h", &line);
    expect_error(&e, bad, "bad.mid", line, "p0 is defined twice");
    free(bad);
    /* No separator at all: the error is at the end of the text. */
    char *cut = strdup(text);
    *strstr(cut, MID_SEPARATOR) = 0;
    line = 1;
    for (const char *q = cut; *q; q++) line += *q == '\n';
    expect_error(&e, cut, "bad.mid", line, "expected a '--- mid' line");
    free(cut);
    /* The graph's errors are located in the same file. */
    char *gbad = strdup(text);
    memcpy(strstr(gbad, "graph "), "grape ", 6);
    expect_error(&e, gbad, "bad.mid", 1, "expected 'graph NAME'");
    free(gbad);
    free(text);
    expanded_free(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mlp_f16),          cmocka_unit_test(mlp_fp8),          cmocka_unit_test(qk),
        cmocka_unit_test(small_vit),        cmocka_unit_test(train_mlp_fused),  cmocka_unit_test(vit_fp8_c600),
        cmocka_unit_test(verifier_refuses), cmocka_unit_test(malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
