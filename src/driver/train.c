/* train.c: a training step over data-parallel replicas (docs/chips.md,
 * "Training across replicas"). graph_split_replicas makes the programs:
 * every chip runs the replica's step up to its gradients on its share of
 * the batch; the gradients' rows then go to their owners (a reduce-scatter:
 * owner o receives rows of every replica's gradients), each chip runs its
 * owner program (the sum over the replicas, in replica order, and the
 * optimizers on its rows), and the new rows go to every chip (the gather).
 * Each program is compiled, placed and packaged for one chip by the one-chip
 * compiler, unchanged. Program 0 is the replica's, program 1 + o owner o's. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "wire.h"

/* ---- the host's view of the step ---------------------------------------- */

void train_shape_free(train_shape *s) {
    for (int32_t p = 0; p <= s->n && s->in; p++) free(s->in[p]), free(s->out[p]);
    free(s->in), free(s->out), free(s->nin), free(s->nout);
    if (s->owns_feeds)
        for (int32_t o = 0; s->feed && o < s->n; o++) {
            for (int32_t k = 0; k < s->nfeed[o]; k++)
                free(s->feed[o][k].input), free(s->feed[o][k].from), free(s->feed[o][k].updates);
            free(s->feed[o]);
        }
    if (s->owns_feeds) free(s->feed), free(s->nfeed), free(s->gather_bytes);
    memset(s, 0, sizeof *s);
}

static void shape_alloc(train_shape *s, int32_t n) {
    s->n = n;
    s->in = xcalloc((size_t)n + 1, sizeof(host_spec *));
    s->out = xcalloc((size_t)n + 1, sizeof(host_spec *));
    s->nin = xcalloc((size_t)n + 1, sizeof(int32_t));
    s->nout = xcalloc((size_t)n + 1, sizeof(int32_t));
}

void driver_train_shape_of_packages(const package *pkgs, int32_t n, int64_t micro, graph_feed **feed, int32_t *nfeed,
                                    int64_t *gather_bytes, bool owns, train_shape *s) {
    shape_alloc(s, n);
    s->micro = micro;
    for (int32_t p = 0; p <= n; p++) driver_package_specs(&pkgs[p], &s->in[p], &s->nin[p], &s->out[p], &s->nout[p]);
    s->feed = feed, s->nfeed = nfeed, s->gather_bytes = gather_bytes, s->owns_feeds = owns;
}

void driver_train_shape_of_graphs(const graph_replicas *r, train_shape *s) {
    shape_alloc(s, r->n);
    s->micro = r->micro;
    for (int32_t p = 0; p <= r->n; p++) {
        const graph *g = p ? r->owner[p - 1] : r->replica;
        s->in[p] = driver_graph_specs(g, false, &s->nin[p]);
        s->out[p] = driver_graph_specs(g, true, &s->nout[p]);
    }
    s->feed = r->feed, s->nfeed = r->nfeed, s->gather_bytes = r->gather_bytes, s->owns_feeds = false;
}

static int64_t row_numel(const host_spec *h) { return h->rank ? host_numel(h) / h->dim[0] : 1; }

/* Whether an owner makes the output called name (then the owners' rows
 * make it: a weight, or owner 0's sum of a loss), else the replicas' rows. */
static bool owners_make(const train_shape *s, const char *name) {
    for (int32_t o = 0; o < s->n; o++)
        if (host_find(s->out[1 + o], s->nout[1 + o], name) >= 0) return true;
    return false;
}

int driver_train_output_spec(const train_shape *s, const char *name, host_spec *out) {
    bool found = false;
    for (int32_t o = 0; o < s->n; o++) {
        int32_t j = host_find(s->out[1 + o], s->nout[1 + o], name);
        if (j < 0) continue;
        if (!found) *out = s->out[1 + o][j];
        else if (out->rank) out->dim[0] += s->out[1 + o][j].dim[0];
        found = true;
    }
    int32_t k = found ? -1 : host_find(s->out[0], s->nout[0], name);
    if (k >= 0 && s->out[0][k].rank >= 1) { /* one row per sample: every replica's rows, every micro-batch's */
        *out = s->out[0][k];
        out->dim[0] *= s->n * (s->micro > 1 ? s->micro : 1);
        found = true;
    }
    return found ? 0 : -1;
}

bool driver_train_carried(const char *name) {
    size_t len = strlen(name), sfx = strlen(".acc_in");
    return len > sfx && strcmp(name + len - sfx, ".acc_in") == 0;
}

/* The replica's output that its input k (named "<v>.acc_in") takes from
 * the micro-batch before: "<v>.acc"; -1 for a model input's share. */
static int32_t carried_from(const train_shape *s, int32_t k) {
    const char *name = s->in[0][k].name;
    size_t len = strlen(name), sfx = strlen(".acc_in");
    if (!driver_train_carried(name)) return -1;
    for (int32_t j = 0; j < s->nout[0]; j++) {
        const char *o = s->out[0][j].name;
        if (strlen(o) == len - 3 && strncmp(o, name, len - sfx) == 0 && strcmp(o + len - sfx, ".acc") == 0) return j;
    }
    return -1;
}

/* ---- over MPI ranks --------------------------------------------------------- */

/* What one rank hands another: whether all went well (else why), the
 * cycles of the programs it ran, and named tensors. */
typedef struct train_msg {
    bool ok;
    char why[2048];
    int32_t ncycles;
    uint32_t program[CHIPS_MAX + 1];
    uint64_t cycles[CHIPS_MAX + 1];
    int32_t n;
    char **name;
    int64_t *numel;
    float **data;          /* owned */
} train_msg;

static void msg_add(train_msg *m, const char *name, const float *x, int64_t numel) {
    m->name = xrealloc(m->name, sizeof(char *) * (size_t)(m->n + 1));
    m->numel = xrealloc(m->numel, sizeof(int64_t) * (size_t)(m->n + 1));
    m->data = xrealloc(m->data, sizeof(float *) * (size_t)(m->n + 1));
    m->name[m->n] = xstrdup(name);
    m->numel[m->n] = numel;
    m->data[m->n] = xmalloc(sizeof(float) * (size_t)(numel + 1));
    if (numel) memcpy(m->data[m->n], x, sizeof(float) * (size_t)numel);
    m->n++;
}

static float *msg_find(const train_msg *m, const char *name, int64_t numel) {
    for (int32_t k = 0; k < m->n; k++)
        if (strcmp(m->name[k], name) == 0 && m->numel[k] == numel) return m->data[k];
    return NULL;
}

static void msg_free(train_msg *m) {
    for (int32_t k = 0; k < m->n; k++) free(m->name[k]), free(m->data[k]);
    free(m->name), free(m->numel), free(m->data);
    memset(m, 0, sizeof *m);
}

static uint8_t *msg_bytes(const train_msg *m, size_t *len) {
    char *buf = NULL;
    FILE *b = open_memstream(&buf, len);
    TS_ASSERT(b);
    wire_put32(b, m->ok);
    if (!m->ok) {
        wire_put32(b, (uint32_t)strlen(m->why));
        wire_put(b, m->why, strlen(m->why));
    } else {
        wire_put32(b, (uint32_t)m->ncycles);
        for (int32_t k = 0; k < m->ncycles; k++) wire_put32(b, m->program[k]), wire_put64(b, m->cycles[k]);
        wire_put32(b, (uint32_t)m->n);
        for (int32_t k = 0; k < m->n; k++) wire_put_tensor(b, m->name[k], m->data[k], m->numel[k]);
    }
    TS_ASSERT(fclose(b) == 0);
    return (uint8_t *)buf;
}

/* A message from rank `from` (untrusted: every length checked). */
static int msg_parse(const uint8_t *bytes, size_t len, int from, train_msg *m, diag *d) {
    memset(m, 0, sizeof *m);
    wire_reader r = {bytes, bytes + len, false};
    m->ok = wire_get32(&r);
    if (!m->ok) {
        uint32_t n = wire_get32(&r);
        const uint8_t *w = n < sizeof m->why ? wire_get_bytes(&r, n) : NULL;
        if (w) memcpy(m->why, w, n), m->why[n] = 0;
        else r.bad = true;
    } else {
        m->ncycles = (int32_t)wire_get32(&r);
        if (m->ncycles < 0 || m->ncycles > CHIPS_MAX + 1) r.bad = true;
        for (int32_t k = 0; k < m->ncycles && !r.bad; k++) m->program[k] = wire_get32(&r), m->cycles[k] = wire_get64(&r);
        uint32_t n = wire_get32(&r);
        if (n > len / 12) r.bad = true;
        for (uint32_t k = 0; k < n && !r.bad; k++) {
            uint32_t nl = wire_get32(&r);
            const uint8_t *name = wire_get_bytes(&r, nl);
            uint64_t ne = wire_get64(&r);
            if (!name || r.bad || ne > (uint64_t)(r.end - r.p) / 4) {
                r.bad = true;
                break;
            }
            char nm[512];
            snprintf(nm, sizeof nm, "%.*s", (int)nl, (const char *)name);
            float *x = xmalloc(sizeof(float) * (size_t)(ne + 1));
            memcpy(x, wire_get_bytes(&r, ne * 4), (size_t)ne * 4); /* little-endian host, as the package */
            msg_add(m, nm, x, (int64_t)ne);
            free(x);
        }
    }
    if (r.bad || r.p != r.end) {
        msg_free(m);
        return diag_fail(d, "error: the message from rank %d is malformed", from);
    }
    return 0;
}

static int msg_send(const chips_transport *tp, int to, const train_msg *m, diag *d) {
    size_t len;
    uint8_t *b = msg_bytes(m, &len);
    int rc = tp->send(tp->ctx, to, b, len, d);
    free(b);
    return rc;
}

static int msg_recv(const chips_transport *tp, int from, train_msg *m, diag *d) {
    uint8_t *bytes = NULL;
    size_t len = 0;
    int rc = tp->recv(tp->ctx, from, &bytes, &len, d);
    if (rc == 0) rc = msg_parse(bytes, len, from, m, d);
    free(bytes);
    return rc;
}

/* Whether some owner is fed the replicas' output called name. */
static bool feeds_from(const train_shape *s, const char *name) {
    for (int32_t o = 0; o < s->n; o++)
        for (int32_t k = 0; k < s->nfeed[o]; k++)
            if (strcmp(s->feed[o][k].from, name) == 0) return true;
    return false;
}

/* Rows [f->first, +rows) of a replica output x of spec src (all of it when rows < 0). */
static int64_t feed_numel(const graph_feed *f, const host_spec *src) {
    return f->rows < 0 ? host_numel(src) : f->rows * row_numel(src);
}

static int32_t rank_of_chip(int32_t chips, int32_t c, const chips_transport *tp) {
    int r = 0;
    while (driver_chips_first(chips, r + 1, tp->ranks) <= c) r++;
    return r;
}

/* A step on this rank: its replicas and owners, what it exchanges. */
typedef struct ranked {
    const train_shape *s;
    const chips_transport *tp;
    int32_t n, first, end;     /* chips; this rank's [first, end) */
    int64_t micro;
    bool ok;
    diag fail;                 /* why not ok */
    float ***rep;              /* per replica of this rank: its outputs, the sums so far */
    train_msg *got;            /* per rank: what it sent this one */
    train_msg mine;            /* what this rank hands the last */
    train_runner run;
    void *ctx;
    uint64_t *cycles;
} ranked;

/* This rank's replicas, every micro-batch (each adding its sums to the
 * earlier ones', from zeros); outputs one row per sample, named
 * "<output>#<piece>", go into mine for the last rank. */
static void ranked_replicas(ranked *x, const host_spec *min, int32_t nmin, float *const *inputs) {
    const train_shape *s = x->s;
    for (int32_t r = x->first; r < x->end && x->ok; r++) {
        float **in = xcalloc((size_t)s->nin[0] + 1, sizeof(float *)), **zeros = xcalloc((size_t)s->nin[0] + 1, sizeof(float *));
        for (int64_t mb = 0; mb < x->micro && x->ok; mb++) {
            int64_t piece = r * x->micro + mb;
            for (int32_t k = 0; k < s->nin[0] && x->ok; k++) {
                int32_t c = carried_from(s, k), j = c < 0 ? host_find(min, nmin, s->in[0][k].name) : -1;
                if (c >= 0 && mb == 0) in[k] = zeros[k] = xcalloc((size_t)host_numel(&s->in[0][k]) + 1, sizeof(float));
                else if (c >= 0) in[k] = x->rep[r][c];
                else if (j < 0 || host_numel(&min[j]) != host_numel(&s->in[0][k]) * x->n * x->micro)
                    x->ok = !diag_fail(&x->fail, "error: the replica's input '%s' is not a share of a model input", s->in[0][k].name);
                else in[k] = inputs[j] + piece * host_numel(&s->in[0][k]);
            }
            float **outs = xcalloc((size_t)s->nout[0] + 1, sizeof(float *));
            if (x->ok) x->ok = x->run(x->ctx, 0, r, in, outs, &x->cycles[0], &x->fail) == 0;
            for (int32_t k = 0; x->ok && k < s->nout[0]; k++) {
                if (feeds_from(s, s->out[0][k].name)) continue; /* a sum for the owners, not one row per sample */
                char name[512];
                snprintf(name, sizeof name, "%s#%lld", s->out[0][k].name, (long long)piece);
                msg_add(&x->mine, name, outs[k], host_numel(&s->out[0][k]));
            }
            for (int32_t k = 0; x->rep[r] && k < s->nout[0]; k++) free(x->rep[r][k]);
            free(x->rep[r]);
            x->rep[r] = outs;
        }
        for (int32_t k = 0; k < s->nin[0]; k++) free(zeros[k]);
        free(in), free(zeros);
    }
}

/* The reduce-scatter: with every other rank, in a fixed order of pairs
 * (the lower rank sends first, so no two wait on each other), this rank's
 * replicas' rows for the peer's owners, as "<owner>/<input>"; a failure
 * travels instead. */
static int ranked_scatter(ranked *x, diag *d) {
    const train_shape *s = x->s;
    const chips_transport *tp = x->tp;
    int rc = 0;
    for (int peer = 0; peer < tp->ranks && rc == 0; peer++) {
        if (peer == tp->rank) continue;
        train_msg out = {.ok = x->ok};
        if (!x->ok) snprintf(out.why, sizeof out.why, "%s", x->fail.set ? x->fail.text : "error: a rank failed");
        int32_t pf = driver_chips_first(x->n, peer, tp->ranks), pe = driver_chips_first(x->n, peer + 1, tp->ranks);
        for (int32_t o = pf; o < pe && x->ok; o++)
            for (int32_t k = 0; k < s->nfeed[o]; k++) {
                const graph_feed *f = &s->feed[o][k];
                int32_t src = host_find(s->out[0], s->nout[0], f->from);
                if (src < 0) continue;
                int64_t each = feed_numel(f, &s->out[0][src]), at = 0;
                float *rows = xmalloc(sizeof(float) * (size_t)(each * (x->end - x->first) + 1));
                for (int32_t r = x->first; r < x->end; r++, at += each)
                    memcpy(rows + at, x->rep[r][src] + f->first * row_numel(&s->out[0][src]), sizeof(float) * (size_t)each);
                char name[512];
                snprintf(name, sizeof name, "%d/%s", (int)o, f->input);
                msg_add(&out, name, rows, at);
                free(rows);
            }
        if (tp->rank < peer) rc = msg_send(tp, peer, &out, d) || msg_recv(tp, peer, &x->got[peer], d) ? -1 : 0;
        else rc = msg_recv(tp, peer, &x->got[peer], d) || msg_send(tp, peer, &out, d) ? -1 : 0;
        msg_free(&out);
        if (rc == 0 && x->ok && !x->got[peer].ok) x->ok = false, diag_fail(&x->fail, "%s", x->got[peer].why);
    }
    return rc;
}

/* Owner o's input k: every replica's rows, in replica order (this rank's
 * own, or those another rank sent), or NULL with x->fail. */
static float *owner_input(ranked *x, int32_t o, int32_t k) {
    const train_shape *s = x->s;
    const graph_feed *f = NULL;
    for (int32_t j = 0; j < s->nfeed[o]; j++)
        if (strcmp(s->feed[o][j].input, s->in[1 + o][k].name) == 0) f = &s->feed[o][j];
    int32_t src = f ? host_find(s->out[0], s->nout[0], f->from) : -1;
    if (src < 0) {
        x->ok = !diag_fail(&x->fail, "error: owner %d's input '%s' is fed by no replica output", (int)o, s->in[1 + o][k].name);
        return NULL;
    }
    int64_t each = feed_numel(f, &s->out[0][src]);
    float *in = xmalloc(sizeof(float) * (size_t)(each * x->n + 1));
    char name[512];
    snprintf(name, sizeof name, "%d/%s", (int)o, f->input);
    for (int32_t r = 0; r < x->n && x->ok; r++) {
        int32_t pr = rank_of_chip(x->n, r, x->tp);
        const float *at = pr == x->tp->rank ? x->rep[r][src] + f->first * row_numel(&s->out[0][src]) : NULL;
        if (pr != x->tp->rank) {
            int32_t pf = driver_chips_first(x->n, pr, x->tp->ranks), pe = driver_chips_first(x->n, pr + 1, x->tp->ranks);
            const float *all = msg_find(&x->got[pr], name, each * (pe - pf));
            at = all ? all + (r - pf) * each : NULL;
        }
        if (!at) x->ok = !diag_fail(&x->fail, "error: rank %d sent no rows '%s' for owner %d", (int)pr, f->input, (int)o);
        else memcpy(in + r * each, at, sizeof(float) * (size_t)each);
    }
    return in;
}

/* This rank's owners; their outputs, named "<owner>/<output>", and every
 * program's cycles go into mine. */
static void ranked_owners(ranked *x) {
    const train_shape *s = x->s;
    x->mine.ncycles = 0;
    for (int32_t o = x->first; o < x->end && x->ok; o++) {
        float **in = xcalloc((size_t)s->nin[1 + o] + 1, sizeof(float *));
        for (int32_t k = 0; k < s->nin[1 + o] && x->ok; k++) in[k] = owner_input(x, o, k);
        float **outs = xcalloc((size_t)s->nout[1 + o] + 1, sizeof(float *));
        if (x->ok) x->ok = x->run(x->ctx, 1 + o, o, in, outs, &x->cycles[1 + o], &x->fail) == 0;
        for (int32_t k = 0; x->ok && k < s->nout[1 + o]; k++) {
            char name[512];
            snprintf(name, sizeof name, "%d/%s", (int)o, s->out[1 + o][k].name);
            msg_add(&x->mine, name, outs[k], host_numel(&s->out[1 + o][k]));
        }
        if (x->ok) x->mine.program[x->mine.ncycles] = (uint32_t)(1 + o), x->mine.cycles[x->mine.ncycles++] = x->cycles[1 + o];
        for (int32_t k = 0; k < s->nout[1 + o]; k++) free(outs[k]);
        for (int32_t k = 0; k < s->nin[1 + o]; k++) free(in[k]);
        free(outs), free(in);
    }
    if (x->end > x->first) x->mine.program[x->mine.ncycles] = 0, x->mine.cycles[x->mine.ncycles++] = x->cycles[0];
}

/* On the last rank, every rank's message (its own included) in hand: the
 * cycles merged, the model's outputs put together, the owners' rows in
 * owner order, the replicas' rows in piece order. */
static void ranked_outputs(ranked *x, const host_spec *mout, int32_t nmout, float **outputs) {
    const train_shape *s = x->s;
    for (int peer = 0; peer < x->tp->ranks; peer++)
        for (int32_t k = 0; x->got[peer].ok && k < x->got[peer].ncycles; k++)
            if (x->got[peer].program[k] <= (uint32_t)x->n && x->got[peer].cycles[k] > x->cycles[x->got[peer].program[k]])
                x->cycles[x->got[peer].program[k]] = x->got[peer].cycles[k];
    for (int32_t j = 0; x->ok && j < nmout; j++) {
        int64_t total = host_numel(&mout[j]), at = 0;
        outputs[j] = xcalloc((size_t)total + 1, sizeof(float));
        if (owners_make(s, mout[j].name)) {
            for (int32_t o = 0; o < x->n; o++) {
                char name[512];
                snprintf(name, sizeof name, "%d/%s", (int)o, mout[j].name);
                const train_msg *m = &x->got[rank_of_chip(x->n, o, x->tp)];
                for (int32_t k = 0; k < m->n; k++)
                    if (strcmp(m->name[k], name) == 0 && at + m->numel[k] <= total)
                        memcpy(outputs[j] + at, m->data[k], sizeof(float) * (size_t)m->numel[k]), at += m->numel[k];
            }
        } else {
            int32_t k = host_find(s->out[0], s->nout[0], mout[j].name);
            int64_t each = k >= 0 ? host_numel(&s->out[0][k]) : 0;
            for (int64_t piece = 0; k >= 0 && piece < x->n * x->micro; piece++) {
                char name[512];
                snprintf(name, sizeof name, "%s#%lld", mout[j].name, (long long)piece);
                const float *v = msg_find(&x->got[rank_of_chip(x->n, (int32_t)(piece / x->micro), x->tp)], name, each);
                if (v && at + each <= total) memcpy(outputs[j] + at, v, sizeof(float) * (size_t)each), at += each;
            }
        }
        if (at != total) x->ok = !diag_fail(&x->fail, "error: the programs made %lld of output '%s''s %lld values",
                                            (long long)at, mout[j].name, (long long)total);
    }
}

int driver_train_step_ranks(const train_shape *s, const chips_transport *tp, const diag *failed, const host_spec *min,
                            int32_t nmin, float *const *inputs, const host_spec *mout, int32_t nmout, float **outputs,
                            train_runner run, void *ctx, uint64_t *cycles, diag *d) {
    int32_t n = s->n, last = tp->ranks - 1;
    ranked x = {.s = s, .tp = tp, .n = n, .first = driver_chips_first(n, tp->rank, tp->ranks),
                .end = driver_chips_first(n, tp->rank + 1, tp->ranks), .micro = s->micro > 1 ? s->micro : 1,
                .ok = !failed, .rep = xcalloc((size_t)n, sizeof(float **)),
                .got = xcalloc((size_t)tp->ranks, sizeof(train_msg)), .run = run, .ctx = ctx, .cycles = cycles};
    x.mine.ok = true;
    if (failed) x.fail = *failed;
    ranked_replicas(&x, min, nmin, inputs);
    int rc = ranked_scatter(&x, d);
    if (rc == 0) ranked_owners(&x);
    for (int32_t r = 0; r < n; r++) {
        for (int32_t k = 0; x.rep[r] && k < s->nout[0]; k++) free(x.rep[r][k]);
        free(x.rep[r]);
    }
    free(x.rep);
    for (int peer = 0; peer < tp->ranks; peer++) msg_free(&x.got[peer]);
    /* Everything to the last rank, which puts the outputs together. */
    if (rc == 0 && tp->rank != last) {
        x.mine.ok = x.ok;
        if (!x.ok) snprintf(x.mine.why, sizeof x.mine.why, "%s", x.fail.set ? x.fail.text : "error: a rank failed");
        rc = msg_send(tp, last, &x.mine, d);
        if (rc == 0 && !x.ok) *d = (diag){.set = true}, rc = 1; /* said by the last rank */
    } else if (rc == 0) {
        for (int peer = 0; peer < last && rc == 0; peer++) {
            rc = msg_recv(tp, peer, &x.got[peer], d);
            if (rc == 0 && x.ok && !x.got[peer].ok) x.ok = false, diag_fail(&x.fail, "%s", x.got[peer].why);
        }
        x.got[last] = x.mine, x.mine = (train_msg){0};
        if (rc == 0) ranked_outputs(&x, mout, nmout, outputs);
        if (rc == 0 && !x.ok)
            rc = diag_fail(d, tp->ranks > 1 ? "tessel run: error: no outputs: %s" : "%s", x.fail.set ? x.fail.text : "a rank failed");
        for (int peer = 0; peer < tp->ranks; peer++) msg_free(&x.got[peer]);
    }
    msg_free(&x.mine);
    free(x.got);
    if (rc)
        for (int32_t j = 0; j < nmout; j++) free(outputs[j]), outputs[j] = NULL;
    return rc ? -1 : 0;
}

int driver_train_step(const train_shape *s, const host_spec *min, int32_t nmin, float *const *inputs,
                      const host_spec *mout, int32_t nmout, float **outputs, train_runner run, void *ctx,
                      uint64_t *cycles, diag *d) {
    static const chips_transport alone = {.rank = 0, .ranks = 1};
    return driver_train_step_ranks(s, &alone, NULL, min, nmin, inputs, mout, nmout, outputs, run, ctx, cycles, d);
}

/* ---- timing --------------------------------------------------------------- */

/* Adds k bytes from chip a, len hops one way round a ring of n (way 1:
 * clockwise, through links a -> a + 1, ...; -1: the other way) to load. */
static void route(uint64_t *load, int32_t n, int32_t a, int32_t len, int way, uint64_t k) {
    for (int32_t h = 0, at = a; h < len; h++, at = (at + way + n) % n) load[(way > 0 ? 0 : CHIPS_MAX) + at] += k;
}

/* Moving bytes[src * n + dst] between the chips of a ring at once, each
 * message the shorter way round (halved between the two on a tie; two
 * chips have one link each way): the
 * longest route's latency, the busiest link's bytes at the link's rate,
 * one sync. */
static uint64_t ring_cycles(const machine *m, int32_t n, const uint64_t *bytes, uint64_t *busiest) {
    uint64_t load[2 * CHIPS_MAX] = {0};
    int32_t hops = 0;
    for (int32_t a = 0; a < n; a++)
        for (int32_t b = 0; b < n; b++) {
            uint64_t k = bytes[a * n + b];
            if (a == b || !k) continue;
            int32_t cw = (b - a + n) % n, len = cw <= n - cw ? cw : n - cw;
            if (len > hops) hops = len;
            if (cw == n - cw && n > 2) route(load, n, a, len, 1, k - k / 2), route(load, n, a, len, -1, k / 2);
            else route(load, n, a, len, cw < n - cw ? 1 : -1, k);
        }
    *busiest = 0;
    for (int32_t i = 0; i < 2 * CHIPS_MAX; i++)
        if (load[i] > *busiest) *busiest = load[i];
    if (!*busiest) return 0;
    return (uint64_t)hops * m->link_latency_cycles + (*busiest + m->link_bytes_per_cycle - 1) / m->link_bytes_per_cycle +
           m->chip_sync_cycles;
}

void driver_train_timing(const machine *m, const train_shape *s, const uint64_t *cycles, train_timing *t) {
    memset(t, 0, sizeof *t);
    int32_t n = s->n;
    TS_ASSERT(n >= 2 && n <= CHIPS_MAX);
    t->n = n;
    t->micro = s->micro > 1 ? s->micro : 1;
    t->replica = cycles[0] * (uint64_t)t->micro; /* its micro-batches one after another */
    for (int32_t o = 0; o < n; o++) {
        t->owner[o] = cycles[1 + o];
        if (cycles[1 + o] > t->owner_max) t->owner_max = cycles[1 + o];
    }
    uint64_t *scatter = xcalloc((size_t)(n * n), sizeof(uint64_t)), *gather = xcalloc((size_t)(n * n), sizeof(uint64_t));
    for (int32_t o = 0; o < n; o++) {
        uint64_t mine = (uint64_t)s->gather_bytes[o]; /* owner o's new weight rows: every other chip needs them */
        for (int32_t k = 0; k < s->nfeed[o]; k++) {
            const graph_feed *f = &s->feed[o][k];
            int32_t j = host_find(s->out[0], s->nout[0], f->from);
            if (j < 0) continue;
            const host_spec *src = &s->out[0][j];
            uint64_t b = (uint64_t)(f->rows < 0 ? host_numel(src) : f->rows * row_numel(src)) * (uint64_t)dtype_bytes(src->dtype);
            for (int32_t r = 0; r < n; r++) scatter[r * n + o] += r == o ? 0 : b;
            t->scatter_total += (uint64_t)(n - 1) * b;
        }
        for (int32_t c = 0; c < n; c++) gather[o * n + c] = c == o ? 0 : mine;
        t->gather_total += (uint64_t)(n - 1) * mine;
    }
    t->scatter = ring_cycles(m, n, scatter, &t->scatter_bytes);
    t->gather = ring_cycles(m, n, gather, &t->gather_bytes);
    free(scatter), free(gather);
    t->cycles = t->replica + t->scatter + t->owner_max + t->gather;
}

/* ---- compiling ------------------------------------------------------------ */

static char *dump(json_t *j) {
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n', text[n + 1] = 0;
    return text;
}

static json_t *names_json(const host_spec *s, int32_t n) {
    json_t *a = json_array();
    for (int32_t k = 0; k < n; k++) json_array_append_new(a, json_string(s[k].name));
    return a;
}

/* The manifest: the model, machine, batch, replicas; per program its role,
 * inputs and outputs, and an owner's feeds; the model's outputs. */
static char *manifest_json(const char *model, const machine *m, const graph *g, const train_compiled *tc) {
    const graph_replicas *r = &tc->split;
    json_t *progs = json_array();
    for (int32_t p = 0; p <= r->n; p++) {
        host_spec *ins, *outs;
        int32_t nin, nout;
        driver_package_specs(&tc->pkg[p], &ins, &nin, &outs, &nout);
        json_t *e = json_pack("{s:i, s:s, s:o, s:o}", "program", (int)p, "role", p ? "owner" : "replica", "inputs",
                              names_json(ins, nin), "outputs", names_json(outs, nout));
        free(ins), free(outs);
        if (p) {
            json_t *feeds = json_array();
            for (int32_t k = 0; k < r->nfeed[p - 1]; k++) {
                const graph_feed *f = &r->feed[p - 1][k];
                json_t *fj = json_pack("{s:s, s:s, s:I, s:I}", "input", f->input, "from", f->from, "first_row",
                                       (json_int_t)f->first, "rows", (json_int_t)f->rows);
                if (f->updates) json_object_set_new(fj, "updates", json_string(f->updates));
                json_array_append_new(feeds, fj);
            }
            json_object_set_new(e, "owner", json_integer(p - 1));
            json_object_set_new(e, "gather_bytes", json_integer((json_int_t)r->gather_bytes[p - 1]));
            json_object_set_new(e, "feeds", feeds);
        }
        json_array_append_new(progs, e);
    }
    int32_t nout;
    host_spec *outs = driver_graph_specs(g, true, &nout);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:i, s:o, s:o}", "tessel", TESSEL_VERSION, "model", model,
                          "machine", m->name, "plan", "data-parallel training", "batch", (json_int_t)r->batch, "replicas",
                          (int)r->n, "micro_batches", (int)r->micro, "programs", progs, "outputs", names_json(outs, nout));
    free(outs);
    return dump(j);
}

int driver_train_feeds(const char *manifest, int32_t n, graph_feed ***feed, int32_t **nfeed, int64_t **gather_bytes,
                       const char *path, diag *d) {
    json_t *man = json_loads(manifest, 0, NULL), *progs = json_object_get(man, "programs");
    *feed = xcalloc((size_t)n + 1, sizeof(graph_feed *));
    *nfeed = xcalloc((size_t)n + 1, sizeof(int32_t));
    *gather_bytes = xcalloc((size_t)n + 1, sizeof(int64_t));
    int rc = json_is_array(progs) && json_array_size(progs) == (size_t)n + 1 ? 0 : -1;
    for (int32_t o = 0; o < n && rc == 0; o++) {
        json_t *fs = json_object_get(json_array_get(progs, (size_t)o + 1), "feeds"),
               *gb = json_object_get(json_array_get(progs, (size_t)o + 1), "gather_bytes");
        if (!json_is_array(fs) || !json_is_integer(gb) || json_integer_value(gb) < 0) rc = -1;
        else (*gather_bytes)[o] = (int64_t)json_integer_value(gb);
        for (size_t k = 0; rc == 0 && k < json_array_size(fs); k++) {
            json_t *f = json_array_get(fs, k), *in = json_object_get(f, "input"), *from = json_object_get(f, "from"),
                   *first = json_object_get(f, "first_row"), *rows = json_object_get(f, "rows"),
                   *upd = json_object_get(f, "updates");
            if (!json_is_string(in) || !json_is_string(from) || !json_is_integer(first) || !json_is_integer(rows) ||
                json_integer_value(first) < 0 || json_integer_value(rows) < -1 || (upd && !json_is_string(upd))) {
                rc = -1;
                break;
            }
            (*feed)[o] = xrealloc((*feed)[o], sizeof(graph_feed) * ((size_t)(*nfeed)[o] + 1));
            (*feed)[o][(*nfeed)[o]++] = (graph_feed){xstrdup(json_string_value(in)), xstrdup(json_string_value(from)),
                                                     upd ? xstrdup(json_string_value(upd)) : NULL,
                                                     (int64_t)json_integer_value(first), (int64_t)json_integer_value(rows)};
        }
    }
    json_decref(man);
    if (rc) {
        for (int32_t o = 0; o < n; o++) {
            for (int32_t k = 0; k < (*nfeed)[o]; k++) free((*feed)[o][k].input), free((*feed)[o][k].from), free((*feed)[o][k].updates);
            free((*feed)[o]);
        }
        free(*feed), free(*nfeed), free(*gather_bytes);
        *feed = NULL, *nfeed = NULL, *gather_bytes = NULL;
        return diag_fail(d, "%s: error: the manifest does not say how the owners are fed", path);
    }
    return 0;
}

static json_t *load_recipe(const char *path, const machine *m, int32_t n, diag *d) {
    json_t *j = driver_load_recipe_json(path, d);
    if (!j) return NULL;
    json_t *chips = json_object_get(j, "chips"), *progs = json_object_get(j, "programs");
    if (!json_is_integer(chips) || !json_is_array(progs) || json_array_size(progs) != (size_t)n + 1 ||
        json_integer_value(chips) != (json_int_t)m->chips) {
        json_decref(j);
        return diag_fail(d, "%s: error: not a recipe for a training step over %d replicas (it needs \"chips\": %d and "
                            "a \"programs\" array of %d recipes, as --save-recipe writes)",
                         path, (int)n, (int)n, (int)n + 1), NULL;
    }
    return j;
}

/* Every program of g split for n replicas in `micro` micro-batches each. */
static int compile_programs(const graph *g, const compile_options *o, const json_t *recipe, int32_t n, int64_t micro,
                            train_compiled *out, diag *d) {
    int rc = graph_split_replicas(g, n, micro, &out->split, d);
    if (rc == 0) {
        out->pkg = xcalloc((size_t)n + 1, sizeof(package));
        out->info = xcalloc((size_t)n + 1, sizeof(compile_info));
        out->nprograms = n + 1;
    }
    for (int32_t p = 0; p <= n && rc == 0; p++) {
        char model[1024], detail[200], rname[1024], *rtext = NULL;
        if (p) snprintf(detail, sizeof detail, "owner %d of %d: its rows of the weights", (int)p - 1, (int)n);
        else snprintf(detail, sizeof detail, "replica: %lld of the batch's %lld samples%s, to the gradients",
                      (long long)(out->split.batch / n / micro), (long long)out->split.batch,
                      micro > 1 ? " a micro-batch" : "");
        snprintf(model, sizeof model, "%s [%s]", o->model, detail);
        compile_options so = *o;
        so.model = model;
        so.micro_batches = 0, so.replicas = 0;
        so.fusion_report |= p > 0; /* an owner's fused updates: what each saves, and the package's proof */
        if (recipe) {
            snprintf(rname, sizeof rname, "%s (program %d)", o->recipe, (int)p);
            rtext = json_dumps(json_array_get(json_object_get(recipe, "programs"), (size_t)p), JSON_COMPACT);
            so.recipe = rname;
            so.recipe_text = rtext;
        }
        progress_stage("compile", detail);
        rc = driver_compile(p ? out->split.owner[p - 1] : out->split.replica, &out->one, &so, &out->pkg[p], &out->info[p], d);
        free(rtext);
        if (rc == 0) out->ncompiled = p + 1;
        else if (d->set) {
            char why[sizeof d->text];
            snprintf(why, sizeof why, "%s", d->text);
            bool fit = d->no_fit;
            *d = (diag){0};
            if (fit) diag_fail_fit(d, "%s: %s", detail, why);
            else diag_fail(d, "%s", why);
        }
    }
    return rc;
}

static void free_programs(train_compiled *c) {
    for (int32_t p = 0; c->info && p < c->nprograms; p++) {
        if (p < c->ncompiled) package_free(&c->pkg[p]);
        compile_info_free(&c->info[p]);
    }
    free(c->pkg), free(c->info);
    c->pkg = NULL, c->info = NULL, c->nprograms = c->ncompiled = 0;
    graph_replicas_free(&c->split);
}

int driver_compile_train(const graph *g, const machine *m, const compile_options *o, train_compiled *out, diag *d) {
    memset(out, 0, sizeof *out);
    TS_ASSERT(m->chips >= 2 && m->chips <= CHIPS_MAX);
    double t0 = util_now_seconds();
    int32_t n = (int32_t)m->chips;
    if (o->replicas > 0 && o->replicas != n)
        return diag_fail(d, "tessel compile: error: option '--replicas %d': a training step runs one replica per chip "
                            "(%d on %s)", (int)o->replicas, (int)n, m->name);
    json_t *recipe = NULL;
    if (o->recipe && !(recipe = load_recipe(o->recipe, m, n, d))) return -1;
    int64_t want = o->micro_batches;
    if (recipe && json_is_integer(json_object_get(recipe, "micro_batches")))
        want = json_integer_value(json_object_get(recipe, "micro_batches"));
    int32_t in0;
    int64_t batch = graph_inputs(g, &in0, 1) >= 1 && graph_val(g, in0)->type.rank >= 1 ? graph_val(g, in0)->type.dim[0] : 1;
    int64_t share = batch % n == 0 ? batch / n : 1;
    out->one = machine_one_chip(m, NULL);
    /* Micro-batches (gradient accumulation): as asked, or the fewest whose replica fits. */
    int rc = -1;
    for (int64_t mb = want > 0 ? want : 1; mb <= share || mb == want; mb++) {
        if (want <= 0 && share % mb) continue;
        diag dt = {0};
        rc = compile_programs(g, o, recipe, n, mb, out, &dt);
        if (rc == 0 || want > 0 || !dt.no_fit || mb >= share) {
            if (rc) *d = dt;
            break;
        }
        free_programs(out); /* does not fit: smaller micro-batches */
    }
    json_decref(recipe);
    if (rc == 0) {
        out->manifest = manifest_json(o->model, m, g, out);
        json_t *progs = json_array();
        for (int32_t p = 0; p <= n; p++) {
            json_t *r = json_loads(out->info[p].recipe, 0, NULL);
            TS_ASSERT(r);
            json_array_append_new(progs, r);
        }
        out->recipe = dump(json_pack("{s:s, s:i, s:s, s:I, s:o}", "machine", m->name, "chips", (int)m->chips, "plan",
                                     "data-parallel training", "micro_batches", (json_int_t)out->split.micro, "programs", progs));
        uint64_t cycles[CHIPS_MAX + 1];
        for (int32_t p = 0; p <= n; p++) {
            const search_result *sr = &out->info[p].search;
            int f = out->info[p].finalist;
            cycles[p] = (uint64_t)(f >= 0 && f < sr->nfinalists ? sr->finalist_cycles[f] : sr->est.cycles);
        }
        train_shape s;
        driver_train_shape_of_graphs(&out->split, &s);
        driver_train_timing(m, &s, cycles, &out->predicted);
        train_shape_free(&s);
    }
    out->seconds = util_now_seconds() - t0;
    if (rc) train_compiled_free(out);
    return rc;
}

void train_compiled_free(train_compiled *c) {
    free_programs(c);
    free(c->manifest), free(c->recipe);
    memset(c, 0, sizeof *c);
}
