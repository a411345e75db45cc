/* machine: the description of the tile machine a program is compiled for.
 *
 * One tile's memory (c600 values; every address is a byte address that is
 * the same on every tile):
 *
 *   0x4c000 +--------------------------+ tile_memory_base
 *           | ordinary region          | 16 KiB elements; code and data;
 *           |   208 KiB, 13 elements   | loads 8 bytes/cycle
 *   0x80000 +--------------------------+ interleaved_base (= code_limit)
 *           | interleaved region       | elements paired (interleave_factor 2):
 *           |   416 KiB, 13 logical    | one logical element is 32 KiB;
 *           |   elements of 32 KiB     | loads 16 bytes/cycle; no code
 *   0xe7bb0 |..........................| loader_limit: initial images end here
 *   0xe8000 +--------------------------+ tile_memory_end (exclusive)
 *
 * Throughput per tile per cycle: AMP multiply-adds by operand dtype (f32 16,
 * f16 64, 8-bit 128; 8-bit with f32 partials 64), vector bytes, load and copy
 * bytes, exchange bytes. BSP costs: sync cycles (and repeat patching) per
 * exchange phase, latency per phase that moves data, control cycles per
 * fragment sent and received, launch cycles per kernel run. Kernel costs are
 * calibrated against measured hardware (docs/calibration.md); the GEMM
 * cycle constants mean
 *
 *   cycles(run) = gemm_run_cycles
 *               + panels * (gemm_panel_cycles
 *                           + wrows * (row + depth * amp_col_panel / macs))
 *   panels = ceil(K / depth) * ceil(C / amp_col_panel)
 *   depth  = amp_panel_bytes / (amp_col_panel * dtype bytes)   (f16 16, 8-bit 32)
 *   wrows  = ceil(rows / workers) * workers
 *   row    = gemm_row_cycles (+ gemm_packed_row_cycles when C spans panels)
 *
 * for a run of `rows` output rows, inner dimension K and C output columns.
 *
 * Several chips: `tiles` and every rate above are one chip's; `chips` chips
 * are joined in a ring by IPU-Links (each chip to its two neighbours), a
 * transfer to a neighbour costs link_latency_cycles plus its bytes at
 * link_bytes_per_cycle, and a sync across chips chip_sync_cycles. The chip
 * fields (chips onwards) exist only when chips > 1: a one-chip machine
 * leaves them out of its JSON, its print and its fingerprint, so it is the
 * same machine, byte for byte, as before they existed.
 *
 * Every field is declared once in MACHINE_FIELDS; the struct, JSON loading
 * and writing, machine_print, machine_fingerprint and machine_equal are all
 * derived from that table. docs/machine.md gives the source of each value.
 */
#ifndef TESSEL_MACHINE_H
#define TESSEL_MACHINE_H

#include "../num/num.h"
#include "../util/util.h"

/* Field kinds: STR a name; ADDR a byte address (hex in JSON and print);
 * U32 an unsigned count or rate; F64 a real. lo is the least legal value
 * (cross-field rules live in machine_validate).
 *
 *    kind  field                             lo unit                        comment */
#define MACHINE_FIELDS(X)                                                                                                 \
    X(STR,  name,                             1, "-",                        "label for reports; not in the fingerprint") \
    X(U32,  tiles,                            1, "tiles",                    "tile processors, each with its own memory") \
    X(ADDR, tile_memory_base,                 0, "byte address",             "first byte of tile memory")                 \
    X(ADDR, tile_memory_end,                  0, "byte address",             "one past the last byte of tile memory")     \
    X(U32,  memory_element_bytes,             4, "bytes",                    "physical memory element (bank)")            \
    X(ADDR, interleaved_base,                 0, "byte address",             "start of the interleaved region (to end)")  \
    X(U32,  interleave_factor,                1, "memory elements",          "physical elements per interleaved element") \
    X(ADDR, code_limit,                       0, "byte address",             "code only below this address")              \
    X(ADDR, loader_limit,                     0, "byte address",             "the loader fills memory only below this")   \
    X(F64,  clock_hz,                         1, "Hz",                       "tile clock")                                \
    X(U32,  amp_macs_f32,                     1, "multiply-adds/cycle/tile", "AMP rate, f32 operands")                    \
    X(U32,  amp_macs_f16,                     1, "multiply-adds/cycle/tile", "AMP rate, f16 operands")                    \
    X(U32,  amp_macs_f8,                      0, "multiply-adds/cycle/tile", "AMP rate, 8-bit operands; 0 = unsupported") \
    X(U32,  vector_bytes_per_cycle,           1, "bytes/cycle",              "elementwise kernels, per tile")             \
    X(U32,  load_bytes_per_cycle,             1, "bytes/cycle",              "loads from the ordinary region")            \
    X(U32,  interleaved_load_bytes_per_cycle, 1, "bytes/cycle",              "loads from the interleaved region")         \
    X(U32,  copy_bytes_per_cycle,             1, "bytes/cycle",              "on-tile memory-to-memory copies")           \
    X(U32,  exchange_bytes_per_cycle,         1, "bytes/cycle/tile",         "exchange payload, each direction")          \
    X(U32,  fragment_cycles,                  0, "cycles/fragment",          "control issue per exchange fragment")       \
    X(U32,  sync_cycles,                      0, "cycles/phase",             "per-phase barrier, setup and exit")         \
    X(U32,  launch_cycles,                    0, "cycles/run",               "supervisor cost to start a kernel run")     \
    X(U32,  max_send_bytes,                   4, "bytes/send",               "largest single send (64 words)")            \
    X(U32,  table_budget_bytes,               1, "bytes/tile",               "memory for encoded exchange tables")        \
    X(U32,  amp_k_block,                      1, "elements",                 "AMP layouts pad K (inner dim) to this")     \
    X(U32,  amp_col_panel,                    1, "elements",                 "output columns per AMP micro-panel")        \
    X(U32,  amp_panel_bytes,                  1, "bytes",                    "weights held by the AMP per panel load")    \
    X(U32,  gemm_run_cycles,                  0, "cycles/run",               "GEMM kernel setup and drain, per run")      \
    X(U32,  gemm_panel_cycles,                0, "cycles/panel",             "weight load and pipeline fill, per panel")  \
    X(U32,  gemm_row_cycles,                  0, "cycles/row/panel",         "row loop overhead beyond AMP issue")        \
    X(U32,  vector_run_cycles,                0, "cycles/run",               "setup of a vector kernel run")              \
    X(U32,  vector_row_cycles,                0, "cycles/row/pass",          "loop and pointer setup per row")            \
    X(U32,  vector_func_cycles,               0, "cycles/evaluation",        "exp, tanh, or a sqrt and a divide")         \
    X(U32,  copy_run_cycles,                  0, "cycles/run",               "setup of an on-tile copy")                  \
    X(U32,  workers,                          1, "threads/tile",             "barrel-scheduled worker threads")           \
    X(U32,  amp_macs_f8_f32acc,               0, "multiply-adds/cycle/tile", "AMP rate, 8-bit operands, f32 partials")    \
    X(U32,  gemm_packed_row_cycles,           0, "cycles/row/panel",         "row-major output over several panels")      \
    X(U32,  exchange_latency_cycles,          0, "cycles/phase",             "first send to last data landed")            \
    X(U32,  exchange_patch_cycles,            0, "cycles/word",              "repeat address patch, busiest tile")        \
    X(U32,  exchange_conflict_percent,        0, "percent",                  "payload slowdown, SRAM element conflict")   \
    X(U32,  copy_span_cycles,                 0, "cycles/span",              "per span of an on-tile copy")               \
    X(U32,  ewise_run_cycles,                 0, "cycles/run",               "setup of an elementwise run")               \
    X(U32,  ewise_grain_elems,                1, "elements",                 "elements per worker iteration")             \
    X(U32,  ewise_add_instrs,                 0, "instructions/grain",       "add, sub, mul, scale, per worker grain")    \
    X(U32,  ewise_gelu_instrs,                0, "instructions/grain",       "GeLU, per worker grain")                    \
    X(U32,  ewise_cast_instrs,                0, "instructions/grain",       "cast between 16- and 8-bit, per grain")     \
    X(U32,  ewise_f8_out_instrs,              0, "instructions/grain",       "extra for an 8-bit result, per grain")      \
    X(U32,  reduce_run_cycles,                0, "cycles/run",               "setup of a partials reduction")             \
    X(U32,  reduce_grain_elems,               1, "elements",                 "elements per worker iteration")             \
    X(U32,  reduce_grain_instrs,              0, "instructions/grain",       "per worker grain, before partials")         \
    X(U32,  reduce_partial_instrs,            0, "instructions/grain",       "per worker grain, per partial")             \
    X(U32,  reduce_gelu_instrs,               0, "instructions/grain",       "GeLU after the sum, per worker grain")      \
    X(U32,  softmax_run_cycles,               0, "cycles/run",               "setup of a softmax run")                    \
    X(U32,  softmax_row_cycles,               0, "cycles/row",               "per row on its worker")                     \
    X(U32,  softmax_key_centi,                0, "cycles/100 keys",          "max, exp and sum per key, one worker")      \
    X(U32,  softmax_merge_cycles,             0, "cycles/row",               "joining a row split over workers")          \
    X(U32,  softmax_segment_cycles,           0, "cycles/segment",           "per segment of a split row")                \
    X(U32,  layer_norm_run_cycles,            0, "cycles/run",               "setup of a layer norm run")                 \
    X(U32,  layer_norm_row_cycles,            0, "cycles/row",               "three worker launches per row")             \
    X(U32,  layer_norm_grain_instrs,          0, "instructions/grain",       "three passes, per worker grain of a row")  \
    X(U32,  ln_moments_run_cycles,            0, "cycles/run",               "setup of a row parts' statistics run")      \
    X(U32,  ln_moments_row_cycles,            0, "cycles/row",               "worker launches per row part")              \
    X(U32,  ln_moments_grain_instrs,          0, "instructions/grain",       "mean and centred squares, per grain")       \
    X(U32,  ln_apply_run_cycles,              0, "cycles/run",               "setup of a layer norm from statistics")     \
    X(U32,  ln_apply_row_cycles,              0, "cycles/row",               "worker launches per row part")              \
    X(U32,  ln_apply_grain_instrs,            0, "instructions/grain",       "normalise and affine, per grain")           \
    X(U32,  ln_part_cycles,                   0, "cycles/row",               "joining one more part's statistics")      \
    X(U32,  chips,                            1, "chips",                    "chips joined by IPU-Links in a ring")       \
    X(U32,  link_bytes_per_cycle,             0, "bytes/cycle",              "IPU-Link payload to a neighbour, each way") \
    X(U32,  link_latency_cycles,              0, "cycles/transfer",          "one hop: first byte sent to last landed")   \
    X(U32,  chip_sync_cycles,                 0, "cycles/sync",              "a sync across every chip (Sync-Link)")

enum { MACHINE_NAME_CAP = 64 };  /* bytes of `name`, including the NUL */

#define MACHINE_DECL_STR(f) char f[MACHINE_NAME_CAP];
#define MACHINE_DECL_ADDR(f) uint32_t f;
#define MACHINE_DECL_U32(f) uint32_t f;
#define MACHINE_DECL_F64(f) double f;

typedef struct machine {
#define X(kind, field, lo, unit, doc) MACHINE_DECL_##kind(field)
    MACHINE_FIELDS(X)
#undef X
} machine;

/* Field indices, for code that walks the table (machine_field_name). */
enum {
#define X(kind, field, lo, unit, doc) MACHINE_F_##field,
    MACHINE_FIELDS(X)
#undef X
    MACHINE_FIELD_COUNT
};

/* ---- machine.c -------------------------------------------------------- */

/* Fills m with a built-in machine: "c600" (the default), "mk2" (no 8-bit
 * AMP, 1.33 GHz), "tiny" (16 tiles of 128 KiB, for tests), or "c600x2",
 * "c600x4", "tinyx2", "tinyx4" (that many chips in a ring). -1 if unknown. */
int machine_preset(const char *name, machine *m);
const char *machine_preset_name(int i);  /* i-th preset, NULL past the end */

/* spec is a preset name or, if it ends in ".json" or contains '/', a JSON
 * machine file; NULL means the default preset. Errors name the file and the
 * line:col of the offending key. */
int machine_resolve(const char *spec, machine *m, diag *d);
/* The same, an unknown preset's message led by who ("tessel run") and what
 * gave the spec ("option '--machine c700'"), either NULL for none. */
int machine_resolve_for(const char *spec, const char *who, const char *what, machine *m, diag *d);
/* Loads a machine from JSON text of len bytes (not necessarily
 * NUL-terminated), as a machine file would be; path names it in errors.
 * The package reader uses it for the machine a package carries. */
int machine_from_json(const char *text, size_t len, const char *path, machine *m, diag *d);

/* Checks every field range and the memory map; the message names the field. */
int machine_validate(const machine *m, diag *d);

/* JSON text (malloc'd, newline-terminated) with every field in table order;
 * machine_resolve loads it back to an equal machine. */
char *machine_to_json(const machine *m);

/* An aligned table of field, value, unit and comment, then derived figures. */
void machine_print(FILE *f, const machine *m);

/* A stable 64-bit hash of every field value except the name (renaming a
 * machine does not change what it computes): util_hash_bytes over each
 * field's name, a NUL and its value as 8 little-endian bytes, in table order. */
uint64_t machine_fingerprint(const machine *m);

bool machine_equal(const machine *a, const machine *b);  /* every field, name included */
/* Whether field (MACHINE_F_*) belongs to m: the chip fields only when chips > 1. */
bool machine_field_present(const machine *m, int field);
/* One chip of m: chips 1, the link fields cleared, the name given (NULL:
 * m's name with its "xN" suffix removed, as "c600x4" -> "c600"). */
machine machine_one_chip(const machine *m, const char *name);
const char *machine_field_name(int field);               /* MACHINE_F_* -> "tiles" */

/* ---- derived figures -------------------------------------------------- */

uint32_t machine_tile_bytes(const machine *m);           /* end - base */
uint64_t machine_total_bytes(const machine *m);          /* all tiles */
bool machine_addr_interleaved(const machine *m, uint32_t addr);
/* AMP multiply-adds per cycle per tile for operands of dtype t; 0 when the
 * AMP cannot take t (bf16 and i32; 8-bit types on mk2). */
uint32_t machine_amp_macs(const machine *m, dtype t);
/* K elements of dtype t in one AMP weight panel (f16 16, 8-bit 32, f32 8). */
uint32_t machine_amp_panel_depth(const machine *m, dtype t);
/* Whole-machine AMP peak in FLOP/s (2 per multiply-add). */
double machine_peak_flops(const machine *m, dtype t);

/* ---- cycle formulas (cycles.c) ----------------------------------------
 * The one definition of every kernel's and exchange phase's cost: the
 * simulator prices what it runs with these, the estimator what it plans. */

#define MACHINE_CYCLES_UNSUPPORTED (UINT64_MAX / 4096)

/* Bytes per cycle loaded from the ordinary or the interleaved region. */
uint64_t machine_load_rate(const machine *m, bool interleaved);
/* `grains` units of work dealt over the workers, each round `instrs`
 * worker instructions of `workers` cycles (barrel scheduling). */
uint64_t machine_worker_rounds(const machine *m, uint64_t grains, uint64_t instrs);

/* One GEMM run: batch x (rows x k) @ (k x cols). The formula at the top of
 * this file, floored by the loads of A (once per column panel) and B (once);
 * 8-bit operands with f32 partials run at amp_macs_f8_f32acc.
 * MACHINE_CYCLES_UNSUPPORTED when the AMP cannot take the operands. */
typedef struct machine_gemm {
    dtype a, b, acc;
    uint64_t batch, rows, cols, k;
    bool a_interleaved, b_interleaved;   /* where the operands are loaded from */
} machine_gemm;
uint64_t machine_gemm_cycles(const machine *m, const machine_gemm *g);
/* A tile's GEMM block of g->cols columns for each of g->batch entries, as
 * the lowering runs it, launches included: one run over every column, one
 * run per strip of col_run columns (the last one narrower), or (panels: C in
 * the AMP's panel order) per entry one run over a batch of whole 16-column
 * panels sharing A and one run for a narrower last panel. */
uint64_t machine_gemm_block_cycles(const machine *m, const machine_gemm *g, uint64_t col_run, bool panels);

/* Summing `partials` stored partial sums of `elems` outputs: grains of
 * reduce_grain_elems over the workers, each paying setup and a step per
 * partial; lanes = widest operand in 16-bit lanes (f32 work is 2); an
 * 8-bit result (a cast done by the reduction) adds the 8-bit output
 * instructions, as the layer norm's. */
uint64_t machine_reduce_cycles(const machine *m, uint64_t partials, uint64_t elems, uint64_t lanes, bool f8_result, bool gelu);

/* Elementwise work classes, each with its measured instruction count. */
typedef enum { MACHINE_EW_ARITH, MACHINE_EW_GELU, MACHINE_EW_GELU_GRAD, MACHINE_EW_CAST } machine_ew_class;
/* Worker instructions per grain of ewise_grain_elems (before lanes): a cast
 * touching an 8-bit operand is ewise_cast_instrs; an 8-bit result adds
 * ewise_f8_out_instrs to the others. */
uint64_t machine_ewise_instrs(const machine *m, machine_ew_class c, bool f8_operand, bool f8_result);
/* `rows` passes over the workers of `per_row` elements each: whole grains
 * dealt over the workers while one worker takes the tail in pairs. */
uint64_t machine_ewise_cycles(const machine *m, uint64_t instrs, uint64_t rows, uint64_t per_row);
/* Rows of `keys` each cut into the best number of segments over the workers. */
uint64_t machine_softmax_cycles(const machine *m, uint64_t rows, uint64_t keys, uint64_t lanes);
/* Rows of n one after another, three launches each, grains over the workers. */
/* A layer norm of rows x n (n: this tile's part of each row); parts = 0 takes each row's statistics
 * itself, parts = P > 0 joins P parts' statistics (LN_MOMENTS) and applies them. */
uint64_t machine_layer_norm_cycles(const machine *m, uint64_t rows, uint64_t n, uint64_t parts, uint64_t lanes,
                                   bool f8_result);
/* The statistics (count, mean, centred sum of squares) of rows x n. */
uint64_t machine_ln_moments_cycles(const machine *m, uint64_t rows, uint64_t n, uint64_t lanes);

/* What a vector kernel (fill, reduce_sum, optimizers, sums of squares)
 * moves: run + rows * row + max(vector bytes / rate + functions, loads). */
enum { MACHINE_VWORK_OPERANDS = 8 };
typedef struct machine_vwork {
    uint64_t vec_bytes;                          /* read and written through the vector unit */
    uint64_t load_bytes[MACHINE_VWORK_OPERANDS]; /* loaded, per operand */
    bool interleaved[MACHINE_VWORK_OPERANDS];    /* operand loaded from the interleaved region */
    uint64_t rows;                               /* row loops entered */
    uint64_t funcs;                              /* transcendental (or sqrt + divide) evaluations */
} machine_vwork;
uint64_t machine_vector_cycles(const machine *m, const machine_vwork *w);

/* An on-tile copy of `spans` spans, `bytes` in all: setup, a step per span,
 * bytes at the copy rate, no faster than the source loads. */
uint64_t machine_copy_cycles(const machine *m, uint64_t spans, uint64_t bytes, bool src_interleaved);

/* One tile's part of an exchange phase: payload at exchange_bytes_per_cycle
 * in the busier direction (exchange_conflict_percent slower when it sends
 * from and receives into one memory element), or its send and receive
 * controls at fragment_cycles each, whichever is larger. */
uint64_t machine_exchange_tile_cycles(const machine *m, uint64_t sent, uint64_t received, uint64_t fragments,
                                      bool conflict);
/* A phase: sync, plus patch_words repatched addresses on the busiest tile,
 * plus (when it moves data) the latency and the busiest tile's cycles.
 * *overhead (may be NULL) receives the sync and patching part. */
uint64_t machine_exchange_phase_cycles(const machine *m, uint64_t busiest_tile, uint64_t patch_words, bool moves_data,
                                       uint64_t *overhead);

#endif
