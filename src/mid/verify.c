/* verify.c: the mid verifier. What every mid pass may assume of its input
 * and must leave in its output, checked in one walk:
 *
 *   - every id in range: tensors of prims, inputs, outputs, probes, alias
 *     and slice sources (no cycles), scopes (repeat prims), graph values
 *     and ops;
 *   - blocks well nested: each prim in at most one block, reached once from
 *     the top (prims in none are dead: a consumer fold absorbed them);
 *   - every operand of a live prim written before it is read (by an earlier
 *     prim, or an input or parameter, or through the tensor an alias or
 *     slice shares), and visible where it is read (a tensor a repeat's body
 *     made is read only inside that body);
 *   - every layout well formed for the machine (layout_check) and its
 *     tensor: element size of its dtype, as many elements as the graph
 *     value it holds (per layer when stacked);
 *   - copies between layouts of one tensor value: one source and one
 *     destination of one dtype and element size, the same dims unless a
 *     view maps them (its axes distinct axes of the source). */
#include "mid.h"

#include <stdlib.h>
#include <string.h>

typedef struct verifier {
    const mid_program *p;
    diag *d;
    bool *in_block;    /* per prim: reached from the top */
    bool *written;     /* per tensor: an earlier prim wrote it (or it is an input or parameter) */
    int32_t open[64];  /* repeat prims enclosing the walk, outermost first */
    int depth;
} verifier;

/* One failure: `what` the prim or tensor, located at its line when the
 * program was parsed from text (line > 0), then the message. */
static int fail_at(verifier *v, int line, const char *what, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (line > 0) return diag_fail(v->d, "%s:%d:3: error: %s: %s", v->p->src_path, line, what, msg);
    return diag_fail(v->d, "mid: error: %s: %s", what, msg);
}

static int fail_prim(verifier *v, int32_t id, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_prim(verifier *v, int32_t id, const char *fmt, ...) {
    const mid_prim *pr = mid_p(v->p, id);
    const char *from = pr->origin >= 0 && pr->origin < v->p->g->ops.n ? graph_op_name(v->p->g, pr->origin) : "?";
    const char *kind = (unsigned)pr->kind < MID_COUNT ? mid_kind_names[pr->kind] : "?";
    char what[512];
    snprintf(what, sizeof what, "p%d (%s, from %s)", (int)id, kind, from);
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_at(v, v->p->prim_line ? v->p->prim_line[id] : 0, what, fmt, ap);
    va_end(ap);
    return rc;
}

static int fail_tensor(verifier *v, int32_t t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_tensor(verifier *v, int32_t t, const char *fmt, ...) {
    int line = v->p->tensor_line ? v->p->tensor_line[t] : 0;
    char what[512];
    if (line > 0) snprintf(what, sizeof what, "tensor '%%%s'", mid_t(v->p, t)->name);
    else snprintf(what, sizeof what, "tensor %d '%%%s'", (int)t, mid_t(v->p, t)->name);
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_at(v, line, what, fmt, ap);
    va_end(ap);
    return rc;
}

static bool tensor_ok(const mid_program *p, int32_t t) { return t >= 0 && t < p->tensors.n; }
static bool is_repeat(const mid_program *p, int32_t id) {
    return id >= 0 && id < p->prims.n && mid_p(p, id)->kind == MID_REPEAT;
}

/* The elements of graph value v (scalars are [1]). */
static int64_t value_numel(const graph *g, int32_t v) { return graph_type_numel(&graph_val(g, v)->type); }

static int64_t layout_numel(const layout *l) {
    int64_t n = 1;
    for (int a = 0; a < l->rank; a++) n *= l->dim[a];
    return n;
}

static int check_tensor(verifier *v, int32_t t) {
    const mid_program *p = v->p;
    const mid_tensor *x = mid_t(p, t);
    if ((unsigned)x->kind > MT_INPUT) return fail_tensor(v, t, "unknown kind %d", (int)x->kind);
    if ((unsigned)x->dtype >= DT_COUNT) return fail_tensor(v, t, "unknown dtype %d", (int)x->dtype);
    if (x->value < -1 || x->value >= p->g->values.n) return fail_tensor(v, t, "graph value %d is not in the graph", (int)x->value);
    if (x->param_op < -1 || x->param_op >= p->g->ops.n ||
        (x->param_op >= 0 && graph_opr(p->g, x->param_op)->kind != OP_PARAM))
        return fail_tensor(v, t, "its parameter op %d is not a param of the graph", (int)x->param_op);
    if (x->stack < 1) return fail_tensor(v, t, "stack %lld is below 1", (long long)x->stack);
    if (x->scope != -1 && !is_repeat(p, x->scope)) return fail_tensor(v, t, "its scope p%d is not a repeat", (int)x->scope);
    int32_t links[2] = {x->slice_of, x->alias_of};
    for (int k = 0; k < 2; k++) {
        if (links[k] == -1) continue;
        if (!tensor_ok(p, links[k]) || links[k] == t)
            return fail_tensor(v, t, "%s tensor %d does not exist", k ? "alias_of" : "slice_of", (int)links[k]);
    }
    /* Aliases and slices lead to a storage tensor in fewer steps than there are tensors. */
    int32_t s = t, steps = 0;
    while (steps++ <= p->tensors.n) {
        const mid_tensor *y = mid_t(p, s);
        int32_t next = y->alias_of >= 0 ? y->alias_of : y->slice_of;
        if (next < 0 || !tensor_ok(p, next)) break;
        s = next;
    }
    if (steps > p->tensors.n) return fail_tensor(v, t, "its aliases and slices form a cycle");
    if (!x->placed) return 0;
    diag ld = {0};
    if (layout_check_form(&x->lay, (int32_t)p->m->tiles, &ld)) { /* a shard too large is the estimate's "does not fit" */
        size_t n = strlen(ld.text);
        if (n && ld.text[n - 1] == '\n') ld.text[n - 1] = 0;
        return fail_tensor(v, t, "%s", ld.text);
    }
    if (x->lay.elem_bytes != dtype_bytes(x->dtype))
        return fail_tensor(v, t, "its layout has %d-byte elements, its dtype %s %d", (int)x->lay.elem_bytes,
                           dtype_name(x->dtype), dtype_bytes(x->dtype));
    if (x->value >= 0) {
        int64_t have = layout_numel(&x->lay), want = value_numel(p->g, x->value);
        if (have * x->stack != want)
            return fail_tensor(v, t, "its layout holds %lld elements%s, the value '%%%s' has %lld", (long long)have,
                               x->stack > 1 ? " per layer" : "", graph_val(p->g, x->value)->name, (long long)want);
    }
    return 0;
}

/* Readable: written, or sharing the buffer of a readable tensor. */
static bool readable(const verifier *v, int32_t t) {
    for (int32_t steps = 0; t >= 0 && steps <= v->p->tensors.n; steps++) {
        if (v->written[t]) return true;
        const mid_tensor *x = mid_t(v->p, t);
        t = x->alias_of >= 0 ? x->alias_of : x->slice_of;
    }
    return false;
}

static bool in_scope(const verifier *v, int32_t scope) {
    if (scope < 0) return true;
    for (int i = 0; i < v->depth; i++)
        if (v->open[i] == scope) return true;
    return false;
}

static int check_copy(verifier *v, int32_t id) {
    const mid_prim *pr = mid_p(v->p, id);
    if (pr->nin != 1 || pr->nout != 1) return fail_prim(v, id, "a copy has one source and one destination");
    const mid_tensor *s = mid_t(v->p, pr->in[0]), *t = mid_t(v->p, pr->out[0]);
    if (s->dtype != t->dtype) return fail_prim(v, id, "copies %s into %s", dtype_name(s->dtype), dtype_name(t->dtype));
    const layout *a = &s->lay, *b = &t->lay;
    if (!pr->has_view) {
        bool same = a->rank == b->rank;
        for (int i = 0; same && i < a->rank; i++) same = a->dim[i] == b->dim[i];
        if (!same) return fail_prim(v, id, "copies between different dims without a view");
        return 0;
    }
    uint32_t used = 0;
    for (int i = 0; i < b->rank; i++) {
        int32_t ax = pr->view.axis[i];
        if (ax < 0 || ax >= a->rank || (used >> ax & 1))
            return fail_prim(v, id, "view axis %d maps to source axis %d, not a distinct axis of the source", i, (int)ax);
        used |= 1u << ax;
    }
    return 0;
}

/* What lower.c's gather_shard relies on: result and table row-major, cut
 * only along the columns, in the same blocks on the same tiles, and every
 * index on each of those tiles. */
static int check_gather(verifier *v, int32_t id) {
    const mid_prim *pr = mid_p(v->p, id);
    if (pr->nin != 2 || pr->nout != 1) return fail_prim(v, id, "a gather reads a table and indices and writes one result");
    const mid_tensor *t = mid_t(v->p, pr->in[0]), *ix = mid_t(v->p, pr->in[1]), *o = mid_t(v->p, pr->out[0]);
    const layout *lt = &t->lay, *li = &ix->lay, *lo = &o->lay;
    int last = lo->rank - 1;
    if (lt->rank != 2 || !dtype_is_float(t->dtype) || ix->dtype != DT_I32 || o->dtype != t->dtype || o->scale != t->scale ||
        lo->rank != li->rank + 1 || lo->dim[last] != lt->dim[1])
        return fail_prim(v, id, "a gather reads a rank-2 float table by i32 indices into the table's dtype, indices' shape + its width");
    bool ok = lo->enc == ENC_ROW_MAJOR && lt->enc == ENC_ROW_MAJOR && li->enc == ENC_ROW_MAJOR && lo->nrep == 0 && lt->nrep == 0 &&
              lt->parts[0] == 1 && lt->parts[1] == lo->parts[last] && lt->block[1] == lo->block[last] &&
              lt->tile_base == lo->tile_base && (lo->parts[last] == 1 || lt->tile_stride[1] == lo->tile_stride[last]);
    for (int a = 0; a < last && ok; a++) ok = lo->parts[a] == 1 && li->dim[a] == lo->dim[a];
    for (int a = 0; a < li->rank && ok; a++) ok = li->parts[a] == 1;
    int64_t s[LAYOUT_MAX_RANK] = {0}, r[LAYOUT_MAX_RANK] = {0}, e[LAYOUT_MAX_RANK] = {0}, n = ok ? layout_replicas(li) : 0;
    int32_t *owners = ok ? xmalloc(sizeof(int32_t) * (size_t)n) : NULL;
    if (ok) layout_owners(li, e, owners, n); /* the indices' tiles: one shard, every replica */
    for (int64_t j = 0; j < lo->parts[last] && ok; j++) {
        s[last] = j;
        int32_t tile = layout_tile(lo, s, r);
        ok = false;
        for (int64_t k = 0; k < n && !ok; k++) ok = owners[k] == tile;
    }
    free(owners);
    if (!ok)
        return fail_prim(v, id, "a gather's result and table are row-major and cut only along their columns, in the same blocks "
                                "on the same tiles, and every index is whole on each of those tiles");
    return 0;
}

static int check_use(verifier *v, int32_t id, int32_t t, bool read, int k) {
    const char *what = read ? "operand" : "result";
    if (!tensor_ok(v->p, t)) return fail_prim(v, id, "%s %d is tensor %d, which does not exist", what, k, (int)t);
    const mid_tensor *x = mid_t(v->p, t);
    if (!x->placed) return fail_prim(v, id, "%s %d '%%%s' has no layout", what, k, x->name);
    if (!in_scope(v, x->scope))
        return fail_prim(v, id, "%s %d '%%%s' belongs to the body of repeat p%d, which does not enclose it", what, k, x->name,
                         (int)x->scope);
    if (read && !readable(v, t))
        return fail_prim(v, id, "operand %d '%%%s' is read before anything writes it", k, x->name);
    return 0;
}

static int check_block(verifier *v, const mid_block *b);

static int check_prim(verifier *v, int32_t id) {
    const mid_program *p = v->p;
    const mid_prim *pr = mid_p(p, id);
    if ((unsigned)pr->kind >= MID_COUNT) return diag_fail(v->d, "mid: error: p%d has unknown kind %d", (int)id, (int)pr->kind);
    if (pr->origin < 0 || pr->origin >= p->g->ops.n)
        return diag_fail(v->d, "mid: error: p%d (%s): its graph op %d is not in the graph", (int)id, mid_kind_names[pr->kind],
                         (int)pr->origin);
    if (pr->nin < 0 || pr->nin > MID_MAX_IN || pr->nout < 0 || pr->nout > MID_MAX_OUT)
        return fail_prim(v, id, "%d operands and %d results", (int)pr->nin, (int)pr->nout);
    if ((unsigned)pr->ew >= KERNEL_EW_COUNT || (unsigned)pr->epi >= KERNEL_EPI_COUNT || (unsigned)pr->acc >= DT_COUNT ||
        (unsigned)pr->grad >= DT_COUNT)
        return fail_prim(v, id, "an elementwise op, epilogue or dtype out of range");
    if (pr->kind == MID_REPEAT) {
        if (pr->count < 1) return fail_prim(v, id, "repeats %lld times", (long long)pr->count);
        if (pr->nin || pr->nout) return fail_prim(v, id, "a repeat has no operands or results");
        if (v->depth == (int)TS_COUNT(v->open)) return fail_prim(v, id, "repeats nest deeper than %d", (int)TS_COUNT(v->open));
        v->open[v->depth++] = id;
        int rc = check_block(v, &pr->body);
        v->depth--;
        return rc;
    }
    if (pr->body.n) return fail_prim(v, id, "only a repeat has a body");
    for (int k = 0; k < pr->nin; k++)
        if (check_use(v, id, pr->in[k], true, k)) return -1;
    for (int k = 0; k < pr->nout; k++)
        if (check_use(v, id, pr->out[k], false, k)) return -1;
    if (pr->kind == MID_COPY && check_copy(v, id)) return -1;
    if (pr->kind == MID_GATHER && check_gather(v, id)) return -1;
    for (int k = 0; k < pr->nout; k++) v->written[pr->out[k]] = true;
    return 0;
}

static int check_block(verifier *v, const mid_block *b) {
    for (int32_t i = 0; i < b->n; i++) {
        int32_t id = b->v[i];
        if (id < 0 || id >= v->p->prims.n) return diag_fail(v->d, "mid: error: a block holds p%d, which does not exist", (int)id);
        if (v->in_block[id]) return diag_fail(v->d, "mid: error: p%d appears twice in the program's blocks", (int)id);
        v->in_block[id] = true;
        if (check_prim(v, id)) return -1;
    }
    return 0;
}

int mid_verify(const mid_program *p, diag *d) {
    if (!p->g || !p->m) return diag_fail(d, "mid: error: the program has no graph or machine");
    verifier v = {.p = p, .d = d};
    v.in_block = xcalloc((size_t)p->prims.n + 1, 1);
    v.written = xcalloc((size_t)p->tensors.n + 1, 1);
    int rc = 0;
    for (int32_t t = 0; rc == 0 && t < p->tensors.n; t++) {
        rc = check_tensor(&v, t);
        v.written[t] = mid_t(p, t)->kind != MT_TEMP;
    }
    for (int32_t i = 0; rc == 0 && i < p->inputs.n; i++)
        if (!tensor_ok(p, p->inputs.v[i]) || mid_t(p, p->inputs.v[i])->kind != MT_INPUT)
            rc = diag_fail(d, "mid: error: input %d is not an input tensor", (int)i);
    for (int32_t i = 0; rc == 0 && i < p->outputs.n; i++)
        if (!tensor_ok(p, p->outputs.v[i])) rc = diag_fail(d, "mid: error: output %d is not a tensor", (int)i);
    if (rc == 0) rc = check_block(&v, &p->top);
    for (int32_t i = 0; rc == 0 && i < p->outputs.n; i++)
        if (!readable(&v, p->outputs.v[i]))
            rc = diag_fail(d, "mid: error: output %d '%%%s' is never written", (int)i, mid_t(p, p->outputs.v[i])->name);
    for (int32_t i = 0; rc == 0 && i < p->probes.n; i++) {
        const mid_probe *q = &p->probes.v[i];
        if (q->value < 0 || q->value >= p->g->values.n || !tensor_ok(p, q->tensor) || q->after < -1 ||
            q->after >= p->prims.n || (q->after >= 0 && !v.in_block[q->after]) || (q->scope != -1 && !is_repeat(p, q->scope)))
            rc = diag_fail(d, "mid: error: probe %d names a value, tensor or prim that is not in the program", (int)i);
    }
    free(v.in_block);
    free(v.written);
    return rc;
}
