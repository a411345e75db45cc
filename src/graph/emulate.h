/* emulate.h (private to src/graph): the plan-exact kernels of the emulated
 * reference and the shape helpers they share with ref.c. */
#ifndef TESSEL_GRAPH_EMULATE_H
#define TESSEL_GRAPH_EMULATE_H

#include "graph.h"

/* Element strides of t viewed at rank `rank` (leading axes added, broadcast
 * axes given stride 0). */
static inline void shape_bstrides(const graph_type *t, int rank, int64_t *st) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int k = i - (rank - t->rank);
        st[i] = k < 0 || t->dim[k] == 1 ? 0 : s;
        if (k >= 0) s *= t->dim[k];
    }
}

/* Splits t around axis into (outer, len, inner). */
static inline void shape_around(const graph_type *t, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= t->dim[i];
    *len = t->dim[axis];
    for (int i = axis + 1; i < t->rank; i++) *inner *= t->dim[i];
}

/* A kernel of the emulated reference: in[] and out[] as ref.c hands them
 * (f32 values of their dtypes); results are rounded by the caller. */
typedef int (*emu_fn)(const graph *g, const graph_op *op, const graph_op_plan *pl, float **in, float **out);

/* The kernel for kind, or NULL where the FP32 reference already computes
 * exactly what the device does (data movement, add, sub, mul, gelu, gelu_erf, ...). */
emu_fn emu_kernel(graph_op_kind kind);

#endif
