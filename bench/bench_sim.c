/* bench_sim.c: the simulator's host throughput. Compiles an MLP for c600,
 * simulates it, and prints simulated multiply-adds per second of host time
 * next to OpenBLAS sgemm's on the same shapes, same host, same run.
 *
 *   bench_sim [--smoke] [--model zoo:...]
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "models/models.h"

static double sgemm_rate(int64_t m, int64_t n, int64_t k, int reps) {
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n)),
          *c = malloc(sizeof(float) * (size_t)(m * n));
    graph_normal_fill(1, 0, 1, a, m * k);
    graph_normal_fill(2, 0, 1, b, k * n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1, a, (int)k, b, (int)n, 0, c, (int)n);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = util_now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1, a, (int)k, b, (int)n, 0, c, (int)n);
        double rate = (double)m * n * k / (util_now_seconds() - t0);
        if (rate > best) best = rate;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv) {
    bool smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    const char *model = smoke ? "zoo:mlp:tokens=128,width=256,hidden=1024,precision=fp8"
                              : "zoo:mlp:tokens=729,width=1152,hidden=4304,precision=fp8";
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0) model = argv[i + 1];
    diag d = {0};
    machine m;
    machine_preset("c600", &m);
    graph *g = models_load(model, &d);
    package p;
    compile_info ci;
    compile_options co = {.model = model, .search_steps = 48, .quiet = true};
    if (!g || driver_compile(g, &m, &co, &p, &ci, &d)) {
        fputs(d.text, stderr);
        return 2;
    }
    int32_t ids[16], nin = graph_inputs(g, ids, 16), nout = graph_outputs(g, NULL, 0);
    float *in[16], **out = calloc((size_t)nout + 1, sizeof(float *));
    for (int32_t i = 0; i < nin; i++) {
        in[i] = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(g, ids[i])->type));
        graph_input_default(g, ids[i], i, in[i]);
    }
    /* Best of a few runs: the host is shared. */
    sim_stats best = {0};
    for (int r = 0; r < (smoke ? 2 : 3); r++) {
        sim_stats st;
        sim_options so = {.quiet = true};
        if (sim_run(&p, &so, in, out, &st, &d)) {
            fputs(d.text, stderr);
            return 2;
        }
        for (int32_t j = 0; j < nout; j++) free(out[j]);
        if (r == 0 || st.kernel_seconds < best.kernel_seconds) best = st;
    }
    /* The same multiply-adds in two sgemm calls of the MLP's shapes. */
    const graph_type *w1 = &graph_val(g, graph_lookup(g, "w1"))->type, *x = &graph_val(g, graph_lookup(g, "x"))->type;
    int64_t T = x->dim[0], W = w1->dim[0], H = w1->dim[1];
    double blas = 2.0 * T * W * H / (T * W * H / sgemm_rate(T, H, W, 3) + T * H * W / sgemm_rate(T, W, H, 3));
    double sim_rate = (double)best.macs / best.kernel_seconds, whole = (double)best.macs / best.host_seconds;
    printf("model              %s on c600 (%d host threads)\n", model, util_threads());
    printf("simulated          %.3g multiply-adds, %llu cycles\n", (double)best.macs, (unsigned long long)best.cycles);
    printf("sim kernels        %.2f G multiply-adds/s (%.3f s in compute sets)\n", sim_rate / 1e9, best.kernel_seconds);
    printf("sim whole run      %.2f G multiply-adds/s (%.3f s with exchanges and host I/O)\n", whole / 1e9, best.host_seconds);
    printf("openblas sgemm     %.2f G multiply-adds/s\n", blas / 1e9);
    printf("ratio              %.3f (sim kernels / sgemm), %.3f (whole run / sgemm)\n", sim_rate / blas, whole / blas);
    for (int32_t i = 0; i < nin; i++) free(in[i]);
    free(out);
    package_free(&p);
    graph_free(g);
    return 0;
}
