/* bench_sim.c: the simulator's host throughput. Compiles an MLP for c600,
 * simulates it, and prints simulated multiply-adds per second of host time
 * next to OpenBLAS sgemm's on the same shapes, same host, same run. Built on
 * the public library alone (include/tessel/tessel.h).
 *
 *   bench_sim [--smoke] [--model zoo:mlp:...]
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tessel/tessel.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fill(float *x, int64_t n, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
}

static double sgemm_rate(int64_t m, int64_t n, int64_t k, int reps) {
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n)),
          *c = malloc(sizeof(float) * (size_t)(m * n));
    fill(a, m * k, 1);
    fill(b, k * n, 2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1, a, (int)k, b, (int)n, 0, c, (int)n);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1, a, (int)k, b, (int)n, 0, c, (int)n);
        double rate = (double)m * n * k / (now() - t0);
        if (rate > best) best = rate;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

typedef struct run_stats {
    double macs, kernel_seconds, host_seconds;
    unsigned long long cycles;
} run_stats;

static run_stats stats_of(const tessel_result *r) {
    json_t *j = json_loads(tessel_result_json(r), 0, NULL);
    run_stats s = {.macs = json_number_value(json_object_get(j, "macs")),
                   .kernel_seconds = json_number_value(json_object_get(j, "kernel_seconds")),
                   .host_seconds = json_number_value(json_object_get(j, "host_seconds")),
                   .cycles = (unsigned long long)tessel_result_cycles(r)};
    json_decref(j);
    return s;
}

int main(int argc, char **argv) {
    bool smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    const char *model = smoke ? "zoo:mlp:tokens=128,width=256,hidden=1024,precision=fp8"
                              : "zoo:mlp:tokens=729,width=1152,hidden=4304,precision=fp8";
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--model") == 0) model = argv[i + 1];
    tessel_error err;
    tessel_model *g = NULL;
    tessel_machine *m = NULL;
    tessel_package *p = NULL;
    tessel_compile_options co;
    tessel_compile_options_init(&co);
    co.search_steps = 48;
    if (tessel_model_load(model, NULL, &g, &err) || tessel_machine_load("c600", &m, &err) || tessel_compile(g, m, &co, &p, &err)) {
        fputs(err.message, stderr);
        return 2;
    }
    /* Best of a few runs: the host is shared. */
    run_stats best = {0};
    for (int r = 0; r < (smoke ? 2 : 3); r++) {
        tessel_result *res = NULL;
        if (tessel_run(p, NULL, 0, NULL, 0, NULL, &res, &err)) {
            fputs(err.message, stderr);
            return 2;
        }
        run_stats st = stats_of(res);
        tessel_result_free(res);
        if (r == 0 || st.kernel_seconds < best.kernel_seconds) best = st;
    }
    /* The same multiply-adds in two sgemm calls of the MLP's shapes: x is
     * [T, W], and its two GEMMs do T x W x H each. */
    tessel_tensor_info x;
    if (tessel_model_tensor(g, TESSEL_INPUT, 0, &x, &err) || x.rank != 2) {
        fprintf(stderr, "bench_sim: %s is not an MLP with a [tokens, width] input\n", model);
        return 2;
    }
    int64_t T = x.shape[0], W = x.shape[1], H = (int64_t)(best.macs / (2.0 * (double)T * (double)W) + 0.5);
    double blas = 2.0 * T * W * H / (T * W * H / sgemm_rate(T, H, W, 3) + T * H * W / sgemm_rate(T, W, H, 3));
    double sim_rate = best.macs / best.kernel_seconds, whole = best.macs / best.host_seconds;
    const char *threads = getenv("TESSEL_THREADS");
    printf("model              %s on c600 (%s host threads)\n", model, threads ? threads : "all");
    printf("simulated          %.3g multiply-adds, %llu cycles\n", best.macs, best.cycles);
    printf("sim kernels        %.2f G multiply-adds/s (%.3f s in compute sets)\n", sim_rate / 1e9, best.kernel_seconds);
    printf("sim whole run      %.2f G multiply-adds/s (%.3f s with exchanges and host I/O)\n", whole / 1e9, best.host_seconds);
    printf("openblas sgemm     %.2f G multiply-adds/s\n", blas / 1e9);
    printf("ratio              %.3f (sim kernels / sgemm), %.3f (whole run / sgemm)\n", sim_rate / blas, whole / blas);
    tessel_package_free(p);
    tessel_machine_free(m);
    tessel_model_free(g);
    return 0;
}
