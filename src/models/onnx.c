/* onnx.c: ONNX models exported by PyTorch (torch.onnx.export, opsets 13 to
 * 17), imported as flat f32 graphs that fold.c then raises and types.
 *
 *   file ─mmap─► wire scan: initializer raw_data left in the map, the rest
 *                copied into a small stripped message
 *        ─protobuf-c─► ModelProto (no weight bytes in it)
 *        ─raise─►      decomposed GeLU / LayerNorm patterns marked on nodes
 *        ─import─►     per node: constants folded (shape chains), or graph ops
 *                      built in f32 with stable names from the node names
 *
 * Weights never pass through protobuf-c, which copies every bytes field:
 * data() parameters point into the memory maps, which the graph keeps. */
#define _POSIX_C_SOURCE 200809L
#include "models.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx.pb-c.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data() parameters are little-endian f32 read in place: a big-endian host needs byte swaps"
#endif

/* ---- keep: what data() parameters point into ------------------------------ */

typedef struct keep_item {
    void *p;
    size_t bytes;
    bool mapped;  /* munmap, else free */
} keep_item;

typedef struct models_keep {
    keep_item *v;
    int32_t n, cap;
} models_keep;

static void *keep_add(models_keep *k, void *p, size_t bytes, bool mapped) {
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 16;
        k->v = xrealloc(k->v, sizeof(keep_item) * (size_t)k->cap);
    }
    k->v[k->n++] = (keep_item){p, bytes, mapped};
    return p;
}

void models_keep_free(void *kp) {
    models_keep *k = kp;
    if (!k) return;
    for (int32_t i = 0; i < k->n; i++) {
        if (k->v[i].mapped) munmap(k->v[i].p, k->v[i].bytes);
        else free(k->v[i].p);
    }
    free(k->v);
    free(k);
}

/* Maps path read-only; an empty file maps to a static empty buffer. */
static int map_file(const char *path, models_keep *k, const uint8_t **data, size_t *len, diag *d) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return diag_fail(d, "%s: error: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return diag_fail(d, "%s: error: not a regular file", path);
    }
    *len = (size_t)sb.st_size;
    if (*len == 0) {
        close(fd);
        *data = (const uint8_t *)"";
        return 0;
    }
    void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return diag_fail(d, "%s: error: cannot map: %s", path, strerror(errno));
    keep_add(k, p, *len, true);
    *data = p;
    return 0;
}

/* ---- wire scan: strip initializer raw_data --------------------------------------- */

typedef struct bytebuf {
    uint8_t *p;
    size_t n, cap;
} bytebuf;

static void bb_put(bytebuf *b, const void *src, size_t n) {
    if (n == 0) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_varint(bytebuf *b, uint64_t v) {
    uint8_t t[10];
    int n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    bb_put(b, t, (size_t)n);
}

typedef struct raw_ref {
    const uint8_t *p;  /* into the map */
    size_t bytes;
    bool set;
} raw_ref;

typedef struct scan {
    const char *path;
    VEC(raw_ref) raws;   /* per initializer, in file order */
    arena *a;
    diag *d;
} scan;

static int rd_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int s = 0; s < 64; s += 7) {
        if (*p >= end) return -1;
        uint8_t c = *(*p)++;
        r |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* One field: key, and for length-delimited fields the payload bounds. */
typedef struct wfield {
    uint32_t num, wt;
    const uint8_t *start, *end;  /* whole field including key */
    const uint8_t *pay;          /* length-delimited payload */
    size_t len;
} wfield;

static int next_field(const uint8_t **p, const uint8_t *end, wfield *f) {
    f->start = *p;
    uint64_t key, v;
    if (rd_varint(p, end, &key)) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    if (f->num == 0) return -1;
    switch (f->wt) {
    case 0: if (rd_varint(p, end, &v)) return -1; break;
    case 1: if (end - *p < 8) return -1; *p += 8; break;
    case 5: if (end - *p < 4) return -1; *p += 4; break;
    case 2:
        if (rd_varint(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
        f->pay = *p;
        f->len = (size_t)v;
        *p += v;
        break;
    default: return -1;
    }
    f->end = *p;
    return 0;
}

static int corrupt(scan *s) {
    return diag_fail(s->d, "%s: error: truncated or corrupt ONNX file (bad protobuf encoding)", s->path);
}

/* TensorProto: everything but raw_data (field 9), which is recorded. */
static int strip_tensor(scan *s, const uint8_t *p, const uint8_t *end, bytebuf *out) {
    raw_ref r = {0};
    while (p < end) {
        wfield f;
        if (next_field(&p, end, &f)) return corrupt(s);
        if (f.num == 9 && f.wt == 2) r = (raw_ref){f.pay, f.len, true};
        else bb_put(out, f.start, (size_t)(f.end - f.start));
    }
    vec_push(s->a, &s->raws, r);
    return 0;
}

/* A message copied field by field, each occurrence of length-delimited
 * field `num` replaced by what `strip` makes of it. */
typedef int strip_fn(scan *s, const uint8_t *p, const uint8_t *end, bytebuf *out);

static int strip_fields(scan *s, const uint8_t *p, const uint8_t *end, uint32_t num, strip_fn *strip, bytebuf *out) {
    while (p < end) {
        wfield f;
        if (next_field(&p, end, &f)) return corrupt(s);
        if (f.num == num && f.wt == 2) {
            bytebuf t = {0};
            int rc = strip(s, f.pay, f.pay + f.len, &t);
            if (rc == 0) {
                bb_varint(out, ((uint64_t)num << 3) | 2);
                bb_varint(out, t.n);
                bb_put(out, t.p, t.n);
            }
            free(t.p);
            if (rc) return -1;
        } else {
            bb_put(out, f.start, (size_t)(f.end - f.start));
        }
    }
    return 0;
}

/* GraphProto: initializers (field 5) stripped of raw_data. */
static int strip_graph(scan *s, const uint8_t *p, const uint8_t *end, bytebuf *out) {
    return strip_fields(s, p, end, 5, strip_tensor, out);
}

/* ModelProto: the graph (field 7) stripped. */
static int strip_model(scan *s, const uint8_t *p, size_t len, bytebuf *out) {
    return strip_fields(s, p, p + len, 7, strip_graph, out);
}

/* ---- constants --------------------------------------------------------------- */

enum { CT_MAX_RANK = 8 };

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
} oval;

typedef enum { RZ_NONE, RZ_ABSORBED, RZ_GELU_ERF, RZ_GELU_TANH, RZ_LAYER_NORM } raise_kind;

typedef struct raised {
    raise_kind kind;
    const char *x, *gamma, *beta;  /* ONNX value names; gamma, beta may be NULL */
    const char *mean_node;         /* layer norm: the ReduceMean whose axes we check */
    double eps;
    const char *scope;             /* common node-name scope, for the op name */
} raised;

typedef struct imp {
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
    raw_ref *raws;
    int32_t nraws;
    const Onnx__NodeProto *cur;    /* node being imported, for messages */
} imp;

static int fail(imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(imp *im, const char *fmt, ...) {
    if (im->err) return -1;
    im->err = 1;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (im->cur)
        return diag_fail(im->d, "%s: error: node '%s' (%s, opset %lld): %s", im->path,
                         im->cur->name && im->cur->name[0] ? im->cur->name : "(unnamed)", im->cur->op_type,
                         (long long)im->opset, msg);
    return diag_fail(im->d, "%s: error: %s", im->path, msg);
}

/* A double as an integer, saturated (out-of-range conversions are undefined in C). */
static int64_t to_i64(double v) {
    if (!(v == v)) return 0;
    return v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
}

static double ct_at(const ct *c, int64_t i) {
    if (c->v) return c->v[i];
    float f;
    memcpy(&f, c->raw + 4 * i, 4);
    return f;
}

/* Folded constants are small (shapes, scalars, a transposed weight): larger
 * ones are refused rather than allocated. */
#define CT_MAX_FOLD (1ll << 26)

static ct ct_new(imp *im, bool is_int, int rank, const int64_t *dim) {
    ct c = {.is_int = is_int, .rank = rank, .n = 1};
    for (int i = 0; i < rank; i++) {
        c.dim[i] = dim[i];
        if (dim[i] < 0 || (dim[i] && c.n > CT_MAX_FOLD / dim[i])) {
            fail(im, "a constant computed at import would have more than 2^26 elements");
            c.n = 0;
            break;
        }
        c.n *= dim[i];
    }
    if (c.n > CT_MAX_FOLD) {
        fail(im, "a constant computed at import would have more than 2^26 elements");
        c.n = 0;
    }
    if (c.n == 0) c.rank = rank; /* callers write nothing; im->err stops the import */
    c.v = arena_alloc(&im->a, sizeof(double) * (size_t)(c.n ? c.n : 1));
    return c;
}

static oval *val_get(imp *im, const char *name) {
    int32_t k;
    return strmap_get(&im->names, name, &k) ? &im->vals.v[k] : NULL;
}

static oval *val_put(imp *im, const char *name) {
    int32_t k;
    if (strmap_get(&im->names, name, &k)) return &im->vals.v[k];
    const char *key = arena_strdup(&im->a, name);
    vec_push(&im->a, &im->vals, ((oval){.name = key, .gv = -1}));
    strmap_put(&im->names, key, im->vals.n - 1);
    return &im->vals.v[im->vals.n - 1];
}

static void set_const(imp *im, const char *name, ct c) {
    oval *o = val_put(im, name);
    o->is_const = true;
    o->c = c;
    o->gv = -1;
}

/* A TensorProto's data as a constant. f32 raw data stays in place. */
static int tensor_ct(imp *im, const Onnx__TensorProto *t, const raw_ref *raw, ct *out) {
    const char *tn = t->name ? t->name : "";
    if (t->n_dims > CT_MAX_RANK) return fail(im, "tensor '%s' has rank %zu (at most %d)", tn, t->n_dims, CT_MAX_RANK);
    ct c = {.rank = (int)t->n_dims, .n = 1};
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || t->dims[i] > GRAPH_MAX_DIM) return fail(im, "tensor '%s' has a bad dimension", tn);
        c.dim[i] = t->dims[i];
        if (c.dim[i] && c.n > GRAPH_MAX_NUMEL / c.dim[i]) return fail(im, "tensor '%s' is too large", tn);
        c.n *= c.dim[i];
    }
    int dt = t->data_type;
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    bool have_raw = false;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        const char *loc = NULL;
        int64_t off = 0, len = -1;
        for (size_t i = 0; i < t->n_external_data; i++) {
            const Onnx__StringStringEntryProto *e = t->external_data[i];
            if (!e->key || !e->value) continue;
            if (strcmp(e->key, "location") == 0) loc = e->value;
            else if (strcmp(e->key, "offset") == 0) off = strtoll(e->value, NULL, 10);
            else if (strcmp(e->key, "length") == 0) len = strtoll(e->value, NULL, 10);
        }
        if (!loc || !loc[0] || strstr(loc, "..") || loc[0] == '/')
            return fail(im, "tensor '%s': external data needs a relative location inside the model's folder", tn);
        char *p = path_join(im->dir, loc);
        const uint8_t *data = NULL;
        size_t flen = 0;
        diag md = {0};
        int32_t mi;
        int rc = 0;
        if (strmap_get(&im->ext, loc, &mi)) {
            data = im->ext_maps.v[mi].p;
            flen = im->ext_maps.v[mi].bytes;
        } else {
            rc = map_file(p, im->keep, &data, &flen, &md);
            if (rc == 0) {
                vec_push(&im->a, &im->ext_maps, ((raw_ref){data, flen, true}));
                strmap_put(&im->ext, arena_strdup(&im->a, loc), im->ext_maps.n - 1);
            }
        }
        if (rc) {
            md.text[strcspn(md.text, "\n")] = 0;
            const char *why = strstr(md.text, "error: ");
            fail(im, "tensor '%s': external data file %s: %s", tn, p, why ? why + 7 : md.text);
            free(p);
            return -1;
        }
        if (off < 0 || (uint64_t)off > flen || (len >= 0 && (uint64_t)len > flen - (uint64_t)off)) {
            fail(im, "tensor '%s': external data range is outside %s (%zu bytes)", tn, p, flen);
            free(p);
            return -1;
        }
        free(p);
        bytes = data + off;
        nbytes = len >= 0 ? (size_t)len : flen - (size_t)off;
        have_raw = true;
    } else if (raw && raw->set) {
        bytes = raw->p;
        nbytes = raw->bytes;
        have_raw = true;
    } else if (t->has_raw_data) {
        bytes = t->raw_data.data;
        nbytes = t->raw_data.len;
        have_raw = true;
    }
    size_t esize;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: esize = 4; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: esize = 8; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: esize = 2; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: esize = 8; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: esize = 4; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: esize = 1; break;
    default: return fail(im, "tensor '%s' has data type %d, which is not supported", tn, dt);
    }
    c.is_int = !(dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ||
                 dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
    if (have_raw) {
        if (nbytes != (size_t)c.n * esize)
            return fail(im, "tensor '%s' holds %zu bytes of data for %lld elements", tn, nbytes, (long long)c.n);
        if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && nbytes > 4096 && ((raw && raw->set) || t->has_data_location)) {
            c.raw = bytes; /* weights stay in the map (Constant nodes live in the decoded message: decoded) */
            *out = c;
            return 0;
        }
        c.v = arena_alloc(&im->a, sizeof(double) * (size_t)(c.n ? c.n : 1));
        for (int64_t i = 0; i < c.n; i++) {
            const uint8_t *q = bytes + (size_t)i * esize;
            switch (dt) {
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: { float f; memcpy(&f, q, 4); c.v[i] = f; break; }
            case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: { double f; memcpy(&f, q, 8); c.v[i] = f; break; }
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: { uint16_t h; memcpy(&h, q, 2); float f; num_decode_buf(DT_F16, 0, &h, &f, 1); c.v[i] = f; break; }
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: { int64_t x; memcpy(&x, q, 8); c.v[i] = (double)x; break; }
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: { int32_t x; memcpy(&x, q, 4); c.v[i] = x; break; }
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: c.v[i] = (int8_t)*q; break;
            default: c.v[i] = *q; break;
            }
        }
        *out = c;
        return 0;
    }
    /* Typed fields. */
    size_t have;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: have = t->n_float_data; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: have = t->n_double_data; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: have = t->n_int64_data; break;
    default: have = t->n_int32_data; break;
    }
    if (have != (size_t)c.n) return fail(im, "tensor '%s' holds %zu values for %lld elements", tn, have, (long long)c.n);
    c.v = arena_alloc(&im->a, sizeof(double) * (size_t)(c.n ? c.n : 1));
    for (int64_t i = 0; i < c.n; i++) {
        switch (dt) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: c.v[i] = t->float_data[i]; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: c.v[i] = t->double_data[i]; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: c.v[i] = (double)t->int64_data[i]; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: {
            uint16_t h = (uint16_t)t->int32_data[i];
            float f;
            num_decode_buf(DT_F16, 0, &h, &f, 1);
            c.v[i] = f;
            break;
        }
        default: c.v[i] = t->int32_data[i]; break;
        }
    }
    *out = c;
    return 0;
}

/* ---- node access -------------------------------------------------------------- */

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
    return NULL;
}

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_i ? a->i : def;
}

static double attr_float(const Onnx__NodeProto *n, const char *name, double def) {
    const Onnx__AttributeProto *a = attr(n, name);
    return a && a->has_f ? a->f : def;
}

/* Integer list attribute; *n = -1 when absent. */
static const int64_t *attr_ints(const Onnx__NodeProto *n, const char *name, int *count) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a) {
        *count = -1;
        return NULL;
    }
    *count = (int)a->n_ints;
    return a->ints;
}

static const char *in_name(const Onnx__NodeProto *n, size_t i) {
    return i < n->n_input && n->input[i] && n->input[i][0] ? n->input[i] : NULL;
}

static bool is_op(const Onnx__NodeProto *n, const char *op) {
    return n->op_type && strcmp(n->op_type, op) == 0 && (!n->domain || !n->domain[0] || strcmp(n->domain, "ai.onnx") == 0);
}

/* ---- raising: decomposed GeLU and LayerNorm ------------------------------------- */

/* Whether n has the inputs the pattern matchers read: binary arithmetic two,
 * the rest at least one. A node with fewer matches nothing and is refused,
 * with its name, when it is converted. */
static bool arity_ok(const Onnx__NodeProto *n) {
    static const char *const binary[] = {"Mul", "Add", "Sub", "Div", "Pow"};
    for (size_t i = 0; i < TS_COUNT(binary); i++)
        if (n->op_type && strcmp(n->op_type, binary[i]) == 0) return n->n_input == 2;
    return n->n_input >= 1;
}

static const Onnx__NodeProto *producer(imp *im, const char *name, int32_t *idx) {
    int32_t k;
    if (!name || !strmap_get(&im->producer, name, &k) || !arity_ok(im->gp->node[k])) return NULL;
    if (idx) *idx = k;
    return im->gp->node[k];
}

static int32_t use_count(imp *im, const char *name) {
    int32_t k;
    return strmap_get(&im->uses, name, &k) ? k : 0;
}

static bool scalar_const(imp *im, const char *name, double *v) {
    oval *o = name ? val_get(im, name) : NULL;
    if (!o || !o->is_const || o->c.n != 1) return false;
    *v = ct_at(&o->c, 0);
    return true;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-5 * fabs(b); }

/* Nodes a pattern absorbs, gathered while matching. */
typedef struct pat {
    int32_t nodes[32];
    int n;
} pat;

static void pat_add(pat *p, int32_t k) {
    if (p->n < 32) p->nodes[p->n++] = k;
}

/* Interior value: produced by an op of that type, consumed only inside. */
static const Onnx__NodeProto *interior(imp *im, const char *name, const char *op, int32_t uses, pat *p) {
    int32_t k = -1;
    const Onnx__NodeProto *n = producer(im, name, &k);
    if (!n || !is_op(n, op) || n->n_output != 1 || use_count(im, name) != uses) return NULL;
    pat_add(p, k);
    return n;
}

/* Flattens a tree of single-use Mul nodes rooted at name into its factors
 * (Pow(x, 3) counts as x three times). */
static int mul_factors(imp *im, const char *name, bool root, const char **f, int cap, int n, pat *p) {
    int32_t k = -1;
    if (n >= cap || p->n >= 24) return -1; /* patterns are small: no deep trees */
    const Onnx__NodeProto *nd = producer(im, name, &k);
    bool single = root || use_count(im, name) == 1;
    double e;
    if (nd && single && is_op(nd, "Mul") && nd->n_input == 2) {
        pat_add(p, k);
        n = mul_factors(im, nd->input[0], false, f, cap, n, p);
        return n < 0 ? n : mul_factors(im, nd->input[1], false, f, cap, n, p);
    }
    if (nd && single && !root && is_op(nd, "Pow") && scalar_const(im, in_name(nd, 1), &e) && e == 3.0) {
        pat_add(p, k);
        for (int i = 0; i < 3; i++) {
            if (n >= cap) return -1;
            f[n++] = nd->input[0];
        }
        return n;
    }
    if (n >= cap) return -1;
    f[n++] = name;
    return n;
}

/* Splits factors into one scalar constant product and the rest. */
static int split_consts(imp *im, const char **f, int n, double *prod, const char **rest) {
    int r = 0;
    *prod = 1;
    for (int i = 0; i < n; i++) {
        double v;
        if (scalar_const(im, f[i], &v)) *prod *= v;
        else rest[r++] = f[i];
    }
    return r;
}

/* The common '/'-scope of the pattern's node names: "/blocks.0/act". */
static const char *pat_scope(imp *im, const pat *p) {
    const char *first = im->gp->node[p->nodes[0]]->name ? im->gp->node[p->nodes[0]]->name : "";
    size_t len = strlen(first);
    for (int i = 1; i < p->n; i++) {
        const char *s = im->gp->node[p->nodes[i]]->name ? im->gp->node[p->nodes[i]]->name : "";
        size_t k = 0;
        while (k < len && s[k] == first[k]) k++;
        len = k;
    }
    while (len > 0 && first[len - 1] != '/') len--;
    if (len > 0) len--;
    return arena_strndup(&im->a, first, len);
}

/* gelu: 0.5 * x * (1 + Erf(x / sqrt 2))  or  0.5 * x * (1 + Tanh(c (x + 0.044715 x^3))). */
static bool match_gelu(imp *im, int32_t root) {
    const Onnx__NodeProto *r = im->gp->node[root];
    if (!is_op(r, "Mul") || r->n_output != 1) return false;
    pat p = {0};
    const char *f[8], *rest[8];
    int n = mul_factors(im, r->output[0], true, f, 8, 0, &p);
    double half;
    if (n < 0 || split_consts(im, f, n, &half, rest) != 2 || !near(half, 0.5)) return false;
    for (int order = 0; order < 2; order++) {
        const char *x = rest[order], *one_plus = rest[1 - order];
        pat q = p;
        const Onnx__NodeProto *add = interior(im, one_plus, "Add", 1, &q);
        if (!add || add->n_input != 2) continue;
        double one;
        int ti = scalar_const(im, add->input[0], &one) ? 1 : 0;
        if (!scalar_const(im, add->input[1 - ti], &one) || one != 1.0) continue;
        const char *tv = add->input[ti];
        const Onnx__NodeProto *t = interior(im, tv, "Erf", 1, &q);
        raise_kind kind = RZ_GELU_ERF;
        if (t) {
            /* Erf(x / sqrt 2) or Erf(x * (1 / sqrt 2)) */
            const Onnx__NodeProto *dv = interior(im, t->input[0], "Div", 1, &q);
            double c;
            if (dv) {
                if (strcmp(dv->input[0], x) || !scalar_const(im, in_name(dv, 1), &c) || !near(c, sqrt(2.0))) continue;
            } else {
                const char *g[4], *gr[4];
                int gn = mul_factors(im, t->input[0], false, g, 4, 0, &q);
                if (use_count(im, t->input[0]) != 1 || gn < 0 || split_consts(im, g, gn, &c, gr) != 1 || strcmp(gr[0], x) ||
                    !near(c, sqrt(0.5)))
                    continue;
            }
        } else {
            t = interior(im, tv, "Tanh", 1, &q);
            if (!t) continue;
            kind = RZ_GELU_TANH;
            /* Tanh(c * (x + k * x^3)) */
            const char *g[4], *gr[4];
            double c, k;
            if (use_count(im, t->input[0]) != 1) continue;
            int gn = mul_factors(im, t->input[0], false, g, 4, 0, &q);
            if (gn < 0 || split_consts(im, g, gn, &c, gr) != 1 || !near(c, 0.7978845608028654)) continue;
            const Onnx__NodeProto *in = interior(im, gr[0], "Add", 1, &q);
            if (!in || in->n_input != 2) continue;
            int xi = strcmp(in->input[0], x) == 0 ? 0 : 1;
            if (strcmp(in->input[xi], x) || use_count(im, in->input[1 - xi]) != 1) continue;
            const char *h[6], *hr[6];
            int hn = mul_factors(im, in->input[1 - xi], false, h, 6, 0, &q);
            if (hn < 0 || split_consts(im, h, hn, &k, hr) != 3 || !near(k, 0.044715)) continue;
            if (strcmp(hr[0], x) || strcmp(hr[1], x) || strcmp(hr[2], x)) continue;
        }
        for (int i = 0; i < q.n; i++) im->rz[q.nodes[i]].kind = RZ_ABSORBED;
        im->rz[root] = (raised){.kind = kind, .x = x, .scope = pat_scope(im, &q)};
        return true;
    }
    return false;
}

/* layer norm: s = x - mean(x); s / sqrt(mean(s^2) + eps) [* gamma] [+ beta]. */
static bool match_layer_norm(imp *im, int32_t root) {
    const Onnx__NodeProto *dv = im->gp->node[root];
    if (!is_op(dv, "Div") || dv->n_input != 2 || dv->n_output != 1) return false;
    pat p = {0};
    pat_add(&p, root);
    const char *s = dv->input[0];
    const Onnx__NodeProto *sub = interior(im, s, "Sub", 2, &p);
    if (!sub) return false;
    const char *x = sub->input[0];
    int32_t mk = -1;
    const Onnx__NodeProto *mean = producer(im, sub->input[1], &mk);
    if (!mean || !is_op(mean, "ReduceMean") || strcmp(mean->input[0], x) || use_count(im, sub->input[1]) != 1 ||
        attr_int(mean, "keepdims", 1) != 1)
        return false;
    pat_add(&p, mk);
    const Onnx__NodeProto *sq = interior(im, dv->input[1], "Sqrt", 1, &p);
    if (!sq) return false;
    const Onnx__NodeProto *ad = interior(im, sq->input[0], "Add", 1, &p);
    if (!ad || ad->n_input != 2) return false;
    double eps;
    int vi = scalar_const(im, ad->input[1], &eps) ? 0 : 1;
    if (!scalar_const(im, ad->input[1 - vi], &eps)) return false;
    const Onnx__NodeProto *var = interior(im, ad->input[vi], "ReduceMean", 1, &p);
    if (!var || attr_int(var, "keepdims", 1) != 1) return false;
    int na, nb;
    const int64_t *aa = attr_ints(mean, "axes", &na), *ab = attr_ints(var, "axes", &nb);
    if (na != 1 || nb != 1 || aa[0] != ab[0]) return false;
    double two;
    const Onnx__NodeProto *pw = interior(im, var->input[0], "Pow", 1, &p);
    if (pw) {
        if (strcmp(pw->input[0], s) || !scalar_const(im, in_name(pw, 1), &two) || two != 2.0) return false;
    } else {
        pw = interior(im, var->input[0], "Mul", 1, &p);
        if (!pw || strcmp(pw->input[0], s) || strcmp(pw->input[1], s)) return false;
    }
    raised rz = {.kind = RZ_LAYER_NORM, .x = x, .eps = eps, .mean_node = mean->name};
    /* Optional affine: Mul by a constant vector, then Add of one. */
    int32_t last = root;
    const char *y = dv->output[0];
    for (int step = 0; step < 2 && use_count(im, y) == 1; step++) {
        int32_t ck = -1;
        const Onnx__NodeProto *c = NULL;
        for (size_t i = 0; i < im->gp->n_node && !c; i++) {
            const Onnx__NodeProto *n = im->gp->node[i];
            for (size_t j = 0; j < n->n_input; j++)
                if (n->input[j] && strcmp(n->input[j], y) == 0) {
                    c = n;
                    ck = (int32_t)i;
                }
        }
        if (!c || c->n_input != 2 || !is_op(c, step == 0 ? "Mul" : "Add")) break;
        const char *other = strcmp(c->input[0], y) == 0 ? c->input[1] : c->input[0];
        oval *o = val_get(im, other);
        if (!o || !o->is_const || o->c.rank != 1) break;
        if (step == 0) rz.gamma = other;
        else rz.beta = other;
        pat_add(&p, ck);
        last = ck;
        y = c->output[0];
    }
    for (int i = 0; i < p.n; i++) im->rz[p.nodes[i]].kind = RZ_ABSORBED;
    rz.scope = pat_scope(im, &p);
    im->rz[last] = rz;
    return true;
}

static void raise_patterns(imp *im) {
    for (int32_t i = 0; i < (int32_t)im->gp->n_node; i++) {
        if (im->rz[i].kind != RZ_NONE) continue;
        if (match_layer_norm(im, i)) continue;
    }
    /* GeLU roots are the last Mul: scan backwards so inner Muls are not roots. */
    for (int32_t i = (int32_t)im->gp->n_node - 1; i >= 0; i--)
        if (im->rz[i].kind == RZ_NONE) match_gelu(im, i);
}

/* ---- graph building (f32) -------------------------------------------------------- */

/* A .tsl value name from an ONNX name: '/' becomes '.', other characters
 * outside [A-Za-z0-9_.] become '_', unique in the graph. */
static const char *gname(imp *im, const char *onnx_name, const char *suffix) {
    char buf[512];
    size_t k = 0;
    const char *s = onnx_name && onnx_name[0] ? onnx_name : "v";
    while (*s == '/') s++;
    for (; *s && k < 400; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        buf[k++] = c == '/' ? '.' : ok ? c : '_';
    }
    if (k == 0) buf[k++] = 'v';
    buf[k] = 0;
    if (suffix) snprintf(buf + k, sizeof buf - k, ".%s", suffix);
    if (graph_lookup(im->g, buf) < 0) return arena_strdup(&im->a, buf);
    size_t base = strlen(buf);
    for (int i = 2;; i++) {
        snprintf(buf + base, sizeof buf - base, "_%d", i);
        if (graph_lookup(im->g, buf) < 0) return arena_strdup(&im->a, buf);
    }
}

/* The name of an op the current node makes: the node name for its
 * final result, the node name plus a suffix for helpers. */
static const char *node_name(imp *im, const char *suffix) {
    int32_t k;
    /* A graph output names its value after itself (the files NAME.npy). */
    if (!suffix && im->cur && im->cur->n_output && im->cur->output[0] && strmap_get(&im->outputs, im->cur->output[0], &k))
        return gname(im, im->cur->output[0], NULL);
    const char *n = im->cur && im->cur->name && im->cur->name[0] ? im->cur->name
                    : im->cur && im->cur->n_output ? im->cur->output[0] : "v";
    return gname(im, n, suffix);
}

static const graph_type *gtype(imp *im, int32_t v) { return &graph_val(im->g, v)->type; }

static int32_t finish(imp *im, int32_t op, const char *name, const graph_type *declared) {
    if (im->err) return -1;
    const char *names[1] = {name};
    diag gd = {0};
    if (graph_finish_op(im->g, op, names, declared, &gd)) {
        /* Shape rule failures name the graph op; say which node made it. */
        char *m = strstr(gd.text, "error: ");
        gd.text[strcspn(gd.text, "\n")] = 0;
        fail(im, "%s", m ? m + 7 : gd.text);
        return -1;
    }
    return graph_result(im->g, op, 0);
}

static int32_t emit1(imp *im, graph_op_kind k, int32_t x, const char *name) {
    if (im->err) return -1;
    return finish(im, graph_begin_op(im->g, k, &x, 1), name, NULL);
}

static int32_t emit2(imp *im, graph_op_kind k, int32_t x, int32_t y, const char *name) {
    if (im->err) return -1;
    int32_t in[2] = {x, y};
    return finish(im, graph_begin_op(im->g, k, in, 2), name, NULL);
}

static int32_t emit_matmul(imp *im, int32_t a, int32_t b, bool tb, const char *name) {
    if (im->err) return -1;
    int32_t in[2] = {a, b};
    int32_t op = graph_begin_op(im->g, OP_MATMUL, in, 2);
    if (tb) graph_set_bool(im->g, op, ATTR_TRANSPOSE_B, true);
    graph_set_dtype(im->g, op, ATTR_ACC, DT_F32);
    graph_type decl = {.dtype = DT_F32};
    return finish(im, op, name, &decl);
}

static int32_t emit_scale(imp *im, int32_t x, double by, const char *name) {
    if (im->err) return -1;
    int32_t op = graph_begin_op(im->g, OP_SCALE, &x, 1);
    graph_set_float(im->g, op, ATTR_BY, by);
    return finish(im, op, name, NULL);
}

static int32_t emit_reshape(imp *im, int32_t x, int rank, const int64_t *dim, const char *name) {
    if (im->err) return -1;
    const graph_type *t = gtype(im, x);
    if (t->rank == rank && memcmp(t->dim, dim, sizeof(int64_t) * (size_t)rank) == 0 && !name) return x;
    graph_type decl = graph_type_make(t->dtype, rank, dim);
    return finish(im, graph_begin_op(im->g, OP_RESHAPE, &x, 1), name ? name : node_name(im, "reshape"), &decl);
}

static int32_t emit_transpose(imp *im, int32_t x, const int64_t *perm, int rank, const char *name) {
    if (im->err) return -1;
    int32_t op = graph_begin_op(im->g, OP_TRANSPOSE, &x, 1);
    graph_set_ints(im->g, op, ATTR_PERM, perm, rank);
    return finish(im, op, name, NULL);
}

static int32_t emit_slice(imp *im, int32_t x, const int64_t *start, const int64_t *end, const char *name) {
    if (im->err) return -1;
    int rank = gtype(im, x)->rank;
    int32_t op = graph_begin_op(im->g, OP_SLICE, &x, 1);
    graph_set_ints(im->g, op, ATTR_START, start, rank);
    graph_set_ints(im->g, op, ATTR_END, end, rank);
    return finish(im, op, name, NULL);
}

static int32_t emit_concat(imp *im, const int32_t *xs, int n, int64_t axis, const char *name) {
    if (im->err) return -1;
    if (n == 1 && !name) return xs[0];
    int32_t op = graph_begin_op(im->g, OP_CONCAT, xs, n);
    graph_set_int(im->g, op, ATTR_AXIS, axis);
    return finish(im, op, name, NULL);
}

/* A constant as a graph value: a data() parameter, made once per ONNX value. */
static int32_t const_value(imp *im, oval *o) {
    if (o->gv >= 0) return o->gv;
    ct *c = &o->c;
    if (c->n == 0) return fail(im, "value '%s' is empty", o->name), -1;
    if (c->rank > GRAPH_MAX_RANK) return fail(im, "constant '%s' has rank %d (at most %d)", o->name, c->rank, GRAPH_MAX_RANK), -1;
    const void *data = c->raw;
    if (!data) {
        float *f = keep_add(im->keep, xmalloc(sizeof(float) * (size_t)c->n), 0, false);
        for (int64_t i = 0; i < c->n; i++) f[i] = (float)c->v[i];
        data = f;
    }
    int64_t dim[GRAPH_MAX_RANK];
    int rank = c->rank;
    for (int i = 0; i < rank; i++) dim[i] = c->dim[i];
    if (rank == 0) dim[rank++] = 1; /* scalars broadcast as [1] */
    graph_init init = {.kind = INIT_DATA, .parts = &data, .nparts = 1};
    int32_t op = graph_add_param(im->g, gname(im, o->name, NULL), graph_type_make(DT_F32, rank, dim), init);
    o->gv = graph_result(im->g, op, 0);
    return o->gv;
}

/* The graph value behind an ONNX value name (constants become parameters). */
static int32_t gval(imp *im, const char *name) {
    if (im->err) return -1;
    oval *o = name ? val_get(im, name) : NULL;
    if (!o) return fail(im, "input '%s' is not defined before its use", name ? name : "(missing)"), -1;
    if (o->is_const) return const_value(im, o);
    return o->gv;
}

static void set_graph(imp *im, const char *name, int32_t v) {
    if (im->err || v < 0) return;
    oval *o = val_put(im, name);
    o->is_const = false;
    o->gv = v;
}

static oval *cval(imp *im, const char *name) {
    oval *o = name ? val_get(im, name) : NULL;
    return o && o->is_const ? o : NULL;
}

/* Shape of an ONNX value, constant or not. */
static int shape_of(imp *im, const char *name, int *rank, int64_t *dim) {
    oval *o = name ? val_get(im, name) : NULL;
    if (!o) return fail(im, "input '%s' is not defined before its use", name ? name : "(missing)");
    if (o->is_const) {
        *rank = o->c.rank;
        memcpy(dim, o->c.dim, sizeof(int64_t) * (size_t)o->c.rank);
    } else {
        const graph_type *t = gtype(im, o->gv);
        *rank = t->rank;
        memcpy(dim, t->dim, sizeof(int64_t) * (size_t)t->rank);
    }
    return 0;
}

/* An integer list from a constant input (axes, shapes, starts). */
static int const_ints(imp *im, const char *name, int64_t *out, int cap, int *n) {
    oval *o = cval(im, name);
    if (!o) return fail(im, "input '%s' must be a constant (its value does not infer at import)", name ? name : "(missing)");
    if (o->c.n > cap) return fail(im, "input '%s' has %lld values (at most %d)", name, (long long)o->c.n, cap);
    for (int64_t i = 0; i < o->c.n; i++) {
        out[i] = to_i64(ct_at(&o->c, i));
    }
    *n = (int)o->c.n;
    return 0;
}

static int norm_axis(imp *im, int64_t axis, int rank, int64_t *out) {
    *out = 0;
    if (axis < -rank || axis >= (rank ? rank : 1)) return fail(im, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = axis < 0 ? axis + rank : axis;
    return 0;
}

/* ---- constant folding ------------------------------------------------------------- */

static void strides_of(int rank, const int64_t *dim, int64_t *st) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= dim[i];
    }
}

static int bcast_shape(imp *im, int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out) {
    *r = ra > rb ? ra : rb;
    for (int i = 0; i < *r; i++) {
        int64_t x = i < *r - ra ? 1 : a[i - (*r - ra)], y = i < *r - rb ? 1 : b[i - (*r - rb)];
        if (x < 0 || y < 0) return fail(im, "a shape has a negative dimension (%lld)", (long long)(x < 0 ? x : y));
        if (x != y && x != 1 && y != 1) return fail(im, "shapes do not broadcast");
        out[i] = x == 1 ? y : x;
    }
    return 0;
}

/* Index of element i of a broadcast result in an operand of shape (rank, dim). */
static int64_t bcast_index(int64_t i, int r, const int64_t *odim, int rank, const int64_t *dim) {
    int64_t idx = 0, mul = 1;
    for (int k = r - 1; k >= 0; k--) {
        int64_t c = i % odim[k];
        i /= odim[k];
        int j = k - (r - rank);
        if (j >= 0) {
            if (dim[j] != 1) idx += c * mul;
            mul *= dim[j];
        }
    }
    return idx;
}

typedef enum { FB_ADD, FB_SUB, FB_MUL, FB_DIV, FB_POW, FB_EQUAL } fold_bin;

static int fold_binary(imp *im, fold_bin op, ct *a, ct *b, ct *out) {
    int r;
    int64_t dim[CT_MAX_RANK];
    if (bcast_shape(im, a->rank, a->dim, b->rank, b->dim, &r, dim)) return -1;
    ct c = ct_new(im, op == FB_EQUAL ? true : a->is_int && b->is_int, r, dim);
    for (int64_t i = 0; i < c.n; i++) {
        double x = ct_at(a, bcast_index(i, r, dim, a->rank, a->dim)), y = ct_at(b, bcast_index(i, r, dim, b->rank, b->dim));
        double z = 0;
        switch (op) {
        case FB_ADD: z = x + y; break;
        case FB_SUB: z = x - y; break;
        case FB_MUL: z = x * y; break;
        case FB_DIV: z = c.is_int ? (y == 0 ? 0 : trunc(x / y)) : x / y; break;
        case FB_POW: z = pow(x, y); break;
        case FB_EQUAL: z = x == y; break;
        }
        if (!c.is_int && op != FB_EQUAL) z = (float)z; /* f32 tensors stay f32 */
        c.v[i] = z;
    }
    *out = c;
    return 0;
}

static int fold_gather(imp *im, ct *data, ct *ind, int64_t axis, ct *out) {
    int64_t ax;
    if (norm_axis(im, axis, data->rank, &ax)) return -1;
    int r = data->rank - 1 + ind->rank;
    if (r > CT_MAX_RANK) return fail(im, "gather result rank %d is too large", r);
    int64_t dim[CT_MAX_RANK];
    int k = 0;
    for (int i = 0; i < ax; i++) dim[k++] = data->dim[i];
    for (int i = 0; i < ind->rank; i++) dim[k++] = ind->dim[i];
    for (int i = (int)ax + 1; i < data->rank; i++) dim[k++] = data->dim[i];
    ct c = ct_new(im, data->is_int, r, dim);
    if (im->err) return -1;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= data->dim[i];
    for (int i = (int)ax + 1; i < data->rank; i++) inner *= data->dim[i];
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ind->n; j++) {
            int64_t q = to_i64(ct_at(ind, j));
            if (q < 0) q += data->dim[ax];
            if (q < 0 || q >= data->dim[ax]) return fail(im, "gather index %lld is out of range", (long long)q);
            for (int64_t e = 0; e < inner; e++) c.v[at++] = ct_at(data, (o * data->dim[ax] + q) * inner + e);
        }
    *out = c;
    return 0;
}

/* ONNX Slice bounds, clamped, per axis of a value with shape dim. */
static int slice_bounds(imp *im, const Onnx__NodeProto *n, int rank, const int64_t *dim, int64_t *start, int64_t *end,
                        int64_t *step) {
    int64_t st[CT_MAX_RANK], en[CT_MAX_RANK], ax[CT_MAX_RANK], sp[CT_MAX_RANK];
    int ns, ne, na = -1, np = -1;
    if (const_ints(im, in_name(n, 1), st, CT_MAX_RANK, &ns) || const_ints(im, in_name(n, 2), en, CT_MAX_RANK, &ne)) return -1;
    if (in_name(n, 3) && const_ints(im, in_name(n, 3), ax, CT_MAX_RANK, &na)) return -1;
    if (in_name(n, 4) && const_ints(im, in_name(n, 4), sp, CT_MAX_RANK, &np)) return -1;
    if (ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns)) return fail(im, "starts, ends, axes and steps differ in length");
    for (int i = 0; i < rank; i++) {
        start[i] = 0;
        end[i] = dim[i];
        step[i] = 1;
    }
    for (int i = 0; i < ns; i++) {
        int64_t a = na >= 0 ? ax[i] : i;
        if (norm_axis(im, a, rank, &a)) return -1;
        int64_t s = np >= 0 ? sp[i] : 1, d = dim[a];
        if (s > GRAPH_MAX_DIM) s = GRAPH_MAX_DIM; /* any step past the axis means one element */
        if (s < -GRAPH_MAX_DIM) s = -GRAPH_MAX_DIM;
        if (s == 0) return fail(im, "slice step 0");
        int64_t b = st[i], e = en[i];
        if (b < 0) b += d;
        if (e < 0) e += d;
        if (s > 0) {
            b = b < 0 ? 0 : b > d ? d : b;
            e = e < 0 ? 0 : e > d ? d : e;
        } else {
            b = b < 0 ? -1 : b > d - 1 ? d - 1 : b;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
        }
        start[a] = b;
        end[a] = e;
        step[a] = s;
    }
    return 0;
}

static int64_t slice_len(int64_t b, int64_t e, int64_t s) {
    if (s > 0) return e > b ? (e - b + s - 1) / s : 0;
    return b > e ? (b - e - s - 1) / -s : 0;
}

static int fold_slice(imp *im, const Onnx__NodeProto *n, ct *x, ct *out) {
    int64_t b[CT_MAX_RANK], e[CT_MAX_RANK], s[CT_MAX_RANK], dim[CT_MAX_RANK], ist[CT_MAX_RANK];
    if (slice_bounds(im, n, x->rank, x->dim, b, e, s)) return -1;
    for (int i = 0; i < x->rank; i++) dim[i] = slice_len(b[i], e[i], s[i]);
    ct c = ct_new(im, x->is_int, x->rank, dim);
    strides_of(x->rank, x->dim, ist);
    for (int64_t i = 0; i < c.n; i++) {
        int64_t rem = i, src = 0;
        for (int k = x->rank - 1; k >= 0; k--) {
            int64_t q = rem % dim[k];
            rem /= dim[k];
            src += (b[k] + q * s[k]) * ist[k];
        }
        c.v[i] = ct_at(x, src);
    }
    *out = c;
    return 0;
}

/* Large float results (a transposed weight) are written as f32 into a buffer
 * the graph keeps, read in place like a weight: 4 bytes an element, once. */
static int fold_transpose(imp *im, ct *x, const int64_t *perm, ct *out) {
    int64_t dim[CT_MAX_RANK], ist[CT_MAX_RANK];
    for (int i = 0; i < x->rank; i++) dim[i] = x->dim[perm[i]];
    ct c;
    float *f = NULL;
    if (!x->is_int && x->n > 1024) {
        c = (ct){.rank = x->rank, .n = x->n};
        memcpy(c.dim, dim, sizeof dim);
        f = keep_add(im->keep, xmalloc(sizeof(float) * (size_t)x->n), 0, false);
        c.raw = (const uint8_t *)f; /* the host is little-endian (checked above) */
    } else {
        c = ct_new(im, x->is_int, x->rank, dim);
        if (im->err) return -1;
    }
    strides_of(x->rank, x->dim, ist);
    for (int64_t i = 0; i < c.n; i++) {
        int64_t rem = i, src = 0;
        for (int k = x->rank - 1; k >= 0; k--) {
            src += (rem % dim[k]) * ist[perm[k]];
            rem /= dim[k];
        }
        if (f) f[i] = (float)ct_at(x, src);
        else c.v[i] = ct_at(x, src);
    }
    *out = c;
    return 0;
}

/* Reshape target from an ONNX shape (0 copies, -1 infers). */
static int reshape_dims(imp *im, int rank, const int64_t *dim, const int64_t *want, int n, bool allowzero, int64_t *out) {
    int64_t total = 1, known = 1;
    int infer = -1;
    for (int i = 0; i < rank; i++) total *= dim[i];
    for (int i = 0; i < n; i++) {
        int64_t w = want[i];
        if (w == 0 && !allowzero) {
            if (i >= rank) return fail(im, "reshape copies axis %d of a rank-%d value", i, rank);
            w = dim[i];
        }
        if (w == -1) {
            if (infer >= 0) return fail(im, "reshape has two -1 entries");
            infer = i;
            continue;
        }
        if (w < 0 || w > GRAPH_MAX_DIM || (w && known > GRAPH_MAX_NUMEL / w))
            return fail(im, "reshape has a bad entry %lld", (long long)w);
        out[i] = w;
        known *= w;
    }
    if (infer >= 0) {
        if (known == 0 || total % known) return fail(im, "reshape cannot infer its -1 entry");
        out[infer] = total / known;
        known *= out[infer];
    }
    if (known != total) return fail(im, "reshape changes the element count (%lld to %lld)", (long long)total, (long long)known);
    return 0;
}

/* Squeeze/Unsqueeze axes: the attribute (opset < 13) or input 1. */
static int node_axes(imp *im, const Onnx__NodeProto *n, int64_t *axes, int *na) {
    int k;
    const int64_t *a = attr_ints(n, "axes", &k);
    if (k >= 0) {
        if (k > CT_MAX_RANK) return fail(im, "too many axes");
        memcpy(axes, a, sizeof(int64_t) * (size_t)k);
        *na = k;
        return 0;
    }
    if (!in_name(n, 1)) {
        *na = -1;
        return 0;
    }
    return const_ints(im, in_name(n, 1), axes, CT_MAX_RANK, na);
}

static int squeeze_dims(imp *im, const Onnx__NodeProto *n, bool unsq, int rank, const int64_t *dim, int *orank, int64_t *odim) {
    int64_t axes[CT_MAX_RANK];
    int na;
    if (node_axes(im, n, axes, &na)) return -1;
    if (unsq) {
        int r = rank + na;
        if (na < 0 || r > CT_MAX_RANK) return fail(im, "unsqueeze needs axes and a result rank of at most %d", CT_MAX_RANK);
        bool ins[CT_MAX_RANK] = {0};
        for (int i = 0; i < na; i++) {
            int64_t a;
            if (norm_axis(im, axes[i], r, &a)) return -1;
            ins[a] = true;
        }
        for (int i = 0, j = 0; i < r; i++) odim[i] = ins[i] ? 1 : dim[j++];
        *orank = r;
        return 0;
    }
    bool drop[CT_MAX_RANK] = {0};
    for (int i = 0; i < rank; i++) drop[i] = na < 0 && dim[i] == 1;
    for (int i = 0; i < na; i++) {
        int64_t a;
        if (norm_axis(im, axes[i], rank, &a)) return -1;
        if (dim[a] != 1) return fail(im, "squeeze of axis %lld, which is %lld long", (long long)a, (long long)dim[a]);
        drop[a] = true;
    }
    int r = 0;
    for (int i = 0; i < rank; i++)
        if (!drop[i]) odim[r++] = dim[i];
    *orank = r;
    return 0;
}

static int flatten_dims(imp *im, const Onnx__NodeProto *n, int rank, const int64_t *dim, int64_t *odim) {
    int64_t ax;
    if (norm_axis(im, attr_int(n, "axis", 1), rank + 1, &ax)) return -1;
    odim[0] = odim[1] = 1;
    for (int i = 0; i < rank; i++) odim[i < ax ? 0 : 1] *= dim[i];
    return 0;
}

static ct ct_reshaped(ct c, int rank, const int64_t *dim) {
    c.rank = rank;
    memcpy(c.dim, dim, sizeof(int64_t) * (size_t)rank);
    return c;
}

/* Folds node n if it computes on constants only; returns 1 if folded. */
static int try_fold(imp *im, const Onnx__NodeProto *n) {
    const char *op = n->op_type;
    if (n->n_output < 1) return 0;
    const char *y = n->output[0];
    if (is_op(n, "Shape")) {
        int rank;
        int64_t dim[CT_MAX_RANK];
        if (shape_of(im, in_name(n, 0), &rank, dim)) return -1;
        int64_t b = attr_int(n, "start", 0), e = attr_int(n, "end", rank);
        if (b < 0) b += rank;
        if (e < 0) e += rank;
        b = b < 0 ? 0 : b > rank ? rank : b;
        e = e < b ? b : e > rank ? rank : e;
        int64_t len = e - b;
        ct c = ct_new(im, true, 1, &len);
        for (int64_t i = 0; i < len; i++) c.v[i] = (double)dim[b + i];
        set_const(im, y, c);
        return 1;
    }
    if (is_op(n, "Constant")) {
        const Onnx__AttributeProto *a = n->n_attribute ? n->attribute[0] : NULL;
        ct c;
        if (!a || !a->name) return fail(im, "Constant without a value");
        if (strcmp(a->name, "value") == 0 && a->t) {
            if (tensor_ct(im, a->t, NULL, &c)) return -1;
        } else if (strcmp(a->name, "value_float") == 0) {
            c = ct_new(im, false, 0, NULL);
            c.v[0] = a->f;
        } else if (strcmp(a->name, "value_int") == 0) {
            c = ct_new(im, true, 0, NULL);
            c.v[0] = (double)a->i;
        } else if (strcmp(a->name, "value_floats") == 0 || strcmp(a->name, "value_ints") == 0) {
            bool isf = a->name[6] == 'f';
            int64_t len = isf ? (int64_t)a->n_floats : (int64_t)a->n_ints;
            c = ct_new(im, !isf, 1, &len);
            for (int64_t i = 0; i < len; i++) c.v[i] = isf ? a->floats[i] : (double)a->ints[i];
        } else {
            return fail(im, "Constant with attribute '%s' is not supported", a->name);
        }
        set_const(im, y, c);
        return 1;
    }
    /* Everything else folds only when every input is constant. */
    for (size_t i = 0; i < n->n_input; i++)
        if (in_name(n, i) && !cval(im, in_name(n, i))) return 0;
    oval *a = n->n_input > 0 && in_name(n, 0) ? cval(im, in_name(n, 0)) : NULL;
    oval *b = n->n_input > 1 && in_name(n, 1) ? cval(im, in_name(n, 1)) : NULL;
    ct c;
    static const char *const bins[] = {"Add", "Sub", "Mul", "Div", "Pow", "Equal"};
    for (int k = 0; k < 6; k++)
        if (is_op(n, bins[k])) {
            if (!a || !b) return fail(im, "needs two inputs");
            if (fold_binary(im, (fold_bin)k, &a->c, &b->c, &c)) return -1;
            set_const(im, y, c);
            return 1;
        }
    if (!a && !is_op(n, "Range")) return 0;
    if (is_op(n, "Identity")) {
        set_const(im, y, a->c);
    } else if (is_op(n, "Cast")) {
        int64_t to = attr_int(n, "to", 1);
        bool to_float = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ||
                        to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
        c = ct_new(im, !to_float, a->c.rank, a->c.dim);
        for (int64_t i = 0; i < c.n; i++) {
            double v = ct_at(&a->c, i);
            c.v[i] = to_float ? v : to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? (v != 0) : trunc(v);
        }
        set_const(im, y, c);
    } else if (is_op(n, "Sqrt") || is_op(n, "Neg") || is_op(n, "Erf") || is_op(n, "Tanh") || is_op(n, "Reciprocal")) {
        c = ct_new(im, a->c.is_int, a->c.rank, a->c.dim);
        for (int64_t i = 0; i < c.n; i++) {
            double v = ct_at(&a->c, i);
            c.v[i] = op[0] == 'S' ? sqrt(v) : op[0] == 'N' ? -v : op[0] == 'E' ? erf(v) : op[0] == 'T' ? tanh(v) : 1 / v;
        }
        set_const(im, y, c);
    } else if (is_op(n, "Gather")) {
        if (!b || fold_gather(im, &a->c, &b->c, attr_int(n, "axis", 0), &c)) return im->err ? -1 : fail(im, "needs indices");
        set_const(im, y, c);
    } else if (is_op(n, "Slice")) {
        if (fold_slice(im, n, &a->c, &c)) return -1;
        set_const(im, y, c);
    } else if (is_op(n, "Concat")) {
        int64_t ax;
        if (norm_axis(im, attr_int(n, "axis", 0), a->c.rank, &ax)) return -1;
        int64_t dim[CT_MAX_RANK];
        memcpy(dim, a->c.dim, sizeof dim);
        dim[ax] = 0;
        for (size_t i = 0; i < n->n_input; i++) {
            oval *o = cval(im, in_name(n, i));
            if (!o || o->c.rank != a->c.rank) return fail(im, "concat of values of different ranks");
            dim[ax] += o->c.dim[ax];
        }
        c = ct_new(im, a->c.is_int, a->c.rank, dim);
        if (im->err) return -1;
        int64_t outer = 1;
        for (int i = 0; i < ax; i++) outer *= dim[i];
        int64_t at = 0;
        for (int64_t q = 0; q < outer; q++)
            for (size_t i = 0; i < n->n_input; i++) {
                ct *s = &cval(im, in_name(n, i))->c;
                int64_t blk = s->n / (outer ? outer : 1);
                for (int64_t e = 0; e < blk; e++) c.v[at++] = ct_at(s, q * blk + e);
            }
        set_const(im, y, c);
    } else if (is_op(n, "Unsqueeze") || is_op(n, "Squeeze")) {
        int r;
        int64_t dim[CT_MAX_RANK];
        if (squeeze_dims(im, n, op[0] == 'U', a->c.rank, a->c.dim, &r, dim)) return -1;
        set_const(im, y, ct_reshaped(a->c, r, dim));
    } else if (is_op(n, "Reshape")) {
        int64_t want[CT_MAX_RANK], dim[CT_MAX_RANK];
        int nw;
        if (const_ints(im, in_name(n, 1), want, CT_MAX_RANK, &nw) ||
            reshape_dims(im, a->c.rank, a->c.dim, want, nw, attr_int(n, "allowzero", 0) != 0, dim))
            return -1;
        set_const(im, y, ct_reshaped(a->c, nw, dim));
    } else if (is_op(n, "Flatten")) {
        int64_t dim[2];
        if (flatten_dims(im, n, a->c.rank, a->c.dim, dim)) return -1;
        set_const(im, y, ct_reshaped(a->c, 2, dim));
    } else if (is_op(n, "Transpose")) {
        int np;
        const int64_t *p = attr_ints(n, "perm", &np);
        int64_t perm[CT_MAX_RANK];
        for (int i = 0; i < a->c.rank; i++) perm[i] = np < 0 ? a->c.rank - 1 - i : p[i];
        if (np >= 0 && np != a->c.rank) return fail(im, "perm has %d entries for rank %d", np, a->c.rank);
        bool seen[CT_MAX_RANK] = {0};
        for (int i = 0; i < a->c.rank; i++) {
            if (perm[i] < 0 || perm[i] >= a->c.rank || seen[perm[i]]) return fail(im, "perm is not a permutation");
            seen[perm[i]] = true;
        }
        if (fold_transpose(im, &a->c, perm, &c)) return -1;
        set_const(im, y, c);
    } else if (is_op(n, "Expand")) {
        int64_t want[CT_MAX_RANK], dim[CT_MAX_RANK];
        int nw, r;
        if (const_ints(im, in_name(n, 1), want, CT_MAX_RANK, &nw) || bcast_shape(im, a->c.rank, a->c.dim, nw, want, &r, dim))
            return -1;
        c = ct_new(im, a->c.is_int, r, dim);
        for (int64_t i = 0; i < c.n; i++) c.v[i] = ct_at(&a->c, bcast_index(i, r, dim, a->c.rank, a->c.dim));
        set_const(im, y, c);
    } else if (is_op(n, "ConstantOfShape")) {
        int64_t dim[CT_MAX_RANK];
        int nd;
        if (const_ints(im, in_name(n, 0), dim, CT_MAX_RANK, &nd)) return -1;
        const Onnx__AttributeProto *v = attr(n, "value");
        ct fill = {.n = 1};
        double one = 0;
        fill.v = &one;
        if (v && v->t && tensor_ct(im, v->t, NULL, &fill)) return -1;
        c = ct_new(im, fill.is_int, nd, dim);
        for (int64_t i = 0; i < c.n; i++) c.v[i] = fill.n ? ct_at(&fill, 0) : 0;
        set_const(im, y, c);
    } else if (is_op(n, "Where")) {
        oval *e = cval(im, in_name(n, 2));
        if (!b || !e) return fail(im, "needs three inputs");
        int r, r2;
        int64_t d1[CT_MAX_RANK], dim[CT_MAX_RANK];
        if (bcast_shape(im, a->c.rank, a->c.dim, b->c.rank, b->c.dim, &r, d1) ||
            bcast_shape(im, r, d1, e->c.rank, e->c.dim, &r2, dim))
            return -1;
        c = ct_new(im, b->c.is_int && e->c.is_int, r2, dim);
        for (int64_t i = 0; i < c.n; i++)
            c.v[i] = ct_at(&a->c, bcast_index(i, r2, dim, a->c.rank, a->c.dim)) != 0
                         ? ct_at(&b->c, bcast_index(i, r2, dim, b->c.rank, b->c.dim))
                         : ct_at(&e->c, bcast_index(i, r2, dim, e->c.rank, e->c.dim));
        set_const(im, y, c);
    } else if (is_op(n, "Range")) {
        oval *s = cval(im, in_name(n, 0)), *l = cval(im, in_name(n, 1)), *dl = cval(im, in_name(n, 2));
        if (!s || !l || !dl) return fail(im, "needs three inputs");
        double st = ct_at(&s->c, 0), lim = ct_at(&l->c, 0), de = ct_at(&dl->c, 0);
        int64_t len = de == 0 ? 0 : (int64_t)ceil((lim - st) / de);
        if (len < 0) len = 0;
        if (len > (1 << 24)) return fail(im, "range of %lld values", (long long)len);
        c = ct_new(im, s->c.is_int, 1, &len);
        for (int64_t i = 0; i < len; i++) c.v[i] = st + (double)i * de;
        set_const(im, y, c);
    } else {
        return 0; /* computes on data at run time (e.g. MatMul of two weights): emitted */
    }
    return 1;
}

/* ---- data ops ------------------------------------------------------------------ */

static int32_t gelu_or_ln(imp *im, const raised *rz) {
    int32_t x = gval(im, rz->x);
    if (x < 0) return -1;
    const graph_type *t = gtype(im, x);
    char scope[600];
    snprintf(scope, sizeof scope, "%s/%s", rz->scope, rz->kind == RZ_LAYER_NORM ? "LayerNormalization" : "Gelu");
    const char *name = gname(im, scope, NULL);
    int32_t oi;
    if (strmap_get(&im->outputs, im->cur->output[0], &oi)) name = gname(im, im->cur->output[0], NULL);
    if (rz->kind != RZ_LAYER_NORM) return emit1(im, rz->kind == RZ_GELU_ERF ? OP_GELU_ERF : OP_GELU, x, name);
    /* The mean must run over the last axis. */
    const Onnx__NodeProto *mean = NULL;
    for (size_t i = 0; i < im->gp->n_node && !mean; i++)
        if (im->gp->node[i]->name && rz->mean_node && strcmp(im->gp->node[i]->name, rz->mean_node) == 0) mean = im->gp->node[i];
    int na;
    const int64_t *axes = mean ? attr_ints(mean, "axes", &na) : NULL;
    int64_t ax;
    if (!axes || norm_axis(im, axes[0], t->rank, &ax) || ax != t->rank - 1)
        return fail(im, "a layer norm over an axis other than the last is not supported"), -1;
    int64_t w = t->dim[t->rank - 1];
    int32_t gb[2];
    for (int k = 0; k < 2; k++) {
        const char *src = k ? rz->beta : rz->gamma;
        oval *o = src ? cval(im, src) : NULL;
        if (o && o->c.n != w) return fail(im, "layer norm %s has %lld values for width %lld", k ? "bias" : "scale", (long long)o->c.n, (long long)w), -1;
        if (o) {
            gb[k] = const_value(im, o);
        } else {
            char nm[600];
            snprintf(nm, sizeof nm, "%s.%s", name, k ? "beta" : "gamma");
            if (w > CT_MAX_FOLD) return fail(im, "a layer norm over %lld values is too wide", (long long)w), -1;
            float *f = keep_add(im->keep, xmalloc(sizeof(float) * (size_t)w), 0, false);
            for (int64_t i = 0; i < w; i++) f[i] = k ? 0.0f : 1.0f;
            const void *data = f;
            graph_init init = {.kind = INIT_DATA, .parts = &data, .nparts = 1};
            gb[k] = graph_result(im->g, graph_add_param(im->g, gname(im, nm, NULL), graph_type_make(DT_F32, 1, &w), init), 0);
        }
    }
    if (im->err) return -1;
    int32_t in[3] = {x, gb[0], gb[1]};
    int32_t op = graph_begin_op(im->g, OP_LAYER_NORM, in, 3);
    graph_set_float(im->g, op, ATTR_EPS, (float)rz->eps);
    return finish(im, op, name, NULL);
}

/* A constant transposed on its last two axes (a Gemm weight with transB). */
static oval *const_transposed(imp *im, oval *o) {
    if (o->c.rank != 2) return NULL;
    int64_t perm[2] = {1, 0};
    ct c;
    if (fold_transpose(im, &o->c, perm, &c)) return NULL;
    char nm[600];
    snprintf(nm, sizeof nm, "%s.T", o->name);
    set_const(im, nm, c);
    return val_get(im, nm);
}

/* Conv as a patch embedding: stride == kernel, no padding, no groups. */
static int32_t conv_patches(imp *im, const Onnx__NodeProto *n) {
    oval *w = cval(im, in_name(n, 1));
    int32_t x = gval(im, in_name(n, 0));
    if (x < 0) return -1;
    int nk, ns, np, nd;
    const int64_t *k = attr_ints(n, "kernel_shape", &nk), *s = attr_ints(n, "strides", &ns), *p = attr_ints(n, "pads", &np),
                  *dl = attr_ints(n, "dilations", &nd);
    const graph_type *t = gtype(im, x);
    if (!w || w->c.rank != 4 || t->rank != 4) return fail(im, "only 2-D convolutions with constant weights are supported"), -1;
    int64_t O = w->c.dim[0], C = w->c.dim[1], P = w->c.dim[2], Q = w->c.dim[3];
    bool ok = attr_int(n, "group", 1) == 1 && C == t->dim[1] && (nk < 0 || (nk == 2 && k[0] == P && k[1] == Q)) && ns == 2 &&
              s[0] == P && s[1] == Q;
    for (int i = 0; ok && np > 0 && i < np; i++) ok = p[i] == 0;
    for (int i = 0; ok && nd > 0 && i < nd; i++) ok = dl[i] == 1;
    const char *ap = attr(n, "auto_pad") && attr(n, "auto_pad")->has_s ? (const char *)attr(n, "auto_pad")->s.data : NULL;
    if (ap && attr(n, "auto_pad")->s.len && strncmp(ap, "NOTSET", attr(n, "auto_pad")->s.len) && strncmp(ap, "VALID", attr(n, "auto_pad")->s.len)) ok = false;
    if (!ok) return fail(im, "only patch embeddings (stride equal to the kernel, no padding, one group) are supported"), -1;
    int64_t B = t->dim[0], H = t->dim[2] / P, W = t->dim[3] / Q;
    if (H == 0 || W == 0) return fail(im, "the image is smaller than one patch"), -1;
    if (H * P != t->dim[2] || W * Q != t->dim[3]) { /* Conv drops the remainder */
        int64_t st[4] = {0, 0, 0, 0}, en[4] = {B, C, H * P, W * Q};
        x = emit_slice(im, x, st, en, node_name(im, "crop"));
    }
    /* [B, C, H, P, W, Q] -> [B, H, W, C, P, Q] in two rank-4 transposes. */
    int64_t d1[4] = {B * C * H, P, W, Q}, p1[4] = {0, 2, 1, 3};
    x = emit_reshape(im, x, 4, d1, node_name(im, "rows"));
    x = emit_transpose(im, x, p1, 4, node_name(im, "rows_t"));
    int64_t d2[4] = {B, C, H * W, P * Q};
    x = emit_reshape(im, x, 4, d2, node_name(im, "patches_c"));
    x = emit_transpose(im, x, p1, 4, node_name(im, "patches_t"));
    int64_t d3[3] = {B, H * W, C * P * Q};
    x = emit_reshape(im, x, 3, d3, node_name(im, "patches"));
    /* Weight [O, C*P*Q] transposed into [C*P*Q, O]. */
    int64_t wd[2] = {O, C * P * Q};
    char nm[600];
    snprintf(nm, sizeof nm, "%s.flat", w->name);
    set_const(im, nm, ct_reshaped(w->c, 2, wd));
    oval *wt = const_transposed(im, val_get(im, nm));
    if (!wt) return fail(im, "cannot transpose the weight"), -1;
    int32_t y = emit_matmul(im, x, const_value(im, wt), false, node_name(im, "embed"));
    if (in_name(n, 2)) y = emit2(im, OP_ADD, y, gval(im, in_name(n, 2)), node_name(im, "bias"));
    int64_t pt[3] = {0, 2, 1}, od[4] = {B, O, H, W};
    y = emit_transpose(im, y, pt, 3, node_name(im, "channels"));
    return emit_reshape(im, y, 4, od, node_name(im, NULL));
}

static int32_t binary_op(imp *im, const Onnx__NodeProto *n, graph_op_kind k) {
    oval *ca = cval(im, in_name(n, 0)), *cb = cval(im, in_name(n, 1));
    double s;
    /* x * c and x / c with a scalar c are scales. */
    if (k == OP_MUL && ((cb && cb->c.n == 1) || (ca && ca->c.n == 1))) {
        oval *c = cb && cb->c.n == 1 ? cb : ca;
        s = ct_at(&c->c, 0);
        return emit_scale(im, gval(im, in_name(n, c == cb ? 0 : 1)), s, node_name(im, NULL));
    }
    return emit2(im, k, gval(im, in_name(n, 0)), gval(im, in_name(n, 1)), node_name(im, NULL));
}

static int32_t import_data_op(imp *im, const Onnx__NodeProto *n) {
    const char *op = n->op_type;
    const char *y = n->n_output ? n->output[0] : NULL;
    if (!y) return fail(im, "node has no output"), -1;
    int rank;
    int64_t dim[CT_MAX_RANK];
    if (is_op(n, "Add")) return binary_op(im, n, OP_ADD);
    if (is_op(n, "Sub")) return binary_op(im, n, OP_SUB);
    if (is_op(n, "Mul")) return binary_op(im, n, OP_MUL);
    if (is_op(n, "Div")) {
        oval *cb = cval(im, in_name(n, 1));
        if (!cb) return fail(im, "division by a value computed at run time is not supported"), -1;
        if (cb->c.n == 1) return emit_scale(im, gval(im, in_name(n, 0)), 1.0 / ct_at(&cb->c, 0), node_name(im, NULL));
        ct r = ct_new(im, false, cb->c.rank, cb->c.dim);
        for (int64_t i = 0; i < r.n; i++) r.v[i] = (float)(1.0 / ct_at(&cb->c, i));
        char nm[600];
        snprintf(nm, sizeof nm, "%s.reciprocal", cb->name);
        set_const(im, nm, r);
        return emit2(im, OP_MUL, gval(im, in_name(n, 0)), gval(im, nm), node_name(im, NULL));
    }
    if (is_op(n, "Pow")) {
        double e;
        if (scalar_const(im, in_name(n, 1), &e) && e == 2.0) {
            int32_t x = gval(im, in_name(n, 0));
            return emit2(im, OP_MUL, x, x, node_name(im, NULL));
        }
        if (scalar_const(im, in_name(n, 1), &e) && e == 1.0) return gval(im, in_name(n, 0));
        return fail(im, "Pow is supported with exponent 2 (and inside GeLU and layer-norm patterns)"), -1;
    }
    if (is_op(n, "Identity") || is_op(n, "Dropout")) return gval(im, in_name(n, 0));
    if (is_op(n, "Cast")) {
        int64_t to = attr_int(n, "to", 1);
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ||
            to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE || to == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16)
            return gval(im, in_name(n, 0)); /* precision comes from --precision */
        return fail(im, "a cast of run-time data to an integer type is not supported"), -1;
    }
    if (is_op(n, "MatMul")) {
        int32_t a = gval(im, in_name(n, 0)), b = gval(im, in_name(n, 1));
        if (a < 0 || b < 0) return -1;
        if (gtype(im, a)->rank < 2 || gtype(im, b)->rank < 2) return fail(im, "MatMul of a vector is not supported"), -1;
        return emit_matmul(im, a, b, false, node_name(im, NULL));
    }
    if (is_op(n, "Gemm")) {
        if (attr_int(n, "transA", 0)) return fail(im, "Gemm with transA is not supported"), -1;
        oval *cb = cval(im, in_name(n, 1));
        bool tb = attr_int(n, "transB", 0) != 0;
        int32_t a = gval(im, in_name(n, 0)), b;
        if (cb && tb) {
            oval *t = const_transposed(im, cb);
            if (!t) return fail(im, "Gemm weight must be 2-D"), -1;
            b = const_value(im, t);
            tb = false;
        } else {
            b = gval(im, in_name(n, 1));
        }
        double alpha = attr_float(n, "alpha", 1.0), beta = attr_float(n, "beta", 1.0);
        bool more = alpha != 1.0 || in_name(n, 2);
        int32_t m = emit_matmul(im, a, b, tb, more ? node_name(im, "matmul") : node_name(im, NULL));
        if (alpha != 1.0) m = emit_scale(im, m, alpha, in_name(n, 2) ? node_name(im, "alpha") : node_name(im, NULL));
        if (in_name(n, 2)) {
            int32_t c = gval(im, in_name(n, 2));
            if (beta != 1.0) c = emit_scale(im, c, beta, node_name(im, "beta"));
            m = emit2(im, OP_ADD, m, c, node_name(im, NULL));
        }
        return m;
    }
    if (is_op(n, "Softmax")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0) return -1;
        int64_t ax;
        if (norm_axis(im, attr_int(n, "axis", -1), gtype(im, x)->rank, &ax)) return -1;
        if (im->opset < 13 && ax != gtype(im, x)->rank - 1)
            return fail(im, "Softmax before opset 13 over an inner axis is not supported"), -1;
        int32_t o = graph_begin_op(im->g, OP_SOFTMAX, &x, 1);
        graph_set_int(im->g, o, ATTR_AXIS, ax);
        return finish(im, o, node_name(im, NULL), NULL);
    }
    if (is_op(n, "LayerNormalization")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0) return -1;
        int64_t ax;
        if (norm_axis(im, attr_int(n, "axis", -1), gtype(im, x)->rank, &ax)) return -1;
        if (ax != gtype(im, x)->rank - 1) return fail(im, "LayerNormalization over more than the last axis is not supported"), -1;
        if (n->n_output > 1 && ((n->output[1] && n->output[1][0]) || (n->n_output > 2 && n->output[2] && n->output[2][0])))
            return fail(im, "LayerNormalization's mean and inverse-deviation outputs are not supported"), -1;
        raised rz = {.kind = RZ_LAYER_NORM, .x = in_name(n, 0), .gamma = in_name(n, 1), .beta = in_name(n, 2),
                     .eps = attr_float(n, "epsilon", 1e-5)};
        for (int k = 1; k < 3; k++)
            if (in_name(n, (size_t)k) && !cval(im, in_name(n, (size_t)k)))
                return fail(im, "LayerNormalization with a run-time scale or bias is not supported"), -1;
        int64_t w = gtype(im, x)->dim[ax];
        int32_t gb[2];
        for (int k = 0; k < 2; k++) {
            oval *o = cval(im, k ? rz.beta : rz.gamma);
            if (o && o->c.n != w) return fail(im, "scale and bias must have the width's %lld values", (long long)w), -1;
            if (o) {
                gb[k] = const_value(im, o);
                continue;
            }
            if (w > CT_MAX_FOLD) return fail(im, "a layer norm over %lld values is too wide", (long long)w), -1;
            float *f = keep_add(im->keep, xmalloc(sizeof(float) * (size_t)w), 0, false);
            for (int64_t i = 0; i < w; i++) f[i] = k ? 0.0f : 1.0f;
            const void *data = f;
            graph_init init = {.kind = INIT_DATA, .parts = &data, .nparts = 1};
            gb[k] = graph_result(im->g, graph_add_param(im->g, node_name(im, k ? "beta" : "gamma"), graph_type_make(DT_F32, 1, &w), init), 0);
        }
        int32_t in[3] = {x, gb[0], gb[1]};
        int32_t o = graph_begin_op(im->g, OP_LAYER_NORM, in, 3);
        graph_set_float(im->g, o, ATTR_EPS, (float)rz.eps);
        return finish(im, o, node_name(im, NULL), NULL);
    }
    if (is_op(n, "ReduceMean") || is_op(n, "ReduceSum")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0) return -1;
        const graph_type *t = gtype(im, x);
        int64_t axes[CT_MAX_RANK];
        int na;
        const int64_t *aa = attr_ints(n, "axes", &na);
        if (na >= 0) memcpy(axes, aa, sizeof(int64_t) * (size_t)na);
        else if (in_name(n, 1) && const_ints(im, in_name(n, 1), axes, CT_MAX_RANK, &na)) return -1;
        if (na < 0) {
            na = t->rank;
            for (int i = 0; i < na; i++) axes[i] = i;
        }
        int64_t count = 1;
        for (int i = 0; i < na; i++) {
            if (norm_axis(im, axes[i], t->rank, &axes[i])) return -1;
            count *= t->dim[axes[i]];
        }
        bool mean = op[6] == 'M';
        int32_t o = graph_begin_op(im->g, OP_REDUCE_SUM, &x, 1);
        graph_set_ints(im->g, o, ATTR_AXES, axes, na);
        if (attr_int(n, "keepdims", 1)) graph_set_bool(im->g, o, ATTR_KEEPDIMS, true);
        graph_type decl = {.dtype = DT_F32};
        int32_t s = finish(im, o, node_name(im, mean ? "sum" : NULL), &decl);
        return mean ? emit_scale(im, s, 1.0 / (double)count, node_name(im, NULL)) : s;
    }
    if (is_op(n, "Transpose")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0) return -1;
        int r = gtype(im, x)->rank, np;
        const int64_t *p = attr_ints(n, "perm", &np);
        int64_t perm[GRAPH_MAX_RANK];
        if (np >= 0 && np != r) return fail(im, "perm has %d entries for rank %d", np, r), -1;
        for (int i = 0; i < r; i++) perm[i] = np < 0 ? r - 1 - i : p[i];
        return emit_transpose(im, x, perm, r, node_name(im, NULL));
    }
    if (is_op(n, "Reshape") || is_op(n, "Flatten") || is_op(n, "Squeeze") || is_op(n, "Unsqueeze")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0 || shape_of(im, in_name(n, 0), &rank, dim)) return -1;
        int64_t od[CT_MAX_RANK];
        int orank;
        if (op[0] == 'R') {
            int64_t want[CT_MAX_RANK];
            if (const_ints(im, in_name(n, 1), want, CT_MAX_RANK, &orank) ||
                reshape_dims(im, rank, dim, want, orank, attr_int(n, "allowzero", 0) != 0, od))
                return -1;
        } else if (op[0] == 'F') {
            orank = 2;
            if (flatten_dims(im, n, rank, dim, od)) return -1;
        } else if (squeeze_dims(im, n, op[0] == 'U', rank, dim, &orank, od)) {
            return -1;
        }
        if (orank > GRAPH_MAX_RANK) return fail(im, "result rank %d is above %d", orank, GRAPH_MAX_RANK), -1;
        return emit_reshape(im, x, orank, od, node_name(im, NULL));
    }
    if (is_op(n, "Slice") || is_op(n, "Gather")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0 || shape_of(im, in_name(n, 0), &rank, dim)) return -1;
        int64_t b[CT_MAX_RANK], e[CT_MAX_RANK], s[CT_MAX_RANK];
        if (op[0] == 'S') {
            if (slice_bounds(im, n, rank, dim, b, e, s)) return -1;
            for (int i = 0; i < rank; i++) {
                if (s[i] != 1) return fail(im, "Slice with a step other than 1 is not supported"), -1;
                if (e[i] <= b[i]) return fail(im, "Slice is empty"), -1;
            }
            return emit_slice(im, x, b, e, node_name(im, NULL));
        }
        /* Gather with constant indices: one slice per index, joined. */
        oval *ind = cval(im, in_name(n, 1));
        int64_t ax;
        if (!ind) return fail(im, "Gather with run-time indices is not supported"), -1;
        if (norm_axis(im, attr_int(n, "axis", 0), rank, &ax)) return -1;
        if (ind->c.n > 64 || ind->c.n < 1 || ind->c.rank > 1) return fail(im, "Gather of more than 64 or of 2-D indices is not supported"), -1;
        int32_t parts[64];
        for (int64_t j = 0; j < ind->c.n; j++) {
            int64_t q = to_i64(ct_at(&ind->c, j));
            if (q < 0) q += dim[ax];
            if (q < 0 || q >= dim[ax]) return fail(im, "Gather index %lld is out of range", (long long)q), -1;
            for (int i = 0; i < rank; i++) {
                b[i] = 0;
                e[i] = dim[i];
            }
            b[ax] = q;
            e[ax] = q + 1;
            parts[j] = emit_slice(im, x, b, e, node_name(im, "slice"));
        }
        int32_t v = emit_concat(im, parts, (int)ind->c.n, ax, ind->c.n > 1 ? node_name(im, "join") : NULL);
        if (ind->c.rank == 1) return emit_reshape(im, v, rank, gtype(im, v)->dim, node_name(im, NULL));
        int64_t od[CT_MAX_RANK];
        int k = 0;
        for (int i = 0; i < rank; i++)
            if (i != ax) od[k++] = dim[i];
        return emit_reshape(im, v, k, od, node_name(im, NULL));
    }
    if (is_op(n, "Concat")) {
        int32_t xs[64];
        if (n->n_input > 64 || n->n_input < 1) return fail(im, "Concat of %zu values is not supported", n->n_input), -1;
        for (size_t i = 0; i < n->n_input; i++) xs[i] = gval(im, in_name(n, i));
        if (im->err) return -1;
        int64_t ax;
        if (norm_axis(im, attr_int(n, "axis", 0), gtype(im, xs[0])->rank, &ax)) return -1;
        return emit_concat(im, xs, (int)n->n_input, ax, node_name(im, NULL));
    }
    if (is_op(n, "Split")) {
        int32_t x = gval(im, in_name(n, 0));
        if (x < 0 || shape_of(im, in_name(n, 0), &rank, dim)) return -1;
        int64_t ax, sizes[64];
        int ns;
        if (norm_axis(im, attr_int(n, "axis", 0), rank, &ax)) return -1;
        const int64_t *sa = attr_ints(n, "split", &ns);
        if (ns >= 0) {
            if (ns > 64) return fail(im, "too many splits"), -1;
            memcpy(sizes, sa, sizeof(int64_t) * (size_t)ns);
        } else if (in_name(n, 1)) {
            if (const_ints(im, in_name(n, 1), sizes, 64, &ns)) return -1;
        } else {
            ns = (int)n->n_output;
            if (ns < 1 || ns > 64 || dim[ax] % ns) return fail(im, "Split into %d equal parts of %lld", ns, (long long)dim[ax]), -1;
            for (int i = 0; i < ns; i++) sizes[i] = dim[ax] / ns;
        }
        if ((size_t)ns != n->n_output) return fail(im, "Split sizes do not match its %zu outputs", n->n_output), -1;
        int64_t at = 0, b[CT_MAX_RANK], e[CT_MAX_RANK];
        for (int i = 0; i < ns; i++) {
            for (int k = 0; k < rank; k++) {
                b[k] = 0;
                e[k] = dim[k];
            }
            if (sizes[i] <= 0 || sizes[i] > dim[ax] - at) return fail(im, "Split sizes exceed the axis"), -1;
            b[ax] = at;
            e[ax] = at + sizes[i];
            at += sizes[i];
            const char *nm = gname(im, n->output[i], NULL);
            set_graph(im, n->output[i], emit_slice(im, x, b, e, nm));
        }
        return -2; /* outputs set */
    }
    if (is_op(n, "Expand")) {
        int32_t x = gval(im, in_name(n, 0));
        int64_t want[CT_MAX_RANK], od[CT_MAX_RANK];
        int nw, r;
        if (x < 0 || shape_of(im, in_name(n, 0), &rank, dim) || const_ints(im, in_name(n, 1), want, CT_MAX_RANK, &nw) ||
            bcast_shape(im, rank, dim, nw, want, &r, od))
            return -1;
        if (r > GRAPH_MAX_RANK) return fail(im, "Expand to rank %d (at most %d)", r, GRAPH_MAX_RANK), -1;
        /* Lift to the result rank, then repeat every stretched axis by concatenation. */
        int64_t lifted[CT_MAX_RANK];
        for (int i = 0; i < r; i++) lifted[i] = i < r - rank ? 1 : dim[i - (r - rank)];
        x = emit_reshape(im, x, r, lifted, r != rank ? node_name(im, "lift") : NULL);
        for (int i = 0; i < r && !im->err; i++) {
            if (lifted[i] == od[i]) continue;
            if (od[i] > 64) return fail(im, "Expand of run-time data by more than 64 is not supported"), -1;
            TS_ASSERT(lifted[i] == 1 && od[i] >= 0); /* bcast_shape: only size-1 axes stretch, nothing negative */
            if (od[i] == 0) return fail(im, "Expand of run-time data to an empty axis is not supported"), -1;
            int32_t xs[64];
            for (int k = 0; k < od[i]; k++) xs[k] = x;
            x = emit_concat(im, xs, (int)od[i], i, node_name(im, "repeat"));
        }
        return x;
    }
    if (is_op(n, "Conv")) return conv_patches(im, n);
    return fail(im, "op is not supported"), -1;
}

/* ---- the model ------------------------------------------------------------------ */

static int import_inputs(imp *im) {
    for (size_t i = 0; i < im->gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = im->gp->input[i];
        if (!vi->name) return fail(im, "graph input without a name");
        if (val_get(im, vi->name)) continue; /* an initializer listed as input */
        const Onnx__TypeProto *tp = vi->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type->shape)
            return fail(im, "input '%s' has no tensor type with a shape", vi->name);
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        if (tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16)
            return fail(im, "input '%s' has element type %d; only float inputs are supported", vi->name, tt->elem_type);
        int64_t dim[GRAPH_MAX_RANK];
        if (tt->shape->n_dim > GRAPH_MAX_RANK) return fail(im, "input '%s' has rank %zu (at most %d)", vi->name, tt->shape->n_dim, GRAPH_MAX_RANK);
        for (size_t k = 0; k < tt->shape->n_dim; k++) {
            const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[k];
            if (dm->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE || dm->dim_value < 1 ||
                dm->dim_value > GRAPH_MAX_DIM)
                return fail(im, "input '%s' axis %zu has no fixed size (%s): export with fixed shapes", vi->name, k,
                            dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dm->dim_param : "unknown");
            dim[k] = dm->dim_value;
        }
        int32_t op = graph_add_input(im->g, gname(im, vi->name, NULL), graph_type_make(DT_F32, (int)tt->shape->n_dim, dim));
        set_graph(im, vi->name, graph_result(im->g, op, 0));
    }
    return im->err ? -1 : 0;
}

static int import_nodes(imp *im) {
    for (size_t i = 0; i < im->gp->n_node && !im->err; i++) {
        const Onnx__NodeProto *n = im->gp->node[i];
        im->cur = n;
        if (!n->op_type) return fail(im, "node without an op type");
        if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) return fail(im, "op domain '%s' is not supported", n->domain);
        const raised *rz = &im->rz[i];
        if (rz->kind == RZ_ABSORBED) continue;
        if (rz->kind != RZ_NONE) {
            set_graph(im, n->output[0], gelu_or_ln(im, rz));
            continue;
        }
        int rc = try_fold(im, n);
        if (rc < 0) return -1;
        if (rc > 0) continue;
        for (size_t k = 0; k < n->n_input; k++)
            if (in_name(n, k) && !val_get(im, in_name(n, k))) return fail(im, "input '%s' is not defined before its use", in_name(n, k));
        int32_t v = import_data_op(im, n);
        if (v == -2) continue;
        if (v < 0) return fail(im, "cannot import"), -1;
        if (n->n_output != 1 && !(is_op(n, "Dropout") || is_op(n, "LayerNormalization")))
            return fail(im, "%zu outputs are not supported", n->n_output);
        set_graph(im, n->output[0], v);
    }
    im->cur = NULL;
    if (im->err) return -1;
    int32_t outs[64];
    if (im->gp->n_output < 1 || im->gp->n_output > 64) return fail(im, "the graph has %zu outputs (1 to 64)", im->gp->n_output);
    for (size_t i = 0; i < im->gp->n_output; i++) {
        const char *nm = im->gp->output[i]->name;
        oval *o = nm ? val_get(im, nm) : NULL;
        if (!o) return fail(im, "output '%s' is never computed", nm ? nm : "");
        if (o->is_const) return fail(im, "output '%s' is a constant; tessel compiles computations", nm);
        /* Outputs are named as in the model (files NAME.npy), so the last op
         * producing one is renamed after it when that name is free. */
        outs[i] = o->gv;
    }
    graph_add_output(im->g, outs, (int32_t)im->gp->n_output);
    return 0;
}

/* protobuf-c's memory through the one allocation path (counted by the
 * allocation-failure build; out of memory is the command's clean exit). */
static void *pb_alloc(void *ctx, size_t bytes) { return (void)ctx, xmalloc(bytes); }
static void pb_free(void *ctx, void *p) { (void)ctx, free(p); }
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

graph *models_onnx_import_buffer(const char *path, const uint8_t *data, size_t len, models_keep *keep, FILE *report,
                                 diag *d) {
    double t0 = util_now_seconds();
    imp im = {.path = path, .keep = keep, .d = d};
    arena_init(&im.a);
    char *dir = path_dirname(path);
    im.dir = dir;
    scan s = {.path = path, .a = &im.a, .d = d};
    bytebuf stripped = {0};
    graph *g = NULL;
    if (strip_model(&s, data, len, &stripped)) goto done;
    im.m = onnx__model_proto__unpack(&pb_allocator, stripped.n, stripped.p ? stripped.p : (const uint8_t *)"");
    if (!im.m) {
        diag_fail(d, "%s: error: truncated or corrupt ONNX file (protobuf-c could not decode it)", path);
        goto done;
    }
    im.gp = im.m->graph;
    if (!im.gp) {
        diag_fail(d, "%s: error: not an ONNX model (no graph)", path);
        goto done;
    }
    for (size_t i = 0; i < im.m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = im.m->opset_import[i];
        if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0) im.opset = o->version;
    }
    if (im.opset < 13 || im.opset > 17) {
        diag_fail(d, "%s: error: opset %lld; tessel imports opsets 13 to 17", path, (long long)im.opset);
        goto done;
    }
    if ((size_t)s.raws.n != im.gp->n_initializer) {
        diag_fail(d, "%s: error: truncated or corrupt ONNX file (initializer count)", path);
        goto done;
    }
    im.g = graph_new(im.gp->name && im.gp->name[0] ? im.gp->name : "onnx", path);
    for (size_t i = 0; i < im.gp->n_initializer; i++) {
        const Onnx__TensorProto *t = im.gp->initializer[i];
        ct c;
        if (!t->name) {
            fail(&im, "initializer %zu has no name", i);
            goto done;
        }
        if (tensor_ct(&im, t, &s.raws.v[i], &c)) goto done;
        set_const(&im, t->name, c);
    }
    /* Producers and use counts for the pattern matcher. */
    for (size_t i = 0; i < im.gp->n_node; i++) {
        const Onnx__NodeProto *n = im.gp->node[i];
        for (size_t k = 0; k < n->n_output; k++)
            if (n->output[k] && n->output[k][0]) strmap_put(&im.producer, n->output[k], (int32_t)i);
        for (size_t k = 0; k < n->n_input; k++) {
            if (!n->input[k] || !n->input[k][0]) continue;
            int32_t c = 0; /* keys point into the unpacked model, which outlives the maps */
            strmap_get(&im.uses, n->input[k], &c);
            strmap_put(&im.uses, n->input[k], c + 1);
        }
    }
    for (size_t i = 0; i < im.gp->n_output; i++) {
        const char *nm = im.gp->output[i]->name;
        if (!nm) continue;
        int32_t c = 0;
        strmap_get(&im.uses, nm, &c);
        strmap_put(&im.uses, nm, c + 1);
        strmap_put(&im.outputs, nm, (int32_t)i);
    }
    /* Constant nodes first, so patterns can read their scalars. */
    for (size_t i = 0; i < im.gp->n_node; i++)
        if (is_op(im.gp->node[i], "Constant")) {
            im.cur = im.gp->node[i];
            if (try_fold(&im, im.gp->node[i]) < 0) goto done;
        }
    im.cur = NULL;
    im.rz = arena_alloc(&im.a, sizeof(raised) * (im.gp->n_node + 1));
    raise_patterns(&im);
    if (import_inputs(&im) || import_nodes(&im)) goto done;
    if (graph_verify(im.g, d)) goto done;
    if (report) {
        int folded = 0, gelus = 0, norms = 0, ops = 0;
        for (size_t i = 0; i < im.gp->n_node; i++) {
            gelus += im.rz[i].kind == RZ_GELU_ERF || im.rz[i].kind == RZ_GELU_TANH;
            norms += im.rz[i].kind == RZ_LAYER_NORM;
        }
        for (int32_t i = 0; i < im.vals.n; i++) folded += im.vals.v[i].is_const;
        for (int32_t i = 0; i < im.g->ops.n; i++) ops += !graph_op_infos[graph_opr(im.g, i)->kind].structural;
        fprintf(report, "%s: %zu nodes (opset %lld), %zu initializers: %d constants computed at import, %d GeLU and %d layer-norm patterns raised, %d graph ops (%.2f s)\n",
                path, im.gp->n_node, (long long)im.opset, im.gp->n_initializer, folded - (int)im.gp->n_initializer, gelus, norms, ops,
                util_now_seconds() - t0);
    }
    g = im.g;
    im.g = NULL;
done:
    if (im.g) graph_free(im.g);
    if (im.m) onnx__model_proto__free_unpacked(im.m, &pb_allocator);
    free(stripped.p);
    free(dir);
    strmap_free(&im.names);
    strmap_free(&im.producer);
    strmap_free(&im.uses);
    strmap_free(&im.outputs);
    strmap_free(&im.ext);
    arena_free(&im.a);
    return g;
}

graph *models_onnx_import(const char *path, FILE *report, diag *d) {
    models_keep *keep = models_keep_new();
    const uint8_t *data;
    size_t len;
    if (map_file(path, keep, &data, &len, d)) {
        models_keep_free(keep);
        return NULL;
    }
    graph *g = models_onnx_import_buffer(path, data, len, keep, report, d);
    if (!g) {
        models_keep_free(keep);
        return NULL;
    }
    g->keep = keep;
    g->keep_free = models_keep_free;
    return g;
}

models_keep *models_keep_new(void) { return xcalloc(1, sizeof(models_keep)); }
