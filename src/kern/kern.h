/* kern: what the tile kernels compute, below every layer that makes or
 * runs them: the elementwise ops of the EWISE kernel and the epilogues of
 * the fused GEMM and K-reduction, each with its number (the package stores
 * these: src/package/format.c), name, arity and the machine's work class
 * that prices it. mid's prims, low's runs, the package, the estimate and
 * the simulator all name ops by these. */
#ifndef TESSEL_KERN_H
#define TESSEL_KERN_H

#include "../machine/machine.h"
#include "../num/num.h"

/* Elementwise ops (EWISE prims and the low EWISE kernel): name, arity (unary
 * ones ignore operand b) and the machine's work class that prices them; each
 * ID is also the graph op's (OP_ID) it expands. The plain unary ops (num.h's
 * NUM_UNARY_OPS, in its order, with its cost classes) follow the first
 * eight, then max and min (the package stores these numbers: a new op is
 * appended, or the format changes). */
#define KERNEL_EW_OPS(X) \
    X(ADD, add, 2, MACHINE_EW_ARITH) \
    X(SUB, sub, 2, MACHINE_EW_ARITH) \
    X(MUL, mul, 2, MACHINE_EW_ARITH) \
    X(GELU, gelu, 1, MACHINE_EW_GELU) \
    X(GELU_GRAD, gelu_grad, 2, MACHINE_EW_GELU_GRAD) \
    X(SCALE, scale, 1, MACHINE_EW_ARITH) \
    X(CAST, cast, 1, MACHINE_EW_CAST) \
    X(GELU_ERF, gelu_erf, 1, MACHINE_EW_GELU) \
    NUM_UNARY_OPS(KERNEL_UNARY_ROW, X) \
    X(MAX, max, 2, MACHINE_EW_ARITH) \
    X(MIN, min, 2, MACHINE_EW_ARITH)
#define KERNEL_UNARY_ROW(id, name, cost, X) X(id, name, 1, MACHINE_EW_##cost)

typedef enum {
#define X(id, name, arity, cls) KERNEL_EW_##id,
    KERNEL_EW_OPS(X)
#undef X
    KERNEL_EW_COUNT
} kernel_ew_op;

extern const char *const kernel_ew_names[KERNEL_EW_COUNT];
extern const int kernel_ew_arity[KERNEL_EW_COUNT];
extern const machine_ew_class kernel_ew_class[KERNEL_EW_COUNT];

/* Epilogues of the fused GEMM and K-reduction (GEMM_EPI and REDUCE_EPI
 * prims, and the low kernels' `op`): what consumes each gradient value
 * where it is completed, instead of a stored gradient (docs/epilogue.md). */
#define KERNEL_EPI_OPS(X)                           \
    X(SGD, sgd) \
    X(ADAM, adam)

typedef enum {
#define X(id, name) KERNEL_EPI_##id,
    KERNEL_EPI_OPS(X)
#undef X
    KERNEL_EPI_COUNT
} kernel_epi_op;

extern const char *const kernel_epi_names[KERNEL_EPI_COUNT];

/* The GeLU a K-partials reduction may take after its sum (the REDUCE
 * prim's and run's f[0]; the package stores these numbers): none, the tanh
 * form (num_gelu), the erf form (num_gelu_erf, PyTorch's nn.GELU). */
enum { KERNEL_REDUCE_NO_GELU = 0, KERNEL_REDUCE_GELU = 1, KERNEL_REDUCE_GELU_ERF = 2 };

#endif
