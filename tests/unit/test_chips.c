/* test_chips.c: a model over several chips, with the ranks of a
 * distributed run played in one process through a transport that keeps
 * what is sent (docs/chips.md): spread over 1, 2, 3 or 4 ranks the outputs
 * and the timing are the same, bit for bit; a rank that fails makes the
 * last one fail saying why; a damaged handover or package is refused. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "models/models.h"

#define MODEL "zoo:vit:layers=5,width=32,heads=2,mlp=48,image=16,patch=4,batch=2"

/* A mailbox per (sender, receiver): what send left, in order, for recv to take. */
enum { BOX = 16 };
typedef struct post {
    uint8_t *bytes[4][4][BOX];
    size_t len[4][4][BOX];
    int put[4][4], got[4][4];
    bool tamper;           /* cut every message short */
    int me;                /* the rank being run */
} post;

static int post_send(void *ctx, int to, const uint8_t *bytes, size_t len, diag *d) {
    (void)d;
    post *p = ctx;
    int k = p->put[p->me][to]++;
    assert_true(k < BOX);
    size_t n = p->tamper && len > 8 ? len - 3 : len;
    p->bytes[p->me][to][k] = malloc(n ? n : 1);
    memcpy(p->bytes[p->me][to][k], bytes, n);
    p->len[p->me][to][k] = n;
    return 0;
}

static int post_recv(void *ctx, int from, uint8_t **bytes, size_t *len, diag *d) {
    post *p = ctx;
    int k = p->got[from][p->me];
    if (k >= p->put[from][p->me]) return diag_fail(d, "test: rank %d sent rank %d nothing more", from, p->me);
    p->got[from][p->me]++;
    *bytes = p->bytes[from][p->me][k], *len = p->len[from][p->me][k];
    p->bytes[from][p->me][k] = NULL; /* the receiver frees it */
    return 0;
}

typedef struct run {
    float *out;            /* the last chip's one output */
    chips_timing t;
    int rc;
    char why[2048];
} run;

/* The package's chips run over `ranks` ranks, one after another; the rank
 * with the last chip first (it takes the other replicas' outputs first),
 * then the others in order, then it again: played here as the others
 * first, which is the order their messages arrive in. */
static run run_ranks(const uint8_t *img, size_t len, int ranks, int fail_rank, bool tamper) {
    run r = {0};
    post box = {.tamper = tamper};
    int32_t n = 4;
    float *x = malloc(sizeof(float) * 2 * 16 * 48);
    graph_default_input_fill(0, DT_F16, 0, x, 2 * 16 * 48);
    for (int k = 0; k < ranks; k++) {
        box.me = k;
        chips_transport tp = {.rank = k, .ranks = ranks, .send = post_send, .recv = post_recv, .ctx = &box};
        pkg_chips pc;
        diag d = {0};
        assert_int_equal(pkg_chips_parse(img, len, "t.tpk", NULL, &pc, &d), 0);
        int32_t programs = pc.n;
        pkg_chips_free(&pc);
        bool want[CHIPS_MAX] = {0};
        for (int32_t c = driver_chips_first(n, k, ranks); c < driver_chips_first(n, k + 1, ranks); c++) want[c % programs] = true;
        assert_int_equal(pkg_chips_parse(img, len, "t.tpk", want, &pc, &d), 0);
        for (int32_t s = 0; s < programs; s++) assert_int_equal(pc.loaded[s], want[s]);  /* a rank reads its own programs only */
        float *outs[2] = {0};
        sim_stats st[CHIPS_MAX] = {0};
        sim_options so = {.quiet = true};
        bool last = false;
        int rc;
        if (k == fail_rank) {
            diag_fail(&d, "rank %d: its own trouble", k);
            driver_chips_hand_on_failure(&pc, &tp, &d);
            rc = -1;
        } else {
            rc = driver_run_chips(&pc, "t.tpk", &tp, &so, &x, outs, st, &r.t, &last, &d);
            assert_int_equal(last, k == ranks - 1);
        }
        if (k == ranks - 1) {
            r.rc = rc;
            r.out = outs[0];
            snprintf(r.why, sizeof r.why, "%s", d.text);
        } else {
            free(outs[0]);
        }
        for (int32_t s = 0; s < n; s++) sim_stats_free(&st[s]);
        pkg_chips_free(&pc);
    }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < BOX; k++) free(box.bytes[a][b][k]);
    free(x);
    return r;
}

/* Four chips as one pipeline of four stages (replicas 1) or as two
 * data-parallel replicas of a pipeline of two (replicas 2). */
static void ranks_agree(int32_t replicas) {
    diag d = {0};
    graph *g = models_load(MODEL, &d);
    assert_non_null(g);
    machine m;
    assert_int_equal(machine_preset("tinyx4", &m), 0);
    compile_options co = {.model = MODEL, .search_steps = 64, .beam = 2, .quiet = true, .replicas = replicas};
    chips_compiled cc;
    if (driver_compile_chips(g, &m, &co, &cc, &d)) fail_msg("%s", d.text);
    int32_t S = 4 / replicas;
    assert_int_equal(cc.stages.n, S);
    assert_int_equal(cc.replicas, replicas);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(pkg_chips_write(&m, cc.manifest, cc.pkg, S, replicas, PKG_CHIPS_PIPELINE, f, "t.tpk", &d), 0);
    fclose(f);

    run one = run_ranks((uint8_t *)buf, len, 1, -1, false);
    if (one.rc) fail_msg("%s", one.why);
    assert_int_equal(one.t.n, S);
    assert_int_equal(one.t.replicas, replicas);
    for (int32_t s = 0; s < S; s++) assert_true(one.t.stage[s] > 0);
    int64_t micro = 2 / replicas / cc.micro_batches;  /* images per micro-batch */
    assert_int_equal(one.t.link_bytes[0], micro * 16 * 32 * 2);  /* the carried f16[micro, 16, 32] */
    assert_int_equal(one.t.link[0], m.link_latency_cycles +
                                        (one.t.link_bytes[0] + m.link_bytes_per_cycle - 1) / m.link_bytes_per_cycle +
                                        m.chip_sync_cycles);
    uint64_t sum = 0;
    for (int32_t s = 0; s < S; s++) sum += one.t.stage[s] + one.t.link[s];
    assert_true(one.t.latency == sum);
    assert_true(one.t.cycles == one.t.latency + (uint64_t)(cc.micro_batches - 1) * one.t.interval);
    /* And against the model run whole on one chip's reference: the outputs are the whole batch's. */
    for (int ranks = 2; ranks <= 4; ranks++) {
        run r = run_ranks((uint8_t *)buf, len, ranks, -1, false);
        if (r.rc) fail_msg("%d ranks: %s", ranks, r.why);
        assert_memory_equal(r.out, one.out, sizeof(float) * 2 * 16 * 32);
        assert_memory_equal(&r.t, &one.t, sizeof r.t);
        free(r.out);
    }
    /* A failed rank: the last one says so, with the first one's words. */
    run bad = run_ranks((uint8_t *)buf, len, 3, 0, false);
    assert_int_equal(bad.rc, -1);
    if (!strstr(bad.why, "no outputs: an earlier rank failed (rank 0: its own trouble)")) fail_msg("%s", bad.why);
    bad = run_ranks((uint8_t *)buf, len, 4, 2, false);
    if (!strstr(bad.why, "rank 2: its own trouble")) fail_msg("%s", bad.why);
    /* A handover cut short is refused, not read past its end. */
    bad = run_ranks((uint8_t *)buf, len, 2, -1, true);
    assert_int_equal(bad.rc, -1);
    if (!strstr(bad.why, "is malformed")) fail_msg("%s", bad.why);

    /* The package: any damaged header byte, and any cut, is refused. */
    pkg_chips pc;
    for (size_t at = 0; at < 64; at++) {
        buf[at] ^= 0x10;
        d = (diag){0};
        assert_int_equal(pkg_chips_parse(buf, len, "t.tpk", NULL, &pc, &d), -1);
        buf[at] ^= 0x10;
    }
    for (size_t cut = 0; cut < len; cut += len / 37 + 1) {
        d = (diag){0};
        assert_int_equal(pkg_chips_parse(buf, cut, "t.tpk", NULL, &pc, &d), -1);
    }
    free(one.out);
    free(buf);
    chips_compiled_free(&cc);
    graph_free(g);
}

static void pipeline_ranks_agree(void **state) {
    (void)state;
    ranks_agree(1);
}

static void replicas_ranks_agree(void **state) {
    (void)state;
    ranks_agree(2);
}

/* ---- a training step over replicas, its ranks on threads ------------------ */

/* Mailboxes any rank may block on (the ranks of a training step exchange
 * both ways, so they run at once): what send left, in order, per (sender,
 * receiver); recv waits for it, at most a few seconds. */
typedef struct mail {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *bytes[4][4][BOX];
    size_t len[4][4][BOX];
    int put[4][4], got[4][4];
} mail;
typedef struct mailbox {
    mail *m;
    int me;
} mailbox;

static int mail_send(void *ctx, int to, const uint8_t *bytes, size_t len, diag *d) {
    (void)d;
    mailbox *b = ctx;
    pthread_mutex_lock(&b->m->mu);
    int k = b->m->put[b->me][to]++;
    TS_ASSERT(k < BOX);
    b->m->bytes[b->me][to][k] = malloc(len ? len : 1);
    memcpy(b->m->bytes[b->me][to][k], bytes, len);
    b->m->len[b->me][to][k] = len;
    pthread_cond_broadcast(&b->m->cv);
    pthread_mutex_unlock(&b->m->mu);
    return 0;
}

static int mail_recv(void *ctx, int from, uint8_t **bytes, size_t *len, diag *d) {
    mailbox *b = ctx;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&b->m->mu);
    int rc = 0;
    while (b->m->got[from][b->me] >= b->m->put[from][b->me] && rc == 0)
        rc = pthread_cond_timedwait(&b->m->cv, &b->m->mu, &until);
    if (rc == 0) {
        int k = b->m->got[from][b->me]++;
        *bytes = b->m->bytes[from][b->me][k], *len = b->m->len[from][b->me][k];
        b->m->bytes[from][b->me][k] = NULL;
    }
    pthread_mutex_unlock(&b->m->mu);
    return rc ? diag_fail(d, "test: rank %d waited for rank %d in vain", b->me, from) : 0;
}

typedef struct train_rank {
    const uint8_t *img;
    size_t len;
    int rank, ranks;
    bool fail;                 /* this rank fails before the step */
    mail *m;
    /* out, the last rank's: */
    int rc;
    char why[2048];
    float *out[16];
    int32_t nout;
    uint64_t cycles[CHIPS_MAX + 1];
} train_rank;

static int sim_program(void *ctx, int32_t p, int32_t who, float *const *in, float **out, uint64_t *cycles, diag *d) {
    (void)who;
    const pkg_chips *pc = ctx;
    sim_stats st = {0};
    sim_options so = {.quiet = true};
    TS_ASSERT(pc->loaded[p]);
    int rc = sim_run(&pc->pkg[p], &so, in, out, &st, d);
    if (rc == 0 && st.cycles > *cycles) *cycles = st.cycles;
    sim_stats_free(&st);
    return rc;
}

/* One rank's step: its programs only (the last rank: every owner's). */
static void *train_rank_run(void *arg) {
    train_rank *t = arg;
    int32_t n = 4;
    bool want[CHIPS_MAX + 2] = {true};
    for (int32_t o = 0; o < n; o++)
        want[1 + o] = t->rank == t->ranks - 1 || (o >= driver_chips_first(n, t->rank, t->ranks) &&
                                                  o < driver_chips_first(n, t->rank + 1, t->ranks));
    pkg_chips pc;
    diag d = {0};
    TS_ASSERT(pkg_chips_parse(t->img, t->len, "t.tpk", want, &pc, &d) == 0);
    graph_feed **feed;
    int32_t *nfeed;
    int64_t *gather;
    TS_ASSERT(driver_train_feeds(pc.manifest, n, &feed, &nfeed, &gather, "t.tpk", &d) == 0);
    train_shape s;
    driver_train_shape_of_packages(pc.pkg, n, pc.micro_batches, feed, nfeed, gather, true, &s);
    host_spec ins[2] = {s.in[0][0], s.in[0][1]}, outs[16];
    int32_t nout = 0;
    for (int k = 0; k < 2; k++) ins[k].dim[0] *= 4 * s.micro;
    json_t *man = json_loads(pc.manifest, 0, NULL), *names = json_object_get(man, "outputs");
    for (size_t j = 0; t->rank == t->ranks - 1 && j < json_array_size(names); j++)
        TS_ASSERT(driver_train_output_spec(&s, json_string_value(json_array_get(names, j)), &outs[nout++]) == 0);
    float *x[2];
    for (int k = 0; k < 2; k++) {
        x[k] = malloc(sizeof(float) * (size_t)host_numel(&ins[k]));
        graph_default_input_fill(k, DT_F16, 0, x[k], (size_t)host_numel(&ins[k]));
    }
    mailbox box = {t->m, t->rank};
    chips_transport tp = {.rank = t->rank, .ranks = t->ranks, .send = mail_send, .recv = mail_recv, .ctx = &box};
    diag early = {0};
    if (t->fail) diag_fail(&early, "rank %d: its own trouble", t->rank);
    t->rc = driver_train_step_ranks(&s, &tp, t->fail ? &early : NULL, ins, 2, x, outs, nout, t->out, sim_program, &pc,
                                    t->cycles, &d);
    t->nout = nout;
    snprintf(t->why, sizeof t->why, "%s", d.text);
    json_decref(man);
    free(x[0]), free(x[1]);
    train_shape_free(&s);
    pkg_chips_free(&pc);
    return NULL;
}

/* 1, 2, 3 and 4 ranks (each on its own thread) give the same outputs and
 * cycles, bit for bit; a rank that fails before the step makes the last one
 * fail saying why, and nobody waits for ever; a message cut short is refused. */
static void train_ranks_agree(void **state) {
    (void)state;
    const char *spec = "zoo:train-mlp:tokens=32,width=32,hidden=64,optimizer=adamw";
    diag d = {0};
    graph *g = models_load(spec, &d);
    assert_non_null(g);
    machine m;
    assert_int_equal(machine_preset("tinyx4", &m), 0);
    compile_options co = {.model = spec, .search_steps = 16, .beam = 2, .quiet = true, .micro_batches = 2};
    train_compiled tc;
    if (driver_compile_train(g, &m, &co, &tc, &d)) fail_msg("%s", d.text);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(pkg_chips_write(&m, tc.manifest, tc.pkg, 5, 4, PKG_CHIPS_TRAIN, f, "t.tpk", &d), 0);
    fclose(f);
    train_rank want = {0};
    for (int ranks = 1; ranks <= 4; ranks++)
        for (int fail = -1; fail < (ranks > 1 ? ranks : 0); fail += ranks > 2 ? 2 : 1) {
            mail box = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
            train_rank t[4];
            pthread_t th[4];
            for (int k = 0; k < ranks; k++) {
                t[k] = (train_rank){.img = (uint8_t *)buf, .len = len, .rank = k, .ranks = ranks, .fail = k == fail, .m = &box};
                if (ranks == 1) { /* one process: no transport, driver_train_step itself */
                    break;
                }
                assert_int_equal(pthread_create(&th[k], NULL, train_rank_run, &t[k]), 0);
            }
            if (ranks == 1) {
                pkg_chips pc;
                assert_int_equal(pkg_chips_parse(buf, len, "t.tpk", NULL, &pc, &d), 0);
                graph_feed **feed;
                int32_t *nfeed;
                int64_t *gather;
                assert_int_equal(driver_train_feeds(pc.manifest, 4, &feed, &nfeed, &gather, "t.tpk", &d), 0);
                train_shape s;
                driver_train_shape_of_packages(pc.pkg, 4, pc.micro_batches, feed, nfeed, gather, true, &s);
                host_spec ins[2] = {s.in[0][0], s.in[0][1]}, *outs = driver_graph_specs(g, true, &want.nout);
                for (int k = 0; k < 2; k++) ins[k].dim[0] *= 4 * 2;
                float *x[2];
                for (int k = 0; k < 2; k++) {
                    x[k] = malloc(sizeof(float) * (size_t)host_numel(&ins[k]));
                    graph_default_input_fill(k, DT_F16, 0, x[k], (size_t)host_numel(&ins[k]));
                }
                if (driver_train_step(&s, ins, 2, x, outs, want.nout, want.out, sim_program, &pc, want.cycles, &d))
                    fail_msg("%s", d.text);
                /* The step computed here, apart from the driver: each replica's two
                 * micro-batches (the second adding to the first's sums), each
                 * owner's inputs stacked in replica order, the owners' rows of
                 * each output in owner order. */
                float **rep[4] = {0};
                for (int32_t r = 0; r < 4; r++)
                    for (int64_t mb = 0; mb < 2; mb++) {
                        float *in[16] = {0}, zeros[4096] = {0};
                        for (int32_t k = 0; k < s.nin[0]; k++) {
                            const char *name = s.in[0][k].name;
                            char acc[256];
                            snprintf(acc, sizeof acc, "%.*s.acc", (int)strlen(name) - 7, name); /* "<v>.acc_in" */
                            assert_true(host_numel(&s.in[0][k]) <= 4096);
                            in[k] = k < 2 ? x[k] + (r * 2 + mb) * host_numel(&s.in[0][k])
                                          : mb ? rep[r][host_find(s.out[0], s.nout[0], acc)] : zeros;
                        }
                        float **got = calloc(16, sizeof(float *));
                        uint64_t cy = 0;
                        assert_int_equal(sim_program(&pc, 0, r, in, got, &cy, &d), 0);
                        for (int32_t k = 0; rep[r] && k < s.nout[0]; k++) free(rep[r][k]);
                        free(rep[r]);
                        rep[r] = got;
                    }
                float *own[4][16] = {{0}};
                for (int32_t o = 0; o < 4; o++) {
                    float *in[16] = {0};
                    for (int32_t k = 0; k < s.nin[1 + o]; k++) {
                        const graph_feed *fd = NULL;
                        for (int32_t j = 0; j < s.nfeed[o]; j++)
                            if (strcmp(s.feed[o][j].input, s.in[1 + o][k].name) == 0) fd = &s.feed[o][j];
                        assert_non_null(fd);
                        int32_t src = host_find(s.out[0], s.nout[0], fd->from);
                        const host_spec *h = &s.out[0][src];
                        int64_t row = h->rank ? host_numel(h) / h->dim[0] : 1, each = fd->rows < 0 ? host_numel(h) : fd->rows * row;
                        in[k] = malloc(sizeof(float) * (size_t)(4 * each));
                        for (int32_t r = 0; r < 4; r++) memcpy(in[k] + r * each, rep[r][src] + fd->first * row, sizeof(float) * (size_t)each);
                    }
                    uint64_t cy = 0;
                    assert_int_equal(sim_program(&pc, 1 + o, o, in, own[o], &cy, &d), 0);
                    for (int32_t k = 0; k < s.nin[1 + o]; k++) free(in[k]);
                }
                int32_t ov[16];
                graph_outputs(g, ov, want.nout);
                for (int32_t j = 0; j < want.nout; j++) {
                    const char *name = graph_val(g, ov[j])->name;
                    int64_t at = 0;
                    for (int32_t o = 0; o < 4; o++) {
                        int32_t i = host_find(s.out[1 + o], s.nout[1 + o], name);
                        if (i < 0) continue;
                        int64_t k = host_numel(&s.out[1 + o][i]);
                        if (memcmp(want.out[j] + at, own[o][i], sizeof(float) * (size_t)k) != 0)
                            fail_msg("output %s: owner %d's rows are not the step's", name, (int)o);
                        at += k;
                    }
                    assert_int_equal(at, graph_type_numel(&graph_val(g, ov[j])->type));
                }
                for (int32_t r = 0; r < 4; r++) {
                    for (int32_t k = 0; k < s.nout[0]; k++) free(rep[r][k]);
                    free(rep[r]);
                }
                for (int32_t o = 0; o < 4; o++)
                    for (int32_t k = 0; k < s.nout[1 + o]; k++) free(own[o][k]);
                free(x[0]), free(x[1]), free(outs);
                train_shape_free(&s);
                pkg_chips_free(&pc);
                continue;
            }
            for (int k = 0; k < ranks; k++) pthread_join(th[k], NULL);
            train_rank *last = &t[ranks - 1];
            if (fail >= 0) {
                assert_int_equal(last->rc, -1);
                char says[64];
                snprintf(says, sizeof says, "rank %d: its own trouble", fail);
                if (!strstr(last->why, says)) fail_msg("%d ranks, rank %d failing: %s", ranks, fail, last->why);
            } else {
                if (last->rc) fail_msg("%d ranks: %s", ranks, last->why);
                assert_int_equal(last->nout, want.nout);
                int32_t ov[16];
                graph_outputs(g, ov, want.nout);
                for (int32_t j = 0; j < want.nout; j++)
                    assert_memory_equal(last->out[j], want.out[j], sizeof(float) * (size_t)graph_type_numel(&graph_val(g, ov[j])->type));
                assert_memory_equal(last->cycles, want.cycles, sizeof want.cycles);
            }
            for (int k = 0; k < ranks; k++)
                for (int32_t j = 0; j < t[k].nout; j++) free(t[k].out[j]);
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    for (int k = 0; k < BOX; k++) free(box.bytes[a][b][k]);
        }
    for (int32_t j = 0; j < want.nout; j++) free(want.out[j]);
    free(buf);
    train_compiled_free(&tc);
    graph_free(g);
}

/* The step's exchanges on a ring: every owner's rows from every other
 * replica (the reduce-scatter), every owner's new weight rows to every other
 * chip (the gather), each message the shorter way round, halved on a tie
 * (two chips: one link each way). One feed of 1,000 f32 rows per owner. */
static void train_timing_on_rings(void **state) {
    (void)state;
    for (int32_t n = 2; n <= 5; n++) {
        machine m;
        assert_int_equal(machine_preset("c600x4", &m), 0);
        host_spec rep = {.name = "g", .dtype = DT_F32, .declared = DT_F32, .rank = 2, .dim = {1000 * n, 1}};
        host_spec *in[6] = {0}, *out[6] = {0};
        int32_t nin[6] = {0}, nout[6] = {0};
        out[0] = &rep, nout[0] = 1;
        graph_feed f[5], *feed[5];
        int32_t nfeed[5];
        int64_t gather[5];
        for (int32_t o = 0; o < n; o++) {
            f[o] = (graph_feed){.input = "g.partials", .from = "g", .first = 1000 * o, .rows = 1000};
            feed[o] = &f[o], nfeed[o] = 1, gather[o] = 2000; /* 1,000 new rows of f16 */
        }
        train_shape s = {.n = n, .in = in, .out = out, .nin = nin, .nout = nout, .feed = feed, .nfeed = nfeed, .gather_bytes = gather};
        uint64_t cycles[6] = {100, 10, 30, 20, 10, 10};
        train_timing t;
        driver_train_timing(&m, &s, cycles, &t);
        /* Per link: n = 2, one message each way; n = 3, one (a neighbour each
         * way); n = 4, one and two halves; n = 5, one and one two hops away. */
        uint64_t msg = 4000, want[6] = {0, 0, msg, msg, 2 * msg, 3 * msg}, hops[6] = {0, 0, 1, 1, 2, 2};
        assert_int_equal(t.scatter_bytes, want[n]);
        assert_int_equal(t.scatter_total, (uint64_t)(n * (n - 1)) * msg);
        assert_int_equal(t.gather_bytes, want[n] / 2);
        uint64_t link = hops[n] * m.link_latency_cycles + (want[n] + m.link_bytes_per_cycle - 1) / m.link_bytes_per_cycle +
                        m.chip_sync_cycles;
        assert_int_equal(t.scatter, link);
        assert_int_equal(t.owner_max, 30);
        assert_int_equal(t.cycles, 100 + t.scatter + 30 + t.gather);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pipeline_ranks_agree),
        cmocka_unit_test(replicas_ranks_agree),
        cmocka_unit_test(train_timing_on_rings),
        cmocka_unit_test(train_ranks_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
