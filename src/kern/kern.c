/* kern.c: the op tables kern.h declares, from its lists. */
#include "kern.h"

#include <string.h>

const char *const kernel_ew_names[KERNEL_EW_COUNT] = {
#define X(id, name, arity, cls) [KERNEL_EW_##id] = #name,
    KERNEL_EW_OPS(X)
#undef X
};

const int kernel_ew_arity[KERNEL_EW_COUNT] = {
#define X(id, name, arity, cls) [KERNEL_EW_##id] = arity,
    KERNEL_EW_OPS(X)
#undef X
};

const machine_ew_class kernel_ew_class[KERNEL_EW_COUNT] = {
#define X(id, name, arity, cls) [KERNEL_EW_##id] = cls,
    KERNEL_EW_OPS(X)
#undef X
};

const char *const kernel_epi_names[KERNEL_EPI_COUNT] = {
#define X(id, name) [KERNEL_EPI_##id] = #name,
    KERNEL_EPI_OPS(X)
#undef X
};

/* ---- the exchange tables' row format ---------------------------------------------------- */

static uint8_t bits_for(uint64_t max) {
    uint8_t b = 0;
    while (b < 64 && max >> b) b++;
    return b ? b : 1;
}

void kernel_xt_format_init(kernel_xt_format *f, const machine *m, uint32_t groups) {
    memset(f, 0, sizeof *f);
    f->base = m->tile_memory_base;
    f->tiles = m->tiles;
    f->max_send = m->max_send_bytes;
    uint64_t tile_bytes = m->tile_memory_end > m->tile_memory_base ? m->tile_memory_end - m->tile_memory_base : 1;
    f->addr_bits = bits_for(tile_bytes - 1);
    f->len_bits = bits_for(m->max_send_bytes > 1 ? m->max_send_bytes - 1u : 1u);
    f->dst_bits = bits_for((uint64_t)m->tiles + groups > 1 ? (uint64_t)m->tiles + groups - 1 : 1);
    unsigned send_bits = 2u * f->addr_bits + f->len_bits + f->dst_bits;
    f->send_bytes = (uint8_t)(4 * ((send_bits + 31) / 32));
    unsigned recv_words = (f->addr_bits + 8u + 31) / 32;
    f->recv_bytes = (uint8_t)(4 * recv_words);
    f->count_bits = (uint8_t)(32 * recv_words - f->addr_bits);
    if (f->count_bits > 32) f->count_bits = 32;
}

uint64_t kernel_xt_block_bytes(const kernel_xt_format *f, uint64_t nsend, uint64_t nrecv, uint64_t npatch) {
    return KERNEL_XT_HEADER_BYTES + nsend * f->send_bytes + nrecv * f->recv_bytes + npatch * KERNEL_XT_PATCH_BYTES;
}
