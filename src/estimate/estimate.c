/* estimate.c: the cost model (estimate.h). */
#include "estimate.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A tile's block of one phase in the tables' own row format (kern.h), as
 * placement encodes it; the program's multicast groups, which widen a send
 * row's destination field, are not known before lowering and count as none. */
double est_table_bytes(const machine *m, uint64_t sent_frags, uint64_t recv_frags) {
    if (!sent_frags && !recv_frags) return 0;
    kernel_xt_format f;
    kernel_xt_format_init(&f, m, 0);
    return (double)kernel_xt_block_bytes(&f, sent_frags, recv_frags, 0);
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- copies: priced once per (source layout, destination layout, view, patching) ---------- */

enum { EST_OWN = 4, EST_REMOTE = 8 };

/* One tile's part of an exchange phase. */
typedef struct est_tile_traffic {
    uint64_t sent, recv, frags, patch; /* bytes, bytes, fragments sent and received, address patches */
    uint64_t local;                    /* on-tile copy cycles, launches included */
} est_tile_traffic;

typedef struct copy_cost {
    uint64_t key;
    layout src, dst;
    layout_view view;
    bool has_view;
    uint8_t patch;          /* 1: source addresses repatched per iteration, 2: destination, 3: both;
                               | EST_OWN: a reduce's gathering copy that leaves own partials (mid_prim.own)
                               | EST_REMOTE: only the exchange's share (mid_prim.remote) */
    /* the priced phase */
    uint64_t busiest;       /* the busiest tile's exchange cycles */
    uint64_t patch_words;   /* on the tile patching most */
    uint64_t frags;         /* fragments sent */
    uint64_t local;         /* the busiest tile's on-tile copy cycles, launches included */
    uint32_t *table;        /* per tile: table bytes of this phase */
    est_tile_traffic *tile; /* per tile: what it sends and receives, for phases the schedule joins */
    struct copy_cost *next;
} copy_cost;

enum { CACHE_BUCKETS = 4096 };

enum { SCRATCH_POOL = 8 };

struct est_cache {
    const machine *m;
    pthread_mutex_t lock;
    copy_cost *bucket[CACHE_BUCKETS];
    /* Scratch arenas of copies priced and done, reset, for the next: a walk's
     * run arrays reach tens of MB, faulted in afresh when each had its own. */
    arena *spare[SCRATCH_POOL];
    int nspare;
    int64_t priced, reused;
    bool every_replica; /* est_cache_walk_every_replica */
};

void est_cache_walk_every_replica(est_cache *c) { c->every_replica = true; }

est_cache *est_cache_new(const machine *m) {
    est_cache *c = xcalloc(1, sizeof *c);
    c->m = m;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void est_cache_free(est_cache *c) {
    if (!c) return;
    for (int i = 0; i < CACHE_BUCKETS; i++)
        for (copy_cost *e = c->bucket[i], *n; e; e = n) {
            n = e->next;
            free(e->table);
            free(e->tile);
            free(e);
        }
    for (int i = 0; i < c->nspare; i++) {
        arena_free(c->spare[i]);
        free(c->spare[i]);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void est_cache_stats(const est_cache *c, int64_t *priced, int64_t *reused) {
    *priced = c->priced;
    *reused = c->reused;
}

static uint64_t mix(uint64_t h, int64_t v) { return util_hash_bytes(&v, sizeof v, h); }

static uint64_t layout_key(const layout *l, uint64_t h) {
    h = mix(mix(mix(mix(h, l->rank), l->elem_bytes), l->enc), l->tile_base);
    for (int a = 0; a < l->rank; a++) h = mix(mix(mix(mix(h, l->dim[a]), l->parts[a]), l->block[a]), l->tile_stride[a]);
    h = mix(h, l->nrep);
    for (int k = 0; k < l->nrep; k++) h = mix(mix(h, l->rep[k]), l->rep_stride[k]);
    return h;
}

static bool view_equal(const layout_view *a, const layout_view *b, int drank, int srank) {
    for (int i = 0; i < drank; i++)
        if (a->axis[i] != b->axis[i] || a->off[i] != b->off[i]) return false;
    for (int j = 0; j < srank; j++)
        if (a->src_fix[j] != b->src_fix[j]) return false;
    return true;
}

/* Per tile while walking one copy's runs. */
typedef struct walk_tile {
    uint64_t sent, recv, fsent, frecv, rows_recv, spans, local_bytes, local_boxes;
    int64_t last_dst_end;   /* end of the last remote run received (contiguous receives share a row) */
} walk_tile;

typedef struct copy_walk {
    const machine *m;
    arena *a;                /* the scratch every array below lives in */
    walk_tile *t;
    layout_run *sends;       /* runs between tiles */
    int64_t nsends, cap;
    uint64_t frags;
    layout_run *local;       /* on-tile runs, in order */
    int64_t nlocal, lcap;
    /* Fragment groups counted as the runs come, without sorting them
     * (layout_fragments' multicast groups): with no destination replicas
     * every remote run is its own group; with an unreplicated source the
     * group of a destination shard's replicas is counted at its first remote
     * replica. rep_of[tile]: the destination replica (linear index) there,
     * first[tile]: the tile of replica 0 of the same shard. */
    bool counted;
    int64_t *rep_of;
    int32_t *first;
    /* Walking each destination shard once for all its replicas (by_shard):
     * shard_at[tile]: the shard whose replica 0 is there; its replicas' tiles
     * are rep_tiles[shard * nrep ...]. */
    int64_t *shard_at, nrep;
    int32_t *rep_tiles;
    /* The runs of the shard being walked (layout_runs gives a shard's runs
     * together), priced for all its replicas when the next shard starts. */
    layout_run *shard_runs;
    int64_t nshard_runs, shard_cap, cur_shard;
    int64_t *src_mark;       /* tile -> 1 + the last shard one of whose runs it sends */
} copy_walk;

static uint64_t splits(const machine *m, int64_t bytes) { return (uint64_t)cdiv(bytes, m->max_send_bytes); }

/* An on-tile copy run as the lowering makes it (layout_copy_boxes). */
static void local_box(void *ctx, const layout_copy_box *b) {
    walk_tile *t = &((copy_walk *)ctx)->t[b->tile];
    uint64_t spans = (uint64_t)(b->n[0] * b->n[1]);
    t->local_boxes++;
    t->spans += spans;
    t->local_bytes += spans * (uint64_t)b->len;
}

/* A remote run received on dst_tile (a fragment group's sender pays once:
 * layout_fragments' multicast). */
static void count_remote(copy_walk *w, const layout_run *r, int32_t dst_tile, bool sender, uint64_t n) {
    walk_tile *t = &w->t[dst_tile];
    t->recv += (uint64_t)r->bytes;
    t->frecv += n;
    if (t->last_dst_end != r->dst_off) t->rows_recv++;
    t->last_dst_end = r->dst_off + r->bytes;
    if (sender) {
        walk_tile *s = &w->t[r->src_tile];
        s->sent += (uint64_t)r->bytes;
        s->fsent += n;
        w->frags += n;
    }
}

static int copy_run(void *ctx, const layout_run *r) {
    copy_walk *w = ctx;
    if (r->src_tile == r->dst_tile) {
        if (w->nlocal == w->lcap) {
            int64_t cap = w->lcap ? 2 * w->lcap : 1024;
            w->local = arena_grow(w->a, w->local, sizeof(layout_run) * (size_t)w->lcap, sizeof(layout_run) * (size_t)cap);
            w->lcap = cap;
        }
        w->local[w->nlocal++] = *r;
        return 0;
    }
    uint64_t n = splits(w->m, r->bytes);
    if (w->counted) {
        /* A view maps destination elements to distinct source elements, so
         * runs of different destination shards never share a source span. */
        int64_t rep = w->rep_of ? w->rep_of[r->dst_tile] : 0;
        count_remote(w, r, r->dst_tile, rep == 0 || (rep == 1 && w->first[r->dst_tile] == r->src_tile), n);
        return 0;
    }
    count_remote(w, r, r->dst_tile, false, n);
    if (w->nsends == w->cap) {
        int64_t cap = w->cap ? 2 * w->cap : 1024;
        w->sends = arena_grow(w->a, w->sends, sizeof(layout_run) * (size_t)w->cap, sizeof(layout_run) * (size_t)cap);
        w->cap = cap;
    }
    w->sends[w->nsends++] = *r;
    return 0;
}

/* A run of replica 0 of a destination shard is the same run, byte for byte,
 * on every other replica's tile (the source is not replicated, so nothing
 * picks a nearer source): each gets it as if walked on its own. A replica
 * whose tile sends none of the shard's runs receives them all, so its
 * figures are the shard's sums, counted once; the others walk the runs. */
static void shard_done(copy_walk *w) {
    if (w->nshard_runs == 0) return;
    const layout_run *runs = w->shard_runs;
    int64_t n = w->nshard_runs, mark = w->cur_shard + 1;
    const int32_t *tiles = &w->rep_tiles[w->cur_shard * w->nrep];
    walk_tile all = {.last_dst_end = -1};
    for (int64_t i = 0; i < n; i++) {
        const layout_run *r = &runs[i];
        uint64_t f = splits(w->m, r->bytes);
        /* The group's sender pays once: at replica 0, or at replica 1 when
         * replica 0 is the source's own tile (copy_run's rule). */
        if (tiles[0] != r->src_tile || w->nrep > 1) {
            walk_tile *s = &w->t[r->src_tile];
            s->sent += (uint64_t)r->bytes;
            s->fsent += f;
            w->frags += f;
        }
        all.recv += (uint64_t)r->bytes;
        all.frecv += f;
        if (all.last_dst_end != r->dst_off) all.rows_recv++;
        all.last_dst_end = r->dst_off + r->bytes;
        w->src_mark[r->src_tile] = mark;
    }
    for (int64_t j = 0; j < w->nrep; j++) {
        int32_t t = tiles[j];
        walk_tile *wt = &w->t[t];
        if (w->src_mark[t] != mark) {
            wt->recv += all.recv;
            wt->frecv += all.frecv;
            wt->rows_recv += all.rows_recv;
            wt->last_dst_end = all.last_dst_end;
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            layout_run x = runs[i];
            x.dst_tile = t;
            if (t == x.src_tile) copy_run(w, &x); /* on-tile */
            else count_remote(w, &x, t, false, splits(w->m, x.bytes));
        }
    }
    w->nshard_runs = 0;
}

static int copy_run_replicas(void *ctx, const layout_run *r) {
    copy_walk *w = ctx;
    int64_t shard = w->shard_at[r->dst_tile];
    if (shard != w->cur_shard) {
        shard_done(w);
        w->cur_shard = shard;
    }
    if (w->nshard_runs == w->shard_cap) {
        int64_t cap = w->shard_cap ? 2 * w->shard_cap : 256;
        w->shard_runs = arena_grow(w->a, w->shard_runs, sizeof(layout_run) * (size_t)w->shard_cap,
                                   sizeof(layout_run) * (size_t)cap);
        w->shard_cap = cap;
    }
    w->shard_runs[w->nshard_runs++] = *r;
    return 0;
}

/* The on-tile runs in tile order, each tile's in the order they came: the
 * order layout_runs gives when it walks every replica itself (one
 * destination shard per tile). */
static void locals_by_tile(copy_walk *w, uint32_t tiles) {
    int64_t *at = arena_alloc(w->a, sizeof(int64_t) * (tiles + 1));
    memset(at, 0, sizeof(int64_t) * (tiles + 1));
    for (int64_t i = 0; i < w->nlocal; i++) at[w->local[i].dst_tile + 1]++;
    for (uint32_t t = 0; t < tiles; t++) at[t + 1] += at[t];
    layout_run *sorted = arena_alloc(w->a, sizeof(layout_run) * (size_t)(w->nlocal ? w->nlocal : 1));
    for (int64_t i = 0; i < w->nlocal; i++) sorted[at[w->local[i].dst_tile]++] = w->local[i];
    w->local = sorted;
    w->lcap = w->nlocal;
}

/* A send (layout_fragments): the source tile pays for it once. */
static void send(void *ctx, const layout_fragment *f) {
    copy_walk *w = ctx;
    walk_tile *t = &w->t[f->src_tile];
    t->sent += (uint64_t)f->bytes;
    t->fsent++;
    w->frags++;
}

/* Prices c; its per-tile tables are c's own, the walk's arrays scratch in sa. */
static void price_copy(const machine *m, copy_cost *c, arena *sa, bool every_replica) {
    uint32_t tiles = m->tiles;
    copy_walk w = {.m = m, .a = sa, .t = arena_alloc(sa, sizeof(walk_tile) * tiles), .counted = c->dst.nrep == 0 || c->src.nrep == 0};
    bool by_shard = false;
    if (c->dst.nrep > 0 && c->src.nrep == 0) {
        /* Replicas of one shard on distinct tiles (layout_check); walked
         * once per shard when no tile holds two (shard, replica) pairs. */
        w.rep_of = arena_alloc(sa, sizeof(int64_t) * tiles);
        w.first = arena_alloc(sa, sizeof(int32_t) * tiles);
        const layout *d = &c->dst;
        int64_t ns = layout_shards(d), nr = layout_replicas(d), sh[LAYOUT_MAX_RANK], rp[LAYOUT_MAX_RANK];
        w.shard_at = arena_alloc(sa, sizeof(int64_t) * tiles);
        w.rep_tiles = arena_alloc(sa, sizeof(int32_t) * (size_t)(ns * nr));
        w.nrep = nr;
        uint8_t *held = arena_alloc(sa, tiles); /* zeroed */
        by_shard = !every_replica;
        for (int64_t i = 0; i < ns; i++) {
            for (int64_t k = i, a = d->rank - 1; a >= 0; a--) sh[a] = k % d->parts[a], k /= d->parts[a];
            memset(rp, 0, sizeof rp);
            int32_t t0 = layout_tile(d, sh, rp);
            w.shard_at[t0] = i;
            for (int64_t j = 0; j < nr; j++) {
                for (int64_t k = j, a = d->nrep - 1; a >= 0; a--) rp[a] = k % d->rep[a], k /= d->rep[a];
                int32_t t = layout_tile(d, sh, rp);
                w.rep_of[t] = j;
                w.first[t] = t0;
                w.rep_tiles[i * nr + j] = t;
                if (held[t]++) by_shard = false;
            }
        }
    }
    for (uint32_t i = 0; i < tiles; i++) w.t[i].last_dst_end = -1;
    if (by_shard) {
        layout d0 = c->dst;
        d0.nrep = 0;
        w.src_mark = arena_alloc(sa, sizeof(int64_t) * tiles); /* zeroed */
        w.cur_shard = -1;
        layout_runs(&c->src, &d0, c->has_view ? &c->view : NULL, copy_run_replicas, &w);
        shard_done(&w);
        locals_by_tile(&w, tiles);
    } else {
        layout_runs(&c->src, &c->dst, c->has_view ? &c->view : NULL, copy_run, &w);
    }
    if (c->patch & EST_OWN) { /* lower.c's leave_own_partials: whole own partials stay for the reduce */
        int32_t *slot = arena_alloc(sa, sizeof(int32_t) * tiles);
        int64_t *off = arena_alloc(sa, sizeof(int64_t) * tiles);
        layout_own_slots(&c->src, &c->dst, w.local, w.nlocal, (int32_t)tiles, MID_OWN_SLOTS, slot, off);
        w.nlocal = layout_drop_owned(w.local, w.nlocal, slot);
    }
    if (c->patch & EST_REMOTE) w.nlocal = 0; /* lower.c: the producer wrote each tile's own share */
    layout_copy_boxes(w.local, w.nlocal, local_box, &w);
    if (w.nsends > 1) /* sorted here, in scratch: layout_fragments then finds them in order */
        layout_sort_remote(w.sends, w.nsends, arena_grow(sa, NULL, 0, sizeof(layout_run) * (size_t)w.nsends));
    layout_fragments(w.sends, w.nsends, m->max_send_bytes, send, &w);
    c->frags = w.frags;
    c->table = xcalloc(tiles, sizeof(uint32_t));
    c->tile = xcalloc(tiles, sizeof(est_tile_traffic));
    for (uint32_t i = 0; i < tiles; i++) {
        const walk_tile *t = &w.t[i];
        uint64_t x = machine_exchange_tile_cycles(m, t->sent, t->recv, t->fsent + t->frecv, false);
        if (x > c->busiest) c->busiest = x;
        uint64_t pw = ((c->patch & 1) ? t->fsent : 0) + ((c->patch & 2) ? t->frecv : 0);
        c->tile[i] = (est_tile_traffic){t->sent, t->recv, t->fsent + t->frecv, pw, 0};
        if (pw > c->patch_words) c->patch_words = pw;
        c->table[i] = (uint32_t)est_table_bytes(m, t->fsent, t->rows_recv);
        if (t->spans) {
            uint64_t l = t->local_boxes * (m->launch_cycles + m->copy_run_cycles) +
                         machine_copy_cycles(m, t->spans, t->local_bytes, true) - m->copy_run_cycles;
            c->tile[i].local = l;
            if (l > c->local) c->local = l;
        }
    }
}

/* The priced copy under key h, if any (the caller holds the lock). */
static copy_cost *cache_find(est_cache *cache, uint64_t h, const layout *src, const layout *dst, const layout_view *view,
                             uint8_t patch) {
    for (copy_cost *e = cache->bucket[h % CACHE_BUCKETS]; e; e = e->next)
        if (e->key == h && e->patch == patch && e->has_view == (view != NULL) && layout_equal(&e->src, src) &&
            layout_equal(&e->dst, dst) && (!view || view_equal(&e->view, view, dst->rank, src->rank)))
            return e;
    return NULL;
}

static const copy_cost *copy_priced(est_cache *cache, const layout *src, const layout *dst, const layout_view *view,
                                    uint8_t patch) {
    uint64_t h = layout_key(dst, layout_key(src, 0x5eed ^ patch));
    if (view)
        for (int i = 0; i < dst->rank; i++) h = mix(mix(h, view->axis[i]), view->off[i]);
    pthread_mutex_lock(&cache->lock);
    copy_cost *e = cache_find(cache, h, src, dst, view, patch);
    arena *scratch = NULL; /* the walk's, reset once the copy is priced */
    if (e) cache->reused++;
    else if (cache->nspare) scratch = cache->spare[--cache->nspare];
    pthread_mutex_unlock(&cache->lock);
    if (e) return e;
    /* Priced outside the lock: two threads may price one copy (the values
     * agree); the first kept, so the counts do not depend on the timing. */
    copy_cost *c = xcalloc(1, sizeof *c);
    c->key = h;
    c->src = *src;
    c->dst = *dst;
    c->has_view = view != NULL;
    if (view) c->view = *view;
    c->patch = patch;
    if (!scratch) arena_init(scratch = xmalloc(sizeof *scratch));
    price_copy(cache->m, c, scratch, cache->every_replica);
    arena_reset(scratch);
    pthread_mutex_lock(&cache->lock);
    if (cache->nspare < SCRATCH_POOL) {
        cache->spare[cache->nspare++] = scratch;
        scratch = NULL;
    }
    if ((e = cache_find(cache, h, src, dst, view, patch)) != NULL) {
        cache->reused++;
    } else {
        c->next = cache->bucket[h % CACHE_BUCKETS];
        cache->bucket[h % CACHE_BUCKETS] = c;
        cache->priced++;
    }
    pthread_mutex_unlock(&cache->lock);
    if (scratch) {
        arena_free(scratch);
        free(scratch);
    }
    if (e) {
        free(c->table);
        free(c->tile);
        free(c);
        return e;
    }
    return c;
}

void est_copy(est_cache *c, const layout *src, const layout *dst, const layout_view *view, est_copy_info *out) {
    const copy_cost *cc = copy_priced(c, src, dst, view, 0);
    *out = (est_copy_info){cc->frags, cc->busiest, cc->local, 0, 0, 0};
    for (uint32_t i = 0; i < c->m->tiles; i++) {
        out->table_sum += cc->table[i];
        if (cc->table[i] > out->table_max) out->table_max = cc->table[i];
        out->moved_sum += cc->tile[i].sent + cc->tile[i].recv;
    }
}

/* ---- compute ------------------------------------------------------------------------------- */

typedef struct ex {
    const mid_program *p;
    const machine *m;
    est_cache *cache;
    est_result *r;
    double *table;          /* per tile */
    arena *scratch;         /* everything est_program needs only while it runs */
    int depth;              /* repeats entered */
    const struct copy_cost *last_copy; /* the copy prim_cost priced last, else NULL */
} ex;

static const layout *lay(const ex *x, int32_t t) { return &mid_t(x->p, t)->lay; }
static int64_t ebytes_t(const ex *x, int32_t t) { return dtype_bytes(mid_t(x->p, t)->dtype); }

/* The extents of the shard of l along each axis: the full block, or the
 * tail when `tail` has the axis's bit (and the axis has a shorter tail). */
static bool shard_shape(const layout *l, uint32_t tail, int64_t *ext) {
    for (int a = 0; a < l->rank; a++) {
        int64_t t = l->dim[a] - (l->parts[a] - 1) * l->block[a];
        if (tail >> a & 1) {
            if (t == l->block[a]) return false; /* no distinct tail: that shape was seen */
            ext[a] = t;
        } else {
            ext[a] = l->parts[a] == 1 ? l->dim[a] : l->block[a];
        }
    }
    return true;
}

static uint64_t box_outer(const kernel_box *b, int keep) {
    uint64_t runs = 1;
    for (int d = 0; d + keep < b->nd; d++) runs *= (uint64_t)b->n[d];
    return runs;
}

static const layout *runs_layout(const ex *x, const mid_prim *pr);

/* Every operand interleaved: what the estimate assumes of buffers it has not placed. */
static const bool ALL_INTERLEAVED[KERNEL_MAX_OPERANDS] = {true, true, true, true, true, true, true};

/* A run of kernel k over tensors ops (mid_run_over), without addresses. */
static kernel_run est_run(const ex *x, kernel_id k, const int32_t *ops, int nops) {
    return mid_run_over(x->p, k, ops, nops).r;
}

/* What the simulator charges for run r, its launch included. */
static uint64_t run_cost(const ex *x, const kernel_run *r) {
    return x->m->launch_cycles + kernel_run_cycles(r, x->m, ALL_INTERLEAVED);
}

/* Sums the cost of the runs a template gives (mid_run_fn). */
typedef struct run_sum {
    const ex *x;
    uint64_t sum;
} run_sum;

static void sum_run(void *vctx, const mid_run *m) {
    run_sum *c = vctx;
    c->sum += run_cost(c->x, &m->r);
}

/* One shard's runs; kext > 0: a GEMM's K extent there (the last K part's
 * tail), else its first K part's. */
static uint64_t shard_cost(const ex *x, const mid_prim *pr, const int64_t *ext, int64_t kext) {
    const machine *m = x->m;
    uint64_t L = m->launch_cycles;
    int64_t elems = 1; /* of the shard the runs are cut from (runs_layout's) */
    for (int a = 0; a < runs_layout(x, pr)->rank; a++) elems *= ext[a];
    switch (pr->kind) {
    case MID_GEMM: { /* lower.c's gemm_shard: mid_gemm_runs */
        int64_t first[LAYOUT_MAX_RANK] = {0}, k0, k1;
        mid_gemm_k_range(x->p, pr, first, &k0, &k1);
        run_sum c = {x, 0};
        mid_gemm_runs(x->p, pr, ext, kext > 0 ? kext : k1 - k0, sum_run, &c);
        return c.sum;
    }
    case MID_EWISE: { /* lower.c's ewise_shard: the runs of mid_ewise_box */
        kernel_box b = mid_ewise_box(x->p, pr, ext);
        int32_t ops[3] = {pr->out[0], pr->in[0], pr->nin > 1 ? pr->in[1] : pr->in[0]};
        kernel_run r = est_run(x, KERNEL_K_EWISE, ops, 1 + pr->nin);
        r.ew = (uint8_t)pr->ew;
        r.acc = (uint8_t)pr->acc;
        r.f[0] = pr->f[0];
        uint64_t runs = kernel_box_run(&b, KERNEL_MAX_BOX, &r);
        return runs * run_cost(x, &r);
    }
    case MID_SOFTMAX:
    case MID_LAYER_NORM:
    case MID_LN_MOMENTS: {
        /* lower.c's rows_shard: a run per index of mid_rows_box's outer
         * axes, its innermost the run's rows, each the shard's part of the
         * last axis (LN_MOMENTS: of its input's shard). */
        kernel_box b = mid_rows_box(x->p, pr, ext);
        int32_t ops[2] = {pr->out[0], pr->in[0]};
        kernel_run r = est_run(x, pr->kind == MID_SOFTMAX ? KERNEL_K_SOFTMAX : pr->kind == MID_LN_MOMENTS ? KERNEL_K_LN_MOMENTS
                                                                                                           : KERNEL_K_LAYER_NORM,
                               ops, 2);
        r.n[0] = (uint32_t)b.n[b.nd - 1];
        r.n[1] = (uint32_t)ext[runs_layout(x, pr)->rank - 1];
        r.n[2] = (uint32_t)mid_layer_norm_parts(x->p, pr);
        return box_outer(&b, 1) * run_cost(x, &r);
    }
    case MID_GEMM_EPI: { /* lower.c's gemm_epi_shard: mid_gemm_epi_runs */
        run_sum c = {x, 0};
        mid_gemm_epi_runs(x->p, pr, ext, sum_run, &c);
        return c.sum;
    }
    case MID_REDUCE:
    case MID_REDUCE_EPI:
    case MID_SGD:
    case MID_ADAMW:
    case MID_ADAMW_APPLY: { /* lower.c's flat_shard: one run over the whole shard */
        mid_run r = mid_flat_run(x->p, pr);
        return run_cost(x, &r.r);
    }
    case MID_GATHER: { /* lower.c's gather_shard */
        kernel_run r = mid_gather_run(x->p, pr, ext);
        return run_cost(x, &r);
    }
    case MID_FILL: {
        int32_t ops[1] = {pr->out[0]};
        kernel_run r = est_run(x, KERNEL_K_FILL, ops, 1);
        r.n[0] = (uint32_t)elems;
        return run_cost(x, &r);
    }
    case MID_REDUCE_SUM: { /* lower.c's reduce_sum_shard: the runs of mid_reduce_sum_box */
        kernel_box b = mid_reduce_sum_box(x->p, pr, ext);
        kernel_box_collapse(&b);
        int32_t ops[2] = {pr->out[0], pr->in[0]};
        kernel_run r = est_run(x, KERNEL_K_REDUCE_SUM, ops, 2);
        uint64_t runs = kernel_box_run(&b, KERNEL_MAX_BOX, &r);
        return runs * run_cost(x, &r);
    }
    case MID_SUMSQ:
    case MID_CLIP_COEF: {
        /* Priced as one run over the input's whole shard (the lowering runs
         * a SUMSQ per contiguous span), writing the result's shard. */
        const layout *li = lay(x, pr->in[0]);
        int64_t in = 1;
        for (int a = 0; a < li->rank; a++) in *= li->parts[a] > 1 ? li->block[a] : li->dim[a];
        machine_vwork w = {.rows = 1, .funcs = pr->kind == MID_CLIP_COEF};
        w.vec_bytes = (uint64_t)(in * ebytes_t(x, pr->in[0]) + elems * ebytes_t(x, pr->out[0]));
        w.load_bytes[1] = (uint64_t)(in * ebytes_t(x, pr->in[0]));
        w.interleaved[1] = true;
        return L + machine_vector_cycles(m, &w);
    }
    default: TS_UNREACHABLE();
    }
}

/* The layout whose shards the lowering cuts runs from: a reduce_sum's or
 * row statistics' input (lower.c's reduce_sum_shard, moments_shard), else the result. */
static const layout *runs_layout(const ex *x, const mid_prim *pr) {
    return lay(x, pr->kind == MID_REDUCE_SUM || pr->kind == MID_LN_MOMENTS ? pr->in[0] : pr->out[0]);
}

/* The busiest shard's runs: every distinct combination of full and tail extents. */
static uint64_t compute_cost(const ex *x, const mid_prim *pr) {
    const layout *lo = runs_layout(x, pr);
    uint64_t worst = 0;
    int rank = lo->rank;
    for (uint32_t tail = 0; tail < (1u << rank); tail++) {
        int64_t ext[LAYOUT_MAX_RANK];
        if (!shard_shape(lo, tail, ext)) continue;
        uint64_t c = shard_cost(x, pr, ext, 0);
        if (c > worst) worst = c;
    }
    return worst;
}

/* ---- the program ----------------------------------------------------------------------------- */

static bool is_slice(const mid_program *p, int32_t t) {
    for (;;) {
        const mid_tensor *mt = mid_t(p, t);
        if (mt->slice_of >= 0) return true;
        if (mt->alias_of < 0) return false;
        t = mt->alias_of;
    }
}

static double block_cost(ex *x, const mid_block *b, double times);

static double prim_cost(ex *x, int32_t id, double times) {
    const mid_prim *pr = mid_p(x->p, id);
    const machine *m = x->m;
    double c = 0;
    x->last_copy = NULL;
    if (pr->kind == MID_REPEAT) {
        x->depth++;
        c = block_cost(x, &pr->body, times * (double)pr->count) * (double)pr->count;
        x->depth--;
        return c;
    }
    if (pr->kind == MID_COPY) {
        uint8_t patch = 0;
        if (x->depth) patch = (uint8_t)((is_slice(x->p, pr->in[0]) ? 1 : 0) | (is_slice(x->p, pr->out[0]) ? 2 : 0));
        if (pr->own) patch |= EST_OWN;
        if (pr->remote) patch |= EST_REMOTE;
        const copy_cost *cc = copy_priced(x->cache, lay(x, pr->in[0]), lay(x, pr->out[0]), pr->has_view ? &pr->view : NULL,
                                          patch);
        x->last_copy = cc;
        if (cc->frags) {
            double e = (double)machine_exchange_phase_cycles(m, cc->busiest, cc->patch_words, true, NULL);
            x->r->exchange += e * times;
            x->r->phases += (int64_t)times;
            x->r->fragments += (int64_t)(cc->frags * times);
            c += e;
            for (uint32_t t = 0; t < m->tiles; t++) x->table[t] += cc->table[t];
        }
        x->r->compute += (double)cc->local * times;
        c += (double)cc->local;
        if (x->r->prim_exchange) x->r->prim_exchange[id] = c - (double)cc->local;
    } else {
        double k = (double)compute_cost(x, pr);
        x->r->compute += k * times;
        c += k;
        if (x->r->prim_exchange) x->r->prim_exchange[id] = 0;
    }
    if (x->r->prim_cycles) x->r->prim_cycles[id] = c;
    return c;
}

/* ---- phases the schedule joins ---------------------------------------------------------- *
 *
 * place/schedule.c gives an exchange phase to the nearest one before it in
 * the same block when nothing between stands in the way: its sources are
 * ready and its destinations free (no prim between writes what it reads or
 * writes, or reads what it writes), and it neither reads nor writes what the
 * earlier phase writes. The joined phase pays one sync, and its busiest
 * tile's summed traffic, not the sum of two busiest tiles'. Here the same
 * test runs on the mid prims' storage (a copy's on-tile part counts as a
 * prim between), and a joined phase is priced from the per-tile traffic
 * of its copies. */
typedef struct phase {
    int32_t head;               /* block position of the copy that opened it */
    const est_tile_traffic *t;  /* per tile: the opening copy's traffic */
    est_tile_traffic *sum;      /* per tile, once a copy joins: the summed traffic (NULL before) */
    double cost;                /* the phase's cycles as priced so far */
} phase;

static bool touches(const mid_program *p, const int32_t *ts, int32_t n, const int32_t *us, int32_t m) {
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < m; j++)
            if (mid_storage(p, ts[i]) == mid_storage(p, us[j])) return true;
    return false;
}

/* The open phase prim j (a copy with an exchange) joins, or -1. */
static int32_t join_target(const ex *x, const mid_block *b, int32_t j, const int32_t *phase_of) {
    const mid_program *p = x->p;
    const mid_prim *pj = mid_p(p, b->v[j]);
    for (int32_t k = j - 1; k >= 0; k--) {
        const mid_prim *q = mid_p(p, b->v[k]);
        if (q->kind == MID_REPEAT) return -1;
        if (phase_of[k] >= 0 && phase_of[k] != k) continue; /* joined an earlier phase: its writes are that phase's */
        bool opened = phase_of[k] == k; /* q opened a phase */
        bool rq = touches(p, pj->in, pj->nin, q->out, q->nout), wq = touches(p, pj->out, pj->nout, q->out, q->nout);
        /* the phase writes what its copies write: theirs were checked as they joined */
        for (int32_t i = k + 1; opened && i < j; i++) {
            const mid_prim *o = mid_p(p, b->v[i]);
            if (phase_of[i] != k) continue;
            rq = rq || touches(p, pj->in, pj->nin, o->out, o->nout);
            wq = wq || touches(p, pj->out, pj->nout, o->out, o->nout);
        }
        switch (kernel_join_step(opened, rq, wq, !opened && touches(p, pj->out, pj->nout, q->in, q->nin))) {
        case KERNEL_JOIN_HERE: return k;
        case KERNEL_JOIN_NEVER: return -1;
        case KERNEL_JOIN_PAST: break;
        }
    }
    return -1;
}

/* Copy cc (prim i of b) gives its phase to the open one join_target finds,
 * which is then priced from both copies' per-tile traffic, or opens one;
 * returns the phase it joined, or -1. */
static int32_t join_phase(ex *x, const mid_block *b, int32_t i, int32_t *phase_of, phase *ph, const copy_cost *cc,
                          double times, double *c) {
    const machine *m = x->m;
    int32_t k = join_target(x, b, i, phase_of);
    double own = (double)machine_exchange_phase_cycles(m, cc->busiest, cc->patch_words, true, NULL);
    if (k < 0) { /* a phase of its own */
        phase_of[i] = i;
        ph[i] = (phase){i, cc->tile, NULL, own}; /* copied only if a copy joins it: most phases stay alone */
        return -1;
    }
    phase *f = &ph[k];
    phase_of[i] = k;
    if (!f->sum) {
        f->sum = arena_alloc(x->scratch, sizeof(est_tile_traffic) * m->tiles);
        memcpy(f->sum, f->t, sizeof(est_tile_traffic) * m->tiles);
    }
    uint64_t busiest = 0, patch = 0;
    for (uint32_t t = 0; t < m->tiles; t++) {
        est_tile_traffic *a = &f->sum[t];
        const est_tile_traffic *d = &cc->tile[t];
        a->sent += d->sent, a->recv += d->recv, a->frags += d->frags, a->patch += d->patch;
        uint64_t e = machine_exchange_tile_cycles(m, a->sent, a->recv, a->frags, false);
        if (e > busiest) busiest = e;
        if (a->patch > patch) patch = a->patch;
    }
    double joined = (double)machine_exchange_phase_cycles(m, busiest, patch, true, NULL);
    double delta = joined - f->cost - own; /* this copy's phase is gone into f */
    f->cost = joined;
    x->r->exchange += delta * times;
    x->r->phases -= (int64_t)times;
    *c += delta;
    if (x->r->prim_cycles) x->r->prim_cycles[b->v[i]] += delta;
    if (x->r->prim_exchange) x->r->prim_exchange[b->v[i]] += delta;
    return k;
}

/* ---- compute steps the schedule joins ------------------------------------------------------ *
 *
 * A copy lowers to its exchange phase, then a step of its on-tile copies;
 * any other prim to one compute step. Once phases have joined, schedule.c
 * joins two compute steps in a row when one of them only copies, and the
 * joined step takes its busiest tile's summed runs (sim.c), not the sum of
 * two busiest tiles'. Here a phase that stays where it is ends the step
 * being built, and a joined step is priced from per-tile cycles: a copy's
 * on-tile part per tile, a kernel's runs on the tile of each shard. */
typedef struct cstep {
    uint64_t *t;    /* per tile: the step's cycles so far */
    double cost;    /* its busiest tile's */
    bool open;      /* a step is being built */
    bool copies;    /* it only copies */
} cstep;

/* Per tile, prim pr's runs: each shard's on the tile of its first replica
 * (lower.c's each_shard; a FILL's and an EWISE's on every replica's), full blocks and
 * tails priced apart, a K-split GEMM's last K part with its K tail
 * (lower.c's gemm_shard). */
static void kernel_tiles(const ex *x, const mid_prim *pr, uint64_t *out) {
    const layout *lo = runs_layout(x, pr);
    uint64_t cost[2u << LAYOUT_MAX_RANK];
    bool priced[2u << LAYOUT_MAX_RANK] = {false};
    int64_t ns = layout_shards(lo), nr = pr->kind == MID_FILL || pr->kind == MID_EWISE ? layout_replicas(lo) : 1, s[LAYOUT_MAX_RANK] = {0},
            r[LAYOUT_MAX_RANK] = {0}, k0 = 0, k1 = 0, kfull = 0;
    if (pr->kind == MID_GEMM) {
        mid_gemm_k_range(x->p, pr, s, &k0, &k1);
        kfull = k1 - k0;
    }
    memset(out, 0, sizeof(uint64_t) * x->m->tiles);
    for (int64_t i = 0; i < ns; i++) {
        uint32_t tail = 0;
        for (int64_t k = i, a = lo->rank - 1; a >= 0; a--) {
            s[a] = k % lo->parts[a], k /= lo->parts[a];
            int64_t full = lo->parts[a] == 1 ? lo->dim[a] : lo->block[a];
            if (s[a] == lo->parts[a] - 1 && lo->dim[a] - (lo->parts[a] - 1) * lo->block[a] != full) tail |= 1u << a;
        }
        if (pr->kind == MID_GEMM) mid_gemm_k_range(x->p, pr, s, &k0, &k1);
        bool kt = k1 - k0 < kfull; /* the last K part's tail */
        uint32_t key = tail | (kt ? 1u << LAYOUT_MAX_RANK : 0);
        if (!priced[key]) {
            int64_t ext[LAYOUT_MAX_RANK];
            shard_shape(lo, tail, ext);
            cost[key] = shard_cost(x, pr, ext, kt ? k1 - k0 : 0);
            priced[key] = true;
        }
        for (int64_t j = 0; j < nr; j++) {
            for (int64_t q = j, a = lo->nrep - 1; a >= 0; a--) r[a] = q % lo->rep[a], q /= lo->rep[a];
            int32_t t = layout_tile(lo, s, r);
            if (t >= 0 && (uint32_t)t < x->m->tiles) out[t] += cost[key];
        }
    }
}

/* Work costing `own` on its busiest tile and `add` per tile joins the step
 * being built when either only copies, else opens one; returns what the
 * join changes (<= 0). */
static double step_join(cstep *s, uint32_t tiles, const uint64_t *add, double own, bool copies) {
    if (!s->open || !(copies || s->copies)) {
        memcpy(s->t, add, sizeof(uint64_t) * tiles);
        *s = (cstep){s->t, own, true, copies};
        return 0;
    }
    uint64_t worst = 0;
    for (uint32_t t = 0; t < tiles; t++) {
        s->t[t] += add[t];
        if (s->t[t] > worst) worst = s->t[t];
    }
    double delta = (double)worst - s->cost - own;
    s->cost = (double)worst;
    s->copies = s->copies && copies;
    return delta;
}

static double block_cost(ex *x, const mid_block *b, double times) {
    const machine *m = x->m;
    double c = 0;
    arena *a = x->scratch;
    int32_t *phase_of = arena_alloc(a, sizeof(int32_t) * ((size_t)b->n + 1)); /* position: the head of its phase, -1 none */
    phase *ph = arena_alloc(a, sizeof(phase) * ((size_t)b->n + 1));
    cstep step = {arena_alloc(a, sizeof(uint64_t) * m->tiles), 0, false, false};
    uint64_t *add = arena_alloc(a, sizeof(uint64_t) * m->tiles);
    for (int32_t i = 0; i < b->n; i++) {
        phase_of[i] = -1;
        int32_t id = b->v[i];
        const mid_prim *pr = mid_p(x->p, id);
        double pc = prim_cost(x, id, times);
        const copy_cost *cc = x->last_copy;
        c += pc;
        if (pr->kind == MID_REPEAT) { /* its steps stand between */
            step.open = false;
            continue;
        }
        double delta = 0;
        if (!cc) {
            kernel_tiles(x, pr, add);
            delta = step_join(&step, m->tiles, add, pc, false);
        } else {
            if (cc->frags && join_phase(x, b, i, phase_of, ph, cc, times, &c) < 0) step.open = false; /* it stays between */
            if (cc->local) {
                for (uint32_t t = 0; t < m->tiles; t++) add[t] = cc->tile[t].local;
                delta = step_join(&step, m->tiles, add, (double)cc->local, true);
            }
        }
        x->r->compute += delta * times;
        c += delta;
        if (x->r->prim_cycles) x->r->prim_cycles[id] += delta;
    }
    return c;
}

/* ---- memory: per-tile peak of live buffers ---------------------------------------------------- */

typedef struct live {
    int32_t first, last;   /* prim positions in program order */
} live;

/* Positions: every non-repeat prim one, in program order (bodies once);
 * range[r] the positions of repeat r's body. */
typedef struct order {
    const mid_program *p;
    live *lv;              /* per storage tensor */
    live *range;           /* per prim id, for repeats */
    int32_t pos;
    int32_t open[64];      /* repeat prims entered */
    int depth;
} order;

static void number(order *o, const mid_block *b) {
    for (int32_t i = 0; i < b->n; i++) {
        const mid_prim *pr = mid_p(o->p, b->v[i]);
        if (pr->kind != MID_REPEAT) {
            o->pos++;
            continue;
        }
        o->range[b->v[i]].first = o->pos;
        number(o, &pr->body);
        o->range[b->v[i]].last = o->pos - 1;
    }
}

static void extend(live *l, int32_t first, int32_t last) {
    if (l->first < 0 || first < l->first) l->first = first;
    if (last > l->last) l->last = last;
}

/* A buffer used inside a repeat but made outside it (a carried value, an
 * operand from before the loop) lives through the whole body: every
 * iteration reads it. One made in the body lives from its first to its last
 * use there. */
static void touch(order *o, int32_t t) {
    int32_t s = mid_storage(o->p, t), scope = mid_t(o->p, t)->scope;
    extend(&o->lv[s], o->pos, o->pos);
    for (int i = o->depth - 1; i >= 0 && o->open[i] != scope; i--)
        extend(&o->lv[s], o->range[o->open[i]].first, o->range[o->open[i]].last);
}

static void walk_order(order *o, const mid_block *b) {
    for (int32_t i = 0; i < b->n; i++) {
        const mid_prim *pr = mid_p(o->p, b->v[i]);
        if (pr->kind == MID_REPEAT) {
            TS_ASSERT(o->depth < (int)TS_COUNT(o->open));
            o->open[o->depth++] = b->v[i];
            walk_order(o, &pr->body);
            o->depth--;
            continue;
        }
        for (int k = 0; k < pr->nin; k++) touch(o, pr->in[k]);
        for (int k = 0; k < pr->nout; k++) touch(o, pr->out[k]);
        o->pos++;
    }
}

typedef struct mem_ev {
    int32_t at;
    int32_t t;     /* storage tensor */
    bool end;
} mem_ev;

static int cmp_ev(const void *a, const void *b) {
    const mem_ev *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    if (x->end != y->end) return x->end ? 1 : -1; /* starts first: a prim's inputs and outputs coexist */
    return x->t < y->t ? -1 : x->t > y->t;
}

/* The tiles holding a shard of l, each once per replica (a replica on one
 * tile twice is twice the bytes), into out; returns how many. */
static int64_t layout_tile_list(const layout *l, uint32_t tiles, int32_t *out) {
    int64_t ns = layout_shards(l), nr = layout_replicas(l), s[LAYOUT_MAX_RANK] = {0}, r[LAYOUT_MAX_RANK], n = 0;
    /* Shards and replicas in row-major order, their indices counted up
     * (an odometer per set of axes) rather than divided out. */
    for (int64_t i = 0; i < ns; i++) {
        memset(r, 0, sizeof r);
        for (int64_t j = 0; j < nr; j++) {
            int32_t t = layout_tile(l, s, r);
            if (t >= 0 && (uint32_t)t < tiles) out[n++] = t;
            for (int a = l->nrep - 1; a >= 0 && ++r[a] == l->rep[a]; a--) r[a] = 0;
        }
        for (int a = l->rank - 1; a >= 0 && ++s[a] == l->parts[a]; a--) s[a] = 0;
    }
    return n;
}

/* What a tile's live buffers reserve under src/place's memory map
 * (docs/placement.md, "SRAM placement"): the ordinary region packs them (at
 * 16-byte alignment, an AMP-left operand with the panel row its stream reads
 * ahead); a buffer in the interleaved region owns whole logical elements.
 * The largest buffers go interleaved, where they waste least, until the rest
 * packs into the ordinary region: the reservation is the payload plus their
 * rounding up to whole elements, or, when they would need more elements than
 * the region has, the ordinary region and every element they need (more
 * than the tile has). A model of the allocator's choices at one moment, not
 * a run of it: it does not see the gaps lifetimes leave, nor that the
 * allocator places resident buffers first (docs/search.md has how far it
 * is from what placement reserves). */
typedef struct tile_live {
    int64_t *size; /* live reservations: size[0, sorted) largest first, the rest as added */
    int32_t n, cap, sorted;
    bool grown;       /* buffers added since the reservation was last priced */
    int64_t payload;  /* their sum */
    double bytes;     /* the live shards' bytes (the payload before request rounding) */
} tile_live;

typedef struct mem_map {
    int64_t ordinary;   /* bytes of the ordinary region left for buffers */
    int64_t element;    /* bytes of one logical interleaved element */
    int64_t elements;   /* whole and partial elements below the loader limit */
} mem_map;

/* Sorts the sizes added since the last sort into the largest-first prefix. */
static void live_sort(tile_live *tl) {
    for (; tl->sorted < tl->n; tl->sorted++) {
        int64_t size = tl->size[tl->sorted];
        int32_t i = tl->sorted;
        while (i > 0 && tl->size[i - 1] < size) tl->size[i] = tl->size[i - 1], i--;
        tl->size[i] = size;
    }
}

/* A multiset's function: which of equal sizes is where does not matter.
 * Below the ordinary region's room it is the payload, and the sizes are
 * left unsorted until a tile needs more (most never do). */
static int64_t reserved(tile_live *tl, const mem_map *mm) {
    if (tl->payload <= mm->ordinary || mm->element <= 0) return tl->payload;
    live_sort(tl);
    int64_t rest = tl->payload, waste = 0, used = 0;
    for (int32_t i = 0; i < tl->n && rest > mm->ordinary; i++) {
        int64_t e = (tl->size[i] + mm->element - 1) / mm->element;
        rest -= tl->size[i];
        used += e;
        waste += e * mm->element - tl->size[i];
    }
    if (used > mm->elements) return mm->ordinary + used * mm->element;
    return tl->payload + waste;
}

/* The regions placement allocates in (kern.h's tile memory map), with code
 * and tables taken as EST_CODE_BYTES and table_max. */
static mem_map memory_map(const machine *m, double table_max) {
    kernel_regions k = kernel_tile_regions(m, m->tile_memory_base + (uint64_t)table_max + EST_CODE_BYTES);
    mem_map mm = {.ordinary = (int64_t)(k.ord_hi - k.ord_lo), .element = (int64_t)k.unit};
    mm.elements = k.unit > 0 ? (int64_t)((k.il_hi - k.il_lo + k.unit - 1) / k.unit) : 0;
    return mm;
}

static void live_add(arena *a, tile_live *tl, int64_t size) {
    if (tl->n == tl->cap) {
        int32_t cap = tl->cap ? 2 * tl->cap : 16;
        tl->size = arena_grow(a, tl->size, sizeof(int64_t) * (size_t)tl->cap, sizeof(int64_t) * (size_t)cap);
        tl->cap = cap;
    }
    tl->size[tl->n++] = size;
    tl->payload += size;
}

static void live_remove(tile_live *tl, int64_t size) {
    tl->payload -= size;
    /* Unsorted sizes first: one taken from there, the last takes its place. */
    for (int32_t i = tl->sorted; i < tl->n; i++)
        if (tl->size[i] == size) {
            tl->size[i] = tl->size[--tl->n];
            return;
        }
    /* The sorted ones run largest first: the first not larger is one of
     * size (which of equal ones leaves the same list). */
    int32_t lo = 0, hi = tl->sorted;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (tl->size[mid] > size) lo = mid + 1;
        else hi = mid;
    }
    TS_ASSERT(lo < tl->sorted && tl->size[lo] == size);
    memmove(&tl->size[lo], &tl->size[lo + 1], sizeof(int64_t) * (size_t)(tl->n - lo - 1));
    tl->n--, tl->sorted--;
}

/* A tile's reservation at the top of a run of additions, into its peak.
 * Adding a buffer never lowers reserved() (the largest taken into whole
 * elements are the same ones and perhaps more, the payload grows; when it
 * passes the elements the region holds, ordinary + used elements is at
 * least what the buffers packed before, as the packed rest is at most the
 * ordinary room), so the peak is reached just before some buffer dies or at
 * the end, and it is priced only there. That needs a room of 0 or more:
 * code and tables past it (mm.ordinary < 0, a plan refused anyway) price
 * every addition. */
static void reserved_peak(tile_live *tl, const mem_map *mm, double *peak) {
    double v = (double)reserved(tl, mm);
    if (v > *peak) *peak = v;
    tl->grown = false;
}

int64_t est_tile_reserved(const machine *m, double table_max, const int64_t *sizes, int32_t n) {
    tile_live tl = {0};
    arena a;
    arena_init(&a);
    for (int32_t i = 0; i < n; i++) live_add(&a, &tl, sizes[i]);
    mem_map mm = memory_map(m, table_max);
    int64_t r = reserved(&tl, &mm);
    arena_free(&a);
    return r;
}

/* A buffer's bytes on each tile holding it, as placement requests them. */
static int64_t request_bytes(const mid_tensor *mt) {
    int64_t b = (layout_shard_bytes(&mt->lay) * mt->stack + 15) / 16 * 16;
    if (mt->lay.enc == ENC_AMP_LEFT) b += LAYOUT_AMP_PANEL_BYTES;
    return b;
}

double est_buffer_room(const machine *m, double table_max) {
    return (double)(m->loader_limit - m->tile_memory_base) - table_max - EST_CODE_BYTES;
}

static void memory_peak(const mid_program *p, const machine *m, double table_max, est_result *r, arena *a) {
    int32_t n = p->tensors.n;
    order o = {.p = p, .lv = arena_alloc(a, sizeof(live) * (size_t)(n + 1)),
               .range = arena_alloc(a, sizeof(live) * ((size_t)p->prims.n + 1))};
    for (int32_t t = 0; t < n; t++) o.lv[t] = (live){-1, -1};
    number(&o, &p->top);
    o.pos = 0;
    walk_order(&o, &p->top);
    int32_t end = o.pos;
    mem_ev *ev = arena_alloc(a, sizeof(mem_ev) * (size_t)(2 * n + 1));
    int32_t ne = 0;
    for (int32_t t = 0; t < n; t++) {
        const mid_tensor *mt = mid_t(p, t);
        if (mid_storage(p, t) != t || !mt->placed) continue;
        live l = o.lv[t];
        if (mt->kind != MT_TEMP) {
            l = (live){0, end};
            r->resident_bytes += (double)layout_shard_bytes(&mt->lay) * (double)mt->stack;
        }
        if (l.first < 0) continue;
        ev[ne++] = (mem_ev){l.first, t, false};
        ev[ne++] = (mem_ev){l.last + 1, t, true};
    }
    for (int32_t i = 0; i < p->outputs.n; i++) {
        int32_t s = mid_storage(p, p->outputs.v[i]);
        for (int32_t k = 0; k < ne; k++)
            if (ev[k].t == s && ev[k].end) ev[k].at = end + 1;
    }
    qsort(ev, (size_t)ne, sizeof(mem_ev), cmp_ev);
    mem_map mm = memory_map(m, table_max);
    bool monotone = mm.ordinary >= 0; /* else (code and tables past the room) every addition is priced */
    tile_live *tl = arena_alloc(a, sizeof(tile_live) * m->tiles);
    double *peak = arena_alloc(a, sizeof(double) * m->tiles), *rpeak = arena_alloc(a, sizeof(double) * m->tiles);
    int32_t *tiles = NULL;
    int64_t tiles_cap = 0;
    for (int32_t k = 0; k < ne; k++) {
        const mid_tensor *mt = mid_t(p, ev[k].t);
        int64_t need = layout_shards(&mt->lay) * layout_replicas(&mt->lay);
        if (need > tiles_cap) tiles = arena_alloc(a, sizeof(int32_t) * (size_t)need), tiles_cap = need;
        int64_t nt = layout_tile_list(&mt->lay, m->tiles, tiles), bytes = request_bytes(mt);
        double shard = (double)layout_shard_bytes(&mt->lay) * (double)mt->stack;
        for (int64_t i = 0; i < nt; i++) {
            tile_live *x = &tl[tiles[i]];
            if (ev[k].end) {
                if (x->grown) reserved_peak(x, &mm, &rpeak[tiles[i]]);
                live_remove(x, bytes);
                x->bytes -= shard;
                continue;
            }
            live_add(a, x, bytes);
            x->bytes += shard;
            x->grown = true;
            if (!monotone) reserved_peak(x, &mm, &rpeak[tiles[i]]);
            if (x->bytes > peak[tiles[i]]) peak[tiles[i]] = x->bytes;
        }
    }
    for (uint32_t t = 0; t < m->tiles; t++)
        if (tl[t].grown) reserved_peak(&tl[t], &mm, &rpeak[t]);
    r->peak_bytes = 0;
    r->peak_tile = 0;
    r->reserved_peak_bytes = 0;
    r->reserved_peak_tile = 0;
    for (uint32_t t = 0; t < m->tiles; t++) {
        if (peak[t] > r->peak_bytes) r->peak_bytes = peak[t], r->peak_tile = (int32_t)t;
        if (rpeak[t] > r->reserved_peak_bytes) r->reserved_peak_bytes = rpeak[t], r->reserved_peak_tile = (int32_t)t;
    }
}

void est_program(const mid_program *p, est_cache *c, est_result *r) {
    double *prim_cycles = r->prim_cycles, *prim_exchange = r->prim_exchange;
    memset(r, 0, sizeof *r);
    r->prim_cycles = prim_cycles;
    r->prim_exchange = prim_exchange;
    /* One scratch arena per call, released whole: a candidate's pricing
     * frees nothing piece by piece (its mid program has its own arena). */
    arena scratch;
    arena_init(&scratch);
    ex x = {.p = p, .m = p->m, .cache = c, .r = r, .scratch = &scratch,
            .table = arena_alloc(&scratch, sizeof(double) * p->m->tiles)};
    block_cost(&x, &p->top, 1);
    r->cycles = r->compute + r->exchange;
    for (uint32_t t = 0; t < p->m->tiles; t++) {
        r->table_bytes_total += x.table[t];
        if (x.table[t] > r->table_bytes_max) r->table_bytes_max = x.table[t];
    }
    memory_peak(p, p->m, r->table_bytes_max, r, &scratch);
    arena_free(&scratch);
}
