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

/* ---- the exchange tables' row format ---------------------------------------------------
 *
 * Every row of a package's exchange tables has fields as wide as its machine
 * and program need (docs/package.md, "Exchange tables"): placement encodes
 * with it, the package decodes with it, and the estimate prices a phase's
 * rows with it. */
typedef struct kernel_xt_format {
    uint32_t base;           /* tile_memory_base: row addresses are offsets from it */
    uint32_t tiles;          /* a destination below this is a tile, from it tiles + group */
    uint32_t max_send;       /* max_send_bytes */
    uint8_t addr_bits;       /* A: an offset into tile memory; a slot is as wide */
    uint8_t len_bits;        /* L: bytes - 1 */
    uint8_t dst_bits;        /* G: a tile or tiles + group */
    uint8_t count_bits;      /* C: fragments - 1 through one receive pointer */
    uint8_t send_bytes;      /* whole words holding 2A + L + G bits */
    uint8_t recv_bytes;      /* whole words holding A + C bits (C at least 8) */
} kernel_xt_format;

enum {
    KERNEL_XT_HEADER_BYTES = 8, /* u16 phase, u16 send rows, u16 receive rows, u16 patch rows */
    KERNEL_XT_PATCH_BYTES = 8,  /* u32 row (PKG_XT_RECV_ROW: a receive row), i32 bytes per iteration */
};

/* The rows of m's tables, for a program with `groups` multicast groups. */
void kernel_xt_format_init(kernel_xt_format *f, const machine *m, uint32_t groups);
/* Bytes of one tile's block for a phase with these rows. */
uint64_t kernel_xt_block_bytes(const kernel_xt_format *f, uint64_t nsend, uint64_t nrecv, uint64_t npatch);

#endif
