/* expand.c: graph -> mid with the plan's choices (docs/lowering.md).
 *
 * Every op picks the layout of its result and asks for its operands in the
 * layouts it needs; `want` returns the operand as is when it already lies so,
 * places a parameter or input there when nothing has placed it yet, and
 * otherwise emits a COPY. Elementwise ops follow their first full-shape
 * operand, row ops (softmax, layer norm) keep rows whole, a matmul runs on the
 * plan's (batch, rows, columns, K) tile grid with K partials reduced across
 * tiles (expand_gemm.c). Choosing the grid is the search's business
 * (src/search); what consumers their producers absorb is the mid passes'
 * (absorb.c, own_partials.c). */
#include "expand.h"

#include <stdlib.h>
#include <string.h>

const char *const mid_kind_names[MID_COUNT] = {
#define X(id, name) [MID_##id] = #name,
    MID_KINDS(X)
#undef X
};

/* ---- tensors and prims ------------------------------------------------------ */

int32_t mid_storage(const mid_program *p, int32_t t) {
    for (;;) {
        const mid_tensor *x = mid_t(p, t);
        if (x->alias_of >= 0) t = x->alias_of;
        else if (x->slice_of >= 0) t = x->slice_of;
        else return t;
    }
}

/* Value types with scalars as [1], the shape every layout needs. */
static graph_type vtype(const mx *x, int32_t v) {
    graph_type t = graph_val(x->g, v)->type;
    if (t.rank == 0) {
        t.rank = 1;
        t.dim[0] = 1;
    }
    return t;
}

int32_t ex_new_tensor(mx *x, const char *name, dtype dt, int scale, const layout *lay, int32_t value) {
    mid_tensor t = {.name = arena_strdup(&x->p->arena, name), .dtype = dt, .scale = (int8_t)scale, .value = value,
                    .param_op = -1, .stack = 1, .slice_of = -1, .alias_of = -1, .scope = x->block};
    if (lay) {
        t.lay = *lay;
        t.lay.elem_bytes = dtype_bytes(dt);
        t.placed = true;
    }
    vec_push(&x->p->arena, &x->p->tensors, t);
    return x->p->tensors.n - 1;
}

static mid_block *cur_block(mx *x) { return x->block < 0 ? &x->p->top : &mid_p(x->p, x->block)->body; }

int32_t ex_emit(mx *x, mid_kind k, const int32_t *in, int nin, const int32_t *out, int nout) {
    mid_prim pr = {.kind = k, .nin = nin, .nout = nout, .origin = x->origin, .cast_ordinal = -1, .acc = DT_F32};
    TS_ASSERT(nin <= MID_MAX_IN && nout <= MID_MAX_OUT);
    for (int i = 0; i < nin; i++) pr.in[i] = in[i];
    for (int i = 0; i < nout; i++) pr.out[i] = out[i];
    vec_push(&x->p->arena, &x->p->prims, pr);
    int32_t id = x->p->prims.n - 1;
    vec_push(&x->p->arena, cur_block(x), id);
    return id;
}

/* ---- layout plans ------------------------------------------------------------- */

/* Tile strides row-major over the parts grid, starting at tile 0. */
void ex_row_major_tiles(layout *l) {
    int32_t s = 1;
    for (int a = l->rank - 1; a >= 0; a--) {
        l->tile_stride[a] = s;
        s *= (int32_t)l->parts[a];
    }
}

static void set_parts(layout *l, int a, int64_t parts) {
    l->block[a] = cdiv(l->dim[a], parts);
    l->parts[a] = cdiv(l->dim[a], l->block[a]);
}

/* Spread a tensor over the machine: leading axes first; with rows_whole the
 * last axis stays on one tile (softmax, layer norm need whole rows). */
enum { MIN_SHARD_BYTES = 1024 }; /* below this a tile's share is all overhead */

static layout plan(const mx *x, const graph_type *t, bool rows_whole) {
    layout l = layout_single(t->rank, t->dim, dtype_bytes(t->dtype));
    int64_t bytes = graph_type_numel(t) * dtype_bytes(t->dtype);
    int64_t left = min64(x->m->tiles, bytes / MIN_SHARD_BYTES > 1 ? bytes / MIN_SHARD_BYTES : 1);
    int last = rows_whole ? t->rank - 1 : t->rank;
    if (last == 0) last = rows_whole ? 0 : 1;
    for (int a = 0; a < last && left > 1; a++) {
        int64_t p = min64(t->dim[a], left);
        set_parts(&l, a, p);
        left /= l.parts[a];
    }
    ex_row_major_tiles(&l);
    /* A small tensor (on under a sixteenth of the tiles) starts where its op's id
     * puts it, so that a network of many small layers does not run every one
     * of them, and keep every exchange table, on the first tiles. */
    int64_t shards = layout_shards(&l);
    if (shards * 16 < (int64_t)x->m->tiles) l.tile_base = ex_spread_base(x->origin, (int64_t)x->m->tiles - shards);
    return l;
}

/* The layout an operand of shape t needs so every tile of out holds the
 * elements its shard combines with (NumPy broadcasting: size-1 and missing
 * axes are replicated along out's partition). An operand of out's rank is
 * stored as out is (transposed or not), so the two walk storage together. */
static layout aligned(const layout *out, const graph_type *t) {
    layout_encoding enc = out->enc == ENC_ROW_MAJOR_T && t->rank == out->rank ? ENC_ROW_MAJOR_T : ENC_ROW_MAJOR;
    layout l = {.rank = t->rank, .elem_bytes = dtype_bytes(t->dtype), .enc = enc, .tile_base = out->tile_base};
    for (int i = 0; i < t->rank; i++) {
        l.dim[i] = t->dim[i];
        l.parts[i] = 1;
        l.block[i] = t->dim[i];
    }
    int off = out->rank - t->rank;
    for (int j = 0; j < out->rank; j++) {
        int i = j - off;
        if (i >= 0 && t->dim[i] == out->dim[j]) {
            l.parts[i] = out->parts[j];
            l.block[i] = out->block[j];
            l.tile_stride[i] = out->tile_stride[j];
        } else if (out->parts[j] > 1) {
            layout_replicate(&l, out->parts[j], out->tile_stride[j]);
        }
    }
    for (int k = 0; k < out->nrep; k++) layout_replicate(&l, out->rep[k], out->rep_stride[k]);
    return l;
}

layout ex_unreplicated(layout l) {
    l.nrep = 0;
    return l;
}

/* ---- placing and copying ------------------------------------------------------ */

void ex_place(mx *x, int32_t t, const layout *lay) {
    mid_tensor *mt = mid_t(x->p, t);
    TS_ASSERT(!mt->placed);
    mt->lay = *lay;
    mt->lay.elem_bytes = dtype_bytes(mt->dtype);
    mt->placed = true;
    if (mt->slice_of >= 0) {
        mid_tensor *st = mid_t(x->p, mt->slice_of);
        st->lay = mt->lay;
        st->placed = true;
    }
}

/* The tensor holding value v, placed (spread over the machine) if nothing has
 * placed it yet. */
static int32_t make_cast(mx *x, int32_t v);

static int32_t read(mx *x, int32_t v) {
    int32_t t = x->vt[v];
    TS_ASSERT(t >= 0);
    if (x->late_src[v] >= 0) return make_cast(x, v);
    if (mid_t(x->p, t)->stack > 1 && !x->err)
        x->err = FAIL(x, "'%%%s' is sliced by a repeat; using it elsewhere is not supported by the compiler yet",
                      graph_val(x->g, v)->name);
    if (!mid_t(x->p, t)->placed) {
        graph_type ty = vtype(x, v);
        layout l = plan(x, &ty, false);
        ex_place(x, t, &l);
    }
    return t;
}

/* A copy made in block b is visible here if b is this block or encloses it. */
static bool visible_from(const mx *x, int32_t b) {
    if (b < 0) return true;
    for (int i = 0; i < x->depth; i++)
        if (x->open[i] == b) return true;
    return false;
}

void ex_emit_copy(mx *x, int32_t src, int32_t dst, const layout_view *view) {
    int32_t pr = ex_emit(x, MID_COPY, &src, 1, &dst, 1);
    if (view) {
        mid_p(x->p, pr)->view = *view;
        mid_p(x->p, pr)->has_view = true;
    }
}


/* Value v in exactly layout lay (element size from v's dtype). */
/* Where the layers of a stacked parameter live when its consumer wants each
 * layer on many tiles (a layer norm's gain on every row tile): not every
 * layer on every one of them, but the last axis cut into small blocks over a
 * few tiles, every layer stacked there; each iteration copies its layer out.
 * Where the consumer leaves tiles out (729 rows of two parts leave 14 of the
 * C600's tiles), the blocks go to the longest run of those, as few as it
 * holds: a tile holding a block it also receives copies it on-tile, a run
 * costing as much as 300 bytes of exchange, in the consumer's compute step.
 * Otherwise the home tiles are spread by the parameter's op id, so that
 * small stacked parameters do not all pile onto tile 0. */
enum { HOME_MAX_STACK_BYTES = 8192, HOME_MAX_LAYER_BYTES = 16384, HOME_BLOCK_BYTES = 64 };

/* The longest run of tiles no (shard, replica) of l is on: its first tile
 * and length (0: l covers every tile). */
static int64_t free_run(const layout *l, uint32_t tiles, int64_t *first) {
    bool *used = xcalloc(tiles + 1, sizeof(bool));
    int64_t ns = layout_shards(l), nr = layout_replicas(l), sh[LAYOUT_MAX_RANK], r[LAYOUT_MAX_RANK];
    for (int64_t i = 0; i < ns; i++) {
        for (int64_t k = i, a = l->rank - 1; a >= 0; a--) sh[a] = k % l->parts[a], k /= l->parts[a];
        for (int64_t j = 0; j < nr; j++) {
            for (int64_t q = j, a = l->nrep - 1; a >= 0; a--) r[a] = q % l->rep[a], q /= l->rep[a];
            int32_t t = layout_tile(l, sh, r);
            if (t >= 0 && (uint32_t)t < tiles) used[t] = true;
        }
    }
    int64_t best = 0, run = 0;
    *first = 0;
    for (uint32_t t = 0; t <= tiles; t++) {
        if (t < tiles && !used[t]) {
            run++;
            continue;
        }
        if (run > best) best = run, *first = (int64_t)t - run;
        run = 0;
    }
    free(used);
    return best;
}

static bool stack_home(const mx *x, const mid_tensor *slice, const layout *want_lay, layout *home) {
    const mid_tensor *st = mid_t(x->p, slice->slice_of);
    int64_t layer = want_lay->elem_bytes;
    for (int a = 0; a < want_lay->rank; a++) layer *= want_lay->dim[a];
    /* Small layers only (gains, biases): a weight is never copied per iteration. */
    if (layer > HOME_MAX_LAYER_BYTES || layout_replicas(want_lay) <= 1 ||
        layout_shard_bytes(want_lay) * st->stack <= HOME_MAX_STACK_BYTES)
        return false;
    *home = layout_single(want_lay->rank, want_lay->dim, want_lay->elem_bytes);
    int last = home->rank - 1;
    int64_t per = HOME_BLOCK_BYTES / home->elem_bytes > 0 ? HOME_BLOCK_BYTES / home->elem_bytes : 1;
    int64_t parts = min64(cdiv(home->dim[last], per), x->m->tiles), first = 0;
    int64_t spare = free_run(want_lay, x->m->tiles, &first);
    set_parts(home, last, spare > 0 ? min64(parts, spare) : parts);
    ex_row_major_tiles(home);
    if (spare > 0) {
        home->tile_base = (int32_t)first + ex_spread_base(st->param_op, spare - home->parts[last]);
        return true;
    }
    int64_t room = x->m->tiles - home->parts[last];
    home->tile_base = ex_spread_base(st->param_op, room);
    return true;
}

static void note_hint(mx *x, int32_t v, const layout *lay);

static int32_t late_cast(mx *x, int32_t v, const layout *want, const layout_view *view, const char *what);
static int32_t want_from(mx *x, int32_t t, int32_t v, const layout *lay);

int32_t ex_want(mx *x, int32_t v, const layout *lay_in) {
    layout lay = *lay_in;
    note_hint(x, v, lay_in);
    int32_t t = x->vt[v];
    mid_tensor *mt = mid_t(x->p, t);
    lay.elem_bytes = dtype_bytes(mt->dtype);
    if (x->late_src[v] >= 0) return late_cast(x, v, &lay, NULL, NULL);
    if (mt->stack > 1 && !x->err)
        x->err = FAIL(x, "'%%%s' is sliced by a repeat; using it elsewhere is not supported by the compiler yet",
                      graph_val(x->g, v)->name);
    if (!mt->placed) {
        layout home;
        if (mt->slice_of < 0 || !stack_home(x, mt, &lay, &home)) {
            ex_place(x, t, &lay);
            return t;
        }
        ex_place(x, t, &home); /* then copied out below, each iteration */
        mt = mid_t(x->p, t);
        if (layout_equal(&mt->lay, &lay)) return t;
    }
    return want_from(x, t, v, &lay);
}

/* Tensor t (holding value v) in exactly layout lay: t, a copy already made,
 * or a new copy (staged through AMP-left panels on t's tiles where that
 * pays: layout_amp_left_stage). */
static int32_t want_from(mx *x, int32_t t, int32_t v, const layout *lay) {
    if (layout_equal(&mid_t(x->p, t)->lay, lay)) return t;
    for (int32_t i = 0; i < x->memo.n; i++) {
        const copy_memo *c = &x->memo.v[i];
        if (c->src == t && visible_from(x, c->block) && layout_equal(&mid_t(x->p, c->dst)->lay, lay)) return c->dst;
    }
    char name[256];
    layout stage;
    int32_t from = t;
    if (layout_amp_left_stage(&mid_t(x->p, t)->lay, lay, &stage)) from = want_from(x, t, v, &stage);
    const mid_tensor *mt = mid_t(x->p, t); /* want may have grown the tensor array */
    snprintf(name, sizeof name, "%s@%s", mt->name, graph_op_name(x->g, x->origin));
    int32_t u = ex_new_tensor(x, name, mt->dtype, mt->scale, lay, v);
    ex_emit_copy(x, from, u, NULL);
    copy_memo c = {t, u, x->block};
    vec_push(&x->p->arena, &x->memo, c);
    return u;
}

/* Value v seen through view (destination -> source coordinates) as a new
 * tensor of layout lay, e.g. a transposed operand. */
/* A transposing copy between partitions permutes on the source's tiles
 * first (one strided copy per shard, into the source's partition with its
 * axes permuted), so the exchange that follows moves contiguous rows, not
 * one fragment per element. Views that also shift, pad or drop axes copy
 * directly. */
static void emit_view_copy(mx *x, int32_t src, int32_t dst, const layout_view *view) {
    const layout *ls = &mid_t(x->p, src)->lay, *ld = &mid_t(x->p, dst)->lay;
    bool perm = ls->rank == ld->rank, moved = false, swap2 = perm && ld->rank >= 2;
    for (int i = 0; i < ld->rank && perm; i++) {
        perm = view->off[i] == 0 && view->axis[i] >= 0 && view->axis[i] < ls->rank;
        moved |= view->axis[i] != i;
        swap2 &= view->axis[i] == (i < ld->rank - 2 ? i : 2 * ld->rank - 3 - i);
    }
    /* Swapping the last two axes into a transposed encoding (or out of one)
     * keeps the storage order: the copy moves whole runs as it is. */
    if (!perm || !moved || (swap2 && layout_transposed(ls) != layout_transposed(ld))) {
        ex_emit_copy(x, src, dst, view);
        return;
    }
    layout st = {.rank = ld->rank, .elem_bytes = ls->elem_bytes, .enc = ENC_ROW_MAJOR, .tile_base = ls->tile_base};
    for (int i = 0; i < ld->rank; i++) {
        int a = view->axis[i];
        st.dim[i] = ls->dim[a];
        st.parts[i] = ls->parts[a];
        st.block[i] = ls->block[a];
        st.tile_stride[i] = ls->tile_stride[a];
    }
    layout bare = *ld;
    bare.nrep = 0;
    if (layout_equal(&st, &bare) || layout_check(&st, (int32_t)x->m->tiles, &(diag){0}) != 0) {
        ex_emit_copy(x, src, dst, view);
        return;
    }
    const mid_tensor *ms = mid_t(x->p, src);
    char name[256];
    snprintf(name, sizeof name, "%s.permuted", mid_t(x->p, dst)->name);
    int32_t p = ex_new_tensor(x, name, ms->dtype, ms->scale, &st, ms->value);
    ex_emit_copy(x, src, p, view);
    ex_emit_copy(x, p, dst, NULL);
}

static bool permute_back(const layout *d, const layout_view *view, int src_rank, layout *out);

int32_t ex_want_view(mx *x, int32_t v, const layout *lay, const layout_view *view, const char *what) {
    layout back;
    if (x->recording && permute_back(lay, view, graph_val(x->g, v)->type.rank, &back)) note_hint(x, v, &back);
    if (x->late_src[v] >= 0) {
        const layout *lt = &mid_t(x->p, x->vt[v])->lay;
        if (!(lay->enc == ENC_ROW_MAJOR_T && permute_back(lay, view, lt->rank, &back) && layout_equal(&back, lt)))
            return late_cast(x, v, lay, view, what);
    }
    int32_t t = read(x, v);
    const mid_tensor *mt = mid_t(x->p, t);
    char name[256];
    snprintf(name, sizeof name, "%s@%s", mt->name, what);
    int32_t u = ex_new_tensor(x, name, mt->dtype, mt->scale, lay, v);
    /* The view of t's very bytes (keys written row-major where the scores
     * GEMM reads them transposed): an alias, no copy. */
    if (lay->enc == ENC_ROW_MAJOR_T && permute_back(lay, view, mt->lay.rank, &back) && layout_equal(&back, &mt->lay)) {
        mid_t(x->p, u)->alias_of = t;
        return u;
    }
    emit_view_copy(x, t, u, view);
    return u;
}

int32_t ex_result(mx *x, int32_t v, const layout *lay) {
    const graph_value *gv = graph_val(x->g, v);
    int32_t t = ex_new_tensor(x, gv->name, gv->type.dtype, gv->type.scale, lay, v);
    x->vt[v] = t;
    return t;
}

/* ---- late casts ----------------------------------------------------------------- */

/* The cast of graph value v (the result of a graph cast op) from in to out,
 * in the block being filled, as the cast op's: the op's next ordinal, and
 * early when the plan moves that site ahead of its copies. The first one
 * made of a waiting value is where the value is watched. */
static int32_t emit_cast(mx *x, int32_t v, int32_t in, int32_t out) {
    const graph_value *gv = graph_val(x->g, v);
    const graph_op *o = graph_opr(x->g, gv->def);
    int32_t saved = x->origin;
    x->origin = gv->def;
    int32_t pr = ex_emit(x, MID_EWISE, &in, 1, &out, 1);
    x->origin = saved;
    mid_prim *p = mid_p(x->p, pr);
    p->ew = KERNEL_EW_CAST;
    p->cast_ordinal = x->cast_count[gv->def]++;
    p->f[0] = dtype_is_f8(gv->type.dtype) && !graph_attr_bool(o, ATTR_SATURATE);
    p->early = p->cast_ordinal < 64 && (x->plan->casts_all_early || (x->plan->cast_early[gv->def] >> p->cast_ordinal & 1));
    if (!x->probed[v]) {
        mid_probe pb = {v, out, pr, x->block};
        vec_push(&x->p->arena, &x->p->probes, pb);
        x->probed[v] = true;
    }
    return pr;
}

/* The waiting cast of v made where its tensor is, here: it waits no more. */
static int32_t make_cast(mx *x, int32_t v) {
    int32_t t = x->vt[v], src = x->late_src[v];
    x->late_src[v] = -1;
    emit_cast(x, v, src, t);
    return t;
}

/* The row-major form an elementwise kernel can write in place of l (AMP
 * panels are written by a copy after it): l's partition and replicas. */
static layout castable(const layout *l) {
    layout r = *l;
    r.enc = layout_transposed(l) ? ENC_ROW_MAJOR_T : ENC_ROW_MAJOR;
    return r;
}

/* Waiting value v in layout want (seen through view, when not NULL): its
 * source copied there in f16 and cast there, in want's row-major form and
 * then packed into want on the same tiles when want is AMP panels. The
 * cast-order pass moves it back ahead of the copies where the plan says. */
static int32_t late_cast(mx *x, int32_t v, const layout *want, const layout_view *view, const char *what) {
    int32_t t = x->vt[v], src = x->late_src[v];
    if (!view && layout_equal(&mid_t(x->p, t)->lay, want)) return make_cast(x, v);
    if (!view)
        for (int32_t i = 0; i < x->late_memo.n; i++) {
            const copy_memo *c = &x->late_memo.v[i];
            if (c->src == v && visible_from(x, c->block) && layout_equal(&mid_t(x->p, c->dst)->lay, want)) return c->dst;
        }
    layout r = castable(want);
    r.elem_bytes = mid_t(x->p, src)->lay.elem_bytes;
    if (layout_check_form(&r, (int32_t)x->m->tiles, &(diag){0}) != 0) { /* no row-major form: cast where it is */
        make_cast(x, v);
        return view ? ex_want_view(x, v, want, view, what) : ex_want(x, v, want);
    }
    char name[256];
    const mid_tensor *ms = mid_t(x->p, src);
    snprintf(name, sizeof name, "%s@%s", ms->name, view ? what : graph_op_name(x->g, x->origin));
    int32_t in;
    if (view) {
        in = ex_new_tensor(x, name, ms->dtype, ms->scale, &r, ms->value);
        emit_view_copy(x, src, in, view);
    } else {
        in = want_from(x, src, ms->value, &r);
    }
    const mid_tensor *mt = mid_t(x->p, t);
    snprintf(name, sizeof name, "%s@%s", mt->name, view ? what : graph_op_name(x->g, x->origin));
    int32_t out = ex_new_tensor(x, name, mt->dtype, mt->scale, &r, v);
    emit_cast(x, v, in, out);
    int32_t z = out;
    if (!layout_equal(&mid_t(x->p, out)->lay, want)) {
        z = ex_new_tensor(x, name, mid_t(x->p, out)->dtype, mid_t(x->p, out)->scale, want, v);
        ex_emit_copy(x, out, z, NULL);
    }
    if (!view) {
        copy_memo c = {v, z, x->block};
        vec_push(&x->p->arena, &x->late_memo, c);
    }
    return z;
}

/* ---- elementwise ops ------------------------------------------------------------ */

static bool same_dims(const graph_type *a, const graph_type *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

/* The layout of o's k-th full-shape operand (from 0), unreplicated, when a
 * pointwise result can take it: row-major, or for an elementwise op (not
 * rows_whole) row-major transposed. */
static bool operand_layout(mx *x, const graph_op *o, int k, bool rows_whole, layout *out) {
    graph_type ot = vtype(x, o->out[0]);
    for (int32_t i = 0; i < o->nin; i++) {
        graph_type it = vtype(x, o->in[i]);
        if (!same_dims(&it, &ot) || k-- > 0) continue;
        int32_t t = read(x, o->in[i]);
        layout l = ex_unreplicated(mid_t(x->p, t)->lay);
        bool whole = l.parts[l.rank - 1] == 1;
        *out = l;
        return (l.enc == ENC_ROW_MAJOR && (!rows_whole || whole)) || (l.enc == ENC_ROW_MAJOR_T && !rows_whole);
    }
    return false;
}

/* The result layout of a pointwise op: its first full-shape operand's (when
 * operand_layout allows), else spread over the machine. */
static layout follow(mx *x, const graph_op *o, bool rows_whole) {
    layout l;
    if (operand_layout(x, o, 0, rows_whole, &l)) return l;
    graph_type ot = vtype(x, o->out[0]);
    return plan(x, &ot, rows_whole);
}

const char *const mid_ew_layout_names[MID_EWL_COUNT] = {"first", "second", "spread"};

/* Per graph op, the EWISE op it expands to, plus one (0: none): KERNEL_EW_OPS's
 * ids are the graph's. */
static const int8_t ew_of_op[OP_COUNT] = {
#define X(id, name, arity, cls) [OP_##id] = KERNEL_EW_##id + 1,
    KERNEL_EW_OPS(X)
#undef X
};

bool mid_op_is_ewise(int kind) { return kind >= 0 && kind < OP_COUNT && ew_of_op[kind]; }

/* The layout an elementwise op works in: the plan's choice (ew_layout),
 * recorded as the rule's where it gives the rule's layout or cannot be
 * had (no second full-shape operand, or one no result can take). */
static layout ewise_layout(mx *x, const graph_op *o) {
    int8_t *want = &x->plan->ew_layout[x->origin];
    layout l = follow(x, o, false), c = l;
    graph_type ot = vtype(x, o->out[0]);
    if (*want == MID_EWL_SECOND && !operand_layout(x, o, 1, false, &c)) c = l;
    if (*want == MID_EWL_SPREAD) c = plan(x, &ot, false);
    if (layout_equal(&c, &l)) *want = MID_EWL_FIRST;
    return c;
}

static int expand_ewise(mx *x, const graph_op *o, kernel_ew_op ew) {
    layout l = ewise_layout(x, o);
    int32_t in[2];
    for (int32_t i = 0; i < o->nin; i++) {
        graph_type it = vtype(x, o->in[i]);
        layout a = aligned(&l, &it);
        in[i] = ex_want(x, o->in[i], &a);
    }
    /* An f16-to-f8 cast used only in its own block waits for its consumers
     * (late_cast); others are made here. */
    const graph_type *ti = &graph_val(x->g, o->in[0])->type, *to = &graph_val(x->g, o->out[0])->type;
    if (ew == KERNEL_EW_CAST && ti->dtype == DT_F16 && dtype_is_f8(to->dtype) && x->use_parent[o->out[0]] == o->parent) {
        ex_result(x, o->out[0], &l);
        x->late_src[o->out[0]] = in[0];
        return 0;
    }
    int32_t out = ex_result(x, o->out[0], &l);
    int32_t pr = ex_emit(x, MID_EWISE, in, o->nin, &out, 1);
    mid_prim *p = mid_p(x->p, pr);
    p->ew = ew;
    if (ew == KERNEL_EW_SCALE) p->f[0] = (float)graph_attr_float(o, ATTR_BY);
    if (ew == KERNEL_EW_CAST) {
        p->cast_ordinal = x->cast_count[x->origin]++;
        p->f[0] = dtype_is_f8(graph_val(x->g, o->out[0])->type.dtype) && !graph_attr_bool(o, ATTR_SATURATE);
    }
    return 0;
}

/* Softmax over an axis other than the last: move that axis last through a
 * transposing copy, run the row kernel, and move it back. */
static int expand_softmax_axis(mx *x, const graph_op *o, int axis) {
    graph_type it = vtype(x, o->in[0]), pt = it;
    int last = it.rank - 1;
    pt.dim[axis] = it.dim[last];
    pt.dim[last] = it.dim[axis];
    layout_view swap = layout_view_identity(it.rank); /* its own inverse */
    swap.axis[axis] = last;
    swap.axis[last] = axis;
    layout lp = plan(x, &pt, true);
    int32_t moved = ex_want_view(x, o->in[0], &lp, &swap, "axis_last");
    const graph_value *gv = graph_val(x->g, o->out[0]);
    char name[256];
    snprintf(name, sizeof name, "%s.axis_last", gv->name);
    int32_t sm = ex_new_tensor(x, name, gv->type.dtype, 0, &lp, -1);
    ex_emit(x, MID_SOFTMAX, &moved, 1, &sm, 1);
    layout lo = plan(x, &it, false);
    int32_t out = ex_result(x, o->out[0], &lo);
    ex_emit_copy(x, sm, out, &swap);
    return 0;
}

/* A layer norm's rows cut over tiles (the plan's row_parts): the layout l
 * of whole rows gets its last axis cut into that many parts, each on its
 * own tile next to the row's others, where the machine has the tiles; the
 * parts actually made (1: whole rows, l unchanged), recorded in the plan. */
static int64_t row_parts(const mx *x, layout *l) {
    int32_t *want_parts = &x->plan->row_parts[x->origin];
    int last = l->rank - 1;
    layout c = *l;
    if (*want_parts > 1 && l->parts[last] == 1 && l->enc == ENC_ROW_MAJOR && l->nrep == 0) {
        set_parts(&c, last, min64(*want_parts, MID_MAX_ROW_PARTS));
        ex_row_major_tiles(&c);
    }
    if (c.parts[last] < 2 || c.tile_base + layout_shards(&c) > (int64_t)x->m->tiles) {
        if (*want_parts > 1) *want_parts = 1; /* recorded as made: whole rows */
        return 1;
    }
    *want_parts = (int32_t)c.parts[last];
    *l = c;
    return c.parts[last];
}

/* Each part's statistics (LN_MOMENTS: [..., P, 3] f32, one triple per tile
 * of the row), gathered so every tile of a row holds all P in order: the
 * kernel writes its own slot there, the exchange the others. */
static int32_t row_moments(mx *x, const graph_op *o, int32_t xin, const layout *l) {
    int last = l->rank - 1;
    layout ls = *l;
    ls.rank = l->rank + 1;
    ls.elem_bytes = 4;
    ls.dim[last] = l->parts[last], ls.block[last] = 1, ls.parts[last] = l->parts[last];
    ls.dim[last + 1] = ls.block[last + 1] = 3, ls.parts[last + 1] = 1, ls.tile_stride[last + 1] = 0;
    layout lg = ls;
    lg.block[last] = lg.dim[last], lg.parts[last] = 1, lg.tile_stride[last] = 0;
    layout_replicate(&lg, l->parts[last], l->tile_stride[last]);
    char name[256];
    snprintf(name, sizeof name, "%s.moments", graph_val(x->g, o->out[0])->name);
    int32_t st = ex_new_tensor(x, name, DT_F32, 0, &ls, -1);
    snprintf(name, sizeof name, "%s.moments_all", graph_val(x->g, o->out[0])->name);
    int32_t sg = ex_new_tensor(x, name, DT_F32, 0, &lg, -1);
    /* Each tile writes its triple into its own slot of the gathered
     * statistics too, so the copy moves only the other parts' triples. */
    ex_emit(x, MID_LN_MOMENTS, &xin, 1, (int32_t[2]){st, sg}, 2);
    ex_emit_copy(x, st, sg, NULL);
    mid_p(x->p, x->p->prims.n - 1)->remote = true;
    return sg;
}

int64_t mid_layer_norm_parts(const mid_program *p, const mid_prim *pr) {
    if (pr->kind != MID_LAYER_NORM || pr->nin < 4) return 0;
    const layout *l = &mid_t(p, pr->in[3])->lay;
    return l->dim[l->rank - 2];
}

static int expand_rows(mx *x, const graph_op *o, mid_kind k) {
    graph_type it = vtype(x, o->in[0]);
    if (k == MID_SOFTMAX) {
        int64_t axis = graph_attr_int(o, ATTR_AXIS);
        if (axis < 0) axis += graph_val(x->g, o->in[0])->type.rank;
        if (axis != it.rank - 1 && graph_val(x->g, o->in[0])->type.rank > 0) return expand_softmax_axis(x, o, (int)axis);
    }
    layout l = follow(x, o, true);
    int64_t parts = k == MID_LAYER_NORM ? row_parts(x, &l) : 1;
    int32_t in[4];
    /* With parts, the statistics first: gamma and beta then cross the
     * exchange in the phase that gathers them. */
    for (int32_t i = 0; i < o->nin; i++) {
        graph_type t = vtype(x, o->in[i]);
        layout a = aligned(&l, &t);
        in[i] = ex_want(x, o->in[i], &a);
        if (i == 0 && parts > 1) in[3] = row_moments(x, o, in[0], &l);
    }
    int nin = o->nin + (parts > 1 ? 1 : 0);
    int32_t out = ex_result(x, o->out[0], &l);
    int32_t pr = ex_emit(x, k, in, nin, &out, 1);
    if (k == MID_LAYER_NORM) mid_p(x->p, pr)->f[0] = (float)graph_attr_float(o, ATTR_EPS);
    return 0;
}

/* ---- data movement ---------------------------------------------------------------- */

/* A reshape pairs groups of input axes with groups of output axes of equal
 * element count ([1, 729, 1152] -> [729, 16, 72]: {1, 729} -> {729} and
 * {1152} -> {16, 72}). It is free (an alias of the same bytes) when the
 * storage is plain row-major and, in every group, at most the first axis
 * longer than 1 is partitioned, with a block that covers whole rows of the
 * output group: each shard then holds one contiguous range of the group in
 * the new order. */
typedef struct reshape_groups {
    int n;
    int in0[LAYOUT_MAX_RANK + 1], out0[LAYOUT_MAX_RANK + 1]; /* group g: axes [in0[g], in0[g+1]) */
} reshape_groups;

static reshape_groups group_axes(const graph_type *it, const graph_type *ot) {
    reshape_groups r = {0};
    int i = 0, j = 0;
    while (i < it->rank || j < ot->rank) {
        TS_ASSERT(r.n < LAYOUT_MAX_RANK); /* each group takes an axis from each side that has one left */
        r.in0[r.n] = i, r.out0[r.n] = j;
        int64_t pi = i < it->rank ? it->dim[i++] : 1, po = j < ot->rank ? ot->dim[j++] : 1;
        while (pi != po) {
            if (pi < po) pi *= it->dim[i++];
            else po *= ot->dim[j++];
        }
        r.n++;
    }
    r.in0[r.n] = i, r.out0[r.n] = j;
    return r;
}

static int first_long(const graph_type *t, int a0, int a1) {
    for (int a = a0; a < a1; a++)
        if (t->dim[a] > 1) return a;
    return -1;
}

static int64_t dims_after(const graph_type *t, int a, int a1) {
    int64_t n = 1;
    for (int i = a + 1; i < a1; i++) n *= t->dim[i];
    return n;
}

/* The alias layout of src reshaped to ot, or false when the bytes of src are
 * not already in the reshaped order. */
static bool reshape_alias(const layout *src, const graph_type *it, const graph_type *ot, layout *out) {
    if (layout_transposed(src)) return false; /* its storage is not in row-major order */
    reshape_groups g = group_axes(it, ot);
    layout l = {.rank = ot->rank, .elem_bytes = src->elem_bytes, .enc = src->enc, .tile_base = src->tile_base,
                .nrep = src->nrep}; /* every replica holds the same bytes, so it is aliased too */
    for (int k = 0; k < src->nrep; k++) l.rep[k] = src->rep[k], l.rep_stride[k] = src->rep_stride[k];
    for (int a = 0; a < ot->rank; a++) l.dim[a] = l.block[a] = ot->dim[a], l.parts[a] = 1;
    for (int k = 0; k < g.n; k++) {
        int A = first_long(it, g.in0[k], g.in0[k + 1]), C = first_long(ot, g.out0[k], g.out0[k + 1]);
        for (int a = g.in0[k]; a < g.in0[k + 1]; a++)
            if (a != A && (src->parts[a] != 1 || src->block[a] != it->dim[a])) return false;
        if (A < 0) continue;
        int64_t span = src->block[A] * dims_after(it, A, g.in0[k + 1]), rest = dims_after(ot, C, g.out0[k + 1]);
        if (span % rest) return false;
        l.block[C] = span / rest;
        l.parts[C] = src->parts[A];
        l.tile_stride[C] = src->tile_stride[A];
    }
    /* Panels cut the last axis: the same bytes when both last axes have one
     * block (the panels' rows, every other axis, then flatten alike). */
    if (src->enc != ENC_ROW_MAJOR && src->block[it->rank - 1] != l.block[ot->rank - 1]) return false;
    *out = l;
    return true;
}

/* A row-major layout of it spread over the machine from which the reshape to
 * ot is free: per group, only the first long axis is split, in blocks that
 * cover whole rows of the output group. */
static layout reshape_source(const mx *x, const graph_type *it, const graph_type *ot) {
    layout l = layout_single(it->rank, it->dim, dtype_bytes(it->dtype));
    reshape_groups g = group_axes(it, ot);
    int64_t left = x->m->tiles;
    for (int k = 0; k < g.n && left > 1; k++) {
        int A = first_long(it, g.in0[k], g.in0[k + 1]), C = first_long(ot, g.out0[k], g.out0[k + 1]);
        if (A < 0) continue;
        int64_t in = dims_after(it, A, g.in0[k + 1]), rest = dims_after(ot, C, g.out0[k + 1]);
        int64_t a = in, b = rest; /* unit = rest / gcd(in, rest) */
        while (b) {
            int64_t t = a % b;
            a = b, b = t;
        }
        int64_t unit = rest / a, parts = min64(left, cdiv(it->dim[A], unit));
        l.block[A] = round_up(cdiv(it->dim[A], parts), unit);
        l.parts[A] = cdiv(it->dim[A], l.block[A]);
        left /= l.parts[A];
    }
    ex_row_major_tiles(&l);
    return l;
}

/* The layout of it whose reshape to ot is exactly h (h's inverse under
 * reshape_alias), or false when h's partition cuts a group where the source
 * cannot: then no row-major source aliases to it. */
static bool reshape_back(const layout *h, const graph_type *it, const graph_type *ot, layout *out) {
    if (h->rank != ot->rank) return false;
    reshape_groups g = group_axes(it, ot);
    layout l = layout_single(it->rank, it->dim, h->elem_bytes);
    l.enc = h->enc;
    l.tile_base = h->tile_base;
    l.nrep = h->nrep;
    for (int k = 0; k < h->nrep; k++) l.rep[k] = h->rep[k], l.rep_stride[k] = h->rep_stride[k];
    for (int k = 0; k < g.n; k++) {
        int A = first_long(it, g.in0[k], g.in0[k + 1]), C = first_long(ot, g.out0[k], g.out0[k + 1]);
        for (int c = g.out0[k]; c < g.out0[k + 1]; c++)
            if (c != C && h->parts[c] != 1) return false;
        if (C < 0 || h->parts[C] == 1) continue;
        int64_t span = h->block[C] * dims_after(ot, C, g.out0[k + 1]), rest = dims_after(it, A, g.in0[k + 1]);
        if (span % rest) return false;
        l.block[A] = span / rest;
        l.parts[A] = cdiv(it->dim[A], l.block[A]);
        l.tile_stride[A] = h->tile_stride[C];
    }
    layout back;
    if (!reshape_alias(&l, it, ot, &back) || !layout_equal(&back, h)) return false;
    *out = l;
    return true;
}

static int expand_reshape(mx *x, const graph_op *o) {
    graph_type it = vtype(x, o->in[0]), ot = vtype(x, o->out[0]);
    int32_t t = x->vt[o->in[0]];
    /* An unplaced source (a parameter, a repeat's slice) takes the layout its
     * result's consumer wants, through the reshape, where one aliases to it. */
    layout src, l;
    if (mid_t(x->p, t)->placed) src = mid_t(x->p, t)->lay;
    else if (!x->hinted[o->out[0]] || !reshape_back(&x->hint[o->out[0]], &it, &ot, &src)) src = plan(x, &it, false);
    src.elem_bytes = dtype_bytes(it.dtype);
    if (!reshape_alias(&src, &it, &ot, &l)) {
        /* A copy is needed: into the layout whose alias its consumer wants, or else spread. */
        if (!x->hinted[o->out[0]] || !reshape_back(&x->hint[o->out[0]], &it, &ot, &src))
            src = reshape_source(x, &it, &ot);
        bool ok = reshape_alias(&src, &it, &ot, &l);
        TS_ASSERT(ok);
    }
    bool rec = x->recording;
    x->recording = false; /* the reshape's own wish is not a consumer's */
    t = ex_want(x, o->in[0], &src);
    x->recording = rec;
    int32_t out = ex_result(x, o->out[0], &l);
    mid_t(x->p, out)->alias_of = t; /* not its storage: a repeat slice must stay on the chain */
    return 0;
}

static layout_view view_shift(int rank, const int64_t *off) {
    layout_view v = layout_view_identity(rank);
    for (int i = 0; i < rank; i++) v.off[i] = off[i];
    return v;
}

/* A slice's result on its source's partition cut to the slice: each result
 * shard on the tile of the source shard its first element lies in, with the
 * source's blocks. Each tile then copies its own share and only what a
 * shifted window takes from a neighbouring shard crosses the exchange: a
 * depthwise convolution's or a pool's taps, each a slice of one padded
 * input, and a channel split, are computed on where they lie instead of
 * each moving the whole input between two partitions that disagree
 * (mobilenet_v3_small 23 % fewer cycles, shufflenet_v2 18 %). Not a slice an
 * im2col concat gathers (directly or through reshapes): the concat's copy
 * crosses the exchange anyway, and on its source the slice would only add an
 * on-tile copy before it. False also when the source is not placed yet or
 * the cut is not a layout for the machine. */
static bool slice_on_source(const mx *x, const graph_op *o, const graph_type *ot, layout *out) {
    int32_t t = x->vt[o->in[0]];
    if (x->concat_part[o->out[0]] || t < 0 || x->late_src[o->in[0]] >= 0 || !mid_t(x->p, t)->placed) return false;
    const layout *s = &mid_t(x->p, t)->lay;
    if (s->rank != ot->rank) return false;
    layout l = {.rank = ot->rank, .elem_bytes = dtype_bytes(ot->dtype), .enc = ENC_ROW_MAJOR, .tile_base = s->tile_base};
    for (int a = 0; a < ot->rank; a++) {
        int64_t start = o->attr[ATTR_START].ints.v[a];
        l.dim[a] = ot->dim[a];
        l.block[a] = min64(s->block[a], ot->dim[a]);
        l.parts[a] = cdiv(ot->dim[a], l.block[a]);
        l.tile_stride[a] = s->tile_stride[a];
        l.tile_base += (int32_t)(start / s->block[a]) * s->tile_stride[a];
    }
    if (layout_check(&l, (int32_t)x->m->tiles, &(diag){0}) != 0) return false;
    *out = l;
    return true;
}

static int expand_move(mx *x, const graph_op *o) {
    graph_type ot = vtype(x, o->out[0]);
    layout l;
    if ((o->kind == OP_TRANSPOSE || o->kind == OP_SLICE) && x->hinted[o->out[0]]) {
        l = x->hint[o->out[0]];
        l.elem_bytes = dtype_bytes(ot.dtype);
    } else if (o->kind != OP_SLICE || !slice_on_source(x, o, &ot, &l)) {
        l = plan(x, &ot, false);
    }
    int32_t out = ex_result(x, o->out[0], &l);
    int rank = ot.rank;
    int64_t off[LAYOUT_MAX_RANK] = {0};
    switch (o->kind) {
    case OP_TRANSPOSE: {
        layout_view v = layout_view_identity(rank);
        for (int i = 0; i < rank; i++) v.axis[i] = (int32_t)o->attr[ATTR_PERM].ints.v[i];
        int32_t in = x->vt[o->in[0]];
        if (in >= 0 && !mid_t(x->p, in)->placed && x->hinted[o->in[0]]) {
            layout h = x->hint[o->in[0]];
            ex_place(x, in, &h);
        }
        in = read(x, o->in[0]);
        /* A transpose that keeps every tile's bytes in order is an alias. */
        layout_view inv = layout_view_identity(rank);
        for (int i = 0; i < rank; i++) inv.axis[v.axis[i]] = i;
        layout same;
        if (permute_back(&mid_t(x->p, in)->lay, &inv, rank, &same) && same.enc == mid_t(x->p, in)->lay.enc) {
            mid_tensor *mo = mid_t(x->p, out);
            mo->lay = same;
            mo->lay.elem_bytes = dtype_bytes(mo->dtype);
            mo->alias_of = in;
            return 0;
        }
        emit_view_copy(x, in, out, &v);
        return 0;
    }
    case OP_SLICE:
        for (int i = 0; i < rank; i++) off[i] = o->attr[ATTR_START].ints.v[i];
        break;
    case OP_PAD: {
        int32_t pr = ex_emit(x, MID_FILL, NULL, 0, &out, 1);
        mid_p(x->p, pr)->f[0] = num_clamp_finite(graph_val(x->g, o->out[0])->type.dtype, (float)graph_attr_float(o, ATTR_VALUE));
        for (int i = 0; i < rank; i++) off[i] = -o->attr[ATTR_LOW].ints.v[i];
        break;
    }
    case OP_CONCAT: {
        int axis = (int)graph_attr_int(o, ATTR_AXIS);
        if (axis < 0) axis += rank;
        int64_t at = 0;
        for (int32_t k = 0; k < o->nin; k++) {
            off[axis] = -at;
            layout_view v = view_shift(rank, off);
            ex_emit_copy(x, read(x, o->in[k]), out, &v);
            at += graph_val(x->g, o->in[k])->type.dim[axis];
        }
        return 0;
    }
    default: TS_UNREACHABLE();
    }
    layout_view v = view_shift(rank, off);
    ex_emit_copy(x, read(x, o->in[0]), out, &v);
    return 0;
}

/* ---- consumer layouts ------------------------------------------------------------------ *
 *
 * Expansion runs producer first, so a transpose or reshape would pick its
 * layout before its consumer says what it needs, and the value would cross
 * the exchange once into that layout and again into the consumer's
 * (q_bias -> q_split -> q_heads -> the scores GEMM's operand). So mid_expand
 * expands twice: the first expansion records, per graph value, the layout
 * its first consumer wanted (want, want_view), and pull_hints carries those
 * back through transposes and reshapes to their operands. The second
 * expansion makes each transpose's result in its consumer's layout (and a
 * slice's: a joined projection's Q, K and V go straight from the joined
 * result into their head splits, docs/lowering.md), and
 * copies a reshape's operand into the layout whose alias that is; the chain
 * then crosses the exchange once, and the transposes become on-tile copies.
 * The choices the first expansion asked of the plan are recorded in it, so
 * both expand the same plan. */

static void note_hint(mx *x, int32_t v, const layout *lay) {
    if (!x->recording || x->hinted[v]) return;
    x->hint[v] = *lay;
    x->hinted[v] = true;
}

/* The source layout that a view which only permutes axes carries onto d,
 * when the copy between them stays cheap: axes whose shards are longer than
 * one element keep their order, so each tile copies whole runs. A real
 * transpose is not pulled back: it is cheapest done where the data is most
 * spread (emit_view_copy), not on every tile of a replicated consumer. */
static bool permute_back(const layout *d, const layout_view *view, int src_rank, layout *out) {
    /* A transposed row-major d seen through the swap of its last two axes
     * holds its source's row-major bytes: the same storage, replicas kept. */
    bool t = d->enc == ENC_ROW_MAJOR_T && d->rank >= 2 && view->axis[d->rank - 1] == d->rank - 2 &&
             view->axis[d->rank - 2] == d->rank - 1;
    if (d->rank != src_rank || (layout_transposed(d) && !t)) return false;
    for (int i = 0; i < d->rank; i++)
        for (int j = i + 1; j < d->rank; j++)
            if (d->block[i] > 1 && d->block[j] > 1 && view->axis[i] > view->axis[j] && !(t && i == d->rank - 2))
                return false;
    layout s = *d;
    if (view->axis[d->rank - 1] != d->rank - 1) s.enc = ENC_ROW_MAJOR; /* panels cut the last axis */
    for (int i = 0; i < d->rank; i++) {
        int a = view->axis[i];
        if (view->off[i] != 0 || a < 0 || a >= src_rank) return false;
        s.dim[a] = d->dim[i];
        s.parts[a] = d->parts[i];
        s.block[a] = d->block[i];
        s.tile_stride[a] = d->tile_stride[i];
    }
    *out = s;
    return true;
}

static void pull_hints(mx *x) {
    /* A transpose no consumer asked anything of is spread over the machine
     * (whatever reads it next with a real transpose then moves whole runs),
     * and its operand chain is pulled back to that. */
    for (int32_t i = 0; i < x->g->ops.n; i++) {
        const graph_op *o = graph_opr(x->g, i);
        if (o->kind != OP_TRANSPOSE || x->hinted[o->out[0]]) continue;
        graph_type ot = vtype(x, o->out[0]);
        x->hint[o->out[0]] = plan(x, &ot, false);
        x->hinted[o->out[0]] = true;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t i = x->g->ops.n - 1; i >= 0; i--) {
            const graph_op *o = graph_opr(x->g, i);
            if (o->kind != OP_TRANSPOSE && o->kind != OP_RESHAPE) continue;
            int32_t in = o->in[0], out = o->out[0];
            if (!x->hinted[out] || x->hinted[in]) continue;
            graph_type it = vtype(x, in), ot = vtype(x, out);
            layout h;
            bool ok;
            if (o->kind == OP_TRANSPOSE) {
                layout_view v = layout_view_identity(ot.rank);
                for (int k = 0; k < ot.rank; k++) v.axis[k] = (int32_t)o->attr[ATTR_PERM].ints.v[k];
                ok = permute_back(&x->hint[out], &v, it.rank, &h);
            } else {
                ok = reshape_back(&x->hint[out], &it, &ot, &h);
            }
            if (!ok) continue;
            x->hint[in] = h;
            x->hinted[in] = changed = true;
        }
    }
    /* An add's result layout is its operands' (follow), so what it asked of
     * a matmul result it adds to (a bias, a residual) was its own layout:
     * the result is wanted where the sum is. */
    for (int32_t i = x->g->ops.n - 1; i >= 0; i--) {
        const graph_op *o = graph_opr(x->g, i);
        if (o->kind != OP_ADD || !x->hinted[o->out[0]]) continue;
        graph_type ot = vtype(x, o->out[0]);
        for (int32_t k = 0; k < o->nin; k++) {
            int32_t in = o->in[k];
            const graph_value *gv = graph_val(x->g, in);
            graph_type it = vtype(x, in);
            if (gv->is_arg || gv->def < 0 || graph_opr(x->g, gv->def)->kind != OP_MATMUL || !same_dims(&it, &ot))
                continue;
            x->hint[in] = x->hint[o->out[0]];
            x->hinted[in] = true;
        }
    }
}

/* ---- reductions and training ops --------------------------------------------------- */

/* reduce_sum in up to two stages: each tile sums its shard (into one value per
 * shard along the reduced axes), then, if reduced axes were split, the
 * partials are gathered and summed again. */
static int expand_reduce_sum(mx *x, const graph_op *o) {
    graph_type it = vtype(x, o->in[0]);
    uint32_t mask = 0;
    for (int32_t i = 0; i < o->attr[ATTR_AXES].ints.n; i++) {
        int64_t a = o->attr[ATTR_AXES].ints.v[i];
        mask |= 1u << (a < 0 ? a + graph_val(x->g, o->in[0])->type.rank : a);
    }
    if (graph_val(x->g, o->in[0])->type.rank == 0) mask = 1;
    int32_t src = read(x, o->in[0]);
    layout ls = ex_unreplicated(mid_t(x->p, src)->lay);
    if (ls.enc != ENC_ROW_MAJOR) ls = plan(x, &it, false);
    src = ex_want(x, o->in[0], &ls);
    bool split = false;
    for (int a = 0; a < it.rank; a++) split |= (mask >> a & 1) && ls.parts[a] > 1;
    graph_type ot = vtype(x, o->out[0]);
    if (split) {
        /* Stage 1: [.., parts, ..] f32 partials where the tiles already are. */
        graph_type pt = it;
        pt.dtype = DT_F32;
        layout lp = ls;
        lp.elem_bytes = 4;
        for (int a = 0; a < it.rank; a++)
            if (mask >> a & 1) {
                pt.dim[a] = lp.dim[a] = lp.parts[a];
                lp.block[a] = 1;
            }
        char name[256];
        snprintf(name, sizeof name, "%s.partials", graph_val(x->g, o->out[0])->name);
        int32_t part = ex_new_tensor(x, name, DT_F32, 0, &lp, -1);
        int32_t pr = ex_emit(x, MID_REDUCE_SUM, &src, 1, &part, 1);
        mid_p(x->p, pr)->axes = mask;
        mid_p(x->p, pr)->keepdims = true;
        /* Stage 2 input: reduced axes whole on each tile, the kept axes
         * spread over the machine (planned with the reduced axes as 1, so
         * they take no share of the tiles). */
        graph_type kt = pt;
        for (int a = 0; a < it.rank; a++)
            if (mask >> a & 1) kt.dim[a] = 1;
        layout lq = plan(x, &kt, false);
        for (int a = 0; a < it.rank; a++)
            if (mask >> a & 1) lq.dim[a] = lq.block[a] = pt.dim[a];
        snprintf(name, sizeof name, "%s.gathered", graph_val(x->g, o->out[0])->name);
        src = ex_new_tensor(x, name, DT_F32, 0, &lq, -1);
        ex_emit_copy(x, part, src, NULL);
        ls = lq;
    }
    /* The output keeps the partition of the kept axes. */
    layout lo = {.rank = ot.rank, .elem_bytes = dtype_bytes(ot.dtype), .enc = ENC_ROW_MAJOR, .tile_base = ls.tile_base};
    bool keep = graph_attr_bool(o, ATTR_KEEPDIMS);
    int j = 0;
    for (int a = 0; a < it.rank; a++) {
        bool red = mask >> a & 1;
        if (red && !keep) continue;
        if (j >= ot.rank) break;
        lo.dim[j] = ot.dim[j];
        lo.parts[j] = red ? 1 : ls.parts[a];
        lo.block[j] = red ? 1 : ls.block[a];
        lo.tile_stride[j] = red ? 0 : ls.tile_stride[a];
        j++;
    }
    if (j == 0) { /* everything reduced: a [1] result */
        lo.dim[0] = lo.block[0] = lo.parts[0] = 1;
        lo.tile_stride[0] = 0;
    }
    int32_t out = ex_result(x, o->out[0], &lo);
    int32_t pr = ex_emit(x, MID_REDUCE_SUM, &src, 1, &out, 1);
    mid_p(x->p, pr)->axes = mask;
    mid_p(x->p, pr)->keepdims = keep || j == 0;
    return 0;
}

int32_t ex_read(mx *x, int32_t v) { return read(x, v); }
layout ex_plan(const mx *x, const graph_type *t) { return plan(x, t, false); }

static int expand_optimizer(mx *x, const graph_op *o) {
    int32_t w = read(x, o->in[0]);
    layout l = ex_unreplicated(mid_t(x->p, w)->lay);
    if (l.enc != ENC_ROW_MAJOR) {
        graph_type t = vtype(x, o->in[0]);
        l = plan(x, &t, false);
    }
    int32_t in[MID_MAX_IN], out[MID_MAX_OUT];
    for (int32_t i = 0; i < o->nin; i++) in[i] = ex_want(x, o->in[i], &l);
    for (int32_t i = 0; i < o->nout; i++) out[i] = ex_result(x, o->out[i], &l);
    int32_t pr = ex_emit(x, o->kind == OP_SGD ? MID_SGD : MID_ADAMW, in, o->nin, out, o->nout);
    mid_prim *p = mid_p(x->p, pr);
    p->f[0] = (float)graph_attr_float(o, ATTR_LR);
    if (o->kind == OP_SGD) {
        p->f[1] = (float)graph_attr_float(o, ATTR_MOMENTUM);
        p->f[2] = (float)graph_attr_float(o, ATTR_WEIGHT_DECAY);
    } else {
        ex_adamw_params(o, p);
    }
    return 0;
}

/* global_norm_clip: every tile writes the sum of squares of its shard of
 * each gradient into its row of an f32 [tiles, n] table and sums its row;
 * tile 0 gathers the [tiles, 1] row sums, turns them into the clip
 * coefficient, which is then sent to every gradient's tiles and multiplied
 * in. */
static int expand_clip(mx *x, const graph_op *o) {
    int64_t T = x->m->tiles, n = o->nin;
    int64_t td[2] = {T, n}, rd[2] = {T, 1};
    layout lt = layout_single(2, td, 4);
    layout_split(&lt, 0, T, 1);
    int32_t table = ex_new_tensor(x, "clip.sumsq", DT_F32, 0, &lt, -1);
    mid_p(x->p, ex_emit(x, MID_FILL, NULL, 0, &table, 1))->f[0] = 0;
    int32_t *grads = arena_alloc(&x->p->arena, sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        grads[i] = read(x, o->in[i]);
        layout l = ex_unreplicated(mid_t(x->p, grads[i])->lay);
        if (l.enc != ENC_ROW_MAJOR) {
            graph_type t = vtype(x, o->in[i]);
            l = plan(x, &t, false);
        }
        grads[i] = ex_want(x, o->in[i], &l);
        int32_t pr = ex_emit(x, MID_SUMSQ, &grads[i], 1, &table, 1);
        mid_p(x->p, pr)->column = i;
    }
    layout lr = layout_single(2, rd, 4);
    layout_split(&lr, 0, T, 1);
    int32_t rows = ex_new_tensor(x, "clip.rows", DT_F32, 0, &lr, -1);
    int32_t pr = ex_emit(x, MID_REDUCE_SUM, &table, 1, &rows, 1);
    mid_p(x->p, pr)->axes = 2;
    mid_p(x->p, pr)->keepdims = true;
    layout l0 = layout_single(2, rd, 4);
    int32_t gathered = ex_new_tensor(x, "clip.gathered", DT_F32, 0, &l0, -1);
    ex_emit_copy(x, rows, gathered, NULL);
    int64_t one = 1;
    layout lc = layout_single(1, &one, 4);
    int32_t coef = ex_new_tensor(x, "clip.coef", DT_F32, 0, &lc, -1);
    mid_p(x->p, ex_emit(x, MID_CLIP_COEF, &gathered, 1, &coef, 1))->f[0] = (float)graph_attr_float(o, ATTR_MAX_NORM);
    for (int32_t i = 0; i < n; i++) {
        layout lg = mid_t(x->p, grads[i])->lay;
        graph_type ct = {.dtype = DT_F32, .rank = 1, .dim = {1}};
        layout la = aligned(&lg, &ct);
        char name[256];
        snprintf(name, sizeof name, "clip.coef@%s", graph_val(x->g, o->out[i])->name);
        int32_t c = ex_new_tensor(x, name, DT_F32, 0, &la, -1);
        ex_emit_copy(x, coef, c, NULL);
        int32_t in[2] = {grads[i], c};
        int32_t out = ex_result(x, o->out[i], &lg);
        mid_p(x->p, ex_emit(x, MID_EWISE, in, 2, &out, 1))->ew = KERNEL_EW_MUL;
    }
    return 0;
}

/* ---- structure ------------------------------------------------------------------------ */

/* An embedding lookup (docs/lowering.md, "Embedding lookups"): the table's
 * columns cut into the fewest blocks whose share of the table and of the
 * result fits a quarter of a tile, one block per tile from tile 0; every
 * such tile holds every index (replicated) and writes its columns of every
 * looked-up row. No row crosses the exchange: only the indices do, and the
 * result's consumer gathers its rows from the blocks. */
static int expand_gather(mx *x, const graph_op *o) {
    graph_type tt = vtype(x, o->in[0]), it = vtype(x, o->in[1]), ot = vtype(x, o->out[0]);
    int64_t rows = graph_type_numel(&it), width = tt.dim[1], bytes = dtype_bytes(tt.dtype);
    int64_t budget = (int64_t)machine_tile_bytes(x->m) / 4, parts = 1;
    while (parts < width && parts < x->m->tiles && (tt.dim[0] + rows) * cdiv(width, parts) * bytes + rows * 4 > budget) parts++;
    int last = ot.rank - 1;
    layout lo = layout_single(ot.rank, ot.dim, (int)bytes), lt = layout_single(2, tt.dim, (int)bytes),
           li = layout_single(it.rank, it.dim, 4);
    layout_split(&lo, last, parts, 1);
    layout_split(&lt, 1, parts, 1);
    if (lo.parts[last] > 1) layout_replicate(&li, lo.parts[last], 1);
    int32_t in[2] = {ex_want(x, o->in[0], &lt), ex_want(x, o->in[1], &li)};
    int32_t out = ex_result(x, o->out[0], &lo);
    ex_emit(x, MID_GATHER, in, 2, &out, 1);
    return 0;
}

static int expand_block(mx *x, const graph_block *b);

static int expand_repeat(mx *x, int32_t op_id) {
    const graph_op *o = graph_opr(x->g, op_id);
    int32_t carried[256];
    if (o->ncarry > 256) return FAIL(x, "too many carried values");
    for (int32_t k = 0; k < o->ncarry; k++) {
        int32_t t0 = read(x, o->in[k]);
        /* Carried in the layout its first consumer in the body wants (the
         * copy into it runs once, before the loop), else in its own. */
        layout l = ex_unreplicated(x->hinted[o->args[k]] ? x->hint[o->args[k]] : mid_t(x->p, t0)->lay);
        l.elem_bytes = mid_t(x->p, t0)->lay.elem_bytes;
        if (l.enc != ENC_ROW_MAJOR) {
            graph_type t = vtype(x, o->in[k]);
            l = plan(x, &t, false);
        }
        const graph_value *arg = graph_val(x->g, o->args[k]);
        carried[k] = ex_new_tensor(x, arg->name, arg->type.dtype, arg->type.scale, &l, o->args[k]);
        ex_emit_copy(x, t0, carried[k], NULL);
    }
    for (int32_t j = o->ncarry; j < o->nargs; j++) {
        int32_t st = x->vt[o->in[j]];
        mid_tensor *s = mid_t(x->p, st);
        if (s->placed || s->kind != MT_PARAM)
            return FAIL(x, "repeat slices '%%%s': the compiler slices only parameters used by nothing else yet",
                        graph_val(x->g, o->in[j])->name);
        s->stack = o->count;
        const graph_value *arg = graph_val(x->g, o->args[j]);
        int32_t sl = ex_new_tensor(x, arg->name, arg->type.dtype, arg->type.scale, NULL, o->args[j]);
        mid_t(x->p, sl)->slice_of = st;
        x->vt[o->args[j]] = sl;
    }
    for (int32_t k = 0; k < o->ncarry; k++) x->vt[o->args[k]] = carried[k];
    int32_t pr = ex_emit(x, MID_REPEAT, NULL, 0, NULL, 0);
    for (int32_t j = o->ncarry; j < o->nargs; j++) mid_t(x->p, x->vt[o->args[j]])->scope = pr;
    mid_p(x->p, pr)->count = o->count;
    int32_t saved = x->block;
    if (x->depth == (int)TS_COUNT(x->open)) return FAIL(x, "repeats nest too deeply for the compiler");
    x->open[x->depth++] = pr;
    x->block = pr;
    int rc = expand_block(x, &o->body);
    if (rc == 0) {
        const graph_op *y = graph_opr(x->g, o->body.v[o->body.n - 1]);
        x->origin = op_id;
        /* The yield is a parallel assignment: a yielded value that lives in
         * the buffer of a carried value written before it (yield %b, %a) is
         * first staged in a temporary, so every copy reads this iteration's
         * values. */
        int32_t src[256];
        for (int32_t k = 0; k < o->ncarry; k++) {
            src[k] = read(x, y->in[k]);
            int32_t s = mid_storage(x->p, src[k]);
            bool clobbered = false;
            for (int32_t j = 0; j < k && !clobbered; j++) clobbered = s == carried[j] && src[j] != carried[j];
            if (!clobbered) continue;
            char name[256];
            snprintf(name, sizeof name, "%s.next", mid_t(x->p, carried[k])->name);
            int32_t tmp = ex_new_tensor(x, name, mid_t(x->p, carried[k])->dtype, mid_t(x->p, carried[k])->scale,
                                     &mid_t(x->p, carried[k])->lay, -1);
            ex_emit_copy(x, src[k], tmp, NULL);
            src[k] = tmp;
        }
        for (int32_t k = 0; k < o->ncarry; k++)
            if (src[k] != carried[k]) ex_emit_copy(x, src[k], carried[k], NULL);
    }
    x->block = saved;
    x->depth--;
    /* A slice nothing in the body used still needs a home for its data. */
    for (int32_t j = o->ncarry; j < o->nargs && rc == 0; j++) read(x, o->args[j]);
    for (int32_t k = 0; k < o->ncarry; k++) x->vt[o->out[k]] = carried[k];
    return rc;
}

static int expand_op(mx *x, int32_t op_id) {
    const graph_op *o = graph_opr(x->g, op_id);
    x->origin = op_id;
    switch (o->kind) {
    case OP_INPUT:
    case OP_PARAM: {
        const graph_value *v = graph_val(x->g, o->out[0]);
        int32_t t = ex_new_tensor(x, v->name, v->type.dtype, v->type.scale, NULL, o->out[0]);
        mid_t(x->p, t)->kind = o->kind == OP_INPUT ? MT_INPUT : MT_PARAM;
        mid_t(x->p, t)->param_op = o->kind == OP_PARAM ? op_id : -1;
        x->vt[o->out[0]] = t;
        if (o->kind == OP_INPUT) vec_push(&x->p->arena, &x->p->inputs, t);
        /* The weight and states of a fused op live where its GEMM's product
         * does, so the epilogue reads them in place (docs/epilogue.md): the
         * plan's grid is asked for now, as the fused op's. */
        int32_t f = x->epi_of ? x->epi_of[o->out[0]] : -1;
        if (f >= 0) {
            gemm_plan gp;
            mid_gemm_plan ch;
            x->origin = f;
            int rc = ex_gemm_grid(x, f, &gp, &ch);
            x->origin = op_id;
            if (rc) return -1;
            layout lc = ex_gemm_result_layout(x, graph_opr(x->g, f), &gp);
            ex_place(x, t, &lc);
        }
        return 0;
    }
    case OP_OUTPUT:
        for (int32_t i = 0; i < o->nin; i++) vec_push(&x->p->arena, &x->p->outputs, read(x, o->in[i]));
        return 0;
    case OP_YIELD: return 0; /* the repeat copies yielded values */
    case OP_REPEAT: return expand_repeat(x, op_id);
    case OP_MATMUL: return ex_expand_matmul(x, o);
#define X(id, name, arity, cls) case OP_##id:
    KERNEL_EW_OPS(X)
#undef X
        return expand_ewise(x, o, (kernel_ew_op)(ew_of_op[o->kind] - 1));
    case OP_SOFTMAX: return expand_rows(x, o, MID_SOFTMAX);
    case OP_LAYER_NORM: return expand_rows(x, o, MID_LAYER_NORM);
    case OP_RESHAPE: return expand_reshape(x, o);
    case OP_TRANSPOSE:
    case OP_SLICE:
    case OP_PAD:
    case OP_CONCAT: return expand_move(x, o);
    case OP_REDUCE_SUM: return expand_reduce_sum(x, o);
    case OP_SGD:
    case OP_ADAMW: return expand_optimizer(x, o);
    case OP_GLOBAL_NORM_CLIP: return expand_clip(x, o);
    case OP_GATHER: return expand_gather(x, o);
    case OP_MATMUL_SGD:
    case OP_MATMUL_ADAMW: return ex_expand_matmul(x, o);
    case OP_SUM_SGD:
    case OP_SUM_ADAMW: return ex_expand_sum_optimizer(x, o);
    case OP_COUNT: break;
    }
    TS_UNREACHABLE();
}

/* The results of op, now expanded, as probes: complete after the last prim
 * of the current block. Views of parameters and inputs compute nothing. */
static void add_probes(mx *x, int32_t op_id) {
    const graph_op *o = graph_opr(x->g, op_id);
    if (graph_op_infos[o->kind].structural && o->kind != OP_REPEAT) return;
    const mid_block *b = cur_block(x);
    for (int32_t i = 0; i < o->nout; i++) {
        int32_t t = x->vt[o->out[i]];
        if (t < 0 || !mid_t(x->p, t)->placed || mid_t(x->p, mid_storage(x->p, t))->kind != MT_TEMP) continue;
        if (x->late_src[o->out[i]] >= 0) continue; /* watched where its first cast is made */
        mid_probe pb = {o->out[i], t, b->n ? b->v[b->n - 1] : -1, x->block};
        vec_push(&x->p->arena, &x->p->probes, pb);
    }
}

static int expand_block(mx *x, const graph_block *b) {
    for (int32_t i = 0; i < b->n; i++) {
        if (expand_op(x, b->v[i]) || x->err) return -1;
        add_probes(x, b->v[i]);
    }
    return 0;
}

static int expand_pass(const graph *g, const machine *m, mid_plan *pl, mid_program *out, diag *d, layout *hint,
                       bool *hinted, bool recording) {
    memset(out, 0, sizeof *out);
    arena_init(&out->arena);
    out->g = g;
    out->m = m;
    mx x = {.p = out, .g = g, .m = m, .d = d, .block = -1, .plan = pl, .hint = hint, .hinted = hinted,
            .recording = recording};
    x.vt = xmalloc(sizeof(int32_t) * (size_t)(g->values.n + 1));
    x.epi_of = xmalloc(sizeof(int32_t) * (size_t)(g->values.n + 1));
    x.late_src = xmalloc(sizeof(int32_t) * (size_t)(g->values.n + 1));
    x.use_parent = xmalloc(sizeof(int32_t) * (size_t)(g->values.n + 1));
    x.probed = xcalloc((size_t)g->values.n + 1, sizeof(bool));
    x.concat_part = xcalloc((size_t)g->values.n + 1, sizeof(bool));
    x.cast_count = xcalloc((size_t)g->ops.n + 1, sizeof(int32_t));
    for (int32_t i = 0; i < g->values.n; i++) x.vt[i] = x.epi_of[i] = x.late_src[i] = -1, x.use_parent[i] = -3;
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *o = graph_opr(g, i);
        for (int32_t k = 0; k < o->nin; k++) {
            int32_t *u = &x.use_parent[o->in[k]];
            *u = *u == -3 || *u == o->parent ? o->parent : -2;
        }
    }
    for (int32_t i = g->ops.n - 1; i >= 0; i--) { /* consumers first */
        const graph_op *o = graph_opr(g, i);
        if (o->kind == OP_CONCAT || (o->kind == OP_RESHAPE && x.concat_part[o->out[0]]))
            for (int32_t k = 0; k < o->nin; k++) x.concat_part[o->in[k]] = true;
    }
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *o = graph_opr(g, i);
        if (o->kind != OP_MATMUL_SGD && o->kind != OP_MATMUL_ADAMW) continue;
        for (int32_t k = 2; k < o->nin; k++) {
            const graph_value *v = graph_val(g, o->in[k]);
            if (!v->is_arg && graph_opr(g, v->def)->kind == OP_PARAM && x.epi_of[o->in[k]] < 0) x.epi_of[o->in[k]] = i;
        }
    }
    int rc = expand_block(&x, &g->body);
    /* Inputs and parameters nothing consumed still get a layout. */
    for (int32_t t = 0; rc == 0 && t < out->tensors.n; t++)
        if (!mid_t(out, t)->placed && mid_t(out, t)->value >= 0 && mid_t(out, t)->slice_of < 0 && mid_t(out, t)->stack == 1)
            read(&x, mid_t(out, t)->value);
    if (x.err) rc = -1;
    if (rc == 0 && recording) pull_hints(&x); /* the first pass's program is dropped unfolded */
    free(x.vt);
    free(x.epi_of);
    free(x.late_src);
    free(x.use_parent);
    free(x.probed);
    free(x.concat_part);
    free(x.cast_count);
    if (rc) mid_free(out);
    return rc;
}

int mid_expand(const graph *g, const machine *m, mid_plan *pl, mid_program *out, diag *d) {
    size_t n = (size_t)g->values.n + 1;
    layout *hint = xmalloc(sizeof(layout) * n);
    bool *hinted = xcalloc(n, sizeof(bool));
    int rc = expand_pass(g, m, pl, out, d, hint, hinted, true);
    if (rc == 0) {
        mid_free(out);
        rc = expand_pass(g, m, pl, out, d, hint, hinted, false);
    }
    free(hint);
    free(hinted);
    return rc;
}

void mid_free(mid_program *p) {
    arena_free(&p->arena);
    memset(p, 0, sizeof *p);
}
