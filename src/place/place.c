/* place.c: liveness-aware placement of every buffer and assembly of the
 * package (place.h). */
#include "place.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Program support, a documented estimate (docs/placement.md): the code of
 * each kernel a tile runs, a descriptor per kernel run, supervisor code per
 * step of the program. */
enum { CODE_KERNEL_BYTES = 1536, CODE_RUN_BYTES = 48, CODE_STEP_BYTES = 16, SUPPORT_ALIGN = 64 };

typedef struct placer {
    const low_program *lp;
    const machine *m;
    package *pkg;
    place_xt *xt;        /* the exchange tables, planned once: counted for support, then encoded */
    uint32_t *addr;      /* per buffer */
    diag *d;
    uint8_t *blob;       /* every parameter's bytes, allocated whole in the package's arena */
    uint64_t blob_bytes, blob_cap;
} placer;

static uint64_t align_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void place_code_bytes(const low_program *lp, const machine *m, uint32_t *code) {
    uint32_t tiles = m->tiles;
    memset(code, 0, sizeof(uint32_t) * tiles);
    uint32_t *kernels = xcalloc(tiles, sizeof(uint32_t)); /* bit k: the tile runs kernel k */
    _Static_assert(KERNEL_K_COUNT <= 32, "kernel bits");
    for (int32_t i = 0; i < lp->runs.n; i++) {
        const kernel_run *r = &lp->runs.v[i];
        code[r->tile] += CODE_RUN_BYTES;
        kernels[r->tile] |= 1u << r->kernel;
    }
    for (uint32_t t = 0; t < tiles; t++)
        code[t] += (uint32_t)__builtin_popcount(kernels[t]) * CODE_KERNEL_BYTES + (uint32_t)lp->steps.n * CODE_STEP_BYTES;
    free(kernels);
}

/* Code, run descriptors and exchange tables per tile; the largest sets
 * where data starts on every tile (a buffer has one address). */
static int support(placer *p, place_stats *st, uint32_t *data_base) {
    const machine *m = p->m;
    uint32_t tiles = m->tiles;
    uint32_t *code = xmalloc(sizeof(uint32_t) * tiles), *tables = xmalloc(sizeof(uint32_t) * tiles);
    place_code_bytes(p->lp, m, code);
    place_tables_count(p->xt, tables, -1, NULL);
    uint32_t most_code = 0, most = 0;
    for (uint32_t t = 0; t < tiles; t++) {
        if (code[t] > most_code) most_code = code[t];
        if (code[t] + tables[t] > most) most = code[t] + tables[t];
        st->table_bytes_total += tables[t];
    }
    uint32_t busiest = 0;
    for (uint32_t t = 0; t < tiles; t++)
        if (tables[t] > tables[busiest]) busiest = t;
    qsort(tables, tiles, sizeof(uint32_t), cmp_u32);
    st->table_bytes_max = tables[tiles - 1];
    st->table_bytes_median = tables[tiles / 2];
    st->support_bytes = most;
    free(code);
    free(tables);
    char need[32], have[32];
    if (st->table_bytes_max > m->table_budget_bytes) {
        /* Name the phases that cost the busiest tile most. */
        uint32_t *per_tile = xmalloc(sizeof(uint32_t) * tiles), *per_step = xcalloc((size_t)p->lp->steps.n + 1, sizeof(uint32_t));
        place_tables_count(p->xt, per_tile, (int32_t)busiest, per_step);
        char top[512] = "";
        size_t at = 0;
        for (int k = 0; k < 4; k++) {
            int32_t best = -1;
            for (int32_t i = 0; i < p->lp->steps.n; i++)
                if (per_step[i] && (best < 0 || per_step[i] > per_step[best])) best = i;
            if (best < 0) break;
            at += (size_t)snprintf(top + at, sizeof top - at, "%s'%s' %u B", k ? ", " : "",
                                   p->lp->strings.v + p->lp->steps.v[best].label, per_step[best]);
            per_step[best] = 0;
        }
        free(per_tile);
        free(per_step);
        fmt_bytes(need, sizeof need, st->table_bytes_max);
        fmt_bytes(have, sizeof have, m->table_budget_bytes);
        return diag_fail_fit(p->d,
                         "%s: error: does not fit: %s's exchange tables need %s on tile %u, machine '%s' allows %s (its largest "
                         "phases: %s)",
                         p->lp->model_path, p->lp->model_name, need, busiest, m->name, have, top);
    }
    if ((uint64_t)m->tile_memory_base + most_code > m->code_limit) {
        fmt_bytes(need, sizeof need, most_code);
        fmt_bytes(have, sizeof have, m->code_limit - m->tile_memory_base);
        return diag_fail_fit(p->d, "%s: error: does not fit: %s needs %s of code on one tile, machine '%s' has %s below code_limit",
                         p->lp->model_path, p->lp->model_name, need, m->name, have);
    }
    *data_base = (uint32_t)align_to((uint64_t)m->tile_memory_base + most, SUPPORT_ALIGN);
    return 0;
}

/* Which buffers an exchange phase sends from and which it receives into, as
 * pairs to keep in separate memory elements (place_req.apart): a tile that
 * reads and writes one element in a phase is slowed (sim.c). Per phase every
 * source against every destination (a superset of the pairs some one tile
 * has, so a preference, never a rule): buffer b's partners are
 * edges[first[b], first[b + 1]), the returned array. */
static int32_t *apart_lists(const low_program *lp, int32_t nb, int32_t **first) {
    VEC(int32_t) pairs = {0};
    arena a;
    arena_init(&a);
    int32_t src[64], dst[64];
    for (int32_t s = 0; s < lp->steps.n; s++) {
        const low_step *st = &lp->steps.v[s];
        if (st->kind != LOW_STEP_EXCHANGE) continue;
        int ns = 0, nd = 0;
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            const low_frag *f = &lp->frags.v[k];
            int i = 0;
            while (i < ns && src[i] != (int32_t)f->src.buf) i++;
            if (i == ns && ns < 64) src[ns++] = (int32_t)f->src.buf;
            int j = 0;
            while (j < nd && dst[j] != (int32_t)f->dst.buf) j++;
            if (j == nd && nd < 64) dst[nd++] = (int32_t)f->dst.buf;
        }
        for (int i = 0; i < ns; i++)
            for (int j = 0; j < nd; j++)
                if (src[i] != dst[j] && src[i] < nb && dst[j] < nb) {
                    vec_push(&a, &pairs, src[i]);
                    vec_push(&a, &pairs, dst[j]);
                }
    }
    int32_t *f = xcalloc((size_t)nb + 2, sizeof(int32_t)), *fill = xcalloc((size_t)nb + 1, sizeof(int32_t));
    for (int32_t i = 0; i < pairs.n; i++) f[pairs.v[i] + 1]++;
    for (int32_t b = 0; b < nb; b++) f[b + 1] += f[b];
    int32_t *edges = xmalloc(sizeof(int32_t) * ((size_t)pairs.n + 1));
    for (int32_t i = 0; i < pairs.n; i += 2) {
        int32_t x = pairs.v[i], y = pairs.v[i + 1];
        edges[f[x] + fill[x]++] = y;
        edges[f[y] + fill[y]++] = x;
    }
    free(fill);
    arena_free(&a);
    *first = f;
    return edges;
}

static void next_shard(const layout *l, int64_t *s) {
    for (int a = l->rank - 1; a >= 0; a--) {
        if (++s[a] < l->parts[a]) return;
        s[a] = 0;
    }
}

/* Marks in buffer b's bitmap (words words) the tiles of every shard and
 * replica of layout l. */
static void mark_layout(uint64_t *bits, uint32_t words, uint32_t b, const layout *l) {
    int64_t s[LAYOUT_MAX_RANK] = {0}, reps = layout_replicas(l), shards = layout_shards(l);
    int32_t *tiles = xmalloc(sizeof(int32_t) * (size_t)reps);
    for (int64_t k = 0; k < shards; k++, next_shard(l, s)) {
        int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
        layout_shard_extent(l, s, lo, hi);
        int64_t nt = layout_owners(l, lo, tiles, reps);
        for (int64_t r = 0; r < nt; r++) bits[(size_t)b * words + (uint32_t)tiles[r] / 64] |= 1ull << ((uint32_t)tiles[r] % 64);
    }
    free(tiles);
}

/* Every buffer's tiles (package.h's bitmaps, in the package's arena): where
 * a kernel run reads or writes it, an exchange fragment leaves or lands in
 * it, its parameter data or a host binding sits. Buffers on no common tile
 * may share addresses (alloc.c's orders of last resort), and the package's
 * readers tell them apart by these. */
static uint64_t *buffer_tiles(placer *p) {
    const low_program *lp = p->lp;
    uint32_t nb = (uint32_t)lp->bufs.n, words = package_tile_words(p->m);
    uint64_t *bits = arena_alloc(&p->pkg->arena, sizeof(uint64_t) * ((size_t)nb * words + 1));
    memset(bits, 0, sizeof(uint64_t) * ((size_t)nb * words + 1));
#define MARK(b, t) (bits[(size_t)(b) * words + (t) / 64] |= 1ull << ((t) % 64))
    for (int32_t i = 0; i < lp->runs.n; i++) {
        const kernel_run *r = &lp->runs.v[i];
        for (int op = 0; op < KERNEL_MAX_OPERANDS; op++)
            if (kernel_run_uses(r, op) && r->ptr[op].buf < nb) MARK(r->ptr[op].buf, r->tile);
    }
    for (int32_t i = 0; i < lp->frags.n; i++) {
        const low_frag *f = &lp->frags.v[i];
        if (f->src.buf < nb) MARK(f->src.buf, f->src_tile);
        for (uint32_t k = 0; f->dst.buf < nb && k < f->ndst; k++) MARK(f->dst.buf, lp->dst_tiles.v[f->dst0 + k]);
    }
#undef MARK
    for (int32_t i = 0; i < lp->params.n; i++) mark_layout(bits, words, lp->params.v[i].buf, &lp->params.v[i].lay);
    for (int32_t i = 0; i < lp->bindings.n; i++) mark_layout(bits, words, lp->bindings.v[i].buf, &lp->bindings.v[i].lay);
    return bits;
}

/* What placement needs of each buffer: live steps, alignment, access tail
 * past its payload, its tiles, the buffers to keep out of its memory
 * elements, and a tile that holds it (for messages). */
static void requests(placer *p, place_req *req, int32_t *tile_of, const int32_t *apart, const int32_t *apart_first) {
    const low_program *lp = p->lp;
    int32_t nb = lp->bufs.n;
    uint8_t *flags = xcalloc((size_t)nb + 1, 1);
    for (int32_t b = 0; b < nb; b++) {
        if (lp->bufs.v[b].role != LOW_BUF_TEMP) flags[b] |= PLACE_LIVE_AT_START;
        if (lp->bufs.v[b].output) flags[b] |= PLACE_LIVE_AT_END;
    }
    place_live *live = xmalloc(sizeof(place_live) * (size_t)(nb + 1));
    place_liveness(lp, flags, live);
    for (int32_t b = 0; b < nb; b++) {
        req[b] = (place_req){.name = lp->strings.v + lp->bufs.v[b].label, .payload = lp->bufs.v[b].bytes, .align = 16,
                             .first = live[b].first, .last = live[b].last, .region = PLACE_ANY,
                             .apart = apart + apart_first[b], .napart = apart_first[b + 1] - apart_first[b],
                             .tiles = p->pkg->buf_tiles + (size_t)b * package_tile_words(p->m),
                             .tile_words = (int32_t)package_tile_words(p->m)};
        tile_of[b] = -1;
    }
    for (int32_t i = 0; i < lp->runs.n; i++) {
        const kernel_run *r = &lp->runs.v[i];
        for (int op = 0; op < KERNEL_MAX_OPERANDS; op++) {
            if (!kernel_run_uses(r, op) || r->ptr[op].buf >= (uint32_t)nb) continue;
            place_req *q = &req[r->ptr[op].buf];
            uint32_t al = kernel_operand_align((kernel_id)r->kernel, op);
            if (al > q->align) q->align = al;
            /* The footprint over every iteration ends at off + stride * (n - 1) + extent. */
            uint64_t end = (uint64_t)r->ptr[op].off + kernel_run_extent(r, op) + kernel_operand_tail((kernel_id)r->kernel, op);
            if (end > q->payload + q->tail) q->tail = (uint32_t)(end - q->payload);
            if (tile_of[r->ptr[op].buf] < 0) tile_of[r->ptr[op].buf] = (int32_t)r->tile;
        }
    }
    for (int32_t i = 0; i < lp->frags.n; i++) {
        const low_frag *f = &lp->frags.v[i];
        if (f->src.buf < (uint32_t)nb && tile_of[f->src.buf] < 0) tile_of[f->src.buf] = (int32_t)f->src_tile;
    }
    /* Buffers nothing touches (an unused input) still hold their data. */
    for (int32_t b = 0; b < nb; b++)
        if (req[b].first < 0) req[b].first = 0, req[b].last = lp->steps.n;
    free(live);
    free(flags);
}

static int assign_addresses(placer *p, place_stats *st) {
    const low_program *lp = p->lp;
    int32_t nb = lp->bufs.n;
    uint32_t data_base = p->m->tile_memory_base;
    if (support(p, st, &data_base)) return -1;
    place_req *req = xmalloc(sizeof(place_req) * (size_t)(nb + 1));
    place_slot *slot = xcalloc((size_t)nb + 1, sizeof(place_slot));
    int32_t *tile_of = xmalloc(sizeof(int32_t) * (size_t)(nb + 1)), failed = -1, *apart_first;
    int32_t *apart = apart_lists(lp, nb, &apart_first);
    p->pkg->buf_tiles = buffer_tiles(p);
    requests(p, req, tile_of, apart, apart_first);
    char why[1536];
    place_shortfall sf = {0};
    int rc = place_assign(p->m, data_base, req, nb, slot, &failed, why, sizeof why, &sf, &st->shared_addresses);
    if (rc) {
        /* What no plan can change: the parameters' bytes spread evenly. */
        double params = lp->param_bytes;
        char all[32], each[32], room[32], need[32], over[32];
        int tile = tile_of[failed] >= 0 ? tile_of[failed] : 0;
        fmt_bytes(all, sizeof all, params);
        fmt_bytes(each, sizeof each, params / p->m->tiles);
        fmt_bytes(room, sizeof room, (double)sf.room);
        fmt_bytes(need, sizeof need, (double)sf.need);
        fmt_bytes(over, sizeof over, (double)(sf.need > sf.room ? sf.need - sf.room : 0));
        /* One plain sentence first (which tile, whose buffers, how much too
         * much), then the detail. */
        if (sf.need > sf.room)
            diag_fail_fit(p->d,
                          "%s: error: does not fit machine '%s': tile %d needs %s at once for '%s' and the buffers live beside "
                          "it, %s more than its %s for data\n",
                          lp->model_path, p->m->name, tile, need, req[failed].name ? req[failed].name : "?", over, room);
        else {
            fmt_bytes(over, sizeof over, (double)(sf.room - sf.need));
            diag_fail_fit(p->d,
                          "%s: error: does not fit machine '%s': tile %d has %s free but in gaps too small for '%s' beside "
                          "the buffers live with it\n",
                          lp->model_path, p->m->name, tile, over, req[failed].name ? req[failed].name : "?");
        }
        size_t at = strlen(p->d->text);
        snprintf(p->d->text + at, sizeof p->d->text - at,
                 "  detail: tile %d: %s\n  the parameters take %s in all, %s of every tile's %s even spread over the %u tiles\n",
                 tile, why, all, each, room, p->m->tiles);
    } else {
        /* The fullest tile: the highest byte any buffer it uses reserves. */
        uint64_t *end = xcalloc(p->m->tiles, sizeof(uint64_t));
        for (int32_t i = 0; i < lp->runs.n; i++) {
            const kernel_run *r = &lp->runs.v[i];
            for (int op = 0; op < KERNEL_MAX_OPERANDS; op++) {
                if (!kernel_run_uses(r, op)) continue;
                uint64_t e = slot[r->ptr[op].buf].addr + slot[r->ptr[op].buf].reserved;
                if (e > end[r->tile]) end[r->tile] = e;
            }
        }
        for (int32_t i = 0; i < lp->frags.n; i++) {
            const low_frag *f = &lp->frags.v[i];
            uint64_t e = slot[f->src.buf].addr + slot[f->src.buf].reserved;
            if (e > end[f->src_tile]) end[f->src_tile] = e;
            e = slot[f->dst.buf].addr + slot[f->dst.buf].reserved;
            for (uint32_t k = 0; k < f->ndst; k++)
                if (e > end[lp->dst_tiles.v[f->dst0 + k]]) end[lp->dst_tiles.v[f->dst0 + k]] = e;
        }
        st->tile_bytes = data_base - p->m->tile_memory_base;
        for (uint32_t t = 0; t < p->m->tiles; t++)
            if (end[t] > p->m->tile_memory_base && end[t] - p->m->tile_memory_base > st->tile_bytes) {
                st->tile_bytes = (uint32_t)(end[t] - p->m->tile_memory_base);
                st->peak_tile = t;
            }
        free(end);
        /* The package keeps every buffer: its live steps and where it went. */
        for (int32_t b = 0; b < nb; b++) {
            p->addr[b] = slot[b].addr;
            if (lp->bufs.v[b].role == LOW_BUF_PARAM) st->param_bytes += (uint32_t)slot[b].reserved;
            low_buf pb = lp->bufs.v[b];
            pb.first = req[b].first;
            pb.last = req[b].last;
            pb.addr = slot[b].addr;
            pb.reserved = (uint32_t)slot[b].reserved;
            vec_push(&p->pkg->arena, &p->pkg->prog.bufs, pb);
        }
        st->buffers = nb;
    }
    free(req);
    free(slot);
    free(tile_of);
    free(apart);
    free(apart_first);
    return rc;
}

static kernel_addr absolute(const placer *p, kernel_addr a) {
    TS_ASSERT(a.buf < (uint32_t)p->lp->bufs.n);
    return (kernel_addr){.buf = KERNEL_ABSOLUTE, .off = p->addr[a.buf] + a.off, .iter_stride = a.iter_stride};
}

static void copy_program(placer *p) {
    low_program *dst = &p->pkg->prog;
    arena *a = &p->pkg->arena;
    const low_program *src = p->lp;
    for (int32_t i = 0; i < src->steps.n; i++) vec_push(a, &dst->steps, src->steps.v[i]);
    for (int32_t i = 0; i < src->runs.n; i++) {
        kernel_run r = src->runs.v[i];
        for (int k = 0; k < KERNEL_MAX_OPERANDS; k++)
            r.ptr[k] = kernel_run_uses(&r, k) ? absolute(p, r.ptr[k]) : (kernel_addr){.buf = KERNEL_ABSOLUTE};
        kernel_run_canonical(&r); /* what the package holds of it, so a loaded run is this run */
        vec_push(a, &dst->runs, r);
    }
    for (int32_t i = 0; i < src->strings.n; i++) vec_push(a, &dst->strings, src->strings.v[i]);
}

/* ---- parameter data ------------------------------------------------------------- */

typedef struct shard_img {
    const float *values;   /* one layer of the parameter, row-major */
    dtype dt;
    int scale;
    uint8_t *bytes;        /* that layer's storage in one shard */
} shard_img;

static void encode_span(void *ctx, const int64_t *s, int64_t off, int64_t elem, int64_t n) {
    (void)s;
    shard_img *c = ctx;
    num_encode_buf(c->dt, c->scale, c->values + elem, c->bytes + off, (size_t)n);
}

/* Blob bytes a parameter takes: every shard's storage, layer after layer. */
static uint64_t param_bytes(const low_param *pp) {
    return (uint64_t)(layout_shard_bytes(&pp->lay) * pp->stack * layout_shards(&pp->lay));
}

/* A parameter's shards, encoded layer by layer (a stacked parameter is
 * generated one layer at a time, never whole in f32) straight into the blob
 * (allocated whole and zeroed, so padding is zero), one blob range per shard
 * that every replica's tile points at. */
static int add_param(placer *p, const low_param *pp) {
    int64_t layer = pp->layer;
    const layout *l = &pp->lay;
    int64_t sb = layout_shard_bytes(l), shards = layout_shards(l), stride = sb * pp->stack;
    uint8_t *img = p->blob + p->blob_bytes; /* every shard's image, layer after layer */
    TS_ASSERT(p->blob_bytes + param_bytes(pp) <= p->blob_cap);
    float *values = xmalloc(sizeof(float) * (size_t)(layer ? layer : 1));
    int64_t s[LAYOUT_MAX_RANK] = {0}, reps = layout_replicas(l);
    for (int64_t i = 0; i < pp->stack; i++) {
        if (p->lp->values(p->lp->values_ctx, pp->source, i * layer, layer, values, p->d)) {
            free(values);
            return -1;
        }
        memset(s, 0, sizeof s);
        for (int64_t k = 0; k < shards; k++, next_shard(l, s)) {
            shard_img c = {values, (dtype)pp->dtype, pp->scale, img + k * stride + i * sb};
            layout_spans(l, s, encode_span, &c);
        }
    }
    free(values);
    int32_t b = (int32_t)pp->buf, *tiles = xmalloc(sizeof(int32_t) * (size_t)reps);
    memset(s, 0, sizeof s);
    for (int64_t k = 0; k < shards; k++) {
        uint64_t off = p->blob_bytes;
        p->blob_bytes += (uint64_t)stride;
        int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK];
        layout_shard_extent(l, s, lo, hi);
        int64_t nt = layout_owners(l, lo, tiles, reps);
        TS_ASSERT(nt <= reps);
        for (int64_t r = 0; r < nt; r++) {
            pkg_segment seg = {.tile = (uint32_t)tiles[r], .addr = p->addr[b], .bytes = (uint32_t)stride, .blob_off = off};
            vec_push(&p->pkg->arena, &p->pkg->segments, seg);
        }
        next_shard(l, s);
    }
    free(tiles);
    return 0;
}

static int cmp_segment(const void *a, const void *b) {
    const pkg_segment *x = a, *y = b;
    if (x->tile != y->tile) return x->tile < y->tile ? -1 : 1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static const pkg_role ROLES[] = {[LOW_BIND_INPUT] = PKG_INPUT, [LOW_BIND_OUTPUT] = PKG_OUTPUT, [LOW_BIND_PROBE] = PKG_PROBE};

static void add_binding(placer *p, const low_binding *lb) {
    pkg_binding b = {.name = arena_strdup(&p->pkg->arena, lb->name),
                     .role = (uint8_t)ROLES[lb->role],
                     .dtype = (dtype)lb->dtype,
                     .scale = lb->scale,
                     .layout = lb->lay,
                     .addr = p->addr[lb->buf],
                     .step = lb->step};
    vec_push(&p->pkg->arena, &p->pkg->bindings, b);
}

int place_package(const low_program *lp, const machine *m, const char *meta_json, bool data, package *out, place_stats *st,
                  diag *d) {
    memset(st, 0, sizeof *st);
    package_init(out);
    out->machine = *m;
    out->fingerprint = machine_fingerprint(m);
    placer p = {.lp = lp, .m = m, .pkg = out, .d = d, .addr = xcalloc((size_t)lp->bufs.n + 1, sizeof(uint32_t))};
    progress_stage("place", "planning the exchange tables");
    p.xt = place_tables_plan(lp, m);
    progress_stage("place", "assigning buffer addresses");
    int rc = assign_addresses(&p, st);
    if (rc == 0) {
        copy_program(&p);
        /* The exchanges: every tile's tables, from the plan support() counted. */
        progress_stage("place", "encoding the exchange tables");
        rc = place_tables_encode(p.xt, p.addr, out, d);
    }
    if (rc == 0) {
        if (data) {
            progress_stage("place", "writing the parameters");
            for (int32_t i = 0; i < lp->params.n; i++) p.blob_cap += param_bytes(&lp->params.v[i]);
            if (p.blob_cap) { /* arena_grow: room left in the newest block, else a block of its own, so the
                                 arena's next blocks do not double from it */
                p.blob = arena_grow(&out->arena, NULL, 0, (size_t)p.blob_cap);
                memset(p.blob, 0, (size_t)p.blob_cap);
            }
        }
        for (int32_t i = 0; i < lp->params.n && rc == 0 && data; i++) {
            char what[300];
            snprintf(what, sizeof what, "writing parameter '%s'", lp->params.v[i].name);
            progress_stage("place", what);
            rc = add_param(&p, &lp->params.v[i]);
        }
        if (out->segments.n) qsort(out->segments.v, (size_t)out->segments.n, sizeof(pkg_segment), cmp_segment);
        /* The package owns its blob through its arena, as a loaded one does:
         * it was encoded there (a SigLIP blob is 421 MiB; no second copy). */
        out->blob = p.blob ? p.blob : arena_alloc(&out->arena, 0);
        out->blob_bytes = p.blob_bytes;
        for (int32_t i = 0; i < lp->bindings.n; i++) add_binding(&p, &lp->bindings.v[i]);
        out->meta = arena_strdup(&out->arena, meta_json ? meta_json : "{}");
    }
    place_tables_free(p.xt);
    free(p.addr);
    if (rc) package_free(out);
    return rc;
}
