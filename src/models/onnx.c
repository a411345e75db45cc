/* onnx.c: ONNX models exported by PyTorch (torch.onnx.export, opsets 13 to
 * 17), imported as flat f32 graphs that reroll.c then raises and types.
 *
 *   file ─mmap─► wire scan: initializer raw_data left in the map, the rest
 *                copied into a small stripped message
 *        ─protobuf-c─► ModelProto (no weight bytes in it)
 *        ─patterns─►   decomposed GeLU / LayerNorm marked on nodes (onnx_patterns.c)
 *        ─import─►     per node, through its row of the op table (onnx_ops.c):
 *                      constants folded (shape chains, onnx_const.c), or graph
 *                      ops built in f32 with stable names from the node names
 *
 * This file reads the file and walks the model: initializers, inputs, nodes,
 * outputs. Weights never pass through protobuf-c, which copies every bytes
 * field: data() parameters point into the memory maps, which the graph keeps. */
#define _POSIX_C_SOURCE 200809L
#include "onnx_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "data() parameters are little-endian f32 read in place: a big-endian host needs byte swaps"
#endif

/* ---- keep: what data() parameters point into ------------------------------ */

void *ox_keep_add(models_keep *k, void *p, size_t bytes, bool mapped) {
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
    ox_keep_add(k, p, *len, true);
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

/* ---- errors and values ------------------------------------------------------------ */

int ox_fail(imp *im, const char *fmt, ...) {
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

oval *ox_val_get(imp *im, const char *name) {
    int32_t k;
    return name && strmap_get(&im->names, name, &k) ? &im->vals.v[k] : NULL;
}

static oval *val_put(imp *im, const char *name) {
    int32_t k;
    if (strmap_get(&im->names, name, &k)) return &im->vals.v[k];
    const char *key = arena_strdup(&im->a, name);
    vec_push(&im->a, &im->vals, ((oval){.name = key, .gv = -1, .rows = -1}));
    strmap_put(&im->names, key, im->vals.n - 1);
    return &im->vals.v[im->vals.n - 1];
}

void ox_set_const(imp *im, const char *name, ct c) {
    oval *o = val_put(im, name);
    o->is_const = true;
    o->c = c;
    o->gv = o->rows = -1;
}

void ox_set_graph(imp *im, const char *name, int32_t v) {
    if (im->err || v < 0) return;
    oval *o = val_put(im, name);
    o->is_const = false;
    o->gv = v;
    o->rows = -1;
}

void ox_set_rows(imp *im, const char *name, int32_t rows, int rank, const int64_t *dim, const char *back_name) {
    if (im->err || rows < 0) return;
    oval *o = val_put(im, name);
    o->is_const = false;
    o->gv = -1;
    o->rows = rows;
    o->back_rank = rank;
    memcpy(o->back_dim, dim, sizeof(int64_t) * (size_t)rank);
    o->back_name = arena_strdup(&im->a, back_name);
}

oval *ox_cval(imp *im, const char *name) {
    oval *o = name ? ox_val_get(im, name) : NULL;
    return o && o->is_const ? o : NULL;
}

bool ox_scalar_const(imp *im, const char *name, double *v) {
    oval *o = name ? ox_val_get(im, name) : NULL;
    if (!o || !o->is_const || o->c.n != 1) return false;
    *v = ct_at(&o->c, 0);
    return true;
}

int ox_shape_of(imp *im, const char *name, int *rank, int64_t *dim) {
    oval *o = name ? ox_val_get(im, name) : NULL;
    if (!o) return ox_fail(im, "input '%s' is not defined before its use", name ? name : "(missing)");
    if (o->is_const) {
        *rank = o->c.rank;
        memcpy(dim, o->c.dim, sizeof(int64_t) * (size_t)o->c.rank);
    } else if (ox_waits_as_rows(o)) {
        *rank = o->back_rank;
        memcpy(dim, o->back_dim, sizeof(int64_t) * (size_t)o->back_rank);
    } else {
        const graph_type *t = ox_gtype(im, o->gv);
        *rank = t->rank;
        memcpy(dim, t->dim, sizeof(int64_t) * (size_t)t->rank);
    }
    return 0;
}

int ox_const_ints(imp *im, const char *name, int64_t *out, int cap, int *n) {
    oval *o = ox_cval(im, name);
    if (!o) return ox_fail(im, "input '%s' must be a constant (its value does not infer at import)", name ? name : "(missing)");
    if (o->c.n > cap) return ox_fail(im, "input '%s' has %lld values (at most %d)", name, (long long)o->c.n, cap);
    for (int64_t i = 0; i < o->c.n; i++) {
        out[i] = to_i64(ct_at(&o->c, i));
    }
    *n = (int)o->c.n;
    return 0;
}

int ox_norm_axis(imp *im, int64_t axis, int rank, int64_t *out) {
    *out = 0;
    if (axis < -rank || axis >= (rank ? rank : 1)) return ox_fail(im, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = axis < 0 ? axis + rank : axis;
    return 0;
}

/* ---- tensors: initializers and Constant values ---------------------------------- */

/* External data (data_location = EXTERNAL): a range of a file beside the
 * model, mapped once per file. */
static int tensor_external(imp *im, const Onnx__TensorProto *t, const char *tn, const uint8_t **bytes, size_t *nbytes) {
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
        return ox_fail(im, "tensor '%s': external data needs a relative location inside the model's folder", tn);
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
        ox_fail(im, "tensor '%s': external data file %s: %s", tn, p, why ? why + 7 : md.text);
        free(p);
        return -1;
    }
    if (off < 0 || (uint64_t)off > flen || (len >= 0 && (uint64_t)len > flen - (uint64_t)off)) {
        ox_fail(im, "tensor '%s': external data range is outside %s (%zu bytes)", tn, p, flen);
        free(p);
        return -1;
    }
    free(p);
    *bytes = data + off;
    *nbytes = len >= 0 ? (size_t)len : flen - (size_t)off;
    return 0;
}

/* Bytes an element of ONNX data type dt takes in raw data; 0: not supported. */
static size_t elem_bytes(int dt) {
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: return 2;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: return 1;
    default: return 0;
    }
}

/* c's values decoded from little-endian raw bytes of type dt. */
static void decode_raw(imp *im, ct *c, int dt, const uint8_t *bytes, size_t esize) {
    c->v = arena_alloc(&im->a, sizeof(double) * (size_t)(c->n ? c->n : 1));
    for (int64_t i = 0; i < c->n; i++) {
        const uint8_t *q = bytes + (size_t)i * esize;
        switch (dt) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: { float f; memcpy(&f, q, 4); c->v[i] = f; break; }
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: { double f; memcpy(&f, q, 8); c->v[i] = f; break; }
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: { uint16_t h; memcpy(&h, q, 2); float f; num_decode_buf(DT_F16, 0, &h, &f, 1); c->v[i] = f; break; }
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: { int64_t x; memcpy(&x, q, 8); c->v[i] = (double)x; break; }
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: { int32_t x; memcpy(&x, q, 4); c->v[i] = x; break; }
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: c->v[i] = (int8_t)*q; break;
        default: c->v[i] = *q; break;
        }
    }
}


/* An ONNX element type by its name in onnx.proto, lower case ("int64"),
 * for messages; its number when onnx.proto has no such type. */
static const char *ox_type_name(int t, char buf[32]) {
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&onnx__tensor_proto__data_type__descriptor, t);
    if (!v) {
        snprintf(buf, 32, "%d", t);
        return buf;
    }
    size_t i = 0;
    for (; v->name[i] && i < 31; i++) buf[i] = (char)tolower((unsigned char)v->name[i]);
    buf[i] = 0;
    return buf;
}

/* c's values from the typed fields (float_data, int64_data, ...). */
static int decode_typed(imp *im, const Onnx__TensorProto *t, const char *tn, int dt, ct *c) {
    size_t have;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: have = t->n_float_data; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: have = t->n_double_data; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: have = t->n_int64_data; break;
    default: have = t->n_int32_data; break;
    }
    if (have != (size_t)c->n) return ox_fail(im, "tensor '%s' holds %zu values for %lld elements", tn, have, (long long)c->n);
    c->v = arena_alloc(&im->a, sizeof(double) * (size_t)(c->n ? c->n : 1));
    for (int64_t i = 0; i < c->n; i++) {
        switch (dt) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: c->v[i] = t->float_data[i]; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: c->v[i] = t->double_data[i]; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: c->v[i] = (double)t->int64_data[i]; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: {
            uint16_t h = (uint16_t)t->int32_data[i];
            float f;
            num_decode_buf(DT_F16, 0, &h, &f, 1);
            c->v[i] = f;
            break;
        }
        default: c->v[i] = t->int32_data[i]; break;
        }
    }
    return 0;
}

/* f32 raw data in a map stays in place. */
int ox_tensor_ct(imp *im, const Onnx__TensorProto *t, const raw_ref *raw, ct *out) {
    const char *tn = t->name ? t->name : "";
    if (t->n_dims > CT_MAX_RANK) return ox_fail(im, "tensor '%s' has rank %zu (at most %d)", tn, t->n_dims, CT_MAX_RANK);
    ct c = {.rank = (int)t->n_dims, .n = 1};
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || t->dims[i] > GRAPH_MAX_DIM) return ox_fail(im, "tensor '%s' has a bad dimension", tn);
        c.dim[i] = t->dims[i];
        if (c.dim[i] && c.n > GRAPH_MAX_NUMEL / c.dim[i]) return ox_fail(im, "tensor '%s' is too large", tn);
        c.n *= c.dim[i];
    }
    int dt = t->data_type;
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    bool have_raw = false;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        if (tensor_external(im, t, tn, &bytes, &nbytes)) return -1;
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
    size_t esize = elem_bytes(dt);
    char tname[32];
    if (esize == 0) return ox_fail(im, "tensor '%s' has data type %s, which is not supported", tn, ox_type_name(dt, tname));
    c.is_int = !(dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ||
                 dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
    if (!have_raw) {
        if (decode_typed(im, t, tn, dt, &c)) return -1;
        *out = c;
        return 0;
    }
    if (nbytes != (size_t)c.n * esize)
        return ox_fail(im, "tensor '%s' holds %zu bytes of data for %lld elements", tn, nbytes, (long long)c.n);
    if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && nbytes > 4096 && ((raw && raw->set) || t->has_data_location))
        c.raw = bytes; /* weights stay in the map (Constant nodes live in the decoded message: decoded) */
    else
        decode_raw(im, &c, dt, bytes, esize);
    *out = c;
    return 0;
}

/* ---- the model ------------------------------------------------------------------ */

static int import_inputs(imp *im) {
    for (size_t i = 0; i < im->gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = im->gp->input[i];
        if (!vi->name) return ox_fail(im, "graph input without a name");
        if (ox_val_get(im, vi->name)) continue; /* an initializer listed as input */
        const Onnx__TypeProto *tp = vi->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type->shape)
            return ox_fail(im, "input '%s' has no tensor type with a shape", vi->name);
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        char tname[32];
        bool ints = tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 || tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
        if (tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && tt->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 && !ints)
            return ox_fail(im, "input '%s' has element type %s; only float and integer (int64, int32) inputs are supported",
                           vi->name, ox_type_name(tt->elem_type, tname));
        int64_t dim[GRAPH_MAX_RANK];
        if (tt->shape->n_dim > GRAPH_MAX_RANK) return ox_fail(im, "input '%s' has rank %zu (at most %d)", vi->name, tt->shape->n_dim, GRAPH_MAX_RANK);
        for (size_t k = 0; k < tt->shape->n_dim; k++) {
            const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[k];
            if (dm->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE || dm->dim_value < 1 ||
                dm->dim_value > GRAPH_MAX_DIM)
                return ox_fail(im, "input '%s' axis %zu has no fixed size (%s): export with fixed shapes", vi->name, k,
                            dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dm->dim_param : "unknown");
            dim[k] = dm->dim_value;
        }
        /* Integer inputs (token ids) enter as i32: int64 data narrows exactly or is refused at the host. */
        int32_t op = graph_add_input(im->g, ox_gname(im, vi->name, NULL), graph_type_make(ints ? DT_I32 : DT_F32, (int)tt->shape->n_dim, dim));
        ox_set_graph(im, vi->name, graph_result(im->g, op, 0));
    }
    return im->err ? -1 : 0;
}

/* One node: inside a pattern (nothing), a pattern's end, a constant computed
 * at import, or graph ops from its importer. Its op type is looked up once. */
static int import_node(imp *im, size_t i) {
    const Onnx__NodeProto *n = im->gp->node[i];
    im->cur = n;
    if (!n->op_type) return ox_fail(im, "node without an op type");
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) return ox_fail(im, "op domain '%s' is not supported", n->domain);
    const raised *rz = &im->rz[i];
    if (rz->kind == RZ_ABSORBED) return 0;
    if (rz->kind != RZ_NONE) {
        int32_t v = ox_import_raised(im, rz);
        if (v != -2) ox_set_graph(im, n->output[0], v); /* -2: the output waits as rows (unary_on_rows) */
        return 0;
    }
    const ox_op *row = ox_op_find(n->op_type);
    int rc = fold_const(im, row, n);
    if (rc != 0) return rc < 0 ? -1 : 0;
    for (size_t k = 0; k < n->n_input; k++)
        if (in_name(n, k) && !ox_val_get(im, in_name(n, k))) return ox_fail(im, "input '%s' is not defined before its use", in_name(n, k));
    int32_t v = ox_import_node(im, row, n);
    if (v == -2) return 0;
    if (v < 0) return ox_fail(im, "cannot import"), -1;
    if (n->n_output != 1 && row->outs != OUT_ANY) return ox_fail(im, "%zu outputs are not supported", n->n_output);
    ox_set_graph(im, n->output[0], v);
    return 0;
}

/* Every node whose op the importer does not know, at once: the op types,
 * each with its count and first node, in the order they first appear. */
static int unknown_ops(imp *im) {
    const char *types[64];
    int count[64], ntypes = 0, nodes = 0;
    size_t first[64];
    for (size_t i = 0; i < im->gp->n_node; i++) {
        const Onnx__NodeProto *n = im->gp->node[i];
        bool foreign = n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0;
        if (!n->op_type || (!foreign && ox_op_find(n->op_type))) continue;
        nodes++;
        int t = 0;
        while (t < ntypes && strcmp(types[t], n->op_type) != 0) t++;
        if (t == ntypes && ntypes < 64) types[ntypes] = n->op_type, count[ntypes] = 0, first[ntypes] = i, ntypes++;
        if (t < ntypes) count[t]++;
    }
    if (!nodes) return 0;
    char list[1536] = "";
    size_t at = 0;
    for (int t = 0; t < ntypes && at < sizeof list; t++) {
        const Onnx__NodeProto *n = im->gp->node[first[t]];
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s%s%s (%d node%s, first '%s')", t ? ", " : "",
                               n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0 ? n->domain : "",
                               n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0 ? "." : "", types[t], count[t],
                               count[t] == 1 ? "" : "s", n->name && n->name[0] ? n->name : "(unnamed)");
    }
    return ox_fail(im, "%d node%s use%s ops tessel does not import: %s", nodes, nodes == 1 ? "" : "s", nodes == 1 ? "s" : "", list);
}

static int import_nodes(imp *im) {
    if (unknown_ops(im)) return -1;
    for (size_t i = 0; i < im->gp->n_node && !im->err; i++)
        if (import_node(im, i)) return -1;
    im->cur = NULL;
    if (im->err) return -1;
    int32_t outs[64];
    if (im->gp->n_output < 1 || im->gp->n_output > 64) return ox_fail(im, "the graph has %zu outputs (1 to 64)", im->gp->n_output);
    for (size_t i = 0; i < im->gp->n_output; i++) {
        const char *nm = im->gp->output[i]->name;
        oval *o = nm ? ox_val_get(im, nm) : NULL;
        if (!o) return ox_fail(im, "output '%s' is never computed", nm ? nm : "");
        if (o->is_const) return ox_fail(im, "output '%s' is a constant; tessel compiles computations", nm);
        /* Outputs are named as in the model (files NAME.npy), so the last op
         * producing one is renamed after it when that name is free. */
        outs[i] = ox_gval(im, nm);
    }
    if (im->err) return -1;
    graph_add_output(im->g, outs, (int32_t)im->gp->n_output);
    return 0;
}

/* Initializers as constants: raws[i] is initializer i's raw_data in the map. */
static int import_initializers(imp *im, const raw_ref *raws) {
    for (size_t i = 0; i < im->gp->n_initializer; i++) {
        const Onnx__TensorProto *t = im->gp->initializer[i];
        ct c;
        if (!t->name) return ox_fail(im, "initializer %zu has no name", i);
        if (ox_tensor_ct(im, t, &raws[i], &c)) return -1;
        ox_set_const(im, t->name, c);
    }
    return 0;
}

/* Producers and use counts for the pattern matcher; graph outputs count as uses. */
static void index_nodes(imp *im) {
    for (size_t i = 0; i < im->gp->n_node; i++) {
        const Onnx__NodeProto *n = im->gp->node[i];
        for (size_t k = 0; k < n->n_output; k++)
            if (n->output[k] && n->output[k][0]) strmap_put(&im->producer, n->output[k], (int32_t)i);
        for (size_t k = 0; k < n->n_input; k++) {
            if (!n->input[k] || !n->input[k][0]) continue;
            int32_t c = 0; /* keys point into the unpacked model, which outlives the maps */
            strmap_get(&im->uses, n->input[k], &c);
            strmap_put(&im->uses, n->input[k], c + 1);
        }
    }
    for (size_t i = 0; i < im->gp->n_output; i++) {
        const char *nm = im->gp->output[i]->name;
        if (!nm) continue;
        int32_t c = 0;
        strmap_get(&im->uses, nm, &c);
        strmap_put(&im->uses, nm, c + 1);
        strmap_put(&im->outputs, nm, (int32_t)i);
    }
}

/* Constant nodes first, so patterns can read their scalars. */
static int fold_constant_nodes(imp *im) {
    for (size_t i = 0; i < im->gp->n_node; i++)
        if (is_op(im->gp->node[i], "Constant")) {
            im->cur = im->gp->node[i];
            if (fold_const(im, &ox_ops[OX_Constant], im->gp->node[i]) < 0) return -1;
        }
    im->cur = NULL;
    return 0;
}

static void report_import(imp *im, FILE *report, double t0) {
    int folded = 0, gelus = 0, norms = 0, ops = 0;
    for (size_t i = 0; i < im->gp->n_node; i++) {
        gelus += im->rz[i].kind == RZ_GELU_ERF || im->rz[i].kind == RZ_GELU_TANH;
        norms += im->rz[i].kind == RZ_LAYER_NORM;
    }
    for (int32_t i = 0; i < im->vals.n; i++) folded += im->vals.v[i].is_const;
    for (int32_t i = 0; i < im->g->ops.n; i++) ops += !graph_op_infos[graph_opr(im->g, i)->kind].structural;
    fprintf(report, "%s: %zu nodes (opset %lld), %zu initializers: %d constants computed at import, %d GeLU and %d layer-norm patterns raised, %d graph ops (%.2f s)\n",
            im->path, im->gp->n_node, (long long)im->opset, im->gp->n_initializer, folded - (int)im->gp->n_initializer, gelus, norms, ops,
            util_now_seconds() - t0);
}

/* protobuf-c's memory through the one allocation path (counted by the
 * allocation-failure build; out of memory is the command's clean exit). */
static void *pb_alloc(void *ctx, size_t bytes) { return (void)ctx, xmalloc(bytes); }
static void pb_free(void *ctx, void *p) { (void)ctx, free(p); }
static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

/* The stripped message decoded, its opset checked: 0, or -1 with d set. */
static int decode_model(imp *im, const scan *s, const bytebuf *stripped) {
    const char *path = im->path;
    im->m = onnx__model_proto__unpack(&pb_allocator, stripped->n, stripped->p ? stripped->p : (const uint8_t *)"");
    if (!im->m) return diag_fail(im->d, "%s: error: truncated or corrupt ONNX file (protobuf-c could not decode it)", path);
    im->gp = im->m->graph;
    if (!im->gp) return diag_fail(im->d, "%s: error: not an ONNX model (no graph)", path);
    for (size_t i = 0; i < im->m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = im->m->opset_import[i];
        if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0) im->opset = o->version;
    }
    if (im->opset < 13 || im->opset > 17)
        return diag_fail(im->d, "%s: error: opset %lld; tessel imports opsets 13 to 17", path, (long long)im->opset);
    if ((size_t)s->raws.n != im->gp->n_initializer)
        return diag_fail(im->d, "%s: error: truncated or corrupt ONNX file (initializer count)", path);
    return 0;
}

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
    if (strip_model(&s, data, len, &stripped) || decode_model(&im, &s, &stripped)) goto done;
    im.g = graph_new(im.gp->name && im.gp->name[0] ? im.gp->name : "onnx", path);
    if (import_initializers(&im, s.raws.v)) goto done;
    index_nodes(&im);
    if (fold_constant_nodes(&im)) goto done;
    im.rz = arena_alloc(&im.a, sizeof(raised) * (im.gp->n_node + 1));
    ox_find_patterns(&im);
    if (import_inputs(&im) || import_nodes(&im)) goto done;
    if (graph_verify(im.g, d)) goto done;
    if (report) report_import(&im, report, t0);
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
