/* runs.c: the kernel tables and the footprint of each kernel run, shared
 * by the lowering (its own checks), the package reader (validation) and the
 * simulator. */
#include "kern.h"

const char *const kernel_names[KERNEL_K_COUNT] = {
#define X(id, name, nops, box, strides, floats, params) [KERNEL_K_##id] = #name,
    KERNEL_TABLE(X)
#undef X
};

const int kernel_operands[KERNEL_K_COUNT] = {
#define X(id, name, nops, box, strides, floats, params) [KERNEL_K_##id] = nops,
    KERNEL_TABLE(X)
#undef X
};

const kernel_fields kernel_used[KERNEL_K_COUNT] = {
#define X(id, name, nops, box, strides, floats, params) [KERNEL_K_##id] = {box, floats, params, strides},
    KERNEL_TABLE(X)
#undef X
};

_Static_assert(sizeof(num_moments) == KERNEL_MOMENTS_BYTES, "LN_MOMENTS writes num_moments as they are");
_Static_assert(KERNEL_K_COUNT == 17, "a new kernel needs its extent here and its simulator function");

int kernel_epilogue_base(const kernel_run *r) {
    return r->kernel == KERNEL_K_GEMM_EPI ? 2 : r->kernel == KERNEL_K_REDUCE_EPI ? 1 : -1;
}

dtype kernel_epilogue_grad(const kernel_run *r) { return (dtype)r->grad; }

bool kernel_run_uses(const kernel_run *r, int i) {
    if (i < 0 || r->kernel >= KERNEL_K_COUNT || i >= kernel_operands[r->kernel]) return false;
    if (r->kernel == KERNEL_K_SGD && (i == 1 || i == 4)) return r->f[1] != 0.0f;
    if (r->kernel == KERNEL_K_REDUCE && i == 2) return r->n[2] != 0; /* the bias */
    if (r->kernel == KERNEL_K_REDUCE && i == 3) return r->own > 0; /* the tile's own partial */
    if (r->kernel == KERNEL_K_REDUCE && i == 4) return r->residual; /* a residual added */
    if (r->kernel == KERNEL_K_LAYER_NORM && i == 4) return r->n[2] != 0; /* the parts' statistics */
    if (r->kernel == KERNEL_K_LN_MOMENTS && i == 2) return r->n[2] != 0; /* the own slot of the gathered ones */
    int e = kernel_epilogue_base(r);
    /* An SGD epilogue without momentum has no buffer (E1) nor buffer' (E3). */
    if (e >= 0 && r->epi == KERNEL_EPI_SGD && (i == e + 1 || i == e + 3)) return r->f[1] != 0.0f;
    if (r->kernel == KERNEL_K_EWISE && i == 2) return r->ew < KERNEL_EW_COUNT && kernel_ew_arity[r->ew] == 2;
    return true;
}

uint8_t kernel_run_op_byte(const kernel_run *r) {
    switch ((kernel_id)r->kernel) {
    case KERNEL_K_EWISE: return r->ew;
    case KERNEL_K_GEMM_EPI:
    case KERNEL_K_REDUCE_EPI: return r->epi;
    case KERNEL_K_REDUCE: return r->own;
    default: return 0;
    }
}

void kernel_run_set_op_byte(kernel_run *r, uint8_t b) {
    switch ((kernel_id)r->kernel) {
    case KERNEL_K_EWISE: r->ew = b; break;
    case KERNEL_K_GEMM_EPI:
    case KERNEL_K_REDUCE_EPI: r->epi = b; break;
    case KERNEL_K_REDUCE: r->own = b; break;
    default: break;
    }
}

float kernel_run_float(const kernel_run *r, int f) {
    if (r->kernel == KERNEL_K_REDUCE) return f == 0 ? (float)r->gelu : f == 1 && r->residual ? 1.0f : 0.0f;
    return r->f[f];
}

bool kernel_run_set_float(kernel_run *r, int f, float v) {
    if (r->kernel != KERNEL_K_REDUCE) {
        r->f[f] = v;
        return true;
    }
    if (f == 0 && (v == KERNEL_REDUCE_NO_GELU || v == KERNEL_REDUCE_GELU || v == KERNEL_REDUCE_GELU_ERF)) {
        r->gelu = (uint8_t)v;
        return true;
    }
    if (f == 1 && (v == 0.0f || v == 1.0f)) {
        r->residual = v == 1.0f;
        return true;
    }
    return false;
}

void kernel_run_canonical(kernel_run *r) {
    if (r->kernel >= KERNEL_K_COUNT) return;
    const kernel_fields *u = &kernel_used[r->kernel];
    if (!(u->params & KERNEL_P_ACC)) r->acc = 0;
    if (r->kernel != KERNEL_K_EWISE) r->ew = 0;
    if (r->kernel != KERNEL_K_GEMM_EPI && r->kernel != KERNEL_K_REDUCE_EPI) r->epi = 0;
    if (r->kernel != KERNEL_K_REDUCE) r->own = r->gelu = 0, r->residual = false;
    if (!(u->params & KERNEL_P_GRAD)) r->grad = 0;
    for (int d = u->box; d < KERNEL_MAX_BOX; d++) r->n[d] = 0;
    /* REDUCE's floats are its gelu and residual. */
    for (int k = r->kernel == KERNEL_K_REDUCE ? 0 : u->floats; k < (int)TS_COUNT(r->f); k++) r->f[k] = 0.0f;
    for (int i = 0; i < KERNEL_MAX_OPERANDS; i++) {
        if (kernel_run_uses(r, i)) continue;
        r->dt[i] = 0;
        r->scale[i] = 0;
        r->ptr[i] = (kernel_addr){.buf = KERNEL_ABSOLUTE};
    }
    for (int i = 0; i < KERNEL_STRIDED_OPERANDS; i++)
        for (int d = 0; d < KERNEL_MAX_BOX; d++)
            if (!(u->strides >> (4 * i + d) & 1) || !kernel_run_uses(r, i)) r->stride[i][d] = 0;
}

bool kernel_run_writes(const kernel_run *r, int i) {
    if (!kernel_run_uses(r, i)) return false;
    switch ((kernel_id)r->kernel) {
    case KERNEL_K_GEMM: return i == 2;
    case KERNEL_K_SGD: return i <= 1;
    case KERNEL_K_ADAMW: return i <= 2;
    case KERNEL_K_GEMM_EPI:
    case KERNEL_K_REDUCE_EPI: return i >= kernel_epilogue_base(r) + 2;
    case KERNEL_K_LN_MOMENTS: return i == 0 || i == 2;
    default: return i == 0;
    }
}

/* The AMP streams its operands in 32-byte (two-word) loads and the left
 * stream reads one panel row ahead of what it multiplies; every other kernel
 * loads 64-bit pairs, hence 8 bytes (16 keeps buffers on cache-line-like
 * boundaries, as the bump placement always did). */
uint32_t kernel_operand_align(kernel_id k, int i) {
    return k == KERNEL_K_GEMM || (k == KERNEL_K_GEMM_EPI && i < 2) ? 32u : 16u;
}

uint32_t kernel_operand_tail(kernel_id k, int i) {
    return (k == KERNEL_K_GEMM || k == KERNEL_K_GEMM_EPI) && i == 0 ? (uint32_t)KERNEL_AMP_PANEL_BYTES : 0u;
}

static uint64_t esize(const kernel_run *r, int i) { return r->dt[i] < DT_COUNT ? (uint64_t)dtype_bytes((dtype)r->dt[i]) : 0; }

/* Last byte reached through box axes [0, nd) with operand i's strides, plus
 * the span of one innermost item. */
static uint64_t boxed(const kernel_run *r, int i, int nd, uint64_t item) {
    uint64_t e = item;
    for (int d = 0; d < nd; d++)
        if (r->n[d]) e += (uint64_t)(r->n[d] - 1) * (uint64_t)r->stride[i][d];
    return e;
}

uint64_t kernel_run_extent(const kernel_run *r, int i) {
    if (!kernel_run_uses(r, i)) return 0;
    const uint32_t *n = r->n;
    switch ((kernel_id)r->kernel) {
    case KERNEL_K_GEMM_EPI:
        /* A and B as GEMM's; the epilogue operands are M rows of N, stride[2][1] elements apart. */
        if (i >= 2) return ((uint64_t)(n[1] - 1) * (uint64_t)r->stride[2][1] + n[2]) * esize(r, i);
        /* fall through */
    case KERNEL_K_GEMM:
        if (i == 0) {
            uint64_t w = KERNEL_AMP_PANEL_BYTES / esize(r, 0);
            return (uint64_t)(n[0] - 1) * (uint64_t)r->stride[0][0] + (uint64_t)((n[3] - 1) / w) * (uint64_t)r->stride[0][1] +
                   (uint64_t)(n[1] - 1) * KERNEL_AMP_PANEL_BYTES + KERNEL_AMP_PANEL_BYTES;
        }
        if (i == 1)
            return (uint64_t)(n[0] - 1) * (uint64_t)r->stride[1][0] + (uint64_t)(n[3] - 1) * (uint64_t)r->stride[1][1] +
                   (uint64_t)(n[2] - 1) * (r->stride[1][2] ? (uint64_t)r->stride[1][2] : esize(r, 1)) + esize(r, 1);
        return (uint64_t)(n[0] - 1) * (uint64_t)r->stride[2][0] + (uint64_t)(n[1] - 1) * (uint64_t)r->stride[2][1] +
               n[2] * esize(r, 2);
    case KERNEL_K_REDUCE:
        if (i == 0 && r->stride[0][1] && r->stride[0][2]) { /* AMP-left panels: the last row's last panel ends it */
            uint64_t w = KERNEL_AMP_PANEL_BYTES / esize(r, 0), c = (uint64_t)r->stride[0][2];
            return (uint64_t)((c - 1) / w) * (uint64_t)r->stride[0][1] + (n[1] / c - 1) * KERNEL_AMP_PANEL_BYTES +
                   ((c - 1) % w + 1) * esize(r, 0);
        }
        return i == 1   ? (uint64_t)(n[0] - 1) * (uint64_t)r->stride[1][0] + n[1] * esize(r, 1)
               : i == 2 ? n[2] * esize(r, 2)
                        : n[1] * esize(r, i);
    case KERNEL_K_EWISE:
    case KERNEL_K_REDUCE_SUM: return boxed(r, i, KERNEL_MAX_BOX, esize(r, i));
    case KERNEL_K_SOFTMAX:
    case KERNEL_K_LAYER_NORM:
        if (i == 0 && r->stride[0][1]) { /* AMP-left panels: the last row's last panel ends the span */
            uint64_t w = KERNEL_AMP_PANEL_BYTES / esize(r, 0);
            return (uint64_t)(n[0] - 1) * (uint64_t)r->stride[0][0] + (uint64_t)((n[1] - 1) / w) * (uint64_t)r->stride[0][1] +
                   ((n[1] - 1) % w + 1) * esize(r, 0);
        }
        if (i == 4) return (uint64_t)n[0] * n[2] * KERNEL_MOMENTS_BYTES;
        return i < 2 ? boxed(r, i, 1, n[1] * esize(r, i)) : n[1] * esize(r, i);
    case KERNEL_K_LN_MOMENTS:
        if (i == 2) return ((uint64_t)n[0] - 1) * n[2] * KERNEL_MOMENTS_BYTES + KERNEL_MOMENTS_BYTES;
        return i == 0 ? (uint64_t)n[0] * KERNEL_MOMENTS_BYTES : boxed(r, 1, 1, n[1] * esize(r, 1));
    case KERNEL_K_FILL: return n[0] * esize(r, 0);
    case KERNEL_K_COPY: return boxed(r, i, KERNEL_MAX_BOX - 1, n[3]);
    case KERNEL_K_SGD:
    case KERNEL_K_ADAMW:
    case KERNEL_K_ADAMW_APPLY: return n[0] * esize(r, i);
    case KERNEL_K_REDUCE_EPI: return i == 0 ? (uint64_t)(n[0] - 1) * (uint64_t)r->stride[0][0] + n[1] * esize(r, 0) : n[1] * esize(r, i);
    case KERNEL_K_SUMSQ: return i == 0 ? 4 : n[0] * esize(r, 1);
    case KERNEL_K_CLIP_COEF: return i == 0 ? 4 : (uint64_t)n[0] * 4;
    case KERNEL_K_GATHER:
        if (i == 2) return (uint64_t)n[0] * 4;
        return (uint64_t)((i == 0 ? n[0] : n[2]) - 1) * (uint64_t)r->stride[i][0] + n[1] * esize(r, i);
    case KERNEL_K_COUNT: break;
    }
    return 0;
}

static bool why(char *buf, size_t cap, const char *msg) {
    snprintf(buf, cap, "%s", msg);
    return false;
}

/* A REDUCE or REDUCE_EPI run's own rules (kern.h): its bias, epilogue,
 * residual, own partial and panels. */
static bool reduce_valid(const kernel_run *r, char *w, size_t cap) {
    if (!r->n[0] || !r->n[1]) return why(w, cap, "empty reduction");
    if (r->kernel == KERNEL_K_REDUCE &&
        ((r->n[2] && r->n[1] % ((uint64_t)r->n[2] * (r->n[3] > 1 ? r->n[3] : 1))) ||
         (r->grad != DT_F32 && r->grad != DT_F16 && r->grad != DT_BF16)))
        return why(w, cap, "bias rows do not divide the reduction, or a bad sum dtype");
    if (r->kernel == KERNEL_K_REDUCE && r->gelu != KERNEL_REDUCE_NO_GELU && r->gelu != KERNEL_REDUCE_GELU &&
        r->gelu != KERNEL_REDUCE_GELU_ERF)
        return why(w, cap, "a reduction's epilogue is none (0) or a GeLU (1: tanh form, 2: erf form)");
    if (r->kernel == KERNEL_K_REDUCE && r->residual &&
        (r->gelu != KERNEL_REDUCE_NO_GELU || r->stride[0][1] || r->dt[4] != r->dt[0] || dtype_is_f8((dtype)r->dt[0])))
        return why(w, cap, "a residual is added to a plain row-major sum of its own dtype");
    if (r->kernel == KERNEL_K_REDUCE && r->own > 0 && (r->own > r->n[0] || r->dt[3] != r->dt[1] || r->scale[3] != r->scale[1]))
        return why(w, cap, "the own partial is none of the reduction's, or of another dtype");
    if (r->kernel == KERNEL_K_REDUCE && r->stride[0][1] &&
        (r->stride[0][2] <= 0 || r->n[1] % (uint32_t)r->stride[0][2] ||
         (uint64_t)r->stride[0][1] < (uint64_t)(r->n[1] / (uint32_t)r->stride[0][2]) * KERNEL_AMP_PANEL_BYTES))
        return why(w, cap, "AMP-left reduction rows do not divide it, or its panels overlap");
    if (r->acc != DT_F32 && r->acc != DT_F16) return why(w, cap, "bad accumulation dtype");
    return true;
}

bool kernel_run_valid(const kernel_run *r, char *w, size_t cap) {
    if (r->kernel >= KERNEL_K_COUNT) return why(w, cap, "unknown kernel");
    int nops = kernel_operands[r->kernel];
    /* i32 only as a gather's indices or what a cast makes floats of (a mask from token data). */
    for (int i = 0; i < nops; i++) {
        bool ints = (r->kernel == KERNEL_K_GATHER && i == 2) || (r->kernel == KERNEL_K_EWISE && r->ew == KERNEL_EW_CAST && i == 1);
        if (kernel_run_uses(r, i) && (r->dt[i] >= DT_COUNT || (r->dt[i] == DT_I32 && !ints))) return why(w, cap, "bad operand dtype");
    }
    if (r->kernel == KERNEL_K_GATHER && r->dt[2] != DT_I32) return why(w, cap, "a gather's indices are i32");
    for (int i = 0; i < nops; i++)
        if (kernel_run_uses(r, i) && dtype_is_f8((dtype)r->dt[i]) && (r->scale[i] < NUM_SCALE_MIN || r->scale[i] > NUM_SCALE_MAX))
            return why(w, cap, "8-bit scale out of range");
    for (int i = 0; i < KERNEL_STRIDED_OPERANDS; i++)
        for (int d = 0; d < KERNEL_MAX_BOX; d++)
            if (r->stride[i][d] < 0) return why(w, cap, "negative stride");
    for (int d = 0; d < KERNEL_MAX_BOX; d++)
        if (r->n[d] > (1u << 30)) return why(w, cap, "box too large");
    uint64_t work = 1;
    for (int d = 0; d < KERNEL_MAX_BOX; d++) work *= r->n[d];
    if (work > (1ull << 40)) return why(w, cap, "too much work in one run");
    int e = kernel_epilogue_base(r);
    if (e >= 0) {
        /* The epilogue's operands and the gradient's dtype: wide floats only. */
        if (r->epi >= KERNEL_EPI_COUNT) return why(w, cap, "unknown epilogue");
        dtype gt = kernel_epilogue_grad(r);
        if (gt != DT_F32 && gt != DT_F16 && gt != DT_BF16) return why(w, cap, "bad gradient dtype");
        for (int i = e; i < e + 4; i++)
            if (kernel_run_uses(r, i) && dtype_is_f8((dtype)r->dt[i])) return why(w, cap, "8-bit epilogue operand");
    }
    switch ((kernel_id)r->kernel) {
    case KERNEL_K_GEMM_EPI:
        if (r->n[0] != 1) return why(w, cap, "batched epilogue GEMM");
        if (r->stride[2][1] < (int32_t)r->n[2]) return why(w, cap, "epilogue rows overlap");
        /* fall through */
    case KERNEL_K_GEMM: {
        dtype a = (dtype)r->dt[0], b = (dtype)r->dt[1];
        if (!r->n[0] || !r->n[1] || !r->n[2] || !r->n[3]) return why(w, cap, "empty GEMM");
        if (dtype_is_f8(a) != dtype_is_f8(b) || (!dtype_is_f8(a) && a != b)) return why(w, cap, "mixed GEMM operands");
        if (a == DT_BF16) return why(w, cap, "bf16 GEMM operands");
        if (r->kernel == KERNEL_K_GEMM && dtype_is_f8((dtype)r->dt[2])) return why(w, cap, "8-bit GEMM result");
        if (r->acc != DT_F32 && r->acc != DT_F16) return why(w, cap, "bad accumulation dtype");
        return true;
    }
    case KERNEL_K_REDUCE_EPI:
    case KERNEL_K_REDUCE: return reduce_valid(r, w, cap);
    case KERNEL_K_EWISE:
        if (r->ew >= KERNEL_EW_COUNT) return why(w, cap, "unknown elementwise op");
        if (r->acc != DT_F32 && r->acc != DT_F16 && r->acc != DT_BF16) return why(w, cap, "bad rounding dtype");
        /* fall through */
    case KERNEL_K_REDUCE_SUM:
        if (work > (1ull << 32)) return why(w, cap, "box too large");
        for (int d = 0; d < KERNEL_MAX_BOX; d++) {
            if (!r->n[d]) return why(w, cap, "empty box");
            /* An elementwise result written twice at one address is a broken program. */
            if (r->kernel == KERNEL_K_EWISE && r->n[d] > 1 && r->stride[0][d] == 0) return why(w, cap, "result stride 0");
        }
        return true;
    case KERNEL_K_LAYER_NORM:
        if (r->acc != DT_F32 && r->acc != DT_F16 && r->acc != DT_BF16) return why(w, cap, "bad rounding dtype");
        if (r->n[2] > KERNEL_MAX_PARTS || (r->n[2] && r->dt[4] != DT_F32)) return why(w, cap, "bad statistics parts");
        /* fall through */
    case KERNEL_K_LN_MOMENTS:
        if (r->kernel == KERNEL_K_LN_MOMENTS &&
            (r->dt[0] != DT_F32 || r->n[2] > KERNEL_MAX_PARTS || (r->n[2] && r->dt[2] != DT_F32)))
            return why(w, cap, "statistics must be f32, in at most 64 parts");
        /* fall through */
    case KERNEL_K_SOFTMAX:
        if (!r->n[0] || !r->n[1]) return why(w, cap, "empty rows");
        return true;
    case KERNEL_K_ADAMW:
    case KERNEL_K_ADAMW_APPLY:
        if (r->n[1] < 1) return why(w, cap, "adamw step counts from 1");
        break;
    case KERNEL_K_COPY:
        for (int d = 0; d < KERNEL_MAX_BOX; d++)
            if (!r->n[d]) return why(w, cap, "empty copy");
        return true;
    case KERNEL_K_GATHER:
        if (!r->n[0] || !r->n[1] || !r->n[2]) return why(w, cap, "empty gather");
        if (r->dt[0] != r->dt[1] || r->scale[0] != r->scale[1]) return why(w, cap, "a gather copies rows of its result's dtype");
        if ((uint64_t)r->stride[0][0] < (uint64_t)r->n[1] * esize(r, 0) && r->n[0] > 1) return why(w, cap, "gathered rows overlap");
        return true;
    case KERNEL_K_CLIP_COEF:
        if (r->dt[1] != DT_F32) return why(w, cap, "norm state must be f32");
        /* fall through */
    case KERNEL_K_SUMSQ:
        if (r->dt[0] != DT_F32) return why(w, cap, "norm state must be f32");
        break;
    default: break;
    }
    if (!r->n[0]) return why(w, cap, "empty run");
    return true;
}


/* ---- boxes of runs ---------------------------------------------------------------------------- */

kernel_box kernel_run_box(const kernel_run *r, int nops) {
    kernel_box b = {.nd = KERNEL_MAX_BOX, .nops = nops};
    for (int d = 0; d < KERNEL_MAX_BOX; d++) b.n[d] = r->n[d];
    for (int i = 0; i < nops; i++)
        for (int d = 0; d < KERNEL_MAX_BOX; d++) b.st[i][d] = r->stride[i][d];
    kernel_box_collapse(&b);
    return b;
}

uint64_t kernel_box_rows(const kernel_box *b) {
    uint64_t rows = 1;
    for (int d = 0; d + 1 < b->nd; d++) rows *= (uint64_t)b->n[d];
    return rows;
}

uint64_t kernel_box_run(const kernel_box *b, int keep, kernel_run *r) {
    int outer = b->nd > keep ? b->nd - keep : 0, inner = b->nd - outer;
    uint64_t runs = 1;
    for (int a = 0; a < outer; a++) runs *= (uint64_t)b->n[a];
    for (int i = 0; i < b->nops && i < KERNEL_STRIDED_OPERANDS; i++) {
        for (int d = 0; d < KERNEL_MAX_BOX; d++) r->stride[i][d] = 0;
        for (int a = 0; a < inner; a++) r->stride[i][KERNEL_MAX_BOX - inner + a] = (int32_t)b->st[i][outer + a];
    }
    for (int d = 0; d < KERNEL_MAX_BOX; d++) r->n[d] = 1;
    for (int a = 0; a < inner; a++) r->n[KERNEL_MAX_BOX - inner + a] = (uint32_t)b->n[outer + a];
    return runs;
}

/* ---- the tile memory map ---------------------------------------------------------------------- */

kernel_regions kernel_tile_regions(const machine *m, uint64_t data_base) {
    kernel_regions r;
    uint64_t ib = m->interleaved_base > data_base ? m->interleaved_base : (data_base + 15) / 16 * 16;
    r.ord_lo = data_base;
    r.ord_hi = ib < m->loader_limit ? ib : m->loader_limit;
    r.unit = (uint64_t)m->interleave_factor * m->memory_element_bytes;
    /* Interleaved elements start at interleaved_base; code may not reach in. */
    uint64_t first = m->interleaved_base;
    while (first < data_base) first += r.unit;
    r.il_lo = first;
    r.il_hi = first < m->loader_limit ? m->loader_limit : first;
    return r;
}
