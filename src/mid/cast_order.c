/* cast_order.c: where each f16-to-f8 cast runs, a mid pass (docs/lowering.md,
 * "Cast ordering").
 *
 * Expansion makes every cast late: at its consumer, after the f16 copies
 * that bring its source there (expand.c's late_cast). A cast marked early
 * (the plan's choice, `ewise.cast.early` in text) moves ahead of that copy
 * chain, to the first tensor of it whose layout the cast can write:
 *
 *   s = ...                     s = ...
 *   a = copy(s)        f16      w = ewise.cast(s)         the cast on s's tiles
 *   x = copy(a)        f16  ──► a' = copy(w)       f8     the copies move half
 *   y = ewise.cast(x)           y = copy(a')       f8     the bytes
 *   z = copy(y)  (pack)         z = copy(y)
 *
 * The chain is what the cast can move through: copies of one graph value in
 * the cast's block, each the only reader of its source, none writing in
 * place (own partials, remote shares). A cast commutes with every such copy
 * whatever its view (a transpose, a crop, zero padding: cast(0) is 0), and
 * the copies are kept as they are, retyped to f8, so nothing the chain
 * discarded comes back. The cast lands on the chain's first row-major (or
 * row-major transposed) tensor without replicas: a layout the elementwise
 * kernel writes; with none, the cast stays late.
 *
 * Then two rewrites the motion makes possible:
 *   sharing     casts of one tensor into one layout in a block, with nothing
 *               between them writing that tensor, are one cast;
 *   packing     the row-major copy and the local pack into AMP panels that
 *               followed a late cast become the one move expansion makes of
 *               an f8 value (staged through panels on the source's tiles
 *               where that pays, layout_amp_left_stage), reusing a staging
 *               copy already made from the same tensor.
 * The pass runs before the absorptions, so a cast moved onto its producer's
 * result can still be written by the producer (absorb.c). Moving the cast
 * after copy composition instead would lose the staging location: composed
 * copies leave no tensor in between to cast on. */
#include "mid.h"

#include <stdlib.h>
#include <string.h>

typedef struct cx {
    mid_program *p;
    int32_t *reads, *maker; /* mid_uses */
    int32_t *block_of;      /* per prim: the repeat prim whose body holds it, -1 top, -2 none */
} cx;

static void index_block(cx *x, const mid_block *b, int32_t owner) {
    for (int32_t j = 0; j < b->n; j++) {
        x->block_of[b->v[j]] = owner;
        const mid_prim *pr = mid_p(x->p, b->v[j]);
        if (pr->kind == MID_REPEAT) index_block(x, &pr->body, b->v[j]);
    }
}

static mid_block *block_at(mid_program *p, int32_t owner) { return owner < 0 ? &p->top : &mid_p(p, owner)->body; }

static int32_t position(const mid_block *b, int32_t prim) {
    for (int32_t j = 0; j < b->n; j++)
        if (b->v[j] == prim) return j;
    return -1;
}

static bool is_site(const mid_program *p, const mid_prim *pr) {
    return pr->kind == MID_EWISE && pr->ew == KERNEL_EW_CAST && pr->cast_ordinal >= 0 && mid_t(p, pr->in[0])->dtype == DT_F16 &&
           dtype_is_f8(mid_t(p, pr->out[0])->dtype);
}

static bool castable(const mid_tensor *t) {
    return (t->lay.enc == ENC_ROW_MAJOR || t->lay.enc == ENC_ROW_MAJOR_T) && t->lay.nrep == 0 && t->stack == 1;
}

/* The chain of cast c (in block `owner`): its tensors from the start on,
 * chain[n-1] the cast's operand, and the index of the first the cast can
 * land on; -1 with *why when it cannot move. chain holds MAX_CHAIN. */
enum { MAX_CHAIN = 64 };
static int walk(const cx *x, int32_t c, int32_t *chain, int *n, const char **why) {
    const mid_program *p = x->p;
    const mid_prim *pr = mid_p(p, c);
    int32_t owner = x->block_of[c];
    for (int32_t i = 0; i < p->prims.n; i++) { /* a reader outside the cast's block */
        const mid_prim *q = mid_p(p, i);
        if (x->block_of[i] == -2 || x->block_of[i] == owner) continue;
        for (int k = 0; k < q->nin; k++)
            if (q->in[k] == pr->out[0]) return *why = "its result is read across a repeat boundary", -1;
    }
    int32_t buf[MAX_CHAIN], k = 0, cur = pr->in[0];
    const char *stop = NULL;
    buf[k++] = cur;
    while (k < MAX_CHAIN) {
        int32_t m = x->maker[cur];
        if (x->reads[cur] != 1) {
            stop = "its operand has other readers (the f16 value escapes)";
            break;
        }
        if (m == -2) {
            stop = "its operand is written in place";
            break;
        }
        const mid_prim *mp = m >= 0 ? mid_p(p, m) : NULL;
        if (!mp || mp->kind != MID_COPY) {
            stop = "no copy before it: it runs where its source is";
            break;
        }
        if (mp->own || mp->remote) {
            stop = "the copy before it leaves shares in place";
            break;
        }
        if (x->block_of[m] != owner) {
            stop = "the copy before it is in another block";
            break;
        }
        if (mid_t(p, mp->in[0])->value != mid_t(p, cur)->value || mid_t(p, cur)->alias_of >= 0) {
            stop = "the copy before it reads another value";
            break;
        }
        cur = mp->in[0];
        buf[k++] = cur;
    }
    for (int i = 0; i < k; i++) chain[i] = buf[k - 1 - i];
    *n = k;
    for (int i = 0; i < k - 1; i++)
        if (castable(mid_t(p, chain[i]))) return i;
    *why = k == 1 ? (stop ? stop : "no copy before it") : "no tensor before it has a layout an f8 cast can write";
    return -1;
}

static void cx_init(cx *x, mid_program *p) {
    x->p = p;
    mid_uses(p, &x->reads, &x->maker);
    x->block_of = xmalloc(sizeof(int32_t) * ((size_t)p->prims.n + 1));
    for (int32_t i = 0; i < p->prims.n; i++) x->block_of[i] = -2;
    index_block(x, &p->top, -1);
}

static void cx_free(cx *x) {
    free(x->reads);
    free(x->maker);
    free(x->block_of);
}

int32_t mid_cast_sites(const mid_program *p, mid_cast_site **out) {
    cx x;
    cx_init(&x, (mid_program *)p);
    VEC(mid_cast_site) v = {0};
    arena a;
    arena_init(&a);
    for (int32_t i = 0; i < p->prims.n; i++) {
        const mid_prim *pr = mid_p(p, i);
        if (x.block_of[i] == -2 || !is_site(p, pr)) continue;
        int32_t chain[MAX_CHAIN];
        int n;
        mid_cast_site s = {pr->origin, pr->cast_ordinal, i, false, pr->early, NULL};
        s.eligible = walk(&x, i, chain, &n, &s.why) >= 0;
        if (s.eligible) s.why = NULL;
        vec_push(&a, &v, s);
    }
    *out = xmalloc(sizeof(mid_cast_site) * ((size_t)v.n + 1));
    if (v.n) memcpy(*out, v.v, sizeof(mid_cast_site) * (size_t)v.n);
    int32_t n = v.n;
    arena_free(&a);
    cx_free(&x);
    return n;
}

static int32_t new_tensor(mid_program *p, const mid_tensor *like, const layout *lay) {
    mid_tensor t = *like;
    t.lay = *lay;
    t.lay.elem_bytes = dtype_bytes(like->dtype);
    t.alias_of = t.slice_of = -1;
    t.kind = MT_TEMP;
    t.param_op = -1;
    t.stack = 1;
    vec_push(&p->arena, &p->tensors, t);
    return p->tensors.n - 1;
}

/* The tensor expansion placed for the cast's value where the graph made it
 * and left unwritten (every use cast late): where an early cast of it lands
 * in that layout, it writes that tensor. -1 if none. */
static int32_t unused_home(const cx *x, const mid_tensor *y, const layout *at) {
    layout want = *at;
    want.elem_bytes = dtype_bytes(y->dtype);
    for (int32_t t = 0; t < x->p->tensors.n; t++) {
        const mid_tensor *m = mid_t(x->p, t);
        if (m->value == y->value && m->dtype == y->dtype && m->scope == y->scope && m->kind == MT_TEMP && m->alias_of < 0 &&
            x->maker[t] == -1 && x->reads[t] == 0 && layout_equal(&m->lay, &want))
            return t;
    }
    return -1;
}

static void retype(mid_program *p, int32_t t, const mid_tensor *as) {
    mid_tensor *m = mid_t(p, t);
    m->dtype = as->dtype;
    m->scale = as->scale;
    m->value = as->value;
    m->lay.elem_bytes = dtype_bytes(as->dtype);
}

static void remove_at(mid_block *b, int32_t j) {
    memmove(&b->v[j], &b->v[j + 1], sizeof(int32_t) * (size_t)(b->n - j - 1));
    b->n--;
}

static void insert_at(mid_program *p, mid_block *b, int32_t j, int32_t prim) {
    vec_push(&p->arena, b, prim);
    memmove(&b->v[j + 1], &b->v[j], sizeof(int32_t) * (size_t)(b->n - 1 - j));
    b->v[j] = prim;
}

/* A pack left to do once every cast has moved: copy `first` (into y) and
 * copy `pack` (y into AMP panels) become one move. */
typedef struct pack {
    int32_t first, pack, owner;
} pack;

static bool writes_between(const cx *x, const mid_block *b, int32_t from, int32_t to, int32_t storage);

/* Where in block b a cast of t moves to from position `at` (its chain's
 * first copy): as early as t's value is there, just after the last prim
 * before `at` writing t's storage (its producer), and after the casts
 * already moved there, which keep their order. */
static int32_t landing(const cx *x, const mid_block *b, int32_t at, int32_t t) {
    int32_t storage = mid_storage(x->p, t);
    while (at > 0) {
        const mid_prim *q = mid_p(x->p, b->v[at - 1]);
        if ((q->kind == MID_EWISE && q->ew == KERNEL_EW_CAST && q->early) || writes_between(x, b, at - 1, at, storage)) break;
        at--;
    }
    return at;
}

/* Moves cast c ahead of its chain onto chain[e]; returns the pack that
 * followed it, if any, through *pk. */
static void move_early(cx *x, int32_t c, const int32_t *chain, int n, int e, pack *pk) {
    mid_program *p = x->p;
    mid_prim *pr = mid_p(p, c);
    int32_t y = pr->out[0], owner = x->block_of[c];
    const mid_tensor yt = *mid_t(p, y);
    int32_t w = unused_home(x, &yt, &mid_t(p, chain[e])->lay);
    if (w < 0) w = new_tensor(p, &yt, &mid_t(p, chain[e])->lay);
    else x->maker[w] = c; /* taken: another site of the value makes its own */
    /* The copies after chain[e], retyped; the last writes the cast's result. */
    int32_t first = x->maker[chain[e + 1]], last = x->maker[chain[n - 1]];
    for (int i = e + 1; i < n - 1; i++) retype(p, chain[i], &yt);
    mid_p(p, first)->in[0] = w;
    mid_p(p, last)->out[0] = y;
    pr = mid_p(p, c);
    pr->in[0] = chain[e];
    pr->out[0] = w;
    mid_block *b = block_at(p, owner);
    remove_at(b, position(b, c));
    insert_at(p, b, landing(x, b, position(b, first), chain[e]), c);
    for (int32_t i = 0; i < p->probes.n; i++)
        if (p->probes.v[i].tensor == y) p->probes.v[i].tensor = w, p->probes.v[i].after = c;
    /* The pack expansion put after a late cast into AMP panels: y's only
     * reader, a local copy without a view into y's partition. */
    pk->pack = -1;
    const mid_prim *lp = mid_p(p, last);
    if (x->reads[y] != 1 || lp->has_view) return;
    for (int32_t j = 0; j < b->n; j++) {
        const mid_prim *q = mid_p(p, b->v[j]);
        if (q->kind != MID_COPY || q->in[0] != y || q->has_view || q->own || q->remote) continue;
        layout a = mid_t(p, y)->lay, z = mid_t(p, q->out[0])->lay;
        a.enc = z.enc;
        a.elem_bytes = z.elem_bytes;
        if (layout_equal(&a, &z)) *pk = (pack){last, b->v[j], owner};
    }
}

/* Cast c2 is cast c1 again: same tensor, dtype, scale, kind and layout,
 * and nothing between them in the block (or a body in it) writes c1's
 * operand's storage. */
static bool writes_between(const cx *x, const mid_block *b, int32_t from, int32_t to, int32_t storage) {
    for (int32_t j = from; j < to; j++) {
        const mid_prim *q = mid_p(x->p, b->v[j]);
        if (q->kind == MID_REPEAT && writes_between(x, &q->body, 0, q->body.n, storage)) return true;
        for (int k = 0; k < q->nout; k++)
            if (mid_storage(x->p, q->out[k]) == storage) return true;
    }
    return false;
}

static bool same_cast(const mid_program *p, const mid_prim *a, const mid_prim *b) {
    const mid_tensor *ta = mid_t(p, a->out[0]), *tb = mid_t(p, b->out[0]);
    return a->in[0] == b->in[0] && ta->dtype == tb->dtype && ta->scale == tb->scale && a->f[0] == b->f[0] &&
           layout_equal(&ta->lay, &tb->lay);
}

static void replace_reads(mid_program *p, int32_t from, int32_t to, int32_t at) {
    for (int32_t i = 0; i < p->prims.n; i++) {
        mid_prim *q = mid_p(p, i);
        for (int k = 0; k < q->nin; k++)
            if (q->in[k] == from) q->in[k] = to;
    }
    for (int32_t i = 0; i < p->outputs.n; i++)
        if (p->outputs.v[i] == from) p->outputs.v[i] = to;
    for (int32_t i = 0; i < p->probes.n; i++)
        if (p->probes.v[i].tensor == from) p->probes.v[i].tensor = to, p->probes.v[i].after = at;
}

static void share_block(cx *x, mid_block *b) {
    mid_program *p = x->p;
    for (int32_t j = 0; j < b->n; j++)
        if (mid_p(p, b->v[j])->kind == MID_REPEAT) share_block(x, &mid_p(p, b->v[j])->body);
    for (int32_t j = 0; j < b->n; j++) {
        const mid_prim *c1 = mid_p(p, b->v[j]);
        if (!is_site(p, c1)) continue;
        for (int32_t k = j + 1; k < b->n; k++) {
            const mid_prim *c2 = mid_p(p, b->v[k]);
            if (!is_site(p, c2) || !same_cast(p, c1, c2)) continue;
            if (writes_between(x, b, j + 1, k, mid_storage(p, c1->in[0]))) break;
            replace_reads(p, c2->out[0], c1->out[0], b->v[j]);
            remove_at(b, k--);
        }
    }
}

/* The pack: copy `first` (a -> y) and `pack` (y -> z, panels on y's tiles)
 * become the move expansion makes of an f8 value: a -> z, staged through
 * panels on a's tiles where that pays, reusing such a staging copy of a
 * made earlier in the block. */
static void do_pack(cx *x, const pack *pk) {
    mid_program *p = x->p;
    mid_block *b = block_at(p, pk->owner);
    mid_prim *first = mid_p(p, pk->first), *q = mid_p(p, pk->pack);
    int32_t a = first->in[0], z = q->out[0];
    int32_t at = position(b, pk->first);
    if (first->has_view || at < 0) return;
    layout st;
    if (!layout_amp_left_stage(&mid_t(p, a)->lay, &mid_t(p, z)->lay, &st)) {
        q->in[0] = a;
        remove_at(b, at);
        return;
    }
    st.elem_bytes = mid_t(p, a)->lay.elem_bytes;
    for (int32_t j = 0; j < at; j++) {
        const mid_prim *r = mid_p(p, b->v[j]);
        if (r->kind == MID_COPY && r->in[0] == a && !r->has_view && !r->own && !r->remote &&
            layout_equal(&mid_t(p, r->out[0])->lay, &st)) {
            q->in[0] = r->out[0];
            remove_at(b, at);
            return;
        }
    }
    int32_t s = new_tensor(p, mid_t(p, a), &st);
    mid_t(p, s)->name = mid_t(p, z)->name;
    mid_p(p, pk->first)->out[0] = s;
    mid_p(p, pk->pack)->in[0] = s;
}

int mid_cast_order(mid_program *p, uint32_t rewrites, diag *d) {
    (void)rewrites, (void)d;
    cx x;
    cx_init(&x, p);
    VEC(pack) packs = {0};
    int32_t nprims = p->prims.n;
    for (int32_t i = 0; i < nprims; i++) {
        mid_prim *pr = mid_p(p, i);
        if (x.block_of[i] == -2 || !is_site(p, pr) || !pr->early) continue;
        int32_t chain[MAX_CHAIN];
        int n;
        const char *why;
        int e = walk(&x, i, chain, &n, &why);
        if (e < 0) {
            pr->early = false; /* recorded as made: late */
            continue;
        }
        pack pk;
        move_early(&x, i, chain, n, e, &pk);
        if (pk.pack >= 0) vec_push(&p->arena, &packs, pk);
    }
    share_block(&x, &p->top);
    for (int32_t i = 0; i < packs.n; i++) do_pack(&x, &packs.v[i]);
    cx_free(&x);
    return 0;
}
