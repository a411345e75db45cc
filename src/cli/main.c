/* main.c: the tessel command: a table of subcommands. */
#define _POSIX_C_SOURCE 200809L /* pause */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#ifdef TESSEL_SANITIZE
/* A sanitized tessel meets a request the host cannot hold as the release
 * build does (malloc returns NULL, the command says which input needs it),
 * instead of stopping in the allocator. ASAN_OPTIONS still overrides. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* Out of host memory for a buffer the program sized itself (input-sized
 * buffers fail with a diagnostic before this): a user error, not a crash.
 * No output is left half-written: every temporary goes, then _exit 2. Not
 * exit: other threads (check's references, the simulator's workers) may be
 * running, and exit's handlers would tear down what they still use. */
static void on_out_of_memory(size_t bytes) {
    static int exiting;
    if (__atomic_exchange_n(&exiting, 1, __ATOMIC_SEQ_CST))
        for (;;) pause(); /* another thread is already on its way out: exit runs once */
    util_remove_temporaries();
    fflush(stdout);
    fprintf(stderr, "tessel: error: out of host memory (allocating %zu bytes)\n", bytes);
    fflush(stderr);
    _exit(EXIT_USER);
}

#define PLAN_OPTS                                                                                                    \
    {"--recipe", "R.json", "start the plan search from this recipe (its choices; the rest searched)", false},         \
    {"--search-steps", "N", "local-search proposals at most (default 256; 0: the recipe or greedy plan as it is)", false}, \
    {"--beam", "N", "plans the beam over the matmuls keeps (default 3; 0: local search only)", false},              \
    {"--micro-batches", "N", "several chips: the batch in N pieces through the pipeline (default: the fewest that fit; auto: the fastest batch of those that fit, a compile each)", false}, \
    {"--replicas", "R|auto", "several chips: R data-parallel copies of a pipeline of chips / R stages (default 1; auto: the fastest)", false}
#define PRECISION_OPT {"--precision", "f16|fp8|fp8-all|f32", "types of an imported (.onnx) model: f16, f143 GEMM weights where they keep the outputs within cosine 0.995 (fp8), or all of them (fp8-all) (default f16)", false}
static const opt_spec graph_opts[] = {PRECISION_OPT, {0}};
static const opt_spec zoo_opts[] = {{0}};
static const opt_spec machine_opts[] = {{"--json", NULL, "print the description as JSON (loadable back)", false}, {0}};
static const opt_spec ref_opts[] = {
    {"--input", "NAME=FILE.npy", "data for an input (repeatable); others get seeded normal(0, 1) data", true},
    {"--convert", NULL, "round --input data whose dtype would lose information into the input's dtype", false},
    {"--output-dir", "DIR", "write each output as DIR/NAME.npy (f32)", false},
    {"--strip-precision", NULL, "run the pure FP32 model: no casts, f32 parameters", false},
    {"--against-fp32", NULL, "also run the pure FP32 model on the same inputs and compare", false},
    {"--emulate", "PKG", "run the plan-exact emulated reference of PKG (compiled from MODEL): what 'check' compares with",
     false},
    {"--quiet", NULL, "no progress line", false},
    PRECISION_OPT,
    {0}};
static const opt_spec compile_opts[] = {
    {"--machine", "NAME|FILE.json", "the target machine (default c600)", false},
    {"-o", "PKG", "write the package here (required)", false},
    {"--list-passes", NULL, "print the pipeline's passes in order, one per line (no MODEL needed)", false},
    {"--print-after", "PASS", "print the IR after PASS on stdout (a graph, a mid program or a per-tile program; --list-passes names them)", false},
    {"--no-fuse", NULL, "keep every optimizer step out of its gradient GEMM (the fusion analysis still runs)", false},
    {"--no-siblings", NULL, "keep matmuls that read one operand apart (no joined GEMM)", false},
    PLAN_OPTS,
    {"--save-recipe", "R.json", "write the packaged plan as a recipe (--recipe R.json --search-steps 0 replays it)", false},
    {"--report", "FILE.json", "write the compile report: plan per op, predictions, search steps, stage times, fusions", false},
    {"--quiet", NULL, "no progress line", false},
    PRECISION_OPT,
    {0}};
static const opt_spec run_opts[] = {
    {"--input", "NAME=FILE.npy", "data for an input (repeatable); others get seeded normal(0, 1) data", true},
    {"--convert", NULL, "round --input data whose dtype would lose information into the input's dtype", false},
    {"--output-dir", "DIR", "write each output as DIR/NAME.npy (f32)", false},
    {"--trace", "FILE.json", "write a Chrome trace of compute sets and exchange phases", false},
    {"--max-host-memory", "BYTES", "refuse to simulate a machine needing more host memory (default: 90% of this host's)", false},
    {"--json", NULL, "print one JSON object of figures instead of the summary", false},
    {0}};
static const opt_spec check_opts[] = {
    {"--machine", "NAME|FILE.json", "the target machine (default c600)", false},
    {"--input", "NAME=FILE.npy", "data for an input (repeatable); others get seeded normal(0, 1) data", true},
    {"--convert", NULL, "round --input data whose dtype would lose information into the input's dtype", false},
    {"--expect", "NAME=FILE.npy", "values an output must also match, e.g. PyTorch's (repeatable): same cosine bar", true},
    {"--package", "PKG", "check this package (compiled from MODEL) instead of compiling MODEL", false},
    {"--locate", NULL, "find the first op whose result differs from the plan-exact reference (automatic on a difference)",
     false},
    {"--trace", "FILE.json", "write a Chrome trace of the simulated run", false},
    {"--html", "FILE.html", "write the HTML report of the check (one chip: tessel report's page with the compile and the check; several: the chips' timeline and stages or programs)", false},
    {"--max-host-memory", "BYTES", "refuse to simulate a machine needing more host memory (default: 90% of this host's)", false},
    {"--json", NULL, "print one JSON object: cycles, cosine, max_abs_err, pass, tiles_used, peak_tile_bytes, ...", false},
    {"--quiet", NULL, "no progress lines (--json implies it)", false},
    {"--no-fuse", NULL, "compile with every optimizer step out of its gradient GEMM", false},
    {"--no-siblings", NULL, "compile with matmuls that read one operand apart", false},
    PLAN_OPTS,
    PRECISION_OPT,
    {0}};

static const opt_spec report_opts[] = {
    {"-o", "FILE.html", "where to write the report (required)", false},
    {"--compile-report", "R.json", "a compile report of this package (tessel compile --report): the plan's reasons", false},
    {"--input", "NAME=FILE.npy", "data for an input (repeatable); others get seeded normal(0, 1) data", true},
    {"--convert", NULL, "round --input data whose dtype would lose information into the input's dtype", false},
    {"--max-host-memory", "BYTES", "refuse to simulate a machine needing more host memory (default: 90% of this host's)", false},
    {"--quiet", NULL, "no progress line", false},
    {0}};

static const opt_spec opt_opts[] = {
    {"--machine", "NAME|FILE.json", "the machine the program is for (default c600; the file names it too)", false},
    {"--passes", "A,B,...", "the mid passes to run in order (cast-order, absorb, compose-copies, own-partials; one rewrite alone: absorb.cast)", false},
    {0}};

static const opt_spec inspect_opts[] = {
    {"--tile", "N", "the memory map of tile N (default: the tile with the least headroom)", false},
    {"--json", NULL, "print one JSON object: every tile's bytes, the memory map", false},
    {0}};
static const opt_spec calibrate_opts[] = {
    {"--machine", "NAME|FILE.json", "the machine to simulate (default c600)", false},
    {"--json", NULL, "print one JSON object: points (id, measured, simulated) and a summary per kind", false},
    {0}};

static const cmd commands[] = {
    {"compile", "MODEL -o PKG [options] | --list-passes", "Compile MODEL into a package for a machine.", compile_opts, cmd_compile, "compile MODEL into a package for a machine (plan search, passes, placement)"},
    {"opt", "FILE.mid [--machine M] [--passes=A,B,...]",
     "Run mid passes on a mid program (the text --print-after=expand prints) and print the result.\n"
     "The input is verified first, the program again after every pass; with no passes it prints\n"
     "the input unchanged.",
     opt_opts, cmd_opt, "run mid passes on mid text and print the result"},
    {"run", "PKG [options]", "Run a package on the simulator (it needs only the package and the input files).", run_opts,
     cmd_run, "run a package on the simulator"},
    {"check", "MODEL [options]",
     "Compile MODEL, simulate it, and compare every output with two references on the same inputs:\n"
     "the plan-exact emulated reference (the plan's numeric decisions, the device's arithmetic),\n"
     "which it must match bit for bit, and the pure FP32 model, which it must reach by cosine\n"
     "0.999 (0.99 with 8-bit values). On a difference it names the first op whose result differs.\n"
     "Exits 1 on failure, 2 on a user error, 3 when the model does not fit the machine (what would\n"
     "fit follows, each option compiled first).",
     check_opts, cmd_check, "compile, simulate, and compare with the plan-exact and FP32 references"},
    {"report", "PKG -o FILE.html [options]",
     "Run a package on the simulator and write one self-contained HTML page: the timeline, where the\n"
     "cycles go, the tiles' memory and compute, the plan (and, with --compile-report, why), and the\n"
     "estimate against the simulation. It opens offline in any current browser.",
     report_opts, cmd_report, "write the HTML report of a package's run"},
    {"graph", "MODEL", "Print MODEL (a .tsl or .onnx file, or zoo:NAME[:k=v,...]) as text IR.", graph_opts, cmd_graph, "print MODEL as text IR"},
    {"ref", "MODEL [options]",
     "Run MODEL on the FP32 reference interpreter and summarise its outputs.\n"
     "Casts round to their dtype and parameters hold values of their dtype;\n"
     "everything else computes in f32.",
     ref_opts, cmd_ref, "run MODEL on the FP32 reference interpreter"},
    {"machine", "[NAME|FILE.json]", "Print a machine description: a preset (c600, mk2, tiny; c600x2, c600x4: several chips) or a JSON file.", machine_opts,
     cmd_machine, "print a machine description (a preset or a JSON file)"},
    {"zoo", "", "List the built-in models and their parameters.", zoo_opts, cmd_zoo, "list the built-in models and their parameters"},
    {"inspect", "PKG [options]",
     "Show what a package puts where: per tile the memory its buffers reach, code and exchange-table\n"
     "bytes and headroom (their spread over the tiles, the fullest tiles first), and one tile's\n"
     "memory map: every buffer's address, payload, reservation and live steps.",
     inspect_opts, cmd_inspect, "show what a package puts where: per-tile memory, code, tables"},
    {"calibrate", "POINTS.json [options]",
     "Simulate measured hardware timing points and compare: per point measured, simulated\n"
     "and error, then per kind the median and worst absolute error. Each point is built as a\n"
     "one-kernel or one-phase program and run by the simulator; points it cannot build are\n"
     "listed with the reason.",
     calibrate_opts, cmd_calibrate, "simulate measured hardware timing points and compare"},
};

static void print_main_help(FILE *f) {
    fprintf(f, "usage: tessel COMMAND [options]\n\n"
               "tessel compiles models for tile-based accelerators and simulates them.\n\ncommands:\n");
    for (size_t i = 0; i < TS_COUNT(commands); i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].brief);
    fprintf(f, "\n'tessel --version' prints the version.\nMODEL is a .tsl file, an .onnx file exported by PyTorch, or zoo:NAME[:key=value,...] (see 'tessel zoo').\n"
               "'tessel COMMAND --help' describes each command.\n"
               "Exit status: 0 done, 1 a check failed, 2 a user error, 3 the model does not fit the machine.\n");
}

int main(int argc, char **argv) {
    util_cleanup_on_signals();
    util_set_oom_handler(on_out_of_memory);
    json_set_alloc_funcs(xmalloc, free); /* jansson's memory too: counted, and never a NULL it would hand back */
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("tessel %s (package format %d)\n", TESSEL_VERSION, (int)PACKAGE_VERSION);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        if (argc >= 3 && strcmp(argv[1], "help") == 0) {
            for (size_t i = 0; i < TS_COUNT(commands); i++)
                if (strcmp(commands[i].name, argv[2]) == 0) {
                    cli_help(&commands[i], stdout);
                    return 0;
                }
        }
        print_main_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USER : 0;
    }
    diag d = {0};
    if (cli_mpi_start(&argc, &argv, &d)) return cli_report(&d);
    if (cli_transport && strcmp(argv[1], "run") != 0) {
        if (cli_transport->rank == 0)
            fprintf(stderr, "tessel %s: error: only 'tessel run' runs over MPI ranks (launched as %d)\n", argv[1],
                    cli_transport->ranks);
        cli_mpi_end();
        return EXIT_USER;
    }
    for (size_t i = 0; i < TS_COUNT(commands); i++)
        if (strcmp(commands[i].name, argv[1]) == 0) {
            int rc = commands[i].run(&commands[i], argc - 2, argv + 2);
            progress_done();
            cli_mpi_end();
            return rc;
        }
    cli_mpi_end();
    fprintf(stderr, "tessel: error: unknown command '%s' (see 'tessel --help')\n", argv[1]);
    return EXIT_USER;
}
