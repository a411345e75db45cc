/* main.c: the tessel command. Each subcommand parses its options, calls the
 * library, and turns a failed call into its message on stderr and status 2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../graph/graph.h"
#include "../machine/machine.h"
#include "../models/models.h"

enum { EXIT_USER = 2 };

/* ---- options -------------------------------------------------------------- */

typedef struct opt_spec {
    const char *name;  /* "--output-dir" */
    const char *arg;   /* metavariable, NULL for a flag */
    const char *help;
    bool repeat;       /* may be given more than once */
} opt_spec;

typedef struct cmd {
    const char *name, *usage, *summary;
    const opt_spec *opts;
    int (*run)(const struct cmd *c, int argc, char **argv);
} cmd;

enum { MAX_OPT_VALUES = 64 };

typedef struct parsed {
    const char *pos[4];  /* positional arguments */
    int npos;
    const char *val[16][MAX_OPT_VALUES];  /* per option spec: its values */
    int nval[16];
    bool help;
} parsed;

static void print_help(const cmd *c, FILE *f) {
    fprintf(f, "usage: tessel %s %s\n\n%s\n", c->name, c->usage, c->summary);
    if (c->opts[0].name) fprintf(f, "\noptions:\n");
    for (const opt_spec *o = c->opts; o->name; o++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-28s %s\n", lhs, o->help);
    }
    fprintf(f, "  %-28s %s\n", "--help", "show this help");
}

static int usage_error(const cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const cmd *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tessel %s: error: ", c->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'tessel %s --help')\n", c->name);
    va_end(ap);
    return EXIT_USER;
}

/* Returns 0, or the exit status for a usage error (already reported). */
static int parse_args(const cmd *c, int argc, char **argv, int npos_min, int npos_max, parsed *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            p->help = true;
            return 0;
        }
        if (a[0] == '-' && a[1]) {
            const char *eq = strchr(a, '=');
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            int k = 0;
            for (; c->opts[k].name; k++)
                if (strlen(c->opts[k].name) == n && strncmp(c->opts[k].name, a, n) == 0) break;
            const opt_spec *o = &c->opts[k];
            if (!o->name) return usage_error(c, "unknown option '%.*s'", (int)n, a);
            const char *v = NULL;
            if (o->arg) {
                if (eq) v = eq + 1;
                else if (i + 1 < argc) v = argv[++i];
                else return usage_error(c, "option '%s' needs a value (%s)", o->name, o->arg);
            } else if (eq) {
                return usage_error(c, "option '%s' takes no value", o->name);
            }
            if (p->nval[k] && !o->repeat) return usage_error(c, "option '%s' given twice", o->name);
            if (p->nval[k] == MAX_OPT_VALUES) return usage_error(c, "option '%s' given too often", o->name);
            p->val[k][p->nval[k]++] = v ? v : "";
            continue;
        }
        if (p->npos == (int)TS_COUNT(p->pos) || p->npos == npos_max) return usage_error(c, "unexpected argument '%s'", a);
        p->pos[p->npos++] = a;
    }
    if (p->npos < npos_min) return usage_error(c, "missing %s", c->usage);
    return 0;
}

static int opt_index(const cmd *c, const char *name) {
    for (int k = 0; c->opts[k].name; k++)
        if (strcmp(c->opts[k].name, name) == 0) return k;
    TS_UNREACHABLE();
}
static const char *opt_value(const cmd *c, const parsed *p, const char *name) {
    int k = opt_index(c, name);
    return p->nval[k] ? p->val[k][0] : NULL;
}
static bool opt_flag(const cmd *c, const parsed *p, const char *name) { return p->nval[opt_index(c, name)] > 0; }

static int report(const diag *d) {
    fflush(stdout);
    fputs(d->text, stderr);
    return EXIT_USER;
}

/* ---- tessel graph ----------------------------------------------------------- */

static const opt_spec graph_opts[] = {{0}};

static int run_graph(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = parse_args(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (print_help(c, stdout), 0);
    diag d = {0};
    graph *g = models_load(p.pos[0], &d);
    if (!g) return report(&d);
    char *text = graph_print(g);
    fputs(text, stdout);
    free(text);
    graph_free(g);
    return 0;
}

/* ---- tessel ref ------------------------------------------------------------- */

static const opt_spec ref_opts[] = {
    {"--input", "NAME=FILE.npy", "data for an input (repeatable); others get seeded normal(0, 1) data", true},
    {"--output-dir", "DIR", "write each output as DIR/NAME.npy (f32)", false},
    {"--strip-precision", NULL, "run the pure FP32 model: no casts, f32 parameters", false},
    {"--against-fp32", NULL, "also run the pure FP32 model on the same inputs and compare", false},
    {"--quiet", NULL, "no progress line", false},
    {0}};

/* Fills inputs[k] for every graph input from --input options or defaults. */
static int load_inputs(const cmd *c, const parsed *p, const graph *g, const int32_t *ids, int32_t n, float **inputs,
                       const char **source, diag *d) {
    int k = opt_index(c, "--input");
    for (int i = 0; i < p->nval[k]; i++) {
        const char *a = p->val[k][i], *eq = strchr(a, '=');
        if (!eq || eq == a || !eq[1]) return diag_fail(d, "tessel ref: error: option '--input %s': expected NAME=FILE.npy", a);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
        const char *bare = name[0] == '%' ? name + 1 : name;
        int32_t j = 0;
        while (j < n && strcmp(graph_val(g, ids[j])->name, bare) != 0) j++;
        if (j == n) {
            char known[512] = "";
            for (int32_t t = 0; t < n; t++) {
                strncat(known, t ? ", " : "", sizeof known - strlen(known) - 1);
                strncat(known, graph_val(g, ids[t])->name, sizeof known - strlen(known) - 1);
            }
            return diag_fail(d, "tessel ref: error: option '--input %s': the graph has no input '%s' (inputs: %s)", a, bare, known);
        }
        if (inputs[j]) return diag_fail(d, "tessel ref: error: option '--input %s': input '%s' given twice", a, bare);
        npy_array arr;
        if (npy_read(eq + 1, &arr, d)) return -1;
        const graph_type *t = &graph_val(g, ids[j])->type;
        bool same = arr.rank == t->rank;
        for (int r = 0; same && r < t->rank; r++) same = arr.dim[r] == t->dim[r];
        if (!same) {
            char want[128], got[128] = "[";
            graph_type_str(t, want, sizeof want);
            for (int r = 0; r < arr.rank; r++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", r ? ", " : "", (long long)arr.dim[r]);
            strncat(got, "]", sizeof got - strlen(got) - 1);
            npy_free(&arr);
            return diag_fail(d, "tessel ref: error: option '--input %s': %s has shape %s but input '%s' is %s", a, eq + 1, got,
                             bare, want);
        }
        inputs[j] = xmalloc(sizeof(float) * (size_t)arr.numel);
        num_decode_buf(arr.dtype, 0, arr.data, inputs[j], (size_t)arr.numel);
        num_round_buf(t->dtype, t->scale, inputs[j], (size_t)arr.numel);
        source[j] = eq + 1;
        npy_free(&arr);
    }
    for (int32_t j = 0; j < n; j++) {
        if (inputs[j]) continue;
        inputs[j] = xmalloc(sizeof(float) * (size_t)graph_type_numel(&graph_val(g, ids[j])->type));
        graph_input_default(g, ids[j], j, inputs[j]);
        source[j] = NULL;
    }
    return 0;
}

static void print_stats(const char *role, const graph *g, int32_t v, const float *x, const char *note) {
    const graph_type *t = &graph_val(g, v)->type;
    int64_t n = graph_type_numel(t);
    double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            bad++;
            continue;
        }
        sum += x[i];
        sq += (double)x[i] * x[i];
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    double cnt = (double)(n - bad), mean = cnt ? sum / cnt : 0, sd = cnt ? sqrt(fmax(0, sq / cnt - mean * mean)) : 0;
    char ty[128];
    graph_type_str(t, ty, sizeof ty);
    printf("  %-6s %-14s %-20s mean %+.4g  std %.4g  min %+.4g  max %+.4g", role, graph_val(g, v)->name, ty, mean, sd, mn, mx);
    if (bad) printf("  (%lld non-finite)", (long long)bad);
    if (note) printf("  %s", note);
    printf("\n");
}

static int write_outputs(const char *dir, const graph *g, const int32_t *ids, int32_t n, float **data, diag *d) {
    if (util_mkdir_p(dir, d)) return -1;
    outset os = {0};
    for (int32_t j = 0; j < n; j++) {
        const graph_type *t = &graph_val(g, ids[j])->type;
        char file[300];
        snprintf(file, sizeof file, "%s.npy", graph_val(g, ids[j])->name);
        char *path = path_join(dir, file);
        npy_array a = {.dtype = DT_F32, .rank = t->rank, .numel = graph_type_numel(t), .data = data[j]};
        for (int r = 0; r < t->rank; r++) a.dim[r] = t->dim[r];
        FILE *f = outset_open(&os, path, d);
        int rc = f ? npy_write(f, &a) : -1;
        if (f && outset_close(&os, f, path, d)) rc = -1;
        if (rc && !d->set) diag_fail(d, "%s: error: write failed", path);
        free(path);
        if (rc) {
            outset_abort(&os);
            return -1;
        }
    }
    return outset_commit(&os, d);
}

static int run_ref(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = parse_args(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (print_help(c, stdout), 0);
    diag d = {0};
    double t0 = util_now_seconds();
    graph *g = models_load(p.pos[0], &d);
    if (!g) return report(&d);
    int32_t nin = graph_inputs(g, NULL, 0), nout = graph_outputs(g, NULL, 0);
    int32_t *in_ids = xcalloc((size_t)nin + 1, sizeof(int32_t)), *out_ids = xcalloc((size_t)nout + 1, sizeof(int32_t));
    graph_inputs(g, in_ids, nin);
    graph_outputs(g, out_ids, nout);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    ref_options o = {.strip_precision = opt_flag(c, &p, "--strip-precision"), .quiet = opt_flag(c, &p, "--quiet")};
    double t1 = util_now_seconds();
    rc = load_inputs(c, &p, g, in_ids, nin, inputs, source, &d);
    if (rc == 0) rc = ref_run(g, &o, inputs, outputs, &d);
    double t2 = util_now_seconds();
    /* The pure FP32 model on the same inputs, to show what precision costs. */
    float **pure = NULL;
    if (rc == 0 && opt_flag(c, &p, "--against-fp32")) {
        pure = xcalloc((size_t)nout + 1, sizeof(float *));
        ref_options po = o;
        po.strip_precision = true;
        rc = ref_run(g, &po, inputs, pure, &d);
    }
    const char *dir = opt_value(c, &p, "--output-dir");
    if (rc == 0 && dir) rc = write_outputs(dir, g, out_ids, nout, outputs, &d);
    if (rc == 0) {
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
        for (int32_t j = 0; j < nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", source[j] ? source[j] : "seeded normal(0, 1)");
            print_stats("input", g, in_ids[j], inputs[j], note);
        }
        for (int32_t j = 0; j < nout; j++) {
            char note[300] = "";
            if (dir) snprintf(note, sizeof note, "-> %s/%s.npy", dir, graph_val(g, out_ids[j])->name);
            print_stats("output", g, out_ids[j], outputs[j], dir ? note : NULL);
            if (pure) {
                num_diff df = num_compare(outputs[j], pure[j], (size_t)graph_type_numel(&graph_val(g, out_ids[j])->type));
                printf("  %-6s %-14s vs pure FP32: cosine %.6f, max abs err %.4g, rms err %.4g (output rms %.4g)\n", "",
                       "", df.cosine, df.max_abs_err, df.rms_err, df.want_rms);
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
    free(in_ids);
    free(out_ids);
    graph_free(g);
    return rc ? report(&d) : 0;
}

/* ---- tessel machine ----------------------------------------------------------- */

static const opt_spec machine_opts[] = {{"--json", NULL, "print the description as JSON (loadable back)", false}, {0}};

static int run_machine(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = parse_args(c, argc, argv, 0, 1, &p);
    if (rc || p.help) return rc ? rc : (print_help(c, stdout), 0);
    diag d = {0};
    machine m;
    if (machine_resolve(p.npos ? p.pos[0] : "c600", &m, &d)) return report(&d);
    if (opt_flag(c, &p, "--json")) {
        char *j = machine_to_json(&m);
        puts(j);
        free(j);
    } else {
        machine_print(stdout, &m);
    }
    return 0;
}

/* ---- tessel zoo ------------------------------------------------------------------ */

static const opt_spec zoo_opts[] = {{0}};

static int run_zoo(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = parse_args(c, argc, argv, 0, 0, &p);
    if (rc || p.help) return rc ? rc : (print_help(c, stdout), 0);
    models_zoo_list(stdout);
    return 0;
}

static const cmd commands[] = {
    {"graph", "MODEL", "Print MODEL (a .tsl file or zoo:NAME[:k=v,...]) as text IR.", graph_opts, run_graph},
    {"ref", "MODEL [options]",
     "Run MODEL on the FP32 reference interpreter and summarise its outputs.\n"
     "Casts round to their dtype and parameters hold values of their dtype;\n"
     "everything else computes in f32.",
     ref_opts, run_ref},
    {"machine", "[NAME|FILE.json]", "Print a machine description: a preset (c600, mk2, tiny) or a JSON file.", machine_opts,
     run_machine},
    {"zoo", "", "List the built-in models and their parameters.", zoo_opts, run_zoo},
};

static void print_main_help(FILE *f) {
    fprintf(f, "usage: tessel COMMAND [options]\n\n"
               "tessel compiles models for tile-based accelerators and simulates them.\n\ncommands:\n");
    for (size_t i = 0; i < TS_COUNT(commands); i++) {
        const char *nl = strchr(commands[i].summary, '\n');
        int n = nl ? (int)(nl - commands[i].summary) : (int)strlen(commands[i].summary);
        fprintf(f, "  %-9s %.*s\n", commands[i].name, n, commands[i].summary);
    }
    fprintf(f, "\nMODEL is a .tsl file or zoo:NAME[:key=value,...] (see 'tessel zoo').\n"
               "'tessel COMMAND --help' describes each command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        if (argc >= 3 && strcmp(argv[1], "help") == 0) {
            for (size_t i = 0; i < TS_COUNT(commands); i++)
                if (strcmp(commands[i].name, argv[2]) == 0) {
                    print_help(&commands[i], stdout);
                    return 0;
                }
        }
        print_main_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USER : 0;
    }
    for (size_t i = 0; i < TS_COUNT(commands); i++)
        if (strcmp(commands[i].name, argv[1]) == 0) return commands[i].run(&commands[i], argc - 2, argv + 2);
    fprintf(stderr, "tessel: error: unknown command '%s' (see 'tessel --help')\n", argv[1]);
    return EXIT_USER;
}
