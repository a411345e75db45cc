/* bound.c: the least a graph op can cost on a machine, whatever the plan
 * (docs/search.md, "The bound").
 *
 *   compute   a matmul's multiply-adds at the AMP's peak for its operands
 *             on every tile at once, plus one GEMM run's setup; an elementwise op, softmax or layer
 *             norm: its elements shared evenly by every tile, each tile
 *             one run at the kernel's per-element rate (the machine's
 *             formulas without their per-row and rounding costs, which
 *             only add; a layer norm by the cheaper of its whole-row and
 *             split forms); a cast nothing (any producer can write the
 *             8-bit result itself); other
 *             vector work (reductions, optimizer steps) its
 *             operands read once at the vector unit's rate on every tile;
 *             a gather its result's bytes at the on-tile copy rate;
 *             views and data movement (reshape, transpose, slice, pad,
 *             concat) nothing, as a layout could make them free; and an
 *             elementwise op a GEMM's reduction could take into its own
 *             pass (reading a matmul's result, directly or through such
 *             ops: a bias, GeLU, residual or cast) or a softmax could fold
 *             (a scale it reads) nothing either: its work may vanish;
 *   exchange  nothing: one op alone could always find its operands where
 *             a layout left them (a producer can write any layout, weights
 *             are placed or staged at will), so no byte must cross for it;
 *             what must cross comes from chains of ops, which this bound
 *             does not see. The exchange is where it is loosest.
 *
 * Each figure is per execution of the op (a repeat body's op once). */
#include <math.h>
#include <string.h>

#include "estimate.h"

static double numel(const graph_type *t) { return (double)graph_type_numel(t); }

static double per_tile(double elems, const machine *m) { return elems / (double)m->tiles; }
static double min2(double a, double b) { return a < b ? a : b; }

/* 16-bit lanes of the wider of o's result and first operand (f32: 2), as
 * the kernels count them (a layer norm's f32 gamma and beta do not widen). */
static uint64_t lanes(const graph *g, const graph_op *o) {
    int w = dtype_bytes(graph_val(g, o->out[0])->type.dtype), wi = dtype_bytes(graph_val(g, o->in[0])->type.dtype);
    return (wi > w ? wi : w) > 2 ? 2 : 1;
}

/* The AMP's best rate for operands of dtype t, per tile (0: none). */
static double amp_rate(const machine *m, dtype t) {
    double r = (double)machine_amp_macs(m, t);
    if (dtype_is_f8(t) && (double)m->amp_macs_f8_f32acc > r) r = (double)m->amp_macs_f8_f32acc;
    return r;
}

/* The elementwise kernel's class of graph op kind (by the shared name). */
static bool ew_class(int kind, machine_ew_class *c) {
    for (int e = 0; e < KERNEL_EW_COUNT; e++)
        if (strcmp(kernel_ew_names[e], graph_op_infos[kind].name) == 0) return *c = kernel_ew_class[e], true;
    return false;
}

/* Whether elementwise op o could be taken into a GEMM's reduction or a
 * softmax (mid's absorptions, src/mid/absorb.c, and more). */
static bool absorbable(const graph *g, const graph_op *o, int depth) {
    if (!mid_op_is_ewise(o->kind) || depth > 8) return false;
    for (int32_t i = 0; i < o->nin; i++) {
        const graph_value *v = graph_val(g, o->in[i]);
        if (v->is_arg) continue;
        const graph_op *p = graph_opr(g, v->def);
        if (graph_kind_has_gemm(p->kind) || absorbable(g, p, depth + 1)) return true;
    }
    if (o->kind == OP_SCALE)
        for (int32_t u = 0; u < g->ops.n; u++) {
            const graph_op *c = graph_opr(g, u);
            if (c->kind == OP_SOFTMAX && c->in[0] == o->out[0]) return true;
        }
    return false;
}

double est_op_bound(const graph *g, int32_t op, const machine *m) {
    const graph_op *o = graph_opr(g, op);
    if (o->kind == OP_INPUT || o->kind == OP_PARAM || o->kind == OP_OUTPUT || o->kind == OP_YIELD || o->kind == OP_REPEAT) return 0;
    const graph_type *out = &graph_val(g, o->out[0])->type;
    if (graph_kind_has_gemm(o->kind)) {
        const graph_type *ta = &graph_val(g, o->in[0])->type;
        int64_t k = graph_attr_bool(o, ATTR_TRANSPOSE_A) ? ta->dim[ta->rank - 2] : ta->dim[ta->rank - 1];
        double macs = (o->kind == OP_MATMUL ? numel(out) : numel(&graph_val(g, o->in[2])->type)) * (double)k;
        double rate = amp_rate(m, ta->dtype) * (double)m->tiles;
        return rate > 0 ? (double)m->gemm_run_cycles + macs / rate : 0;
    }
    machine_ew_class c;
    bool f8_in = dtype_is_f8(graph_val(g, o->in[0])->type.dtype), f8_out = dtype_is_f8(out->dtype);
    switch (o->kind) {
    case OP_RESHAPE: case OP_TRANSPOSE: case OP_SLICE: case OP_PAD: case OP_CONCAT: return 0;
    case OP_CAST: return 0;
    case OP_GATHER: /* the looked-up rows, copied once over every tile */
        return (double)m->copy_run_cycles + per_tile(numel(out) * dtype_bytes(out->dtype), m) / (double)m->copy_bytes_per_cycle;
    case OP_SOFTMAX:
        return (double)m->softmax_run_cycles +
               per_tile(numel(out), m) * (double)(m->softmax_key_centi * lanes(g, o)) / (100.0 * (double)m->workers);
    case OP_LAYER_NORM: {
        double whole = (double)m->layer_norm_grain_instrs, split = (double)(m->ln_moments_grain_instrs + m->ln_apply_grain_instrs);
        double f8 = f8_out ? (double)m->ewise_f8_out_instrs * (double)m->reduce_grain_elems / (double)m->ewise_grain_elems : 0;
        return min2((double)m->layer_norm_run_cycles, (double)(m->ln_moments_run_cycles + m->ln_apply_run_cycles)) +
               per_tile(numel(out), m) * (min2(whole, split) * (double)lanes(g, o) + f8) / (double)m->reduce_grain_elems;
    }
    default: break;
    }
    if (absorbable(g, o, 0)) return 0;
    if (mid_op_is_ewise(o->kind) && ew_class(o->kind, &c))
        return (double)m->ewise_run_cycles + per_tile(numel(out), m) *
                                                 (double)(machine_ewise_instrs(m, c, f8_in, f8_out) * lanes(g, o)) /
                                                 (double)m->ewise_grain_elems;
    double bytes = 0; /* any other vector work reads its operands once */
    for (int32_t i = 0; i < o->nin; i++) bytes += numel(&graph_val(g, o->in[i])->type) * dtype_bytes(graph_val(g, o->in[i])->type.dtype);
    return bytes / ((double)m->tiles * (double)m->vector_bytes_per_cycle);
}

int64_t est_op_executions(const graph *g, int32_t op) {
    int64_t n = 1;
    for (int32_t p = graph_opr(g, op)->parent; p >= 0; p = graph_opr(g, p)->parent) n *= graph_opr(g, p)->count;
    return n;
}
