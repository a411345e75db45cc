/* cmd_ref.c: `tessel ref MODEL`: the FP32 reference interpreter, pure or plan-exact. */
#include <stdlib.h>
#include <string.h>

#include "../models/models.h"
#include "cli.h"

int cmd_ref(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    double t0 = util_now_seconds();
    graph *g = cli_load_model(c, &p, p.pos[0], &d);
    if (!g) return cli_report(&d);
    int32_t nin, nout;
    host_spec *ins = driver_graph_specs(g, false, &nin), *outs = driver_graph_specs(g, true, &nout);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    float **pure = NULL;
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    ref_options o = {.strip_precision = cli_flag(c, &p, "--strip-precision"), .quiet = cli_flag(c, &p, "--quiet")};
    /* --emulate PKG: the plan-exact reference, from the numeric decisions
     * the package records; the package must come from this model. */
    const char *emulate = cli_opt(c, &p, "--emulate");
    graph_numerics plan = {0};
    if (emulate && o.strip_precision)
        rc = diag_fail(&d, "tessel ref: error: option '--emulate %s': the plan-exact reference keeps the model's precision "
                           "(drop --strip-precision)", emulate);
    if (emulate && rc == 0) {
        package pkg;
        rc = package_load(emulate, &pkg, &d);
        if (rc == 0) {
            rc = driver_package_matches(g, &pkg, emulate, &d);
            if (rc == 0) rc = graph_numerics_parse(g, pkg.meta, emulate, &plan, &d);
            package_free(&pkg);
        }
        o.plan = rc == 0 ? &plan : NULL;
    }
    double t1 = util_now_seconds();
    if (rc == 0) rc = cli_load_inputs(c, &p, ins, nin, inputs, source, &d);
    /* Output files are created (so checked) before the work. */
    const char *dir = cli_opt(c, &p, "--output-dir");
    cli_outputs files = {0};
    if (rc == 0) rc = cli_outputs_open(&files, dir, outs, nout, NULL, &d);
    if (rc == 0) rc = ref_run(g, &o, inputs, outputs, &d);
    double t2 = util_now_seconds();
    /* The pure FP32 model on the same inputs, to show what precision costs. */
    if (rc == 0 && cli_flag(c, &p, "--against-fp32")) {
        pure = xcalloc((size_t)nout + 1, sizeof(float *));
        ref_options po = o;
        po.strip_precision = true;
        rc = ref_run(g, &po, inputs, pure, &d);
    }
    if (rc == 0) rc = cli_outputs_commit(&files, outs, outputs, NULL, NULL, NULL, NULL, &d);
    else cli_outputs_abort(&files);
    if (rc == 0) {
        progress_done(); /* the results follow */
        int64_t nparams = 0, nops = 0;
        for (int32_t i = 0; i < g->ops.n; i++) {
            const graph_op *op = graph_opr(g, i);
            if (op->kind == OP_PARAM) nparams += graph_type_numel(&graph_val(g, op->out[0])->type);
            else if (!graph_op_infos[op->kind].structural) nops++;
        }
        char pc[32], mem[32];
        fmt_count(pc, sizeof pc, (double)nparams);
        fmt_bytes(mem, sizeof mem, (double)util_peak_rss_bytes());
        printf("graph %s (%s): %lld ops, %s parameters%s\n", g->name, p.pos[0], (long long)nops, pc,
               o.strip_precision ? ", precision stripped (pure FP32)" : "");
        if (emulate) printf("plan-exact emulated reference: the numeric decisions of %s\n", emulate);
        for (int32_t j = 0; j < nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", cli_input_source(&ins[j], source[j]));
            cli_print_stats("input", &ins[j], inputs[j], note);
        }
        for (int32_t j = 0; j < nout; j++) {
            char note[300] = "";
            if (dir) snprintf(note, sizeof note, "-> %s/%s.npy", dir, outs[j].name);
            cli_print_stats("output", &outs[j], outputs[j], dir ? note : NULL);
            if (pure) {
                num_diff df = num_compare(outputs[j], pure[j], (size_t)host_numel(&outs[j]));
                printf("  %-6s %-14s vs pure FP32: cosine %.6f, max abs err %.4g, rms err %.4g (output rms %.4g)\n", "", "",
                       df.cosine, df.max_abs_err, df.rms_err, df.want_rms);
            }
        }
        printf("reference: %.2f s (load %.2f s), peak memory %s\n", t2 - t1, t1 - t0, mem);
    }
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    for (int32_t j = 0; j < nout; j++) {
        free(outputs[j]);
        if (pure) free(pure[j]);
    }
    free(pure);
    free(inputs);
    free(outputs);
    free(source);
    free(ins);
    free(outs);
    if (plan.op) graph_numerics_free(&plan);
    graph_free(g);
    return rc ? cli_report(&d) : 0;
}
