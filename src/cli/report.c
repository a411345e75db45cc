/* report.c: what `tessel compile --report FILE.json` writes, and its
 * summary on stderr. Today it lists the optimizer epilogue fusions
 * (docs/epilogue.md); a report of the plan search is meant to add its own
 * members beside "fusions". */
#include "cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *epilogue_of(const graph *g, const fuse_candidate *c) {
    graph_op_kind k = graph_opr(g, c->consumer)->kind;
    return k == OP_ADAMW || k == OP_MATMUL_ADAMW ? "adam moments, then adamw_apply" : "sgd";
}

json_t *tessel_fusion_json(const graph *g, const fuse_plan *fp, const int64_t *saved, char *const *saved_names,
                           const epilogue_proof *proofs) {
    json_t *a = json_array();
    for (int32_t k = 0; k < fp->n; k++) {
        const fuse_candidate *c = &fp->c[k];
        json_t *e = json_pack("{s:s, s:s, s:o, s:b, s:s, s:s, s:s, s:s}", "consumer", graph_op_name(g, c->consumer),
                              "consumer_kind", graph_op_infos[graph_opr(g, c->consumer)->kind].name, "gradient",
                              c->gradient >= 0 ? json_string(graph_val(g, c->gradient)->name) : json_null(), "fused", c->fused,
                              "rule", fuse_rule_names[c->rule], "reason", c->why, "need", fuse_locality_names[c->need], "have",
                              fuse_locality_names[c->have]);
        if (c->given) json_object_set_new(e, "given", json_true());
        /* The optimizer state's dtype (the first state operand's), none for plain SGD. */
        const graph_op *o = graph_opr(g, c->consumer);
        int first = o->kind == OP_SGD || o->kind == OP_ADAMW ? 2 : 3;
        json_object_set_new(e, "state_dtype",
                            o->nin > first ? json_string(dtype_name(graph_val(g, o->in[first])->type.dtype)) : json_string("none"));
        bool made = c->producer >= 0 && !graph_op_infos[graph_opr(g, c->producer)->kind].structural;
        json_object_set_new(e, "producer", made ? json_string(graph_op_name(g, c->producer)) : json_null());
        json_object_set_new(e, "producer_kind", made ? json_string(graph_op_infos[graph_opr(g, c->producer)->kind].name) : json_null());
        if (c->fused) {
            json_object_set_new(e, "epilogue", json_string(epilogue_of(g, c)));
            json_object_set_new(e, "sram_saved_bytes_per_tile", json_integer(saved ? saved[k] : 0));
            json_object_set_new(e, "saved_buffers", json_string(saved_names && saved_names[k] ? saved_names[k] : ""));
        } else {
            json_object_set_new(e, "sram_saved_bytes_per_tile", json_integer(0));
        }
        if (proofs) {
            const epilogue_proof *p = &proofs[k];
            json_t *j = json_pack("{s:b, s:s}", "materialized", p->materialized, "evidence", p->evidence);
            json_object_set_new(j, "update_runs", json_integer(p->update_runs));
            json_object_set_new(j, "largest_gradient_buffer_bytes", json_integer(p->buffer_bytes));
            json_object_set_new(e, "proof", j);
        }
        json_array_append_new(a, e);
    }
    return a;
}

void tessel_fusion_summary(FILE *f, const graph *g, const fuse_plan *fp, const int64_t *saved, char *const *saved_names) {
    fprintf(f, "fusion: %d of %d optimizer steps run in their gradient GEMM's epilogue\n", (int)graph_fuse_fused(fp), (int)fp->n);
    for (int32_t k = 0; k < fp->n; k++) {
        const fuse_candidate *c = &fp->c[k];
        bool made = c->producer >= 0 && !graph_op_infos[graph_opr(g, c->producer)->kind].structural;
        fprintf(f, "  %-8s %s (%s) <- %s %s", c->fused ? "fused" : c->rule == FUSE_DISABLED ? "legal" : "refused",
                graph_op_name(g, c->consumer), graph_op_infos[graph_opr(g, c->consumer)->kind].name,
                made ? graph_op_infos[graph_opr(g, c->producer)->kind].name : "value",
                made ? graph_op_name(g, c->producer) : c->gradient >= 0 ? graph_val(g, c->gradient)->name : "its own matmul");
        if (c->given) {
            fprintf(f, ": fused in the model itself\n");
        } else if (c->fused) {
            char b[32];
            fmt_bytes(b, sizeof b, saved ? (double)saved[k] : 0);
            fprintf(f, ": the gradient is never stored; saves %s per tile (%s bytes)\n", b,
                    saved_names && saved_names[k] ? saved_names[k] : "");
        } else {
            fprintf(f, " [%s]: %s\n", fuse_rule_names[c->rule], c->why);
        }
    }
}
