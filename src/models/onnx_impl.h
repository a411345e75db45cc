/* onnx_impl.h: what the files of the ONNX importer share. Private to
 * src/models; the public entry points are in models.h.
 *
 *   onnx.c          the file: maps, wire scan, protobuf-c, tensors,
 *                   initializers, inputs, the node walk, outputs
 *   onnx_patterns.c decomposed GeLU and layer norms found before import
 *   onnx_const.c    constant folding: nodes computed at import (shape chains)
 *   onnx_ops.c      the op table and one importer per op: f32 graph ops
 *   onnx_emit.c     graph building: names, op emitters, constants as params
 *
 * Per node, onnx.c looks the op type up in ox_ops once; the row's constant
 * folder runs when its inputs allow (fold_const), else its importer. */
#ifndef TESSEL_MODELS_ONNX_IMPL_H
#define TESSEL_MODELS_ONNX_IMPL_H

#include "models.h"

#include <string.h>

#include "onnx.pb-c.h"

/* ---- the op table ------------------------------------------------------------ */

/* When a row's constant folder runs (fold_const checks, then calls it). */
typedef enum {
    CF_NONE,    /* no folder */
    CF_ALWAYS,  /* whatever its inputs: Shape reads shapes, Constant has none */
    CF_CONST,   /* every named input constant (the folder checks how many) */
    CF_FIRST,   /* every named input constant and the first one present */
} const_fold_when;

/* How many outputs a node of the op may have. */
typedef enum {
    OUT_ONE,    /* exactly one */
    OUT_ANY,    /* more, unused (Dropout's mask) or set by the importer (Split) */
} ox_outputs;

/* Every ONNX op type tessel knows, once; a type not here is "op is not
 * supported". A row with a folder and no importer imports only constants.
 *
 *   op type             folds when  constant folder                importer           outputs */
#define OX_OPS(X)                                                                                 \
    X(Abs,                CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Add,                CF_CONST,  const_fold_binary,             import_binary,     OUT_ONE) \
    X(Cast,               CF_FIRST,  const_fold_cast,               import_cast,       OUT_ONE) \
    X(Clip,               CF_NONE,   NULL,                          import_clip,       OUT_ONE) \
    X(Concat,             CF_FIRST,  const_fold_concat,             import_concat,     OUT_ONE) \
    X(Constant,           CF_ALWAYS, const_fold_constant,           NULL,              OUT_ONE) \
    X(ConstantOfShape,    CF_FIRST,  const_fold_constant_of_shape,  NULL,              OUT_ONE) \
    X(AveragePool,        CF_NONE,   NULL,                          ox_import_pool,    OUT_ONE) \
    X(BatchNormalization, CF_NONE,   NULL,                          ox_import_batch_norm, OUT_ONE) \
    X(Conv,               CF_NONE,   NULL,                          ox_import_conv,    OUT_ONE) \
    X(Div,                CF_CONST,  const_fold_binary,             import_div,        OUT_ONE) \
    X(Dropout,            CF_NONE,   NULL,                          import_identity,   OUT_ANY) \
    X(Equal,              CF_CONST,  const_fold_binary,             NULL,              OUT_ONE) \
    X(Erf,                CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Exp,                CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Expand,             CF_FIRST,  const_fold_expand,             import_expand,     OUT_ONE) \
    X(Flatten,            CF_FIRST,  const_fold_reshape,            import_reshape,    OUT_ONE) \
    X(Gather,             CF_FIRST,  const_fold_gather,             import_gather,     OUT_ONE) \
    X(Gemm,               CF_NONE,   NULL,                          import_gemm,       OUT_ONE) \
    X(GlobalAveragePool,  CF_NONE,   NULL,                          import_reduce,     OUT_ONE) \
    X(HardSigmoid,        CF_NONE,   NULL,                          import_hard_sigmoid, OUT_ONE) \
    X(HardSwish,          CF_NONE,   NULL,                          import_hard_sigmoid, OUT_ONE) \
    X(Identity,           CF_FIRST,  const_fold_identity,           import_identity,   OUT_ONE) \
    X(LayerNormalization, CF_NONE,   NULL,                          import_layer_norm, OUT_ANY) \
    X(Log,                CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(MatMul,             CF_NONE,   NULL,                          import_matmul,     OUT_ONE) \
    X(Max,                CF_CONST,  const_fold_binary,             import_max_min,    OUT_ONE) \
    X(MaxPool,            CF_NONE,   NULL,                          ox_import_pool,    OUT_ANY) \
    X(Min,                CF_CONST,  const_fold_binary,             import_max_min,    OUT_ONE) \
    X(Mod,                CF_CONST,  const_fold_binary,             NULL,              OUT_ONE) \
    X(Mul,                CF_CONST,  const_fold_binary,             import_binary,     OUT_ONE) \
    X(Neg,                CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Not,                CF_FIRST,  const_fold_not,                NULL,              OUT_ONE) \
    X(Pad,                CF_NONE,   NULL,                          import_pad,        OUT_ONE) \
    X(Pow,                CF_CONST,  const_fold_binary,             import_pow,        OUT_ONE) \
    X(Range,              CF_CONST,  const_fold_range,              NULL,              OUT_ONE) \
    X(Reciprocal,         CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Relu,               CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(ReduceMean,         CF_NONE,   NULL,                          import_reduce,     OUT_ONE) \
    X(ReduceSum,          CF_NONE,   NULL,                          import_reduce,     OUT_ONE) \
    X(Reshape,            CF_FIRST,  const_fold_reshape,            import_reshape,    OUT_ONE) \
    X(ScatterND,          CF_CONST,  const_fold_scatter_nd,         NULL,              OUT_ONE) \
    X(Shape,              CF_ALWAYS, const_fold_shape,              NULL,              OUT_ONE) \
    X(Slice,              CF_FIRST,  const_fold_slice,              import_slice,      OUT_ONE) \
    X(Softmax,            CF_NONE,   NULL,                          import_softmax,    OUT_ONE) \
    X(Softplus,           CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Split,              CF_NONE,   NULL,                          import_split,      OUT_ANY) \
    X(Sigmoid,            CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Sqrt,               CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Squeeze,            CF_FIRST,  const_fold_reshape,            import_reshape,    OUT_ONE) \
    X(Sub,                CF_CONST,  const_fold_binary,             import_binary,     OUT_ONE) \
    X(Tanh,               CF_FIRST,  const_fold_unary,              import_unary,      OUT_ONE) \
    X(Transpose,          CF_FIRST,  const_fold_transpose,          import_transpose,  OUT_ONE) \
    X(Unsqueeze,          CF_FIRST,  const_fold_reshape,            import_reshape,    OUT_ONE) \
    X(Where,              CF_FIRST,  const_fold_where,              NULL,              OUT_ONE)

/* Row ids (OX_Add, ...): what a function shared by several rows switches on. */
typedef enum {
#define X(name, when, fold, import, outs) OX_##name,
    OX_OPS(X)
#undef X
    OX_COUNT
} ox_op_id;

typedef struct imp imp;

/* Constant folder: 1 folded (outputs set), 0 left to the importer, -1 failed. */
typedef int const_fold_fn(imp *im, const Onnx__NodeProto *n, ox_op_id op);
/* Importer: the node's graph value, -2 when it set its outputs itself, -1 failed. */
typedef int32_t ox_import_fn(imp *im, const Onnx__NodeProto *n, ox_op_id op);
/* onnx_conv.c: the window ops (Conv, MaxPool, AveragePool) and BatchNormalization. */
ox_import_fn ox_import_conv, ox_import_pool, ox_import_batch_norm;

/* A plain unary op: its graph op and the double function constants fold with. */
typedef struct ox_unary {
    const char *name;      /* the graph op's (num.h's NUM_UNARY_OPS) */
    graph_op_kind kind;
    double (*f64)(double);
} ox_unary;
/* The unary op row op (a row importing with import_unary) stands for. */
const ox_unary *ox_unary_of(ox_op_id op);

typedef struct ox_op {
    ox_op_id id;
    const char *name;       /* the ONNX op type */
    const_fold_when when;
    const_fold_fn *fold;    /* NULL: never computed at import */
    ox_import_fn *import;   /* NULL: only constants of it are supported */
    ox_outputs outs;
} ox_op;

/* ---- importer state ---------------------------------------------------------- */

/* What data() parameters point into: maps and buffers the graph keeps. */
typedef struct keep_item {
    void *p;
    size_t bytes;
    bool mapped;  /* munmap, else free */
} keep_item;

struct models_keep {
    keep_item *v;
    int32_t n, cap;
};

/* Bytes lying in a memory map (initializer raw_data, external files). */
typedef struct raw_ref {
    const uint8_t *p;  /* into the map */
    size_t bytes;
    bool set;
} raw_ref;

enum { CT_MAX_RANK = 8 };

/* Folded constants are small (shapes, scalars, a transposed weight): larger
 * ones are refused rather than allocated. */
#define CT_MAX_FOLD (1ll << 26)

/* A tensor known at import: weights, Constant nodes, folded shape chains. */
typedef struct ct {
    bool is_int;                /* i64/i32/bool: shape arithmetic */
    int rank;
    int64_t dim[CT_MAX_RANK];
    int64_t n;                  /* elements */
    double *v;                  /* values, or NULL when only raw is set */
    const uint8_t *raw;         /* little-endian f32 in place (weights) */
} ct;

/* What an ONNX value name stands for. */
typedef struct oval {
    const char *name;
    bool is_const;
    ct c;
    int32_t gv;                 /* graph value, or -1 */
    /* A value still in a shared-weight GEMM's flattened rows (gv -1): the
     * graph value of its rows, and the shape and name the reshape back
     * gives it when an op first needs it as it is (ox_gval). */
    int32_t rows;
    int back_rank;
    int64_t back_dim[GRAPH_MAX_RANK];
    const char *back_name;
} oval;

/* Whether o is a run-time value that waits as flattened rows (oval.rows). */
static inline bool ox_waits_as_rows(const oval *o) { return o && !o->is_const && o->gv < 0 && o->rows >= 0; }

typedef enum { RZ_NONE, RZ_ABSORBED, RZ_GELU_ERF, RZ_GELU_TANH, RZ_LAYER_NORM } raise_kind;

/* A node that ends a decomposed pattern, or lies inside one (absorbed). */
typedef struct raised {
    raise_kind kind;
    const char *x, *gamma, *beta;  /* ONNX value names; gamma, beta may be NULL */
    const char *mean_node;         /* layer norm: the ReduceMean whose axes we check */
    double eps;
    const char *scope;             /* common node-name scope, for the op name */
} raised;

struct imp {
    const char *path, *dir;
    graph *g;
    models_keep *keep;
    arena a;                       /* scratch for the import */
    diag *d;
    int err;
    Onnx__ModelProto *m;
    Onnx__GraphProto *gp;
    int64_t opset;
    VEC(oval) vals;
    strmap names;                  /* ONNX value name -> vals index */
    strmap producer;               /* ONNX value name -> node index */
    strmap uses;                   /* ONNX value name -> consumer count */
    strmap outputs;                /* graph output names */
    strmap ext;                    /* external data location -> index in ext_maps */
    VEC(raw_ref) ext_maps;         /* each external file mapped once */
    raised *rz;                    /* per node */
    const Onnx__NodeProto *cur;    /* node being imported, for messages */
};

/* ---- small helpers ------------------------------------------------------------- */

/* A double as an integer, saturated (out-of-range conversions are undefined in C). */
static inline int64_t to_i64(double v) {
    if (!(v == v)) return 0;
    return v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
}

static inline double ct_at(const ct *c, int64_t i) {
    if (c->v) return c->v[i];
    float f;
    memcpy(&f, c->raw + 4 * i, 4);
    return f;
}

static inline ct ct_reshaped(ct c, int rank, const int64_t *dim) {
    c.rank = rank;
    memcpy(c.dim, dim, sizeof(int64_t) * (size_t)rank);
    return c;
}

static inline const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
    return NULL;
}

static inline int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_i ? a->i : def;
}

static inline double attr_float(const Onnx__NodeProto *n, const char *name, double def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_f ? a->f : def;
}

/* Integer list attribute; *count = -1 when absent. */
static inline const int64_t *attr_ints(const Onnx__NodeProto *n, const char *name, int *count) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a) {
        *count = -1;
        return NULL;
    }
    *count = (int)a->n_ints;
    return a->ints;
}

static inline const char *in_name(const Onnx__NodeProto *n, size_t i) {
    return i < n->n_input && n->input[i] && n->input[i][0] ? n->input[i] : NULL;
}

static inline bool is_op(const Onnx__NodeProto *n, const char *op) {
    return n->op_type && strcmp(n->op_type, op) == 0 && (!n->domain || !n->domain[0] || strcmp(n->domain, "ai.onnx") == 0);
}

/* ---- onnx.c: errors, values, tensors ----------------------------------------- */

/* A user error, located at the node being imported; the first one wins. */
int ox_fail(imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *ox_keep_add(models_keep *k, void *p, size_t bytes, bool mapped);
/* A TensorProto's data as a constant (raw is its raw_data in the map, or NULL). */
int ox_tensor_ct(imp *im, const Onnx__TensorProto *t, const raw_ref *raw, ct *out);
oval *ox_val_get(imp *im, const char *name);
void ox_set_const(imp *im, const char *name, ct c);
void ox_set_graph(imp *im, const char *name, int32_t v);
/* name is rows reshaped to (rank, dim), made when first used (ox_gval). */
void ox_set_rows(imp *im, const char *name, int32_t rows, int rank, const int64_t *dim, const char *back_name);
/* The constant behind an ONNX value name, or NULL. */
oval *ox_cval(imp *im, const char *name);
/* Whether name is a one-element constant, and its value. */
bool ox_scalar_const(imp *im, const char *name, double *v);
/* Shape of an ONNX value, constant or not. */
int ox_shape_of(imp *im, const char *name, int *rank, int64_t *dim);
/* An integer list from a constant input (axes, shapes, starts). */
int ox_const_ints(imp *im, const char *name, int64_t *out, int cap, int *n);
int ox_norm_axis(imp *im, int64_t axis, int rank, int64_t *out);

/* ---- onnx_patterns.c ------------------------------------------------------------- */

/* Marks decomposed GeLU and layer norms in im->rz (constants must be known). */
void ox_find_patterns(imp *im);

/* ---- onnx_const.c: constant folding --------------------------------------------- */

/* Runs row's folder on n when its inputs allow: 1 folded, 0 not, -1 failed. */
int fold_const(imp *im, const ox_op *row, const Onnx__NodeProto *n);
const_fold_fn const_fold_binary, const_fold_cast, const_fold_concat, const_fold_constant,
    const_fold_constant_of_shape, const_fold_expand, const_fold_gather, const_fold_identity, const_fold_range,
    const_fold_reshape, const_fold_shape, const_fold_slice, const_fold_transpose, const_fold_unary,
    const_fold_where, const_fold_not, const_fold_scatter_nd;
/* Shape rules the importers share with the folders. */
ct ct_new(imp *im, bool is_int, int rank, const int64_t *dim);
int ct_transpose(imp *im, ct *x, const int64_t *perm, ct *out);
int ox_bcast_shape(imp *im, int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out);
int ox_slice_bounds(imp *im, const Onnx__NodeProto *n, int rank, const int64_t *dim, int64_t *start, int64_t *end,
                    int64_t *step);
/* The result shape of Reshape, Flatten, Squeeze or Unsqueeze node n of op. */
int ox_reshape_target(imp *im, const Onnx__NodeProto *n, ox_op_id op, int rank, const int64_t *dim, int *orank,
                      int64_t *odim);

/* ---- onnx_ops.c: the table and the importers --------------------------------------- */

extern const ox_op ox_ops[OX_COUNT];
/* The row of an op type, or NULL. */
const ox_op *ox_op_find(const char *op_type);
/* Imports n through row (NULL: not supported): its value, -2, or -1. */
int32_t ox_import_node(imp *im, const ox_op *row, const Onnx__NodeProto *n);
/* Imports the pattern ending at the current node. */
int32_t ox_import_raised(imp *im, const raised *rz);

/* ---- onnx_emit.c: graph building (f32) -------------------------------------------- */

/* A .tsl value name from an ONNX name, unique in the graph. */
const char *ox_gname(imp *im, const char *onnx_name, const char *suffix);
/* The name of an op the current node makes (suffix: a helper op). */
const char *ox_node_name(imp *im, const char *suffix);
const graph_type *ox_gtype(imp *im, int32_t v);
int32_t ox_finish(imp *im, int32_t op, const char *name, const graph_type *declared);
int32_t ox_emit1(imp *im, graph_op_kind k, int32_t x, const char *name);
int32_t ox_emit2(imp *im, graph_op_kind k, int32_t x, int32_t y, const char *name);
int32_t ox_emit_matmul(imp *im, int32_t a, int32_t b, bool tb, const char *name);
/* The same, but a flattened GEMM's rows are returned as they are, with the
 * shape of the product in (*rank, back); *rank 0: the product itself. */
int32_t ox_emit_matmul_rows(imp *im, int32_t a, int32_t b, bool tb, const char *name, int *rank, int64_t *back);
int32_t ox_emit_scale(imp *im, int32_t x, double by, const char *name);
int32_t ox_emit_reshape(imp *im, int32_t x, int rank, const int64_t *dim, const char *name);
int32_t ox_emit_transpose(imp *im, int32_t x, const int64_t *perm, int rank, const char *name);
int32_t ox_emit_slice(imp *im, int32_t x, const int64_t *start, const int64_t *end, const char *name);
/* x padded by lo and hi elements per axis (lo NULL: none) with value. */
int32_t ox_emit_pad(imp *im, int32_t x, const int64_t *lo, const int64_t *hi, double value, const char *name);
int32_t ox_emit_concat(imp *im, const int32_t *xs, int n, int64_t axis, const char *name);
/* A w-long f32 parameter filled with v (a layer norm's default scale or bias). */
int32_t ox_emit_fill(imp *im, const char *name, int64_t w, float v);
/* A constant as a graph value: a data() parameter, made once per ONNX value. */
int32_t ox_const_value(imp *im, oval *o);
/* The graph value behind an ONNX value name (constants become parameters). */
int32_t ox_gval(imp *im, const char *name);

#endif
