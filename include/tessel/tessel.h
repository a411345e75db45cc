/* tessel.h: the tessel library, the compiler for tile machines of the
 * Graphcore IPU class and the simulator that runs what it compiles.
 *
 * A model (a zoo entry, a .tsl or .onnx file, or ONNX bytes in memory) and a
 * machine description compile into a package; a package runs on the
 * simulator, which reports its cycles; a check runs it and compares every
 * output bit for bit with a reference that follows the plan's numerics, and
 * by cosine with the model in FP32. The `tessel` command is built on this
 * library; docs/api.md walks through it, and examples/ holds a C program and
 * a Python script.
 *
 * Conventions.
 *
 *   Handles (tessel_model, tessel_machine, tessel_package, tessel_result) are
 *   opaque and owned by the caller, who frees each with its _free function
 *   (NULL is accepted). Calls on distinct handles may run on distinct
 *   threads at once; one handle is for one thread at a time. Progress lines,
 *   when asked for, go to stderr and are process-wide.
 *
 *   Every call that can fail returns a tessel_status and, when err is not
 *   NULL, fills *err with the status and a message that names the file,
 *   option, input, shape or dtype at fault (the text `tessel` prints). The
 *   library never exits or aborts on bad input; on failure no output handle
 *   is made (*out is NULL) and no file is left half written.
 *
 *   Host tensors (tessel_tensor) are row-major and contiguous, in caller
 *   memory, of dtype f32, f16, bf16 or f64 (or the input's own). An input
 *   takes data of its own dtype, f16 or bf16 for an f32 input, or f32 for an
 *   imported model's input compiled at f16 (the dtype the model declares);
 *   other conversions can lose information and are refused unless the
 *   options' convert flag is set. Outputs are written as f32. Inputs not
 *   given take the seeded defaults `tessel run` uses.
 *
 *   Process-wide state: progress lines (when asked for), the out-of-memory
 *   handler, and jansson's allocator, which the library's first call sets
 *   to its own (out of memory then reaches the handler, never a NULL).
 *
 *   Strings the library returns (names, JSON) live as long as their handle;
 *   strings it gives away (marked "caller frees") are freed with tessel_free.
 *
 * A complete program: compile a zoo model, run it, print its cycles.
 *
 *   #include <stdio.h>
 *   #include <tessel/tessel.h>
 *
 *   int main(void) {
 *       tessel_error err;
 *       tessel_model *model = NULL;
 *       tessel_machine *machine = NULL;
 *       tessel_package *pkg = NULL;
 *       tessel_result *run = NULL;
 *       if (tessel_model_load("zoo:mlp:tokens=64,width=128,hidden=256", NULL, &model, &err) ||
 *           tessel_machine_load("c600", &machine, &err) ||
 *           tessel_compile(model, machine, NULL, &pkg, &err) ||
 *           tessel_run(pkg, NULL, 0, NULL, 0, NULL, &run, &err)) {
 *           fprintf(stderr, "%s", err.message);
 *           tessel_model_free(model);
 *           tessel_machine_free(machine);
 *           tessel_package_free(pkg);
 *           return err.status;
 *       }
 *       printf("%llu cycles\n", (unsigned long long)tessel_result_cycles(run));
 *       tessel_result_free(run);
 *       tessel_package_free(pkg);
 *       tessel_machine_free(machine);
 *       tessel_model_free(model);
 *       return 0;
 *   }
 *
 * Build it with `cc hello.c $(pkg-config --cflags --libs tessel)`, or in
 * CMake with `find_package(tessel)` and `target_link_libraries(hello
 * tessel::tessel)`.
 */
#ifndef TESSEL_TESSEL_H
#define TESSEL_TESSEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSEL_VERSION "0.1"
/* The library's version, TESSEL_VERSION when the header and library agree. */
const char *tessel_version(void);

/* ---- status and errors --------------------------------------------------- */

typedef enum tessel_status {
    TESSEL_OK = 0,
    TESSEL_CHECK_FAILED = 1, /* tessel_check ran, and an output differs from a reference */
    TESSEL_ERROR = 2,        /* bad input: the message names the file, option, input, shape or dtype */
    TESSEL_NO_FIT = 3,       /* the model does not fit the machine (the message says what would) */
} tessel_status;

enum { TESSEL_MESSAGE_BYTES = 4096 };
typedef struct tessel_error {
    tessel_status status;
    char message[TESSEL_MESSAGE_BYTES]; /* newline-terminated; "" on success */
} tessel_error;

/* Frees a string the library gave away. */
void tessel_free(void *p);

/* Host memory. Buffers sized by the input (tensors, files, a package's
 * image) that cannot be had fail their call with TESSEL_ERROR ("... needs N
 * bytes of host memory"). The library's own small allocations have no
 * such path: when one fails, the library removes the temporaries of any
 * file it is writing and calls handler, which must not return (it may
 * exit); without one, or when it returns, the library prints a message and
 * aborts. The handler is process-wide; NULL restores the default. */
typedef void (*tessel_oom_handler)(size_t bytes);
void tessel_set_oom_handler(tessel_oom_handler handler);

/* ---- tensors ------------------------------------------------------------- */

typedef enum tessel_dtype {
    TESSEL_F32, TESSEL_F16, TESSEL_BF16,
    TESSEL_F8E4M3, TESSEL_F8E5M2, TESSEL_F143, /* 8-bit floats: OCP E4M3, E5M2, and the IPU's f143 */
    TESSEL_I32,
    TESSEL_F64, /* host data only: rounded to f32 on the way in */
} tessel_dtype;
/* "f32", "f16", ...; NULL for a value that is none. */
const char *tessel_dtype_name(tessel_dtype t);

enum { TESSEL_MAX_RANK = 6 };

/* An input or output of a model or package. */
typedef struct tessel_tensor_info {
    const char *name;
    tessel_dtype dtype;    /* what the program computes it in */
    tessel_dtype declared; /* what the source model declares (an ONNX f32 input compiled at f16), else dtype */
    int rank;
    int64_t shape[TESSEL_MAX_RANK];
} tessel_tensor_info;

/* Host data for an input, or room for an output. */
typedef struct tessel_tensor {
    const char *name;      /* the input or output it is */
    tessel_dtype dtype;    /* of data: inputs f32, f16, bf16 or f64 (or the input's own); outputs f32 */
    int rank;
    int64_t shape[TESSEL_MAX_RANK];
    void *data;            /* row-major; an input's is only read */
} tessel_tensor;

typedef enum tessel_role { TESSEL_INPUT, TESSEL_OUTPUT } tessel_role;

/* ---- models -------------------------------------------------------------- */

typedef struct tessel_model tessel_model;

typedef enum tessel_precision {
    TESSEL_PRECISION_F16,     /* imported models: f16 activations and parameters (the default) */
    TESSEL_PRECISION_FP8,     /* f143 GEMM weights but the attention scores' and the first and last GEMM's */
    TESSEL_PRECISION_F32,
    TESSEL_PRECISION_FP8_ALL, /* every GEMM weight f143 */
} tessel_precision;

typedef struct tessel_model_options {
    tessel_precision precision; /* for ONNX models; zoo models take precision= in their spec */
    int no_reroll;              /* keep an imported model's repeated blocks apart */
    int import_report;          /* print what the ONNX import raised and folded on stderr */
} tessel_model_options;        /* all zero: the defaults */

/* A model from "zoo:NAME[:key=value,...]" (`tessel zoo` lists them), a .tsl
 * file or an .onnx file (opts NULL: the defaults). */
tessel_status tessel_model_load(const char *spec, const tessel_model_options *opts, tessel_model **out, tessel_error *err);
/* A model from an ONNX file's bytes (copied); name is used in messages and
 * may be NULL ("model.onnx"). Tensors kept as external data are read from
 * files next to name, as for a file. */
tessel_status tessel_model_from_onnx(const void *bytes, size_t len, const char *name, const tessel_model_options *opts,
                                     tessel_model **out, tessel_error *err);
void tessel_model_free(tessel_model *m);
/* Its inputs or outputs, in order: the count, and the i-th (0 <= i < count). */
int tessel_model_count(const tessel_model *m, tessel_role role);
tessel_status tessel_model_tensor(const tessel_model *m, tessel_role role, int i, tessel_tensor_info *out, tessel_error *err);

/* ---- machines ------------------------------------------------------------ */

typedef struct tessel_machine tessel_machine;

/* A preset ("c600", `tessel machine --list`) or a machine description's
 * .json file. */
tessel_status tessel_machine_load(const char *spec, tessel_machine **out, tessel_error *err);
void tessel_machine_free(tessel_machine *m);
const char *tessel_machine_name(const tessel_machine *m);
/* The description as JSON (`tessel machine SPEC --json`). */
const char *tessel_machine_json(const tessel_machine *m);

/* ---- compiling ----------------------------------------------------------- */

typedef struct tessel_package tessel_package;

typedef struct tessel_compile_options {
    const char *recipe;    /* a recipe file to start from (and, with search_steps 0, replay), or NULL */
    int64_t search_steps;  /* local-search proposals at most; 0: the start as it is */
    int beam;              /* the beam's width; 0: none */
    int no_fuse;           /* analyse the optimizer epilogue fusions but make none */
    int no_siblings;       /* keep matmuls that share an operand apart */
    int report;            /* keep the compile report (tessel_package_report_json); costs a little time */
    int progress;          /* progress lines on stderr */
} tessel_compile_options;
/* The defaults `tessel compile` uses. */
void tessel_compile_options_init(tessel_compile_options *o);

/* model -> package for machine (opts NULL: the defaults): the plan search,
 * lowering and placement. TESSEL_NO_FIT when no plan fits. */
tessel_status tessel_compile(const tessel_model *model, const tessel_machine *machine, const tessel_compile_options *opts,
                             tessel_package **out, tessel_error *err);

/* ---- packages ------------------------------------------------------------ */

tessel_status tessel_package_save(const tessel_package *p, const char *path, tessel_error *err);
tessel_status tessel_package_load(const char *path, tessel_package **out, tessel_error *err);
void tessel_package_free(tessel_package *p);
int tessel_package_count(const tessel_package *p, tessel_role role);
tessel_status tessel_package_tensor(const tessel_package *p, tessel_role role, int i, tessel_tensor_info *out,
                                    tessel_error *err);
/* The plan as a recipe (JSON; `tessel compile --save-recipe`), or NULL for
 * a package compiled without one kept (all packages compiled here keep it). */
const char *tessel_package_recipe(const tessel_package *p);
/* The compile report (JSON; `tessel compile --report`) when compiled with
 * opts.report, else NULL. */
const char *tessel_package_report_json(const tessel_package *p);
/* The machine it was compiled for (owned by the package). */
const tessel_machine *tessel_package_machine(const tessel_package *p);

/* ---- running ------------------------------------------------------------- */

typedef struct tessel_result tessel_result;

typedef struct tessel_run_options {
    int convert;             /* round input data whose dtype can lose information */
    int progress;            /* progress lines on stderr */
    uint64_t max_host_bytes; /* refuse a machine whose simulation needs more host memory; 0: nine tenths of it */
} tessel_run_options;       /* all zero: the defaults */

/* Runs p on the simulator: inputs by name (those not given are seeded),
 * outputs by name into the caller's f32 buffers (those not asked for are
 * dropped); *out receives the run's statistics. */
tessel_status tessel_run(const tessel_package *p, const tessel_tensor *inputs, int ninputs, tessel_tensor *outputs,
                         int noutputs, const tessel_run_options *opts, tessel_result **out, tessel_error *err);
void tessel_result_free(tessel_result *r);
/* Simulated cycles of the whole run. */
uint64_t tessel_result_cycles(const tessel_result *r);
/* The run's statistics as JSON (`tessel run --json`: cycles by kind, tiles, memory). */
const char *tessel_result_json(const tessel_result *r);

/* The HTML report (`tessel report`): runs p on inputs and writes one
 * self-contained page to path, with the compile report when p keeps one. */
tessel_status tessel_report_html(const tessel_package *p, const tessel_tensor *inputs, int ninputs,
                                 const tessel_run_options *opts, const char *path, tessel_error *err);

/* ---- checking ------------------------------------------------------------ */

typedef struct tessel_check_options {
    tessel_run_options run;
    const tessel_tensor *expect; /* values outputs must also match (e.g. PyTorch's), by name; f32 */
    int nexpect;
    int locate;                  /* find the first differing op result even when the outputs agree */
} tessel_check_options;         /* all zero: the defaults */

/* Runs p (compiled from model) on inputs and compares every output bit for
 * bit with the plan-exact reference, by cosine with the FP32 model, and
 * with the expected values given; *json (caller frees; may be NULL)
 * receives the comparisons as `tessel check --json` prints them. Returns
 * TESSEL_OK when everything agrees, TESSEL_CHECK_FAILED (with *json) when
 * something differs. */
tessel_status tessel_check(const tessel_model *model, const tessel_package *p, const tessel_tensor *inputs, int ninputs,
                           const tessel_check_options *opts, char **json, tessel_error *err);

#ifdef __cplusplus
}
#endif

#endif
