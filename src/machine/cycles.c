/* cycles.c: the kernel and exchange cycle formulas, defined once. The
 * simulator prices every kernel run and exchange phase with them and the
 * estimator prices a plan with them, so the two can differ only in what the
 * estimator cannot see (which runs a tile gets, the schedule), never in a
 * formula. docs/machine.md and docs/calibration.md give each constant's
 * source. */
#include "machine.h"

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

uint64_t machine_load_rate(const machine *m, bool interleaved) {
    return interleaved ? m->interleaved_load_bytes_per_cycle : m->load_bytes_per_cycle;
}

uint64_t machine_worker_rounds(const machine *m, uint64_t grains, uint64_t instrs) {
    return ceil_div(grains, m->workers) * m->workers * instrs;
}

/* The coefficient loads count bytes, however B's columns lie: a streamed
 * GEMM's coefficient panel (B = A^T) is 16 columns of one contiguous 32-byte
 * K stretch each, a plain one 32 K rows of 16 contiguous bytes; both are 512
 * bytes of 64-bit loads. Nothing measured sets one apart. */
uint64_t machine_gemm_cycles(const machine *m, const machine_gemm *g) {
    uint64_t macs_a = machine_amp_macs(m, g->a), macs_b = machine_amp_macs(m, g->b);
    uint64_t macs = macs_a < macs_b ? macs_a : macs_b;
    if (macs && dtype_is_f8(g->a) && dtype_is_f8(g->b) && g->acc == DT_F32) macs = m->amp_macs_f8_f32acc;
    if (macs == 0) return MACHINE_CYCLES_UNSUPPORTED;
    /* Mixed widths (not emitted today) run at the narrower panel of the wider operand. */
    uint64_t depth = machine_amp_panel_depth(m, dtype_bytes(g->a) >= dtype_bytes(g->b) ? g->a : g->b);
    uint64_t kp = ceil_div(g->k, depth) * depth;
    uint64_t col_panels = ceil_div(g->cols, m->amp_col_panel);
    uint64_t panels = ceil_div(kp, depth) * col_panels;
    uint64_t wrows = ceil_div(g->rows, m->workers) * m->workers; /* the busiest worker's rows, times workers */
    uint64_t row = m->gemm_row_cycles + (col_panels > 1 ? m->gemm_packed_row_cycles : 0);
    uint64_t per_panel = m->gemm_panel_cycles + wrows * row + ceil_div(wrows * depth * m->amp_col_panel, macs);
    uint64_t amp = m->gemm_run_cycles + g->batch * panels * per_panel;
    uint64_t a_bytes = g->batch * col_panels * g->rows * kp * dtype_bytes(g->a);
    uint64_t b_bytes = g->batch * kp * g->cols * dtype_bytes(g->b);
    uint64_t load = ceil_div(a_bytes, machine_load_rate(m, g->a_interleaved)) +
                    ceil_div(b_bytes, machine_load_rate(m, g->b_interleaved));
    return max_u64(amp, load);
}

uint64_t machine_gemm_block_cycles(const machine *m, const machine_gemm *g, uint64_t col_run, bool panels) {
    machine_gemm r = *g;
    uint64_t L = m->launch_cycles, cols = g->cols, pc = m->amp_col_panel, sum = 0;
    if (panels) {
        uint64_t full = cols / pc, tail = cols % pc;
        r.cols = pc, r.batch = full;
        if (full) sum += L + machine_gemm_cycles(m, &r);
        r.cols = tail, r.batch = 1;
        if (tail) sum += L + machine_gemm_cycles(m, &r);
        return g->batch * sum;
    }
    uint64_t strip = col_run > 0 && col_run < cols ? col_run : cols;
    for (uint64_t c0 = 0; c0 < cols; c0 += strip) {
        r.cols = cols - c0 < strip ? cols - c0 : strip;
        sum += L + machine_gemm_cycles(m, &r);
    }
    return sum;
}

uint64_t machine_reduce_cycles(const machine *m, uint64_t partials, uint64_t elems, uint64_t lanes, bool f8_result, bool gelu) {
    uint64_t instrs = (m->reduce_grain_instrs + (uint64_t)m->reduce_partial_instrs * partials + (gelu ? m->reduce_gelu_instrs : 0)) * lanes;
    if (f8_result) instrs += ceil_div(m->ewise_f8_out_instrs * m->reduce_grain_elems, m->ewise_grain_elems);
    return m->reduce_run_cycles + machine_worker_rounds(m, ceil_div(elems, m->reduce_grain_elems), instrs);
}

uint64_t machine_ewise_instrs(const machine *m, machine_ew_class c, bool f8_operand, bool f8_result) {
    uint64_t i;
    switch (c) {
    case MACHINE_EW_GELU: i = m->ewise_gelu_instrs; break; /* erf priced as tanh: not measured apart */
    case MACHINE_EW_GELU_GRAD: i = m->ewise_gelu_instrs + m->ewise_add_instrs; break;
    case MACHINE_EW_CAST: return f8_operand ? m->ewise_cast_instrs : m->ewise_add_instrs;
    default: i = m->ewise_add_instrs; break;
    }
    if (f8_result) i += m->ewise_f8_out_instrs;
    return i;
}

uint64_t machine_ewise_cycles(const machine *m, uint64_t instrs, uint64_t rows, uint64_t per_row) {
    uint64_t g = m->ewise_grain_elems;
    uint64_t body = machine_worker_rounds(m, per_row / g, instrs);
    uint64_t tail = ceil_div(per_row % g, 2) * ceil_div(m->workers * instrs, 4);
    return m->ewise_run_cycles + rows * max_u64(body, tail);
}

uint64_t machine_softmax_cycles(const machine *m, uint64_t rows, uint64_t keys, uint64_t lanes) {
    uint64_t best = UINT64_MAX;
    for (uint64_t s = 1; s <= m->workers; s++) {
        uint64_t task = m->softmax_row_cycles + ceil_div(ceil_div(keys, s) * m->softmax_key_centi * lanes, 100) +
                        (s > 1 ? m->softmax_merge_cycles + s * m->softmax_segment_cycles : 0);
        uint64_t c = ceil_div(rows * s, m->workers) * task;
        if (c < best) best = c;
    }
    return m->softmax_run_cycles + best;
}

uint64_t machine_layer_norm_cycles(const machine *m, uint64_t rows, uint64_t n, uint64_t parts, uint64_t lanes,
                                   bool f8_result) {
    uint64_t grains = ceil_div(n, m->reduce_grain_elems);
    uint64_t f8 = f8_result ? ceil_div(m->ewise_f8_out_instrs * m->reduce_grain_elems, m->ewise_grain_elems) : 0;
    if (parts == 0)
        return m->layer_norm_run_cycles +
               rows * (m->layer_norm_row_cycles + machine_worker_rounds(m, grains, m->layer_norm_grain_instrs * lanes + f8));
    uint64_t row = m->ln_apply_row_cycles + (parts - 1) * m->ln_part_cycles +
                   machine_worker_rounds(m, grains, m->ln_apply_grain_instrs * lanes + f8);
    return m->ln_apply_run_cycles + rows * row;
}

uint64_t machine_ln_moments_cycles(const machine *m, uint64_t rows, uint64_t n, uint64_t lanes) {
    uint64_t row = m->ln_moments_row_cycles +
                   machine_worker_rounds(m, ceil_div(n, m->reduce_grain_elems), m->ln_moments_grain_instrs * lanes);
    return m->ln_moments_run_cycles + rows * row;
}

uint64_t machine_vector_cycles(const machine *m, const machine_vwork *w) {
    uint64_t vec = ceil_div(w->vec_bytes, m->vector_bytes_per_cycle) + w->funcs * m->vector_func_cycles, load = 0;
    for (int i = 0; i < MACHINE_VWORK_OPERANDS; i++)
        load += ceil_div(w->load_bytes[i], machine_load_rate(m, w->interleaved[i]));
    return m->vector_run_cycles + w->rows * m->vector_row_cycles + max_u64(vec, load);
}

uint64_t machine_copy_cycles(const machine *m, uint64_t spans, uint64_t bytes, bool src_interleaved) {
    return m->copy_run_cycles + spans * m->copy_span_cycles +
           max_u64(ceil_div(bytes, m->copy_bytes_per_cycle), ceil_div(bytes, machine_load_rate(m, src_interleaved)));
}

uint64_t machine_exchange_tile_cycles(const machine *m, uint64_t sent, uint64_t received, uint64_t fragments,
                                      bool conflict) {
    uint64_t bytes = sent > received ? sent : received;
    uint64_t c = ceil_div(bytes, m->exchange_bytes_per_cycle);
    if (conflict) c += ceil_div(c * m->exchange_conflict_percent, 100);
    return max_u64(c, fragments * m->fragment_cycles);
}

uint64_t machine_exchange_phase_cycles(const machine *m, uint64_t busiest_tile, uint64_t patch_words, bool moves_data,
                                       uint64_t *overhead) {
    uint64_t o = m->sync_cycles + patch_words * m->exchange_patch_cycles;
    if (overhead) *overhead = o;
    return o + (moves_data ? m->exchange_latency_cycles + busiest_tile : 0);
}
