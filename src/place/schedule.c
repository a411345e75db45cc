/* schedule.c: supersteps (place.h, "schedule.c"). Lowering gives every copy
 * its own exchange phase, and every phase pays a sync. Here an exchange
 * phase joins the nearest exchange phase before it in the same block when
 * nothing in between stands in the way: its sources are ready (no step in
 * between writes them) and its destinations are free (no step in between
 * reads or writes them), and it neither reads what the earlier phase writes
 * nor writes what that one writes. Every fragment of a phase reads the
 * memory as it was before the phase, so the merged phase computes what the
 * two did. Buffers are compared before placement, by id. Repeat bodies keep
 * their structure: nothing moves across a REPEAT or an END. Then a step of
 * on-tile copies joins the compute step right before it, and a compute step
 * joins the copy step right before it (compute never reads another tile, so
 * a tile's runs in order are all that matters). */
#include "place.h"

#include <stdlib.h>
#include <string.h>

typedef struct bufset {
    uint32_t *v;
    int32_t n, cap;
} bufset;

static void set_add(bufset *s, uint32_t b) {
    if (b == KERNEL_ABSOLUTE) return;
    for (int32_t i = 0; i < s->n; i++)
        if (s->v[i] == b) return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->v = xrealloc(s->v, sizeof(uint32_t) * (size_t)s->cap);
    }
    s->v[s->n++] = b;
}

static bool meets(const bufset *a, const bufset *b) {
    for (int32_t i = 0; i < a->n; i++)
        for (int32_t j = 0; j < b->n; j++)
            if (a->v[i] == b->v[j]) return true;
    return false;
}

typedef struct sstep {
    low_step st;
    bufset reads, writes;
    VEC(uint32_t) frags;   /* EXCHANGE: fragment indices of the input program */
    int32_t into;          /* merged into this new step, -1 if it stands alone */
} sstep;

static void accesses(const low_program *lp, const low_step *st, bufset *reads, bufset *writes) {
    if (st->kind == LOW_STEP_COMPUTE) {
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            const kernel_run *r = &lp->runs.v[k];
            for (int op = 0; op < KERNEL_MAX_OPERANDS; op++) {
                if (!kernel_run_uses(r, op)) continue;
                if (kernel_run_writes(r, op)) set_add(writes, r->ptr[op].buf);
                if (!kernel_run_writes(r, op) || r->kernel == KERNEL_K_SUMSQ) set_add(reads, r->ptr[op].buf);
            }
        }
    } else if (st->kind == LOW_STEP_EXCHANGE) {
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            set_add(reads, lp->frags.v[k].src.buf);
            set_add(writes, lp->frags.v[k].dst.buf);
        }
    }
}

static bool only_copies(const low_program *lp, const low_step *st) {
    for (uint32_t k = st->first; k < st->first + st->count; k++)
        if (lp->runs.v[k].kernel != KERNEL_K_COPY) return false;
    return st->count > 0;
}

typedef struct run_key {
    uint32_t tile, order;
} run_key;

static int cmp_run_key(const void *x, const void *y) {
    const run_key *p = x, *q = y;
    if (p->tile != q->tile) return p->tile < q->tile ? -1 : 1;
    return p->order < q->order ? -1 : p->order > q->order;
}

/* Appends step st's runs (of lp) to out's last step, then regroups that
 * step's runs by tile, each tile's in the order they ran: its earlier
 * step's first. */
static void join_runs(arena *a, low_program *out, const low_program *lp, const low_step *st) {
    low_step *last = &out->steps.v[out->steps.n - 1];
    for (uint32_t k = st->first; k < st->first + st->count; k++) vec_push(a, &out->runs, lp->runs.v[k]);
    last->count += st->count;
    kernel_run *r = out->runs.v + last->first;
    run_key *key = xmalloc(sizeof(run_key) * (size_t)(last->count + 1));
    kernel_run *tmp = xmalloc(sizeof(kernel_run) * (size_t)(last->count + 1));
    for (uint32_t k = 0; k < last->count; k++) key[k] = (run_key){r[k].tile, k};
    qsort(key, last->count, sizeof(run_key), cmp_run_key);
    for (uint32_t k = 0; k < last->count; k++) tmp[k] = r[key[k].order];
    memcpy(r, tmp, sizeof(kernel_run) * last->count);
    free(tmp);
    free(key);
}

/* The joined step's label names every op it runs work of, each once, in
 * order, and the kind of its one step that is not all copies if there is
 * one: "a+b:copy", "a+b:gemm". A trace still says whose work it is, and
 * `tessel run` splits the busiest tile's copy runs out of the kind (sim.c). */
static void join_label(arena *a, low_program *out, uint32_t label) {
    low_step *last = &out->steps.v[out->steps.n - 1];
    char *mine = xstrdup(out->strings.v + last->label), *theirs = xstrdup(out->strings.v + label);
    char *c = strrchr(mine, ':'), *d = strrchr(theirs, ':');
    if (c && d && c > mine && d > theirs) {
        *c++ = *d++ = 0;
        const char *kind = strcmp(c, "copy") != 0 ? c : d;
        size_t n = strlen(theirs);
        bool named = false;
        for (const char *p = mine; !named && (p = strstr(p, theirs)) != NULL; p += n)
            named = (p == mine || p[-1] == '+') && (p[n] == 0 || p[n] == '+');
        last->label = (uint32_t)out->strings.n;
        for (const char *p = mine; *p; p++) vec_push(a, &out->strings, *p);
        if (!named) {
            vec_push(a, &out->strings, '+');
            for (const char *p = theirs; *p; p++) vec_push(a, &out->strings, *p);
        }
        vec_push(a, &out->strings, ':');
        for (const char *p = kind; *p; p++) vec_push(a, &out->strings, *p);
        vec_push(a, &out->strings, '\0');
    }
    free(mine);
    free(theirs);
}

int32_t place_schedule(const low_program *lp, arena *a, low_program *out, int32_t *step_map) {
    int32_t n = lp->steps.n;
    sstep *s = xcalloc((size_t)n + 1, sizeof(sstep));
    arena fa;
    arena_init(&fa);
    for (int32_t i = 0; i < n; i++) {
        s[i].st = lp->steps.v[i];
        s[i].into = -1;
        accesses(lp, &lp->steps.v[i], &s[i].reads, &s[i].writes);
        if (s[i].st.kind == LOW_STEP_EXCHANGE)
            for (uint32_t k = s[i].st.first; k < s[i].st.first + s[i].st.count; k++) vec_push(&fa, &s[i].frags, k);
    }
    int32_t merged = 0;
    for (int32_t j = 0; j < n; j++) {
        if (s[j].st.kind != LOW_STEP_EXCHANGE) continue;
        for (int32_t k = j - 1; k >= 0; k--) {
            const sstep *q = &s[k];
            if (q->st.kind == LOW_STEP_REPEAT || q->st.kind == LOW_STEP_END) break;
            if (q->into >= 0) continue; /* already part of an earlier phase */
            kernel_join jq = kernel_join_step(q->st.kind == LOW_STEP_EXCHANGE, meets(&s[j].reads, &q->writes),
                                              meets(&s[j].writes, &q->writes), meets(&s[j].writes, &q->reads));
            if (jq == KERNEL_JOIN_NEVER) break;
            if (jq == KERNEL_JOIN_HERE) {
                /* join q: its fragments follow q's, and q now also writes what it writes */
                for (int32_t f = 0; f < s[j].frags.n; f++) vec_push(&fa, &s[k].frags, s[j].frags.v[f]);
                for (int32_t b = 0; b < s[j].writes.n; b++) set_add(&s[k].writes, s[j].writes.v[b]);
                for (int32_t b = 0; b < s[j].reads.n; b++) set_add(&s[k].reads, s[j].reads.v[b]);
                s[j].into = k;
                merged++;
                break;
            }
        }
    }
    /* The new program: surviving steps in order, fragments regrouped. Two
     * compute steps in a row, one of them only on-tile copies (the local
     * share of a phase: an operand's, a staged weight's), join: each tile
     * runs its runs in order, so the two compute what they did apart, in
     * the slower tile's time rather than the sum of two. A run may read
     * what one before it in the step wrote; liveness sees the step write
     * it first (liveness.c). Runs are regrouped by tile, as a step keeps
     * them. At most one step in a join does more than copy, so the joined
     * step keeps its kind. */
    memset(out, 0, sizeof *out);
    out->dst_tiles = lp->dst_tiles;
    out->bufs = lp->bufs;
    out->strings = lp->strings;
    out->params = lp->params;
    out->values = lp->values;
    out->values_ctx = lp->values_ctx;
    out->model_path = lp->model_path;
    out->model_name = lp->model_name;
    out->param_bytes = lp->param_bytes;
    int32_t *new_index = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    bool prev_compute = false, prev_copies = false; /* the last new step: compute, only copies */
    for (int32_t i = 0; i < n; i++) {
        if (s[i].into >= 0) {
            new_index[i] = new_index[s[i].into];
            continue;
        }
        low_step st = s[i].st;
        if (st.kind == LOW_STEP_EXCHANGE) {
            st.first = (uint32_t)out->frags.n;
            st.count = (uint32_t)s[i].frags.n;
            for (int32_t f = 0; f < s[i].frags.n; f++) vec_push(a, &out->frags, lp->frags.v[s[i].frags.v[f]]);
        }
        bool compute = st.kind == LOW_STEP_COMPUTE, copies = compute && only_copies(lp, &st);
        if (compute && prev_compute && (copies || prev_copies)) {
            join_runs(a, out, lp, &st);
            join_label(a, out, st.label);
            prev_copies = prev_copies && copies;
            new_index[i] = out->steps.n - 1;
            merged++;
            continue;
        }
        if (compute) {
            uint32_t first = (uint32_t)out->runs.n;
            for (uint32_t k = st.first; k < st.first + st.count; k++) vec_push(a, &out->runs, lp->runs.v[k]);
            st.first = first;
        }
        prev_compute = compute, prev_copies = copies;
        new_index[i] = out->steps.n;
        vec_push(a, &out->steps, st);
    }
    if (step_map)
        for (int32_t i = 0; i < n; i++) step_map[i] = new_index[i];
    /* A probe watches the step its old one became. */
    for (int32_t i = 0; i < lp->bindings.n; i++) {
        low_binding b = lp->bindings.v[i];
        if (b.step >= 0) b.step = new_index[b.step];
        vec_push(a, &out->bindings, b);
    }
    for (int32_t i = 0; i < n; i++) {
        free(s[i].reads.v);
        free(s[i].writes.v);
    }
    free(new_index);
    free(s);
    arena_free(&fa);
    return merged;
}
