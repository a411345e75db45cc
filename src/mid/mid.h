/* mid: graph ops expanded into primitives over tensors with explicit tile
 * layouts, and a copy at every layout boundary.
 *
 *   program ── tensors[]  a value (or temporary) in one layout: dtype, 8-bit
 *                         scale, layout; params and inputs start unplaced and
 *                         take the layout their first consumer asks for
 *           ── prims[]    COPY (retile, transpose, slice, pad, concat: a view
 *                         from destination to source coordinates), FILL, GEMM
 *                         partials, REDUCE of partials, EWISE, SOFTMAX,
 *                         LAYER_NORM (with LN_MOMENTS before it when a
 *                         row is cut over tiles), REDUCE_SUM, SGD, ADAMW, SUMSQ,
 *                         CLIP_COEF, REPEAT whose body is expanded once, and
 *                         the optimizer epilogue of a fused op: GEMM_EPI (or
 *                         REDUCE_EPI after K partials) writing the updated
 *                         states, ADAMW_APPLY AdamW's weight from them, and
 *                         GATHER, an embedding lookup of the tile's columns
 *           ── top        prim ids of the top level, in order
 *
 * A stacked parameter [L, ...] sliced by a repeat is one tensor holding L
 * per-layer shards back to back on each tile (`stack` = L); the body's slice
 * tensor aliases it and advances one shard per iteration. A free reshape
 * aliases its source's buffer. Every prim records the graph op it came from
 * (the recipe key) and, for casts, their ordinal inside that op's expansion.
 */
#ifndef TESSEL_MID_H
#define TESSEL_MID_H

#include "../graph/graph.h"
#include "../kern/kern.h"
#include "../layout/layout.h"
#include "../machine/machine.h"

typedef enum { MT_TEMP, MT_PARAM, MT_INPUT } mid_tensor_kind;

typedef struct mid_tensor {
    const char *name;
    dtype dtype;
    int8_t scale;          /* 8-bit dtypes */
    layout lay;            /* per layer for stacked tensors */
    bool placed;           /* lay is decided */
    mid_tensor_kind kind;
    int32_t value;         /* graph value held, -1 for temporaries */
    int32_t param_op;      /* MT_PARAM: the graph param op with its data */
    int64_t stack;         /* per-layer shards stored back to back (1: not stacked) */
    int32_t slice_of;      /* iteration slice of this stacked tensor, -1 if not */
    int32_t alias_of;      /* shares this tensor's buffer (free reshape), -1 if not */
    int32_t scope;         /* repeat prim whose body made it, -1 at top level */
} mid_tensor;

#define MID_KINDS(X)                                                     \
    X(COPY, copy) X(FILL, fill) X(GEMM, gemm) X(REDUCE, reduce)          \
    X(EWISE, ewise) X(SOFTMAX, softmax) X(LAYER_NORM, layer_norm)        \
    X(REDUCE_SUM, reduce_sum) X(SGD, sgd) X(ADAMW, adamw)                \
    X(SUMSQ, sumsq) X(CLIP_COEF, clip_coef) X(REPEAT, repeat)        \
    X(GEMM_EPI, gemm_epi) X(REDUCE_EPI, reduce_epi)                  \
    X(ADAMW_APPLY, adamw_apply) X(LN_MOMENTS, ln_moments) X(GATHER, gather)

typedef enum {
#define X(id, name) MID_##id,
    MID_KINDS(X)
#undef X
    MID_COUNT
} mid_kind;

extern const char *const mid_kind_names[MID_COUNT];

enum { MID_MAX_IN = 4, MID_MAX_OUT = 3, MID_MAX_ROW_PARTS = 64 /* a layer norm's row over at most this many tiles */ };

typedef VEC(int32_t) mid_block;  /* prim ids in order */

typedef struct mid_prim {
    mid_kind kind;
    int32_t in[MID_MAX_IN], nin;      /* tensor ids */
    int32_t out[MID_MAX_OUT], nout;
    kernel_ew_op ew;                      /* EWISE */
    kernel_epi_op epi;                    /* GEMM_EPI, REDUCE_EPI: the epilogue */
    dtype grad;                        /* GEMM_EPI, REDUCE_EPI: the dtype the gradient rounds to; REDUCE: the
                                          dtype its sum rounds to first (the product's, before a folded bias
                                          or cast), f32 for none */
    dtype acc;                         /* GEMM, REDUCE, GEMM_EPI, REDUCE_EPI */
    float f[5];                        /* kernel parameters, as kern.h's kernels take them */
    uint32_t axes;                     /* REDUCE_SUM: reduced input axes, as bits */
    bool keepdims;                     /* REDUCE_SUM: the result keeps reduced axes as 1 */
    int64_t step;                      /* ADAMW, ADAMW_APPLY: the optimizer step */
    int64_t col_run;                   /* GEMM, GEMM_EPI: columns per kernel run */
    bool panel_batch;                  /* GEMM: the block's whole panels as one batched run (mid_gemm_plan) */
    bool swap;                         /* GEMM: B streams, A is the coefficients, the product transposed (mid_gemm_plan) */
    int32_t column;                    /* SUMSQ: column of the sum-of-squares table */
    layout_view view;                  /* COPY: destination -> source coordinates */
    bool has_view;                     /* COPY: view is not the identity */
    /* A K-partials REDUCE and the copy gathering its partials: where a tile's
     * share of the copy is one whole partial of its own (it computed it), the
     * copy leaves it and the reduce reads it where it lies, in[nin-1] (the
     * partials; after the bias, if any). the own-partials pass (own_partials.c). */
    bool own;                          /* REDUCE: in[nin-1] is the partials; COPY: leaves such shares */
    bool remote;                       /* COPY: only what crosses the exchange; a tile's own share is
                                          written by the producer itself (LN_MOMENTS's own slot) */
    bool residual;                     /* REDUCE: a residual add folded in, its other operand the input
                                          before the own partials (mid_reduce_residual) */
    int32_t origin;                    /* graph op it came from */
    int32_t cast_ordinal;              /* casts: ordinal inside the origin's expansion, else -1 */
    bool early;                        /* an f16-to-f8 cast: to run (cast-order: runs) ahead of its copy chain */
    int64_t count;                     /* REPEAT iterations */
    mid_block body;                    /* REPEAT */
} mid_prim;

/* Where a graph op's result can be watched: its tensor is complete once
 * prim `after` has run (after = -1: at the start of every iteration of
 * repeat `scope`). Only results the program computes are probed, not views
 * of parameters or inputs. */
typedef struct mid_probe {
    int32_t value;     /* graph value */
    int32_t tensor;    /* the tensor holding it */
    int32_t after;     /* prim id, or -1 */
    int32_t scope;     /* repeat prim of the enclosing body, -1 at top level */
} mid_probe;

typedef struct mid_program {
    arena arena;
    const graph *g;
    const machine *m;
    VEC(mid_tensor) tensors;
    VEC(mid_prim) prims;
    mid_block top;
    VEC(int32_t) inputs;   /* tensor per graph input, program order */
    VEC(int32_t) outputs;  /* tensor per graph output */
    VEC(mid_probe) probes; /* every op result, in program order */
    /* Parsed from text (mid_parse): where each prim and tensor was written,
     * so the verifier's errors are located; NULL for an expanded program. */
    const char *src_path;
    int32_t *prim_line, *tensor_line; /* 1-based lines, per id */
} mid_program;

/* ---- the plan: the choices mid_expand expands --------------------------------
 *
 * A matmul runs on a grid: its batch axes cut into batch_parts[j] parts,
 * and per batch block a (rows, columns, K) grid of blocks bm x bn x bk. With
 * K cut into Kp = ceil(K / bk) parts every tile writes partial sums, stored
 * in `partials`, which an exchange gathers so each tile holds all Kp of a
 * finer row block of ceil(bm / Kp) rows (over all M rows, so one may take
 * rows of two grid blocks), summed in the op's
 * acc. Each tile's block runs as one GEMM kernel run, or as one per strip of
 * col_run columns: a run over several AMP column panels writes its rows
 * across panels and pays gemm_packed_row_cycles per row per panel, a strip
 * of one panel does not but pays its own setup; a batch of one-panel runs
 * sharing A (panel_batch) pays neither. Every other op's layout
 * follows from its operands (docs/lowering.md). */
typedef struct mid_gemm_plan {
    int64_t batch_parts[LAYOUT_MAX_RANK]; /* per result batch axis */
    int64_t bm, bn, bk;                   /* block of rows, columns, K */
    int64_t col_run;                      /* columns per kernel run: bn (one run per block), or a
                                             multiple of amp_col_panel (a run per column strip) */
    dtype partials;                       /* stored K partials (Kp > 1): f32 or f16 */
    bool stage_b;                         /* B, a parameter, is stored spread over the grid's tiles
                                             (1/R of each block per replica tile) and copied into
                                             the grid each time the op runs, instead of stored in it */
    bool panel_batch;                     /* one run per block (col_run = bn) as a batch of its whole
                                             16-column panels sharing A: one setup and no packed-row
                                             cost (a narrower last panel runs apart); not fused ops */
    bool sum_at_consumer;                 /* K split, not fused: the partials are summed in the layout
                                             the result's consumer wants (docs/lowering.md, "Consumer
                                             layouts") where that spreads the sum at least as thin as
                                             the grid's rows, instead of in the grid's rows */
    bool swap;                            /* the AMP streams B's columns (a block's bn rows of B^T, stored
                                             AMP_LEFT_T) against A's rows as its coefficients (bm kernel
                                             columns), so the product is stored transposed (ROW_MAJOR_T):
                                             long rows when the weights are B. col_run counts A's rows.
                                             Not fused, operands untransposed, partials summed in the grid */
} mid_gemm_plan;

/* What a chooser knows of a matmul when expansion reaches it. */
typedef struct mid_gemm_site {
    int32_t op;                  /* graph op */
    dtype a, b, acc, out;        /* operand, chain and result dtypes */
    int nb;                      /* batch axes of the result */
    int64_t batch[LAYOUT_MAX_RANK];
    int64_t M, N, K;
    bool a_param, b_param;       /* the operand is resident data (a parameter or its slice) */
    bool b_stageable;            /* B is a parameter stage_b can store apart: [K, N], not transposed */
    bool b_broadcast;            /* an operand lacks batch axes of the result */
    bool fused;                  /* an optimizer step runs in its epilogue (GEMM_EPI) */
    bool swappable;              /* mid_gemm_plan.swap may be chosen: not fused, operands untransposed */
} mid_gemm_site;

/* The site of matmul op as the graph gives it (a_param, b_param and
 * b_stageable false: expansion knows them). */
void mid_gemm_site_of(const graph *g, int32_t op, mid_gemm_site *site);

/* Called for a matmul the plan has no choice for: fills *out, returns 0, or
 * fails with d. */
typedef int (*mid_gemm_chooser)(void *ctx, const mid_gemm_site *site, mid_gemm_plan *out, diag *d);

/* The layout an elementwise op works in (docs/lowering.md): the rule's, its
 * first full-shape operand's (else spread over the machine); its second
 * full-shape operand's; or spread over the machine. The others' operands
 * are copied into it. */
typedef enum mid_ew_layout { MID_EWL_FIRST, MID_EWL_SECOND, MID_EWL_SPREAD, MID_EWL_COUNT } mid_ew_layout;
extern const char *const mid_ew_layout_names[MID_EWL_COUNT]; /* "first", "second", "spread" */

/* Whether ops of kind k expand as one elementwise prim (a mid_plan.ew_layout choice). */
bool mid_op_is_ewise(int kind);

typedef struct mid_plan {
    int32_t nops;                /* graph ops the arrays cover */
    mid_gemm_plan *gemm;         /* per graph op (matmuls) */
    int32_t *row_parts;          /* per graph op (layer norms): each row cut over this many tiles, each
                                    part's statistics gathered and joined (0 or 1: whole rows) */
    int8_t *ew_layout;           /* per graph op (elementwise, mid_op_is_ewise): the layout it works in,
                                    a mid_ew_layout, recorded as made (MID_EWL_FIRST where the choice
                                    gives the rule's layout) */
    bool *has;                   /* per graph op: gemm[op] is decided */
    uint64_t *cast_early;        /* per graph op: bit n, its cast of ordinal n runs ahead of its copy chain
                                    (the cast-order pass); recorded as made by mid_build. Ordinals past 63
                                    stay late */
    bool casts_all_early;        /* every cast site the program has runs early (a recipe of version 1, whose
                                    casts all ran at their source; the search's start); mid_build records the
                                    sites it moved in cast_early and clears this */
    mid_gemm_chooser choose;     /* asked for undecided matmuls; its answer is recorded here */
    void *ctx;
} mid_plan;

/* An empty plan for g (every matmul undecided); mid_plan_free releases it. */
void mid_plan_init(mid_plan *pl, const graph *g);
void mid_plan_copy(mid_plan *dst, const mid_plan *src);
void mid_plan_free(mid_plan *pl);
/* Whether choice c is a grid expansion can build for site s on m (blocks
 * within the dims, K blocks whole AMP blocks, the grid
 * within the machine's tiles); when not, *why says what is wrong. */
bool mid_gemm_plan_valid(const machine *m, const mid_gemm_site *s, const mid_gemm_plan *c, char *why, size_t cap);
bool mid_gemm_plan_equal(const mid_gemm_plan *a, const mid_gemm_plan *b); /* field by field */

/* Expands g for machine m with plan pl (docs/lowering.md): every graph op
 * by its implementation, a copy at every layout boundary, no absorption yet
 * (the mid passes follow). Choices the plan lacks are asked of pl->choose
 * and recorded in pl. User-level failures (an op the machine cannot run, a
 * model that needs what the compiler does not do yet, a plan that does not
 * fit the op) return -1 with d naming the op. */
int mid_expand(const graph *g, const machine *m, mid_plan *pl, mid_program *out, diag *d);

/* ---- passes.c: the mid passes, in pipeline order -------------------------
 *
 *   mid_expand ─► cast-order ─► absorb ─► compose-copies ─► own-partials      (mid_build runs them all)
 *
 * A pass rewrites a program in place; `rewrites` selects the named rewrites
 * of a pass that has them (bit r: rewrites[r]; ~0u: all). */
typedef int (*mid_pass_fn)(mid_program *p, uint32_t rewrites, diag *d);
typedef struct mid_pass {
    const char *name;                /* "absorb" */
    const char *summary;             /* one line */
    mid_pass_fn run;
    const char *const *rewrites;     /* its named rewrites, runnable alone as NAME.REWRITE, or NULL */
    int nrewrites;
} mid_pass;
extern const mid_pass mid_passes[];  /* in order; the last has name NULL */
/* The pass `spec` names ("absorb", or one rewrite "absorb.cast"): 0 with
 * *pass and *rewrites, -1 no such pass, -2 the pass has no such rewrite. */
int mid_pass_find(const char *spec, const mid_pass **pass, uint32_t *rewrites);
/* Expansion, then every mid pass: the program the search prices and the
 * driver lowers. A watch (or NULL) sees the program after each, by name. */
typedef struct mid_watch {
    void (*after)(void *ctx, const char *pass, const mid_program *p);
    void *ctx;
} mid_watch;
int mid_build(const graph *g, const machine *m, mid_plan *pl, mid_program *out, const mid_watch *w, diag *d);
/* Per tensor, how many live prims (those in a block) read it, counting
 * aliases and slices of it and program outputs, and the prim that makes it
 * (-1 none, -2 several); both malloc'd, the caller frees. */
void mid_uses(const mid_program *p, int32_t **reads, int32_t **maker);
/* The place in block prims v(at, n) of the one prim that writes storage st
 * there, -1 if none, -2 if more than one (or a repeat, which may write
 * anything). */
int32_t mid_writer_after(const mid_program *p, const int32_t *v, int32_t n, int32_t at, int32_t st);

/* cast_order.c: each f16-to-f8 cast marked early moves ahead of the copy
 * chain expansion put before it (docs/lowering.md, "Cast ordering"); one it
 * cannot move stays late, its mark cleared. */
int mid_cast_order(mid_program *p, uint32_t rewrites, diag *d);
/* A cast site: a graph op's f16-to-f8 cast, keyed as recipes key it. */
typedef struct mid_cast_site {
    int32_t op, ordinal;   /* the graph op and the cast's ordinal in its expansion */
    int32_t prim;
    bool eligible;         /* it can move ahead of a copy */
    bool early;            /* marked early */
    const char *why;       /* not eligible: the reason, a static string */
} mid_cast_site;
/* Every cast site of p, a program as expansion makes it (every cast late),
 * in prim order into *out (malloc'd); the count. `early` is the plan's mark,
 * which cast-order honours where the site is eligible. */
int32_t mid_cast_sites(const mid_program *p, mid_cast_site **out);

/* absorb.c: a consumer done by its producer (the temporary between them is
 * never stored). The rewrites, in the order they are tried: */
#define MID_ABSORB_REWRITES(X) \
    X(CAST, cast) X(BIAS, bias) X(GELU, gelu) X(RESIDUAL, residual) X(PRESCALE, prescale) X(PANELS, panels) X(YIELD, yield)
typedef enum {
#define X(id, name) MID_ABSORB_##id,
    MID_ABSORB_REWRITES(X)
#undef X
    MID_ABSORB_COUNT
} mid_absorb_rewrite;
#define MID_ABSORB_BIT(id) (1u << MID_ABSORB_##id)
extern const char *const mid_absorb_names[MID_ABSORB_COUNT];
int mid_absorb(mid_program *p, uint32_t rewrites, diag *d);
/* The probes of tensor t go (its value is no longer stored); those watched
 * after prim `gone` are watched after `now`. */
void mid_drop_probes(mid_program *p, int32_t t, int32_t gone, int32_t now);
/* compose.c: a copy through a view that shifts axes in place, reading a
 * temporary only it reads, made by another such copy, reads that copy's
 * source through the two views composed; the first copy goes. */
int mid_compose_copies(mid_program *p, uint32_t rewrites, diag *d);
/* own_partials.c: a K-partials REDUCE reads the partial its own tile's GEMM
 * wrote in place; the gathering copy leaves that share out. */
int mid_own_partials(mid_program *p, uint32_t rewrites, diag *d);
void mid_free(mid_program *p);
/* ---- print.c, parse.c, verify.c: the mid text form (docs/ir.md, "Mid text")
 *
 *   graph mlp                       the graph p->g in .tsl form
 *   ...
 *   --- mid                         MID_SEPARATOR
 *   machine tiny                    p->m's name
 *   tensors 9                       every tensor in id order, every field
 *     %h = temp f16 [64/4,128]rm {block=[16,128], stride=[1,0], base=0} value=%h
 *   prims 12                        one prim per line, blocks in program order
 *     p3 %h:f16[64/4,128]rm = gemm(%x:f16[64/4,96]ampl, %w:f16[96,128]rm x4) {col_run=128}  # h
 *     p4 repeat 2 {  # y
 *       ...
 *     }
 *   detached 2                      prims in no block (absorbed by a consumer fold)
 *   inputs %x                       tensor handles
 *   outputs %y
 *   probes 3                        %value in %tensor after pN scope pM
 *
 * Printing is a fixed point: print(parse(print(p))) == print(p). */
#define MID_SEPARATOR "--- mid"
enum { MID_ENC_COUNT = 5 };
extern const char *const mid_enc_names[MID_ENC_COUNT]; /* layout encodings: "rm", "ampl", "ampo", "rmt", "amplt" */
/* The whole text of p (with its graph) on f; for --print-after=expand. */
void mid_print(FILE *f, const mid_program *p);
/* The same as a malloc'd string of *len bytes (len may be NULL). */
char *mid_print_text(const mid_program *p, size_t *len);
/* Reads the text mid_print writes (len bytes named path) for machine m:
 * the graph into *g_out (graph_free it after mid_free(out)) and the program
 * into *out, whose g and m point at them. A malformed text, or one for
 * another machine, returns -1 with "path:line:col: error: ..." in d and
 * nothing allocated. The program is not verified: see mid_verify. */
int mid_parse(const char *text, size_t len, const char *path, const machine *m, graph **g_out, mid_program *out, diag *d);
/* Checks the program's structure: ids in range, every operand defined
 * before it is read and visible in its scope, layouts well formed for
 * their machine and shapes, copies between layouts of one value, blocks
 * well nested. Returns -1 with d naming the prim or tensor at fault. */
int mid_verify(const mid_program *p, diag *d);

/* numerics.c: the plan's numeric decisions (graph.h), read off the expanded
 * program: K partitions of every matmul, reduction blocks, clip rows. */
void mid_numerics(const mid_program *p, graph_numerics *out);

static inline mid_tensor *mid_t(const mid_program *p, int32_t id) { return &p->tensors.v[id]; }
static inline mid_prim *mid_p(const mid_program *p, int32_t id) { return &p->prims.v[id]; }
/* How the AMP runs GEMM prim pr (lower.c runs it so, estimate.c prices it
 * so): the tensors that are its A and B (in[1] and in[0] when B streams),
 * the result axes of its rows and columns, and the box of the result's batch
 * axes over a shard of extents ext, with A's, B's and the result's strides. */
typedef struct mid_gemm_kernel {
    int32_t a, b;      /* the kernel's A and B tensors */
    int row, col;      /* result axes of the kernel's rows and columns */
    kernel_box batch;  /* batch axes (one axis of 1 without any) */
} mid_gemm_kernel;
mid_gemm_kernel mid_gemm_kernel_of(const mid_program *p, const mid_prim *pr, const int64_t *ext);
/* The K range [*k0, *k1) the result shard s of GEMM prim pr computes: its
 * K part's (s[0] when the result carries the partials axis first, the last
 * part shorter when the block does not divide K), else all of K's block. */
void mid_gemm_k_range(const mid_program *p, const mid_prim *pr, const int64_t *s, int64_t *k0, int64_t *k1);
/* How a REDUCE_SUM prim pr runs over an input shard of extents ext
 * (lower.c runs it so, estimate.c prices it so): the box of ext with the
 * result's strides as operand 0 (0 along the summed axes) and the input's
 * as operand 1, not collapsed. */
kernel_box mid_reduce_sum_box(const mid_program *p, const mid_prim *pr, const int64_t *ext);

/* runs.c: the runs of one shard of a prim, as lower.c emits them and
 * estimate.c prices them (kern.h's kernel_run_cycles). */

/* Operand strides of tensor t along out's axes, aligned to out's trailing
 * axes (broadcast axes 0). */
void mid_aligned_strides(const mid_program *p, int32_t t, const layout *out, int64_t *st);
/* An EWISE prim's box over a result shard of extents ext: out, then each
 * input, aligned; a transposed result's storage rows whole (their padding
 * too); ordered by the result's storage and collapsed. Each run takes its
 * innermost KERNEL_MAX_BOX axes (kernel_box_run). */
kernel_box mid_ewise_box(const mid_program *p, const mid_prim *pr, const int64_t *ext);
/* A SOFTMAX, LAYER_NORM or LN_MOMENTS prim's rows over a shard of extents
 * ext (LN_MOMENTS: of its input, else of its result): the box of every axis
 * but the last with out's and in's strides (a layer norm's gamma and beta
 * unstrided, and its parts' statistics), collapsed. Each run takes the
 * innermost axis as its rows; the last axis' extent is each row. */
kernel_box mid_rows_box(const mid_program *p, const mid_prim *pr, const int64_t *ext);
/* A GATHER prim's run over a result shard of extents ext: the rows of the
 * shard's block, ext's columns, the table's rows (addresses left 0). */
kernel_run mid_gather_run(const mid_program *p, const mid_prim *pr, const int64_t *ext);

/* One run of a shard: its kernel, box, strides, dtypes and parameters, and
 * for each operand i the tensor t[i] (-1: unused) and the byte offset off[i]
 * into that tensor's shard on the tile where the run reads or writes it. */
typedef struct mid_run {
    kernel_run r;
    int32_t t[KERNEL_MAX_OPERANDS];
    int64_t off[KERNEL_MAX_OPERANDS];
} mid_run;
typedef void mid_run_fn(void *ctx, const mid_run *run);
/* A run of kernel k over tensors ops[0..nops) as its operands 0.. at offset
 * 0 (their dtypes and scales), its box 1 and no parameters. */
mid_run mid_run_over(const mid_program *p, kernel_id k, const int32_t *ops, int nops);
/* The GEMM runs of a result shard of extents ext computing K extent k (the
 * shard's K part): a run per index of the batch axes the kernel does not
 * take, each cut into strips of col_run columns or into a batch of whole
 * 16-column panels and a narrower last one (mid_gemm_plan). */
void mid_gemm_runs(const mid_program *p, const mid_prim *pr, const int64_t *ext, int64_t k, mid_run_fn *fn, void *ctx);
/* The GEMM_EPI runs of a result shard of extents ext: one, or one per
 * strip of col_run columns. */
void mid_gemm_epi_runs(const mid_program *p, const mid_prim *pr, const int64_t *ext, mid_run_fn *fn, void *ctx);
/* The one run of a whole-shard prim (REDUCE, SGD, ADAMW, REDUCE_EPI,
 * ADAMW_APPLY) on a shard of its result: every stored element, padding
 * included. A REDUCE's own partial (operand 3, op) is the lowering's to add. */
mid_run mid_flat_run(const mid_program *p, const mid_prim *pr);

/* The tensor whose buffer t lives in (through aliases and slices). */
int32_t mid_storage(const mid_program *p, int32_t t);
/* How many partials a REDUCE can read as a tile's own: the lowering names
 * it in a byte (kern.h: REDUCE's op = 1 + the partial). */
enum { MID_OWN_SLOTS = 255 };
/* Whether a REDUCE prim adds a bias (in[1]). */
bool mid_reduce_has_bias(const mid_prim *pr);
/* The tensor a REDUCE adds after its sum (and bias), rounded to its result's
 * dtype first (absorb.c's residual rewrite), or -1. */
int32_t mid_reduce_residual(const mid_prim *pr);
/* The parts a LAYER_NORM prim's rows are cut into over tiles: 0 when it
 * takes each row's statistics itself, else P, the parts whose LN_MOMENTS
 * it joins (in[3], gathered: [..., P, 3] f32 per row). */
int64_t mid_layer_norm_parts(const mid_program *p, const mid_prim *pr);

#endif
