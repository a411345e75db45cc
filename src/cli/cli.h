/* cli.h: what the command's files share: option parsing, host tensors on
 * the command line, and the status conventions (2: a user error). */
#ifndef TESSEL_CLI_H
#define TESSEL_CLI_H

#include "../driver/driver.h"
#include "../models/models.h"
#include "../report/report.h"

/* Exit statuses: 1 a check that failed, 2 a user error (a file, line or
 * option at fault), 3 a model that does not fit the machine. */
enum { EXIT_USER = 2, EXIT_CHECK_FAILED = 1, EXIT_NO_FIT = 3 };

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
    const char *brief;  /* one line for 'tessel --help' */
} cmd;

enum { MAX_OPT_VALUES = 64, MAX_OPTS = 32 }; /* a command's option table is at most MAX_OPTS long (cli_parse asserts it) */

typedef struct parsed {
    const char *pos[4];                       /* positional arguments */
    int npos;
    const char *val[MAX_OPTS][MAX_OPT_VALUES];/* per option spec: its values */
    int nval[MAX_OPTS];
    bool help;
} parsed;

/* Parses argv for c. Returns 0 (check p->help), or the exit status of a
 * usage error it already reported. */
int cli_parse(const cmd *c, int argc, char **argv, int npos_min, int npos_max, parsed *p);
void cli_help(const cmd *c, FILE *f);
int cli_opt_index(const cmd *c, const char *name);
const char *cli_opt(const cmd *c, const parsed *p, const char *name);
bool cli_flag(const cmd *c, const parsed *p, const char *name);
/* Prints d and returns EXIT_USER, or EXIT_NO_FIT for "does not fit". */
int cli_report(const diag *d);
/* MODEL with the command's --precision (imported models; default f16). */
graph *cli_load_model(const cmd *c, const parsed *p, const char *spec, diag *d);
/* The --precision a command was given (f16 without one). */
models_precision cli_precision(const cmd *c, const parsed *p);
/* fit.c: after a "does not fit" (d->no_fit), appends to d what would fit,
 * each option checked by the compiler's estimate: the model in FP8, half
 * its batch, a machine preset with more memory. */
void cli_fit_suggestions(const char *spec, models_precision precision, const machine *m, diag *d);
/* The limit of --max-host-memory (bytes, K, M or G); default nine tenths of
 * the host's physical memory. */
int cli_max_host_memory(const cmd *c, const parsed *p, uint64_t *limit, diag *d);
/* A machine from --machine (default c600). */
int cli_machine(const cmd *c, const parsed *p, machine *m, diag *d);
/* --recipe, --search-steps and --beam into *o (shared by compile and check). */
int cli_plan_options(const cmd *c, const parsed *p, const char *model, bool quiet, compile_options *o, diag *d);
/* --machine into *m, then MODEL (spec) into *g. */
int cli_load_machine_model(const char *spec, const cmd *c, const parsed *p, graph **g, machine *m, diag *d);
/* A machine from spec; `what` (or NULL) names where spec came from in messages. */
int cli_machine_spec(const cmd *c, const char *what, const char *spec, machine *m, diag *d);

/* Fills inputs[k] from the command's --input NAME=FILE.npy options, the rest
 * with the seeded defaults; source[k] is the file or NULL. */
/* The --expect NAME=FILE.npy options: expect[j] for output specs[j], NULL
 * where none is given; source[j] the file. */
int cli_load_expected(const cmd *c, const parsed *p, const host_spec *specs, int32_t n, float **expect, const char **source,
                      diag *d);
int cli_load_inputs(const cmd *c, const parsed *p, const host_spec *specs, int32_t n, float **inputs, const char **source,
                    diag *d);
/* A command's output files, all or nothing and checked before the work:
 * open creates every temporary (DIR/NAME.npy per tensor when dir is set,
 * the trace when trace is), so an unwritable path fails at once; commit
 * writes them (f32 .npy, the Chrome trace of st) and renames all into
 * place, or on any failure removes every one. */
typedef struct cli_outputs {
    outset set;
    int32_t n;              /* .npy files */
    FILE **files;
    char **paths;
    FILE *trace;
    const char *trace_path;
    FILE *html;
    const char *html_path;
} cli_outputs;

int cli_outputs_open(cli_outputs *o, const char *dir, const host_spec *specs, int32_t n, const char *trace, diag *d);
/* One more output, the HTML report (path NULL: none): commit writes it
 * from html (st must come from a run with trace on). */
int cli_outputs_open_html(cli_outputs *o, const char *path, diag *d);
int cli_outputs_commit(cli_outputs *o, const host_spec *specs, float *const *data, const sim_stats *st, const package *pkg,
                       const char *title, const report_html_input *html, diag *d);
void cli_outputs_abort(cli_outputs *o);
/* One summary line: name, type and statistics of x. */
/* A package loaded to run (tessel run, tessel report): its input and output
 * bindings as command-line tensors (an input's dtype as the model declares
 * it, from the metadata), room for their data and the run's statistics. */
typedef struct cli_pkg_run {
    package pkg;
    host_spec *ins, *outs;
    int32_t nin, nout;
    float **inputs, **outputs;  /* per binding, filled by cli_load_inputs and sim_run */
    const char **source;        /* per input: its file, or NULL (seeded) */
    sim_stats st;
} cli_pkg_run;
int cli_pkg_run_open(const char *path, cli_pkg_run *r, diag *d);
void cli_pkg_run_free(cli_pkg_run *r);
void cli_print_stats(const char *role, const host_spec *s, const float *x, const char *note);
/* Where input s's data came from: the file given (source), else the seeded
 * default (graph_default_input_fill's). */
const char *cli_input_source(const host_spec *s, const char *source);

/* chips.c: the commands on a machine of several chips (docs/chips.md). */
int cli_compile_chips(const char *model, const graph *g, const machine *m, const compile_options *co, const char *out,
                      const char *save, const char *report, diag *d);
int cli_run_chips(const cmd *c, const parsed *p, const char *path, diag *d);
/* The ranks of an mpirun launch (src/cli/mpi.c sets it in main); NULL: one process. */
extern const chips_transport *cli_transport;
/* mpi.c (the tessel command only): under mpirun, MPI_Init and cli_transport
 * for several ranks; cli_mpi_end finalises. */
int cli_mpi_start(int *argc, char ***argv, diag *d);
void cli_mpi_end(void);
/* Whether check runs on several chips (--package of several, or --machine
 * with chips > 1): 1, 0, or -1 with d. */
int cli_check_on_chips(const cmd *c, const parsed *p, diag *d);
int cli_check_chips(const cmd *c, const parsed *p, const graph *g, bool *pass, diag *d);
/* The package, recipe and report files of a compile for several chips
 * (save, report may be NULL), opened as temporaries before the work: an
 * unwritable one fails first, and nothing is left on failure. */
int cli_compile_outputs(outset *os, const char *out, const char *save, const char *report, FILE **f, FILE **fr, FILE **fp,
                        diag *d);
/* The compile report j (taken) written to its temporary fp and closed. */
int cli_compile_report(outset *os, FILE *fp, const char *report, struct json_t *j, diag *d);
/* train.c: a training step over data-parallel replicas, one per chip; the
 * chips.c commands hand a training model or package to these. */
int cli_compile_train(const char *model, const graph *g, const machine *m, const compile_options *co, const char *out,
                      const char *save, const char *report, diag *d);
int cli_run_train(const cmd *c, const parsed *p, const char *path, int32_t programs, diag *d);
int cli_check_train(const cmd *c, const parsed *p, const graph *g, bool *pass, FILE *html, diag *d);

/* The commands. */
int cmd_graph(const cmd *c, int argc, char **argv);
int cmd_report(const cmd *c, int argc, char **argv);
int cmd_ref(const cmd *c, int argc, char **argv);
int cmd_machine(const cmd *c, int argc, char **argv);
int cmd_zoo(const cmd *c, int argc, char **argv);
int cmd_compile(const cmd *c, int argc, char **argv);
int cmd_opt(const cmd *c, int argc, char **argv);
int cmd_run(const cmd *c, int argc, char **argv);
int cmd_check(const cmd *c, int argc, char **argv);
int cmd_inspect(const cmd *c, int argc, char **argv);
int cmd_calibrate(const cmd *c, int argc, char **argv);

#endif
