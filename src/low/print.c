/* print.c: a readable form of a per-tile program, for --print-after=lower,
 * schedule and place: the buffers (with their addresses once placed), then
 * every step in order with what it does on how many tiles. Per step, one
 * line: the kernels a compute set runs and on how many tiles, or the bytes
 * an exchange phase moves and between how many tiles; repeats indent. */
#include "low.h"

#include <stdlib.h>
#include <string.h>

static const char *label(const low_program *p, uint32_t at) { return at < (uint32_t)p->strings.n ? &p->strings.v[at] : "?"; }

static void put_addr(FILE *f, const low_program *p, const kernel_addr *a) {
    if (a->buf == KERNEL_ABSOLUTE) fprintf(f, "@0x%x", a->off);
    else fprintf(f, "%%%s+%u", label(p, p->bufs.v[a->buf].label), a->off);
    if (a->iter_stride) fprintf(f, "(+%d/iter)", a->iter_stride);
}

/* Tiles named in [first, first + count) of a step: distinct count. */
static uint32_t distinct(uint32_t *v, uint32_t n) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        bool seen = false;
        for (uint32_t j = 0; j < k && !seen; j++) seen = v[j] == v[i];
        if (!seen) v[k++] = v[i];
    }
    return k;
}

static void put_compute(FILE *f, const low_program *p, const low_step *s) {
    uint32_t per[KERNEL_K_COUNT] = {0};
    uint32_t *tiles = xmalloc(sizeof(uint32_t) * ((size_t)s->count + 1));
    for (uint32_t i = 0; i < s->count; i++) {
        const kernel_run *r = &p->runs.v[s->first + i];
        per[r->kernel]++;
        tiles[i] = r->tile;
    }
    fprintf(f, "compute %s: %u runs on %u tiles (", label(p, s->label), s->count, distinct(tiles, s->count));
    const char *sep = "";
    for (int k = 0; k < KERNEL_K_COUNT; k++)
        if (per[k]) fprintf(f, "%s%s %u", sep, kernel_names[k], per[k]), sep = ", ";
    fputc(')', f);
    /* The first run in full: its operands show which buffers the step reads and writes. */
    if (s->count) {
        const kernel_run *r = &p->runs.v[s->first];
        fprintf(f, "; tile %u %s", r->tile, kernel_names[r->kernel]);
        for (int i = 0; i < kernel_operands[r->kernel]; i++)
            if (kernel_run_uses(r, i)) fputc(' ', f), put_addr(f, p, &r->ptr[i]);
        fprintf(f, " [%u", r->n[0]);
        for (int d = 1; d < KERNEL_MAX_BOX && r->n[d]; d++) fprintf(f, "x%u", r->n[d]);
        fputc(']', f);
    }
    fputc('\n', f);
    free(tiles);
}

static void put_exchange(FILE *f, const low_program *p, const low_step *s) {
    if (!s->count) { /* placed: the phase is in the tables */
        fprintf(f, "exchange %s: phase %u (in the exchange tables)\n", label(p, s->label), s->first);
        return;
    }
    uint64_t bytes = 0, receivers = 0;
    uint32_t *src = xmalloc(sizeof(uint32_t) * ((size_t)s->count + 1));
    for (uint32_t i = 0; i < s->count; i++) {
        const low_frag *fr = &p->frags.v[s->first + i];
        bytes += fr->bytes;
        receivers += fr->ndst;
        src[i] = fr->src_tile;
    }
    fprintf(f, "exchange %s: %u fragments, %llu bytes from %u tiles to %llu receivers\n", label(p, s->label), s->count,
            (unsigned long long)bytes, distinct(src, s->count), (unsigned long long)receivers);
    free(src);
}

void low_print(FILE *f, const low_program *p) {
    fprintf(f, "buffers %u\n", (unsigned)p->bufs.n);
    for (int32_t b = 0; b < p->bufs.n; b++) {
        const low_buf *x = &p->bufs.v[b];
        fprintf(f, "  %%%s %u bytes", label(p, x->label), x->bytes);
        if (x->first >= 0) fprintf(f, " live %d..%d", x->first, x->last);
        if (x->addr) fprintf(f, " @0x%x reserves %u", x->addr, x->reserved);
        fputc('\n', f);
    }
    fprintf(f, "steps %u\n", (unsigned)p->steps.n);
    int depth = 0;
    for (int32_t i = 0; i < p->steps.n; i++) {
        const low_step *s = &p->steps.v[i];
        if (s->kind == LOW_STEP_END) depth--;
        fprintf(f, "%*s%d ", 2 + 2 * depth, "", (int)i);
        switch (s->kind) {
        case LOW_STEP_COMPUTE: put_compute(f, p, s); break;
        case LOW_STEP_EXCHANGE: put_exchange(f, p, s); break;
        case LOW_STEP_REPEAT: fprintf(f, "repeat %u {\n", s->iterations), depth++; break;
        case LOW_STEP_END: fprintf(f, "}\n"); break;
        }
    }
}
