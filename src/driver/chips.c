#define _POSIX_C_SOURCE 200809L
/* chips.c: a model over several chips (docs/chips.md). The model is cut
 * through its layers into one pipeline stage per chip (graph_split_stages);
 * each stage is compiled, placed and packaged for one chip by the one-chip
 * compiler, unchanged; consecutive stages hand the carried activations over
 * the IPU-Link between neighbouring chips. The timing of the whole is the
 * stages' simulated (or predicted) cycles joined by the links' cost. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "wire.h"

uint64_t driver_chips_handed_bytes(const package *p) {
    uint64_t bytes = 0;
    for (int32_t b = 0; b < p->bindings.n; b++)
        if (p->bindings.v[b].role == PKG_OUTPUT)
            bytes += (uint64_t)sim_binding_numel(&p->bindings.v[b]) * (uint64_t)dtype_bytes(p->bindings.v[b].dtype);
    return bytes;
}

void driver_chips_timing(const machine *m, const uint64_t *stage, const uint64_t *link_bytes, int32_t n,
                         int64_t micro_batches, chips_timing *t) {
    memset(t, 0, sizeof *t);
    TS_ASSERT(n >= 1 && n <= CHIPS_MAX);
    t->n = n;
    t->replicas = 1; /* the caller sets its replicas: they run side by side, the same time */
    t->micro_batches = micro_batches;
    uint64_t busy = 0;
    for (int32_t s = 0; s < n; s++) {
        t->stage[s] = stage[s];
        if (s + 1 < n) {
            t->link_bytes[s] = link_bytes[s];
            t->link[s] = m->link_latency_cycles + (link_bytes[s] + m->link_bytes_per_cycle - 1) / m->link_bytes_per_cycle +
                         m->chip_sync_cycles;
        }
        uint64_t turn = t->stage[s] + t->link[s];   /* a stage is busy until its result has left */
        t->latency += turn;
        if (turn > t->interval) t->interval = turn;
        busy += turn;
    }
    /* M micro-batches: the first goes through every stage (the latency),
     * each further one leaves an interval later (the slowest stage). */
    t->cycles = t->latency + (uint64_t)(micro_batches - 1) * t->interval;
    t->imbalance = t->interval ? 1.0 - (double)busy / ((double)n * (double)t->interval) : 0;
    t->bubble = t->cycles ? 1.0 - (double)busy * (double)micro_batches / ((double)n * (double)t->cycles) : 0;
}

/* The manifest: the model, the machine's name, the batch, its replicas and
 * micro-batches, and per stage its layers, host inputs and outputs. */
static char *manifest_json(const char *model, const machine *m, const chips_compiled *cc) {
    const graph_stages *st = &cc->stages;
    const package *pkgs = cc->pkg;
    json_t *stages = json_array();
    for (int32_t s = 0; s < st->n; s++) {
        json_t *ins = json_array(), *outs = json_array();
        for (int32_t b = 0; b < pkgs[s].bindings.n; b++) {
            const pkg_binding *pb = &pkgs[s].bindings.v[b];
            if (pb->role == PKG_INPUT) json_array_append_new(ins, json_string(pb->name));
            if (pb->role == PKG_OUTPUT) json_array_append_new(outs, json_string(pb->name));
        }
        json_array_append_new(stages, json_pack("{s:i, s:I, s:I, s:o, s:o}", "stage", (int)s, "first_layer",
                                                (json_int_t)st->first[s], "layers", (json_int_t)st->count[s], "inputs",
                                                ins, "outputs", outs));
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:o}", "tessel", TESSEL_VERSION, "model", model, "machine", m->name,
                          "batch", (json_int_t)cc->batch, "micro_batches", (json_int_t)cc->micro_batches, "stages", stages);
    json_object_set_new(j, "replicas", json_integer(cc->replicas));
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    return text;
}

static char *recipe_json(const machine *m, const chips_compiled *cc) {
    json_t *stages = json_array();
    for (int32_t s = 0; s < cc->stages.n; s++) {
        json_t *r = json_loads(cc->info[s].recipe, 0, NULL);
        TS_ASSERT(r);
        json_array_append_new(stages, r);
    }
    json_t *layers = json_array();
    for (int32_t s = 0; s < cc->stages.n; s++) json_array_append_new(layers, json_integer(cc->stages.count[s]));
    json_t *j = json_pack("{s:s, s:i, s:I, s:i, s:o, s:o}", "machine", m->name, "chips", (int)m->chips, "micro_batches",
                          (json_int_t)cc->micro_batches, "replicas", (int)cc->replicas, "stages", stages, "layers", layers);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n', text[n + 1] = 0;
    return text;
}

struct json_t *driver_load_recipe_json(const char *path, diag *d) {
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, d)) return NULL;
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!j) return diag_fail(d, "%s:%d:%d: error: not a recipe: %s", path, err.line, err.column, err.text), NULL;
    return j;
}

/* A recipe for several chips: {"chips": N, "stages": [N one-chip recipes]}. */
static json_t *load_recipe(const char *path, const machine *m, diag *d) {
    json_t *j = driver_load_recipe_json(path, d);
    if (!j) return NULL;
    json_t *chips = json_object_get(j, "chips"), *stages = json_object_get(j, "stages"), *rep = json_object_get(j, "replicas");
    json_int_t replicas = json_is_integer(rep) ? json_integer_value(rep) : 1;
    if (!json_is_integer(chips) || !json_is_array(stages) || replicas < 1 ||
        (json_int_t)json_array_size(stages) * replicas != json_integer_value(chips)) {
        json_decref(j);
        return diag_fail(d, "%s: error: not a recipe for several chips (it needs \"chips\": N, \"replicas\": R and a "
                            "\"stages\" array of N / R recipes, as --save-recipe writes on a machine of several chips)",
                         path), NULL;
    }
    if (json_integer_value(chips) != (json_int_t)m->chips) {
        long long c = (long long)json_integer_value(chips);
        json_decref(j);
        return diag_fail(d, "%s: error: the recipe is for %lld chips; machine '%s' has %u", path, c, m->name,
                         (unsigned)m->chips), NULL;
    }
    return j;
}

/* One try: g (or its micro-batch form) cut and every stage compiled. */
static int compile_stages(const graph *g, const machine *m, const compile_options *o, const json_t *recipe,
                          chips_compiled *out, diag *d) {
    int32_t n = (int32_t)m->chips / out->replicas;
    int64_t pieces = out->replicas * out->micro_batches;
    const graph *gm = g;
    if (pieces > 1) {
        int64_t batch;
        if (!(out->micro = graph_micro_batch(g, out->batch / pieces, &batch, d))) return -1;
        gm = out->micro;
    }
    if (graph_split_stages(gm, n, out->cut, &out->stages, d)) return -1;
    out->pkg = xcalloc((size_t)n, sizeof(package));
    out->info = xcalloc((size_t)n, sizeof(compile_info));
    int rc = 0;
    for (int32_t s = 0; s < n && rc == 0; s++) {
        char model[1024], layers[96];
        snprintf(layers, sizeof layers, "layers %lld..%lld", (long long)out->stages.first[s],
                 (long long)(out->stages.first[s] + out->stages.count[s] - 1));
        snprintf(model, sizeof model, "%s [chip %d of %d: %s]", o->model, (int)s, (int)n, layers);
        compile_options so = *o;
        so.model = model;
        so.micro_batches = 0;
        char rname[1024], *rtext = NULL;
        if (recipe) {
            snprintf(rname, sizeof rname, "%s (chip %d)", o->recipe, (int)s);
            rtext = json_dumps(json_array_get(json_object_get(recipe, "stages"), (size_t)s), JSON_COMPACT);
            so.recipe = rname;
            so.recipe_text = rtext;
        }
        char detail[160];
        snprintf(detail, sizeof detail, "chip %d of %d, %s, %lld micro-batch%s", (int)s, (int)n, layers,
                 (long long)out->micro_batches, out->micro_batches > 1 ? "es" : "");
        progress_stage("compile", detail);
        rc = driver_compile(out->stages.g[s], &out->one, &so, &out->pkg[s], &out->info[s], d);
        free(rtext);
        if (rc == 0) out->ncompiled = s + 1;
        else if (d->set) { /* say which chip: the stage's own message follows */
            char why[sizeof d->text];
            snprintf(why, sizeof why, "%s", d->text);
            bool fit = d->no_fit;
            *d = (diag){0};
            if (fit) diag_fail_fit(d, "chip %d of %d (%s, micro-batches of %lld): %s", (int)s, (int)n, layers,
                                   (long long)(out->batch / pieces), why);
            else diag_fail(d, "%s", why);
        }
    }
    return rc;
}

static void free_stages(chips_compiled *c) {
    for (int32_t s = 0; c->info && s < c->stages.n; s++) { /* a stage that failed holds its search too */
        if (s < c->ncompiled) package_free(&c->pkg[s]);
        compile_info_free(&c->info[s]);
    }
    free(c->pkg);
    free(c->info);
    c->pkg = NULL, c->info = NULL, c->ncompiled = 0;
    graph_stages_free(&c->stages);
    graph_free(c->micro);
    c->micro = NULL;
}

/* The layers per stage that balance the pipeline (counts, n stages of
 * total layers), from a compile of cut `was` (its stages' predicted cycles
 * and links): each layer costs what a middle stage's cost on average, each
 * stage keeps its own remainder (the first stage's embedding, the last's
 * head) and its link; the layers go one at a time to the stage whose turn
 * stays shortest. Returns the model's busiest turn. */
static double balanced_cut(const chips_timing *t, const int64_t *was, int32_t n, int64_t total, int64_t *counts) {
    double mid = 0, layers = 0, fixed[CHIPS_MAX];
    for (int32_t s = 1; s + 1 < n; s++) mid += (double)t->stage[s], layers += (double)was[s];
    double per = mid / layers;
    for (int32_t s = 0; s < n; s++) fixed[s] = (double)t->stage[s] - per * (double)was[s] + (double)t->link[s], counts[s] = 1;
    for (int64_t left = total - n; left > 0; left--) {
        int32_t best = 0;
        for (int32_t s = 1; s < n; s++)
            if (fixed[s] + per * (double)(counts[s] + 1) < fixed[best] + per * (double)(counts[best] + 1)) best = s;
        counts[best]++;
    }
    double busiest = 0;
    for (int32_t s = 0; s < n; s++)
        if (fixed[s] + per * (double)counts[s] > busiest) busiest = fixed[s] + per * (double)counts[s];
    return busiest;
}

static void stage_cycles(const chips_compiled *c, int32_t n, uint64_t *stage, uint64_t *link) {
    for (int32_t s = 0; s < n; s++) {
        const search_result *sr = &c->info[s].search;
        int f = c->info[s].finalist;
        stage[s] = (uint64_t)(f >= 0 && f < sr->nfinalists ? sr->finalist_cycles[f] : sr->est.cycles);
        link[s] = s + 1 < n ? driver_chips_handed_bytes(&c->pkg[s]) : 0;
    }
}

/* out compiled with the even cut: the balanced cut instead when its model
 * predicts a busiest stage at least 1 % shorter and its compile agrees
 * (another compile of every stage; the even one is kept otherwise). */
static void rebalance(const graph *g, const machine *m, const compile_options *o, chips_compiled *out) {
    int32_t n = out->stages.n;
    if (n < 3) return; /* two stages: no middle stage to price a layer by */
    uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
    stage_cycles(out, n, stage, link);
    chips_timing was;
    driver_chips_timing(m, stage, link, n, out->micro_batches, &was);
    int64_t counts[CHIPS_MAX], total = 0;
    for (int32_t s = 0; s < n; s++) total += out->stages.count[s];
    double model = balanced_cut(&was, out->stages.count, n, total, counts);
    if (memcmp(counts, out->stages.count, sizeof(int64_t) * (size_t)n) == 0 || model > 0.99 * (double)was.interval) return;
    chips_compiled alt = {.batch = out->batch, .replicas = out->replicas, .micro_batches = out->micro_batches,
                          .cut = counts, .one = out->one};
    diag d = {0};
    progress_stage("compile", "the stages again, cut to balance their predicted cycles");
    if (compile_stages(g, m, o, NULL, &alt, &d) == 0) {
        uint64_t st2[CHIPS_MAX], ln2[CHIPS_MAX];
        stage_cycles(&alt, n, st2, ln2);
        chips_timing now;
        driver_chips_timing(m, st2, ln2, n, out->micro_batches, &now);
        if (now.interval < was.interval) {
            int64_t was_count[CHIPS_MAX];
            memcpy(was_count, out->stages.count, sizeof(int64_t) * (size_t)n);
            free_stages(out);
            out->micro = alt.micro, out->stages = alt.stages, out->pkg = alt.pkg, out->info = alt.info;
            out->ncompiled = alt.ncompiled;
            out->even_interval = was.interval;
            for (int32_t s = 0; s < n; s++) out->even_count[s] = was_count[s];
            return;
        }
    }
    free_stages(&alt);
}

/* The predicted cycles of c's batch. */
static uint64_t batch_cycles(const chips_compiled *c, const machine *m) {
    uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
    stage_cycles(c, c->stages.n, stage, link);
    chips_timing t;
    driver_chips_timing(m, stage, link, c->stages.n, c->micro_batches, &t);
    return t.cycles;
}

/* out compiled in the fewest micro-batches that fit: every larger count the
 * share of the batch splits into compiled too, the one whose batch takes
 * the fewest predicted cycles kept (the fewer micro-batches among equals).
 * More pieces shorten the fill and drain but run each stage on less. */
static void fastest_micro_batches(const graph *g, const machine *m, const compile_options *o, int64_t share,
                                  chips_compiled *out) {
    uint64_t best = batch_cycles(out, m);
    for (int64_t mb = out->micro_batches + 1; mb <= share; mb++) {
        if (share % mb) continue;
        chips_compiled alt = {.batch = out->batch, .replicas = out->replicas, .micro_batches = mb, .one = out->one};
        char what[96];
        snprintf(what, sizeof what, "the stages again, in %lld micro-batches", (long long)mb);
        progress_stage("compile", what);
        diag d = {0};
        uint64_t c = compile_stages(g, m, o, NULL, &alt, &d) == 0 ? batch_cycles(&alt, m) : UINT64_MAX;
        if (c < best) {
            free_stages(out);
            out->micro = alt.micro, out->stages = alt.stages, out->pkg = alt.pkg, out->info = alt.info;
            out->ncompiled = alt.ncompiled, out->micro_batches = mb, best = c;
        } else {
            free_stages(&alt);
        }
    }
}

/* g for m as `replicas` copies of a pipeline (out->batch, out->one set). */
static int compile_replicas(const graph *g, const machine *m, const compile_options *o, const json_t *recipe,
                            int32_t replicas, chips_compiled *out, diag *d) {
    int64_t want = o->micro_batches, cut[CHIPS_MAX];
    out->replicas = replicas;
    if (recipe && json_is_integer(json_object_get(recipe, "micro_batches")))
        want = json_integer_value(json_object_get(recipe, "micro_batches"));
    json_t *layers = recipe ? json_object_get(recipe, "layers") : NULL; /* the cut it was compiled with */
    if (json_is_array(layers) && json_array_size(layers) == m->chips / (uint32_t)replicas) {
        for (size_t s = 0; s < json_array_size(layers); s++) cut[s] = json_integer_value(json_array_get(layers, s));
        out->cut = cut;
    }
    if (out->replicas < 1 || m->chips % (uint32_t)out->replicas || out->batch % out->replicas)
        return diag_fail(d, "tessel compile: error: option '--replicas %d': the %u chips and the batch of %lld must both "
                            "split into that many replicas",
                         (int)out->replicas, (unsigned)m->chips, (long long)out->batch);
    int32_t n = (int32_t)m->chips / out->replicas; /* stages: the chips of one replica */
    int64_t share = out->batch / out->replicas;
    if (want > 0 && (share % want != 0))
        return diag_fail(d, "tessel compile: error: option '--micro-batches %lld': a batch of %lld does not split into %lld",
                         (long long)want, (long long)share, (long long)want);
    /* Micro-batches: as asked, or the fewest (the largest) whose stages fit. */
    int rc = -1;
    for (int64_t mb = want > 0 ? want : 1; mb <= share; mb++) {
        if (share % mb) continue;
        out->micro_batches = mb;
        diag dt = {0};
        rc = compile_stages(g, m, o, recipe, out, &dt);
        if (rc == 0 || want > 0 || !dt.no_fit || mb == share) {
            if (rc) *d = dt;
            break;
        }
        free_stages(out); /* does not fit: smaller micro-batches */
    }
    if (rc) return out->cut = NULL, rc;
    if (want == CHIPS_MICRO_AUTO && !recipe) fastest_micro_batches(g, m, o, share, out);
    if (!recipe && !out->cut) rebalance(g, m, o, out);
    out->cut = NULL; /* the compile's: cut is this call's */
    out->manifest = manifest_json(o->model, m, out);
    out->recipe = recipe_json(m, out);
    uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
    for (int32_t s = 0; s < n; s++) {
        const search_result *sr = &out->info[s].search;
        int f = out->info[s].finalist;
        stage[s] = (uint64_t)(f >= 0 && f < sr->nfinalists ? sr->finalist_cycles[f] : sr->est.cycles);
        link[s] = s + 1 < n ? driver_chips_handed_bytes(&out->pkg[s]) : 0;
    }
    driver_chips_timing(m, stage, link, n, out->micro_batches, &out->predicted);
    out->predicted.replicas = out->replicas;
    return 0;
}

int driver_compile_chips(const graph *g, const machine *m, const compile_options *o, chips_compiled *out, diag *d) {
    memset(out, 0, sizeof *out);
    TS_ASSERT(m->chips >= 1 && m->chips <= CHIPS_MAX);
    double t0 = util_now_seconds();
    json_t *recipe = NULL;
    if (o->recipe && !(recipe = load_recipe(o->recipe, m, d))) return -1;
    /* The batch: the inputs' common first axis (1 when there is none to split). */
    int32_t in0;
    int64_t batch = graph_inputs(g, &in0, 1) >= 1 && graph_val(g, in0)->type.rank >= 1 ? graph_val(g, in0)->type.dim[0] : 1;
    int32_t replicas = o->replicas > 0 ? o->replicas : 1;
    if (recipe && json_is_integer(json_object_get(recipe, "replicas")))
        replicas = (int32_t)json_integer_value(json_object_get(recipe, "replicas"));
    int rc = -1;
    if (o->replicas >= 0 || recipe) {
        out->one = machine_one_chip(m, NULL), out->batch = batch;
        rc = compile_replicas(g, m, o, recipe, replicas, out, d);
    } else {
        /* CHIPS_REPLICAS_AUTO: every replica count the chips and the batch
         * split into, the one whose batch takes the fewest predicted cycles
         * (the fewest replicas among equals); none that fits: the last error. */
        for (int32_t r = 1; r <= (int32_t)m->chips; r++) {
            if (m->chips % (uint32_t)r || batch % r) continue;
            chips_compiled c = {.one = machine_one_chip(m, NULL), .batch = batch};
            diag dt = {0};
            if (compile_replicas(g, m, o, NULL, r, &c, &dt)) {
                chips_compiled_free(&c);
                if (rc) *d = dt;
                continue;
            }
            if (rc == 0 && c.predicted.cycles >= out->predicted.cycles) {
                chips_compiled_free(&c);
                continue;
            }
            if (rc == 0) chips_compiled_free(out);
            *out = c, rc = 0, *d = (diag){0};
        }
    }
    json_decref(recipe);
    out->seconds = util_now_seconds() - t0;
    if (rc) chips_compiled_free(out);
    return rc;
}

void chips_compiled_free(chips_compiled *c) {
    free_stages(c);
    free(c->manifest);
    free(c->recipe);
    memset(c, 0, sizeof *c);
}

/* ---- running ----------------------------------------------------------- */

/* What a rank hands the next one: whether it went well, every chip so far's
 * cycles and link bytes, and the last chip's outputs by name (or, when it
 * failed, why). Little-endian, as the package. */
typedef struct handover {
    bool ok;
    int32_t chips;                  /* chips done so far */
    uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
    int32_t n;                      /* tensors */
    const char **name;
    int64_t *numel;
    float **data;                   /* owned */
    char why[2048];
} handover;

static uint8_t *handover_bytes(const handover *h, size_t *len) {
    char *buf = NULL;
    FILE *b = open_memstream(&buf, len);
    TS_ASSERT(b);
    wire_put32(b, h->ok);
    wire_put32(b, (uint32_t)h->chips);
    for (int32_t s = 0; s < h->chips; s++) wire_put64(b, h->stage[s]), wire_put64(b, h->link[s]);
    if (!h->ok) {
        wire_put32(b, (uint32_t)strlen(h->why));
        wire_put(b, h->why, strlen(h->why));
    } else {
        wire_put32(b, (uint32_t)h->n);
        for (int32_t k = 0; k < h->n; k++) wire_put_tensor(b, h->name[k], h->data[k], h->numel[k]);
    }
    TS_ASSERT(fclose(b) == 0);
    return (uint8_t *)buf;
}

/* Reads what the previous rank sent (untrusted: every length checked);
 * names point into bytes, which must outlive h. */
static int handover_parse(const uint8_t *bytes, size_t len, handover *h, const char *from, diag *d) {
    memset(h, 0, sizeof *h);
    wire_reader r = {bytes, bytes + len, false};
    h->ok = wire_get32(&r);
    h->chips = (int32_t)wire_get32(&r);
    if (h->chips < 0 || h->chips > CHIPS_MAX) r.bad = true;
    for (int32_t s = 0; s < h->chips && !r.bad; s++) h->stage[s] = wire_get64(&r), h->link[s] = wire_get64(&r);
    if (!r.bad && !h->ok) {
        uint32_t n = wire_get32(&r);
        if (n >= sizeof h->why || (size_t)(r.end - r.p) < n) r.bad = true;
        else memcpy(h->why, r.p, n), h->why[n] = 0, r.p += n;
    } else if (!r.bad) {
        h->n = (int32_t)wire_get32(&r);
        if (h->n < 0 || (size_t)h->n > len / 16) r.bad = true;
        if (!r.bad) {
            h->name = xcalloc((size_t)h->n + 1, sizeof(char *));
            h->numel = xcalloc((size_t)h->n + 1, sizeof(int64_t));
            h->data = xcalloc((size_t)h->n + 1, sizeof(float *));
        }
        for (int32_t k = 0; k < h->n && !r.bad; k++) {
            uint32_t nl = wire_get32(&r);
            if ((size_t)(r.end - r.p) < nl) {
                r.bad = true;
                break;
            }
            char *name = xmalloc(nl + 1);
            memcpy(name, r.p, nl);
            name[nl] = 0;
            r.p += nl;
            h->name[k] = name;
            uint64_t ne = wire_get64(&r);
            if (r.bad || ne > (uint64_t)(r.end - r.p) / 4) {
                r.bad = true;
                break;
            }
            h->numel[k] = (int64_t)ne;
            h->data[k] = xmalloc(sizeof(float) * (ne ? ne : 1));
            for (uint64_t e = 0; e < ne; e++) {
                uint32_t w = wire_get32(&r);
                memcpy(&h->data[k][e], &w, 4);
            }
        }
    }
    if (r.bad || r.p != r.end) return diag_fail(d, "error: the handover from %s is malformed", from);
    return 0;
}

static void handover_free(handover *h) {
    for (int32_t k = 0; h->name && k < h->n; k++) free((char *)h->name[k]), free(h->data[k]);
    free(h->name);
    free(h->numel);
    free(h->data);
    h->name = NULL, h->numel = NULL, h->data = NULL;
}

/* Stage `chip`'s inputs (its package's input bindings, in order) from the
 * tensors of h by name, checking each one's size. */
static int inputs_from(const handover *h, const package *p, float **to, const char *path, int32_t chip, diag *d) {
    int32_t k = 0;
    for (int32_t b = 0; b < p->bindings.n; b++) {
        const pkg_binding *in = &p->bindings.v[b];
        if (in->role != PKG_INPUT) continue;
        int32_t found = -1;
        for (int32_t j = 0; j < h->n && found < 0; j++)
            if (strcmp(h->name[j], in->name) == 0 && h->numel[j] == sim_binding_numel(in)) found = j;
        if (found < 0)
            return diag_fail(d, "%s: error: chip %d's input '%s' is no output of chip %d", path, (int)chip, in->name,
                             (int)chip - 1);
        to[k++] = h->data[found];
    }
    return 0;
}

/* Chip s's outputs as a handover (data borrowed from outs). */
static void handover_of(const package *p, float **outs, handover *h) {
    h->n = 0;
    h->name = xcalloc((size_t)p->bindings.n + 1, sizeof(char *));
    h->numel = xcalloc((size_t)p->bindings.n + 1, sizeof(int64_t));
    h->data = xcalloc((size_t)p->bindings.n + 1, sizeof(float *));
    for (int32_t b = 0; b < p->bindings.n; b++) {
        const pkg_binding *o = &p->bindings.v[b];
        if (o->role != PKG_OUTPUT) continue;
        h->name[h->n] = o->name;
        h->numel[h->n] = sim_binding_numel(o);
        h->data[h->n] = outs[h->n];
        h->n++;
    }
}

static int send_failure(const chips_transport *tp, int to, int32_t chips_done, const diag *d) {
    handover give = {.ok = false, .chips = chips_done};
    snprintf(give.why, sizeof give.why, "%s", d->set ? d->text : "error: an earlier rank failed");
    size_t k = strlen(give.why), blen;
    if (k && give.why[k - 1] == '\n') give.why[k - 1] = 0;
    uint8_t *b = handover_bytes(&give, &blen);
    diag sd = {0};
    int rc = tp->send(tp->ctx, to, b, blen, &sd);
    free(b);
    return rc;
}

/* The rank that runs chip c. */
static int rank_of(int32_t chips, int32_t c, const chips_transport *tp) {
    int r = 0;
    while (driver_chips_first(chips, r + 1, tp->ranks) <= c) r++;
    return r;
}

/* Where this rank sends first: the chain of its first replica's chips, or
 * (its replica's last chip here) the rank with the last chip; -1: nowhere. */
static int first_target(const pkg_chips *pc, const chips_transport *tp) {
    int32_t S = pc->n, C = S * pc->replicas;
    int32_t first = driver_chips_first(C, tp->rank, tp->ranks), end = driver_chips_first(C, tp->rank + 1, tp->ranks);
    if (first >= end || end == C) return -1;
    int32_t hi = end < (first / S + 1) * S ? end : (first / S + 1) * S;
    return hi < (first / S + 1) * S ? rank_of(C, hi, tp) : rank_of(C, C - 1, tp);
}

void driver_chips_hand_on_failure(const pkg_chips *pc, const chips_transport *tp, const diag *d) {
    if (!tp || tp->ranks <= 1) return;
    int to = first_target(pc, tp);
    if (to >= 0) send_failure(tp, to, 0, d);
}

int32_t driver_chips_first(int32_t chips, int rank, int ranks) {
    return (int32_t)((int64_t)chips * rank / ranks);
}

/* The outputs of the last stage, h, at their place in the batch: piece
 * `piece` of every output (outputs allocated at the first piece). */
static void place_outputs(const pkg_chips *pc, const handover *h, int64_t piece, float **outputs) {
    int64_t pieces = pc->replicas * pc->micro_batches;
    for (int32_t j = 0; j < h->n; j++) {
        if (!outputs[j]) outputs[j] = xcalloc((size_t)(h->numel[j] * pieces + 1), sizeof(float));
        memcpy(outputs[j] + piece * h->numel[j], h->data[j], sizeof(float) * (size_t)h->numel[j]);
    }
}

static void merge_cycles(handover *into, const handover *h) {
    for (int32_t s = 0; s < h->chips && s < CHIPS_MAX; s++) {
        if (h->stage[s] > into->stage[s]) into->stage[s] = h->stage[s];
        into->link[s] = h->link[s];
    }
}

/* Receives a handover from rank `from` into got; a failure it reports ends
 * this rank's run too (the last rank saying why; others pass it on to `to`). */
static int receive(const chips_transport *tp, int from, int32_t chip, bool final, int to, handover *got, uint8_t **bytes,
                   diag *d) {
    size_t len = 0;
    char what[64];
    snprintf(what, sizeof what, "rank %d (chip %d)", from, (int)chip);
    int rc = tp->recv(tp->ctx, from, bytes, &len, d);
    if (rc == 0) rc = handover_parse(*bytes, len, got, what, d);
    if (rc == 0 && !got->ok) {
        if (final) diag_fail(d, "tessel run: error: no outputs: an earlier rank failed (%s)", got->why);
        else *d = (diag){.set = true};
        if (to >= 0) {
            diag why = {.set = true};
            snprintf(why.text, sizeof why.text, "%s", got->why);
            send_failure(tp, to, got->chips, &why);
        }
        rc = 1; /* handed on already */
    }
    return rc;
}

/* Replica `rep`'s chips on this rank, [lo, hi), on micro-batch mb: the
 * chain from the previous rank (when the replica starts there), each
 * chip's stage in turn, then the chain to the next rank or, from the
 * replica's last chip, its outputs: placed (on the rank with the last
 * chip) or sent there. Cycles and link bytes into give, by stage. */
static int run_piece(const pkg_chips *pc, const char *path, const chips_transport *tp, const sim_options *so,
                     float *const *inputs, float **outputs, sim_stats *st, int32_t rep, int32_t lo, int32_t hi, int64_t mb,
                     handover *give, diag *d) {
    int32_t S = pc->n, C = S * pc->replicas, base = rep * S;
    bool final = driver_chips_first(C, tp->rank + 1, tp->ranks) == C, ends = hi == base + S;
    int to = !ends ? rank_of(C, hi, tp) : final ? -1 : rank_of(C, C - 1, tp);
    int64_t piece = (int64_t)rep * pc->micro_batches + mb;
    handover got = {.ok = true};
    uint8_t *bytes = NULL;
    int rc = 0;
    if (lo > base) { /* the replica's earlier chips ran on another rank */
        rc = receive(tp, rank_of(C, lo - 1, tp), lo - 1, final, to, &got, &bytes, d);
        if (rc == 0 && got.chips != lo - base)
            rc = diag_fail(d, "error: rank %d handed over %d stages' results, not %d", rank_of(C, lo - 1, tp), got.chips, lo - base);
        if (rc == 0) merge_cycles(give, &got);
    }
    float **prev_out = NULL;
    int32_t prev_n = 0;
    for (int32_t c = lo; c < hi && rc == 0; c++) {
        int32_t s = c - base;
        const package *p = &pc->pkg[s];
        TS_ASSERT(pc->loaded[s]);
        int32_t nin = 0, nout = 0;
        for (int32_t b = 0; b < p->bindings.n; b++) nin += p->bindings.v[b].role == PKG_INPUT, nout += p->bindings.v[b].role == PKG_OUTPUT;
        float **in = xcalloc((size_t)nin + 1, sizeof(float *));
        if (s == 0) { /* this piece of every host input */
            for (int32_t b = 0, k = 0; b < p->bindings.n; b++)
                if (p->bindings.v[b].role == PKG_INPUT) in[k] = inputs[k] + piece * sim_binding_numel(&p->bindings.v[b]), k++;
        } else if (c == lo) {
            rc = inputs_from(&got, p, in, path, s, d);
        } else {
            handover h = {0};
            handover_of(&pc->pkg[s - 1], prev_out, &h);
            rc = inputs_from(&h, p, in, path, s, d);
            free(h.name), free(h.numel), free(h.data);
        }
        float **out = xcalloc((size_t)nout + 1, sizeof(float *));
        sim_stats_free(&st[c]);
        if (rc == 0) rc = sim_run(p, so, in, out, &st[c], d);
        free(in);
        for (int32_t j = 0; prev_out && j < prev_n; j++) free(prev_out[j]);
        free(prev_out);
        prev_out = out, prev_n = nout;
        if (rc == 0) {
            if (st[c].cycles > give->stage[s]) give->stage[s] = st[c].cycles;
            give->link[s] = s + 1 < S ? driver_chips_handed_bytes(p) : 0;
        }
    }
    if (rc == 0) {
        handover h = *give;
        h.ok = true;
        h.chips = hi - base;
        handover_of(&pc->pkg[hi - 1 - base], prev_out, &h);
        if (ends && final) {
            place_outputs(pc, &h, piece, outputs);
        } else {
            size_t blen;
            uint8_t *b = handover_bytes(&h, &blen);
            rc = tp->send(tp->ctx, to, b, blen, d);
            free(b);
        }
        free(h.name), free(h.numel), free(h.data);
    } else if (rc < 0 && to >= 0) {
        send_failure(tp, to, hi - base, d); /* the next rank fails saying why */
    }
    for (int32_t j = 0; prev_out && j < prev_n; j++) free(prev_out[j]);
    free(prev_out);
    handover_free(&got);
    free(bytes);
    return rc ? -1 : 0;
}

int driver_run_chips(const pkg_chips *pc, const char *path, const chips_transport *tp, const sim_options *so,
                     float *const *inputs, float **outputs, sim_stats *st, chips_timing *t, bool *last, diag *d) {
    static const chips_transport alone = {.rank = 0, .ranks = 1};
    if (!tp) tp = &alone;
    int32_t S = pc->n, C = S * pc->replicas;
    int32_t first = driver_chips_first(C, tp->rank, tp->ranks), end = driver_chips_first(C, tp->rank + 1, tp->ranks);
    *last = end == C;
    handover give = {.ok = true};
    int rc = 0;
    /* The rank with the last chip takes the other replicas' outputs first:
     * they depend on nothing it does, so nobody waits in a circle. */
    for (int32_t rep = 0; *last && rep < pc->replicas && (rep + 1) * S - 1 < first && rc == 0; rep++)
        for (int64_t mb = 0; mb < pc->micro_batches && rc == 0; mb++) {
            handover got = {.ok = true};
            uint8_t *bytes = NULL;
            rc = receive(tp, rank_of(C, (rep + 1) * S - 1, tp), (rep + 1) * S - 1, true, -1, &got, &bytes, d);
            if (rc == 0 && got.chips != S) rc = diag_fail(d, "error: a replica's outputs came with %d stages, not %d", got.chips, S);
            if (rc == 0) {
                const package *p = &pc->pkg[S - 1];
                int32_t k = 0;
                for (int32_t b = 0; b < p->bindings.n; b++) k += p->bindings.v[b].role == PKG_OUTPUT;
                if (got.n != k) rc = diag_fail(d, "error: a replica's outputs are %d tensors, not %d", got.n, k);
            }
            if (rc == 0) merge_cycles(&give, &got), place_outputs(pc, &got, (int64_t)rep * pc->micro_batches + mb, outputs);
            handover_free(&got);
            free(bytes);
            rc = rc ? -1 : 0;
        }
    for (int32_t rep = first / S; rep * S < end && rc == 0; rep++) {
        int32_t lo = first > rep * S ? first : rep * S, hi = end < (rep + 1) * S ? end : (rep + 1) * S;
        for (int64_t mb = 0; mb < pc->micro_batches && rc == 0; mb++)
            rc = run_piece(pc, path, tp, so, inputs, outputs, st, rep, lo, hi, mb, &give, d);
    }
    if (rc == 0 && *last) {
        driver_chips_timing(&pc->machine, give.stage, give.link, S, pc->micro_batches, t);
        t->replicas = pc->replicas;
    }
    if (rc && *last)
        for (int32_t j = 0; j < CHIPS_MAX && outputs[j]; j++) free(outputs[j]), outputs[j] = NULL;
    return rc;
}
