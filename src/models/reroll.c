/* reroll.c: an imported flat f32 graph rebuilt as tessel compiles it: the
 * longest run of consecutive blocks with identical structure is rerolled
 * into one repeat with stacked parameters, and every value takes the chosen
 * precision.
 *
 *   ops:  a a' b c d | e f g h | e f g h | e f g h | z        period 4, 3 blocks
 *                      ^ carry in          carry out ^
 *
 * Two blocks match when op k of one has the kind, attributes and result
 * types of op k of the other, and each operand is the same relative value
 * inside the block, a parameter of the same type (stacked, or shared when
 * it is the same parameter in every block), the same outer value, or, for
 * exactly one value, the previous block's carried result. Nothing but the
 * carried result may leave a block. */
#include "models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct src {
    enum { S_OP, S_PARAM, S_INPUT } kind;
    int32_t pos;   /* S_OP: position in the compute list */
    int32_t res;   /* result index */
} src;

typedef struct fctx {
    graph *g;                 /* the flat graph */
    int32_t *ops, n;          /* compute ops in program order */
    int32_t *pos;             /* op id -> position, -1 if not a compute op */
    int32_t **users, *nusers; /* value id -> user positions (n: an output) */
} fctx;

static src src_of(const fctx *f, int32_t v) {
    const graph_value *gv = graph_val(f->g, v);
    const graph_op *o = graph_opr(f->g, gv->def);
    if (o->kind == OP_PARAM) return (src){S_PARAM, -1, 0};
    if (o->kind == OP_INPUT) return (src){S_INPUT, -1, 0};
    return (src){S_OP, f->pos[gv->def], gv->def_index};
}

static bool same_attrs(const graph_op *x, const graph_op *y) {
    if (x->attr_set != y->attr_set) return false;
    for (int a = 0; a < ATTR_COUNT; a++) {
        if (!(x->attr_set >> a & 1)) continue;
        const graph_attr *p = &x->attr[a], *q = &y->attr[a];
        switch (graph_attr_kinds[a]) {
        case ATTR_KIND_BOOL: if (p->b != q->b) return false; break;
        case ATTR_KIND_INT: if (p->i != q->i) return false; break;
        case ATTR_KIND_FLOAT: if (memcmp(&p->f, &q->f, sizeof p->f)) return false; break;
        case ATTR_KIND_DTYPE: if (p->t != q->t) return false; break;
        case ATTR_KIND_INTS:
            if (p->ints.n != q->ints.n || (p->ints.n && memcmp(p->ints.v, q->ints.v, sizeof(int64_t) * (size_t)p->ints.n)))
                return false;
            break;
        }
    }
    return true;
}

/* Op at position a (block starting at sa) against the op p later; why says
 * what differs. co: the carried value's offset in a block (-1: not yet known). */
static bool op_match(const fctx *f, int32_t a, int32_t sa, int32_t p, int32_t *co, int32_t *cres, const char **why) {
    const graph_op *x = graph_opr(f->g, f->ops[a]), *y = graph_opr(f->g, f->ops[a + p]);
    if (x->kind != y->kind || x->nin != y->nin || x->nout != y->nout) return *why = "a different op", false;
    if (!same_attrs(x, y)) return *why = "different attributes", false;
    for (int32_t i = 0; i < x->nout; i++)
        if (!graph_type_equal(&graph_val(f->g, x->out[i])->type, &graph_val(f->g, y->out[i])->type))
            return *why = "a different result type", false;
    for (int32_t j = 0; j < x->nin; j++) {
        int32_t u = x->in[j], w = y->in[j];
        src su = src_of(f, u), sw = src_of(f, w);
        if (su.kind == S_OP && su.pos >= sa) {
            if (sw.kind != S_OP || sw.pos != su.pos + p || sw.res != su.res) return *why = "a different operand", false;
        } else if (su.kind == S_PARAM) {
            if (sw.kind != S_PARAM || !graph_type_equal(&graph_val(f->g, u)->type, &graph_val(f->g, w)->type))
                return *why = "a parameter of a different type", false;
        } else if (u != w) {
            /* The carried value: the previous block's result at a fixed offset. */
            if (sw.kind != S_OP || sw.pos < sa || sw.pos >= sa + p) return *why = "a different outer operand", false;
            if (!graph_type_equal(&graph_val(f->g, u)->type, &graph_val(f->g, w)->type)) return *why = "a carried value of another type", false;
            if (*co < 0) {
                *co = sw.pos - sa;
                *cres = sw.res;
            } else if (*co != sw.pos - sa || *cres != sw.res) {
                return *why = "a second carried value", false;
            }
        }
    }
    return true;
}

static bool block_match(const fctx *f, int32_t sa, int32_t p, int32_t *co, int32_t *cres, int32_t *bad, const char **why) {
    for (int32_t k = 0; k < p; k++)
        if (!op_match(f, sa + k, sa, p, co, cres, why)) {
            *bad = sa + p + k;
            return false;
        }
    return true;
}

/* Nothing but block i's carried result leaves block i, and only into block
 * i + 1 (or past the last block). */
static bool escapes_ok(const fctx *f, int32_t s, int32_t p, int32_t cnt, int32_t co, int32_t cres) {
    for (int32_t i = 0; i < cnt; i++) {
        int32_t b = s + i * p;
        for (int32_t k = 0; k < p; k++) {
            const graph_op *o = graph_opr(f->g, f->ops[b + k]);
            for (int32_t r = 0; r < o->nout; r++) {
                int32_t v = o->out[r];
                bool carry = k == co && r == cres;
                for (int32_t u = 0; u < f->nusers[v]; u++) {
                    int32_t at = f->users[v][u];
                    if (at >= b && at < b + p) continue;
                    if (carry && i + 1 < cnt && at >= b + p && at < b + 2 * p) continue;
                    if (carry && i + 1 == cnt && at >= s + cnt * p) continue;
                    return false;
                }
            }
        }
    }
    return true;
}

typedef struct reroll_plan {
    int32_t s, p, cnt, co, cres;  /* cnt 0: nothing rerolled */
    int32_t bad;                  /* first op that stopped the run, -1 */
    const char *why;
} reroll_plan;

static reroll_plan find_reroll(const fctx *f) {
    reroll_plan best = {.bad = -1};
    for (int32_t s = 0; s < f->n; s++) {
        if (f->n - s <= best.cnt * best.p) break;
        for (int32_t p = 2; s + 2 * p <= f->n; p++) {
            if (graph_opr(f->g, f->ops[s])->kind != graph_opr(f->g, f->ops[s + p])->kind) continue;
            int32_t co = -1, cres = 0, cnt = 1, bad = -1;
            const char *why = NULL;
            while (s + (cnt + 1) * p <= f->n && block_match(f, s + (cnt - 1) * p, p, &co, &cres, &bad, &why)) cnt++;
            if (cnt < 2 || co < 0 || cnt * p <= best.cnt * best.p) continue;
            if (!escapes_ok(f, s, p, cnt, co, cres)) continue;
            best = (reroll_plan){s, p, cnt, co, cres, s + cnt * p + p <= f->n ? bad : -1, why};
        }
    }
    return best;
}

/* ---- rebuilding ------------------------------------------------------------------ */

typedef struct rb {
    fctx *f;
    graph *out;
    const models_options *o;
    int32_t *map;        /* flat value id -> new value id (-1: not yet) */
    bool *is_weight;     /* flat param value: every use is a matmul operand */
    diag *d;
    int err;
} rb;

static dtype act_dtype(const rb *r) { return r->o->precision == MODELS_F32 ? DT_F32 : DT_F16; }

/* Activation casts see values of unit scale (after layer norms and GeLU).
 * FP8's relative precision is the same at every magnitude, so the scale buys
 * headroom: at -3, |x| < 30 is finite (trained models' layer-norm outliers)
 * and only |x| < 2^-10 loses precision (under 0.1% of unit-normal values).
 * The zoo's -5 (|x| < 7.5) measured no better on the test ViTs. */
enum { ACT_SCALE = -3 };

/* The fewest elements a GEMM weight has to be stored in FP8. */
enum { FP8_MIN_WEIGHTS = 4096 };

static const char *fresh(graph *g, const char *base, const char *suffix) {
    char buf[600];
    snprintf(buf, sizeof buf, "%s%s", base, suffix ? suffix : "");
    if (graph_lookup(g, buf) < 0) return arena_strdup(&g->arena, buf);
    size_t n = strlen(buf);
    for (int i = 2;; i++) {
        snprintf(buf + n, sizeof buf - n, "_%d", i);
        if (graph_lookup(g, buf) < 0) return arena_strdup(&g->arena, buf);
    }
}

static float parts_maxabs(const graph_init *in, int64_t numel) {
    float mx = 0;
    int64_t per = numel / in->nparts;
    for (int32_t p = 0; p < in->nparts; p++) {
        const uint8_t *b = in->parts[p];
        for (int64_t i = 0; i < per; i++) {
            float x;
            memcpy(&x, b + 4 * i, 4);
            if (fabsf(x) > mx) mx = fabsf(x);
        }
    }
    return mx;
}

/* A parameter of the new graph from flat params (one, or one per block). */
static int32_t new_param(rb *r, const int32_t *vals, int32_t cnt, bool stacked, const char *name) {
    graph *g = r->f->g;
    const graph_value *v0 = graph_val(g, vals[0]);
    graph_type t = v0->type;
    const void **parts = xmalloc(sizeof(void *) * (size_t)cnt);
    for (int32_t i = 0; i < cnt; i++) {
        const graph_op *po = graph_opr(g, graph_val(g, vals[i])->def);
        TS_ASSERT(po->init.kind == INIT_DATA && po->init.nparts == 1);
        parts[i] = po->init.parts[0];
    }
    if (stacked) {
        memmove(t.dim + 1, t.dim, sizeof(int64_t) * (size_t)t.rank);
        t.dim[0] = cnt;
        t.rank++;
    }
    graph_init init = {.kind = INIT_DATA, .parts = parts, .nparts = cnt};
    t.dtype = act_dtype(r);
    if ((r->o->precision == MODELS_FP8 || r->o->precision == MODELS_FP8_ALL) && r->is_weight[vals[0]]) {
        t.dtype = DT_F143;
        t.scale = (int8_t)f8_scale_for_max(DT_F143, parts_maxabs(&init, graph_type_numel(&t)));
    }
    int32_t op = graph_add_param(r->out, fresh(r->out, name, NULL), t, init);
    free(parts);
    return graph_result(r->out, op, 0);
}

static int32_t cast8(rb *r, int32_t x, const char *base) {
    int32_t op = graph_begin_op(r->out, OP_CAST, &x, 1);
    graph_set_dtype(r->out, op, ATTR_TO, DT_F143);
    graph_set_int(r->out, op, ATTR_SCALE, ACT_SCALE);
    const char *names[1] = {fresh(r->out, base, ".in8")};
    if (graph_finish_op(r->out, op, names, NULL, r->d)) return r->err = 1, -1;
    return graph_result(r->out, op, 0);
}

/* Copies flat op `op` with operands already mapped in `in`. */
static int copy_op(rb *r, int32_t op, int32_t *in) {
    const graph_op *o = graph_opr(r->f->g, op);
    graph *g = r->out;
    if (o->kind == OP_MATMUL && (r->o->precision == MODELS_FP8 || r->o->precision == MODELS_FP8_ALL)) {
        bool w8 = false;
        for (int j = 0; j < 2; j++) w8 |= graph_val(g, in[j])->type.dtype == DT_F143;
        for (int j = 0; j < 2 && w8; j++)
            if (graph_val(g, in[j])->type.dtype != DT_F143 && (in[j] = cast8(r, in[j], graph_op_name(r->f->g, op))) < 0) return -1;
    }
    int32_t nop = graph_begin_op(g, o->kind, in, o->nin);
    for (int a = 0; a < ATTR_COUNT; a++) {
        if (!(o->attr_set >> a & 1)) continue;
        const graph_attr *at = &o->attr[a];
        switch (graph_attr_kinds[a]) {
        case ATTR_KIND_BOOL: graph_set_bool(g, nop, (graph_attr_id)a, at->b); break;
        case ATTR_KIND_INT: graph_set_int(g, nop, (graph_attr_id)a, at->i); break;
        case ATTR_KIND_FLOAT: graph_set_float(g, nop, (graph_attr_id)a, at->f); break;
        case ATTR_KIND_DTYPE: graph_set_dtype(g, nop, (graph_attr_id)a, at->t); break;
        case ATTR_KIND_INTS: graph_set_ints(g, nop, (graph_attr_id)a, at->ints.v, at->ints.n); break;
        }
    }
    if (o->kind == OP_CAST) graph_set_dtype(g, nop, ATTR_TO, act_dtype(r)); /* an imported cast: integers to floats */
    graph_type decl = graph_val(r->f->g, o->out[0])->type;
    decl.dtype = o->kind == OP_RESHAPE ? graph_val(g, in[0])->type.dtype : act_dtype(r);
    decl.scale = o->kind == OP_RESHAPE ? graph_val(g, in[0])->type.scale : 0;
    const char *names[8];
    TS_ASSERT(o->nout <= 8);
    for (int32_t i = 0; i < o->nout; i++) names[i] = graph_val(r->f->g, o->out[i])->name;
    bool declare = o->kind == OP_MATMUL || o->kind == OP_REDUCE_SUM || o->kind == OP_RESHAPE;
    if (graph_finish_op(g, nop, names, declare ? &decl : NULL, r->d)) return r->err = 1, -1;
    for (int32_t i = 0; i < o->nout; i++) r->map[o->out[i]] = graph_result(g, nop, i);
    return 0;
}

static int copy_ops(rb *r, int32_t from, int32_t to) {
    for (int32_t k = from; k < to && !r->err; k++) {
        const graph_op *o = graph_opr(r->f->g, r->f->ops[k]);
        int32_t in[64];
        TS_ASSERT(o->nin <= 64);
        for (int32_t j = 0; j < o->nin; j++) {
            in[j] = r->map[o->in[j]];
            TS_ASSERT(in[j] >= 0);
        }
        if (copy_op(r, r->f->ops[k], in)) return -1;
    }
    return r->err ? -1 : 0;
}

/* Flat params needed at the top level: used by ops outside the rerolled run. */
static void top_params(rb *r, const reroll_plan *pl) {
    graph *g = r->f->g;
    for (int32_t i = 0; i < g->body.n; i++) {
        const graph_op *o = graph_opr(g, g->body.v[i]);
        if (o->kind != OP_PARAM) continue;
        int32_t v = o->out[0];
        bool need = false;
        for (int32_t u = 0; u < r->f->nusers[v] && !need; u++) {
            int32_t at = r->f->users[v][u];
            need = pl->cnt == 0 || at < pl->s || at >= pl->s + pl->cnt * pl->p;
        }
        if (need) r->map[v] = new_param(r, &v, 1, false, graph_val(g, v)->name);
    }
}

/* The rerolled run's operands from outside: stacked parameters (one piece
 * per block), shared ones, and block 0's carried input. */
typedef struct reroll_args {
    VEC(int32_t) stk_first;   /* block-0 param value per stacked parameter */
    VEC(int32_t) stk_val;     /* the new stacked parameter */
    int32_t carry_in;         /* flat value block 0 carries in */
} reroll_args;

/* Makes the run's parameters (before any op, so the text lists them first). */
static void reroll_params(rb *r, const reroll_plan *pl, reroll_args *fa) {
    fctx *f = r->f;
    graph *g = f->g;
    memset(fa, 0, sizeof *fa);
    int32_t *vals = xmalloc(sizeof(int32_t) * (size_t)pl->cnt);
    int32_t carry_in = -1;
    for (int32_t k = 0; k < pl->p; k++) {
        const graph_op *o = graph_opr(g, f->ops[pl->s + k]);
        for (int32_t j = 0; j < o->nin; j++) {
            int32_t v = o->in[j];
            src sv = src_of(f, v);
            if (sv.kind == S_OP && sv.pos >= pl->s) continue;
            if (sv.kind != S_PARAM) {
                /* Outer value, or block 0's carried input. */
                int32_t w = graph_opr(g, f->ops[pl->s + pl->p + k])->in[j];
                if (w != v) carry_in = v;
                continue;
            }
            bool shared = true;
            for (int32_t b = 0; b < pl->cnt; b++) {
                vals[b] = graph_opr(g, f->ops[pl->s + b * pl->p + k])->in[j];
                shared &= vals[b] == v;
            }
            if (shared) {
                if (r->map[v] < 0) r->map[v] = new_param(r, &v, 1, false, graph_val(g, v)->name);
                continue;
            }
            bool seen = false;
            for (int32_t i = 0; i < fa->stk_first.n; i++) seen |= fa->stk_first.v[i] == v;
            if (seen) continue;
            char nm[600];
            snprintf(nm, sizeof nm, "%s.stacked", graph_val(g, v)->name);
            vec_push(&g->arena, &fa->stk_first, v);
            vec_push(&g->arena, &fa->stk_val, new_param(r, vals, pl->cnt, true, nm));
        }
    }
    free(vals);
    fa->carry_in = carry_in;
}

static int reroll_region(rb *r, const reroll_plan *pl, reroll_args *fa) {
    fctx *f = r->f;
    graph *g = f->g;
    int32_t carry_in = fa->carry_in;
    TS_ASSERT(carry_in >= 0 && r->map[carry_in] >= 0);
    /* The repeat: carried value first, then the stacked slices. */
    int32_t nargs = 1 + fa->stk_first.n;
    const char **arg_names = xmalloc(sizeof(char *) * (size_t)nargs);
    arg_names[0] = fresh(r->out, graph_val(g, carry_in)->name, ".carry");
    for (int32_t i = 0; i < fa->stk_first.n; i++) {
        /* Slices are named like block 0's parameter when that name is free. */
        arg_names[1 + i] = fresh(r->out, graph_val(g, fa->stk_first.v[i])->name, NULL);
        if (r->map[fa->stk_first.v[i]] >= 0) arg_names[1 + i] = fresh(r->out, graph_val(g, fa->stk_first.v[i])->name, ".slice");
    }
    int32_t outer_carry = r->map[carry_in];
    int32_t rep = graph_begin_repeat(r->out, pl->cnt, &outer_carry, 1, fa->stk_val.v, fa->stk_first.n, arg_names);
    free(arg_names);
    /* Inside the body, block 0's carried input and params mean the arguments. */
    int32_t saved_carry = r->map[carry_in];
    int32_t *saved = xmalloc(sizeof(int32_t) * (size_t)(fa->stk_first.n + 1));
    r->map[carry_in] = graph_opr(r->out, rep)->args[0];
    for (int32_t i = 0; i < fa->stk_first.n; i++) {
        saved[i] = r->map[fa->stk_first.v[i]];
        r->map[fa->stk_first.v[i]] = graph_opr(r->out, rep)->args[1 + i];
    }
    int rc = copy_ops(r, pl->s, pl->s + pl->p);
    int32_t y = -1;
    if (rc == 0) {
        const graph_op *co = graph_opr(g, f->ops[pl->s + pl->co]);
        y = r->map[co->out[pl->cres]];
        const graph_op *last = graph_opr(g, f->ops[pl->s + (pl->cnt - 1) * pl->p + pl->co]);
        int32_t out_last = last->out[pl->cres];
        const char *res_name = fresh(r->out, graph_val(g, out_last)->name, NULL);
        graph_end_repeat(r->out, &y, &res_name, r->d);
        r->map[carry_in] = saved_carry;
        for (int32_t i = 0; i < fa->stk_first.n; i++) r->map[fa->stk_first.v[i]] = saved[i];
        /* Block-0 body values must not be visible outside: unmap them. */
        for (int32_t k = pl->s; k < pl->s + pl->p; k++) {
            const graph_op *o = graph_opr(g, f->ops[k]);
            for (int32_t i = 0; i < o->nout; i++) r->map[o->out[i]] = -1;
        }
        r->map[out_last] = graph_result(r->out, rep, 0);
    }
    free(saved);
    return rc;
}

/* Walks back from value v through data movement, scales and bias adds to
 * the matmuls that produced it; calls hit on each (at most `budget` ops). */
static void walk_to_matmuls(const graph *g, int32_t v, bool weights_only, bool *mark, int budget) {
    int32_t stack[64], n = 0;
    stack[n++] = v;
    while (n > 0 && budget-- > 0) {
        const graph_value *gv = graph_val(g, stack[--n]);
        const graph_op *o = graph_opr(g, gv->def);
        if (o->kind == OP_MATMUL) {
            for (int j = 0; j < 2; j++) {
                int32_t w = o->in[j];
                if (graph_opr(g, graph_val(g, w)->def)->kind == OP_PARAM) mark[w] = true;
                else if (!weights_only && n < 64) stack[n++] = w; /* the score matmul: follow both sides */
            }
            if (!weights_only) weights_only = true;
            continue;
        }
        if (o->kind != OP_SCALE && o->kind != OP_ADD && o->kind != OP_SUB && o->kind != OP_RESHAPE &&
            o->kind != OP_TRANSPOSE && o->kind != OP_SLICE && o->kind != OP_CONCAT)
            continue;
        for (int32_t j = 0; j < o->nin && n < 64; j++)
            if (graph_opr(g, graph_val(g, o->in[j])->def)->kind != OP_PARAM) stack[n++] = o->in[j];
    }
}

/* The raised graph: the flat graph's ops with r->is_weight's parameters in
 * FP8 (their GEMMs' other operands cast), the run pl rerolled. */
static graph *rebuild(rb *r, const reroll_plan *pl) {
    graph *g = r->f->g;
    graph *out = graph_new(g->name, g->path);
    r->out = out;
    r->err = 0;
    for (int32_t v = 0; v < g->values.n; v++) r->map[v] = -1;
    dtype *declared = arena_alloc(&out->arena, sizeof(dtype) * ((size_t)g->body.n + 1));
    int32_t nin = 0;
    bool changed = false;
    for (int32_t i = 0; i < g->body.n; i++) {
        const graph_op *op = graph_opr(g, g->body.v[i]);
        if (op->kind != OP_INPUT) continue;
        graph_type t = graph_val(g, op->out[0])->type;
        declared[nin++] = t.dtype;
        if (dtype_is_float(t.dtype)) t.dtype = act_dtype(r); /* indices stay i32 */
        changed |= t.dtype != declared[nin - 1];
        r->map[op->out[0]] = graph_result(out, graph_add_input(out, graph_val(g, op->out[0])->name, t), 0);
    }
    if (changed) out->declared = declared;
    top_params(r, pl);
    reroll_args fa;
    if (pl->cnt) reroll_params(r, pl, &fa);
    int rc = 0;
    if (pl->cnt) rc = copy_ops(r, 0, pl->s);
    if (rc == 0 && pl->cnt) rc = reroll_region(r, pl, &fa);
    if (rc == 0) rc = copy_ops(r, pl->cnt ? pl->s + pl->cnt * pl->p : 0, r->f->n);
    if (rc == 0) {
        for (int32_t i = 0; i < g->body.n; i++) {
            const graph_op *op = graph_opr(g, g->body.v[i]);
            if (op->kind != OP_OUTPUT) continue;
            int32_t *vals = xmalloc(sizeof(int32_t) * (size_t)(op->nin + 1));
            for (int32_t j = 0; j < op->nin; j++) vals[j] = r->map[op->in[j]];
            graph_add_output(out, vals, op->nin);
            free(vals);
        }
        rc = graph_verify(out, r->d);
    }
    if (rc == 0) return out;
    graph_free(out);
    return NULL;
}

/* ---- FP8 where it keeps the model's accuracy -----------------------------------
 *
 * The rules above say which GEMM weights may be 8-bit; whether a network
 * tolerates them all is measured. A deep convolutional network adds FP8's
 * rounding at every layer (torchvision's resnet50 with every eligible GEMM
 * in f143: cosine 0.975 against f32), and which layers matter is a property
 * of the network, not of one layer's shape. So the raised graph is run on a
 * seeded input (not the check's: another seed) in f32 and as typed (casts
 * and 8-bit weights rounded, ref.c); below FP8_COSINE, the GEMMs with the
 * shortest reductions (K: the narrow layers, where each rounding weighs
 * most) go back to f16, one distinct K at a time, until it is met.
 * Deterministic: the same input, the same arithmetic. */
#define FP8_COSINE 0.995
enum { FP8_SEED = 7000 };

typedef struct fp8_probe {
    float **in, **want;
    int32_t nin, nout;
} fp8_probe;

static void fp8_probe_free(fp8_probe *p) {
    for (int32_t k = 0; k < p->nin; k++) free(p->in[k]);
    for (int32_t k = 0; k < p->nout; k++) free(p->want[k]);
    free(p->in);
    free(p->want);
}

/* The cosine of g's outputs (as typed) against p->want over all of them;
 * -1 if the run failed (its diagnostic in d). */
static double fp8_cosine(const graph *g, const fp8_probe *p, diag *d) {
    float **got = xcalloc((size_t)p->nout + 1, sizeof(float *));
    ref_options ro = {.quiet = true};
    double dot = 0, gg = 0, ww = 0;
    int rc = ref_run(g, &ro, p->in, got, d);
    int32_t *ids = xmalloc(sizeof(int32_t) * ((size_t)p->nout + 1));
    graph_outputs(g, ids, p->nout);
    for (int32_t k = 0; k < p->nout && rc == 0; k++) {
        int64_t n = graph_type_numel(&graph_val(g, ids[k])->type);
        for (int64_t i = 0; i < n; i++) {
            double a = got[k][i], b = p->want[k][i];
            dot += a * b, gg += a * a, ww += b * b;
        }
    }
    for (int32_t k = 0; k < p->nout; k++) free(got[k]);
    free(got);
    free(ids);
    if (rc) return -1;
    return gg == 0 && ww == 0 ? 1.0 : gg == 0 || ww == 0 ? 0.0 : dot / sqrt(gg * ww);
}

/* The reduction length of the GEMM that reads weight v. */
static int64_t weight_k(const fctx *f, int32_t v) {
    const graph_op *o = graph_opr(f->g, f->ops[f->users[v][0]]);
    const graph_type *t = &graph_val(f->g, v)->type;
    bool a = o->in[0] == v, tr = graph_attr_bool(o, a ? ATTR_TRANSPOSE_A : ATTR_TRANSPOSE_B);
    return t->dim[t->rank - ((a != tr) ? 1 : 2)];
}

/* Parameters of g stored in f143 (a stacked one once). */
static int32_t count_f143(const graph *g) {
    int32_t n = 0;
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *o = graph_opr(g, i);
        n += o->kind == OP_PARAM && graph_val(g, o->out[0])->type.dtype == DT_F143;
    }
    return n;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* out raised with every rule-eligible weight in FP8; returns it, or the
 * graph with the fewest weights back in f16 that keeps FP8_COSINE (out freed). */
static graph *fp8_measured(rb *r, const reroll_plan *pl, graph *out, const models_options *o) {
    const fctx *f = r->f;
    const graph *g = f->g;
    int32_t nw = count_f143(out);
    if (nw == 0) return out;
    fp8_probe p = {.nin = graph_inputs(out, NULL, 0), .nout = graph_outputs(out, NULL, 0)};
    int32_t *ids = xmalloc(sizeof(int32_t) * ((size_t)p.nin + 1));
    graph_inputs(out, ids, p.nin);
    p.in = xcalloc((size_t)p.nin + 1, sizeof(float *));
    p.want = xcalloc((size_t)p.nout + 1, sizeof(float *));
    for (int32_t k = 0; k < p.nin; k++) {
        const graph_type *t = &graph_val(out, ids[k])->type;
        int64_t n = graph_type_numel(t);
        p.in[k] = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
        graph_input_fill_seeded(FP8_SEED + (uint64_t)k, t->dtype, t->scale, p.in[k], n);
    }
    free(ids);
    ref_options f32 = {.strip_precision = true, .quiet = true};
    diag quiet = {0};
    double c0 = ref_run(out, &f32, p.in, p.want, &quiet) ? -1 : fp8_cosine(out, &p, &quiet);
    if (c0 < 0 || c0 >= FP8_COSINE) {
        /* Measured and kept; or not measurable here (the run says why; the rules stand). */
        if (o->report && c0 >= 0)
            fprintf(o->report, "%s: fp8: %d GEMM weight parameters in f143: cosine %.4f against f32 on a seeded input (%.3f asked)\n",
                    g->path, nw, c0, FP8_COSINE);
        else if (o->report)
            fprintf(o->report, "%s: fp8: %d GEMM weight parameters in f143, accuracy not measured: %s", g->path, nw, quiet.text);
        fp8_probe_free(&p);
        return out;
    }
    /* Each rule weight's K (0: not one), and the distinct K, ascending. */
    int64_t *kv = xcalloc((size_t)g->values.n + 1, sizeof(int64_t)), *ks = xmalloc(sizeof(int64_t) * ((size_t)g->values.n + 1));
    int32_t nk = 0;
    for (int32_t v = 0; v < g->values.n; v++)
        if (r->is_weight[v]) ks[nk++] = kv[v] = weight_k(f, v);
    qsort(ks, (size_t)nk, sizeof(int64_t), cmp_i64);
    int32_t u = 0;
    for (int32_t i = 0; i < nk; i++)
        if (!u || ks[i] != ks[u - 1]) ks[u++] = ks[i];
    nk = u;
    /* The distinct K, smallest first, back to f16 one at a time until the
     * target is met (at worst every weight: nothing measured then). */
    int32_t hi = 1, kept = 0;
    double c_hi = 1.0;
    graph *best = NULL;
    for (; hi < nk && !best; hi++) {
        for (int32_t v = 0; v < g->values.n; v++) r->is_weight[v] = kv[v] && kv[v] >= ks[hi];
        graph *t = rebuild(r, pl);
        double c = t ? fp8_cosine(t, &p, &quiet) : -1;
        if (c >= FP8_COSINE) best = t, c_hi = c, kept = count_f143(t);
        else graph_free(t);
    }
    hi--;
    if (!best) { /* every weight back in f16 */
        hi = nk;
        for (int32_t v = 0; v < g->values.n; v++) r->is_weight[v] = false;
        best = rebuild(r, pl);
    }
    if (best && o->report && hi < nk)
        fprintf(o->report,
                "%s: fp8: %d of %d GEMM weight parameters in f143 (those of reductions K >= %lld): cosine %.4f against f32 on a "
                "seeded input, %.4f with all %d (%.3f asked)\n",
                g->path, kept, nw, (long long)ks[hi], c_hi, c0, nw, FP8_COSINE);
    else if (best && o->report)
        fprintf(o->report,
                "%s: fp8: every GEMM weight in f16: even those of the longest reductions (K = %lld) alone in f143 give a "
                "cosine below %.3f against f32 on a seeded input (%.4f with all %d)\n",
                g->path, (long long)ks[nk - 1], FP8_COSINE, c0, nw);
    free(ks);
    free(kv);
    fp8_probe_free(&p);
    if (!best) return out; /* rebuilt once before: cannot fail now; keep what worked */
    graph_free(out);
    return best;
}

graph *models_raise(graph *g, const models_options *o, diag *d) {
    fctx f = {.g = g};
    f.ops = xcalloc((size_t)g->body.n + 1, sizeof(int32_t));
    f.pos = xmalloc(sizeof(int32_t) * (size_t)(g->ops.n + 1));
    for (int32_t i = 0; i < g->ops.n; i++) f.pos[i] = -1;
    for (int32_t i = 0; i < g->body.n; i++) {
        const graph_op *op = graph_opr(g, g->body.v[i]);
        if (graph_op_infos[op->kind].structural) continue;
        f.pos[g->body.v[i]] = f.n;
        f.ops[f.n++] = g->body.v[i];
    }
    f.nusers = xcalloc((size_t)g->values.n + 1, sizeof(int32_t));
    f.users = xcalloc((size_t)g->values.n + 1, sizeof(int32_t *));
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < g->body.n; i++) {
            const graph_op *op = graph_opr(g, g->body.v[i]);
            int32_t at = op->kind == OP_OUTPUT ? f.n : f.pos[g->body.v[i]];
            if (at < 0) continue;
            for (int32_t j = 0; j < op->nin; j++) {
                int32_t v = op->in[j];
                if (pass == 1) f.users[v][f.nusers[v]] = at;
                f.nusers[v]++;
            }
        }
        if (pass == 0)
            for (int32_t v = 0; v < g->values.n; v++) {
                f.users[v] = xmalloc(sizeof(int32_t) * (size_t)(f.nusers[v] + 1));
                f.nusers[v] = 0;
            }
    }
    rb r = {.f = &f, .o = o, .d = d};
    r.map = xmalloc(sizeof(int32_t) * (size_t)(g->values.n + 1));
    r.is_weight = xcalloc((size_t)g->values.n + 1, sizeof(bool));
    for (int32_t v = 0; v < g->values.n; v++) {
        r.map[v] = -1;
        if (graph_opr(g, graph_val(g, v)->def)->kind != OP_PARAM || f.nusers[v] == 0) continue;
        bool w = true;
        for (int32_t u = 0; u < f.nusers[v] && w; u++) {
            int32_t at = f.users[v][u];
            w = at < f.n && graph_opr(g, f.ops[at])->kind == OP_MATMUL;
        }
        /* A small weight stays f16 (but with fp8-all): FP8 would save at most 4 KiB there, and
         * narrow layers (16- to 64-channel 1x1 convolutions, squeeze-excitation
         * gates) carry a network's signal through few channels, where each
         * 8-bit rounding weighs most (docs/onnx.md, "FP8"). */
        r.is_weight[v] = w && (o->precision == MODELS_FP8_ALL || graph_type_numel(&graph_val(g, v)->type) >= FP8_MIN_WEIGHTS);
    }
    /* The weights of projections that feed attention scores stay f16: the
     * softmax's exp turns their FP8 rounding into large relative errors. */
    bool *score_w = xcalloc((size_t)g->values.n + 1, sizeof(bool));
    for (int32_t k = 0; k < f.n; k++) {
        const graph_op *op = graph_opr(g, f.ops[k]);
        if (op->kind != OP_SOFTMAX) continue;
        walk_to_matmuls(g, op->in[0], false, score_w, 256);
        /* Forward: probabilities @ V, then through data movement to the output projection. */
        int32_t v = op->out[0];
        bool past_pv = false;
        for (int hops = 0; hops < 32; hops++) {
            if (f.nusers[v] != 1 || f.users[v][0] >= f.n) break;
            const graph_op *u = graph_opr(g, f.ops[f.users[v][0]]);
            if (u->kind == OP_MATMUL && !past_pv) {
                past_pv = true;
                for (int j = 0; j < 2; j++) /* V: the other operand */
                    if (u->in[j] != v) walk_to_matmuls(g, u->in[j], true, score_w, 64);
            } else if (u->kind == OP_MATMUL) {
                for (int j = 0; j < 2; j++)
                    if (graph_opr(g, graph_val(g, u->in[j])->def)->kind == OP_PARAM) score_w[u->in[j]] = true;
                break;
            } else if (u->kind != OP_RESHAPE && u->kind != OP_TRANSPOSE && u->kind != OP_SLICE && u->kind != OP_CONCAT &&
                       u->kind != OP_CAST) {
                break;
            }
            v = u->out[0];
        }
    }
    /* So do the first and the last GEMM (patch embedding, classifier head),
     * as FP8 recipes keep them: their errors are not averaged by any later layer. */
    for (int32_t k = 0; k < f.n; k++) {
        const graph_op *op = graph_opr(g, f.ops[k]);
        if (op->kind != OP_MATMUL) continue;
        bool first = false, last = false;
        for (int j = 0; j < 2; j++) {
            int32_t v = op->in[j];
            for (int hops = 0; hops < 16; hops++) {
                const graph_op *p = graph_opr(g, graph_val(g, v)->def);
                if (p->kind == OP_INPUT) first = true;
                if (p->kind != OP_RESHAPE && p->kind != OP_TRANSPOSE && p->kind != OP_SLICE && p->kind != OP_PAD) break;
                v = p->in[0];
            }
        }
        int32_t v = op->out[0];
        for (int hops = 0; hops < 16 && !last; hops++) {
            if (f.nusers[v] != 1) break;
            int32_t at = f.users[v][0];
            if (at == f.n) last = true;
            if (at >= f.n) break;
            const graph_op *u = graph_opr(g, f.ops[at]);
            if (u->kind != OP_ADD && u->kind != OP_RESHAPE && u->kind != OP_TRANSPOSE && u->kind != OP_SLICE && u->kind != OP_SCALE)
                break;
            v = u->out[0];
        }
        for (int j = 0; j < 2 && (first || last); j++)
            if (graph_opr(g, graph_val(g, op->in[j])->def)->kind == OP_PARAM) score_w[op->in[j]] = true;
    }
    for (int32_t v = 0; v < g->values.n; v++)
        if (score_w[v] && o->precision != MODELS_FP8_ALL) r.is_weight[v] = false;
    free(score_w);
    reroll_plan pl = o->reroll ? find_reroll(&f) : (reroll_plan){.bad = -1};
    graph *out = rebuild(&r, &pl);
    if (out && o->precision == MODELS_FP8 && !o->fp8_unmeasured) out = fp8_measured(&r, &pl, out, o);
    int rc = out ? 0 : -1;
    if (rc == 0 && o->report) {
        if (pl.cnt) {
            fprintf(o->report, "%s: rerolled %d blocks of %d ops (from '%s') into one repeat", g->path, pl.cnt, pl.p,
                    graph_op_name(g, f.ops[pl.s]));
            if (pl.bad >= 0 && pl.why)
                fprintf(o->report, "; the next block was not rerolled: op '%s' has %s", graph_op_name(g, f.ops[pl.bad]), pl.why);
            fprintf(o->report, "\n");
        } else if (o->reroll) {
            fprintf(o->report, "%s: no blocks rerolled: no two consecutive runs of ops have the same structure\n", g->path);
        }
    }
    for (int32_t v = 0; v < g->values.n; v++) free(f.users[v]);
    free(f.users);
    free(f.nusers);
    free(f.ops);
    free(f.pos);
    free(r.map);
    free(r.is_weight);
    if (out) {
        out->keep = g->keep;
        out->keep_free = g->keep_free;
        g->keep_free = NULL;
    }
    graph_free(g);
    if (rc) {
        graph_free(out);
        return NULL;
    }
    return out;
}
