/* parse.c: the .tsl text format (grammar in docs/ir.md). One statement per
 * line; blank and comment lines before a statement and a comment at the end
 * of its line are kept as trivia so printing reproduces the file exactly. */
#include "graph.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LIST = 1024 };         /* results, operands, types per statement */

typedef struct parser {
    graph *g;
    const char *s, *end;  /* text and its end */
    const char *p;        /* cursor */
    diag *d;
    int depth;            /* open repeats */
    bool opaque_data;     /* data(N) parameters allowed, their values absent (a mid file's graph) */
    const char *pos_at, *pos_bol;  /* position cache: a byte, the start of its line */
    int32_t pos_line;              /* and that line's number, so positions cost O(distance) */
    const char **res_names[GRAPH_MAX_REPEAT_DEPTH], **res_where[GRAPH_MAX_REPEAT_DEPTH]; /* their result names */
} parser;

/* ---- positions and errors ------------------------------------------------ */

/* Line and column of at. Statements are placed in text order, so scanning on
 * from the previous answer keeps parsing linear (src_line_col rescans from
 * the start of the file, which made large files quadratic). */
static void pos_of(parser *ps, const char *at, int32_t *line, int32_t *col) {
    if (!ps->pos_at || at < ps->pos_at) {
        ps->pos_at = ps->pos_bol = ps->s;
        ps->pos_line = 1;
    }
    for (; ps->pos_at < at; ps->pos_at++)
        if (*ps->pos_at == '\n') {
            ps->pos_line++;
            ps->pos_bol = ps->pos_at + 1;
        }
    *line = ps->pos_line;
    *col = (int32_t)(at - ps->pos_bol) + 1;
}

static int fail_at(parser *ps, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *ps, const char *at, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int32_t line, col;
    pos_of(ps, at, &line, &col);
    return diag_fail_at(ps->d, &ps->g->src, line, col, "%s", msg);
}

/* What the cursor is looking at, for "expected X, found Y" messages. */
static const char *found(parser *ps, char *buf, size_t cap) {
    const char *p = ps->p;
    if (p >= ps->end) return "end of file";
    if (*p == '\n') return "end of line";
    if (*p == '#') return "a comment";
    size_t n = 0;
    while (p + n < ps->end && n < 20 && p[n] != '\n' && p[n] != ' ' && p[n] != '\t') n++;
    if (n == 0) n = 1;
    snprintf(buf, cap, "'%.*s'", (int)n, p);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 32 || (unsigned char)*c >= 127) *c = '?';
    return buf;
}

static int expected(parser *ps, const char *what) {
    char buf[64];
    return fail_at(ps, ps->p, "expected %s, found %s", what, found(ps, buf, sizeof buf));
}

/* ---- tokens -------------------------------------------------------------- */

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r')) ps->p++;
}

static bool at(parser *ps, char c) {
    skip_ws(ps);
    return ps->p < ps->end && *ps->p == c;
}

static bool eat(parser *ps, char c) {
    if (!at(ps, c)) return false;
    ps->p++;
    return true;
}

static int expect(parser *ps, char c, const char *what) {
    if (eat(ps, c)) return 0;
    return expected(ps, what);
}

static bool is_word_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_word_char(char c) { return is_word_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-'; }
static bool is_name_char(char c) { return is_word_start(c) || (c >= '0' && c <= '9') || c == '.'; }

/* A bare word: keyword, op, dtype or attribute name. */
static bool word(parser *ps, const char **w, size_t *n) {
    skip_ws(ps);
    if (ps->p >= ps->end || !is_word_start(*ps->p)) return false;
    const char *b = ps->p;
    while (ps->p < ps->end && is_word_char(*ps->p)) ps->p++;
    *w = b;
    *n = (size_t)(ps->p - b);
    return true;
}

static bool word_is(const char *w, size_t n, const char *lit) { return strlen(lit) == n && memcmp(w, lit, n) == 0; }

static bool peek_word(parser *ps, const char *lit) {
    const char *save = ps->p, *w;
    size_t n;
    bool ok = word(ps, &w, &n) && word_is(w, n, lit);
    ps->p = save;
    return ok;
}

/* "%name": returns the name (arena copy) and where it starts. */
static int value_name(parser *ps, const char **name, const char **where) {
    skip_ws(ps);
    *where = ps->p;
    if (!eat(ps, '%')) return expected(ps, "a value name like %x");
    const char *b = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
    if (ps->p == b) return fail_at(ps, b, "expected a name after '%%'");
    *name = arena_strndup(&ps->g->arena, b, (size_t)(ps->p - b));
    return 0;
}

static int number_token(parser *ps, const char **b, size_t *n) {
    skip_ws(ps);
    const char *p = ps->p;
    if (p < ps->end && (*p == '-' || *p == '+')) p++;
    const char *digits = p;
    while (p < ps->end && ((*p >= '0' && *p <= '9') || *p == '.')) p++;
    if (p == digits) return expected(ps, "a number");
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '-' || *p == '+')) p++;
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    *b = ps->p;
    *n = (size_t)(p - ps->p);
    ps->p = p;
    return 0;
}

/* The next number token as a C string in buf; *b is where it starts. */
static int number_text(parser *ps, char *buf, size_t cap, const char **b) {
    size_t n = 0;
    if (number_token(ps, b, &n)) return -1;
    if (n >= cap) return fail_at(ps, *b, "number too long");
    memcpy(buf, *b, n);
    buf[n] = 0;
    return 0;
}

static int parse_int(parser *ps, int64_t *out) {
    const char *b;
    char buf[64];
    if (number_text(ps, buf, sizeof buf, &b)) return -1;
    char *e;
    errno = 0;
    long long v = strtoll(buf, &e, 10);
    if (*e) return fail_at(ps, b, "expected an integer, found '%s'", buf);
    if (errno == ERANGE) return fail_at(ps, b, "integer '%s' is out of range", buf);
    *out = v;
    return 0;
}

static int parse_float(parser *ps, double *out) {
    const char *b;
    char buf[64];
    if (number_text(ps, buf, sizeof buf, &b)) return -1;
    char *e;
    double v = strtod(buf, &e);
    if (*e || e == buf) return fail_at(ps, b, "malformed number '%s'", buf);
    if (v != v || v == 1.0 / 0.0 || v == -1.0 / 0.0) return fail_at(ps, b, "number '%s' is not finite", buf);
    *out = v;
    return 0;
}

static int parse_string(parser *ps, const char **out) {
    skip_ws(ps);
    if (!eat(ps, '"')) return expected(ps, "a string in double quotes");
    const char *b = ps->p;
    char *buf = arena_alloc(&ps->g->arena, (size_t)(ps->end - b) + 1);
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\n') {
        if (*ps->p == '\\') {
            ps->p++;
            if (ps->p >= ps->end || (*ps->p != '"' && *ps->p != '\\'))
                return fail_at(ps, ps->p - 1, "only \\\" and \\\\ escapes are allowed in strings");
        }
        buf[n++] = *ps->p++;
    }
    if (ps->p >= ps->end || *ps->p != '"') return fail_at(ps, b - 1, "unterminated string");
    ps->p++;
    buf[n] = 0;
    *out = buf;
    return 0;
}

/* ---- trivia ---------------------------------------------------------------- */

/* Trivia text [b, e) as kept for printing: verbatim but for the CRs ending a
 * line, so a CRLF file prints with LF line ends throughout (statement lines
 * lose their CR anyway) instead of a mix. */
static const char *trivia_dup(parser *ps, const char *b, const char *e) {
    char *t = arena_alloc(&ps->g->arena, (size_t)(e - b) + 1);
    size_t n = 0;
    for (const char *q = b; q < e; q++) {
        const char *r = q;
        while (r < e && *r == '\r') r++;
        if (r > q && (r == e || *r == '\n')) q = r - 1; /* CRs that end a line */
        else t[n++] = *q;
    }
    t[n] = 0;
    return t;
}

/* Blank and comment-only lines from the cursor on, verbatim; NULL if none. */
static const char *lead_trivia(parser *ps) {
    const char *b = ps->p;
    for (;;) {
        const char *q = ps->p;
        while (q < ps->end && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        if (q < ps->end && *q == '#') {
            while (q < ps->end && *q != '\n') q++;
        }
        if (q < ps->end && *q == '\n') {
            ps->p = q + 1;
            continue;
        }
        if (q >= ps->end) ps->p = q; /* trailing blank/comment text without newline */
        break;
    }
    if (ps->p == b) return NULL;
    return trivia_dup(ps, b, ps->p);
}

/* After a statement: an optional comment, then the end of the line. The
 * tail starts at the blanks after the statement's last token, which an
 * earlier look-ahead (for ',' or '{') may already have skipped. */
static int end_of_line(parser *ps, const char **tail) {
    const char *b = ps->p;
    while (b > ps->s && (b[-1] == ' ' || b[-1] == '\t')) b--;
    skip_ws(ps);
    *tail = NULL;
    if (ps->p < ps->end && *ps->p == '#') {
        while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        *tail = trivia_dup(ps, b, ps->p);
    }
    if (ps->p >= ps->end) return 0;
    if (*ps->p != '\n') return expected(ps, "the end of the line");
    ps->p++;
    return 0;
}

/* ---- types and attributes -------------------------------------------------- */

static int parse_type(parser *ps, graph_type *t) {
    const char *w, *b;
    size_t n;
    skip_ws(ps);
    b = ps->p;
    if (!word(ps, &w, &n)) return expected(ps, "a type like f16[128, 768]");
    memset(t, 0, sizeof *t);
    if (!dtype_parse(w, n, &t->dtype))
        return fail_at(ps, b, "unknown dtype '%.*s' (f32, f16, bf16, f8e4m3, f8e5m2, f143, i32)", (int)n, w);
    if (expect(ps, '[', "'[' after the dtype")) return -1;
    int64_t numel = 1;
    if (!at(ps, ']')) {
        do {
            skip_ws(ps);
            const char *db = ps->p;
            int64_t v;
            if (parse_int(ps, &v)) return -1;
            if (v < 1 || v > GRAPH_MAX_DIM) return fail_at(ps, db, "dimension %lld must be between 1 and 2^40", (long long)v);
            if (t->rank == GRAPH_MAX_RANK) return fail_at(ps, db, "rank exceeds %d", GRAPH_MAX_RANK);
            if (numel > GRAPH_MAX_NUMEL / v) return fail_at(ps, db, "tensor has more than 2^48 elements");
            numel *= v;
            t->dim[t->rank++] = v;
        } while (eat(ps, ','));
    }
    return expect(ps, ']', "',' or ']' in the shape");
}

static int parse_attr_value(parser *ps, graph_attr_id a, graph_attr *v) {
    const char *w;
    size_t n;
    skip_ws(ps);
    const char *b = ps->p;
    switch (graph_attr_kinds[a]) {
    case ATTR_KIND_BOOL:
        if (!word(ps, &w, &n) || !(word_is(w, n, "true") || word_is(w, n, "false")))
            return fail_at(ps, b, "attribute '%s' takes true or false", graph_attr_names[a]);
        v->b = word_is(w, n, "true");
        return 0;
    case ATTR_KIND_INT: return parse_int(ps, &v->i);
    case ATTR_KIND_FLOAT: return parse_float(ps, &v->f);
    case ATTR_KIND_DTYPE:
        if (!word(ps, &w, &n) || !dtype_parse(w, n, &v->t))
            return fail_at(ps, b, "attribute '%s' takes a dtype (f32, f16, bf16, f8e4m3, f8e5m2, f143, i32)",
                           graph_attr_names[a]);
        return 0;
    case ATTR_KIND_INTS: {
        if (expect(ps, '[', "'[' to start a list of integers")) return -1;
        int64_t buf[GRAPH_MAX_RANK * 2];
        int32_t k = 0;
        if (!at(ps, ']')) {
            do {
                skip_ws(ps);
                if (k == (int32_t)TS_COUNT(buf)) return fail_at(ps, ps->p, "list too long");
                if (parse_int(ps, &buf[k++])) return -1;
            } while (eat(ps, ','));
        }
        if (expect(ps, ']', "',' or ']' in the list")) return -1;
        v->ints.n = k;
        v->ints.v = arena_alloc(&ps->g->arena, sizeof(int64_t) * (size_t)(k ? k : 1));
        memcpy(v->ints.v, buf, sizeof(int64_t) * (size_t)k);
        return 0;
    }
    }
    TS_UNREACHABLE();
}

/* "{name = value, ...}" into op (allowed: the attributes the op accepts). */
static int parse_attrs(parser *ps, int32_t op, uint64_t allowed, const char *opname) {
    if (!eat(ps, '{')) return 0;
    do {
        const char *w;
        size_t n;
        skip_ws(ps);
        const char *b = ps->p;
        graph_attr_id a;
        if (!word(ps, &w, &n)) return expected(ps, "an attribute name");
        if (!graph_attr_lookup(w, n, &a) || !(allowed & (1ull << a)))
            return fail_at(ps, b, "%s has no attribute '%.*s'", opname, (int)n, w);
        graph_op *o = graph_opr(ps->g, op);
        if (o->attr_set & (1ull << a)) return fail_at(ps, b, "attribute '%s' given twice", graph_attr_names[a]);
        if (expect(ps, '=', "'=' after the attribute name")) return -1;
        graph_attr v;
        memset(&v, 0, sizeof v);
        if (parse_attr_value(ps, a, &v)) return -1;
        o = graph_opr(ps->g, op);
        o->attr[a] = v;
        o->attr_set |= 1ull << a;
    } while (eat(ps, ','));
    return expect(ps, '}', "',' or '}' in the attributes");
}

/* ---- values and scopes ------------------------------------------------------ */

/* The repeat op whose body defines v (-1: top level). */
static int use_value(parser *ps, int32_t *id) {
    const char *name, *where;
    if (value_name(ps, &name, &where)) return -1;
    int32_t v = graph_lookup(ps->g, name);
    if (v < 0) return fail_at(ps, where, "'%%%s' is not defined", name);
    if (!graph_value_visible(ps->g, v, ps->g->cur_repeat)) {
        const graph_op *r = graph_opr(ps->g, graph_value_scope(ps->g, v));
        return fail_at(ps, where, "'%%%s' is defined inside the repeat at line %d and is not visible here", name, r->line);
    }
    *id = v;
    return 0;
}

static int new_name(parser *ps, const char **name, const char **where) {
    if (value_name(ps, name, where)) return -1;
    int32_t v = graph_lookup(ps->g, *name);
    if (v >= 0) {
        const graph_op *o = graph_opr(ps->g, graph_val(ps->g, v)->def);
        return fail_at(ps, *where, "'%%%s' is already defined (line %d)", *name, o->line);
    }
    return 0;
}

/* Names must also be unique within one statement, before any is created. */
static int distinct(parser *ps, const char **names, const char **where, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) return fail_at(ps, where[i], "'%%%s' is named twice", names[i]);
    return 0;
}

/* ---- statements ------------------------------------------------------------- */

static int parse_block(parser *ps, int32_t repeat);

static void place(parser *ps, int32_t op, const char *at_, const char *lead) {
    graph_op *o = graph_opr(ps->g, op);
    pos_of(ps, at_, &o->line, &o->col);
    o->lead = lead;
}

/* "input %x : f16[128, 768]" with "{scale = s}" after 8-bit types. */
static int parse_decl_type(parser *ps, graph_type *t, const char *kw) {
    if (expect(ps, ':', "':' and the type")) return -1;
    if (parse_type(ps, t)) return -1;
    if (eat(ps, '{')) {
        const char *w, *b;
        size_t n;
        skip_ws(ps);
        b = ps->p;
        if (!word(ps, &w, &n) || !word_is(w, n, "scale")) return fail_at(ps, b, "%s has only the attribute 'scale'", kw);
        if (!dtype_is_f8(t->dtype)) return fail_at(ps, b, "only 8-bit types take a scale");
        if (expect(ps, '=', "'=' after 'scale'")) return -1;
        skip_ws(ps);
        const char *sb = ps->p;
        int64_t s;
        if (parse_int(ps, &s)) return -1;
        if (s < NUM_SCALE_MIN || s > NUM_SCALE_MAX)
            return fail_at(ps, sb, "scale %lld is outside [%d, %d]", (long long)s, NUM_SCALE_MIN, NUM_SCALE_MAX);
        t->scale = (int8_t)s;
        if (expect(ps, '}', "'}' after the scale")) return -1;
    }
    return 0;
}

static int parse_init(parser *ps, graph_init *init, bool piece);

/* "concat(INIT xW, INIT xW, ...)": what the sibling pass makes of joined
 * parameters (graph_print writes it), read back so a joined graph
 * round-trips (the mid text embeds it). The pieces are no concats. */
static int parse_concat(parser *ps, graph_init *init) {
    init->kind = INIT_CONCAT;
    if (expect(ps, '(', "'(' after concat")) return -1;
    VEC(graph_init) cat = {0};
    VEC(int64_t) width = {0};
    do {
        graph_init piece;
        if (parse_init(ps, &piece, true)) return -1;
        const char *w;
        size_t n;
        skip_ws(ps);
        const char *b = ps->p;
        char *e = NULL;
        long long x = 0;
        if (word(ps, &w, &n) && n > 1 && w[0] == 'x') x = strtoll(w + 1, &e, 10);
        if (!e || e != w + n || x < 1 || x > GRAPH_MAX_DIM) return fail_at(ps, b, "expected the piece's width, like x64");
        vec_push(&ps->g->arena, &cat, piece);
        vec_push(&ps->g->arena, &width, (int64_t)x);
    } while (eat(ps, ','));
    init->cat = cat.v;
    init->width = width.v;
    init->ncat = cat.n;
    return expect(ps, ')', "',' or ')' after the pieces");
}

static int parse_init(parser *ps, graph_init *init, bool piece) {
    const char *w, *b;
    size_t n;
    skip_ws(ps);
    b = ps->p;
    memset(init, 0, sizeof *init);
    if (!word(ps, &w, &n)) return expected(ps, "an initializer: normal(mean, std, seed = N), zeros, ones or npy(\"file\")");
    if (word_is(w, n, "concat") && !piece) return parse_concat(ps, init);
    if (word_is(w, n, "data")) {
        if (!ps->opaque_data)
            return fail_at(ps, w, "data() parameters live in imported models only: compile the .onnx file itself");
        /* A mid file's graph: the passes read no parameter values, so none are kept. */
        int64_t parts;
        init->kind = INIT_DATA;
        if (expect(ps, '(', "'(' after data") || parse_int(ps, &parts)) return -1;
        if (parts < 1 || parts > INT32_MAX) return fail_at(ps, w, "data() needs a positive number of pieces");
        init->nparts = (int32_t)parts;
        return expect(ps, ')', "')' after the number of pieces");
    }
    if (word_is(w, n, "zeros")) { init->kind = INIT_ZEROS; return 0; }
    if (word_is(w, n, "ones")) { init->kind = INIT_ONES; return 0; }
    if (word_is(w, n, "npy")) {
        init->kind = INIT_NPY;
        if (expect(ps, '(', "'(' after npy")) return -1;
        if (parse_string(ps, &init->path)) return -1;
        return expect(ps, ')', "')' after the file name");
    }
    if (word_is(w, n, "normal")) {
        init->kind = INIT_NORMAL;
        int64_t seed;
        if (expect(ps, '(', "'(' after normal") || parse_float(ps, &init->mean) || expect(ps, ',', "',' after the mean"))
            return -1;
        skip_ws(ps);
        const char *sb = ps->p;
        if (parse_float(ps, &init->std) || expect(ps, ',', "',' after the standard deviation")) return -1;
        if (init->std < 0) return fail_at(ps, sb, "standard deviation must be >= 0");
        if (!word(ps, &w, &n) || !word_is(w, n, "seed")) return expected(ps, "'seed = N'");
        if (expect(ps, '=', "'=' after seed")) return -1;
        skip_ws(ps);
        sb = ps->p;
        if (parse_int(ps, &seed)) return -1;
        if (seed < 0) return fail_at(ps, sb, "seed must be >= 0");
        init->seed = (uint64_t)seed;
        if (eat(ps, ',')) { /* a window of the stream: a pipeline stage's layers of a stacked parameter */
            int64_t skip;
            if (!word(ps, &w, &n) || !word_is(w, n, "skip")) return expected(ps, "'skip = N'");
            if (expect(ps, '=', "'=' after skip")) return -1;
            skip_ws(ps);
            sb = ps->p;
            if (parse_int(ps, &skip)) return -1;
            if (skip < 0 || skip > GRAPH_MAX_NUMEL) return fail_at(ps, sb, "skip must be 0..2^48");
            init->skip = skip;
        }
        return expect(ps, ')', "')' after the seed");
    }
    return fail_at(ps, b, "unknown initializer '%.*s' (normal, zeros, ones, npy)", (int)n, w); /* concat: pass-made, not listed */
}

static int parse_input_or_param(parser *ps, bool param, const char *start, const char *lead) {
    const char *name, *where, *tail;
    graph_type t;
    graph_init init = {0};
    if (new_name(ps, &name, &where) || parse_decl_type(ps, &t, param ? "param" : "input")) return -1;
    if (param) {
        if (expect(ps, '=', "'=' and an initializer")) return -1;
        if (parse_init(ps, &init, false)) return -1;
    }
    if (end_of_line(ps, &tail)) return -1;
    int32_t op = param ? graph_add_param(ps->g, name, t, init) : graph_add_input(ps->g, name, t);
    place(ps, op, start, lead);
    graph_opr(ps->g, op)->tail = tail;
    return 0;
}

static int parse_value_list(parser *ps, int32_t *ids, int32_t *n, bool allow_empty) {
    *n = 0;
    if (allow_empty && (at(ps, '\n') || at(ps, '#') || ps->p >= ps->end)) return 0;
    do {
        if (*n == MAX_LIST) return fail_at(ps, ps->p, "more than %d values", MAX_LIST);
        if (use_value(ps, &ids[(*n)++])) return -1;
    } while (eat(ps, ','));
    return 0;
}

static int parse_output(parser *ps, const char *start, const char *lead, bool yield) {
    int32_t ids[MAX_LIST], n;
    const char *tail;
    if (parse_value_list(ps, ids, &n, yield)) return -1;
    if (end_of_line(ps, &tail)) return -1;
    int32_t op;
    if (yield) {
        graph_op *r = graph_opr(ps->g, ps->g->cur_repeat);
        if (n != r->ncarry)
            return fail_at(ps, start, "yield gives %d value%s but the repeat carries %d", n, n == 1 ? "" : "s", r->ncarry);
        const char **names = ps->res_names[ps->depth - 1], **where = ps->res_where[ps->depth - 1];
        for (int32_t i = 0; i < n; i++)
            if (graph_lookup(ps->g, names[i]) >= 0)
                return fail_at(ps, where[i], "'%%%s' is also defined inside the repeat body", names[i]);
        if (graph_end_repeat(ps->g, ids, names, ps->d)) return -1;
        op = ps->g->ops.n - 1;
    } else {
        if (ps->g->cur_repeat >= 0) return fail_at(ps, start, "output is allowed only at the top level");
        op = graph_add_output(ps->g, ids, n);
    }
    place(ps, op, start, lead);
    graph_opr(ps->g, op)->tail = tail;
    return 0;
}

/* "repeat N carry(%a = %x, ...) slice(%w = %ws, ...) {" ... "}" */
static int parse_repeat(parser *ps, const char **names, const char **where, int32_t nres, const char *start,
                        const char *lead) {
    int64_t count;
    skip_ws(ps);
    const char *cb = ps->p;
    if (parse_int(ps, &count)) return -1;
    if (count < 1 || count > (1ll << 31)) return fail_at(ps, cb, "repeat count must be between 1 and 2^31");
    int32_t init[MAX_LIST], stack[MAX_LIST], ncarry = 0, nstack = 0;
    const char *argn[MAX_LIST], *argw[MAX_LIST];
    const char *w;
    size_t n;
    for (int part = 0; part < 2; part++) {
        const char *kw = part ? "slice" : "carry";
        if (part && !peek_word(ps, "slice")) break;
        if (!word(ps, &w, &n) || !word_is(w, n, kw)) return expected(ps, part ? "slice(...)" : "carry(%arg = %init, ...)");
        if (expect(ps, '(', "'('")) return -1;
        int32_t *dst = part ? stack : init, *cnt = part ? &nstack : &ncarry;
        do {
            int32_t k = ncarry + nstack;
            if (k == MAX_LIST) return fail_at(ps, ps->p, "too many repeat arguments");
            if (new_name(ps, &argn[k], &argw[k]) || expect(ps, '=', "'=' and the value it starts from")) return -1;
            skip_ws(ps);
            const char *vb = ps->p;
            if (use_value(ps, &dst[*cnt])) return -1;
            if (part) {
                const graph_type *st = &graph_val(ps->g, dst[*cnt])->type;
                if (st->rank < 1 || st->dim[0] != count)
                    return fail_at(ps, vb, "a sliced value needs a leading axis of %lld (the repeat count)", (long long)count);
            }
            (*cnt)++;
            if (part) nstack = *cnt; else ncarry = *cnt;
        } while (eat(ps, ','));
        if (expect(ps, ')', "',' or ')'")) return -1;
    }
    if (nres != ncarry)
        return fail_at(ps, start, "repeat carries %d value%s but names %d result%s", ncarry, ncarry == 1 ? "" : "s", nres,
                       nres == 1 ? "" : "s");
    if (distinct(ps, argn, argw, ncarry + nstack)) return -1;
    for (int i = 0; i < ncarry + nstack; i++)
        for (int j = 0; j < nres; j++)
            if (strcmp(argn[i], names[j]) == 0) return fail_at(ps, argw[i], "'%%%s' is named twice", argn[i]);
    if (expect(ps, '{', "'{' to open the repeat body")) return -1;
    const char *tail;
    if (end_of_line(ps, &tail)) return -1;
    if (ps->depth == GRAPH_MAX_REPEAT_DEPTH) return fail_at(ps, start, "repeats nest deeper than %d", GRAPH_MAX_REPEAT_DEPTH);
    int32_t op = graph_begin_repeat(ps->g, count, init, ncarry, stack, nstack, argn);
    place(ps, op, start, lead);
    graph_opr(ps->g, op)->tail = tail;
    /* The yield closing the body creates the results under these names. */
    ps->res_names[ps->depth] = names;
    ps->res_where[ps->depth] = where;
    ps->depth++;
    int rc = parse_block(ps, op);
    ps->depth--;
    return rc;
}

static int parse_op(parser *ps, const char *start, const char *lead) {
    const char *names[MAX_LIST], *where[MAX_LIST];
    int32_t nres = 0;
    do {
        if (nres == MAX_LIST) return fail_at(ps, ps->p, "too many results");
        if (new_name(ps, &names[nres], &where[nres])) return -1;
        nres++;
    } while (eat(ps, ','));
    if (distinct(ps, names, where, nres)) return -1;
    if (expect(ps, '=', "'=' after the result names")) return -1;
    const char *w, *ob;
    size_t n;
    skip_ws(ps);
    ob = ps->p;
    if (!word(ps, &w, &n)) return expected(ps, "an op name");
    if (word_is(w, n, "repeat")) return parse_repeat(ps, names, where, nres, start, lead);
    graph_op_kind kind;
    if (!graph_op_lookup(w, n, &kind) || graph_op_infos[kind].structural)
        return fail_at(ps, ob, "unknown op '%.*s'", (int)n, w);
    if (expect(ps, '(', "'(' and the operands")) return -1;
    int32_t in[MAX_LIST], nin = 0;
    if (!at(ps, ')') && parse_value_list(ps, in, &nin, false)) return -1;
    if (expect(ps, ')', "',' or ')' after the operands")) return -1;
    const graph_op_info *info = &graph_op_infos[kind];
    char msg[128];
    if (!graph_arity_ok(kind, nin, msg, sizeof msg)) return fail_at(ps, ob, "%s", msg);
    int32_t want = graph_result_count(kind, nin);
    if (nres != want)
        return fail_at(ps, start, "%s with %d operand%s gives %d result%s, not %d", info->name, nin, nin == 1 ? "" : "s",
                       want, want == 1 ? "" : "s", nres);
    int32_t op = graph_begin_op(ps->g, kind, in, nin);
    place(ps, op, ob, lead);
    if (parse_attrs(ps, op, info->allowed, info->name)) return -1;
    if (expect(ps, ':', "':' and the result type")) return -1;
    graph_type *types = arena_alloc(&ps->g->arena, sizeof(graph_type) * (size_t)nres);
    const char *tpos[MAX_LIST];
    for (int32_t i = 0; i < nres; i++) {
        if (i && expect(ps, ',', "',' and the next result type")) return -1;
        skip_ws(ps);
        tpos[i] = ps->p;
        if (parse_type(ps, &types[i])) return -1;
    }
    const char *tail;
    if (end_of_line(ps, &tail)) return -1;
    graph_opr(ps->g, op)->tail = tail;
    if (graph_finish_op(ps->g, op, names, types, ps->d)) return -1;
    for (int32_t i = 0; i < nres; i++) {
        const graph_type *got = &graph_val(ps->g, graph_opr(ps->g, op)->out[i])->type;
        graph_type want_t = types[i];
        want_t.scale = got->scale; /* the text does not repeat an 8-bit scale */
        if (!graph_type_equal(got, &want_t)) {
            char a[128], b[128];
            graph_type_str(&types[i], a, sizeof a);
            graph_type_str(got, b, sizeof b);
            return fail_at(ps, tpos[i], "declared type %s but %s gives %s", a, info->name, b);
        }
    }
    return 0;
}

/* Statements until the end of file (top level) or the closing '}' (repeat). */
static int parse_block(parser *ps, int32_t repeat) {
    for (;;) {
        const char *lead = lead_trivia(ps);
        skip_ws(ps);
        const char *start = ps->p;
        if (ps->p >= ps->end) {
            if (repeat >= 0) return fail_at(ps, ps->p, "missing '}' for the repeat at line %d", graph_opr(ps->g, repeat)->line);
            ps->g->end_lead = lead;
            return 0;
        }
        if (*ps->p == '}') {
            if (repeat < 0) return fail_at(ps, start, "'}' without an open repeat");
            if (ps->g->cur_repeat == repeat) return fail_at(ps, start, "the repeat body must end with 'yield'");
            ps->p++;
            graph_op *r = graph_opr(ps->g, repeat);
            r->end_lead = lead;
            const char *tail;
            if (end_of_line(ps, &tail)) return -1;
            graph_opr(ps->g, repeat)->end_tail = tail;
            return 0;
        }
        if (repeat >= 0 && ps->g->cur_repeat != repeat)
            return fail_at(ps, start, "nothing may follow 'yield' in a repeat body but '}'");
        const char *w;
        size_t n;
        const char *save = ps->p;
        int rc;
        if (word(ps, &w, &n)) {
            if (word_is(w, n, "input") || word_is(w, n, "param")) {
                if (repeat >= 0) return fail_at(ps, start, "%.*s is allowed only at the top level", (int)n, w);
                rc = parse_input_or_param(ps, word_is(w, n, "param"), start, lead);
            } else if (word_is(w, n, "output")) {
                rc = parse_output(ps, start, lead, false);
            } else if (word_is(w, n, "yield")) {
                if (repeat < 0) return fail_at(ps, start, "yield is allowed only in a repeat body");
                rc = parse_output(ps, start, lead, true);
            } else if (word_is(w, n, "graph")) {
                return fail_at(ps, start, "one file holds one graph");
            } else {
                ps->p = save;
                return fail_at(ps, start, "expected a statement (input, param, output, %%name = op(...)), found '%.*s'",
                               (int)n, w);
            }
        } else if (*ps->p == '%') {
            rc = parse_op(ps, start, lead);
        } else {
            return expected(ps, "a statement");
        }
        if (rc) return -1;
    }
}

graph *graph_parse(const char *path, const char *text, size_t len, diag *d) { return graph_parse_as(path, text, len, false, d); }

graph *graph_parse_as(const char *path, const char *text, size_t len, bool opaque_data, diag *d) {
    graph *g = graph_new("?", path);
    char *copy = arena_strndup(&g->arena, text, len);
    g->src = (src_text){g->path, copy, len};
    parser ps = {.g = g, .s = copy, .end = copy + len, .p = copy, .d = d, .opaque_data = opaque_data};
    if (memchr(copy, 0, len)) {
        fail_at(&ps, copy + strlen(copy), "the file contains a NUL byte");
        graph_free(g);
        return NULL;
    }
    g->lead = lead_trivia(&ps);
    const char *w, *gw;
    size_t n;
    int rc = -1;
    skip_ws(&ps);
    const char *start = ps.p;
    if (!word(&ps, &w, &n) || !word_is(w, n, "graph")) {
        ps.p = start;
        expected(&ps, "'graph NAME' to start the file");
    } else {
        skip_ws(&ps);
        if (!word(&ps, &gw, &n)) {
            expected(&ps, "the graph's name");
        } else {
            g->name = arena_strndup(&g->arena, gw, n);
            rc = end_of_line(&ps, &g->tail);
            if (rc == 0) rc = parse_block(&ps, -1);
            if (rc == 0) rc = graph_verify(g, d);
        }
    }
    if (rc != 0) {
        graph_free(g);
        return NULL;
    }
    return g;
}

graph *graph_parse_file(const char *path, diag *d) {
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, d)) return NULL;
    graph *g = graph_parse(path, text, len, d);
    free(text);
    return g;
}
