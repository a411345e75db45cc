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

static uint64_t binding_bytes(const pkg_binding *b) {
    return (uint64_t)sim_binding_numel(b) * (uint64_t)dtype_bytes(b->dtype);
}

void driver_chips_timing(const machine *m, const uint64_t *stage, const uint64_t *link_bytes, int32_t n,
                         int64_t micro_batches, chips_timing *t) {
    memset(t, 0, sizeof *t);
    TS_ASSERT(n >= 1 && n <= CHIPS_MAX);
    t->n = n;
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

/* The manifest: the model, the machine's name, and per chip its stage's
 * layers, host inputs and outputs. */
static char *manifest_json(const char *model, const machine *m, const graph_stages *st, const package *pkgs) {
    json_t *stages = json_array();
    for (int32_t s = 0; s < st->n; s++) {
        json_t *ins = json_array(), *outs = json_array();
        for (int32_t b = 0; b < pkgs[s].bindings.n; b++) {
            const pkg_binding *pb = &pkgs[s].bindings.v[b];
            if (pb->role == PKG_INPUT) json_array_append_new(ins, json_string(pb->name));
            if (pb->role == PKG_OUTPUT) json_array_append_new(outs, json_string(pb->name));
        }
        json_array_append_new(stages, json_pack("{s:i, s:I, s:I, s:o, s:o}", "chip", (int)s, "first_layer",
                                                (json_int_t)st->first[s], "layers", (json_int_t)st->count[s], "inputs",
                                                ins, "outputs", outs));
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:o}", "tessel", TESSEL_VERSION, "model", model, "machine", m->name, "stages", stages);
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
    json_t *j = json_pack("{s:s, s:i, s:o}", "machine", m->name, "chips", (int)m->chips, "stages", stages);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n', text[n + 1] = 0;
    return text;
}

/* A recipe for several chips: {"chips": N, "stages": [N one-chip recipes]}. */
static json_t *load_recipe(const char *path, const machine *m, diag *d) {
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, d)) return NULL;
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!j) return diag_fail(d, "%s:%d:%d: error: not a recipe: %s", path, err.line, err.column, err.text), NULL;
    json_t *chips = json_object_get(j, "chips"), *stages = json_object_get(j, "stages");
    if (!json_is_integer(chips) || !json_is_array(stages) || json_array_size(stages) != (size_t)json_integer_value(chips)) {
        json_decref(j);
        return diag_fail(d, "%s: error: not a recipe for several chips (it needs \"chips\": N and a \"stages\" array of N "
                            "recipes, as --save-recipe writes on a machine of several chips)", path), NULL;
    }
    if (json_integer_value(chips) != (json_int_t)m->chips) {
        long long c = (long long)json_integer_value(chips);
        json_decref(j);
        return diag_fail(d, "%s: error: the recipe is for %lld chips; machine '%s' has %u", path, c, m->name,
                         (unsigned)m->chips), NULL;
    }
    return j;
}

int driver_compile_chips(const graph *g, const machine *m, const compile_options *o, chips_compiled *out, diag *d) {
    memset(out, 0, sizeof *out);
    TS_ASSERT(m->chips >= 1 && m->chips <= CHIPS_MAX);
    double t0 = util_now_seconds();
    int32_t n = (int32_t)m->chips;
    json_t *recipe = NULL;
    if (o->recipe && !(recipe = load_recipe(o->recipe, m, d))) return -1;
    if (graph_split_stages(g, n, &out->stages, d)) return json_decref(recipe), -1;
    out->one = machine_one_chip(m, NULL);
    out->pkg = xcalloc((size_t)n, sizeof(package));
    out->info = xcalloc((size_t)n, sizeof(compile_info));
    int rc = 0;
    for (int32_t s = 0; s < n && rc == 0; s++) {
        char model[1024];
        snprintf(model, sizeof model, "%s [chip %d of %d: layers %lld..%lld]", o->model, (int)s, (int)n,
                 (long long)out->stages.first[s], (long long)(out->stages.first[s] + out->stages.count[s] - 1));
        compile_options so = *o;
        so.model = model;
        char rname[1024], *rtext = NULL;
        if (recipe) {
            snprintf(rname, sizeof rname, "%s (chip %d)", o->recipe, (int)s);
            rtext = json_dumps(json_array_get(json_object_get(recipe, "stages"), (size_t)s), JSON_COMPACT);
            so.recipe = rname;
            so.recipe_text = rtext;
        }
        char detail[128];
        snprintf(detail, sizeof detail, "chip %d of %d, layers %lld..%lld", (int)s, (int)n, (long long)out->stages.first[s],
                 (long long)(out->stages.first[s] + out->stages.count[s] - 1));
        progress_stage("compile", detail);
        rc = driver_compile(out->stages.g[s], &out->one, &so, &out->pkg[s], &out->info[s], d);
        free(rtext);
        if (rc == 0) out->ncompiled = s + 1;
        else if (d->set) {
            /* Say which chip: the stage's own message follows. */
            char why[sizeof d->text];
            snprintf(why, sizeof why, "%s", d->text);
            bool fit = d->no_fit;
            *d = (diag){0};
            if (fit) diag_fail_fit(d, "chip %d of %d (layers %lld..%lld): %s", (int)s, (int)n,
                                   (long long)out->stages.first[s],
                                   (long long)(out->stages.first[s] + out->stages.count[s] - 1), why);
            else diag_fail(d, "%s", why);
        }
    }
    if (rc == 0) {
        out->manifest = manifest_json(o->model, m, &out->stages, out->pkg);
        out->recipe = recipe_json(m, out);
        uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
        for (int32_t s = 0; s < n; s++) {
            const search_result *sr = &out->info[s].search;
            int f = out->info[s].finalist;
            stage[s] = (uint64_t)(f >= 0 && f < sr->nfinalists ? sr->finalist_cycles[f] : sr->est.cycles);
            link[s] = 0;
            for (int32_t b = 0; s + 1 < n && b < out->pkg[s].bindings.n; b++)
                if (out->pkg[s].bindings.v[b].role == PKG_OUTPUT) link[s] += binding_bytes(&out->pkg[s].bindings.v[b]);
        }
        driver_chips_timing(m, stage, link, n, 1, &out->predicted);
    }
    json_decref(recipe);
    out->seconds = util_now_seconds() - t0;
    if (rc) chips_compiled_free(out);
    return rc;
}

void chips_compiled_free(chips_compiled *c) {
    for (int32_t s = 0; s < c->ncompiled; s++) {
        package_free(&c->pkg[s]);
        compile_info_free(&c->info[s]);
    }
    free(c->pkg);
    free(c->info);
    free(c->manifest);
    free(c->recipe);
    graph_stages_free(&c->stages);
    memset(c, 0, sizeof *c);
}

/* The bindings of package p with role `role`, by name, into the values of
 * `from` (bindings of q with role PKG_OUTPUT): stage s + 1's inputs are
 * stage s's outputs of the same names. */
static int hand_over(const package *q, float **from, const package *p, float **to, const char *path, int32_t chip, diag *d) {
    int32_t k = 0;
    for (int32_t b = 0; b < p->bindings.n; b++) {
        const pkg_binding *in = &p->bindings.v[b];
        if (in->role != PKG_INPUT) continue;
        int32_t j = 0, found = -1;
        for (int32_t c = 0; c < q->bindings.n; c++) {
            const pkg_binding *o = &q->bindings.v[c];
            if (o->role != PKG_OUTPUT) continue;
            if (strcmp(o->name, in->name) == 0 && o->dtype == in->dtype && o->scale == in->scale &&
                sim_binding_numel(o) == sim_binding_numel(in))
                found = j;
            j++;
        }
        if (found < 0)
            return diag_fail(d, "%s: error: chip %d's input '%s' is no output of chip %d", path, (int)chip, in->name,
                             (int)chip - 1);
        to[k++] = from[found];
    }
    return 0;
}

int driver_run_chips(const pkg_chips *pc, const char *path, const sim_options *so, float *const *inputs, float **outputs,
                     sim_stats *st, chips_timing *t, diag *d) {
    int32_t n = pc->n;
    float ***outs = xcalloc((size_t)n, sizeof(float **));
    int32_t *nouts = xcalloc((size_t)n, sizeof(int32_t));
    uint64_t stage[CHIPS_MAX], link[CHIPS_MAX];
    int rc = 0;
    for (int32_t s = 0; s < n && rc == 0; s++) {
        const package *p = &pc->pkg[s];
        TS_ASSERT(pc->loaded[s]);
        int32_t nin = 0, nout = 0;
        for (int32_t b = 0; b < p->bindings.n; b++) nin += p->bindings.v[b].role == PKG_INPUT, nout += p->bindings.v[b].role == PKG_OUTPUT;
        float **in = xcalloc((size_t)nin + 1, sizeof(float *));
        if (s == 0) memcpy(in, inputs, sizeof(float *) * (size_t)nin);
        else rc = hand_over(&pc->pkg[s - 1], outs[s - 1], p, in, path, s, d);
        outs[s] = s + 1 == n ? outputs : xcalloc((size_t)nout + 1, sizeof(float *));
        nouts[s] = nout;
        if (rc == 0) rc = sim_run(p, so, in, outs[s], &st[s], d);
        free(in);
        if (rc == 0) {
            stage[s] = st[s].cycles;
            link[s] = 0;
            for (int32_t b = 0; s + 1 < n && b < p->bindings.n; b++)
                if (p->bindings.v[b].role == PKG_OUTPUT) link[s] += binding_bytes(&p->bindings.v[b]);
        }
    }
    for (int32_t s = 0; s + 1 < n; s++) {
        for (int32_t j = 0; outs[s] && j < nouts[s]; j++) free(outs[s][j]);
        free(outs[s]);
    }
    free(outs);
    free(nouts);
    if (rc == 0) driver_chips_timing(&pc->machine, stage, link, n, 1, t);
    return rc;
}
