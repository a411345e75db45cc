/* expand.h: what the files of expansion share (expand.c: tensors, layouts,
 * copies, every op but the matmul; expand_gemm.c: matmuls on their grids,
 * their epilogues, the plan). Private to src/mid. */
#ifndef TESSEL_MID_EXPAND_H
#define TESSEL_MID_EXPAND_H

#include "mid.h"

typedef struct copy_memo {
    int32_t src, dst;    /* tensors */
    int32_t block;       /* repeat prim where the copy runs */
} copy_memo;

typedef struct mx {
    mid_program *p;
    const graph *g;
    const machine *m;
    diag *d;
    int32_t *vt;         /* graph value -> tensor holding it */
    int32_t *epi_of;     /* graph value -> the fused op whose weight or state parameter it is, -1 */
    int32_t block;       /* repeat prim being filled, -1 at top level */
    int32_t open[16];    /* repeat prims being filled, outermost first */
    int depth;
    int err;             /* a failure recorded where no status can be returned */
    mid_plan *plan;      /* the choices being expanded */
    int32_t origin;      /* graph op being expanded */
    int32_t *cast_count; /* graph op -> casts its expansion made so far (the next one's ordinal) */
    VEC(copy_memo) memo; /* copies already made, to reuse */
    /* Late casts (docs/lowering.md, "Cast ordering"): an f16-to-f8 cast whose
     * every use is in its own block is not made where the graph has it: its
     * result's tensor waits, placed but unmade, and each consumer's want
     * casts late_src in the consumer's layout, after the f16 copies there.
     * Reading the tensor itself makes the cast where it is. */
    int32_t *late_src;   /* graph value -> the f16 tensor its cast reads while it waits, else -1 */
    int32_t *use_parent; /* graph value -> the repeat op every use is in (-1 the top), -2 several, -3 none */
    bool *probed;        /* graph value -> a late cast of it is watched already */
    bool *concat_part;   /* graph value -> an operand of a concat, directly or through reshapes */
    VEC(copy_memo) late_memo; /* src: a graph value; dst: its late cast in a consumer's layout */
    /* Layout hints (see "consumer layouts" below): per graph value, the
     * layout its first consumer wanted, pulled back through transposes and
     * reshapes. Recorded by a first expansion, followed by the second. */
    layout *hint;
    bool *hinted;
    bool recording;
} mx;

#define FAIL(x, ...) graph_fail_op((x)->g, (x)->origin, (x)->d, __VA_ARGS__)

typedef struct gemm_plan {
    int nb;                          /* batch axes of the result */
    int64_t gp[LAYOUT_MAX_RANK];     /* parts per batch axis */
    int32_t gstride[LAYOUT_MAX_RANK];/* tiles per batch step */
    int64_t R, C, Kp;                /* row, column, K parts */
    int64_t bm, bn, bk, sub;         /* blocks; sub = rows per tile after the K reduction (with B
                                        streaming: columns, the transposed result's rows) */
    bool swap;                       /* B streams (mid_gemm_plan.swap): columns are the inner grid
                                        axis and the reduction cuts them */
    int32_t base;                    /* the grid's first tile */
} gemm_plan;

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t a, int64_t b) { return cdiv(a, b) * b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* expand.c: a new tensor, a prim in the block being filled, a copy. */
int32_t ex_new_tensor(mx *x, const char *name, dtype dt, int scale, const layout *lay, int32_t value);
int32_t ex_emit(mx *x, mid_kind k, const int32_t *in, int nin, const int32_t *out, int nout);
void ex_emit_copy(mx *x, int32_t src, int32_t dst, const layout_view *view);
/* Layout helpers: tiles in row-major order; l without replicas. */
void ex_row_major_tiles(layout *l);
/* The first tile of something on `used` tiles that leaves room tiles over,
 * spread by key (an op id): key * 97 mod (room + 1), 0 without room. Small
 * layouts, weight grids and stacked homes start apart so that they do not
 * all pile onto tile 0. */
static inline int32_t ex_spread_base(int64_t key, int64_t room) { return room > 0 ? (int32_t)(key * 97 % (room + 1)) : 0; }
layout ex_unreplicated(layout l);
/* Decides an unplaced tensor's layout. */
void ex_place(mx *x, int32_t t, const layout *lay);
/* Graph value v in layout lay: as it is, placed there, or a copy. */
int32_t ex_want(mx *x, int32_t v, const layout *lay_in);
/* v seen through view as a new tensor of layout lay (a copy, or an alias). */
int32_t ex_want_view(mx *x, int32_t v, const layout *lay, const layout_view *view, const char *what);
/* The tensor holding op result v, in layout lay. */
int32_t ex_result(mx *x, int32_t v, const layout *lay);

/* expand_gemm.c: a matmul (fused or not) on its grid; its grid and result
 * layout (for the layout hints); AdamW's float parameters on a prim. */
int ex_expand_matmul(mx *x, const graph_op *o);
/* sum_sgd, sum_adamw: the sum of partials over the first axis, with the optimizer in its epilogue. */
int ex_expand_sum_optimizer(mx *x, const graph_op *o);
/* Value v's tensor, placed (in its plan's layout when it was not yet). */
int32_t ex_read(mx *x, int32_t v);
/* The default layout of a fresh tensor of type t. */
layout ex_plan(const mx *x, const graph_type *t);
int ex_gemm_grid(mx *x, int32_t op, gemm_plan *gp, mid_gemm_plan *ch);
layout ex_gemm_result_layout(const mx *x, const graph_op *o, const gemm_plan *gp);
void ex_adamw_params(const graph_op *o, mid_prim *p);

#endif
