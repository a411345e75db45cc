/* passes.c: the mid passes in pipeline order, and the build that runs
 * expansion and then each of them (what the search prices and the driver
 * lowers). */
#include "mid.h"

#include <stdlib.h>
#include <string.h>

const mid_pass mid_passes[] = {
    {"cast-order", "an f16-to-f8 cast marked early moves ahead of its copy chain, onto its source's tiles", mid_cast_order,
     NULL, 0},
    {"absorb", "a producer writes its consumer's cast, bias, GeLU, residual, prescale, panels or yield", mid_absorb,
     mid_absorb_names, MID_ABSORB_COUNT},
    {"compose-copies", "a copy through a shifting view of a temporary another such copy made reads that copy's source",
     mid_compose_copies, NULL, 0},
    {"own-partials", "a K-partials reduce reads its own tile's partial where the GEMM left it", mid_own_partials, NULL, 0},
    {NULL, NULL, NULL, NULL, 0},
};

int mid_pass_find(const char *spec, const mid_pass **pass, uint32_t *rewrites) {
    const char *dot = strchr(spec, '.');
    size_t n = dot ? (size_t)(dot - spec) : strlen(spec);
    for (const mid_pass *p = mid_passes; p->name; p++) {
        if (strlen(p->name) != n || strncmp(p->name, spec, n) != 0) continue;
        *pass = p;
        *rewrites = ~0u;
        if (!dot) return 0;
        for (int r = 0; r < p->nrewrites; r++)
            if (strcmp(p->rewrites[r], dot + 1) == 0) {
                *rewrites = 1u << r;
                return 0;
            }
        return -2; /* the pass, but no such rewrite */
    }
    return -1;
}

static void count_block(const mid_program *p, const mid_block *b, int32_t *reads, int32_t *maker) {
    for (int32_t j = 0; j < b->n; j++) {
        const mid_prim *pr = mid_p(p, b->v[j]);
        if (pr->kind == MID_REPEAT) count_block(p, &pr->body, reads, maker);
        for (int k = 0; k < pr->nin; k++) reads[pr->in[k]]++;
        for (int k = 0; k < pr->nout; k++) maker[pr->out[k]] = maker[pr->out[k]] == -1 ? b->v[j] : -2;
    }
}

void mid_uses(const mid_program *p, int32_t **reads, int32_t **maker) {
    *reads = xcalloc((size_t)p->tensors.n + 1, sizeof(int32_t));
    *maker = xmalloc(sizeof(int32_t) * ((size_t)p->tensors.n + 1));
    for (int32_t t = 0; t < p->tensors.n; t++) {
        (*maker)[t] = -1;
        const mid_tensor *mt = mid_t(p, t);
        if (mt->alias_of >= 0) (*reads)[mt->alias_of]++;
        if (mt->slice_of >= 0) (*reads)[mt->slice_of]++;
    }
    for (int32_t i = 0; i < p->outputs.n; i++) (*reads)[p->outputs.v[i]]++;
    count_block(p, &p->top, *reads, *maker);
}

int32_t mid_writer_after(const mid_program *p, const int32_t *v, int32_t n, int32_t at, int32_t st) {
    int32_t pos = -1;
    for (int32_t i = at + 1; i < n; i++) {
        const mid_prim *q = mid_p(p, v[i]);
        bool writes = q->kind == MID_REPEAT;
        for (int k = 0; k < q->nout && !writes; k++) writes = mid_storage(p, q->out[k]) == st;
        if (writes) {
            if (pos != -1) return -2;
            pos = i;
        }
    }
    return pos;
}

/* In debug builds (the sanitizer suite) every pass's result is verified: a
 * program that does not verify is a compiler bug, and stops there. */
static void checked(const mid_program *p, const char *pass) {
#ifdef NDEBUG
    (void)p, (void)pass;
#else
    diag d = {0};
    if (mid_verify(p, &d) == 0) return;
    fprintf(stderr, "tessel: internal error: the program after mid pass '%s' does not verify: %s\n", pass, d.text);
    TS_ASSERT(!"mid program verifies");
#endif
}

/* The plan's cast choices as made, right after cast-order: the casts that
 * run early, one shared with another included (a plan with every site
 * early stays so: its sites are those of each program). */
static void record_casts(const mid_program *p, mid_plan *pl) {
    memset(pl->cast_early, 0, sizeof(uint64_t) * (size_t)pl->nops);
    for (int32_t i = 0; i < p->prims.n; i++) {
        const mid_prim *pr = mid_p(p, i);
        if (pr->kind == MID_EWISE && pr->ew == KERNEL_EW_CAST && pr->early && pr->cast_ordinal >= 0 && pr->cast_ordinal < 64 &&
            pr->origin < pl->nops)
            pl->cast_early[pr->origin] |= 1ull << pr->cast_ordinal;
    }
}

int mid_build(const graph *g, const machine *m, mid_plan *pl, mid_program *out, const mid_watch *w, diag *d) {
    if (mid_expand(g, m, pl, out, d)) return -1;
    checked(out, "expand");
    if (w) w->after(w->ctx, "expand", out);
    for (const mid_pass *p = mid_passes; p->name; p++) {
        if (p->run(out, ~0u, d)) {
            mid_free(out);
            return -1;
        }
        checked(out, p->name);
        if (p->run == mid_cast_order) record_casts(out, pl); /* before absorb takes casts into producers */
        if (w) w->after(w->ctx, p->name, out);
    }
    return 0;
}
