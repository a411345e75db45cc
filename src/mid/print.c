/* print.c: a readable dump of a mid program, one prim per line. */
#include "mid.h"

static void put_layout(FILE *f, const layout *l) {
    static const char *enc[] = {"rm", "ampl", "ampo", "rmt", "amplt"};
    fputc('[', f);
    for (int a = 0; a < l->rank; a++) {
        fprintf(f, "%s%lld", a ? "," : "", (long long)l->dim[a]);
        if (l->parts[a] > 1) fprintf(f, "/%lld", (long long)l->parts[a]);
    }
    fprintf(f, "]%s", enc[l->enc]);
    for (int k = 0; k < l->nrep; k++) fprintf(f, " x%lld", (long long)l->rep[k]);
}

static void put_tensor(FILE *f, const mid_program *p, int32_t t) {
    const mid_tensor *x = mid_t(p, t);
    fprintf(f, "%%%s:%s", x->name, dtype_name(x->dtype));
    if (x->placed) put_layout(f, &x->lay);
    if (x->stack > 1) fprintf(f, " stack %lld", (long long)x->stack);
}

static void put_block(FILE *f, const mid_program *p, const mid_block *b, int indent) {
    for (int32_t i = 0; i < b->n; i++) {
        const mid_prim *pr = mid_p(p, b->v[i]);
        fprintf(f, "%*s", indent, "");
        if (pr->kind == MID_REPEAT) {
            fprintf(f, "repeat %lld {\n", (long long)pr->count);
            put_block(f, p, &pr->body, indent + 2);
            fprintf(f, "%*s}\n", indent, "");
            continue;
        }
        for (int k = 0; k < pr->nout; k++) {
            if (k) fputs(", ", f);
            put_tensor(f, p, pr->out[k]);
        }
        fprintf(f, " = %s", mid_kind_names[pr->kind]);
        if (pr->kind == MID_EWISE) fprintf(f, ".%s", mid_ew_names[pr->ew]);
        if (pr->kind == MID_SOFTMAX && pr->f[0] != 0) fputs(".prescaled", f); /* a scale done by the softmax */
        if ((pr->kind == MID_EWISE || pr->kind == MID_LAYER_NORM) && pr->acc != DT_F32)
            fprintf(f, ".via_%s", dtype_name(pr->acc)); /* a cast done by its producer */
        if (pr->kind == MID_REDUCE && pr->f[0] != 0) fputs(".gelu", f); /* a GeLU done by the reduction */
        if (pr->kind == MID_REDUCE && !mid_reduce_has_bias(pr) && pr->grad != DT_F32 && pr->f[0] == 0)
            fprintf(f, ".via_%s", dtype_name(pr->grad)); /* a cast done by the reduction */
        if (pr->kind == MID_GEMM || pr->kind == MID_GEMM_EPI) {
            const layout *lc = &mid_t(p, pr->out[0])->lay;
            if (pr->swap) fputs(".swap", f); /* B streams */
            if (pr->col_run && pr->col_run < lc->block[layout_panel_axis(lc)])
                fprintf(f, ".strips%lld", (long long)pr->col_run);
            if (pr->panel_batch) fputs(".panels", f);
        }
        if (pr->kind == MID_GEMM_EPI || pr->kind == MID_REDUCE_EPI) fprintf(f, ".%s", mid_epi_names[pr->epi]);
        if (pr->has_view) fputs(".view", f);
        if (pr->residual) fputs(".residual", f); /* a residual add done by the reduce */
        if (pr->remote) fputs(".remote_only", f); /* a tile's own share written by the producer */
        if (pr->own) fputs(pr->kind == MID_COPY ? ".remote" : ".own", f); /* own partials read in place */
        fputc('(', f);
        for (int k = 0; k < pr->nin; k++) {
            if (k) fputs(", ", f);
            put_tensor(f, p, pr->in[k]);
        }
        fprintf(f, ")  # %s\n", graph_op_name(p->g, pr->origin));
    }
}

void mid_print(FILE *f, const mid_program *p) { put_block(f, p, &p->top, 0); }
