/* bench_epilogue.c: what the optimizer epilogue fusion buys (docs/epilogue.md).
 * Compiles a training step for c600 with the fusion and without (the
 * baseline), simulates both on the same inputs, and prints per tile the peak
 * SRAM the live buffers take, the highest address placement reaches, the
 * gradient bytes the fusion removes, and the simulated cycles, each with its
 * ratio fused / unfused; then that both packages give the same bits and
 * (not with --smoke) that the fused one checks exactly against the model's
 * plan-exact reference and the proof holds. Without --smoke it also shows a
 * step only the fused plan fits. Built on the public library alone
 * (include/tessel/tessel.h): the compile report carries the fusions, the
 * placement's figures and the unfused plan as a recipe.
 *
 *   bench_epilogue [--smoke] [--model zoo:...] [--keep DIR]
 *
 * --keep DIR writes the first model's two packages to DIR/fused.tpk and
 * DIR/unfused.tpk, for `tessel inspect` (what is live at the peak).
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessel/tessel.h>

typedef struct side {
    bool ok;              /* compiled and ran */
    char why[512];        /* else the first line of the error */
    tessel_package *p;
    json_t *report;       /* the compile report */
    json_t *run;          /* the run's statistics */
    float **out;          /* per output */
} side;

static void first_line(char *dst, size_t cap, const char *text) {
    snprintf(dst, cap, "%s", text);
    char *nl = strchr(dst, '\n');
    if (nl) *nl = 0;
}

static double num(json_t *j, const char *a, const char *b) {
    json_t *v = json_object_get(j, a);
    return json_number_value(b ? json_object_get(v, b) : v);
}

/* recipe: the plan to replay (no search, no fusion), or NULL to search. */
static side build(const tessel_model *g, const tessel_machine *m, const char *recipe, int64_t steps) {
    side s = {0};
    tessel_error err;
    tessel_compile_options co;
    tessel_compile_options_init(&co);
    co.report = 1;
    co.recipe = recipe;
    co.search_steps = recipe ? 0 : steps;
    co.no_fuse = recipe != NULL;
    if (tessel_compile(g, m, &co, &s.p, &err)) {
        first_line(s.why, sizeof s.why, err.message);
        return s;
    }
    s.report = json_loads(tessel_package_report_json(s.p), 0, NULL);
    int nout = tessel_package_count(s.p, TESSEL_OUTPUT);
    s.out = calloc((size_t)nout + 1, sizeof(float *));
    tessel_tensor *t = calloc((size_t)nout + 1, sizeof(tessel_tensor));
    for (int j = 0; j < nout; j++) {
        tessel_tensor_info info;
        tessel_package_tensor(s.p, TESSEL_OUTPUT, j, &info, NULL);
        int64_t n = 1;
        for (int a = 0; a < info.rank; a++) n *= info.shape[a];
        s.out[j] = malloc(sizeof(float) * (size_t)(n ? n : 1));
        t[j] = (tessel_tensor){.name = info.name, .dtype = TESSEL_F32, .rank = info.rank, .data = s.out[j]};
        memcpy(t[j].shape, info.shape, sizeof t[j].shape);
    }
    tessel_result *r = NULL;
    if (tessel_run(s.p, NULL, 0, t, nout, NULL, &r, &err)) first_line(s.why, sizeof s.why, err.message);
    else s.run = json_loads(tessel_result_json(r), 0, NULL), s.ok = true;
    tessel_result_free(r);
    free(t);
    return s;
}

static void side_free(side *s) {
    int nout = s->p ? tessel_package_count(s->p, TESSEL_OUTPUT) : 0;
    for (int j = 0; s->out && j < nout; j++) free(s->out[j]);
    free(s->out);
    json_decref(s->report);
    json_decref(s->run);
    tessel_package_free(s->p);
}

static void kib_row(const char *what, double f, double u) {
    printf("  %-28s %12.1f KiB %12.1f KiB %10.3f\n", what, f / 1024, u / 1024, f / u);
}

static void count_row(const char *what, double f, double u) {
    printf("  %-28s %16.0f %16.0f %10.3f\n", what, f, u, f / u);
}

/* Elements of the outputs of f and u that differ, bit for bit. */
static int64_t differing(const side *f, const side *u) {
    int64_t differ = 0;
    for (int j = 0; j < tessel_package_count(f->p, TESSEL_OUTPUT); j++) {
        tessel_tensor_info info;
        tessel_package_tensor(f->p, TESSEL_OUTPUT, j, &info, NULL);
        int64_t n = 1;
        for (int a = 0; a < info.rank; a++) n *= info.shape[a];
        for (int64_t i = 0; i < n; i++) differ += memcmp(&f->out[j][i], &u->out[j][i], sizeof(float)) != 0;
    }
    return differ;
}

/* One model, fused against unfused; 0 when both compiled and agree. The
 * fused step is searched; the unfused one replays the same grids (the
 * report's unfused_recipe: each fused op's grid given to its matmul), so
 * the two differ by the fusion alone. */
static int compare(const char *model, const tessel_machine *m, int64_t steps, bool check, const char *keep) {
    tessel_error err;
    tessel_model *g = NULL;
    if (tessel_model_load(model, NULL, &g, &err)) {
        fputs(err.message, stderr);
        return 2;
    }
    side f = build(g, m, NULL, steps), u = {0};
    json_t *unfused = f.report ? json_object_get(f.report, "unfused_recipe") : NULL;
    char path[] = "/tmp/bench_epilogue_XXXXXX";
    int fd = unfused ? mkstemp(path) : -1;
    if (fd >= 0) {
        FILE *rf = fdopen(fd, "w");
        json_dumpf(unfused, rf, JSON_INDENT(1) | JSON_SORT_KEYS);
        fclose(rf);
        u = build(g, m, path, 0);
        remove(path);
    } else if (f.ok) {
        snprintf(u.why, sizeof u.why, "the fused plan fused nothing (no unfused recipe to replay)");
    } else {
        u = build(g, m, NULL, steps);
    }
    printf("%s on %s (fused: %lld search steps; unfused: the same grids)\n", model, tessel_machine_name(m), (long long)steps);
    int rc = 0;
    if (!f.ok || !u.ok) {
        printf("  fused:   %s\n  unfused: %s\n", f.ok ? "compiles and runs" : f.why, u.ok ? "compiles and runs" : u.why);
        if (f.ok)
            printf("  fused peak live SRAM per tile %.1f KiB (tile %.0f, step %.0f)\n", num(f.report, "placed", "peak_live_bytes") / 1024.0,
                   num(f.report, "placed", "peak_live_tile"), num(f.report, "placed", "peak_live_step"));
        rc = f.ok ? 0 : 1;
    } else {
        if (keep) {
            char kp[4096];
            snprintf(kp, sizeof kp, "%s/fused.tpk", keep);
            int krc = tessel_package_save(f.p, kp, &err);
            snprintf(kp, sizeof kp, "%s/unfused.tpk", keep);
            if (krc == 0) krc = tessel_package_save(u.p, kp, &err);
            if (krc) {
                fputs(err.message, stderr);
                rc = 2;
            }
        }
        json_t *fusions = json_object_get(f.report, "fusions");
        double total = 0;
        int nfused = 0;
        size_t k;
        json_t *c;
        json_array_foreach(fusions, k, c) {
            total += num(c, "sram_saved_bytes_per_tile", NULL);
            nfused += json_is_true(json_object_get(c, "fused"));
        }
        printf("  %-28s %16s %16s %10s\n", "", "fused", "unfused", "ratio");
        kib_row("peak live SRAM per tile", num(f.report, "placed", "peak_live_bytes"), num(u.report, "placed", "peak_live_bytes"));
        kib_row("peak live payload per tile", num(f.report, "placed", "peak_live_payload_bytes"),
                num(u.report, "placed", "peak_live_payload_bytes"));
        kib_row("memory reached per tile", num(f.report, "placed", "tile_bytes"), num(u.report, "placed", "tile_bytes"));
        count_row("simulated cycles", num(f.run, "cycles", NULL), num(u.run, "cycles", NULL));
        count_row("  compute", num(f.run, "compute_cycles", NULL), num(u.run, "compute_cycles", NULL));
        count_row("  exchange", num(f.run, "exchange_cycles", NULL), num(u.run, "exchange_cycles", NULL));
        printf("  %-28s %12.1f MiB %12.1f MiB %10.3f\n", "exchanged", num(f.run, "exchange_bytes", NULL) / 1048576.0,
               num(u.run, "exchange_bytes", NULL) / 1048576.0, num(f.run, "exchange_bytes", NULL) / num(u.run, "exchange_bytes", NULL));
        printf("  peak live: tile %.0f at step %.0f fused, tile %.0f at step %.0f unfused\n", num(f.report, "placed", "peak_live_tile"),
               num(f.report, "placed", "peak_live_step"), num(u.report, "placed", "peak_live_tile"), num(u.report, "placed", "peak_live_step"));
        printf("  fused %d of %zu optimizer steps; gradient buffers removed: %.1f KiB per tile", nfused, json_array_size(fusions),
               total / 1024.0);
        int listed = 0;
        json_array_foreach(fusions, k, c) if (json_is_true(json_object_get(c, "fused")))
            printf("%s%s %.1f KiB", listed++ ? ", " : " (", json_string_value(json_object_get(c, "consumer")),
                   num(c, "sram_saved_bytes_per_tile", NULL) / 1024.0);
        printf("%s\n", listed ? ")" : "");
        /* P1: the same grids, so the same accumulation order, give the same bits. */
        int64_t differ = differing(&f, &u);
        printf("  fused and unfused outputs: %s\n", differ ? "DIFFER with the same grids" : "bit for bit the same (P1)");
        if (differ) rc = 1;
        if (check) {
            char *cj = NULL;
            tessel_status st = tessel_check(g, f.p, NULL, 0, NULL, &cj, &err);
            json_t *j = cj ? json_loads(cj, 0, NULL) : NULL;
            if (!j) {
                fputs(err.message, stderr);
                rc = 2;
            } else {
                int stored = 0;
                json_array_foreach(json_object_get(j, "fusions"), k, c)
                    stored += json_is_true(json_object_get(c, "fused")) &&
                              json_is_true(json_object_get(json_object_get(c, "proof"), "materialized"));
                double ndiff = num(j, "differing", NULL);
                printf("  tessel check of the fused package: %s against the plan-exact reference (%.0f elements differ), "
                       "cosine %.6f against the FP32 step; proof: %s\n",
                       ndiff ? "NOT exact" : "exact", ndiff, num(j, "cosine", NULL),
                       stored ? "a fused gradient is STORED" : "no buffer holds a fused gradient");
                if (st != TESSEL_OK || stored) rc = 1;
            }
            json_decref(j);
            tessel_free(cj);
        }
    }
    side_free(&f);
    side_free(&u);
    tessel_model_free(g);
    return rc;
}

int main(int argc, char **argv) {
    bool smoke = false;
    const char *model = NULL, *keep = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0) smoke = true;
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
        else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc) keep = argv[++i];
        else {
            fprintf(stderr, "bench_epilogue: error: option '%s': not --smoke, --model zoo:... or --keep DIR\n", argv[i]);
            return 2;
        }
    }
    tessel_machine *m = NULL;
    tessel_error err;
    if (tessel_machine_load("c600", &m, &err)) {
        fputs(err.message, stderr);
        return 2;
    }
    if (!model)
        model = smoke ? "zoo:train-mlp:optimizer=adamw,tokens=128,width=256,hidden=1024"
                      : "zoo:train-mlp:optimizer=adamw,tokens=512,width=1152,hidden=4304";
    int rc = compare(model, m, smoke ? 8 : 48, !smoke, keep);
    if (!smoke && rc == 0) {
        printf("\n");
        /* A wider step whose gradients tip the unfused plan over the tile. */
        rc = compare("zoo:train-mlp:optimizer=adamw,tokens=256,width=1536,hidden=6144", m, 8, false, NULL);
    }
    tessel_machine_free(m);
    return rc;
}
