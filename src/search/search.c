/* search.c: candidates, the greedy start and the local search (search.h). */
#include "search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return cdiv(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- what a plan must leave room for ------------------------------------------------------- */

static double param_bytes(const graph *g) {
    double params = 0;
    for (int32_t i = 0; i < g->ops.n; i++)
        if (graph_opr(g, i)->kind == OP_PARAM) {
            const graph_type *t = &graph_val(g, graph_opr(g, i)->out[0])->type;
            params += (double)graph_type_numel(t) * dtype_bytes(t->dtype);
        }
    return params;
}

/* Every tile holds one shard of each parameter at the same address, so what
 * a parameter costs each tile is its size over its number of distinct
 * shards. Parameters get at most half of each tile: cut into at least this
 * many distinct shards, all of them fit. */
int64_t search_min_pieces(const graph *g, const machine *m) {
    return (int64_t)(param_bytes(g) / (0.5 * machine_tile_bytes(m))) + 1;
}

/* The rest of a tile, once parameters spread over every tile (with a tenth
 * for uneven shards) and the program's code and exchange tables (at most
 * their budget) have theirs: what one matmul's temporaries may take. */
static double temp_bytes(const graph *g, const machine *m) {
    return machine_tile_bytes(m) - 1.1 * param_bytes(g) / m->tiles - m->table_budget_bytes;
}

/* ---- candidates ------------------------------------------------------------------------------ */

typedef struct cand {
    mid_gemm_plan c;
    double score;
} cand;

/* An op's alternatives, best-scored first: v streaming A (the AMP's rows
 * are A's), w streaming B (mid_gemm_plan.swap; swappable sites only). */
typedef struct op_alts {
    cand v[SEARCH_ALTERNATIVES];
    int n;
    cand w[SEARCH_ALTERNATIVES];
    int nw;
    bool stageable; /* the site's B may be staged (mid_gemm_site.b_stageable) */
} op_alts;

/* Alternatives of the other stream proposed beside the current one's. */
enum { SEARCH_OTHER_STREAM = 2 };

typedef struct state {
    const graph *g;
    const machine *m;
    int64_t min_pieces;
    double temp_bytes;
    op_alts *alts;       /* per graph op */
    const mid_plan *start; /* choices given (a recipe), or NULL */
    bool reserved;       /* judge memory by the estimated reservations, not the payload */
} state;

/* A grid's cost alone: the busiest tile's AMP run, its operands' delivery at
 * the exchange rate, and for a K split the partials' exchange, a phase and
 * their reduction. A parameter cut into fewer pieces than it needs to fit is
 * priced out unless no grid has them. */
static double score(const state *st, const mid_gemm_site *s, int64_t G, const mid_gemm_plan *c) {
    const machine *m = st->m;
    int64_t R = cdiv(s->M, c->bm), C = cdiv(s->N, c->bn), Kp = cdiv(s->K, c->bk);
    /* With B streaming the kernel's rows are B's columns. */
    machine_gemm gm = {s->a, s->b, s->acc, (uint64_t)G, (uint64_t)c->bm, (uint64_t)c->bn, (uint64_t)c->bk, true, true};
    if (c->swap) gm = (machine_gemm){s->b, s->a, s->acc, (uint64_t)G, (uint64_t)c->bn, (uint64_t)c->bm, (uint64_t)c->bk, true, true};
    double amp = (double)machine_gemm_block_cycles(m, &gm, (uint64_t)c->col_run, c->panel_batch);
    /* Resident operands (parameters) are loaded where they are used: only
     * computed ones are delivered. */
    double bytes_in = (double)G * ((s->a_param ? 0 : (double)c->bm * c->bk * dtype_bytes(s->a)) +
                                   (s->b_param ? 0 : (double)c->bk * c->bn * dtype_bytes(s->b)));
    double cost = amp + bytes_in / m->exchange_bytes_per_cycle;
    /* A staged weight is gathered onto the grid every run: a tile's block, in a phase of its own. */
    if (c->stage_b)
        cost += (double)G * c->bk * c->bn * dtype_bytes(s->b) / m->exchange_bytes_per_cycle + m->sync_cycles +
                m->exchange_latency_cycles;
    if (Kp > 1) {
        double part = (double)G * c->bm * c->bn * dtype_bytes(c->partials);
        uint64_t lanes = dtype_bytes(c->partials) > 2 || dtype_bytes(s->out) > 2 ? 2 : 1;
        cost += part * (double)(Kp - 1) / (double)Kp / m->exchange_bytes_per_cycle + m->sync_cycles +
                m->exchange_latency_cycles +
                (double)machine_reduce_cycles(m, (uint64_t)Kp,
                                              (uint64_t)(G * (c->swap ? c->bm * cdiv(c->bn, Kp) : cdiv(c->bm, Kp) * c->bn)), lanes, false, false);
    }
    int64_t pieces_a = s->a_param ? st->min_pieces : 1, pieces_b = s->b_param && !c->stage_b ? st->min_pieces : 1;
    int64_t short_b = pieces_b - C * Kp, short_a = pieces_a - R * Kp;
    if (short_b > 0) cost += 1e15 * (double)short_b;
    if (short_a > 0) cost += 1e15 * (double)short_a;
    return cost;
}

static void keep(op_alts *a, const cand *c) {
    cand *v = c->c.swap ? a->w : a->v;
    int *pn = c->c.swap ? &a->nw : &a->n;
    for (int k = 0; k < *pn; k++)
        if (mid_gemm_plan_equal(&v[k].c, &c->c)) return; /* a grid reached twice (a rounded row block) */
    int n = *pn, i = n;
    while (i > 0 && v[i - 1].score > c->score) i--; /* stable: equal scores keep enumeration order */
    if (i >= SEARCH_ALTERNATIVES) return;
    if (n == SEARCH_ALTERNATIVES) n--;
    memmove(&v[i + 1], &v[i], sizeof(cand) * (size_t)(n - i));
    v[i] = *c;
    *pn = n + 1;
}

/* Every distinct grid once: a part count giving the same block as the
 * previous one is the same grid. Column blocks are whole 32-element groups
 * (two AMP column panels, and one 8-bit AMP-left panel of a consumer that
 * takes the result as its left operand, so a retile moves whole panel rows)
 * unless that leaves a weight too few pieces; then 16, one column panel. */
enum { COL_GRANULE = 32 };

/* A grid is kept once, in its best-scored variant (variants are the local
 * search's separate proposals): partials stored in the chain dtype or (K
 * split, f32 chains) in f16, halving their exchange and reduction; one run
 * per tile or per AMP column panel, or one batch of the block's panels; a
 * weight stored in the grid or (rows split) staged. */
static cand best_variant(const state *st, const mid_gemm_site *s, int64_t G, mid_gemm_plan c) {
    const machine *m = st->m;
    bool split = cdiv(s->K, c.bk) > 1;
    /* Partials in the chain dtype, unless that leaves the tile no room: then
     * f16, as the IPU's AMP writes them (each tile's chain stays in acc). */
    double temps = (double)G * ((double)c.bm * c.bk * dtype_bytes(s->a) + 2.0 * c.bm * c.bn * dtype_bytes(s->acc));
    bool must_f16 = split && s->acc == DT_F32 && temps > st->temp_bytes;
    int64_t kc = c.swap ? c.bm : c.bn; /* the kernel's columns */
    bool wide = kc > m->amp_col_panel, rows_split = cdiv(s->M, c.bm) > 1;
    cand best = {.score = INFINITY};
    for (int pv = must_f16 ? 1 : 0; pv < (split && s->acc == DT_F32 ? 2 : 1); pv++)
        for (int rv = 0; rv < (wide ? 2 : 1); rv++)
            for (int ov = 0; ov < (rv == 0 && wide && !s->fused ? 2 : 1); ov++)
                for (int sv = 0; sv < (s->b_stageable && rows_split ? 2 : 1); sv++) {
                    c.partials = pv ? DT_F16 : s->acc;
                    c.col_run = rv ? m->amp_col_panel : kc;
                    c.panel_batch = ov;
                    c.stage_b = sv;
                    double sc = score(st, s, G, &c);
                    if (sc < best.score) best = (cand){.c = c, .score = sc};
                }
    return best;
}

static void candidates(const state *st, const mid_gemm_site *s, op_alts *out) {
    const machine *m = st->m;
    mid_gemm_plan base = {.partials = s->acc};
    int64_t left = m->tiles, G = 1;
    for (int j = 0; j < s->nb; j++) {
        int64_t p = s->b_broadcast ? 1 : min64(s->batch[j], left);
        p = cdiv(s->batch[j], cdiv(s->batch[j], p));
        base.batch_parts[j] = p;
        left /= p;
        G *= cdiv(s->batch[j], p);
    }
    int64_t M = s->M, N = s->N, K = s->K, kblock = m->amp_k_block;
    int64_t pieces_b = s->b_param && !s->b_stageable ? st->min_pieces : 1;
    out->n = out->nw = 0;
    for (int swap = 0; swap < (s->swappable ? 2 : 1); swap++) {
        /* With B streaming its columns are the kernel's rows, any number of them. */
        int64_t gran = swap ? 1 : cdiv(N, COL_GRANULE) * cdiv(K, kblock) >= pieces_b ? COL_GRANULE : m->amp_col_panel;
        for (int64_t R = 1, prev_m = 0; R <= min64(M, left); R++) {
            int64_t bm0 = cdiv(M, R);
            if (bm0 == prev_m) continue;
            prev_m = bm0;
            for (int64_t C = 1, prev_n = 0; C <= min64(cdiv(N, gran), left / R); C++) {
                int64_t bn0 = N < gran ? N : min64(round_up(cdiv(N, C), gran), N);
                if (bn0 == prev_n) continue;
                prev_n = bn0;
                int64_t Cr = cdiv(N, bn0);
                for (int64_t Kp = 1, prev_k = 0; Kp <= min64(cdiv(K, kblock), left / (R * Cr)); Kp++) {
                    int64_t bk = round_up(cdiv(K, Kp), kblock);
                    if (bk > K) bk = K;
                    if (bk == prev_k) continue;
                    prev_k = bk;
                    int64_t Kr = cdiv(K, bk);
                    /* Row blocks of ceil(M / R) (with B streaming, column blocks), or (K
                     * split) rounded up to a multiple of the K parts, so the reduction's
                     * blocks nest in the grid's: fewer fragments when the rounding costs
                     * the AMP nothing. */
                    int64_t cut = swap ? bn0 : bm0;
                    for (int nest = 0; nest < (Kr > 1 && cut % Kr ? 2 : 1); nest++) {
                        mid_gemm_plan c = base;
                        c.bm = !swap && nest ? round_up(bm0, Kr) : bm0; /* may pass M: only rows that exist are stored */
                        c.bn = swap && nest ? round_up(bn0, Kr) : bn0;
                        c.bk = bk;
                        c.swap = swap;
                        /* Streaming B, the partials are summed in the grid (a consumer's
                         * row-major layout would transpose them element by element). */
                        c.sum_at_consumer = Kr > 1 && !s->fused && !swap;
                        if (cdiv(M, c.bm) * cdiv(N, c.bn) * Kr > left) continue;
                        cand best = best_variant(st, s, G, c);
                        keep(out, &best);
                    }
                }
            }
        }
    }
}

static int choose(void *ctx, const mid_gemm_site *s, mid_gemm_plan *out, diag *d) {
    state *st = ctx;
    op_alts *a = &st->alts[s->op];
    candidates(st, s, a);
    a->stageable = s->b_stageable;
    if (st->start && s->op < st->start->nops && st->start->has[s->op]) {
        *out = st->start->gemm[s->op]; /* given: expansion checks it fits the op */
        return 0;
    }
    if (!a->n && !a->nw) return graph_fail_op(st->g, s->op, d, "no tile grid of machine '%s' can run this matmul", st->m->name);
    /* The first start streams A wherever it can; the second (search_plan)
     * takes each op's best score of either stream. */
    *out = a->n ? a->v[0].c : a->w[0].c;
    return 0;
}

/* ---- evaluating a plan ---------------------------------------------------------------------- */

typedef struct eval {
    double cycles, peak, table_max;
    double tables_over;  /* table_max past the machine's table budget, else 0 */
    bool ok;
    bool unmade;   /* a proposed elementwise layout expansion recorded as the rule's: the base plan again */
} eval;

static eval price(const state *st, const mid_program *mid, est_cache *cache) {
    est_result r = {0};
    est_program(mid, cache, &r);
    double over = r.table_bytes_max - (double)st->m->table_budget_bytes;
    return (eval){r.cycles, st->reserved ? r.reserved_peak_bytes : r.peak_bytes, r.table_bytes_max, over > 0 ? over : 0, true,
                  false};
}

/* A plan whose every choice is made, expanded and priced; not ok when it does not expand. */
static eval evaluate(const state *st, mid_plan *pl, est_cache *cache) {
    mid_program mid;
    diag d = {0};
    eval e = {0};
    if (mid_build(st->g, st->m, pl, &mid, NULL, &d) == 0) {
        e = price(st, &mid, cache);
        mid_free(&mid);
    }
    return e;
}

/* ---- local search ------------------------------------------------------------------------- */

typedef struct proposal {
    const state *st;
    const mid_plan *base;
    est_cache *cache;
    int32_t op;
    const cand *alt;     /* a matmul's grid, or NULL: */
    int32_t parts;       /* a layer norm's row parts, or 0: */
    eval *out;
    int ew;              /* an elementwise op's layout (mid_ew_layout) */
    int32_t cast;        /* a cast site of op: its ordinal, moved early or back late, or -1 */
} proposal;

static bool ew_proposal(const proposal *p) { return !p->alt && !p->parts && p->cast < 0; }

static void apply_proposal(mid_plan *pl, const proposal *p) {
    if (p->cast >= 0) pl->cast_early[p->op] ^= 1ull << p->cast;
    else if (p->alt) pl->gemm[p->op] = p->alt->c;
    else if (p->parts) pl->row_parts[p->op] = p->parts;
    else pl->ew_layout[p->op] = (int8_t)p->ew;
}

static void run_proposals(void *ctx, int64_t b, int64_t e) {
    proposal *p = ctx;
    for (int64_t i = b; i < e; i++) {
        mid_plan pl;
        mid_plan_copy(&pl, p[i].base);
        pl.choose = NULL;
        apply_proposal(&pl, &p[i]);
        *p[i].out = evaluate(p[i].st, &pl, p[i].cache);
        if (ew_proposal(&p[i]) && pl.ew_layout[p[i].op] != p[i].ew) *p[i].out = (eval){.unmade = true};
        mid_plan_free(&pl);
    }
}

/* The variants of choice c one change away: the weight staged or not (rows
 * split), the other partials dtype (K split, f32 chains), the other runs per
 * tile (block wider than a panel), the block's panels batched or not (one
 * run per block), the partials summed where the result is wanted or in the
 * grid's rows (K split, not fused). */
enum { SEARCH_VARIANTS = 6 }; /* the most variants() gives */

static int variants(const machine *m, const graph *g, int32_t op, bool stageable, const mid_gemm_plan *c, cand *out) {
    mid_gemm_site s;
    mid_gemm_site_of(g, op, &s);
    int n = 0;
    int64_t kc = c->swap ? c->bm : c->bn; /* the kernel's columns */
    if (stageable && cdiv(s.M, c->bm) > 1) {
        out[n] = (cand){.c = *c};
        out[n++].c.stage_b = !c->stage_b;
    }
    if (cdiv(s.K, c->bk) > 1 && s.acc == DT_F32) {
        out[n] = (cand){.c = *c};
        out[n++].c.partials = c->partials == DT_F16 ? DT_F32 : DT_F16;
    }
    if (kc > m->amp_col_panel) {
        out[n] = (cand){.c = *c};
        out[n].c.col_run = c->col_run == kc ? m->amp_col_panel : kc;
        out[n++].c.panel_batch = false;
    }
    if (kc > m->amp_col_panel && c->col_run == kc && !s.fused) {
        out[n] = (cand){.c = *c};
        out[n++].c.panel_batch = !c->panel_batch;
    }
    if (cdiv(s.K, c->bk) > 1 && !s.fused && !c->swap) {
        out[n] = (cand){.c = *c};
        out[n++].c.sum_at_consumer = !c->sum_at_consumer;
    }
    if (s.swappable) { /* the other operand streams: one run per block */
        out[n] = (cand){.c = *c};
        out[n].c.swap = !c->swap;
        out[n].c.col_run = out[n].c.swap ? c->bm : c->bn;
        out[n].c.panel_batch = false;
        out[n++].c.sum_at_consumer = false;
    }
    return n;
}

/* Whether plan e fits: its estimated peak within the buffers' room and its
 * busiest tile's exchange tables within the machine's table budget. */
static bool fits(const eval *e, double room) { return e->peak <= room && e->tables_over == 0; }

/* Whether plan e improves on cur, the buffers' room given: a plan that
 * fits improves on one that does not, and among plans that fit the faster
 * is better; while none fits, the one nearer to fitting is (tables first,
 * then the smaller peak; the faster on a tie), so that a start that does
 * not fit moves towards one that does. */
enum { KEEP, TOO_BIG, SLOWER };
static int verdict(const eval *e, const eval *cur, double room) {
    bool e_fits = fits(e, room), cur_fits = fits(cur, room);
    if (e_fits != cur_fits) return e_fits ? KEEP : TOO_BIG;
    if (!e_fits && e->tables_over != cur->tables_over) return e->tables_over < cur->tables_over ? KEEP : TOO_BIG;
    if (!e_fits && e->peak != cur->peak) return e->peak < cur->peak ? KEEP : TOO_BIG;
    return e->cycles < cur->cycles * (1 - 1e-9) ? KEEP : SLOWER;
}

/* The plans one change from base at op, from props[n] on (at most `limit`
 * in all; returns the new count), each priced into res at its own slot: the
 * op's alternatives in its current stream and the other stream's best few,
 * then its current grid's other variants (written to var). */
static int op_proposals(const state *st, const mid_plan *base, est_cache *cache, int32_t op, cand *var, proposal *props,
                        eval *res, int n, int64_t limit) {
    const op_alts *a = &st->alts[op];
    bool sw = base->gemm[op].swap;
    const cand *mine = sw ? a->w : a->v, *other = sw ? a->v : a->w;
    int nmine = sw ? a->nw : a->n, nother = sw ? a->n : a->nw;
    if (nother > SEARCH_OTHER_STREAM) nother = SEARCH_OTHER_STREAM;
    for (int i = 0; i < nmine + nother && n < limit; i++) {
        const cand *c = i < nmine ? &mine[i] : &other[i - nmine];
        if (!mid_gemm_plan_equal(&c->c, &base->gemm[op])) props[n] = (proposal){st, base, cache, op, c, 0, &res[n], 0, -1}, n++;
    }
    int nv = variants(st->m, st->g, op, a->stageable, &base->gemm[op], var);
    for (int i = 0; i < nv && n < limit; i++) props[n] = (proposal){st, base, cache, op, &var[i], 0, &res[n], 0, -1}, n++;
    return n;
}

/* A layer norm's rows whole or cut over 2 or 4 tiles (expansion keeps
 * whole rows where the machine lacks the tiles), but for its current cut. */
static const int32_t ROW_PARTS[] = {1, 2, 4};

static int parts_proposals(const state *st, const mid_plan *base, est_cache *cache, int32_t op, proposal *props, eval *res,
                           int64_t limit) {
    int n = 0;
    int32_t cur = base->row_parts[op] > 1 ? base->row_parts[op] : 1;
    for (size_t i = 0; i < TS_COUNT(ROW_PARTS) && n < limit; i++)
        if (ROW_PARTS[i] != cur) props[n] = (proposal){st, base, cache, op, NULL, ROW_PARTS[i], &res[n], 0, -1}, n++;
    return n;
}

/* An elementwise op's other layouts (mid_ew_layout): its second operand's
 * (two operands), spread, the rule's. One the expansion cannot make comes
 * back unmade and is not counted. */
static int ew_proposals(const state *st, const mid_plan *base, est_cache *cache, int32_t op, proposal *props, eval *res,
                        int64_t limit) {
    int n = 0;
    for (int v = 0; v < MID_EWL_COUNT && n < limit; v++)
        if (v != base->ew_layout[op] && (v != MID_EWL_SECOND || graph_opr(st->g, op)->nin == 2))
            props[n] = (proposal){st, base, cache, op, NULL, 0, &res[n], v, -1}, n++;
    return n;
}

/* ---- beam ------------------------------------------------------------------------------------ */

static bool plans_equal(const mid_plan *a, const mid_plan *b) {
    if (a->casts_all_early != b->casts_all_early) return false;
    for (int32_t i = 0; i < a->nops; i++)
        if (a->has[i] != b->has[i] || (a->has[i] && !mid_gemm_plan_equal(&a->gemm[i], &b->gemm[i])) ||
            a->row_parts[i] != b->row_parts[i] || a->ew_layout[i] != b->ew_layout[i] ||
            (!a->casts_all_early && a->cast_early[i] != b->cast_early[i]))
            return false;
    return true;
}

typedef struct beam_plan {
    mid_plan pl;
    eval e;
} beam_plan;

static void push_finalist(search_result *r, const mid_plan *pl, double cycles, bool fits);

/* A beam over the program's matmuls, in program order: the `width` best
 * plans so far, each extended by every alternative grid of the next matmul
 * (its own stream's and the other's best) and every variant of its current
 * grid (the local search's one-change proposals), each extension expanded and priced
 * whole; the best `width` distinct plans of them and their bases go on.
 * Two choices that pay only together (one matmul's grid freeing the memory
 * another's needs) are found where the local search, one change at a time,
 * cannot cross the plan between them. Extensions are priced in parallel into
 * their own slots and ranked in order (ties: the earlier), so the result does
 * not depend on the thread count. *pl and *cur become the best plan. */
static void beam(const state *st, int width, const int32_t *ops, int32_t nops, mid_plan *pl, eval *cur, double room,
                 est_cache *cache, search_result *r, bool quiet) {
    beam_plan *b = xcalloc((size_t)width, sizeof(beam_plan));
    int nb = 1;
    mid_plan_copy(&b[0].pl, pl);
    b[0].e = *cur;
    int cap = width * (SEARCH_ALTERNATIVES + SEARCH_OTHER_STREAM + SEARCH_VARIANTS);
    cand(*var)[SEARCH_VARIANTS] = xcalloc((size_t)width, sizeof *var);
    proposal *props = xcalloc((size_t)cap + 1, sizeof(proposal));
    eval *res = xcalloc((size_t)cap + 1, sizeof(eval));
    int *from = xcalloc((size_t)cap + 1, sizeof(int));
    bool *taken = xcalloc((size_t)(cap + width) + 1, sizeof(bool));
    progress pg;
    progress_begin(&pg, "beam", nops, quiet);
    for (int32_t k = 0; k < nops; k++) {
        int32_t op = ops[k];
        int n = 0;
        for (int j = 0; j < nb; j++) {
            int n0 = n;
            n = op_proposals(st, &b[j].pl, cache, op, var[j], props, res, n, cap);
            for (int i = n0; i < n; i++) from[i] = j;
        }
        util_parallel(n, 1, run_proposals, props);
        r->beam_evaluations += n;
        r->evaluations += n;
        /* The next beam: the best of the bases (slots 0..nb) and the extensions, distinct. */
        beam_plan *next = xcalloc((size_t)width, sizeof(beam_plan));
        int nn = 0;
        memset(taken, 0, sizeof(bool) * (size_t)(n + nb));
        while (nn < width) {
            int best = -1;
            const eval *be = NULL;
            for (int i = 0; i < nb + n; i++) {
                const eval *e = i < nb ? &b[i].e : &res[i - nb];
                if (taken[i] || !e->ok) continue;
                if (best < 0 || verdict(e, be, room) == KEEP) best = i, be = e;
            }
            if (best < 0) break;
            taken[best] = true;
            mid_plan cand_pl;
            if (best < nb) {
                mid_plan_copy(&cand_pl, &b[best].pl);
            } else {
                mid_plan_copy(&cand_pl, &b[from[best - nb]].pl);
                cand_pl.gemm[op] = props[best - nb].alt->c;
            }
            bool dup = false;
            for (int i = 0; i < nn && !dup; i++) dup = plans_equal(&next[i].pl, &cand_pl);
            if (dup) {
                mid_plan_free(&cand_pl);
                continue;
            }
            next[nn].pl = cand_pl;
            next[nn++].e = *be;
        }
        if (nn && verdict(&next[0].e, &b[0].e, room) == KEEP) {
            search_step s = {op, b[0].e.cycles, next[0].e.cycles, true, -1, false};
            vec_push(&r->arena, &r->steps, s);
            push_finalist(r, &next[0].pl, next[0].e.cycles, fits(&next[0].e, room));
        }
        for (int j = 0; j < nb; j++) mid_plan_free(&b[j].pl);
        free(b);
        b = next, nb = nn;
        char detail[160];
        snprintf(detail, sizeof detail, "%.0f cycles predicted", b[0].e.cycles);
        progress_step(&pg, k + 1, detail);
    }
    progress_end(&pg);
    if (verdict(&b[0].e, cur, room) == KEEP) {
        mid_plan_free(pl);
        mid_plan_copy(pl, &b[0].pl);
        *cur = b[0].e;
    }
    for (int j = 0; j < nb; j++) mid_plan_free(&b[j].pl);
    free(b);
    free(props);
    free(res);
    free(from);
    free(taken);
    free(var);
}

/* Kept plans are the finalists, the latest first: once one fits, only
 * plans that fit are kept, so those that fit come first. */
static void push_finalist(search_result *r, const mid_plan *pl, double cycles, bool fits) {
    r->finalists_fit = fits;
    if (r->nfinalists == SEARCH_FINALISTS) mid_plan_free(&r->finalist[--r->nfinalists]);
    memmove(&r->finalist[1], &r->finalist[0], sizeof(mid_plan) * (size_t)r->nfinalists);
    memmove(&r->finalist_cycles[1], &r->finalist_cycles[0], sizeof(double) * (size_t)r->nfinalists);
    mid_plan_copy(&r->finalist[0], pl);
    r->finalist[0].choose = NULL;
    r->finalist_cycles[0] = cycles;
    r->nfinalists++;
}

/* Whether g's parameters could fit at all: spread evenly over every tile
 * (what no plan can change). */
static int parameters_fit(const graph *g, const machine *m, diag *d) {
    double params = param_bytes(g);
    if (params / m->tiles <= machine_tile_bytes(m)) return 0;
    char all[32], each[32], tile[32];
    fmt_bytes(all, sizeof all, params);
    fmt_bytes(each, sizeof each, params / m->tiles);
    fmt_bytes(tile, sizeof tile, machine_tile_bytes(m));
    return diag_fail_fit(d,
                     "%s: error: does not fit: %s's parameters take %s, %s per tile even spread evenly over the %u "
                     "tiles of machine '%s', which have %s each",
                     g->path, g->name, all, each, m->tiles, m->name, tile);
}

/* The start: expansion asks for every grid; the chooser scores the op's
 * candidates, keeps its alternatives, and answers with the given choice or
 * else the best-scored one. Then, with a search to run, the second start:
 * each op's best score streaming A or B, where the first streamed A and the
 * choice was not given. *room receives the room the estimate's peak has. */
static int start_plan(const state *st, const mid_plan *start, const search_options *o, mid_plan *pl, eval *cur, double *room,
                      est_cache *cache, search_result *r, diag *d) {
    const graph *g = st->g;
    const machine *m = st->m;
    mid_program mid;
    progress_stage("search", "the start plan: every matmul's best-scored grid");
    if (mid_build(g, m, pl, &mid, NULL, d)) return -1;
    *cur = price(st, &mid, cache);
    mid_free(&mid);
    r->evaluations++;
    *room = est_buffer_room(m, cur->table_max) * (o->room_scale > 0 ? o->room_scale : 1.0);
    push_finalist(r, pl, cur->cycles, fits(cur, *room));
    if (o->steps <= 0) return 0;
    mid_plan alt;
    mid_plan_copy(&alt, pl);
    alt.choose = NULL;
    bool differs = false;
    for (int32_t i = 0; i < g->ops.n; i++) {
        const op_alts *a = &st->alts[i];
        if (!graph_kind_has_gemm(graph_opr(g, i)->kind) || !alt.has[i] || !a->nw || !a->n ||
            (start && i < start->nops && start->has[i]) || a->w[0].score >= a->v[0].score)
            continue;
        alt.gemm[i] = a->w[0].c;
        differs = true;
    }
    if (differs) {
        eval e = evaluate(st, &alt, cache);
        r->evaluations++;
        if (e.ok && verdict(&e, cur, *room) == KEEP) {
            search_step s = {-1, cur->cycles, e.cycles, false, -1, false};
            vec_push(&r->arena, &r->steps, s);
            mid_plan_free(pl);
            mid_plan_copy(pl, &alt);
            *cur = e;
            push_finalist(r, pl, cur->cycles, fits(cur, *room));
        }
    }
    mid_plan_free(&alt);
    return 0;
}

/* Of n priced proposals, the best one that improves on cur (ties: the
 * earlier) applied to pl as a step and a finalist, the rejections counted;
 * whether one was. */
static bool keep_best(const proposal *props, const eval *res, int n, mid_plan *pl, eval *cur, double room, search_result *r,
                      progress *pg) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!res[i].ok) continue;
        int v = verdict(&res[i], cur, room);
        if (v == TOO_BIG) r->rejected_memory++;
        if (v == SLOWER) r->rejected_slower++;
        if (v == KEEP && (best < 0 || verdict(&res[i], &res[best], room) == KEEP)) best = i;
    }
    if (best >= 0) {
        const proposal *p = &props[best];
        bool early = p->cast >= 0 && !(pl->cast_early[p->op] >> p->cast & 1);
        search_step s = {p->op, cur->cycles, res[best].cycles, false, p->cast, early};
        vec_push(&r->arena, &r->steps, s);
        apply_proposal(pl, p);
        *cur = res[best];
        push_finalist(r, pl, cur->cycles, fits(cur, room));
    }
    char detail[160];
    snprintf(detail, sizeof detail, "%.0f cycles predicted, %d steps kept", cur->cycles, (int)r->steps.n);
    progress_step(pg, r->proposals, detail);
    return best >= 0;
}

/* Whether g has a cast from f16 to an 8-bit type: a graph without one has
 * no cast sites, and nothing to record or try. */
static bool has_8bit_casts(const graph *g) {
    for (int32_t i = 0; i < g->ops.n; i++) {
        const graph_op *o = graph_opr(g, i);
        if (o->kind == OP_CAST && graph_val(g, o->in[0])->type.dtype == DT_F16 && dtype_is_f8(graph_val(g, o->out[0])->type.dtype))
            return true;
    }
    return false;
}

/* The cast sites of a program, as expansion makes it (every cast late). */
typedef struct site_list {
    mid_cast_site *v;
    int32_t n;
} site_list;

static void grab_sites(void *ctx, const char *pass, const mid_program *p) {
    site_list *s = ctx;
    if (strcmp(pass, "expand") == 0 && !s->v) s->n = mid_cast_sites(p, &s->v);
}

/* The cast sites, once the grids, cuts and layouts have settled: each
 * eligible site is a proposal of its own, moved ahead of its copies or
 * back behind them (never the product of several), all priced whole in
 * parallel; the best is kept while one improves. The plan's sites are
 * first recorded as its program makes them. They have proposals of their
 * own, SEARCH_CAST_PROPOSALS at most, beside the --search-steps the
 * other choices may take (a search that spends its steps on grids still
 * places its casts); none when the search has no steps at all. */
static void cast_rounds(const state *st, const search_options *o, mid_plan *pl, eval *cur, double room, est_cache *cache,
                        search_result *r, progress *pg) {
    site_list sites = {0};
    mid_program mid;
    diag d = {0};
    mid_watch w = {grab_sites, &sites};
    if (o->steps <= 0 || !has_8bit_casts(st->g) || mid_build(st->g, st->m, pl, &mid, &w, &d) != 0) return;
    mid_free(&mid);
    pl->casts_all_early = false; /* its sites now recorded one by one */
    proposal *props = xcalloc((size_t)sites.n + 1, sizeof(proposal));
    eval *res = xcalloc((size_t)sites.n + 1, sizeof(eval));
    int64_t spent = 0;
    for (bool improved = true; improved && spent < SEARCH_CAST_PROPOSALS;) {
        improved = false;
        int n = 0;
        for (int32_t i = 0; i < sites.n && spent + n < SEARCH_CAST_PROPOSALS; i++)
            if (sites.v[i].eligible && sites.v[i].ordinal < 64)
                props[n] = (proposal){st, pl, cache, sites.v[i].op, NULL, 0, &res[n], 0, sites.v[i].ordinal}, n++;
        util_parallel(n, 1, run_proposals, props);
        r->evaluations += n;
        r->proposals += n;
        spent += n;
        improved = keep_best(props, res, n, pl, cur, room, r, pg);
    }
    free(props);
    free(res);
    free(sites.v);
}

/* The local search: one op at a time, each of its proposals priced whole
 * (in parallel), the best kept when it is faster and fits; rounds over
 * `ops` until none improves, then rounds over `ew_ops` (the elementwise
 * layouts, once the grids and cuts have settled). */
static void local_search(const state *st, const search_options *o, const int32_t *ops, int32_t nops, const int32_t *ew_ops,
                         int32_t new_ops, mid_plan *pl, eval *cur, double room, est_cache *cache, search_result *r) {
    const graph *g = st->g;
    progress pg;
    progress_begin(&pg, "search", o->steps, o->quiet || o->steps == 0);
    eval *res = xcalloc(SEARCH_ALTERNATIVES + SEARCH_OTHER_STREAM + SEARCH_VARIANTS, sizeof(eval));
    proposal *props = xcalloc(SEARCH_ALTERNATIVES + SEARCH_OTHER_STREAM + SEARCH_VARIANTS, sizeof(proposal));
    cand var[SEARCH_VARIANTS];
    for (int phase = 0; phase < 2; phase++) {
        const int32_t *list = phase ? ew_ops : ops;
        int32_t nlist = phase ? new_ops : nops;
        bool improved = o->steps > 0;
        while (improved && r->proposals < o->steps) {
            improved = false;
            for (int32_t k = 0; k < nlist && r->proposals < o->steps; k++) {
                int32_t op = list[k];
                int kind = graph_opr(g, op)->kind;
                int64_t left = o->steps - r->proposals;
                int n = kind == OP_LAYER_NORM     ? parts_proposals(st, pl, cache, op, props, res, left)
                        : mid_op_is_ewise(kind) ? ew_proposals(st, pl, cache, op, props, res, left)
                                                : op_proposals(st, pl, cache, op, var, props, res, 0, left);
                util_parallel(n, 1, run_proposals, props);
                r->evaluations += n;
                for (int i = 0; i < n; i++) r->proposals += !res[i].unmade;
                improved |= keep_best(props, res, n, pl, cur, room, r, &pg);
            }
        }
    }
    cast_rounds(st, o, pl, cur, room, cache, r, &pg);
    progress_end(&pg);
    free(res);
    free(props);
}

/* Why each matmul's choice beat its runner-up, for the report: the whole
 * program priced with the runner-up instead (its cycles, and whether its
 * peak fits the room), as a proposal each, all in parallel. A runner-up
 * scored better alone loses there: on the copies around it, or on memory. */
static void price_runners(const state *st, const mid_plan *best, est_cache *cache, search_result *r) {
    proposal *props = xcalloc((size_t)r->ops.n + 1, sizeof(proposal));
    cand *alt = xcalloc((size_t)r->ops.n + 1, sizeof(cand));
    eval *res = xcalloc((size_t)r->ops.n + 1, sizeof(eval));
    int32_t *of = xcalloc((size_t)r->ops.n + 1, sizeof(int32_t));
    int64_t n = 0;
    for (int32_t i = 0; i < r->ops.n; i++) {
        if (!r->ops.v[i].has_runner) continue;
        alt[n].c = r->ops.v[i].runner_up;
        of[n] = i;
        props[n] = (proposal){st, best, cache, r->ops.v[i].op, &alt[n], 0, &res[n], 0, -1};
        n++;
    }
    util_parallel(n, 1, run_proposals, props);
    double room = est_buffer_room(st->m, r->est.table_bytes_max);
    for (int64_t k = 0; k < n; k++) {
        search_op *so = &r->ops.v[of[k]];
        so->runner_priced = res[k].ok;
        so->runner_cycles = res[k].cycles;
        so->runner_peak = res[k].peak;
        so->runner_fits = res[k].ok && fits(&res[k], room);
    }
    free(props);
    free(alt);
    free(res);
    free(of);
}

/* The best finalist's estimate, per prim, for the report: per searched op
 * its choice, predicted cycles and the runner-up's score. */
static void describe_best(const state *st, est_cache *cache, bool reasons, search_result *r) {
    const graph *g = st->g;
    mid_plan best;
    mid_plan_copy(&best, &r->finalist[0]);
    mid_program bm;
    diag dd = {0};
    site_list sites = {0};
    mid_watch w = {grab_sites, &sites};
    if (mid_build(g, st->m, &best, &bm, &w, &dd) == 0) {
        r->nsites = sites.n;
        r->sites = arena_alloc(&r->arena, sizeof(mid_cast_site) * ((size_t)sites.n + 1));
        for (int32_t i = 0; i < sites.n; i++) {
            r->sites[i] = sites.v[i];
            r->sites[i].early = sites.v[i].early && sites.v[i].eligible;
        }
        r->est.prim_cycles = arena_alloc(&r->arena, sizeof(double) * (size_t)(bm.prims.n + 1));
        r->est.prim_exchange = arena_alloc(&r->arena, sizeof(double) * (size_t)(bm.prims.n + 1));
        memset(r->est.prim_cycles, 0, sizeof(double) * (size_t)(bm.prims.n + 1)); /* a repeat prim's own entries stay 0 */
        memset(r->est.prim_exchange, 0, sizeof(double) * (size_t)(bm.prims.n + 1));
        est_program(&bm, cache, &r->est);
        r->op_cycles = arena_alloc(&r->arena, sizeof(double) * (size_t)(g->ops.n + 1));
        memset(r->op_cycles, 0, sizeof(double) * (size_t)(g->ops.n + 1));
        for (int32_t k = 0; k < bm.prims.n; k++)
            if (mid_p(&bm, k)->origin >= 0 && mid_p(&bm, k)->origin < g->ops.n) r->op_cycles[mid_p(&bm, k)->origin] += r->est.prim_cycles[k];
        for (int32_t i = 0; i < g->ops.n; i++) {
            if (!graph_kind_has_gemm(graph_opr(g, i)->kind) || !best.has[i]) continue;
            search_op so = {.op = i, .chosen = best.gemm[i]};
            for (int32_t k = 0; k < bm.prims.n; k++)
                if (mid_p(&bm, k)->origin == i) so.cycles += r->est.prim_cycles[k], so.exchange_cycles += r->est.prim_exchange[k];
            const op_alts *a = &st->alts[i];
            for (int k = 0; k < a->n + a->nw; k++) {
                const cand *c = k < a->n ? &a->v[k] : &a->w[k - a->n];
                if (mid_gemm_plan_equal(&c->c, &so.chosen)) so.chosen_score = c->score;
                else if (!so.has_runner || c->score < so.runner_score)
                    so.runner_up = c->c, so.runner_score = c->score, so.has_runner = true;
            }
            vec_push(&r->arena, &r->ops, so);
        }
        if (reasons) price_runners(st, &best, cache, r);
        for (int32_t i = 0; i < g->ops.n; i++) {
            int kind = graph_opr(g, i)->kind;
            if (kind != OP_LAYER_NORM && !(mid_op_is_ewise(kind) && best.ew_layout[i] != MID_EWL_FIRST)) continue;
            search_op so = {.op = i};
            if (kind == OP_LAYER_NORM) so.parts = best.row_parts[i] > 1 ? best.row_parts[i] : 1;
            else so.ew = best.ew_layout[i] + 1;
            for (int32_t k = 0; k < bm.prims.n; k++)
                if (mid_p(&bm, k)->origin == i) so.cycles += r->est.prim_cycles[k], so.exchange_cycles += r->est.prim_exchange[k];
            vec_push(&r->arena, &r->ops, so);
        }
        mid_free(&bm);
    }
    free(sites.v);
    mid_plan_free(&best);
}

int search_plan(const graph *g, const machine *m, const mid_plan *start, const search_options *o, search_result *r, diag *d) {
    double t0 = util_now_seconds();
    memset(r, 0, sizeof *r);
    arena_init(&r->arena);
    if (parameters_fit(g, m, d)) return -1;
    state st = {g, m, search_min_pieces(g, m), temp_bytes(g, m), xcalloc((size_t)g->ops.n + 1, sizeof(op_alts)), start,
                o->reserved};
    mid_plan pl;
    mid_plan_init(&pl, g);
    pl.choose = choose;
    pl.ctx = &st;
    /* Casts start early, at their sources (where every cast ran before cast
     * ordering), unless the start says otherwise. */
    pl.casts_all_early = start ? start->casts_all_early : true;
    if (start) { /* the given cuts, elementwise layouts and cast sites */
        memcpy(pl.row_parts, start->row_parts, sizeof(int32_t) * (size_t)g->ops.n);
        memcpy(pl.ew_layout, start->ew_layout, sizeof(int8_t) * (size_t)g->ops.n);
        memcpy(pl.cast_early, start->cast_early, sizeof(uint64_t) * (size_t)g->ops.n);
    }
    est_cache *cache = est_cache_new(m);
    eval cur = {0};
    double room = 0;
    int rc = start_plan(&st, start, o, &pl, &cur, &room, cache, r, d);
    if (rc == 0) {
        /* The matmuls with more than one choice, in program order. */
        VEC(int32_t) ops = {0};
        for (int32_t i = 0; i < g->ops.n; i++)
            if (graph_kind_has_gemm(graph_opr(g, i)->kind) && st.alts[i].n + st.alts[i].nw > 1) vec_push(&r->arena, &ops, i);
        /* The beam runs from a start that fits: ranking plans that do not by
         * their peak, it would take each matmul's smallest footprint in turn,
         * however slow, where one change at a time finds faster plans that fit. */
        if (o->steps > 0 && o->beam > 0 && ops.n > 0 && fits(&cur, room))
            beam(&st, o->beam < SEARCH_BEAM_MAX ? o->beam : SEARCH_BEAM_MAX, ops.v, ops.n, &pl, &cur, room, cache, r, o->quiet);
        /* The local search also cuts layer norms' rows over tiles (after the
         * matmuls of each round: their grids set where the norms' rows lie). */
        for (int32_t i = 0; i < g->ops.n; i++)
            if (graph_opr(g, i)->kind == OP_LAYER_NORM) vec_push(&r->arena, &ops, i);
        /* The layout each elementwise op works in is searched once the grids and
         * cuts have settled, in rounds of its own: proposed among them, a
         * layout that pays only for the grids of the moment (a residual add's
         * where the norms' rows lie) steered SigLIP's search away from better
         * grids (7,075,232 to 7,264,516 cycles simulated). */
        VEC(int32_t) ew_ops = {0};
        for (int32_t i = 0; i < g->ops.n; i++)
            if (mid_op_is_ewise(graph_opr(g, i)->kind)) vec_push(&r->arena, &ew_ops, i);
        local_search(&st, o, ops.v, ops.n, ew_ops.v, ew_ops.n, &pl, &cur, room, cache, r);
        describe_best(&st, cache, o->reasons, r);
    }
    /* A finalist with every site early names them one by one, as its
     * program makes them (what its recipe lists). */
    bool casts = has_8bit_casts(g);
    for (int i = 0; rc == 0 && i < r->nfinalists; i++) {
        mid_plan *f = &r->finalist[i];
        mid_program mid;
        diag dd = {0};
        if (!f->casts_all_early) continue;
        if (!casts) { /* no sites: nothing early to name */
            f->casts_all_early = false;
            continue;
        }
        progress_stage("search", "recording the finalists' cast sites");
        if (mid_build(g, m, f, &mid, NULL, &dd) != 0) continue;
        mid_free(&mid);
        f->casts_all_early = false;
    }
    est_cache_stats(cache, &r->copies_priced, &r->copies_reused);
    est_cache_free(cache);
    mid_plan_free(&pl);
    free(st.alts);
    r->seconds = util_now_seconds() - t0;
    return rc;
}

void search_result_free(search_result *r) {
    for (int i = 0; i < r->nfinalists; i++) mid_plan_free(&r->finalist[i]);
    arena_free(&r->arena);
    memset(r, 0, sizeof *r);
}
