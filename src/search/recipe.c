/* recipe.c: a plan as JSON, keyed by stable op names (docs/search.md).
 *
 *   {"format": "tessel-recipe", "version": 1, "model": "vit",
 *    "machine": "c600", "machine_fingerprint": "a2039e54632b4915",
 *    "choices": [{"op": "l.fc1", "kind": "matmul_grid",
 *                 "shape": {"batch": [1], "m": 729, "n": 4304, "k": 1152},
 *                 "batch_parts": [1], "rows": 105, "cols": 64, "k": 384,
 *                 "col_run": 64, "panel_batch": true, "partials": "f32", "weights": "staged",
 *                 "sums": "consumer", "streams": "a"}, ...,
 *                {"op": "l.ln1", "kind": "row_parts", "parts": 2}, ...]}
 *
 * "row_parts" cuts each row of a layer norm over that many tiles
 * (mid_plan.row_parts); every layer norm has one, 1 for whole rows.
 * {"op": "l.fc2_res", "kind": "elementwise_layout", "follows": "second"}
 * puts an elementwise op in its second full-shape operand's layout, or
 * "spread" over the machine (mid_plan.ew_layout); only ops not in the
 * rule's layout ("first", the default) have one.
 * {"op": "q8", "kind": "cast_before_copies", "ordinal": 0} moves cast
 * site 0 of the cast op q8 ahead of its copy chain (mid_plan.cast_early);
 * a site not listed runs late, at its consumer.
 * "streams" names the operand the AMP streams as its rows: "a" (A's rows
 * against B's columns), or "b" (B's columns, the product stored transposed:
 * mid_gemm_plan.swap). Optional when read: "a".
 *
 * Choices come in graph op order; the machine is named by its fingerprint
 * (every field but the name), the model by its name and, per choice, the
 * op's shape, so a recipe for another model or machine is refused with
 * what differs. */
#define _POSIX_C_SOURCE 200809L
#include "search.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Version 2 added cast sites; a version 1 recipe ran every cast at its
 * source, and is read as every site early. */
enum { RECIPE_VERSION = 2 };

static json_t *ints(const int64_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

char *search_recipe_json(const graph *g, const machine *m, const mid_plan *pl) {
    char fp[32];
    snprintf(fp, sizeof fp, "%016" PRIx64, machine_fingerprint(m));
    json_t *choices = json_array();
    for (int32_t i = 0; i < g->ops.n && i < pl->nops; i++) {
        if (!graph_kind_has_gemm(graph_opr(g, i)->kind) || !pl->has[i]) continue;
        mid_gemm_site s;
        mid_gemm_site_of(g, i, &s);
        const mid_gemm_plan *c = &pl->gemm[i];
        json_t *shape = json_pack("{s:o, s:I, s:I, s:I}", "batch", ints(s.batch, s.nb), "m", (json_int_t)s.M, "n",
                                  (json_int_t)s.N, "k", (json_int_t)s.K);
        json_array_append_new(choices, json_pack("{s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:s, s:s, s:b, s:s, s:s}", "op",
                                                 graph_op_name(g, i), "kind", "matmul_grid", "shape", shape, "batch_parts",
                                                 ints(c->batch_parts, s.nb), "rows", (json_int_t)c->bm, "cols",
                                                 (json_int_t)c->bn, "k", (json_int_t)c->bk, "col_run", (json_int_t)c->col_run,
                                                 "partials", dtype_name(c->partials), "weights",
                                                 c->stage_b ? "staged" : "resident", "panel_batch",
                                                 (int)c->panel_batch, "sums", c->sum_at_consumer ? "consumer" : "grid",
                                                 "streams", c->swap ? "b" : "a"));
    }
    for (int32_t i = 0; i < g->ops.n; i++)
        if (graph_opr(g, i)->kind == OP_LAYER_NORM)
            json_array_append_new(choices, json_pack("{s:s, s:s, s:i}", "op", graph_op_name(g, i), "kind", "row_parts",
                                                     "parts", pl->row_parts[i] > 1 ? (int)pl->row_parts[i] : 1));
    for (int32_t i = 0; i < g->ops.n; i++)
        if (mid_op_is_ewise(graph_opr(g, i)->kind) && pl->ew_layout[i] != MID_EWL_FIRST)
            json_array_append_new(choices, json_pack("{s:s, s:s, s:s}", "op", graph_op_name(g, i), "kind", "elementwise_layout",
                                                     "follows", mid_ew_layout_names[pl->ew_layout[i]]));
    for (int32_t i = 0; i < g->ops.n && i < pl->nops; i++)
        for (int k = 0; k < 64; k++)
            if (pl->cast_early[i] >> k & 1)
                json_array_append_new(choices, json_pack("{s:s, s:s, s:i}", "op", graph_op_name(g, i), "kind",
                                                         "cast_before_copies", "ordinal", k));
    json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:s, s:o}", "format", "tessel-recipe", "version", RECIPE_VERSION, "model",
                          g->name, "machine", m->name, "machine_fingerprint", fp, "choices", choices);
    char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(j);
    return util_newline_terminated(text);
}

#define BAD(...) (rc = diag_fail(d, __VA_ARGS__), (void)0)

static bool get_int(json_t *o, const char *key, int64_t lo, int64_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo) return false;
    *out = json_integer_value(v);
    return true;
}

static bool get_ints(json_t *o, const char *key, int n, int64_t lo, int64_t *out) {
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || (int)json_array_size(a) != n) return false;
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < lo) return false;
        out[i] = json_integer_value(v);
    }
    return true;
}

static int load_choice(const char *path, size_t idx, json_t *c, const graph *g, const machine *m, const strmap *names,
                       mid_plan *pl, diag *d) {
    int rc = 0;
    const char *op = json_string_value(json_object_get(c, "op")), *kind = json_string_value(json_object_get(c, "kind"));
    int32_t id = -1;
    if (!json_is_object(c) || !op || !kind)
        return diag_fail(d, "%s: error: choice %zu: needs \"op\" and \"kind\" strings", path, idx);
    bool parts = strcmp(kind, "row_parts") == 0, ew = strcmp(kind, "elementwise_layout") == 0,
         cast = strcmp(kind, "cast_before_copies") == 0;
    if (strcmp(kind, "matmul_grid") != 0 && !parts && !ew && !cast)
        return diag_fail(d,
                         "%s: error: choice %zu ('%s'): unknown kind '%s' (this tessel knows matmul_grid, row_parts, "
                         "elementwise_layout and cast_before_copies)",
                         path, idx, op, kind);
    if (!strmap_get(names, op, &id))
        return diag_fail(d, "%s: error: choice %zu: op '%s' is not in model '%s' (a recipe for another model?)", path, idx, op,
                         g->name);
    if (cast) {
        const graph_op *o = graph_opr(g, id);
        int64_t n = 0;
        if (o->kind != OP_CAST)
            return diag_fail(d, "%s: error: choice %zu: op '%s' is a %s in model '%s', not a cast", path, idx, op,
                             graph_op_infos[o->kind].name, g->name);
        if (!get_int(c, "ordinal", 0, &n) || n > 63)
            return diag_fail(d, "%s: error: choice %zu ('%s'): \"ordinal\" must be an integer in 0..63", path, idx, op);
        if (pl->cast_early[id] >> n & 1)
            return diag_fail(d, "%s: error: choice %zu: cast site %lld of op '%s' is listed already", path, idx, (long long)n, op);
        pl->cast_early[id] |= 1ull << n;
        return 0;
    }
    if (ew) {
        const graph_op *o = graph_opr(g, id);
        const char *f = json_string_value(json_object_get(c, "follows"));
        int v = 0;
        while (f && v < MID_EWL_COUNT && strcmp(f, mid_ew_layout_names[v]) != 0) v++;
        if (!mid_op_is_ewise(o->kind))
            return diag_fail(d, "%s: error: choice %zu: op '%s' is a %s in model '%s', not an elementwise op", path, idx, op,
                             graph_op_infos[o->kind].name, g->name);
        if (!f || v == MID_EWL_COUNT || (v == MID_EWL_SECOND && o->nin != 2))
            return diag_fail(d, "%s: error: choice %zu ('%s'): \"follows\" must be \"first\", \"spread\"%s", path, idx, op,
                             o->nin == 2 ? " or \"second\"" : " (it has one operand)");
        if (pl->ew_layout[id]) return diag_fail(d, "%s: error: choice %zu: op '%s' has a choice already", path, idx, op);
        pl->ew_layout[id] = (int8_t)v;
        return 0;
    }
    if (parts) {
        int64_t n = 0;
        if (graph_opr(g, id)->kind != OP_LAYER_NORM)
            return diag_fail(d, "%s: error: choice %zu: op '%s' is a %s in model '%s', not a layer_norm", path, idx, op,
                             graph_op_infos[graph_opr(g, id)->kind].name, g->name);
        if (!get_int(c, "parts", 1, &n) || n > MID_MAX_ROW_PARTS)
            return diag_fail(d, "%s: error: choice %zu ('%s'): \"parts\" must be an integer in 1..%d", path, idx, op,
                             (int)MID_MAX_ROW_PARTS);
        if (pl->row_parts[id]) return diag_fail(d, "%s: error: choice %zu: op '%s' has a choice already", path, idx, op);
        pl->row_parts[id] = (int32_t)n;
        return 0;
    }
    if (!graph_kind_has_gemm(graph_opr(g, id)->kind))
        return diag_fail(d, "%s: error: choice %zu: op '%s' is a %s in model '%s', not a matmul", path, idx, op,
                         graph_op_infos[graph_opr(g, id)->kind].name, g->name);
    mid_gemm_site s;
    mid_gemm_site_of(g, id, &s);
    json_t *shape = json_object_get(c, "shape");
    int64_t batch[LAYOUT_MAX_RANK] = {0}, M = 0, N = 0, K = 0;
    if (!json_is_object(shape) || !get_ints(shape, "batch", s.nb, 1, batch) || !get_int(shape, "m", 1, &M) ||
        !get_int(shape, "n", 1, &N) || !get_int(shape, "k", 1, &K))
        return diag_fail(d, "%s: error: choice %zu ('%s'): \"shape\" needs batch (%d dims), m, n and k here", path, idx, op,
                         s.nb);
    if (M != s.M || N != s.N || K != s.K || memcmp(batch, s.batch, sizeof(int64_t) * (size_t)s.nb) != 0)
        return diag_fail(d,
                         "%s: error: choice %zu: op '%s' is %lldx%lldx%lld (m x n x k) in model '%s', the recipe has "
                         "%lldx%lldx%lld (a recipe for another model?)",
                         path, idx, op, (long long)s.M, (long long)s.N, (long long)s.K, g->name, (long long)M, (long long)N,
                         (long long)K);
    mid_gemm_plan p = {0};
    const char *pd = json_string_value(json_object_get(c, "partials"));
    if (!get_ints(c, "batch_parts", s.nb, 1, p.batch_parts) || !get_int(c, "rows", 1, &p.bm) || !get_int(c, "cols", 1, &p.bn) ||
        !get_int(c, "k", 1, &p.bk) || !get_int(c, "col_run", 1, &p.col_run) || !pd || !dtype_parse(pd, strlen(pd), &p.partials))
        return diag_fail(d,
                         "%s: error: choice %zu ('%s'): needs batch_parts (%d positive integers), rows, cols, k, col_run "
                         "(positive integers) and partials (a dtype)",
                         path, idx, op, s.nb);
    /* "weights": optional, "resident" unless it says "staged". */
    json_t *wv = json_object_get(c, "weights");
    const char *w = json_string_value(wv);
    if (wv && (!w || (strcmp(w, "resident") != 0 && strcmp(w, "staged") != 0)))
        return diag_fail(d, "%s: error: choice %zu ('%s'): \"weights\" is \"resident\" or \"staged\"", path, idx, op);
    p.stage_b = w && strcmp(w, "staged") == 0;
    /* "panel_batch": optional, false unless true. */
    json_t *pb = json_object_get(c, "panel_batch");
    if (pb && !json_is_boolean(pb))
        return diag_fail(d, "%s: error: choice %zu ('%s'): \"panel_batch\" is true or false", path, idx, op);
    p.panel_batch = pb && json_is_true(pb);
    /* "sums": optional, "grid" unless it says "consumer". */
    json_t *sv = json_object_get(c, "sums");
    const char *sw = json_string_value(sv);
    if (sv && (!sw || (strcmp(sw, "grid") != 0 && strcmp(sw, "consumer") != 0)))
        return diag_fail(d, "%s: error: choice %zu ('%s'): \"sums\" is \"grid\" or \"consumer\"", path, idx, op);
    p.sum_at_consumer = sw && strcmp(sw, "consumer") == 0;
    /* "streams": optional, "a" unless it says "b". */
    json_t *stv = json_object_get(c, "streams");
    const char *st = json_string_value(stv);
    if (stv && (!st || (strcmp(st, "a") != 0 && strcmp(st, "b") != 0)))
        return diag_fail(d, "%s: error: choice %zu ('%s'): \"streams\" is \"a\" or \"b\"", path, idx, op);
    p.swap = st && strcmp(st, "b") == 0;
    char why[200];
    if (!mid_gemm_plan_valid(m, &s, &p, why, sizeof why))
        BAD("%s: error: choice %zu ('%s'): the grid does not fit the op on machine '%s': %s", path, idx, op, m->name, why);
    if (rc == 0 && pl->has[id]) BAD("%s: error: choice %zu: op '%s' has a choice already", path, idx, op);
    if (rc == 0) {
        pl->gemm[id] = p;
        pl->has[id] = true;
    }
    return rc;
}

int search_recipe_load(const char *path, const graph *g, const machine *m, mid_plan *pl, diag *d) {
    char *text = NULL;
    size_t len = 0;
    if (file_read_all(path, &text, &len, d)) return -1;
    int rc = search_recipe_parse(text, len, path, g, m, pl, d);
    free(text);
    return rc;
}

int search_recipe_parse(const char *text, size_t len, const char *path, const graph *g, const machine *m, mid_plan *pl,
                        diag *d) {
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!j) return diag_fail(d, "%s:%d:%d: error: not a recipe: %s", path, err.line, err.column, err.text);
    int rc = 0;
    const char *fmt = json_string_value(json_object_get(j, "format"));
    json_t *ver = json_object_get(j, "version"), *choices = json_object_get(j, "choices");
    const char *model = json_string_value(json_object_get(j, "model"));
    const char *mname = json_string_value(json_object_get(j, "machine"));
    const char *fp = json_string_value(json_object_get(j, "machine_fingerprint"));
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, machine_fingerprint(m));
    if (!json_is_object(j) || !fmt || strcmp(fmt, "tessel-recipe") != 0)
        BAD("%s: error: not a tessel recipe (no \"format\": \"tessel-recipe\")", path);
    else if (!json_is_integer(ver))
        BAD("%s: error: a recipe needs an integer \"version\"; this tessel reads version %d", path, RECIPE_VERSION);
    else if (json_integer_value(ver) != RECIPE_VERSION && json_integer_value(ver) != 1)
        BAD("%s: error: recipe version %lld; this tessel reads versions 1 and %d", path, (long long)json_integer_value(ver),
            RECIPE_VERSION);
    else if (!model || !mname || !fp || !json_is_array(choices))
        BAD("%s: error: a recipe needs \"model\", \"machine\", \"machine_fingerprint\" and a \"choices\" array", path);
    else if (strcmp(fp, want) != 0)
        BAD("%s: error: the recipe is for machine '%s' (fingerprint %s), not '%s' (fingerprint %s): their fields differ "
            "(tessel machine NAME prints them)",
            path, mname, fp, m->name, want);
    else if (strcmp(model, g->name) != 0)
        BAD("%s: error: the recipe is for model '%s', not '%s'", path, model, g->name);
    /* Version 1 ran every cast at its source: each site early. */
    if (rc == 0 && json_integer_value(ver) == 1) pl->casts_all_early = true;
    if (rc == 0) {
        strmap names = {0};
        for (int32_t i = 0; i < g->ops.n; i++)
            strmap_put(&names, graph_op_name(g, i), i);
        for (size_t i = 0; i < json_array_size(choices) && rc == 0; i++)
            rc = load_choice(path, i, json_array_get(choices, i), g, m, &names, pl, d);
        strmap_free(&names);
    }
    json_decref(j);
    return rc;
}
