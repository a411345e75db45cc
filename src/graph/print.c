/* print.c: canonical .tsl text. The parser reads back exactly what this writes. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    TS_ASSERT(n >= 0 && (size_t)n < sizeof tmp);
    sb_put(b, tmp, (size_t)n);
}

static void put_double(sbuf *b, double x) {
    char t[48];
    fmt_double(t, sizeof t, x);
    sb_str(b, t);
}

static void put_type(sbuf *b, const graph_type *t) {
    char buf[160];
    graph_type_str(t, buf, sizeof buf);
    sb_str(b, buf);
}

static void put_value(sbuf *b, const graph *g, int32_t v) {
    sb_str(b, "%");
    sb_str(b, graph_val(g, v)->name);
}

static void put_values(sbuf *b, const graph *g, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        if (i) sb_str(b, ", ");
        put_value(b, g, ids[i]);
    }
}

static void put_attr(sbuf *b, graph_attr_kind kind, const graph_attr *a) {
    switch (kind) {
    case ATTR_KIND_BOOL: sb_str(b, a->b ? "true" : "false"); break;
    case ATTR_KIND_INT: sb_printf(b, "%lld", (long long)a->i); break;
    case ATTR_KIND_FLOAT: put_double(b, a->f); break;
    case ATTR_KIND_DTYPE: sb_str(b, dtype_name(a->t)); break;
    case ATTR_KIND_INTS:
        sb_str(b, "[");
        for (int32_t i = 0; i < a->ints.n; i++) sb_printf(b, "%s%lld", i ? ", " : "", (long long)a->ints.v[i]);
        sb_str(b, "]");
        break;
    }
}

static void put_attrs(sbuf *b, const graph_op *o) {
    if (!o->attr_set) return;
    sb_str(b, " {");
    bool first = true;
    for (int a = 0; a < ATTR_COUNT; a++) {
        if (!(o->attr_set & (1ull << a))) continue;
        sb_printf(b, "%s%s = ", first ? "" : ", ", graph_attr_names[a]);
        put_attr(b, graph_attr_kinds[a], &o->attr[a]);
        first = false;
    }
    sb_str(b, "}");
}

static void put_decl_type(sbuf *b, const graph_type *t) {
    put_type(b, t);
    if (dtype_is_f8(t->dtype)) sb_printf(b, " {scale = %d}", t->scale);
}

static void put_init(sbuf *b, const graph_init *in) {
    switch (in->kind) {
    case INIT_ZEROS: sb_str(b, "zeros"); break;
    case INIT_ONES: sb_str(b, "ones"); break;
    case INIT_NORMAL:
        sb_str(b, "normal(");
        put_double(b, in->mean);
        sb_str(b, ", ");
        put_double(b, in->std);
        sb_printf(b, ", seed = %llu", (unsigned long long)in->seed);
        if (in->skip) sb_printf(b, ", skip = %lld", (long long)in->skip);
        sb_str(b, ")");
        break;
    case INIT_NPY:
        sb_str(b, "npy(\"");
        for (const char *c = in->path; *c; c++) {
            if (*c == '"' || *c == '\\') sb_str(b, "\\");
            sb_put(b, c, 1);
        }
        sb_str(b, "\")");
        break;
    case INIT_DATA: sb_printf(b, "data(%d)", in->nparts); break;
    case INIT_CONCAT:
        sb_str(b, "concat(");
        for (int32_t k = 0; k < in->ncat; k++) {
            if (k) sb_str(b, ", ");
            put_init(b, &in->cat[k]);
            sb_printf(b, " x%lld", (long long)in->width[k]);
        }
        sb_str(b, ")");
        break;
    }
}

static void put_block(sbuf *b, const graph *g, const graph_block *blk, int indent);

static void put_line_end(sbuf *b, const char *tail) {
    if (tail) sb_str(b, tail);
    sb_str(b, "\n");
}

static void put_op(sbuf *b, const graph *g, int32_t id, int indent) {
    const graph_op *o = graph_opr(g, id);
    if (o->lead) sb_str(b, o->lead);
    sb_printf(b, "%*s", indent, "");
    switch (o->kind) {
    case OP_INPUT:
    case OP_PARAM:
        sb_printf(b, "%s ", graph_op_infos[o->kind].name);
        put_value(b, g, o->out[0]);
        sb_str(b, " : ");
        put_decl_type(b, &graph_val(g, o->out[0])->type);
        if (o->kind == OP_PARAM) {
            sb_str(b, " = ");
            put_init(b, &o->init);
        }
        break;
    case OP_OUTPUT:
    case OP_YIELD:
        sb_str(b, graph_op_infos[o->kind].name);
        if (o->nin) sb_str(b, " ");
        put_values(b, g, o->in, o->nin);
        break;
    case OP_REPEAT:
        put_values(b, g, o->out, o->nout);
        sb_printf(b, " = repeat %lld carry(", (long long)o->count);
        for (int32_t i = 0; i < o->nargs; i++) {
            if (i == o->ncarry) sb_str(b, ") slice(");
            else if (i) sb_str(b, ", ");
            put_value(b, g, o->args[i]);
            sb_str(b, " = ");
            put_value(b, g, o->in[i]);
        }
        sb_str(b, ") {");
        put_line_end(b, o->tail);
        put_block(b, g, &o->body, indent + 2);
        if (o->end_lead) sb_str(b, o->end_lead);
        sb_printf(b, "%*s}", indent, "");
        put_line_end(b, o->end_tail);
        return;
    default:
        put_values(b, g, o->out, o->nout);
        sb_printf(b, " = %s(", graph_op_infos[o->kind].name);
        put_values(b, g, o->in, o->nin);
        sb_str(b, ")");
        put_attrs(b, o);
        sb_str(b, " : ");
        for (int32_t i = 0; i < o->nout; i++) {
            if (i) sb_str(b, ", ");
            put_type(b, &graph_val(g, o->out[i])->type);
        }
        break;
    }
    put_line_end(b, o->tail);
}

static void put_block(sbuf *b, const graph *g, const graph_block *blk, int indent) {
    for (int32_t i = 0; i < blk->n; i++) put_op(b, g, blk->v[i], indent);
}

char *graph_print(const graph *g) {
    sbuf b = {0};
    if (g->lead) sb_str(&b, g->lead);
    sb_str(&b, "graph ");
    sb_str(&b, g->name);
    put_line_end(&b, g->tail);
    put_block(&b, g, &g->body, 0);
    if (g->end_lead) sb_str(&b, g->end_lead);
    return b.p;
}
