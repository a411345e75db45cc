/* parse.c: reads the mid text form print.c writes (docs/ir.md, "Mid text")
 * back into the same program: the graph first (graph_parse, up to the
 * separator line), then the program, line by line. Every reference is
 * checked when it is read (tensor handles, graph values and ops by name,
 * prim ids in range, each prim defined once), so what parses prints; the
 * program's structure is mid_verify's business. Errors are located
 * (path:line:col) and free everything made so far. */
#include "mid.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_NEST = 64 }; /* repeats open inside each other: bounds the recursion */

/* A tensor reference in the header that may point forward (slice_of, alias_of). */
typedef struct pending_ref {
    int32_t tensor;
    bool alias;            /* alias_of, else slice_of */
    const char *key;       /* the handle */
    const char *where;
} pending_ref;

typedef struct mparser {
    const char *s, *end, *p;  /* whole text (NUL-terminated copy), its end, cursor */
    src_text src;
    diag *d;
    graph *g;
    const machine *m;
    mid_program *out;
    strmap handles;           /* tensor handle -> id */
    VEC(pending_ref) pending;
    bool *seen;               /* per prim id: defined by a line */
    int32_t ntensors;         /* tensors announced */
    int32_t *noresult[OP_COUNT]; /* per op kind: its ops without results, id order (op refs kind:k) */
    int32_t nnoresult[OP_COUNT];
} mparser;

/* ---- positions, errors, tokens ------------------------------------------------ */

static int fail_at(mparser *ps, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(mparser *ps, const char *at, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    src_line_col(&ps->src, (size_t)(at - ps->s), &line, &col);
    return diag_fail_at(ps->d, &ps->src, line, col, "%s", msg);
}

static const char *found(mparser *ps, char *buf, size_t cap) {
    const char *p = ps->p;
    if (p >= ps->end) return "end of file";
    if (*p == '\n') return "end of line";
    size_t n = 0;
    while (p + n < ps->end && n < 20 && p[n] != '\n' && p[n] != ' ' && p[n] != '\t') n++;
    snprintf(buf, cap, "'%.*s'", (int)n, p);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 32 || (unsigned char)*c >= 127) *c = '?';
    return buf;
}

static int expected(mparser *ps, const char *what) {
    char buf[64];
    return fail_at(ps, ps->p, "expected %s, found %s", what, found(ps, buf, sizeof buf));
}

static void skip_ws(mparser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r')) ps->p++;
}

static bool at(mparser *ps, char c) {
    skip_ws(ps);
    return ps->p < ps->end && *ps->p == c;
}

static bool eat(mparser *ps, char c) {
    if (!at(ps, c)) return false;
    ps->p++;
    return true;
}

static int expect(mparser *ps, char c, const char *what) { return eat(ps, c) ? 0 : expected(ps, what); }

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

/* Characters of tensor handles and graph names: printable, none of the
 * punctuation the lines are made of ('~' starts a handle's duplicate number). */
static bool is_name_char(char c) {
    return c > ' ' && c < 127 && !strchr(",()[]{}:=#~%", c);
}

static bool word(mparser *ps, const char **w, size_t *n) {
    skip_ws(ps);
    const char *b = ps->p;
    while (ps->p < ps->end && is_word_char(*ps->p)) ps->p++;
    *w = b;
    *n = (size_t)(ps->p - b);
    return *n > 0;
}

static bool word_is(const char *w, size_t n, const char *lit) { return strlen(lit) == n && memcmp(w, lit, n) == 0; }

static bool peek_word(mparser *ps, const char *lit) {
    const char *save = ps->p, *w;
    size_t n;
    bool ok = word(ps, &w, &n) && word_is(w, n, lit);
    ps->p = save;
    return ok;
}

static int keyword(mparser *ps, const char *lit) {
    const char *w;
    size_t n;
    const char *save = ps->p;
    if (word(ps, &w, &n) && word_is(w, n, lit)) return 0;
    ps->p = save;
    char what[64];
    snprintf(what, sizeof what, "'%s'", lit);
    return expected(ps, what);
}

/* An integer (decimal, or hex with 0x) within [lo, hi]. */
static int parse_int(mparser *ps, int64_t lo, int64_t hi, int64_t *out) {
    skip_ws(ps);
    const char *b = ps->p;
    char buf[40];
    size_t n = 0;
    while (ps->p < ps->end && n + 1 < sizeof buf &&
           ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '-' || *ps->p == '+' || *ps->p == 'x' ||
            (*ps->p >= 'a' && *ps->p <= 'f') || (*ps->p >= 'A' && *ps->p <= 'F')))
        buf[n++] = *ps->p++;
    buf[n] = 0;
    if (n == 0) return expected(ps, "an integer");
    char *e;
    errno = 0;
    long long v = strtoll(buf, &e, 0);
    if (*e || errno == ERANGE) return fail_at(ps, b, "malformed integer '%s'", buf);
    if (v < lo || v > hi) return fail_at(ps, b, "%lld is outside [%lld, %lld]", v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

static int parse_i32(mparser *ps, int64_t lo, int64_t hi, int32_t *out) {
    int64_t v;
    if (parse_int(ps, lo, hi, &v)) return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse_float(mparser *ps, float *out) {
    skip_ws(ps);
    const char *b = ps->p;
    char buf[48];
    size_t n = 0;
    while (ps->p < ps->end && n + 1 < sizeof buf && !strchr(",]} \t\r\n", *ps->p)) buf[n++] = *ps->p++;
    buf[n] = 0;
    char *e;
    *out = strtof(buf, &e);
    if (n == 0 || *e) return fail_at(ps, b, "malformed number '%s'", buf);
    return 0;
}

static int parse_dtype(mparser *ps, dtype *out) {
    const char *w;
    size_t n;
    skip_ws(ps);
    const char *b = ps->p;
    if (!word(ps, &w, &n)) return expected(ps, "a dtype");
    if (!dtype_parse(w, n, out)) return fail_at(ps, b, "unknown dtype '%.*s'", (int)n, w);
    return 0;
}

/* "[a, b, ...]" of at most cap integers within [lo, hi]. */
static int parse_list(mparser *ps, int64_t *v, int cap, int64_t lo, int64_t hi, int *n) {
    *n = 0;
    if (expect(ps, '[', "'['")) return -1;
    if (eat(ps, ']')) return 0;
    do {
        if (*n == cap) return fail_at(ps, ps->p, "more than %d entries", cap);
        if (parse_int(ps, lo, hi, &v[(*n)++])) return -1;
    } while (eat(ps, ','));
    return expect(ps, ']', "',' or ']'");
}

static int end_of_line(mparser *ps) {
    skip_ws(ps);
    if (ps->p >= ps->end) return 0;
    if (*ps->p != '\n') return expected(ps, "the end of the line");
    ps->p++;
    return 0;
}

/* Past blank lines, to the first token of the next line (false: end of file). */
static bool next_line(mparser *ps) {
    for (;;) {
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == '\n') {
            ps->p++;
            continue;
        }
        return ps->p < ps->end;
    }
}

/* ---- names -------------------------------------------------------------------- */

/* "%name" or "%name~k": the handle (arena copy) and its name part's length. */
static int handle_text(mparser *ps, const char **key, size_t *name_len, const char **where) {
    skip_ws(ps);
    *where = ps->p;
    if (!eat(ps, '%')) return expected(ps, "a tensor like %x");
    const char *b = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    if (ps->p == b) return fail_at(ps, b, "expected a name after '%%'");
    *name_len = (size_t)(ps->p - b);
    if (ps->p < ps->end && *ps->p == '~') {
        const char *t = ++ps->p;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
        if (ps->p == t) return fail_at(ps, t, "expected a number after '~'");
    }
    *key = arena_strndup(&ps->out->arena, b, (size_t)(ps->p - b));
    return 0;
}

static int use_tensor(mparser *ps, int32_t *t) {
    const char *key, *where;
    size_t n;
    if (handle_text(ps, &key, &n, &where)) return -1;
    if (!strmap_get(&ps->handles, key, t)) return fail_at(ps, where, "unknown tensor '%%%s'", key);
    return 0;
}

static int use_value(mparser *ps, int32_t *v) {
    skip_ws(ps);
    const char *where = ps->p;
    if (!eat(ps, '%')) return expected(ps, "a graph value like %x");
    const char *b = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    char *name = arena_strndup(&ps->out->arena, b, (size_t)(ps->p - b));
    *v = graph_lookup(ps->g, name);
    if (*v < 0) return fail_at(ps, where, "the graph has no value '%%%s'", name);
    return 0;
}

/* A graph op: the stable name of its first result, "kind:k" for the k-th
 * op of that kind without results, "-" for none. */
static int graph_op_ref(mparser *ps, int32_t *op) {
    skip_ws(ps);
    const char *b = ps->p;
    if (ps->p < ps->end && *ps->p == '-' && (ps->p + 1 >= ps->end || !is_name_char(ps->p[1]))) {
        ps->p++;
        *op = -1;
        return 0;
    }
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    if (ps->p == b) return expected(ps, "a graph op");
    char *name = arena_strndup(&ps->out->arena, b, (size_t)(ps->p - b));
    if (ps->p < ps->end && *ps->p == ':') {
        graph_op_kind kind;
        ps->p++;
        int64_t k;
        if (!graph_op_lookup(name, strlen(name), &kind)) return fail_at(ps, b, "unknown op kind '%s'", name);
        if (parse_int(ps, 0, INT32_MAX, &k)) return -1;
        if (k >= ps->nnoresult[kind]) return fail_at(ps, b, "the graph has no %s:%lld", name, (long long)k);
        *op = ps->noresult[kind][k];
        return 0;
    }
    int32_t v = graph_lookup(ps->g, name);
    const graph_value *gv = v >= 0 ? graph_val(ps->g, v) : NULL;
    if (!gv || gv->is_arg || gv->def_index != 0) return fail_at(ps, b, "the graph has no op '%s'", name);
    *op = gv->def;
    return 0;
}

/* "pN" within the program's prims, or "-". */
static int prim_ref(mparser *ps, int32_t *id) {
    skip_ws(ps);
    const char *b = ps->p;
    if (eat(ps, '-')) {
        *id = -1;
        return 0;
    }
    if (!eat(ps, 'p')) return expected(ps, "a prim like p3, or '-'");
    int64_t v;
    if (parse_int(ps, 0, INT32_MAX, &v)) return -1;
    if (v >= ps->out->prims.n) return fail_at(ps, b, "p%lld is not a prim (the program has %d)", (long long)v, (int)ps->out->prims.n);
    *id = (int32_t)v;
    return 0;
}

/* ---- layouts ------------------------------------------------------------------ */

/* "[17/4,40]rm x2": rank, dims, parts, encoding, replicas; blocks and tiles
 * at their defaults. */
static int parse_layout_short(mparser *ps, layout *l, dtype dt) {
    memset(l, 0, sizeof *l);
    if (expect(ps, '[', "'[' and the dimensions")) return -1;
    do {
        if (l->rank == LAYOUT_MAX_RANK) return fail_at(ps, ps->p, "a layout has at most %d axes", LAYOUT_MAX_RANK);
        int a = l->rank++;
        if (parse_int(ps, 1, GRAPH_MAX_DIM, &l->dim[a])) return -1;
        l->parts[a] = 1;
        if (eat(ps, '/') && parse_int(ps, 1, GRAPH_MAX_DIM, &l->parts[a])) return -1;
        l->block[a] = l->dim[a] / l->parts[a] + (l->dim[a] % l->parts[a] != 0);
    } while (eat(ps, ','));
    if (expect(ps, ']', "',' or ']' in the dimensions")) return -1;
    const char *w, *b = ps->p;
    size_t n;
    if (!word(ps, &w, &n)) return expected(ps, "an encoding (rm, ampl, ampo, rmt, amplt)");
    int e = 0;
    while (e < MID_ENC_COUNT && !word_is(w, n, mid_enc_names[e])) e++;
    if (e == MID_ENC_COUNT) return fail_at(ps, b, "unknown encoding '%.*s' (rm, ampl, ampo, rmt, amplt)", (int)n, w);
    l->enc = (layout_encoding)e;
    for (int a = l->rank; a < LAYOUT_MAX_RANK; a++) l->dim[a] = l->parts[a] = l->block[a] = 1; /* as layout_single */
    l->elem_bytes = dtype_bytes(dt);
    for (;;) {
        const char *save = ps->p;
        skip_ws(ps);
        if (!(ps->p + 1 < ps->end && ps->p[0] == 'x' && ps->p[1] >= '0' && ps->p[1] <= '9')) {
            ps->p = save;
            return 0;
        }
        if (l->nrep == LAYOUT_MAX_RANK) return fail_at(ps, ps->p, "a layout has at most %d replica axes", LAYOUT_MAX_RANK);
        ps->p++;
        if (parse_int(ps, 1, INT32_MAX, &l->rep[l->nrep++])) return -1;
    }
}

/* The header's layout: the short form and "{block=[..], stride=[..],
 * rep_stride=[..], base=N, bytes=E}", then well formed for the machine. */
static int parse_layout_full(mparser *ps, layout *l, dtype dt) {
    const char *b = ps->p;
    if (parse_layout_short(ps, l, dt)) return -1;
    if (eat(ps, '{')) {
        do {
            const char *w, *kb;
            size_t n;
            int cnt;
            int64_t v[LAYOUT_MAX_RANK];
            skip_ws(ps);
            kb = ps->p;
            if (!word(ps, &w, &n)) return expected(ps, "a layout field (block, stride, rep_stride, base, bytes)");
            if (expect(ps, '=', "'='")) return -1;
            if (word_is(w, n, "block") || word_is(w, n, "stride") || word_is(w, n, "rep_stride")) {
                bool rep = word_is(w, n, "rep_stride"), block = word_is(w, n, "block");
                const char *lb = ps->p;
                if (parse_list(ps, v, LAYOUT_MAX_RANK, block ? 1 : INT32_MIN, block ? GRAPH_MAX_DIM : INT32_MAX, &cnt)) return -1;
                int want = rep ? l->nrep : l->rank;
                if (cnt != want) return fail_at(ps, lb, "%.*s needs %d entries, not %d", (int)n, w, want, cnt);
                for (int a = 0; a < cnt; a++) {
                    if (block) l->block[a] = v[a];
                    else if (rep) l->rep_stride[a] = (int32_t)v[a];
                    else l->tile_stride[a] = (int32_t)v[a];
                }
            } else if (word_is(w, n, "base")) {
                if (parse_i32(ps, INT32_MIN, INT32_MAX, &l->tile_base)) return -1;
            } else if (word_is(w, n, "bytes")) {
                if (parse_i32(ps, 1, 4, &l->elem_bytes)) return -1;
            } else {
                return fail_at(ps, kb, "unknown layout field '%.*s'", (int)n, w);
            }
        } while (eat(ps, ','));
        if (expect(ps, '}', "',' or '}' in the layout")) return -1;
    }
    diag ld = {0};
    if (layout_check(l, ps->m->tiles, &ld)) {
        size_t k = strlen(ld.text);
        if (k && ld.text[k - 1] == '\n') ld.text[k - 1] = 0;
        return fail_at(ps, b, "%s", ld.text);
    }
    return 0;
}

/* ---- the header ---------------------------------------------------------------- */

static const char *const tensor_kinds[] = {"temp", "param", "input"};

static int parse_tensor(mparser *ps) {
    const char *key, *where, *w, *b;
    size_t name_len, n;
    if (handle_text(ps, &key, &name_len, &where)) return -1;
    int32_t id = ps->out->tensors.n, old;
    if (strmap_get(&ps->handles, key, &old)) return fail_at(ps, where, "tensor '%%%s' is declared twice", key);
    if (id < ps->ntensors) {
        int line, col;
        src_line_col(&ps->src, (size_t)(where - ps->s), &line, &col);
        ps->out->tensor_line[id] = line;
    }
    mid_tensor t = {.name = arena_strndup(&ps->out->arena, key, name_len), .value = -1, .param_op = -1, .stack = 1,
                    .slice_of = -1, .alias_of = -1, .scope = -1};
    if (expect(ps, '=', "'=' and the tensor's kind")) return -1;
    skip_ws(ps);
    b = ps->p;
    if (!word(ps, &w, &n)) return expected(ps, "a tensor kind (temp, param, input)");
    int k = 0;
    while (k < 3 && !word_is(w, n, tensor_kinds[k])) k++;
    if (k == 3) return fail_at(ps, b, "unknown tensor kind '%.*s' (temp, param, input)", (int)n, w);
    t.kind = (mid_tensor_kind)k;
    if (parse_dtype(ps, &t.dtype)) return -1;
    if (peek_word(ps, "unplaced")) {
        word(ps, &w, &n);
    } else {
        if (parse_layout_full(ps, &t.lay, t.dtype)) return -1;
        t.placed = true;
    }
    while (!at(ps, '\n') && ps->p < ps->end) {
        skip_ws(ps);
        b = ps->p;
        if (!word(ps, &w, &n)) return expected(ps, "a tensor field (scale, value, param, stack, slice_of, alias_of, scope)");
        if (expect(ps, '=', "'='")) return -1;
        int64_t v;
        if (word_is(w, n, "scale")) {
            if (parse_int(ps, NUM_SCALE_MIN, NUM_SCALE_MAX, &v)) return -1;
            t.scale = (int8_t)v;
        } else if (word_is(w, n, "value")) {
            if (use_value(ps, &t.value)) return -1;
        } else if (word_is(w, n, "param")) {
            if (graph_op_ref(ps, &t.param_op)) return -1;
        } else if (word_is(w, n, "stack")) {
            if (parse_int(ps, 1, INT32_MAX, &t.stack)) return -1;
        } else if (word_is(w, n, "slice_of") || word_is(w, n, "alias_of")) {
            pending_ref r = {.tensor = id, .alias = word_is(w, n, "alias_of")};
            size_t nl;
            if (handle_text(ps, &r.key, &nl, &r.where)) return -1;
            vec_push(&ps->out->arena, &ps->pending, r);
        } else if (word_is(w, n, "scope")) {
            if (prim_ref(ps, &t.scope)) return -1;
        } else {
            return fail_at(ps, b, "unknown tensor field '%.*s'", (int)n, w);
        }
    }
    vec_push(&ps->out->arena, &ps->out->tensors, t);
    strmap_put(&ps->handles, key, id);
    return end_of_line(ps);
}

/* ---- prims ------------------------------------------------------------------- */

/* "%t:f16[16/4,8]rm x2": the tensor, whose declaration must say the same. */
static int parse_use(mparser *ps, int32_t *t) {
    skip_ws(ps);
    const char *where = ps->p;
    if (use_tensor(ps, t)) return -1;
    const mid_tensor *x = mid_t(ps->out, *t);
    dtype dt;
    if (expect(ps, ':', "':' and the tensor's dtype") || parse_dtype(ps, &dt)) return -1;
    const char *end = ps->p;
    bool placed = at(ps, '[');
    layout l;
    if (placed && parse_layout_short(ps, &l, dt)) return -1;
    if (placed) end = ps->p;
    bool same = dt == x->dtype && placed == x->placed;
    if (same && placed) {
        same = l.rank == x->lay.rank && l.enc == x->lay.enc && l.nrep == x->lay.nrep;
        for (int a = 0; same && a < l.rank; a++) same = l.dim[a] == x->lay.dim[a] && l.parts[a] == x->lay.parts[a];
        for (int k = 0; same && k < l.nrep; k++) same = l.rep[k] == x->lay.rep[k];
    }
    if (!same) return fail_at(ps, where, "'%.*s' does not match the declaration of the tensor", (int)(end - where), where);
    return 0;
}

static int parse_uses(mparser *ps, int32_t *v, int cap, int32_t *n, char close) {
    *n = 0;
    if (at(ps, close)) return 0;
    do {
        if (*n == cap) return fail_at(ps, ps->p, "a prim has at most %d of these", cap);
        if (parse_use(ps, &v[(*n)++])) return -1;
    } while (eat(ps, ','));
    return 0;
}

static int parse_floats(mparser *ps, float *f, int cap) {
    int n = 0;
    if (expect(ps, '[', "'['")) return -1;
    if (eat(ps, ']')) return 0;
    do {
        if (n == cap) return fail_at(ps, ps->p, "more than %d entries", cap);
        if (parse_float(ps, &f[n++])) return -1;
    } while (eat(ps, ','));
    return expect(ps, ']', "',' or ']'");
}

static int name_index(const char *const *names, int count, const char *w, size_t n) {
    for (int i = 0; i < count; i++)
        if (word_is(w, n, names[i])) return i;
    return -1;
}

/* "{acc=f16, f=[0.5], view.axis=[..], ...}": the fields print.c writes. */
static int parse_prim_attrs(mparser *ps, mid_prim *x) {
    if (!eat(ps, '{')) return 0;
    do {
        const char *w, *b;
        size_t n;
        skip_ws(ps);
        b = ps->p;
        if (!word(ps, &w, &n)) return expected(ps, "a prim field");
        if (expect(ps, '=', "'='")) return -1;
        int64_t v[LAYOUT_MAX_RANK];
        int cnt;
        const char *vb = (skip_ws(ps), ps->p), *vw;
        size_t vn;
        if (word_is(w, n, "ew") || word_is(w, n, "epi")) {
            bool ew = word_is(w, n, "ew");
            int i = word(ps, &vw, &vn) ? (ew ? name_index(kernel_ew_names, KERNEL_EW_COUNT, vw, vn)
                                              : name_index(kernel_epi_names, KERNEL_EPI_COUNT, vw, vn))
                                        : -1;
            if (i < 0) return fail_at(ps, vb, "unknown %s", ew ? "elementwise op" : "epilogue");
            if (ew) x->ew = (kernel_ew_op)i;
            else x->epi = (kernel_epi_op)i;
        } else if (word_is(w, n, "acc")) {
            if (parse_dtype(ps, &x->acc)) return -1;
        } else if (word_is(w, n, "grad")) {
            if (parse_dtype(ps, &x->grad)) return -1;
        } else if (word_is(w, n, "f")) {
            if (parse_floats(ps, x->f, 5)) return -1;
        } else if (word_is(w, n, "axes")) {
            int64_t a;
            if (parse_int(ps, 0, UINT32_MAX, &a)) return -1;
            x->axes = (uint32_t)a;
        } else if (word_is(w, n, "step")) {
            if (parse_int(ps, INT64_MIN, INT64_MAX, &x->step)) return -1;
        } else if (word_is(w, n, "col_run")) {
            if (parse_int(ps, INT64_MIN, INT64_MAX, &x->col_run)) return -1;
        } else if (word_is(w, n, "column")) {
            if (parse_i32(ps, INT32_MIN, INT32_MAX, &x->column)) return -1;
        } else if (word_is(w, n, "cast")) {
            if (parse_i32(ps, INT32_MIN, INT32_MAX, &x->cast_ordinal)) return -1;
        } else if (word_is(w, n, "count")) {
            if (parse_int(ps, INT64_MIN, INT64_MAX, &x->count)) return -1;
        } else if (word_is(w, n, "view.axis")) {
            if (parse_list(ps, v, LAYOUT_MAX_RANK, 0, LAYOUT_MAX_RANK - 1, &cnt)) return -1;
            for (int i = 0; i < cnt; i++) x->view.axis[i] = (int32_t)v[i];
        } else if (word_is(w, n, "view.off")) {
            if (parse_list(ps, x->view.off, LAYOUT_MAX_RANK, -GRAPH_MAX_DIM, GRAPH_MAX_DIM, &cnt)) return -1;
        } else if (word_is(w, n, "view.fix")) {
            if (parse_list(ps, x->view.src_fix, LAYOUT_MAX_RANK, -GRAPH_MAX_DIM, GRAPH_MAX_DIM, &cnt)) return -1;
        } else {
            return fail_at(ps, b, "unknown prim field '%.*s'", (int)n, w);
        }
    } while (eat(ps, ','));
    return expect(ps, '}', "',' or '}' after the prim's fields");
}

/* "gemm.panels.swap": the kind, its elementwise op or epilogue, the flags. */
static int parse_kind(mparser *ps, mid_prim *x) {
    const char *w, *b;
    size_t n;
    skip_ws(ps);
    b = ps->p;
    if (!word(ps, &w, &n)) return expected(ps, "a prim kind");
    const char *e = w + n, *q = memchr(w, '.', n);
    const char *part_end = q ? q : e;
    int k = name_index(mid_kind_names, MID_COUNT, w, (size_t)(part_end - w));
    if (k < 0 || k == MID_REPEAT) return fail_at(ps, b, "unknown prim kind '%.*s'", (int)(part_end - w), w);
    x->kind = (mid_kind)k;
    bool named = x->kind != MID_EWISE && x->kind != MID_GEMM_EPI && x->kind != MID_REDUCE_EPI;
    while (part_end < e) {
        const char *f = part_end + 1;
        q = memchr(f, '.', (size_t)(e - f));
        part_end = q ? q : e;
        size_t fn = (size_t)(part_end - f);
        if (!named) {
            int i = x->kind == MID_EWISE ? name_index(kernel_ew_names, KERNEL_EW_COUNT, f, fn) : name_index(kernel_epi_names, KERNEL_EPI_COUNT, f, fn);
            if (i < 0) return fail_at(ps, f, "unknown %s '%.*s'", x->kind == MID_EWISE ? "elementwise op" : "epilogue", (int)fn, f);
            if (x->kind == MID_EWISE) x->ew = (kernel_ew_op)i;
            else x->epi = (kernel_epi_op)i;
            named = true;
        } else if (word_is(f, fn, "panels")) x->panel_batch = true;
        else if (word_is(f, fn, "swap")) x->swap = true;
        else if (word_is(f, fn, "keepdims")) x->keepdims = true;
        else if (word_is(f, fn, "view")) x->has_view = true;
        else if (word_is(f, fn, "own")) x->own = true;
        else if (word_is(f, fn, "remote")) x->remote = true;
        else if (word_is(f, fn, "residual")) x->residual = true;
        else if (word_is(f, fn, "early")) x->early = true;
        else return fail_at(ps, f, "unknown flag '%.*s'", (int)fn, f);
    }
    if (!named) return fail_at(ps, e, "%s needs its %s: %s.NAME", mid_kind_names[x->kind],
                               x->kind == MID_EWISE ? "elementwise op" : "epilogue", mid_kind_names[x->kind]);
    return 0;
}

static int parse_block(mparser *ps, mid_block *blk, int depth, int32_t repeat);

/* "pN ..." to the end of its line (a repeat: to its closing brace). */
static int parse_prim(mparser *ps, mid_block *blk, int depth) {
    skip_ws(ps);
    const char *b = ps->p;
    int32_t id;
    if (prim_ref(ps, &id)) return -1;
    if (id < 0) return fail_at(ps, b, "expected a prim like p3");
    if (ps->seen[id]) return fail_at(ps, b, "p%d is defined twice", (int)id);
    ps->seen[id] = true;
    int line, col;
    src_line_col(&ps->src, (size_t)(b - ps->s), &line, &col);
    ps->out->prim_line[id] = line;
    mid_prim *x = mid_p(ps->out, id);
    x->acc = DT_F32;
    x->cast_ordinal = -1;
    if (blk) vec_push(&ps->out->arena, blk, id);
    if (peek_word(ps, "repeat")) {
        const char *w;
        size_t n;
        word(ps, &w, &n);
        x->kind = MID_REPEAT;
        if (parse_int(ps, 1, INT64_MAX, &x->count) || expect(ps, '{', "'{' to open the repeat's body") ||
            expect(ps, '#', "'#' and the repeat's graph op") || graph_op_ref(ps, &x->origin) || end_of_line(ps))
            return -1;
        if (depth == MAX_NEST) return fail_at(ps, b, "repeats nest deeper than %d", MAX_NEST);
        mid_block body = {0};
        int rc = parse_block(ps, &body, depth + 1, id);
        mid_p(ps->out, id)->body = body;
        return rc;
    }
    if (at(ps, '%')) {
        if (parse_uses(ps, x->out, MID_MAX_OUT, &x->nout, '=')) return -1;
        if (expect(ps, '=', "'=' after the results")) return -1;
    }
    if (parse_kind(ps, x) || expect(ps, '(', "'(' and the operands") || parse_uses(ps, x->in, MID_MAX_IN, &x->nin, ')') ||
        expect(ps, ')', "',' or ')' after the operands") || parse_prim_attrs(ps, x) ||
        expect(ps, '#', "'#' and the prim's graph op") || graph_op_ref(ps, &x->origin))
        return -1;
    return end_of_line(ps);
}

/* Prim lines until '}' (a repeat's body) or the next section. */
static int parse_block(mparser *ps, mid_block *blk, int depth, int32_t repeat) {
    for (;;) {
        bool more = next_line(ps);
        if (more && *ps->p == '}') {
            if (repeat < 0) return fail_at(ps, ps->p, "'}' without an open repeat");
            ps->p++;
            return end_of_line(ps);
        }
        if (!more || *ps->p != 'p' || ps->p + 1 >= ps->end || ps->p[1] < '0' || ps->p[1] > '9') {
            if (repeat >= 0) return expected(ps, "a prim or the '}' closing a repeat");
            return 0;
        }
        if (parse_prim(ps, blk, depth)) return -1;
    }
}

/* To the next non-blank line, which must exist: what says what it should be. */
static int need_line(mparser *ps, const char *what) { return next_line(ps) ? 0 : expected(ps, what); }

static int parse_handle_list(mparser *ps, const char *kw, void *vec) {
    VEC(int32_t) *v = vec;
    if (need_line(ps, kw) || keyword(ps, kw)) return -1;
    if (!at(ps, '\n') && ps->p < ps->end) {
        do {
            int32_t t;
            if (use_tensor(ps, &t)) return -1;
            vec_push(&ps->out->arena, v, t);
        } while (eat(ps, ','));
    }
    return end_of_line(ps);
}

static int parse_probes(mparser *ps, int64_t lines) {
    int64_t n;
    if (need_line(ps, "'probes N'") || keyword(ps, "probes") || parse_int(ps, 0, lines, &n) || end_of_line(ps)) return -1;
    for (int64_t i = 0; i < n; i++) {
        mid_probe q;
        if (need_line(ps, "a probe: %value in %tensor after pN scope pM")) return -1;
        if (use_value(ps, &q.value) || keyword(ps, "in") || use_tensor(ps, &q.tensor) || keyword(ps, "after") ||
            prim_ref(ps, &q.after) || keyword(ps, "scope") || prim_ref(ps, &q.scope) || end_of_line(ps))
            return -1;
        vec_push(&ps->out->arena, &ps->out->probes, q);
    }
    return 0;
}

/* ---- the file ------------------------------------------------------------------- */

static int parse_program(mparser *ps) {
    int64_t n, np, lines = 1; /* every tensor, prim and probe takes a line: counts are bounded by the lines */
    for (const char *q = ps->p; q < ps->end; q++) lines += *q == '\n';
    if (need_line(ps, "'machine NAME'") || keyword(ps, "machine")) return -1;
    skip_ws(ps);
    const char *b = ps->p;
    while (ps->p < ps->end && *ps->p != '\n' && *ps->p != ' ' && *ps->p != '\t' && *ps->p != '\r') ps->p++;
    size_t len = (size_t)(ps->p - b);
    if (len != strlen(ps->m->name) || memcmp(b, ps->m->name, len) != 0)
        return fail_at(ps, b, "the program is for machine '%.*s', not '%s'", (int)(len > 64 ? 64 : len), b, ps->m->name);
    if (end_of_line(ps)) return -1;
    if (need_line(ps, "'tensors N'") || keyword(ps, "tensors") || parse_int(ps, 0, lines, &n) || end_of_line(ps)) return -1;
    /* Scopes name prims, which come after the tensors: the prim count is read first. */
    const char *save = ps->p, *pb = NULL;
    while (!pb && next_line(ps)) {
        if (peek_word(ps, "prims")) pb = ps->p;
        while (ps->p < ps->end && *ps->p != '\n') ps->p++;
    }
    if (!pb) return expected(ps, "'prims N' after the tensors");
    ps->p = pb;
    if (keyword(ps, "prims") || parse_int(ps, 0, lines, &np) || end_of_line(ps)) return -1;
    mid_program *o = ps->out;
    o->prims.v = arena_alloc(&o->arena, sizeof(mid_prim) * (size_t)(np ? np : 1));
    o->prims.n = o->prims.cap = (int32_t)np;
    ps->seen = xcalloc((size_t)np + 1, 1);
    o->src_path = arena_strdup(&o->arena, ps->src.path);
    o->prim_line = arena_alloc(&o->arena, sizeof(int32_t) * (size_t)(np + 1));
    memset(o->prim_line, 0, sizeof(int32_t) * (size_t)(np + 1));
    o->tensor_line = arena_alloc(&o->arena, sizeof(int32_t) * (size_t)(n + 1));
    memset(o->tensor_line, 0, sizeof(int32_t) * (size_t)(n + 1));
    ps->ntensors = (int32_t)n;
    const char *after_prims = ps->p;
    ps->p = save;
    for (int64_t i = 0; i < n; i++) {
        if (need_line(ps, "a tensor declaration")) return -1;
        if (ps->p == pb) return fail_at(ps, pb, "%lld tensors declared, %lld announced", (long long)i, (long long)n);
        if (parse_tensor(ps)) return -1;
    }
    if (next_line(ps) && ps->p != pb) return expected(ps, "'prims N' after the tensors");
    for (int32_t i = 0; i < ps->pending.n; i++) {
        const pending_ref *r = &ps->pending.v[i];
        int32_t t;
        if (!strmap_get(&ps->handles, r->key, &t)) return fail_at(ps, r->where, "unknown tensor '%%%s'", r->key);
        if (r->alias) mid_t(o, r->tensor)->alias_of = t;
        else mid_t(o, r->tensor)->slice_of = t;
    }
    ps->p = after_prims;
    if (parse_block(ps, &o->top, 0, -1)) return -1;
    int64_t nd;
    if (need_line(ps, "'detached N'") || keyword(ps, "detached") || parse_int(ps, 0, lines, &nd) || end_of_line(ps) ||
        parse_block(ps, NULL, 0, -1))
        return -1;
    for (int32_t i = 0; i < np; i++)
        if (!ps->seen[i]) return fail_at(ps, pb, "p%d is never defined", (int)i);
    if (parse_handle_list(ps, "inputs", &o->inputs) || parse_handle_list(ps, "outputs", &o->outputs) || parse_probes(ps, lines))
        return -1;
    if (next_line(ps)) return expected(ps, "the end of the file");
    return 0;
}

/* Where the separator line starts, or NULL. */
static const char *find_separator(const char *s, const char *end) {
    size_t k = strlen(MID_SEPARATOR);
    for (const char *p = s; p < end;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        const char *t = e;
        while (t > p && t[-1] == '\r') t--;
        if ((size_t)(t - p) == k && memcmp(p, MID_SEPARATOR, k) == 0) return p;
        p = e + 1;
    }
    return NULL;
}

int mid_parse(const char *text, size_t len, const char *path, const machine *m, graph **g_out, mid_program *out, diag *d) {
    *g_out = NULL;
    memset(out, 0, sizeof *out);
    char *copy = xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = 0;
    mparser ps = {.s = copy, .end = copy + len, .p = copy, .src = {path, copy, len}, .d = d, .m = m, .out = out};
    arena_init(&out->arena);
    int rc = -1;
    const char *sep = find_separator(copy, copy + len);
    if (memchr(copy, 0, len)) {
        fail_at(&ps, copy + strlen(copy), "the file contains a NUL byte");
    } else if (!sep) {
        ps.p = ps.end;
        fail_at(&ps, ps.end, "expected a '%s' line after the graph", MID_SEPARATOR);
    } else if ((ps.g = graph_parse_as(path, copy, (size_t)(sep - copy), true, d))) {
        out->g = ps.g;
        out->m = m;
        for (int32_t i = 0; i < ps.g->ops.n; i++) {
            const graph_op *o = graph_opr(ps.g, i);
            if (o->nout) continue;
            if (!ps.noresult[o->kind]) ps.noresult[o->kind] = xmalloc(sizeof(int32_t) * (size_t)ps.g->ops.n);
            ps.noresult[o->kind][ps.nnoresult[o->kind]++] = i;
        }
        ps.p = sep + strlen(MID_SEPARATOR);
        rc = end_of_line(&ps) || parse_program(&ps) ? -1 : 0;
    }
    strmap_free(&ps.handles);
    free(ps.seen);
    for (int k = 0; k < OP_COUNT; k++) free(ps.noresult[k]);
    free(copy);
    if (rc) {
        mid_free(out);
        graph_free(ps.g);
        return -1;
    }
    *g_out = ps.g;
    return 0;
}
