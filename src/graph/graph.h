/* graph: the graph IR, its text format, verifier, shape inference and the FP32
 * reference interpreter.
 *
 *   graph ── values[]  name, type (dtype, 8-bit scale, shape), defining op
 *         ── ops[]     kind, operands, results, attributes, source position, trivia
 *         ── body      block: op ids in program order
 *
 *   A value is defined once: by an op result, or as an argument of a repeat
 *   body. Structural ops (input, param, output, yield, repeat) are ops like
 *   any other, so a block is just a list of op ids.
 *
 *   %y = repeat 27 carry(%h = %x) slice(%w = %w_all) {   body runs 27 times:
 *     ...                                                 %h carries between
 *     yield %h2                                           iterations, %w is
 *   }                                                     %w_all[i] in iteration i
 *
 * Op stable names (recipe keys) are the names of their first result; value
 * names are unique in the whole graph, bodies included.
 */
#ifndef TESSEL_GRAPH_H
#define TESSEL_GRAPH_H

#include "../num/num.h"
#include "../util/util.h"

enum { GRAPH_MAX_RANK = 6, GRAPH_MAX_REPEAT_DEPTH = 8 /* repeats open inside each other */ };
#define GRAPH_MAX_DIM (1ll << 40)    /* elements along one axis */
#define GRAPH_MAX_NUMEL (1ll << 48)  /* elements in one tensor */

/* ---- ops.c: the op and attribute tables ------------------------------- */

/* Structural ops have their own syntax and every pass handles them directly. */
/*  id       name      min_in max_in nout(-1: varies) */
#define GRAPH_STRUCT_OPS(X)          \
    X(INPUT,  input,   0,  0,  1)    \
    X(PARAM,  param,   0,  0,  1)    \
    X(OUTPUT, output,  1, -1,  0)    \
    X(YIELD,  yield,   0, -1,  0)    \
    X(REPEAT, repeat,  0, -1, -1)

/* Compute ops: derived tables (names, shape rules, reference kernels) come
 * from this list. A(x) marks an allowed attribute, R(x) a required one (the
 * masks are expanded only in ops.c). */
/*  id                name              min_in max_in nout  allowed attributes                      required */
#define GRAPH_COMPUTE_OPS(X)                                                                               \
    X(MATMUL,           matmul,           2,  2,  1, A(TRANSPOSE_A) | A(TRANSPOSE_B) | A(ACC),          0)   \
    X(ADD,              add,              2,  2,  1, 0,                                                0)   \
    X(SUB,              sub,              2,  2,  1, 0,                                                0)   \
    X(MUL,              mul,              2,  2,  1, 0,                                                0)   \
    X(GELU,             gelu,             1,  1,  1, 0,                                                0)   \
    X(GELU_GRAD,        gelu_grad,        2,  2,  1, 0,                                                0)   \
    X(GELU_ERF,         gelu_erf,         1,  1,  1, 0,                                                0)   \
    X(SOFTMAX,          softmax,          1,  1,  1, A(AXIS),                                          0)   \
    X(LAYER_NORM,       layer_norm,       3,  3,  1, A(EPS),                                           0)   \
    X(RESHAPE,          reshape,          1,  1,  1, 0,                                                0)   \
    X(TRANSPOSE,        transpose,        1,  1,  1, A(PERM),                                          R(PERM)) \
    X(SLICE,            slice,            1,  1,  1, A(START) | A(END),                                R(START) | R(END)) \
    X(PAD,              pad,              1,  1,  1, A(LOW) | A(HIGH) | A(VALUE),                      R(LOW) | R(HIGH)) \
    X(CONCAT,           concat,           1, -1,  1, A(AXIS),                                          R(AXIS)) \
    X(CAST,             cast,             1,  1,  1, A(TO) | A(SCALE) | A(SATURATE),                   R(TO)) \
    X(SCALE,            scale,            1,  1,  1, A(BY),                                            R(BY)) \
    X(REDUCE_SUM,       reduce_sum,       1,  1,  1, A(AXES) | A(KEEPDIMS),                            R(AXES)) \
    X(SGD,              sgd,              2,  3, -1, A(LR) | A(MOMENTUM) | A(WEIGHT_DECAY),            R(LR)) \
    X(ADAMW,            adamw,            4,  4,  3, A(LR) | A(BETA1) | A(BETA2) | A(EPS) | A(WEIGHT_DECAY) | A(STEP), R(LR)) \
    X(GLOBAL_NORM_CLIP, global_norm_clip, 1, -1, -1, A(MAX_NORM),                                      R(MAX_NORM)) \
    X(MATMUL_SGD,       matmul_sgd,       3,  4, -1, A(TRANSPOSE_A) | A(TRANSPOSE_B) | A(ACC) | A(GRAD) | A(LR) | A(MOMENTUM) | A(WEIGHT_DECAY), R(LR)) \
    X(MATMUL_ADAMW,     matmul_adamw,     5,  5,  3, A(TRANSPOSE_A) | A(TRANSPOSE_B) | A(ACC) | A(GRAD) | A(LR) | A(BETA1) | A(BETA2) | A(EPS) | A(WEIGHT_DECAY) | A(STEP), R(LR)) \
    NUM_UNARY_OPS(GRAPH_UNARY_ROW, X) /* relu .. erf: one operand, one result, no attributes */   \
    X(MAX,              max,              2,  2,  1, 0,                                                0)   \
    X(MIN,              min,              2,  2,  1, 0,                                                0)   \
    X(GATHER,           gather,           2,  2,  1, 0,                                                0)   \
    X(SUM_SGD,          sum_sgd,          2,  3, -1, A(GRAD) | A(LR) | A(MOMENTUM) | A(WEIGHT_DECAY),  R(LR)) \
    X(SUM_ADAMW,        sum_adamw,        4,  4,  3, A(GRAD) | A(LR) | A(BETA1) | A(BETA2) | A(EPS) | A(WEIGHT_DECAY) | A(STEP), R(LR))
#define GRAPH_UNARY_ROW(id, name, cost, X) X(id, name, 1, 1, 1, 0, 0)

/* The fused ops (matmul_sgd, matmul_adamw) are what the epilogue fusion
 * (src/graph/fuse.c) makes of a weight-gradient matmul and the optimizer that
 * is its only use: operands (a, b, w[, buf]) and (a, b, w, m, v), the
 * matmul's attributes, the optimizer's, and `grad`, the dtype the gradient
 * rounds to (the matmul's declared result), which no tensor ever holds.
 * sum_sgd and sum_adamw are the same of a sum over the first axis of
 * partials p (an owner's gradient rows from every data-parallel replica,
 * docs/chips.md): operands (p, w[, buf]) and (p, w, m, v), the sum in f32
 * over p's first axis in order, rounded to `grad`. */

typedef enum {
#define X(id, name, ...) OP_##id,
    GRAPH_STRUCT_OPS(X) GRAPH_COMPUTE_OPS(X)
#undef X
    OP_COUNT
} graph_op_kind;

/* matmul and the fused ops that contain its GEMM. */
static inline bool graph_kind_has_gemm(int kind) {
    return kind == OP_MATMUL || kind == OP_MATMUL_SGD || kind == OP_MATMUL_ADAMW;
}

/*  id            name          kind */
#define GRAPH_ATTRS(X)                        \
    X(TRANSPOSE_A,  transpose_a,  BOOL)       \
    X(TRANSPOSE_B,  transpose_b,  BOOL)       \
    X(ACC,          acc,          DTYPE)      \
    X(GRAD,         grad,         DTYPE)      \
    X(TO,           to,           DTYPE)      \
    X(SCALE,        scale,        INT)        \
    X(SATURATE,     saturate,     BOOL)       \
    X(BY,           by,           FLOAT)      \
    X(AXIS,         axis,         INT)        \
    X(AXES,         axes,         INTS)       \
    X(KEEPDIMS,     keepdims,     BOOL)       \
    X(PERM,         perm,         INTS)       \
    X(START,        start,        INTS)       \
    X(END,          end,          INTS)       \
    X(LOW,          low,          INTS)       \
    X(HIGH,         high,         INTS)       \
    X(VALUE,        value,        FLOAT)      \
    X(EPS,          eps,          FLOAT)      \
    X(LR,           lr,           FLOAT)      \
    X(MOMENTUM,     momentum,     FLOAT)      \
    X(WEIGHT_DECAY, weight_decay, FLOAT)      \
    X(BETA1,        beta1,        FLOAT)      \
    X(BETA2,        beta2,        FLOAT)      \
    X(STEP,         step,         INT)        \
    X(MAX_NORM,     max_norm,     FLOAT)

typedef enum {
#define X(id, name, kind) ATTR_##id,
    GRAPH_ATTRS(X)
#undef X
    ATTR_COUNT
} graph_attr_id;

typedef enum { ATTR_KIND_BOOL, ATTR_KIND_INT, ATTR_KIND_FLOAT, ATTR_KIND_DTYPE, ATTR_KIND_INTS } graph_attr_kind;

typedef struct graph_op_info {
    const char *name;
    int min_in, max_in;  /* operand count bounds; max -1: unbounded */
    int nout;            /* result count; -1: depends on operands/attributes */
    uint64_t allowed;    /* attribute bits the op accepts */
    uint64_t required;   /* attribute bits it must have */
    bool structural;
} graph_op_info;

extern const graph_op_info graph_op_infos[OP_COUNT];
extern const char *const graph_attr_names[ATTR_COUNT];
extern const graph_attr_kind graph_attr_kinds[ATTR_COUNT];
bool graph_op_lookup(const char *s, size_t n, graph_op_kind *out);
/* Results of a compute op with nin operands (the table's nout, resolved). */
int32_t graph_result_count(graph_op_kind kind, int32_t nin);
/* Whether kind accepts nin operands; if not, msg says what it takes. */
bool graph_arity_ok(graph_op_kind kind, int32_t nin, char *msg, size_t cap);
bool graph_attr_lookup(const char *s, size_t n, graph_attr_id *out);

/* ---- types, values, ops ------------------------------------------------ */

typedef struct graph_type {
    dtype dtype;
    int8_t scale;                  /* 8-bit types: value = decode(code) * 2^scale */
    int32_t rank;
    int64_t dim[GRAPH_MAX_RANK];   /* elements per axis */
} graph_type;

typedef struct graph_value {
    const char *name;   /* without the '%' */
    graph_type type;
    int32_t def;        /* defining op: producer, or the repeat owning the arg */
    int32_t def_index;  /* result index, or body-argument index */
    bool is_arg;        /* a repeat body argument */
} graph_value;

typedef struct graph_attr {
    union {
        bool b;
        int64_t i;
        double f;
        dtype t;
        struct { int64_t *v; int32_t n; } ints;
    };
} graph_attr;

typedef enum { INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_NPY, INIT_DATA, INIT_CONCAT } graph_init_kind;

typedef struct graph_init graph_init;
struct graph_init {
    graph_init_kind kind;
    double mean, std;   /* normal */
    uint64_t seed;      /* normal */
    int64_t skip;       /* normal: elements of the seeded stream before the first value
                           (a window of a larger parameter, as a pipeline stage's layers) */
    const char *path;   /* npy: as written, relative to the .tsl file */
    /* data (imported models only): the values as little-endian f32 in nparts
     * equal row-major pieces (a stacked parameter: one per layer), owned by
     * whoever built the graph (see graph.keep) and never copied here */
    const void *const *parts;
    int32_t nparts;
    /* concat (built by a pass, never parsed): the parameters whose inits
     * are cat[0..ncat), each of the parameter's shape but for the last axis,
     * which is width[k] wide, side by side along the last axis, each
     * rounded to the parameter's dtype as it would have been alone */
    const graph_init *cat;
    const int64_t *width;
    int32_t ncat;
};

typedef VEC(int32_t) graph_block;  /* op ids in program order */

typedef struct graph_op {
    graph_op_kind kind;
    int32_t *in, nin;           /* operand value ids */
    int32_t *out, nout;         /* result value ids */
    uint64_t attr_set;          /* bit ATTR_x: attr[x] was given */
    graph_attr attr[ATTR_COUNT];
    graph_init init;            /* param */
    /* repeat: in = carried initial values, then stacked parameters */
    int64_t count;              /* iterations */
    int32_t ncarry;             /* carried values; results correspond */
    int32_t *args, nargs;       /* body arguments: carried, then slices */
    graph_block body;           /* ends with a yield of ncarry values */
    int32_t parent;             /* enclosing repeat op, -1 at top level */
    int32_t line, col;          /* source position, 0 when built in code */
    /* trivia kept for exact round trips */
    const char *lead;           /* blank and comment lines before the op, verbatim */
    const char *tail;           /* end-of-line comment with its leading spaces */
    const char *end_lead, *end_tail; /* repeat: around the closing brace */
} graph_op;

typedef struct graph {
    arena arena;                /* owns everything the graph points to */
    const char *name;
    const char *path;           /* source file, or the zoo string, for messages */
    src_text src;               /* parsed text (empty when built in code) */
    VEC(graph_value) values;
    VEC(graph_op) ops;
    graph_block body;
    strmap names;               /* value name -> id */
    const char *lead, *tail;    /* trivia before/on the 'graph' line */
    const char *end_lead;       /* trivia after the last op */
    int32_t cur_repeat;         /* builder: open repeat op, -1 at top level */
    /* Per input in program order, the dtype the source model declares where
     * the import changed it (an ONNX f32 input compiled at f16: data in the
     * declared dtype is taken at the boundary, as PopRT does); NULL: none. */
    const dtype *declared;
    /* what data() parameters point into (memory maps, folded constants):
     * released by graph_free through keep_free, may be handed to another graph */
    void *keep;
    void (*keep_free)(void *keep);
} graph;

/* ---- graph.c: construction -------------------------------------------- */

graph *graph_new(const char *name, const char *path);
void graph_free(graph *g);

static inline graph_value *graph_val(const graph *g, int32_t id) { return &g->values.v[id]; }
static inline graph_op *graph_opr(const graph *g, int32_t id) { return &g->ops.v[id]; }
const char *graph_op_name(const graph *g, int32_t op);  /* stable name */

int64_t graph_type_numel(const graph_type *t);
bool graph_type_equal(const graph_type *a, const graph_type *b);
/* "f16[128, 768]"; buf of at least 128 bytes. */
void graph_type_str(const graph_type *t, char *buf, size_t cap);
graph_type graph_type_make(dtype t, int rank, const int64_t *dim);

/* Builder: ops go into the innermost open repeat (or the top level). Names
 * must be unique; a NULL name gets a fresh one ("t12"). Returns the op id. */
int32_t graph_add_input(graph *g, const char *name, graph_type t);
int32_t graph_add_param(graph *g, const char *name, graph_type t, graph_init init);
int32_t graph_add_output(graph *g, const int32_t *vals, int32_t n);
/* A compute op with its operands; set attributes with graph_set_*, then
 * graph_finish_op infers result types (declared gives the result dtypes and,
 * for reshape, the shape; NULL lets inference choose) and names the results. */
int32_t graph_begin_op(graph *g, graph_op_kind kind, const int32_t *in, int32_t nin);
void graph_set_bool(graph *g, int32_t op, graph_attr_id a, bool v);
void graph_set_int(graph *g, int32_t op, graph_attr_id a, int64_t v);
void graph_set_float(graph *g, int32_t op, graph_attr_id a, double v);
void graph_set_dtype(graph *g, int32_t op, graph_attr_id a, dtype v);
void graph_set_ints(graph *g, int32_t op, graph_attr_id a, const int64_t *v, int32_t n);
/* Sets on op the attributes of op `from` of src that mask selects (bit ATTR_x). */
void graph_copy_attrs(graph *g, int32_t op, const graph *src, int32_t from, uint64_t mask);
int graph_finish_op(graph *g, int32_t op, const char *const *names, const graph_type *declared, diag *d);
/* Opens a repeat body; carried and stacked are outer values; arg names name
 * the body arguments (carried first). The body must end with graph_end_repeat. */
int32_t graph_begin_repeat(graph *g, int64_t count, const int32_t *carried, int32_t ncarry,
                           const int32_t *stacked, int32_t nstacked, const char *const *arg_names);
int graph_end_repeat(graph *g, const int32_t *yields, const char *const *result_names, diag *d);
/* Values the builder just made: result i of op. */
static inline int32_t graph_result(const graph *g, int32_t op, int i) { return g->ops.v[op].out[i]; }
int32_t graph_lookup(const graph *g, const char *name);   /* value id or -1 */
/* The repeat whose body defines v (its arguments included), -1 at top level. */
int32_t graph_value_scope(const graph *g, int32_t v);
/* Whether v may be used in block (a repeat op id, -1 for the top level). */
bool graph_value_visible(const graph *g, int32_t v, int32_t block);

/* Attribute accessors with the documented defaults (ops.c). */
bool graph_attr_bool(const graph_op *op, graph_attr_id a);
int64_t graph_attr_int(const graph_op *op, graph_attr_id a);
double graph_attr_float(const graph_op *op, graph_attr_id a);
dtype graph_attr_dtype(const graph_op *op, graph_attr_id a);

/* Located error about op (source position when parsed, stable name otherwise). */
int graph_fail_op(const graph *g, int32_t op, diag *d, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- infer.c: shape and dtype rules ------------------------------------ */

/* Result types of a compute op from its operands and attributes. declared
 * (may be NULL) supplies what the operands cannot: result dtypes for matmul,
 * reduce_sum and friends, the shape for reshape. */
int graph_infer(const graph *g, int32_t op, const graph_type *declared, graph_type *out, diag *d);

/* ---- parse.c / print.c: the .tsl text format --------------------------- */

/* Parses text (len bytes) named path. On error returns NULL with d set. */
graph *graph_parse(const char *path, const char *text, size_t len, diag *d);
/* The same; opaque_data accepts data(N) parameters without their values (a
 * mid file's graph, printed from an imported model: no pass reads them). */
graph *graph_parse_as(const char *path, const char *text, size_t len, bool opaque_data, diag *d);
graph *graph_parse_file(const char *path, diag *d);
/* Canonical text; print(parse(x)) == x for canonical x. malloc'd. */
char *graph_print(const graph *g);

/* ---- verify.c ---------------------------------------------------------- */

/* Checks every structural rule: definition before use inside the right
 * scope, operand counts, attributes, declared types against inference,
 * repeat shapes, outputs. */
int graph_verify(const graph *g, diag *d);

/* ---- init.c: parameter and input data ----------------------------------- */

/* The seeded generator behind normal(): fills n values (docs/ir.md). */
void graph_normal_fill(uint64_t seed, double mean, double std, float *out, int64_t n);
/* Elements [first, first + n) of the same stream, for chunked generation. */
void graph_normal_fill_at(uint64_t seed, double mean, double std, int64_t first, float *out, int64_t n);
/* The largest |value| of graph_normal_fill's first n values, on every
 * core, without keeping them (an fp8 weight's scale). */
float graph_normal_maxabs(uint64_t seed, double mean, double std, int64_t n);
/* Values of parameter op (numel of its type) as f32: the init's values
 * rounded to the parameter's dtype, or exact when keep_f32. */
int graph_param_values(const graph *g, int32_t op, bool keep_f32, float *out, diag *d);
/* Elements [first, first + n) of the same values (row-major), so a stacked
 * parameter can be generated one layer at a time. */
int graph_param_values_at(const graph *g, int32_t op, bool keep_f32, int64_t first, int64_t n, float *out, diag *d);
/* Whether graph_param_values_at makes a window of op's values without
 * reading the whole (no .npy file behind it, which is read whole each time). */
bool graph_param_windows_cheaply(const graph *g, int32_t op);
/* Default data for input value k (0-based, in program order): normal(0, 1) with
 * seed 1000 + k, rounded to the input's dtype. */
void graph_input_default(const graph *g, int32_t value, int k, float *out);
/* The same data from the input's position, dtype and size alone (what a
 * package run uses when no file is given). */
void graph_default_input_fill(int k, dtype dt, int scale, float *out, int64_t n);
/* Input data of that kind from any seed: normal(0, 1), or for i32 (ids)
 * normal(0, 64) whole values, rounded to dt. */
void graph_input_fill_seeded(uint64_t seed, dtype dt, int scale, float *out, int64_t n);

/* ---- numerics.c: the numeric decisions of a compiled plan ----------------
 *
 * What the plan-exact reference takes from a plan: where partial sums split,
 * in which dtype they chain and are stored, and in which order they are
 * reduced. Never an address, a layout or an exchange, so a lowering fault
 * cannot be mirrored in the reference. Keyed by op stable names in JSON:
 *
 *   {"format": "tessel-numerics", "version": 1, "ops": [
 *     {"op": "h", "kind": "matmul", "acc": "f32", "partials": "f32", "k_bounds": [0, 64, 96]},
 *     {"op": "s", "kind": "reduce_sum", "blocks": [4, 96]},
 *     {"op": "c", "kind": "global_norm_clip",
 *      "grads": [{"blocks": [32, 48], "row_base": 0, "row_stride": [1, 0]}]}]}
 *
 * matmul (and matmul_sgd, matmul_adamw, whose GEMM is the same): every
 *   output element is, per K partition [k_bounds[p], k_bounds[p+1]),
 *   one chain acc = 0; acc = acc + a*b over k ascending in `acc` (f16 rounds
 *   every step), on unscaled 8-bit operands, times 2^(sa+sb); one partition
 *   rounds to the result, several round to `partials` and chain (in `acc`,
 *   partitions ascending) into the result.
 * reduce_sum: per input axis the block its elements are summed in (the dim:
 *   whole); every block of the reduced axes is one f32 chain in row-major
 *   order, and the block sums chain in row-major block order.
 * global_norm_clip: block b of a gradient goes to row row_base + sum_a
 *   b[a]*row_stride[a]; per row and gradient one f32 chain of squares over its
 *   blocks in order (row-major inside each); each row chains its gradients in
 *   order, the rows chain ascending, and the coefficient is
 *   min(1, max_norm / (sqrt(total) + 1e-6)) in f32.
 * softmax with a prescale s (a scale by s > 0 folded into it, the scale's entry
 *   marked folded and passing its operand on unrounded): per row the f32 max
 *   m of the unscaled x, e = expf(s * (x - m)), the f32 sum in order, e / sum.
 * layer_norm with a part p ({"op": "ln", "kind": "layer_norm", "part": 576}):
 *   each row's statistics are num_moments_of its parts of p elements (the
 *   last shorter), joined in order by num_moments_join; without an entry the
 *   whole row is one part.
 * Everything else computes as kern.h's kernels do: f32, one rounding per result. */
typedef struct graph_gemm_plan {
    dtype acc;             /* chain dtype: f32, or f16 (rounds every step) */
    dtype partials;        /* dtype partial sums are stored in when K is split */
    int32_t nk;            /* K partitions */
    int64_t *k_bounds;     /* nk + 1 ascending bounds, from 0 to K (elements) */
} graph_gemm_plan;

typedef struct graph_norm_grad {
    int64_t block[GRAPH_MAX_RANK];      /* elements per block, per axis */
    int32_t row_base;                    /* row of block 0 */
    int32_t row_stride[GRAPH_MAX_RANK];  /* rows per block step, per axis */
} graph_norm_grad;

typedef struct graph_op_plan {
    graph_op_kind kind;                  /* OP_MATMUL (or a fused op with its GEMM), OP_REDUCE_SUM,
                                            OP_GLOBAL_NORM_CLIP; OP_INPUT: none */
    graph_gemm_plan gemm;
    int64_t block[GRAPH_MAX_RANK];       /* reduce_sum: elements summed together, per input axis */
    graph_norm_grad *grads;              /* global_norm_clip: one per gradient (operand) */
    bool folded;                         /* scale: done by the softmax reading it (passes its operand on) */
    float prescale;                      /* softmax: the folded scale's factor s > 0, else 0 */
    int64_t part;                        /* layer_norm: a row's statistics are taken in parts of this
                                            many elements (the last shorter) and joined in order
                                            (num_moments_join); 0: the whole row at once */
} graph_op_plan;

typedef struct graph_numerics {
    arena arena;           /* owns the arrays below */
    int32_t nops;          /* the graph's op count */
    graph_op_plan *op;     /* per graph op id */
} graph_numerics;

void graph_numerics_init(graph_numerics *n, const graph *g);
void graph_numerics_free(graph_numerics *n);
/* The JSON text above (malloc'd), deterministic: ops in graph order. */
char *graph_numerics_json(const graph *g, const graph_numerics *n);
/* Reads the "numerics" member of JSON object text (a package's metadata)
 * for g. Every entry must name an op of g of its kind and fit its shapes, and
 * every matmul, reduce_sum and global_norm_clip of g must have one; `what`
 * names the source in errors. */
int graph_numerics_parse(const graph *g, const char *meta_json, const char *what, graph_numerics *out, diag *d);

/* ---- ref.c: the FP32 reference interpreter ----------------------------- */

typedef struct ref_options {
    bool strip_precision;   /* casts become identities, params stay f32 */
    const graph_numerics *plan; /* non-NULL: the plan-exact emulated reference,
                               the device's arithmetic in the plan's order,
                               every result rounded to its dtype (emulate.c) */
    bool quiet;             /* no progress line */
    bool blas_one_thread;   /* BLAS on this run's thread alone, for as long as it runs: others share
                               the cores (BLAS's own threads would wait for them spinning) */
    const char *what;       /* the progress line's name (NULL: "reference") */
    /* Called with every op result as it is computed (repeat results after
     * their loop); iters[0..depth) are the iteration indices of the
     * enclosing repeats, outermost first. A nonzero return stops the run
     * (ref_run then returns 1 with no diagnostic). */
    int (*on_value)(void *ctx, int32_t value, const int64_t *iters, int depth, const float *data, int64_t n);
    void *on_value_ctx;
} ref_options;

/* Runs g. inputs[k] holds the data of the k-th input (numel of its type,
 * values already of its dtype); outputs[j] receives a malloc'd buffer for the
 * j-th output value (program order of output ops). */
int ref_run(const graph *g, const ref_options *o, float *const *inputs, float **outputs, diag *d);

/* The inputs and outputs of g in program order (value ids). */
int32_t graph_inputs(const graph *g, int32_t *ids, int32_t cap);
int32_t graph_outputs(const graph *g, int32_t *ids, int32_t cap);

/* ---- rewrite.c: the rewriter the graph passes share ----------------------
 *
 * A pass copies its graph op by op into a new one (graph_rw_block from the
 * top block): each op as it is, unless hooks.op emits what stands for it
 * (or nothing) and returns true; hooks.after may emit more after position
 * i of a block. vmap maps each value of g to the new graph's. */
typedef struct graph_rw graph_rw;
typedef struct graph_rw_hooks {
    bool (*op)(graph_rw *rw, int32_t id);                           /* optional */
    void (*after)(graph_rw *rw, const graph_block *b, int32_t i);   /* optional */
} graph_rw_hooks;
struct graph_rw {
    const graph *g;        /* the source, which must outlive out */
    graph *out;            /* the graph being built */
    diag *d;
    int32_t *vmap;         /* value of g -> value of out, -1 until made */
    int err;               /* a failure, already in d */
    graph_rw_hooks hooks;
    void *ctx;             /* the pass's own state */
};
void graph_rw_init(graph_rw *rw, const graph *g, const graph_rw_hooks *hooks, void *ctx, diag *d);
void graph_rw_block(graph_rw *rw, const graph_block *b);
/* Op id of g copied as it is (a repeat with its body, through the hooks). */
void graph_rw_copy(graph_rw *rw, int32_t id);
/* Op `to` of out takes the comments and source place of op `from` of g. */
void graph_rw_trivia(graph_rw *rw, int32_t from, int32_t to);
/* Compute op `op` of out finished with the results (names, types) of g's op
 * `like`, which map to them; its first result, or -1. */
int32_t graph_rw_finish(graph_rw *rw, int32_t op, int32_t like);
/* The same with one result named `name` of type t. */
int32_t graph_rw_finish_as(graph_rw *rw, int32_t op, const char *name, const graph_type *t);
/* Closes repeat `op` of out, begun for g's repeat id and its body emitted:
 * the yield's values, the results' names, the comments. */
void graph_rw_end_repeat(graph_rw *rw, int32_t id, int32_t op);
/* The new graph, verified, or NULL (d says why); the rewriter is spent. */
graph *graph_rw_finish_graph(graph_rw *rw);

/* ---- stages.c: a model cut into pipeline stages (docs/chips.md) ---------
 *
 * Stage s runs iterations [first[s], first[s] + count[s]) of the model's one
 * top-level repeat, stage 0 also what precedes it, the last stage what
 * follows; the stages split the iterations as counts says (NULL: as evenly
 * as they go, the first ones taking one more). Every stage but the last outputs the carried values,
 * named "<repeat result>.after<k>", and the next takes them as inputs of the
 * same names. Stacked parameters become windows of the same values. The
 * stage graphs share g's imported data: g must outlive them. */
typedef struct graph_stages {
    int32_t n;
    graph **g;
    int64_t *first, *count;
} graph_stages;
int graph_split_stages(const graph *g, int32_t nstages, const int64_t *counts, graph_stages *out, diag *d);
/* g for micro-batches of `micro`: every input and output is split along its
 * first axis, whose common length is the batch (*batch); every value as
 * long along its first axis becomes `micro` long. Refused, saying which op,
 * where an op mixes batch elements (sums, normalises or contracts over
 * them, moves or cuts the batch axis, a training step) or a shape does not
 * follow the batch. g must outlive the result (imported data is shared). */
graph *graph_micro_batch(const graph *g, int64_t micro, int64_t *batch, diag *d);

/* A training step over n data-parallel replicas (docs/chips.md): each runs
 * the step up to its gradients on batch / n samples (its weight-gradient
 * contractions and batch sums are partial: sums over its own samples; in
 * `micro` pieces, each adding its sums to the earlier pieces' (inputs
 * "<v>.acc_in", outputs "<v>.acc": gradient accumulation, P4)), and
 * owner o sums rows graph_owner_rows(rows, n, o) of every gradient over the
 * replicas, in replica order, and runs the optimizers on those rows of the
 * weights and states. Owner 0 also sums the outputs that are sums over the
 * batch (a loss). An owner's input "<v>.partials" stacks, replica after
 * replica, rows [first, first + rows) of the replicas' output v (rows -1:
 * all of it): its feeds. Refused, saying which op, where a value mixes the
 * replicas' samples other than as such a sum. g must outlive the result. */
typedef struct graph_feed {
    char *input, *from;
    char *updates;          /* the weight whose rows the sum updates; NULL: a sum the model outputs */
    int64_t first, rows;
} graph_feed;
typedef struct graph_replicas {
    int32_t n;
    int64_t batch;
    int64_t micro;          /* micro-batches per replica: the replica runs on batch / (n micro) samples at a time */
    graph *replica;
    graph **owner;          /* n */
    graph_feed **feed;      /* per owner */
    int32_t *nfeed;
    int64_t *gather_bytes;  /* per owner: its rows of the new weights, which every replica needs next */
} graph_replicas;
int graph_split_replicas(const graph *g, int32_t n, int64_t micro, graph_replicas *out, diag *d);
void graph_replicas_free(graph_replicas *r);
/* Owner o's rows of a weight `rows` long, over n owners: as even as they go. */
void graph_owner_rows(int64_t rows, int32_t n, int32_t o, int64_t *first, int64_t *count);
/* Whether g has an optimizer step (sgd, adamw, or a fused one). */
bool graph_is_training(const graph *g);
void graph_stages_free(graph_stages *s);

/* ---- siblings.c: matmuls that read one operand become one ----------------
 *
 *   y_i = x · W_i (+ b_i)   ──►   y = x · [W_1 … W_n] (+ [b_1 … b_n]),  y_i = y[..., o_i : o_i + n_i]
 *
 * when every W_i is a parameter (or a repeat's slice of a stacked one) that
 * nothing else reads, all of one dtype, scale and K, untransposed, and the
 * matmuls agree in attributes (the biases: when every member has one of
 * one kind). A graph pass before the epilogue fusion; docs/lowering.md. */
typedef struct sib_group {
    int32_t n;             /* members, >= 2 */
    int32_t *mm;           /* their matmul ops, program order */
    int32_t *add;          /* their bias adds (joined too), or NULL */
    char *name;            /* the fused matmul's name, once applied */
} sib_group;

typedef struct sib_plan {
    sib_group *v;          /* malloc'd */
    int32_t n;
} sib_plan;

void graph_siblings_analyze(const graph *g, sib_plan *out);
void graph_siblings_free(sib_plan *p);
/* A new graph: g with every group of p one matmul (and add) and a slice per
 * member named as its result was; records each group's fused name. */
graph *graph_siblings_apply(const graph *g, sib_plan *p, diag *d);
/* The group whose fused matmul is called name, or -1. */
int32_t graph_siblings_group(const sib_plan *p, const char *name);

/* ---- fuse.c: the optimizer epilogue fusion (docs/epilogue.md) ------------
 *
 * A graph pass, run before expansion: a weight-gradient matmul and the
 * optimizer that is its only use become one fused op (matmul_sgd,
 * matmul_adamw) where that is legal; everything else keeps its ops and the
 * analysis says which rule refused it. */

/* How much of a 2-D product one element of its consumer reads, or one tile
 * of its producer completes: a lattice (row and column are incomparable;
 * global is beyond the tensor). */
typedef enum { FUSE_ELEMENT, FUSE_ROW, FUSE_COLUMN, FUSE_BLOCK, FUSE_TENSOR, FUSE_GLOBAL, FUSE_LOCALITY_COUNT } fuse_locality;
extern const char *const fuse_locality_names[FUSE_LOCALITY_COUNT];
/* need <= have in the lattice: the consumer fits in the producer's tile. */
bool fuse_locality_fits(fuse_locality need, fuse_locality have);
/* What a tile of a GEMM on an R x C grid (rows, columns of the product) completes. */
fuse_locality fuse_gemm_partition(int64_t R, int64_t C);

/* The verdicts: OK (legal), DISABLED (legal, fusion off), and the refusals. */
#define FUSE_RULES(X)                                                                              \
    X(OK, ok) X(DISABLED, disabled) X(PRODUCER, producer) X(TIED, tied) X(MULTI_USE, multi_use)   \
    X(ESCAPES, escapes) X(CLIP, clip) X(CLIP_SCALE, clip_scale) X(ROUTED, routed)                  \
    X(LOCALITY, locality) X(SHAPE, shape) X(SCOPE, scope) X(OPERAND, operand)

typedef enum {
#define X(id, name) FUSE_##id,
    FUSE_RULES(X)
#undef X
    FUSE_RULE_COUNT
} fuse_rule;
extern const char *const fuse_rule_names[FUSE_RULE_COUNT];

typedef struct fuse_candidate {
    int32_t consumer;      /* graph op: the optimizer (sgd, adamw), or a fused op the model already has */
    int32_t gradient;      /* graph value: the gradient operand it reads; -1 for a given fused op */
    int32_t producer;      /* graph op that makes it (under a clip: what makes the clipped value), -1: not computed */
    int32_t gemm;          /* graph op: the matmul whose product that is (through a clip or a sum), -1 if none */
    fuse_rule rule;        /* OK: legal */
    fuse_locality need;    /* what one element of the consumer reads of the product */
    fuse_locality have;    /* what a tile of the producer completes (before the grid is chosen: a block) */
    bool fused;            /* chosen: graph_fuse_apply rewrites it (or the model has it fused already) */
    bool given;            /* the model's own fused op: nothing to rewrite */
    char why[512];         /* the reason, naming values and ops */
} fuse_candidate;

typedef struct fuse_plan {
    fuse_candidate *c;     /* malloc'd, in program order of the consumers */
    int32_t n;
} fuse_plan;

/* The single entry point of the decision: every optimizer op of g with the
 * producer of its gradient, legal or refused by the first rule that fails
 * (fail closed). enable marks every legal candidate fused (false: DISABLED);
 * a caller (the plan search) may clear `fused` before graph_fuse_apply. */
void graph_fuse_analyze(const graph *g, bool enable, fuse_plan *out);
void graph_fuse_free(fuse_plan *p);
int32_t graph_fuse_count(const fuse_plan *p);  /* candidates this compile fuses (rewrites) */
int32_t graph_fuse_fused(const fuse_plan *p);  /* candidates fused, the model's own fused ops included */
/* A new graph: g with every fused candidate of p as one fused op where its
 * matmul stood. g must outlive it. NULL with d set on failure. */
graph *graph_fuse_apply(const graph *g, const fuse_plan *p, diag *d);


#endif
