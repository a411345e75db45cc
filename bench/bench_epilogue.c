/* bench_epilogue.c: what the optimizer epilogue fusion buys (docs/epilogue.md).
 * Compiles a training step for c600 with the fusion and without (the
 * baseline), simulates both on the same inputs, and prints per tile the peak
 * SRAM the live buffers take, the highest address placement reaches, the
 * gradient bytes the fusion removes, and the simulated cycles, each with its
 * ratio fused / unfused; then that both packages give the same bits and
 * (not with --smoke) that the fused one checks exactly against the model's
 * plan-exact reference and the proof holds. Without --smoke it also shows a
 * step only the fused plan fits.
 *
 *   bench_epilogue [--smoke] [--model zoo:...] [--keep DIR]
 *
 * --keep DIR writes the first model's two packages to DIR/fused.tpk and
 * DIR/unfused.tpk, for `tessel inspect` (what is live at the peak).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/driver.h"
#include "models/models.h"

typedef struct side {
    bool ok;             /* compiled */
    char why[512];       /* else the first line of the error */
    package p;
    compile_info ci;   /* its fusions, and what each saves (ci.fusion_saved) */
    package_peak peak;
    sim_stats st;
    float **out;
    int32_t nout;
} side;

static void first_line(char *dst, size_t cap, const char *text) {
    snprintf(dst, cap, "%s", text);
    char *nl = strchr(dst, '\n');
    if (nl) *nl = 0;
}

/* recipe: the plan to replay (no search), or NULL to search. */
static side build(const graph *g, const machine *m, const char *model, bool no_fuse, const char *recipe, int64_t steps,
                  float *const *in) {
    side s;
    memset(&s, 0, sizeof s);
    diag d = {0};
    compile_options co = {.model = model, .recipe = recipe, .search_steps = recipe ? 0 : steps, .quiet = true,
                          .no_fuse = no_fuse, .fusion_report = true};
    package built;
    if (driver_compile(g, m, &co, &built, &s.ci, &d)) {
        first_line(s.why, sizeof s.why, d.text);
        return s;
    }
    size_t n;
    uint8_t *img = package_image(&built, &n);
    package_free(&built);
    if (package_parse(img, n, model, &s.p, &d)) {
        free(img);
        first_line(s.why, sizeof s.why, d.text);
        return s;
    }
    free(img);
    if (package_live_peak(&s.p, &s.peak, &d)) {
        first_line(s.why, sizeof s.why, d.text);
        return s;
    }
    s.nout = graph_outputs(g, NULL, 0);
    s.out = calloc((size_t)s.nout + 1, sizeof(float *));
    sim_options so = {.quiet = true};
    if (sim_run(&s.p, &so, in, s.out, &s.st, &d)) {
        first_line(s.why, sizeof s.why, d.text);
        return s;
    }
    s.ok = true;
    return s;
}

static void side_free(side *s) {
    for (int32_t j = 0; j < s->nout; j++) free(s->out[j]);
    free(s->out);
    if (s->ok) {
        sim_stats_free(&s->st);
        package_free(&s->p);
    }
    compile_info_free(&s->ci);
}

static void kib_row(const char *what, double f, double u) {
    printf("  %-28s %12.1f KiB %12.1f KiB %10.3f\n", what, f / 1024, u / 1024, f / u);
}

static float **inputs_of(const graph *g, int32_t *nin) {
    *nin = graph_inputs(g, NULL, 0);
    int32_t *ids = calloc((size_t)*nin + 1, sizeof(int32_t));
    graph_inputs(g, ids, *nin);
    float **in = calloc((size_t)*nin + 1, sizeof(float *));
    for (int32_t i = 0; i < *nin; i++) {
        in[i] = malloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(g, ids[i])->type));
        graph_input_default(g, ids[i], i, in[i]);
    }
    free(ids);
    return in;
}

/* One model, fused against unfused; 0 when both compiled and agree. The
 * fused step is searched; the unfused one replays the same grids (the
 * fused plan's recipe with each fused op's grid given to its matmul), so
 * the two differ by the fusion alone. */
static int compare(const char *model, const machine *m, int64_t steps, bool check, const char *keep) {
    diag d = {0};
    graph *g = models_load(model, &d);
    if (!g) {
        fputs(d.text, stderr);
        return 2;
    }
    int32_t nin;
    float **in = inputs_of(g, &nin);
    side f = build(g, m, model, false, NULL, steps, in), u;
    char path[] = "/tmp/bench_epilogue_XXXXXX";
    int fd = f.ok ? mkstemp(path) : -1;
    if (fd >= 0) {
        char *recipe = driver_unfused_recipe(g, m, &f.ci);
        FILE *rf = fdopen(fd, "w");
        fputs(recipe, rf);
        fclose(rf);
        free(recipe);
        u = build(g, m, model, true, path, 0, in);
        remove(path);
    } else {
        u = build(g, m, model, true, NULL, steps, in);
    }
    printf("%s on %s (fused: %lld search steps; unfused: the same grids)\n", model, m->name, (long long)steps);
    int rc = 0;
    if (!f.ok || !u.ok) {
        printf("  fused:   %s\n  unfused: %s\n", f.ok ? "compiles and runs" : f.why, u.ok ? "compiles and runs" : u.why);
        if (f.ok) printf("  fused peak live SRAM per tile %.1f KiB (tile %u, step %d)\n", f.peak.bytes / 1024.0, f.peak.tile, f.peak.step);
        rc = f.ok ? 0 : 1;
    } else {
        if (keep) {
            char kp[4096];
            snprintf(kp, sizeof kp, "%s/fused.tpk", keep);
            int krc = package_save(&f.p, kp, &d);
            snprintf(kp, sizeof kp, "%s/unfused.tpk", keep);
            if (krc == 0) krc = package_save(&u.p, kp, &d);
            if (krc) {
                fputs(d.text, stderr);
                rc = 2;
            }
        }
        const fuse_plan *fp = &f.ci.fusions;
        const int64_t *saved = f.ci.fusion_saved;
        int64_t total = 0;
        for (int32_t k = 0; k < fp->n; k++) total += saved[k];
        printf("  %-28s %16s %16s %10s\n", "", "fused", "unfused", "ratio");
        kib_row("peak live SRAM per tile", (double)f.peak.bytes, (double)u.peak.bytes);
        kib_row("peak live payload per tile", (double)f.peak.payload, (double)u.peak.payload);
        kib_row("memory reached per tile", (double)f.ci.place.tile_bytes, (double)u.ci.place.tile_bytes);
        printf("  %-28s %16llu %16llu %10.3f\n", "simulated cycles", (unsigned long long)f.st.cycles,
               (unsigned long long)u.st.cycles, (double)f.st.cycles / (double)u.st.cycles);
        printf("  %-28s %16llu %16llu %10.3f\n", "  compute", (unsigned long long)f.st.compute_cycles,
               (unsigned long long)u.st.compute_cycles, (double)f.st.compute_cycles / (double)u.st.compute_cycles);
        printf("  %-28s %16llu %16llu %10.3f\n", "  exchange", (unsigned long long)f.st.exchange_cycles,
               (unsigned long long)u.st.exchange_cycles, (double)f.st.exchange_cycles / (double)u.st.exchange_cycles);
        printf("  %-28s %12.1f MiB %12.1f MiB %10.3f\n", "exchanged", f.st.exchange_bytes / 1048576.0,
               u.st.exchange_bytes / 1048576.0, (double)f.st.exchange_bytes / (double)u.st.exchange_bytes);
        printf("  peak live: tile %u at step %d fused, tile %u at step %d unfused (payload: step %d, step %d)\n", f.peak.tile,
               f.peak.step, u.peak.tile, u.peak.step, f.peak.payload_step, u.peak.payload_step);
        printf("  fused %d of %d optimizer steps; gradient buffers removed: %.1f KiB per tile", (int)graph_fuse_count(fp),
               (int)fp->n, total / 1024.0);
        int listed = 0;
        for (int32_t k = 0; k < fp->n; k++)
            if (fp->c[k].fused)
                printf("%s%s %.1f KiB", listed++ ? ", " : " (", graph_op_name(g, fp->c[k].consumer), saved[k] / 1024.0);
        printf("%s\n", listed ? ")" : "");
        int64_t differ = 0;
        int32_t *ids = calloc((size_t)f.nout + 1, sizeof(int32_t));
        graph_outputs(g, ids, f.nout);
        for (int32_t j = 0; j < f.nout; j++)
            differ += num_mismatches(f.out[j], u.out[j], (size_t)graph_type_numel(&graph_val(g, ids[j])->type)).count;
        free(ids);
        /* P1 holds for the same accumulation order: the searches may split a K differently. */
        bool same_k = true;
        graph_numerics nf, nu;
        if (graph_numerics_parse(g, f.p.meta, "fused", &nf, &d) == 0) {
            if (graph_numerics_parse(g, u.p.meta, "unfused", &nu, &d) == 0) {
                for (int32_t op = 0; op < g->ops.n; op++)
                    if (graph_kind_has_gemm(graph_opr(g, op)->kind)) {
                        same_k &= nf.op[op].gemm.nk == nu.op[op].gemm.nk;
                        for (int32_t b = 0; same_k && b <= nf.op[op].gemm.nk; b++)
                            same_k &= nf.op[op].gemm.k_bounds[b] == nu.op[op].gemm.k_bounds[b];
                    }
                graph_numerics_free(&nu);
            }
            graph_numerics_free(&nf);
        }
        printf("  fused and unfused outputs: %s\n", !differ ? "bit for bit the same (P1)"
                                                     : same_k ? "DIFFER with the same K splits"
                                                              : "differ: the searches split some K differently");
        if (differ && same_k) rc = 1;
        if (check) {
            epilogue_proof *pr = calloc((size_t)fp->n + 1, sizeof(epilogue_proof));
            int stored = 0;
            if (driver_fusion_proofs(g, fp, &f.p, pr, &d)) {
                fputs(d.text, stderr);
                rc = 2;
                stored = fp->n; /* no proof: nothing is shown unstored */
            } else {
                for (int32_t k = 0; k < fp->n; k++) stored += fp->c[k].fused && pr[k].materialized;
            }
            free(pr);
            check_options co = {.package = model, .inputs = in, .sim = {.quiet = true}};
            check_result r;
            if (driver_check(g, &f.p, &co, &r, &d)) {
                fputs(d.text, stderr);
                rc = 2;
            } else {
                printf("  tessel check of the fused package: %s against the plan-exact reference (%lld elements differ), "
                       "cosine %.6f against the FP32 step; proof: %s\n",
                       r.differing ? "NOT exact" : "exact", (long long)r.differing, r.cosine,
                       stored ? "a fused gradient is STORED" : "no buffer holds a fused gradient");
                if (!r.pass || stored) rc = 1;
                check_result_free(&r);
            }
        }
    }
    side_free(&f);
    side_free(&u);
    for (int32_t i = 0; i < nin; i++) free(in[i]);
    free(in);
    graph_free(g);
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
    machine m;
    machine_preset("c600", &m);
    if (!model)
        model = smoke ? "zoo:train-mlp:optimizer=adamw,tokens=128,width=256,hidden=1024"
                      : "zoo:train-mlp:optimizer=adamw,tokens=512,width=1152,hidden=4304";
    int rc = compare(model, &m, smoke ? 8 : 48, !smoke, keep);
    if (!smoke && rc == 0) {
        printf("\n");
        /* A wider step whose gradients tip the unfused plan over the tile. */
        rc = compare("zoo:train-mlp:optimizer=adamw,tokens=256,width=1536,hidden=6144", &m, 8, false, NULL);
    }
    return rc;
}
