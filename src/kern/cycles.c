/* cycles.c: what each kernel run costs on a tile (kern.h's kernel_run_cycles),
 * in the machine's formulas (machine.h): the simulator charges it and the
 * estimate sums it. docs/sim.md gives the formulas. */
#include "kern.h"

static uint64_t ebytes(const kernel_run *r, int i) { return (uint64_t)dtype_bytes((dtype)r->dt[i]); }
static bool inter(const bool *interleaved, int i) { return interleaved && interleaved[i]; }

static void vw_read(machine_vwork *w, const kernel_run *r, const bool *interleaved, int i, uint64_t elems) {
    w->vec_bytes += elems * ebytes(r, i);
    w->load_bytes[i] += elems * ebytes(r, i);
    w->interleaved[i] = inter(interleaved, i);
}

static void vw_write(machine_vwork *w, const kernel_run *r, int i, uint64_t elems) { w->vec_bytes += elems * ebytes(r, i); }

/* Widest operand, as a multiple of 16-bit lanes (f32 work takes twice the instructions). */
static uint64_t lane_factor(const kernel_run *r, int nops) {
    uint64_t w = 2;
    for (int i = 0; i < nops; i++)
        if (ebytes(r, i) > w) w = ebytes(r, i);
    return w / 2;
}

static uint64_t cycles_gemm(const kernel_run *r, const machine *m, const bool *interleaved) {
    machine_gemm g = {(dtype)r->dt[0], (dtype)r->dt[1], (dtype)r->acc, r->n[0], r->n[1], r->n[2], r->n[3],
                      inter(interleaved, 0), inter(interleaved, 1)};
    return machine_gemm_cycles(m, &g);
}

static uint64_t cycles_reduce(const kernel_run *r, const machine *m, const bool *interleaved) {
    (void)interleaved;
    bool reduce = r->kernel == KERNEL_K_REDUCE; /* REDUCE_EPI has no bias, residual, GeLU or cast (its box is n[0..2)) */
    bool f8_out = reduce && dtype_is_f8((dtype)r->dt[0]); /* a cast done by the reduction */
    /* A bias, a residual: one addend more each. */
    uint64_t addends = r->n[0] + (reduce && r->n[2] ? 1 : 0) + (reduce && r->residual ? 1 : 0);
    return machine_reduce_cycles(m, addends, r->n[1], lane_factor(r, 2), f8_out, reduce && r->gelu != 0);
}

static uint64_t box_elems(const kernel_run *r) {
    uint64_t e = 1;
    for (int d = 0; d < KERNEL_MAX_BOX; d++) e *= r->n[d];
    return e;
}

/* Each row of the merged box is one pass over the workers. */
static uint64_t cycles_ewise(const kernel_run *r, const machine *m, const bool *interleaved) {
    (void)interleaved;
    int nops = 1 + kernel_ew_arity[r->ew];
    kernel_box b = kernel_run_box(r, nops);
    uint64_t rows = kernel_box_rows(&b), per_row = box_elems(r) / rows;
    bool f8_out = dtype_is_f8((dtype)r->dt[0]), f8_any = f8_out || dtype_is_f8((dtype)r->dt[1]);
    uint64_t instrs = machine_ewise_instrs(m, kernel_ew_class[r->ew], f8_any, f8_out) * lane_factor(r, nops);
    return machine_ewise_cycles(m, instrs, rows, per_row);
}

static uint64_t cycles_softmax(const kernel_run *r, const machine *m, const bool *interleaved) {
    (void)interleaved;
    return machine_softmax_cycles(m, r->n[0], r->n[1], lane_factor(r, 2));
}

static uint64_t cycles_layer_norm(const kernel_run *r, const machine *m, const bool *interleaved) {
    (void)interleaved;
    return machine_layer_norm_cycles(m, r->n[0], r->n[1], r->n[2], lane_factor(r, 2), dtype_is_f8((dtype)r->dt[0]));
}

static uint64_t cycles_ln_moments(const kernel_run *r, const machine *m, const bool *interleaved) {
    (void)interleaved;
    return machine_ln_moments_cycles(m, r->n[0], r->n[1], dtype_bytes((dtype)r->dt[1]) > 2 ? 2 : 1);
}

static uint64_t cycles_reduce_sum(const kernel_run *r, const machine *m, const bool *interleaved) {
    kernel_box b = kernel_run_box(r, 2);
    uint64_t outs = 1;
    for (int d = 0; d < KERNEL_MAX_BOX; d++)
        if (r->stride[0][d]) outs *= r->n[d];
    machine_vwork w = {.rows = kernel_box_rows(&b)};
    vw_read(&w, r, interleaved, 1, box_elems(r));
    vw_write(&w, r, 0, outs);
    return machine_vector_cycles(m, &w);
}

static uint64_t cycles_fill(const kernel_run *r, const machine *m, const bool *interleaved) {
    (void)interleaved;
    machine_vwork w = {.rows = 1};
    vw_write(&w, r, 0, r->n[0]);
    return machine_vector_cycles(m, &w);
}

static uint64_t cycles_copy(const kernel_run *r, const machine *m, const bool *interleaved) {
    uint64_t spans = (uint64_t)r->n[0] * r->n[1] * r->n[2];
    return machine_copy_cycles(m, spans, spans * r->n[3], inter(interleaved, 1));
}

/* An on-tile copy of one row per index (the index load rides in the span's step). */
static uint64_t cycles_gather(const kernel_run *r, const machine *m, const bool *interleaved) {
    return machine_copy_cycles(m, r->n[0], (uint64_t)r->n[0] * r->n[1] * ebytes(r, 0), inter(interleaved, 1));
}

static uint64_t cycles_sgd(const kernel_run *r, const machine *m, const bool *interleaved) {
    machine_vwork w = {.rows = 1};
    for (int i = 2; i < 5; i++)
        if (kernel_run_uses(r, i)) vw_read(&w, r, interleaved, i, r->n[0]);
    for (int i = 0; i < 2; i++)
        if (kernel_run_uses(r, i)) vw_write(&w, r, i, r->n[0]);
    return machine_vector_cycles(m, &w);
}

/* Reads w, g, m, v; writes w', m', v'; a square root and a divide per element. */
static uint64_t cycles_adamw(const kernel_run *r, const machine *m, const bool *interleaved) {
    machine_vwork w = {.rows = 1, .funcs = r->n[0]};
    for (int i = 3; i < 7; i++) vw_read(&w, r, interleaved, i, r->n[0]);
    for (int i = 0; i < 3; i++) vw_write(&w, r, i, r->n[0]);
    return machine_vector_cycles(m, &w);
}

static uint64_t cycles_sumsq(const kernel_run *r, const machine *m, const bool *interleaved) {
    machine_vwork w = {.rows = 1};
    vw_read(&w, r, interleaved, 1, r->n[0]);
    vw_write(&w, r, 0, 1);
    return machine_vector_cycles(m, &w);
}

static uint64_t cycles_clip_coef(const kernel_run *r, const machine *m, const bool *interleaved) {
    machine_vwork w = {.rows = 1, .funcs = 1};
    vw_read(&w, r, interleaved, 1, r->n[0]);
    vw_write(&w, r, 0, 1);
    return machine_vector_cycles(m, &w);
}

/* The epilogue's vector pass over `elems` gradient values in `rows` row passes: it reads E0 (and
 * E1) and writes E2 (and E3), in their dtypes; the gradient itself is neither loaded nor stored. */
static uint64_t cycles_epilogue(const kernel_run *r, const machine *m, const bool *interleaved, uint64_t elems, uint64_t rows) {
    int e = kernel_epilogue_base(r);
    machine_vwork w = {.rows = rows};
    for (int i = e; i < e + 2; i++)
        if (kernel_run_uses(r, i)) vw_read(&w, r, interleaved, i, elems);
    for (int i = e + 2; i < e + 4; i++)
        if (kernel_run_uses(r, i)) vw_write(&w, r, i, elems);
    return machine_vector_cycles(m, &w);
}

/* The AMP's GEMM as GEMM prices it, then the epilogue on the same workers, one row pass per row of
 * the block (its rows are stride[2][1] apart): the workers that feed the AMP also run the
 * epilogue, so nothing overlaps. */
static uint64_t cycles_gemm_epi(const kernel_run *r, const machine *m, const bool *interleaved) {
    uint64_t gemm = cycles_gemm(r, m, interleaved);
    if (gemm == KERNEL_CYCLES_UNSUPPORTED) return gemm;
    return gemm + cycles_epilogue(r, m, interleaved, (uint64_t)r->n[1] * r->n[2], r->n[1]);
}

/* REDUCE's grains, then the epilogue over the reduced elements in one pass. */
static uint64_t cycles_reduce_epi(const kernel_run *r, const machine *m, const bool *interleaved) {
    return cycles_reduce(r, m, interleaved) + cycles_epilogue(r, m, interleaved, r->n[1], 1);
}

/* Reads w, m', v'; writes w'; a square root and a divide per element (ADAMW's last line). */
static uint64_t cycles_adamw_apply(const kernel_run *r, const machine *m, const bool *interleaved) {
    machine_vwork w = {.rows = 1, .funcs = r->n[0]};
    for (int i = 1; i < 4; i++) vw_read(&w, r, interleaved, i, r->n[0]);
    vw_write(&w, r, 0, r->n[0]);
    return machine_vector_cycles(m, &w);
}

/* ---- the table ------------------------------------------------------------------------------ */

_Static_assert(KERNEL_K_COUNT == 17, "a new kernel needs a cycles function here");
static uint64_t (*const KERNEL_CYCLES[KERNEL_K_COUNT])(const kernel_run *r, const machine *m, const bool *interleaved) = {
#define X(id, name, nops, box, strides, floats, params) [KERNEL_K_##id] = cycles_##name,
    KERNEL_TABLE(X)
#undef X
};

uint64_t kernel_run_cycles(const kernel_run *r, const machine *m, const bool interleaved[KERNEL_MAX_OPERANDS]) {
    TS_ASSERT(r->kernel < KERNEL_K_COUNT);
    return KERNEL_CYCLES[r->kernel](r, m, interleaved);
}
