/* print.c: the mid text form (docs/ir.md, "Mid text"). It carries everything
 * a mid program holds, so parse.c reads back the same program and printing
 * is a fixed point:
 *
 *   graph ...            the graph it was expanded from, in .tsl form
 *   --- mid              the separator
 *   machine tiny         the machine it was expanded for
 *   tensors N            one line per tensor, in id order, with every field
 *   prims N              one line per prim, blocks in program order
 *   detached N           prims no block holds (absorbed by a consumer fold)
 *   inputs, outputs      tensor handles
 *   probes               one line per probe
 *
 * Tensors are named by handle: %name, or %name~k for the k-th later tensor
 * of the same name (names repeat: a value copied into several layouts).
 * Graph values and ops are named by their stable names, never by id; prims
 * by their id, pN, which the text keeps so a program reads back unchanged. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "mid.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const mid_enc_names[MID_ENC_COUNT] = {"rm", "ampl", "ampo", "rmt", "amplt"};

typedef struct printer {
    FILE *f;
    const mid_program *p;
    int32_t *dup;          /* per tensor: earlier tensors of the same name */
    int32_t *ordinal;      /* per graph op without results: index among its kind's */
} printer;

static void put_float(FILE *f, float x) {
    if (isnan(x)) { fputs("nan", f); return; }
    if (isinf(x)) { fputs(x < 0 ? "-inf" : "inf", f); return; }
    char t[48];
    /* The shortest decimal that reads back as the same float, bit for bit. */
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, (double)x);
        float y = strtof(t, NULL);
        if (memcmp(&x, &y, sizeof x) == 0) break;
    }
    fputs(t, f);
}

static void put_handle(const printer *pr, int32_t t) {
    fprintf(pr->f, "%%%s", mid_t(pr->p, t)->name);
    if (pr->dup[t]) fprintf(pr->f, "~%d", (int)pr->dup[t]);
}

static void put_op(const printer *pr, int32_t op) {
    const graph *g = pr->p->g;
    if (op < 0) { fputc('-', pr->f); return; }
    const graph_op *o = graph_opr(g, op);
    if (o->nout > 0) fputs(graph_val(g, o->out[0])->name, pr->f);
    else fprintf(pr->f, "%s:%d", graph_op_infos[o->kind].name, (int)pr->ordinal[op]);
}

static void put_prim_ref(FILE *f, int32_t id) {
    if (id < 0) fputc('-', f);
    else fprintf(f, "p%d", (int)id);
}

/* "[17/4,40]rm x2": dims with their parts, the encoding, the replicas. */
static void put_layout_short(FILE *f, const layout *l) {
    fputc('[', f);
    for (int a = 0; a < l->rank; a++) {
        fprintf(f, "%s%lld", a ? "," : "", (long long)l->dim[a]);
        if (l->parts[a] > 1) fprintf(f, "/%lld", (long long)l->parts[a]);
    }
    fprintf(f, "]%s", mid_enc_names[l->enc]);
    for (int k = 0; k < l->nrep; k++) fprintf(f, " x%lld", (long long)l->rep[k]);
}

static void put_i64s(FILE *f, const char *key, const int64_t *v, int n) {
    fprintf(f, "%s=[", key);
    for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
    fputc(']', f);
}

static void put_i32s(FILE *f, const char *key, const int32_t *v, int n) {
    fprintf(f, "%s=[", key);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", (int)v[i]);
    fputc(']', f);
}

/* The rest of a layout: blocks, tiles, replica strides, element size when
 * it is not the dtype's. Axes beyond the rank are not printed. */
static void put_layout_full(FILE *f, const layout *l, dtype dt) {
    put_layout_short(f, l);
    fputs(" {", f);
    put_i64s(f, "block", l->block, l->rank);
    fputs(", ", f);
    put_i32s(f, "stride", l->tile_stride, l->rank);
    if (l->nrep) {
        fputs(", ", f);
        put_i32s(f, "rep_stride", l->rep_stride, l->nrep);
    }
    fprintf(f, ", base=%d", (int)l->tile_base);
    if (l->elem_bytes != dtype_bytes(dt)) fprintf(f, ", bytes=%d", (int)l->elem_bytes);
    fputc('}', f);
}

static const char *const tensor_kinds[] = {"temp", "param", "input"};

static void put_tensor_decl(const printer *pr, int32_t t) {
    const mid_tensor *x = mid_t(pr->p, t);
    FILE *f = pr->f;
    fputs("  ", f);
    put_handle(pr, t);
    fprintf(f, " = %s %s ", tensor_kinds[x->kind], dtype_name(x->dtype));
    if (x->placed) put_layout_full(f, &x->lay, x->dtype);
    else fputs("unplaced", f);
    if (x->scale) fprintf(f, " scale=%d", (int)x->scale);
    if (x->value >= 0) fprintf(f, " value=%%%s", graph_val(pr->p->g, x->value)->name);
    if (x->param_op >= 0) {
        fputs(" param=", f);
        put_op(pr, x->param_op);
    }
    if (x->stack != 1) fprintf(f, " stack=%lld", (long long)x->stack);
    if (x->slice_of >= 0) {
        fputs(" slice_of=", f);
        put_handle(pr, x->slice_of);
    }
    if (x->alias_of >= 0) {
        fputs(" alias_of=", f);
        put_handle(pr, x->alias_of);
    }
    if (x->scope >= 0) {
        fputs(" scope=", f);
        put_prim_ref(f, x->scope);
    }
    fputc('\n', f);
}

/* An operand or result: its handle, dtype and layout (as declared: the
 * parser checks they agree), so a line reads without the header. */
static void put_use(const printer *pr, int32_t t) {
    const mid_tensor *x = mid_t(pr->p, t);
    put_handle(pr, t);
    fprintf(pr->f, ":%s", dtype_name(x->dtype));
    if (x->placed) put_layout_short(pr->f, &x->lay);
}

/* Nonzero entries of a view array with at least n printed. */
static int view_len(const int64_t *v, int n) {
    int k = LAYOUT_MAX_RANK;
    while (k > n && v[k - 1] == 0) k--;
    return k;
}

/* The attributes a prim holds beyond its kind, flags and tensors: each
 * printed only when it is not the value mid_expand starts a prim with. */
static void put_attrs(const printer *pr, const mid_prim *x) {
    FILE *f = pr->f;
    bool any = false;
#define SEP() (fputs(any ? ", " : " {", f), any = true)
    if (x->kind != MID_EWISE && x->ew != 0) SEP(), fprintf(f, "ew=%s", kernel_ew_names[x->ew]);
    if (x->kind != MID_GEMM_EPI && x->kind != MID_REDUCE_EPI && x->epi != 0) SEP(), fprintf(f, "epi=%s", kernel_epi_names[x->epi]);
    if (x->acc != DT_F32) SEP(), fprintf(f, "acc=%s", dtype_name(x->acc));
    if (x->grad != 0) SEP(), fprintf(f, "grad=%s", dtype_name(x->grad));
    int nf = 5;
    while (nf > 0 && x->f[nf - 1] == 0 && !signbit(x->f[nf - 1])) nf--;
    if (nf) {
        SEP();
        fputs("f=[", f);
        for (int i = 0; i < nf; i++) {
            if (i) fputc(',', f);
            put_float(f, x->f[i]);
        }
        fputc(']', f);
    }
    if (x->axes) SEP(), fprintf(f, "axes=0x%x", (unsigned)x->axes);
    if (x->step) SEP(), fprintf(f, "step=%lld", (long long)x->step);
    if (x->col_run) SEP(), fprintf(f, "col_run=%lld", (long long)x->col_run);
    if (x->column) SEP(), fprintf(f, "column=%d", (int)x->column);
    if (x->cast_ordinal != -1) SEP(), fprintf(f, "cast=%d", (int)x->cast_ordinal);
    if (x->count) SEP(), fprintf(f, "count=%lld", (long long)x->count);
    if (x->has_view) {
        int dr = x->nout ? mid_t(pr->p, x->out[0])->lay.rank : 0, sr = x->nin ? mid_t(pr->p, x->in[0])->lay.rank : 0;
        int64_t axis[LAYOUT_MAX_RANK];
        for (int i = 0; i < LAYOUT_MAX_RANK; i++) axis[i] = x->view.axis[i];
        SEP();
        int na = view_len(axis, dr), no = view_len(x->view.off, dr), ns = view_len(x->view.src_fix, sr);
        put_i64s(f, "view.axis", axis, na);
        fputs(", ", f);
        put_i64s(f, "view.off", x->view.off, no);
        fputs(", ", f);
        put_i64s(f, "view.fix", x->view.src_fix, ns);
    }
#undef SEP
    if (any) fputc('}', f);
}

static void put_block(const printer *pr, const mid_block *b, int indent);

static void put_prim(const printer *pr, int32_t id, int indent) {
    const mid_prim *x = mid_p(pr->p, id);
    FILE *f = pr->f;
    fprintf(f, "%*sp%d ", indent, "", (int)id);
    if (x->kind == MID_REPEAT) {
        fprintf(f, "repeat %lld {  # ", (long long)x->count);
        put_op(pr, x->origin);
        fputc('\n', f);
        put_block(pr, &x->body, indent + 2);
        fprintf(f, "%*s}\n", indent, "");
        return;
    }
    for (int k = 0; k < x->nout; k++) {
        if (k) fputs(", ", f);
        put_use(pr, x->out[k]);
    }
    if (x->nout) fputs(" = ", f);
    fputs(mid_kind_names[x->kind], f);
    if (x->kind == MID_EWISE) fprintf(f, ".%s", kernel_ew_names[x->ew]);
    if (x->kind == MID_GEMM_EPI || x->kind == MID_REDUCE_EPI) fprintf(f, ".%s", kernel_epi_names[x->epi]);
    if (x->panel_batch) fputs(".panels", f);   /* one batched run of whole panels */
    if (x->swap) fputs(".swap", f);            /* B streams */
    if (x->keepdims) fputs(".keepdims", f);
    if (x->has_view) fputs(".view", f);
    if (x->own) fputs(".own", f);              /* own partials read or left in place */
    if (x->remote) fputs(".remote", f);        /* a tile's own share written by the producer */
    if (x->residual) fputs(".residual", f);    /* a residual add done by the reduce */
    if (x->early) fputs(".early", f);          /* a cast ahead of its copy chain (cast-order) */
    fputc('(', f);
    for (int k = 0; k < x->nin; k++) {
        if (k) fputs(", ", f);
        put_use(pr, x->in[k]);
    }
    fputc(')', f);
    put_attrs(pr, x);
    fputs("  # ", f);
    put_op(pr, x->origin);
    fputc('\n', f);
}

static void put_block(const printer *pr, const mid_block *b, int indent) {
    for (int32_t i = 0; i < b->n; i++) put_prim(pr, b->v[i], indent);
}

static void mark_block(const mid_program *p, const mid_block *b, bool *in_block) {
    for (int32_t i = 0; i < b->n; i++) {
        in_block[b->v[i]] = true;
        if (mid_p(p, b->v[i])->kind == MID_REPEAT) mark_block(p, &mid_p(p, b->v[i])->body, in_block);
    }
}

static void put_handles(const printer *pr, const char *what, const int32_t *v, int32_t n) {
    fputs(what, pr->f);
    for (int32_t i = 0; i < n; i++) {
        fputs(i ? ", " : " ", pr->f);
        put_handle(pr, v[i]);
    }
    fputc('\n', pr->f);
}

void mid_print(FILE *f, const mid_program *p) {
    char *gt = graph_print(p->g);
    fputs(gt, f);
    free(gt);
    fprintf(f, "%s\nmachine %s\n", MID_SEPARATOR, p->m ? p->m->name : "?");
    printer pr = {f, p, xcalloc((size_t)p->tensors.n + 1, sizeof(int32_t)), xcalloc((size_t)p->g->ops.n + 1, sizeof(int32_t))};
    strmap seen = {0};
    for (int32_t t = 0; t < p->tensors.n; t++) {
        int32_t k = 0;
        strmap_get(&seen, mid_t(p, t)->name, &k);
        pr.dup[t] = k;
        strmap_put(&seen, mid_t(p, t)->name, k + 1);
    }
    strmap_free(&seen);
    int32_t count[OP_COUNT] = {0};
    for (int32_t i = 0; i < p->g->ops.n; i++)
        if (graph_opr(p->g, i)->nout == 0) pr.ordinal[i] = count[graph_opr(p->g, i)->kind]++;
    fprintf(f, "tensors %d\n", (int)p->tensors.n);
    for (int32_t t = 0; t < p->tensors.n; t++) put_tensor_decl(&pr, t);
    fprintf(f, "prims %d\n", (int)p->prims.n);
    put_block(&pr, &p->top, 2);
    bool *in_block = xcalloc((size_t)p->prims.n + 1, 1);
    mark_block(p, &p->top, in_block);
    /* Always printed, so a test can tell the program's prims from the dead ones. */
    int32_t ndetached = 0;
    for (int32_t i = 0; i < p->prims.n; i++) ndetached += !in_block[i];
    fprintf(f, "detached %d\n", (int)ndetached);
    for (int32_t i = 0; i < p->prims.n; i++) {
        if (in_block[i]) continue;
        put_prim(&pr, i, 2);
        if (mid_p(p, i)->kind == MID_REPEAT) mark_block(p, &mid_p(p, i)->body, in_block);
    }
    free(in_block);
    put_handles(&pr, "inputs", p->inputs.v, p->inputs.n);
    put_handles(&pr, "outputs", p->outputs.v, p->outputs.n);
    fprintf(f, "probes %d\n", (int)p->probes.n);
    for (int32_t i = 0; i < p->probes.n; i++) {
        const mid_probe *q = &p->probes.v[i];
        fprintf(f, "  %%%s in ", graph_val(p->g, q->value)->name);
        put_handle(&pr, q->tensor);
        fputs(" after ", f);
        put_prim_ref(f, q->after);
        fputs(" scope ", f);
        put_prim_ref(f, q->scope);
        fputc('\n', f);
    }
    free(pr.dup);
    free(pr.ordinal);
}

char *mid_print_text(const mid_program *p, size_t *len) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    TS_ASSERT(f);
    mid_print(f, p);
    fclose(f);
    if (len) *len = n;
    return buf;
}
