/* The tessel driver: the whole compiler as one function, and the check that
 * compiles, simulates and compares against the references. The command
 * (main.c) and the tests call these. */
#ifndef TESSEL_DRIVER_H
#define TESSEL_DRIVER_H

#include "../place/place.h"
#include "../search/search.h"
#include "../sim/sim.h"

/* The version the package metadata and `tessel --version` name. */
#define TESSEL_VERSION "0.1"

/* The local search's proposals unless told (the command's --search-steps),
 * and the most it takes. */
enum { DRIVER_SEARCH_STEPS = 256, DRIVER_SEARCH_STEPS_MAX = 1000000 };

typedef struct compile_options {
    const char *model;        /* names the source in the package's metadata */
    const char *print_after;  /* a pass (driver_pass_find) whose result goes to print_to, or NULL */
    FILE *print_to;           /* NULL: stderr */
    const char *recipe;       /* start from this recipe file, or NULL */
    const char *recipe_text;  /* its text, already read (a stage's of a recipe for several chips); recipe names it */
    int64_t micro_batches;    /* several chips: the batch in this many pieces (0: the fewest whose stages fit;
                                 CHIPS_MICRO_AUTO: of those that fit, the count whose batch takes the fewest
                                 predicted cycles) */
    int32_t replicas;         /* several chips: data-parallel copies of the pipeline, each on chips / replicas chips
                                 and batch / replicas of the batch (0: 1; CHIPS_REPLICAS_AUTO: the count whose
                                 batch takes the fewest predicted cycles) */
    int64_t search_steps;     /* local-search proposals at most; 0 expands the start as it is (no beam either) */
    int beam;                 /* the beam's width (0: none) */
    bool quiet;               /* no progress line */
    bool no_fuse;             /* analyse the epilogue fusions but make none */
    bool no_siblings;         /* keep matmuls that share an operand apart */
    bool fit_only;            /* a fit check: placement without the parameters' values (the package is not for
                                 running) */
    bool fusion_report;       /* for --report: fill compile_info's fusion savings, proofs and live peak, and price
                                 each matmul's runner-up in the whole program (its `why`) */
} compile_options;

/* ---- passes.c: the pipeline, one named pass after another -----------------
 *
 *   graph ─join-siblings─► ─fuse-epilogue─► graph'    (planned by the search)
 *   graph' ─expand─► mid ─cast-order─► ─absorb─► ─own-partials─► mid'   (src/mid: mid_passes)
 *   mid' ─lower─► low ─schedule─► low ─place─► package
 *
 * Every pass prints its result (--print-after=NAME): a graph as .tsl text, a
 * mid program as mid text, a low program or a package's placed program as
 * low_print lines. */
typedef enum { PASS_GRAPH, PASS_MID, PASS_LOW } driver_pass_ir;
typedef struct driver_pass {
    const char *name;
    const char *summary;      /* one line */
    driver_pass_ir ir;        /* what it makes */
} driver_pass;
/* The pipeline's passes, in order: driver_pass_at(0 .. count - 1). */
int driver_pass_count(void);
driver_pass driver_pass_at(int i);
/* Whether a pass is called name (*out receives it when out is not NULL). */
bool driver_pass_find(const char *name, driver_pass *out);
/* The pass names, comma separated, for messages. */
void driver_pass_names(char *buf, size_t cap);

/* Searches a compile runs at most: when no finalist places, the search runs
 * again with less room for its estimated peak (driver.c). */
enum { COMPILE_ATTEMPTS = 3 };

/* A finalist that lowering or placement refused, and why. */
typedef struct compile_failure {
    double predicted;         /* its predicted cycles */
    double room_scale;        /* the search's room_scale for it */
    bool reserved;            /* and whether it judged reservations */
    bool joined;              /* a plan of the graph with its sibling matmuls joined */
    char why[2048];
} compile_failure;

typedef struct compile_info {
    place_stats place;
    int64_t prims;            /* mid prims, repeat bodies once */
    int64_t steps, runs, frags;
    int32_t steps_merged;     /* exchange phases and copy steps the schedule merged into earlier ones */
    double seconds;           /* compile wall time */
    double search_seconds, lower_seconds, place_seconds;
    search_result search;     /* the plan search: finalists, steps, estimate */
    int finalist;             /* the finalist that was packaged */
    compile_failure failed[2 * SEARCH_FINALISTS * COMPILE_ATTEMPTS]; /* two graphs: siblings joined and apart */
    int nfailed;
    bool start_plan_fallback; /* every searched plan failed placement; the start plan (--search-steps 0's) placed */
    char *recipe;             /* the packaged plan as a recipe (JSON text) */
    /* The optimizer epilogue fusion (docs/epilogue.md): every candidate, and
     * the graph the search and expansion compiled (g with the fused ops;
     * NULL when nothing was fused: g itself). Recipes and the search's ops
     * name that graph's ops. */
    fuse_plan fusions;
    graph *fused;
    /* Sibling matmuls joined (graph_siblings_apply), before the epilogue
     * fusion: the groups, and the graph they make (NULL when none: g). */
    sib_plan siblings;
    graph *joined;
    double siblings_joined_cycles, siblings_apart_cycles; /* the two searches' best predictions, when both ran */
    char **sibling_groups;    /* per group found: its members' names, joined or not (malloc'd) */
    int32_t nsibling_groups;
    /* With o->fusion_report: per candidate, what the same plan unfused would
     * store of its gradient (bytes per tile, the buffers) and the proof from
     * the package; and the package's live peak. */
    int64_t *fusion_saved;
    char **fusion_saved_names;
    epilogue_proof *fusion_proofs;
    package_peak peak;
} compile_info;

/* graph -> package for machine m: the epilogue fusion, plan search on the
 * graph it makes, then the best finalist that lowers and places. The
 * package's numeric plan is keyed to g, so it checks against the model as
 * given. */
int driver_compile(const graph *g, const machine *m, const compile_options *o, package *out, compile_info *info, diag *d);
/* The graph the epilogue fusion analysed: g with its sibling matmuls joined, or g. */
static inline const graph *driver_model_graph(const graph *g, const compile_info *info) {
    return info->joined ? info->joined : g;
}
/* The graph compile_info's plan names: the fused graph, or the model graph. */
static inline const graph *driver_compiled_graph(const graph *g, const compile_info *info) {
    return info->fused ? info->fused : driver_model_graph(g, info);
}
/* The packaged plan of info (compiled from g) without the fusion, as a
 * recipe for g: every grid as chosen, a fused op's given to its matmul.
 * Compiled with --no-fuse --recipe R --search-steps 0 it is the same step
 * unfused, with the same accumulation order (P1). JSON text, caller frees. */
char *driver_unfused_recipe(const graph *g, const machine *m, const compile_info *info);
/* The proof for every candidate of fp (fused or not) from package p,
 * compiled from g: whether its gradient is stored (proofs[i]). */
int driver_fusion_proofs(const graph *g, const fuse_plan *fp, const package *p, epilogue_proof *proofs, diag *d);
void compile_info_free(compile_info *info);

/* Whether package p (read from path) was compiled from g: its host inputs
 * and outputs are g's, by name, dtype and shape, in order. */
int driver_package_matches(const graph *g, const package *p, const char *path, diag *d);

/* ---- host.c: tensors crossing the host boundary ------------------------ */

/* A graph's or a package's input or output as the host sees it. */
typedef struct host_spec {
    const char *name;
    dtype dtype;
    dtype declared;      /* what the source model declares (an ONNX f32 input compiled at f16), else dtype */
    int scale;
    int rank;
    int64_t dim[GRAPH_MAX_RANK];
} host_spec;

int64_t host_numel(const host_spec *s);
/* The graph's inputs (or outputs), in order; malloc'd, *n of them. Names point into g. */
host_spec *driver_graph_specs(const graph *g, bool outputs, int32_t *n);
/* The package's input and output bindings, in order (an input's declared
 * dtype from the metadata); malloc'd. Names point into p. */
void driver_package_specs(const package *p, host_spec **ins, int32_t *nin, host_spec **outs, int32_t *nout);
/* How host data of dtype `given` (wide: it was float64 or int64, wide_exact:
 * every value survived narrowing to f32 or i32) enters input s: as it is, widened
 * exactly (f16 or bf16 into f32), rounded to the dtype the input is computed in
 * because it is the one the model declares, or with a loss the caller must
 * ask for (the command's --convert). Never a silent loss. */
typedef enum { HOST_AS_IS, HOST_WIDENED, HOST_DECLARED, HOST_LOSSY } host_entry;
host_entry driver_host_entry(const host_spec *s, dtype given, bool wide, bool wide_exact);
/* The spec called name among s[0..n), or -1 (name NULL: -1). */
int32_t host_find(const host_spec *s, int32_t n, const char *name);
/* Their names, comma separated ("none" for none), for messages. */
void host_names(const host_spec *s, int32_t n, char *buf, size_t cap);
/* Every input whose data[j] is NULL gets room and its seeded default (what
 * run and check use when none is given); who leads the out-of-memory
 * message ("tessel run"). */
int host_seed_missing(const host_spec *s, int32_t n, float **data, const char *who, diag *d);

/* The first graph op, in program order, whose result differs from the
 * plan-exact reference (locate.c). */
typedef struct locate_result {
    int32_t probes;                         /* op results the package lets us watch */
    int64_t compared;                       /* results compared, repeat iterations counted */
    bool found;                             /* one differs */
    int32_t value, op, binding;             /* that result, its op, its probe */
    int depth;                              /* enclosing repeats */
    int64_t iters[GRAPH_MAX_REPEAT_DEPTH];  /* their iterations, outermost first */
    bool missing;                           /* the simulator never completed it */
    int64_t numel;                          /* its elements */
    num_mismatch diff;                      /* how it differs */
    int rank;
    int64_t coord[GRAPH_MAX_RANK];          /* where the first difference is */
    int32_t tile;                           /* and the tile holding it */
} locate_result;

/* Reruns p and the plan-exact reference watching every op result, to name
 * the first that differs (progress lines unless quiet). */
int driver_locate(const graph *g, const package *p, const graph_numerics *plan, float *const *inputs, bool quiet,
                  locate_result *r, diag *d);

typedef struct check_output {
    const char *name;
    num_diff pure;        /* against the pure FP32 model (precision casts stripped) */
    num_mismatch exact;   /* against the plan-exact emulated reference: must be none */
    double min_cosine;    /* the pure-model threshold for this output */
    bool has_expect;      /* expected values were given (--expect) */
    num_diff expect;      /* against them: the same threshold applies */
    bool pass_refs;       /* against the two references */
    bool pass_expect;     /* against the expected values (true without them) */
    bool pass;            /* both */
} check_output;

typedef struct check_result {
    sim_stats sim;
    int32_t n;
    check_output *out;    /* malloc'd, one per output */
    bool fp8;             /* the graph has 8-bit values: FP8 thresholds */
    bool pass;
    int64_t differing;    /* output elements, all outputs, that differ from the plan-exact reference */
    double cosine;        /* worst output, against the pure model */
    double max_abs_err;   /* worst output, against the pure model */
    bool has_expect;      /* some output had expected values */
    double expect_cosine, expect_max_abs_err; /* worst of those outputs against them */
    double ref_seconds;   /* from the simulation's start to the last reference's end (they run beside it) */
    double pure_seconds, exact_seconds; /* each reference's own wall time (the FP32 one may start before the compile) */
    bool located;         /* loc holds a search for the first differing op result */
    locate_result loc;
} check_result;

/* The pure FP32 reference needs no package: check from scratch starts it on
 * a thread of its own before compiling (driver_pure_start, on the inputs
 * driver_check will use: given, or the seeded default) and hands it to
 * driver_check; driver_pure_cancel stops and frees one that is not used.
 * NULL with a diagnostic when the host cannot hold the inputs. */
typedef struct driver_pure driver_pure;
driver_pure *driver_pure_start(const graph *g, float *const *given, bool quiet, diag *d);
void driver_pure_cancel(driver_pure *p);

typedef struct check_options {
    const char *package;    /* names the package in messages */
    float *const *inputs;   /* per graph input, its data; NULL (or a NULL entry): the seeded default */
    float *const *expect;   /* per graph output, values it must also match (e.g. PyTorch's); NULL entries: none */
    sim_options sim;        /* trace, quiet */
    bool locate;            /* find the first differing op result even when the outputs agree */
    driver_pure *pure;      /* the FP32 reference already running on these inputs (driver_pure_start), or NULL;
                               driver_check takes it over and frees it */
    float **outputs;        /* non-NULL: receives the simulated outputs, per graph output (malloc'd, caller frees) */
} check_options;

/* Runs p on the inputs, then the pure FP32 model and the plan-exact
 * reference (from the plan's numeric decisions in p's metadata), and
 * compares each output: bit for bit with the plan-exact reference, by cosine
 * with the pure model. When an output differs, or o->locate is set, it also
 * finds the first op result that differs. */
int driver_check(const graph *g, const package *p, const check_options *o, check_result *r, diag *d);
void check_result_free(check_result *r);

/* Fused or not, what a checked package really stores (docs/epilogue.md,
 * "The proof"), per candidate of the fusions the compile made (ci), or for
 * a given package (ci NULL) of a fresh analysis of g, where a legal step
 * counts as fused when the package stores no gradient for it. */
typedef struct check_proofs {
    fuse_plan given;           /* the fresh analysis, for a given package */
    const fuse_plan *fp;       /* the candidates: &ci->fusions or &given */
    const graph *gf;           /* the graph fp names */
    epilogue_proof *proofs;    /* per candidate (malloc'd) */
    bool fail;                 /* a fused step's gradient is stored: the check fails */
    package_peak peak;         /* what the buffers hold at once */
} check_proofs;
int driver_check_proofs(const graph *g, const compile_info *ci, const package *pkg, check_proofs *pv, diag *d);
void check_proofs_free(check_proofs *pv);

/* ---- chips.c: a model over several chips (docs/chips.md) ----------------
 *
 * One pipeline stage per chip (graph_split_stages), each compiled for one
 * chip of the machine by driver_compile; stage s hands its carried values
 * to stage s + 1 over the link between neighbouring chips. */
enum { CHIPS_MAX = 64, CHIPS_REPLICAS_AUTO = -1, CHIPS_MICRO_AUTO = -1 };

/* A pipeline's time, from each stage's cycles and the bytes each hands on:
 * a link costs link_latency_cycles + bytes / link_bytes_per_cycle +
 * chip_sync_cycles; a stage is busy with its batch until its result has
 * left. The first micro-batch takes `latency`, each further one `interval`
 * (the busiest stage) more. */
typedef struct chips_timing {
    int32_t n;                       /* stages */
    int64_t micro_batches;           /* per replica */
    int32_t replicas;                /* copies of the pipeline running side by side on their shares of the batch */
    uint64_t stage[CHIPS_MAX];       /* per stage: its cycles */
    uint64_t link_bytes[CHIPS_MAX];  /* to the next stage */
    uint64_t link[CHIPS_MAX];        /* their cycles */
    uint64_t latency;                /* one micro-batch through every stage and link */
    uint64_t interval;               /* steady state: one micro-batch leaves every interval cycles */
    uint64_t cycles;                 /* the run: latency + (micro_batches - 1) x interval */
    double bubble;                   /* share of chip-cycles idle over the run: fill, drain and imbalance */
    double imbalance;                /* share idle in the steady state: stages slower than others */
} chips_timing;
void driver_chips_timing(const machine *m, const uint64_t *stage, const uint64_t *link_bytes, int32_t n,
                         int64_t micro_batches, chips_timing *t);
/* The bytes a stage's package hands the next stage: its outputs. */
uint64_t driver_chips_handed_bytes(const package *p);

typedef struct chips_compiled {
    int64_t batch;          /* the inputs' first axis */
    int32_t replicas;       /* data-parallel copies of the pipeline (stages.n chips each) */
    int64_t micro_batches;  /* the batch goes through in this many pieces */
    graph *micro;           /* the model for one micro-batch (graph_micro_batch), or NULL (one: the model) */
    graph_stages stages;    /* of the model or of micro */
    const int64_t *cut;     /* the layers per stage to compile (NULL: as even as they go) */
    uint64_t even_interval;   /* when a balanced cut replaced the even one: the even cut's busiest stage (its
                                 predicted cycles and link), else 0 */
    int64_t even_count[CHIPS_MAX]; /* and its layers per stage */
    machine one;            /* the machine's one chip: each stage's package is for it */
    int32_t ncompiled;
    package *pkg;           /* per stage */
    compile_info *info;     /* per stage */
    char *manifest;         /* JSON text (pkg_chips) */
    char *recipe;           /* {"chips": N, "machine": .., "stages": [each stage's recipe]} */
    chips_timing predicted; /* from the stages' predicted cycles */
    double seconds;
} chips_compiled;
/* g over machine m's chips (m->chips > 1), in o->micro_batches pieces of
 * its batch, or (0) the fewest whose stages fit, trying 1, 2, ... in turn.
 * The layers are cut evenly, then (three stages or more, no recipe) as the
 * stages' predicted cycles say balances them: each layer costing what a
 * middle stage's do, the first and last stages' own work and every link
 * kept; the balanced cut is compiled when its model predicts a busiest
 * stage 1 % faster, and kept when its compile agrees.
 * The error of a stage that does not fit names its chip and layers. */
int driver_compile_chips(const graph *g, const machine *m, const compile_options *o, chips_compiled *out, diag *d);
void chips_compiled_free(chips_compiled *c);

/* How the chips' stages are spread over processes: rank `rank` of `ranks`
 * runs chips [driver_chips_first(n, rank, ranks), driver_chips_first(n,
 * rank + 1, ranks)) and hands its last chip's outputs to the next rank that
 * has chips through send; recv waits for the handover to its first chip.
 * Both must give up with a message, never hang (src/cli/mpi.c: MPI, with a
 * timeout on every wait). NULL: one process runs every chip. */
typedef struct chips_transport {
    int rank, ranks;
    int (*send)(void *ctx, int to, const uint8_t *bytes, size_t len, diag *d);
    int (*recv)(void *ctx, int from, uint8_t **bytes, size_t *len, diag *d);  /* *bytes malloc'd */
    void *ctx;
} chips_transport;
int32_t driver_chips_first(int32_t chips, int rank, int ranks);

/* Runs this rank's chips' stages in order: chip 0 on the host inputs, each
 * next one on the outputs it is handed (in this process, or from the
 * previous rank with every earlier chip's cycles). On the rank with the
 * last chip (*last), outputs receive its outputs and t the whole
 * pipeline's timing, the same whatever the number of ranks; st holds one
 * sim_stats per chip, filled for this rank's (caller frees each). A rank
 * that fails hands its error on, so every later rank fails saying why. */
int driver_run_chips(const pkg_chips *pc, const char *path, const chips_transport *tp, const sim_options *so,
                     float *const *inputs, float **outputs, sim_stats *st, chips_timing *t, bool *last, diag *d);
/* A rank that failed before it could run (its error in d): hands the error
 * to the next rank, so it fails saying why instead of waiting. */
/* A recipe file's JSON, duplicate keys refused; NULL with d (file:line:col) when it is not JSON. */
struct json_t *driver_load_recipe_json(const char *path, diag *d);
void driver_chips_hand_on_failure(const pkg_chips *pc, const chips_transport *tp, const diag *d);

/* ---- train.c: a training step over data-parallel replicas (docs/chips.md) --
 *
 * graph_split_replicas's programs on one replica per chip: program 0 (every
 * chip's replica: its share of the batch, to its gradients), then program
 * 1 + o (owner o: its rows of every gradient summed over the replicas, the
 * optimizers on those rows). Between them a reduce-scatter hands each owner
 * its rows; after them a gather hands every chip the new rows. */
typedef struct train_timing {
    int32_t n;                        /* replicas, one per chip */
    int64_t micro;                    /* micro-batches each replica runs one after another */
    uint64_t replica;                 /* the replicas' program, every micro-batch (they run at once, alike) */
    uint64_t owner[CHIPS_MAX];        /* each owner's program */
    uint64_t owner_max;
    uint64_t scatter_total, gather_total;   /* bytes over every link */
    uint64_t scatter_bytes, gather_bytes;   /* the busiest link's bytes */
    uint64_t scatter, gather;         /* their cycles: the longest route's latency, the busiest link, one sync */
    uint64_t cycles;                  /* the step: replica + scatter + slowest owner + gather */
} train_timing;

/* The programs as the host sees them (inputs, outputs per program) and how
 * each owner is fed from the replicas' outputs. */
typedef struct train_shape {
    int32_t n;
    int64_t micro;                    /* micro-batches per replica (gradient accumulation) */
    host_spec **in, **out;            /* per program, 1 + n */
    int32_t *nin, *nout;
    graph_feed **feed;                /* per owner */
    int32_t *nfeed;
    int64_t *gather_bytes;            /* per owner: its new weight rows, for every other chip */
    bool owns_feeds;
} train_shape;
void driver_train_shape_of_graphs(const graph_replicas *r, train_shape *s);
/* From the packages (1 + n); the feeds and gather bytes (driver_train_feeds) are taken over when owns. */
void driver_train_shape_of_packages(const package *pkgs, int32_t n, int64_t micro, graph_feed **feed, int32_t *nfeed,
                                    int64_t *gather_bytes, bool owns, train_shape *s);
void train_shape_free(train_shape *s);
/* The feeds and gather bytes a training package's manifest records for its n owners. */
int driver_train_feeds(const char *manifest, int32_t n, graph_feed ***feed, int32_t **nfeed, int64_t **gather_bytes,
                       const char *path, diag *d);
/* Whether the replica's input called name is the sum of the earlier
 * micro-batches ("<v>.acc_in"), not a share of a model input. */
bool driver_train_carried(const char *name);
/* The model output called name as the programs make it: every replica's
 * rows of it, or every owner's; -1 when none makes it. */
int driver_train_output_spec(const train_shape *s, const char *name, host_spec *out);

/* Runs program p (0 the replica, 1 + o owner o) as replica or owner `who`
 * on in, into out (malloc'd per output); its cycles into *cycles (the
 * largest so far: the replicas run alike). */
typedef int (*train_runner)(void *ctx, int32_t p, int32_t who, float *const *in, float **out, uint64_t *cycles, diag *d);
/* One step: every replica on its rows of the model inputs (min), the owners
 * on the stacked rows of the replicas' outputs, the model's outputs (mout)
 * put together into outputs (malloc'd); per program its cycles. */
int driver_train_step(const train_shape *s, const host_spec *min, int32_t nmin, float *const *inputs,
                      const host_spec *mout, int32_t nmout, float **outputs, train_runner run, void *ctx,
                      uint64_t *cycles, diag *d);
/* The same over MPI ranks (tp): rank k runs the replicas and owners of
 * chips [driver_chips_first(n, k, ranks), ... of k + 1); the replicas' rows
 * travel to their owners' ranks (every pair of ranks in a fixed order, the
 * lower sending first), then every owner's outputs and the programs' cycles
 * to the last rank, which alone fills outputs and cycles. A failing rank
 * sends its error in place of its data, so every rank finishes; the last
 * says why (failed: this rank failed before the step, and why). s needs
 * the specs of program 0 and of this rank's owners (the
 * last rank's: of every owner); only the last rank's mout and outputs are read. */
int driver_train_step_ranks(const train_shape *s, const chips_transport *tp, const diag *failed, const host_spec *min,
                            int32_t nmin, float *const *inputs, const host_spec *mout, int32_t nmout, float **outputs,
                            train_runner run, void *ctx, uint64_t *cycles, diag *d);
void driver_train_timing(const machine *m, const train_shape *s, const uint64_t *cycles, train_timing *t);

typedef struct train_compiled {
    graph_replicas split;
    machine one;            /* the machine's one chip: every program's package is for it */
    int32_t nprograms, ncompiled;
    package *pkg;           /* per program */
    compile_info *info;
    char *manifest, *recipe;
    train_timing predicted;
    double seconds;
} train_compiled;
/* Training step g over every chip of m (m->chips > 1), one replica each,
 * in o->micro_batches micro-batches (0: the fewest whose replica fits). */
int driver_compile_train(const graph *g, const machine *m, const compile_options *o, train_compiled *out, diag *d);
void train_compiled_free(train_compiled *c);

#endif
