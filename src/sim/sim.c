/* sim.c: the bulk-synchronous executor: tile memories, steps, repeats,
 * exchanges, host inputs and outputs, cycle accounting. The kernels and
 * their cycle model live in kernels.c. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#include "sim_kernels.h"

enum { MAX_DEPTH = 16 };

typedef struct sim {
    const package *p;
    const machine *m;
    uint8_t *mem;         /* tiles * tile_bytes, tile t's memory at t * tile_bytes */
    uint64_t tile_bytes;
    uint32_t iter;        /* innermost repeat's iteration (0 outside repeats) */
    sim_stats *st;
    bool *used;           /* per tile: ran a kernel or moved bytes */
    uint64_t *peak;       /* per tile: highest byte touched, as an address */
    uint8_t *stage;       /* exchange staging buffer */
    uint64_t stage_cap;
    uint64_t *sent, *recv, *fsent, *frecv; /* per tile, per exchange phase */
    uint64_t *patch;      /* per tile, per phase: exchange words repatched per repeat iteration */
    uint64_t *sent_elems, *recv_elems; /* per tile, per phase: memory elements sent from and
                                         * received into, one bit each (element mod 64) */
    int depth;            /* repeats open around the current step */
    pkg_xplan xp;         /* the exchange tables, decoded */
    const sim_options *o;
    uint64_t sample[SIM_TRACE_TILES]; /* the sampled tiles' cycles in the current compute step */
    uint32_t *probe_at;   /* probes of step i: probe_of[probe_at[i], probe_at[i+1]) */
    int32_t *probe_of;    /* binding indices */
    float *probe_buf;     /* the values of one probe */
} sim;

int64_t sim_binding_numel(const pkg_binding *b) {
    int64_t n = 1;
    for (int a = 0; a < b->layout.rank; a++) n *= b->layout.dim[a];
    return n;
}

static uint64_t eff(const sim *s, kernel_addr a) { return (uint64_t)((int64_t)a.off + (int64_t)s->iter * a.iter_stride); }

static uint8_t *at(const sim *s, uint32_t tile, uint64_t addr) {
    return s->mem + tile * s->tile_bytes + (addr - s->m->tile_memory_base);
}

static void note_peak(uint64_t *peak, uint32_t tile, uint64_t end) {
    if (end > peak[tile]) peak[tile] = end;
}

/* The initial memory of tiles [t0, t1): every segment on them, in package
 * order (each tile's bytes are its own, so any split of the tiles over
 * threads writes the same memory). */
static void load_segments(void *ctx, int64_t t0, int64_t t1) {
    sim *s = ctx;
    const package *p = s->p;
    for (int32_t i = 0; i < p->segments.n; i++) {
        const pkg_segment *g = &p->segments.v[i];
        if (g->tile < t0 || g->tile >= t1) continue;
        memcpy(at(s, g->tile, g->addr), p->blob + g->blob_off, g->bytes);
        note_peak(s->peak, g->tile, (uint64_t)g->addr + g->bytes);
    }
}

/* ---- compute sets ----------------------------------------------------------------- */

typedef struct compute_job {
    sim *s;
    const kernel_run *runs;
    const uint32_t *gstart;  /* group g is runs [gstart[g], gstart[g+1]) on one tile */
    uint64_t *gcycles;
    uint64_t *gmacs;
    uint64_t *gcopy;         /* the cycles of the group's COPY runs */
    double *groof;           /* roofline cycles of the group's GEMMs */
} compute_job;

static void run_groups(void *ctx, int64_t b, int64_t e) {
    compute_job *j = ctx;
    sim *s = j->s;
    for (int64_t g = b; g < e; g++) {
        uint64_t cyc = 0, macs = 0, copy = 0;
        for (uint32_t i = j->gstart[g]; i < j->gstart[g + 1]; i++) {
            const kernel_run *r = &j->runs[i];
            uint8_t *ptr[KERNEL_MAX_OPERANDS] = {0};
            bool inter[KERNEL_MAX_OPERANDS] = {0};
            for (int k = 0; k < KERNEL_MAX_OPERANDS; k++) {
                if (!kernel_run_uses(r, k)) continue;
                uint64_t a = eff(s, r->ptr[k]);
                ptr[k] = at(s, r->tile, a);
                inter[k] = machine_addr_interleaved(s->m, (uint32_t)a);
                note_peak(s->peak, r->tile, a + kernel_run_extent(r, k));
            }
            sim_kernel_run(r, ptr);
            uint64_t c = s->m->launch_cycles + kernel_run_cycles(r, s->m, inter);
            cyc += c;
            if (r->kernel == KERNEL_K_COPY) copy += c;
            if (r->kernel == KERNEL_K_GEMM || r->kernel == KERNEL_K_GEMM_EPI) {
                macs += (uint64_t)r->n[0] * r->n[1] * r->n[2] * r->n[3];
                uint32_t rate = machine_amp_macs(s->m, (dtype)r->dt[0]);
                j->groof[g] += rate ? (double)r->n[0] * r->n[1] * r->n[2] * r->n[3] / rate / s->m->tiles : 0;
            }
        }
        j->gcycles[g] = cyc;
        j->gcopy[g] = copy;
        j->gmacs[g] = macs;
        s->used[j->runs[j->gstart[g]].tile] = true;
    }
}

/* The busiest tile's cycles; *copy: how many of them its COPY runs took. */
static uint64_t run_compute(sim *s, const low_step *st, uint32_t *busiest, uint64_t *copy) {
    const kernel_run *runs = s->p->prog.runs.v + st->first;
    uint32_t n = st->count, ng = 0;
    uint32_t *gstart = xmalloc(sizeof(uint32_t) * (n + 1));
    for (uint32_t i = 0; i < n; i++)
        if (i == 0 || runs[i].tile != runs[i - 1].tile) gstart[ng++] = i;
    gstart[ng] = n;
    uint64_t *gcycles = xcalloc(ng + 1, sizeof(uint64_t)), *gmacs = xcalloc(ng + 1, sizeof(uint64_t));
    uint64_t *gcopy = xcalloc(ng + 1, sizeof(uint64_t));
    double *groof = xcalloc(ng + 1, sizeof(double));
    compute_job j = {s, runs, gstart, gcycles, gmacs, gcopy, groof};
    double t0 = util_now_seconds();
    util_parallel(ng, 1, run_groups, &j);
    s->st->kernel_seconds += util_now_seconds() - t0;
    uint64_t worst = 0;
    *busiest = ng ? runs[0].tile : 0;
    *copy = ng ? gcopy[0] : 0;
    for (uint32_t g = 0; g < ng; g++) {
        s->st->macs += gmacs[g];
        s->st->roofline_cycles += groof[g];
        if (gcycles[g] > worst) {
            worst = gcycles[g];
            *busiest = runs[gstart[g]].tile;
            *copy = gcopy[g];
        }
    }
    s->st->runs += n;
    if (s->o->trace) { /* per tile, for the report's heat maps */
        bool longest = s->st->longest_step < 0 || worst > s->st->events[s->st->longest_step].cycles;
        if (longest) memset(s->st->tile_longest, 0, sizeof(uint64_t) * s->m->tiles);
        for (uint32_t g = 0; g < ng; g++) {
            uint32_t t = runs[gstart[g]].tile;
            s->st->tile_compute[t] += gcycles[g];
            if (longest) s->st->tile_longest[t] = gcycles[g];
        }
        if (longest) s->st->longest_step = s->st->nevents; /* record() appends this step's event next */
        for (int32_t k = 0; k < s->st->nsample; k++) s->sample[k] = 0;
        for (uint32_t g = 0; g < ng; g++)
            for (int32_t k = 0; k < s->st->nsample; k++)
                if (runs[gstart[g]].tile == s->st->sample_tile[k]) s->sample[k] = gcycles[g];
    }
    free(gstart);
    free(gcycles);
    free(gmacs);
    free(gcopy);
    free(groof);
    return worst;
}

/* ---- exchange phases ------------------------------------------------------------------ */

/* What one exchange phase costs, in the machine's formulas (machine.h): every tile's sends and
 * receives, the busiest tile's; the sync and the patching (inside a repeat every strided fragment
 * address is a word repatched per iteration on its tile) go to *overhead. */
static uint64_t exchange_phase_cycles(const sim *s, uint32_t nfrags, uint64_t *overhead, uint32_t *busiest) {
    const machine *m = s->m;
    uint64_t worst = 0, patch = 0;
    *busiest = 0;
    for (uint32_t t = 0; t < m->tiles; t++) {
        uint64_t c = machine_exchange_tile_cycles(m, s->sent[t], s->recv[t], s->fsent[t] + s->frecv[t],
                                                  (s->sent_elems[t] & s->recv_elems[t]) != 0);
        if (c > worst) {
            worst = c;
            *busiest = t;
        }
        if (s->patch[t] > patch) patch = s->patch[t];
    }
    return machine_exchange_phase_cycles(m, worst, patch, nfrags != 0, overhead);
}

/* The bit of the memory element holding bytes [addr, addr + bytes): exact up to 64 elements per
 * tile (c600 has 39); a larger memory folds elements together, which can only add conflicts. */
static uint64_t elems_of(const sim *s, uint64_t addr, uint32_t bytes) {
    uint64_t first = (addr - s->m->tile_memory_base) / s->m->memory_element_bytes;
    uint64_t last = (addr + (bytes ? bytes : 1) - 1 - s->m->tile_memory_base) / s->m->memory_element_bytes, bits = 0;
    for (uint64_t e = first; e <= last && e < first + 64; e++) bits |= 1ull << (e % 64);
    return bits;
}

/* One phase as its tables say: every sender's rows read the memory as it
 * was before the phase into a staging buffer, then every receiver's rows
 * write what is delivered to it, in slot order, from its pointers. Senders
 * and receivers each run on their own thread (a tile's counters and memory
 * are its own), so the bytes do not depend on the thread count. */
typedef struct xchg_job {
    sim *s;
    const pkg_xphase *ph;
} xchg_job;

static void send_tiles(void *ctx, int64_t b, int64_t e) {
    xchg_job *j = ctx;
    sim *s = j->s;
    for (int64_t k = b; k < e; k++) {
        const pkg_xtile *t = &s->xp.tiles[j->ph->senders + (uint64_t)k];
        uint32_t tile = t->tile;
        for (uint64_t i = t->first; i < t->first + t->n; i++) {
            const pkg_xsend *x = &s->xp.send[i];
            uint64_t src = (uint64_t)((int64_t)x->addr + (int64_t)s->iter * x->stride);
            memcpy(s->stage + x->stage, at(s, tile, src), x->bytes);
            s->sent[tile] += x->bytes;
            s->fsent[tile]++;
            s->patch[tile] += s->depth && x->stride;
            s->sent_elems[tile] |= elems_of(s, src, x->bytes);
            note_peak(s->peak, tile, src + x->bytes);
        }
        s->used[tile] = true;
    }
}

static void recv_tiles(void *ctx, int64_t b, int64_t e) {
    xchg_job *j = ctx;
    sim *s = j->s;
    for (int64_t k = b; k < e; k++) {
        const pkg_xtile *t = &s->xp.tiles[j->ph->receivers + (uint64_t)k];
        uint32_t tile = t->tile;
        for (uint64_t i = t->first; i < t->first + t->n; i++) {
            const pkg_xrecv *r = &s->xp.recv[i];
            const pkg_xsend *x = &s->xp.send[r->send];
            uint64_t da = (uint64_t)((int64_t)r->addr + (int64_t)s->iter * r->stride);
            memcpy(at(s, tile, da), s->stage + x->stage, x->bytes);
            s->recv[tile] += x->bytes;
            s->frecv[tile]++;
            s->patch[tile] += s->depth && r->stride;
            s->recv_elems[tile] |= elems_of(s, da, x->bytes);
            note_peak(s->peak, tile, da + x->bytes);
        }
        s->used[tile] = true;
    }
}

static uint64_t run_exchange(sim *s, const low_step *st, uint32_t *busiest) {
    const pkg_xphase *ph = &s->xp.phase[st->first];
    uint32_t tiles = s->m->tiles;
    if (ph->bytes > s->stage_cap) {
        s->stage_cap = ph->bytes;
        s->stage = xrealloc(s->stage, ph->bytes);
    }
    memset(s->sent, 0, sizeof(uint64_t) * tiles);
    memset(s->recv, 0, sizeof(uint64_t) * tiles);
    memset(s->fsent, 0, sizeof(uint64_t) * tiles);
    memset(s->frecv, 0, sizeof(uint64_t) * tiles);
    memset(s->patch, 0, sizeof(uint64_t) * tiles);
    memset(s->sent_elems, 0, sizeof(uint64_t) * tiles);
    memset(s->recv_elems, 0, sizeof(uint64_t) * tiles);
    xchg_job j = {s, ph};
    util_parallel(ph->nsenders, 8, send_tiles, &j);
    util_parallel(ph->nreceivers, 8, recv_tiles, &j);
    uint64_t overhead = 0, cycles = exchange_phase_cycles(s, (uint32_t)ph->nsend, &overhead, busiest);
    s->st->fragments += ph->nsend;
    s->st->phases++;
    s->st->exchange_bytes += ph->bytes;
    s->st->sync_cycles += overhead;
    return cycles;
}

/* ---- host data ---------------------------------------------------------------------------- */

typedef struct host_io {
    sim *s;
    const pkg_binding *b;
    float *values;
    int32_t *tiles;  /* scratch: the replicas of one shard (inputs) */
} host_io;

static void scatter_span(void *ctx, const int64_t *shard, int64_t off, int64_t elem, int64_t n) {
    host_io *h = ctx;
    const layout *l = &h->b->layout;
    int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
    layout_shard_extent(l, shard, lo, hi);
    int32_t *tiles = h->tiles;
    int64_t nt = layout_owners(l, lo, tiles, layout_replicas(l));
    TS_ASSERT(nt >= 1 && nt <= layout_replicas(l));
    uint8_t *first = at(h->s, (uint32_t)tiles[0], h->b->addr + (uint64_t)off);
    num_encode_buf(h->b->dtype, h->b->scale, h->values + elem, first, (size_t)n);
    size_t bytes = (size_t)n * (size_t)dtype_bytes(h->b->dtype);
    for (int64_t r = 1; r < nt; r++) memcpy(at(h->s, (uint32_t)tiles[r], h->b->addr + (uint64_t)off), first, bytes);
}

static void gather_span(void *ctx, const int64_t *shard, int64_t off, int64_t elem, int64_t n) {
    host_io *h = ctx;
    int64_t r0[LAYOUT_MAX_RANK] = {0};
    int32_t tile = layout_tile(&h->b->layout, shard, r0);
    num_decode_buf(h->b->dtype, h->b->scale, at(h->s, (uint32_t)tile, h->b->addr + (uint64_t)off), h->values + elem, (size_t)n);
}

static void fire_probes(sim *s, uint32_t i, const uint32_t *iters, int depth) {
    for (uint32_t k = s->probe_at[i]; k < s->probe_at[i + 1]; k++) {
        const pkg_binding *b = &s->p->bindings.v[s->probe_of[k]];
        host_io h = {s, b, s->probe_buf, NULL};
        layout_spans(&b->layout, NULL, gather_span, &h);
        s->o->probe(s->o->probe_ctx, s->probe_of[k], iters, depth, s->probe_buf, sim_binding_numel(b));
    }
}

/* ---- the run -------------------------------------------------------------------------------- */

static uint64_t count_steps(const low_step *steps, uint32_t n) {
    uint64_t total = 0, mult[MAX_DEPTH + 1] = {1};
    int depth = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (steps[i].kind == LOW_STEP_REPEAT) {
            mult[depth + 1] = mult[depth] * steps[i].iterations;
            depth++;
        } else if (steps[i].kind == LOW_STEP_END) {
            depth--;
        } else {
            total += mult[depth];
        }
    }
    return total;
}

/* ---- probes -------------------------------------------------------------------------------- */

static void probes_index(sim *s) {
    const package *p = s->p;
    uint32_t n = (uint32_t)p->prog.steps.n;
    s->probe_at = xcalloc(n + 2, sizeof(uint32_t));
    s->probe_of = xmalloc(sizeof(int32_t) * (size_t)(p->bindings.n + 1));
    int64_t most = 1;
    for (int32_t i = 0; i < p->bindings.n; i++)
        if (p->bindings.v[i].role == PKG_PROBE) {
            s->probe_at[p->bindings.v[i].step + 1]++;
            if (sim_binding_numel(&p->bindings.v[i]) > most) most = sim_binding_numel(&p->bindings.v[i]);
        }
    for (uint32_t i = 0; i < n; i++) s->probe_at[i + 1] += s->probe_at[i];
    uint32_t *fill = xmalloc(sizeof(uint32_t) * (n + 1));
    memcpy(fill, s->probe_at, sizeof(uint32_t) * (n + 1));
    for (int32_t i = 0; i < p->bindings.n; i++)
        if (p->bindings.v[i].role == PKG_PROBE) s->probe_of[fill[p->bindings.v[i].step]++] = i;
    free(fill);
    s->probe_buf = xmalloc(sizeof(float) * (size_t)most);
}

static void gather_span(void *ctx, const int64_t *shard, int64_t off, int64_t elem, int64_t n);

/* Hands every probe of step i to the caller; the iteration of each open
 * repeat comes from the executor's stack. */
static void fire_probes(sim *s, uint32_t i, const uint32_t *iters, int depth);

static void record(sim *s, const low_step *st, uint64_t cycles, uint32_t busiest, uint64_t copy, int64_t *cap) {
    if (s->st->nevents == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        s->st->events = xrealloc(s->st->events, sizeof(sim_event) * (size_t)*cap);
        s->st->sample_cycles = xrealloc(s->st->sample_cycles, sizeof(uint64_t) * (size_t)*cap * (size_t)(s->st->nsample + 1));
    }
    sim_event e = {s->p->prog.strings.v + st->label, st->kind, s->st->cycles, cycles, busiest, copy, s->iter,
                   (uint8_t)(s->depth < 255 ? s->depth : 255), (uint32_t)(st - s->p->prog.steps.v)};
    for (int32_t k = 0; k < s->st->nsample; k++)
        s->st->sample_cycles[s->st->nevents * s->st->nsample + k] = st->kind == LOW_STEP_COMPUTE ? s->sample[k] : 0;
    s->st->events[s->st->nevents++] = e;
}

static void add_kind(sim_stats *st, const char *label, uint64_t cycles) {
    const char *colon = strrchr(label, ':');
    char k[sizeof st->kinds[0].name];
    snprintf(k, sizeof k, "%s", colon ? colon + 1 : label);
    int32_t i = 0;
    while (i < st->nkinds && strcmp(st->kinds[i].name, k) != 0) i++;
    if (i == st->nkinds) {
        if (i == SIM_KINDS - 1) snprintf(k, sizeof k, "other"); /* the last slot gathers the rest */
        if (i < SIM_KINDS) snprintf(st->kinds[st->nkinds++].name, sizeof k, "%s", k);
        else i = SIM_KINDS - 1;
    }
    st->kinds[i].cycles += cycles;
}

static void execute(sim *s, const sim_options *o) {
    const low_step *steps = s->p->prog.steps.v;
    uint32_t n = (uint32_t)s->p->prog.steps.n;
    struct {
        uint32_t begin, iter, count;
    } stack[MAX_DEPTH];
    uint32_t iters[MAX_DEPTH];
    int depth = 0;
    int64_t cap = 0;
    progress pr;
    progress_begin(&pr, "simulate", (int64_t)count_steps(steps, n), o->quiet);
    int64_t done = 0;
    for (uint32_t i = 0; i < n; i++) {
        const low_step *st = &steps[i];
        uint64_t cyc = 0, copy = 0;
        uint32_t busiest = 0;
        switch ((low_step_kind)st->kind) {
        case LOW_STEP_REPEAT:
            stack[depth].begin = i;
            stack[depth].iter = iters[depth] = 0;
            stack[depth].count = st->iterations;
            depth++;
            s->depth = depth;
            s->iter = 0;
            if (o->probe) fire_probes(s, i, iters, depth);
            continue;
        case LOW_STEP_END:
            if (++stack[depth - 1].iter < stack[depth - 1].count) {
                s->iter = iters[depth - 1] = stack[depth - 1].iter;
                i = stack[depth - 1].begin;
                if (o->probe) fire_probes(s, i, iters, depth);
            } else {
                depth--;
                s->depth = depth;
                s->iter = depth ? stack[depth - 1].iter : 0;
                if (o->probe) fire_probes(s, i, iters, depth);
            }
            continue;
        case LOW_STEP_COMPUTE:
            cyc = run_compute(s, st, &busiest, &copy);
            s->st->compute_cycles += cyc;
            break;
        case LOW_STEP_EXCHANGE:
            cyc = run_exchange(s, st, &busiest);
            s->st->exchange_cycles += cyc;
            break;
        }
        /* A step joined from copies and one other kind (place/schedule.c)
         * gives its busiest tile's copy runs to copy. */
        const char *label = s->p->prog.strings.v + st->label, *kind = strrchr(label, ':');
        bool joined = st->kind == LOW_STEP_COMPUTE && copy && kind && strcmp(kind, ":copy") != 0;
        if (joined) {
            add_kind(s->st, ":copy", copy);
            add_kind(s->st, label, cyc - copy);
        } else {
            add_kind(s->st, label, cyc);
        }
        if (o->trace) record(s, st, cyc, busiest, joined ? copy : 0, &cap);
        if (o->probe) fire_probes(s, i, iters, depth);
        s->st->cycles += cyc;
        progress_step(&pr, ++done, s->p->prog.strings.v + st->label);
    }
    progress_end(&pr);
}

uint64_t sim_host_bytes(const machine *m) {
    return (uint64_t)machine_tile_bytes(m) * m->tiles + (uint64_t)m->tiles * (sizeof(bool) + 5 * sizeof(uint64_t));
}

int sim_host_check(const machine *m, uint64_t limit, const char *option, diag *d) {
    uint64_t need = sim_host_bytes(m);
    if (!limit || need <= limit) return 0;
    char n[32], l[32];
    fmt_bytes(n, sizeof n, (double)need);
    fmt_bytes(l, sizeof l, (double)limit);
    return diag_fail(d, "tessel: error: simulating machine '%s' (%u tiles of %u bytes) needs %s of host memory, over the limit of %s (%s)",
                     m->name, m->tiles, machine_tile_bytes(m), n, l, option);
}

int sim_run(const package *p, const sim_options *o, float *const *inputs, float **outputs, sim_stats *st, diag *d) {
    memset(st, 0, sizeof *st);
    st->longest_step = -1;
    const machine *m = &p->machine;
    if (sim_host_check(m, o->max_host_bytes, "--max-host-memory", d)) return -1;
    if (o->trace) {
        st->tile_compute = xcalloc(m->tiles, sizeof(uint64_t));
        st->tile_longest = xcalloc(m->tiles, sizeof(uint64_t));
        for (uint32_t k = 0; k < SIM_TRACE_TILES; k++) {
            uint32_t t = (uint32_t)((uint64_t)k * m->tiles / SIM_TRACE_TILES);
            if (st->nsample == 0 || st->sample_tile[st->nsample - 1] != t) st->sample_tile[st->nsample++] = t;
        }
    }
    sim s = {.p = p, .m = m, .st = st, .tile_bytes = machine_tile_bytes(m), .o = o};
    size_t mem_bytes = (size_t)m->tiles * s.tile_bytes; /* sim_host_check: within the host */
    s.mem = util_try_map(mem_bytes, d, "tessel: error: the simulated memory of machine '%s' (%u tiles of %u bytes)",
                         m->name, m->tiles, (unsigned)s.tile_bytes);
    if (!s.mem) return -1;
    double t0 = util_now_seconds();
    if (pkg_xplan_build(p, "package", &s.xp, d) != 0) {
        util_unmap(s.mem, mem_bytes);
        return -1;
    }
    s.used = xcalloc(m->tiles, sizeof(bool));
    s.peak = xcalloc(m->tiles, sizeof(uint64_t));
    s.sent = xcalloc(m->tiles, sizeof(uint64_t));
    s.recv = xcalloc(m->tiles, sizeof(uint64_t));
    s.fsent = xcalloc(m->tiles, sizeof(uint64_t));
    s.frecv = xcalloc(m->tiles, sizeof(uint64_t));
    s.patch = xcalloc(m->tiles, sizeof(uint64_t));
    s.sent_elems = xcalloc(m->tiles, sizeof(uint64_t));
    s.recv_elems = xcalloc(m->tiles, sizeof(uint64_t));
    util_parallel(m->tiles, 64, load_segments, &s);
    int k = 0, j = 0;
    for (int32_t i = 0; i < p->bindings.n; i++) {
        const pkg_binding *b = &p->bindings.v[i];
        if (b->role != PKG_INPUT) continue;
        host_io h = {&s, b, inputs[k++], xmalloc(sizeof(int32_t) * (size_t)layout_replicas(&b->layout))};
        layout_spans(&b->layout, NULL, scatter_span, &h);
        free(h.tiles);
    }
    if (o->probe) probes_index(&s);
    execute(&s, o);
    int rc = 0;
    for (int32_t i = 0; i < p->bindings.n && rc == 0; i++) {
        const pkg_binding *b = &p->bindings.v[i];
        if (b->role != PKG_OUTPUT) continue;
        int64_t n = sim_binding_numel(b);
        outputs[j] = util_try_calloc((size_t)(n ? n : 1), sizeof(float), d, "tessel: error: the package's output '%s' (%s, %lld elements)",
                                     b->name, dtype_name(b->dtype), (long long)n);
        if (!outputs[j]) {
            for (int32_t q = 0; q < j; q++) free(outputs[q]), outputs[q] = NULL;
            sim_stats_free(st);
            rc = -1;
            break;
        }
        host_io h = {&s, b, outputs[j++], NULL};
        layout_spans(&b->layout, NULL, gather_span, &h);
    }
    for (uint32_t t = 0; t < m->tiles && rc == 0; t++) {
        st->tiles_used += s.used[t];
        if (s.peak[t] > m->tile_memory_base && s.peak[t] - m->tile_memory_base > st->peak_tile_bytes)
            st->peak_tile_bytes = (uint32_t)(s.peak[t] - m->tile_memory_base);
    }
    st->host_seconds = util_now_seconds() - t0;
    util_unmap(s.mem, mem_bytes);
    free(s.used);
    free(s.peak);
    free(s.sent);
    free(s.recv);
    free(s.fsent);
    free(s.frecv);
    free(s.patch);
    free(s.sent_elems);
    free(s.recv_elems);
    free(s.stage);
    pkg_xplan_free(&s.xp);
    free(s.probe_at);
    free(s.probe_of);
    free(s.probe_buf);
    return rc;
}

void sim_stats_free(sim_stats *st) {
    free(st->events);
    free(st->tile_compute);
    free(st->tile_longest);
    free(st->sample_cycles);
    st->sample_cycles = NULL;
    st->events = NULL;
    st->tile_compute = st->tile_longest = NULL;
    st->nevents = 0;
    st->longest_step = -1;
}
