/* compile.c: the compiler, its passes run in order on one finalist after
 * another until one places (driver_compile). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "driver.h"
#include "../low/lower.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The package's metadata: what was compiled, statistics, the plan's numeric
 * decisions (which the plan-exact reference reads back) and its recipe. */
static char *meta_json(const graph *g, const machine *m, const char *model, const compile_info *ci, const char *numerics,
                       const char *recipe) {
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:{s:i, s:i, s:i, s:I, s:I, s:I}}", "tessel", TESSEL_VERSION, "model", model, "graph",
                          g->name, "machine", m->name, "compile", "tile_bytes", (int)ci->place.tile_bytes, "param_bytes",
                          (int)ci->place.param_bytes, "buffers", (int)ci->place.buffers, "steps", (json_int_t)ci->steps,
                          "runs", (json_int_t)ci->runs, "fragments", (json_int_t)ci->frags);
    json_object_set_new(j, "numerics", json_loads(numerics, 0, NULL));
    json_object_set_new(j, "recipe", json_loads(recipe, 0, NULL));
    if (g->declared) { /* the inputs' dtypes as the source model declares them (run takes data in them) */
        int32_t n = graph_inputs(g, NULL, 0), *ids = xcalloc((size_t)n + 1, sizeof(int32_t));
        graph_inputs(g, ids, n);
        json_t *dj = json_object();
        for (int32_t i = 0; i < n; i++) json_object_set_new(dj, graph_val(g, ids[i])->name, json_string(dtype_name(g->declared[i])));
        json_object_set_new(j, "declared_inputs", dj);
        free(ids);
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return s;
}

static FILE *print_to(const compile_options *o) { return o->print_to ? o->print_to : stderr; }
static bool printing_after(const compile_options *o, const char *pass) {
    return o->print_after && strcmp(o->print_after, pass) == 0;
}
static void print_mid_after(void *ctx, const char *pass, const mid_program *p) {
    if (printing_after(ctx, pass)) mid_print(print_to(ctx), p);
}
static void print_low_after(const compile_options *o, const char *pass, const low_program *p) {
    if (printing_after(o, pass)) low_print(print_to(o), p);
}
static void print_graph_after(const compile_options *o, const char *pass, const graph *g) {
    if (!printing_after(o, pass)) return;
    char *text = graph_print(g);
    fputs(text, print_to(o));
    free(text);
}

/* The op of g an op of gc (g after fusion) stands for: by stable name, or
 * for a fused op its matmul (its GEMM is the matmul's). */
static int32_t model_op(const graph *g, const graph *gc, const fuse_plan *fp, int32_t op, bool *gemm) {
    const char *name = graph_op_name(gc, op);
    *gemm = false;
    for (int32_t k = 0; k < fp->n; k++)
        if (fp->c[k].fused && !fp->c[k].given && strcmp(graph_op_name(g, fp->c[k].consumer), name) == 0) {
            *gemm = true;
            return fp->c[k].gemm;
        }
    int32_t v = graph_lookup(g, name);
    TS_ASSERT(v >= 0);
    return graph_val(g, v)->def;
}

static void plan_copy(graph_numerics *out, graph_op_plan *q, const graph_op_plan *pl, int32_t nin) {
    *q = *pl;
    if (graph_kind_has_gemm(q->kind)) {
        q->gemm.k_bounds = arena_alloc(&out->arena, sizeof(int64_t) * (size_t)(pl->gemm.nk + 1));
        memcpy(q->gemm.k_bounds, pl->gemm.k_bounds, sizeof(int64_t) * (size_t)(pl->gemm.nk + 1));
    }
    if (q->kind == OP_GLOBAL_NORM_CLIP) {
        q->grads = arena_alloc(&out->arena, sizeof(graph_norm_grad) * (size_t)nin);
        memcpy(q->grads, pl->grads, sizeof(graph_norm_grad) * (size_t)nin);
    }
}

/* The plan's numeric decisions keyed to the model g as given, from those
 * of the graph gc it compiled: a fused op's GEMM is its matmul's in gm (g
 * with its siblings joined), a joined matmul's every member's in g (each
 * element of it is computed as the member's own); every other op keeps its
 * stable name. */
static void numerics_for_model(const graph *g, const graph *gm, const graph *gc, const graph_numerics *nu,
                               const fuse_plan *fp, const sib_plan *sp, graph_numerics *out) {
    graph_numerics mnu;
    graph_numerics_init(&mnu, gm);
    for (int32_t i = 0; i < gc->ops.n; i++) {
        const graph_op_plan *pl = &nu->op[i];
        if (pl->kind == OP_INPUT) continue;
        bool gemm;
        int32_t at = model_op(gm, gc, fp, i, &gemm);
        plan_copy(&mnu, &mnu.op[at], pl, graph_opr(gc, i)->nin);
        if (gemm) mnu.op[at].kind = graph_opr(gm, at)->kind; /* the product's: its matmul, or its reduce_sum */
    }
    graph_numerics_init(out, g);
    for (int32_t i = 0; i < gm->ops.n; i++) {
        const graph_op_plan *pl = &mnu.op[i];
        if (pl->kind == OP_INPUT) continue;
        int32_t k = gm == g ? -1 : graph_siblings_group(sp, graph_op_name(gm, i));
        if (k < 0) {
            int32_t v = graph_lookup(g, graph_op_name(gm, i));
            TS_ASSERT(v >= 0);
            int32_t at = graph_val(g, v)->def;
            plan_copy(out, &out->op[at], pl, graph_opr(gm, i)->nin);
            continue;
        }
        for (int32_t j = 0; j < sp->v[k].n; j++) plan_copy(out, &out->op[sp->v[k].mm[j]], pl, 2);
    }
    graph_numerics_free(&mnu);
}

/* Lowering and the schedule: low holds the scheduled program (in arena la). */
static int lower(const mid_program *mid, const machine *m, const compile_options *o, arena *la, low_program *low,
                 compile_info *info, diag *d) {
    if (low_lower(mid, m, la, low, d)) return -1;
    print_low_after(o, "lower", low);
    /* Supersteps: independent copies share exchange phases. */
    low_program sched;
    info->steps_merged = place_schedule(low, la, &sched, NULL);
    *low = sched;
    print_low_after(o, "schedule", low);
    info->prims = mid->prims.n;
    info->steps = low->steps.n;
    info->runs = low->runs.n;
    info->frags = low->frags.n;
    return 0;
}

/* The package's metadata: the plan's numeric decisions read off mid (the
 * program of gc, the model g after the graph passes) keyed to g, so it
 * checks against the model as given, and the recipe. */
static void package_meta(const graph *g, const graph *gc, const machine *m, const compile_options *o, const mid_program *mid,
                         const compile_info *info, package *out) {
    graph_numerics nu, ng;
    mid_numerics(mid, &nu);
    if (gc != g) {
        numerics_for_model(g, driver_model_graph(g, info), gc, &nu, &info->fusions, &info->siblings, &ng);
        graph_numerics_free(&nu);
        nu = ng;
    }
    char *nj = graph_numerics_json(g, &nu), *meta = meta_json(g, m, o->model, info, nj, info->recipe);
    out->meta = arena_strdup(&out->arena, meta);
    free(meta);
    free(nj);
    graph_numerics_free(&nu);
}

static int build_finalist(const graph *g, const graph *gc, const machine *m, const compile_options *o, const mid_plan *plan,
                          package *out, compile_info *info, diag *d);

/* One finalist through the passes after the search: expansion and the mid
 * passes, lowering, the schedule, placement (build_finalist). */
static int build_package(const graph *g, const graph *gc, const machine *m, const compile_options *o, const mid_plan *plan,
                         package *out, compile_info *info, diag *d) {
    /* --print-after shows the packaged finalist's program: each attempt's
     * text is held until it places. */
    compile_options held = *o;
    char *text = NULL;
    size_t len = 0;
    if (o->print_after && !(held.print_to = open_memstream(&text, &len))) held.print_to = o->print_to;
    int rc = build_finalist(g, gc, m, &held, plan, out, info, d);
    if (held.print_to != o->print_to) {
        fclose(held.print_to);
        if (rc == 0) fwrite(text, 1, len, print_to(o));
        free(text);
    }
    return rc;
}

static int build_finalist(const graph *g, const graph *gc, const machine *m, const compile_options *o, const mid_plan *plan,
                          package *out, compile_info *info, diag *d) {
    mid_plan pl;
    mid_plan_copy(&pl, plan);
    mid_program mid;
    mid_watch watch = {print_mid_after, (void *)o};
    progress_stage("compile", "expanding the plan");
    int rc = mid_build(gc, m, &pl, &mid, &watch, d);
    mid_plan_free(&pl);
    if (rc) return -1;
    double t0 = util_now_seconds();
    arena la;
    arena_init(&la);
    low_program low;
    progress_stage("compile", "lowering to per-tile runs and exchanges");
    rc = lower(&mid, m, o, &la, &low, info, d);
    info->lower_seconds += util_now_seconds() - t0;
    t0 = util_now_seconds();
    /* Placement first fills the statistics the metadata reports. */
    if (rc == 0) rc = place_package(&low, m, "{}", !o->fit_only, out, &info->place, d);
    info->place_seconds += util_now_seconds() - t0;
    if (rc == 0) {
        print_low_after(o, "place", &out->prog);
        package_meta(g, gc, m, o, &mid, info, out);
    }
    arena_free(&la);
    mid_free(&mid);
    return rc;
}

static int fusion_report(const graph *g, const machine *m, const package *out, compile_info *info, diag *d);

/* The graphs a compile plans: g with its sibling matmuls joined (when
 * join) and its epilogue fusions, and the search's start (the recipe's
 * choices when one is given) in *start, which holds a plan before and after. */
static int setup(const graph *g, bool join, const machine *m, const compile_options *o, compile_info *info, mid_plan *start,
                 diag *d) {
    if (join) graph_siblings_analyze(g, &info->siblings);
    if (info->siblings.n && !(info->joined = graph_siblings_apply(g, &info->siblings, d))) return -1;
    const graph *gm = driver_model_graph(g, info);
    graph_fuse_analyze(gm, !o->no_fuse, &info->fusions);
    if (graph_fuse_count(&info->fusions) && !(info->fused = graph_fuse_apply(gm, &info->fusions, d))) return -1;
    const graph *gc = driver_compiled_graph(g, info);
    mid_plan_free(start);
    mid_plan_init(start, gc);
    start->casts_all_early = !o->recipe; /* the search starts with every cast at its source */
    if (o->recipe_text) return search_recipe_parse(o->recipe_text, strlen(o->recipe_text), o->recipe, gc, m, start, d);
    return o->recipe ? search_recipe_load(o->recipe, gc, m, start, d) : 0;
}

static void setup_free(compile_info *info, mid_plan *start) {
    mid_plan_free(start);
    search_result_free(&info->search);
    graph_fuse_free(&info->fusions);
    graph_free(info->fused);
    graph_siblings_free(&info->siblings);
    graph_free(info->joined);
    info->fused = info->joined = NULL;
}

/* Trades what setup made (and the search of it) between a and b. */
static void swap_setup(compile_info *a, compile_info *b, mid_plan *sa, mid_plan *sb) {
    sib_plan sp = a->siblings;
    a->siblings = b->siblings, b->siblings = sp;
    graph *j = a->joined;
    a->joined = b->joined, b->joined = j;
    fuse_plan fp = a->fusions;
    a->fusions = b->fusions, b->fusions = fp;
    graph *f = a->fused;
    a->fused = b->fused, b->fused = f;
    search_result sr = a->search;
    a->search = b->search, b->search = sr;
    mid_plan st = *sa;
    *sa = *sb, *sb = st;
}

/* a's best plan beats b's: one that fits first, then fewer predicted
 * cycles; while neither fits, the one nearer to fitting (smaller tables
 * past the machine's budget, then the smaller estimated peak), which is the
 * one placement tries, as the search ranks plans. */
static bool better(const search_result *a, const search_result *b, const machine *m) {
    if (!a->nfinalists) return false;
    if (!b->nfinalists || a->finalists_fit != b->finalists_fit) return a->finalists_fit || !b->nfinalists;
    double budget = (double)m->table_budget_bytes, ta = fmax(a->est.table_bytes_max - budget, 0),
           tb = fmax(b->est.table_bytes_max - budget, 0);
    if (!a->finalists_fit && ta != tb) return ta < tb;
    if (!a->finalists_fit && a->est.peak_bytes != b->est.peak_bytes) return a->est.peak_bytes < b->est.peak_bytes;
    return a->finalist_cycles[0] < b->finalist_cycles[0];
}

/* Whether the plan est priced cannot place whatever the lowering and
 * placement do: its parameters and inputs are all held at the first step,
 * each at one address on every tile, and their bytes alone are more than a
 * tile has above tile_memory_base (est_result.resident_bytes). Then d says so. */
static bool resident_over(const graph *g, const machine *m, const est_result *est, diag *d) {
    double room = (double)(m->loader_limit - m->tile_memory_base);
    /* (Tables alone past the room: lowering and placement name what is too big.) */
    if (est->resident_bytes <= room || est_buffer_room(m, est->table_bytes_max) <= 0) return false;
    char need[32], over[32], have[32], peak[32], buffers[32];
    fmt_bytes(need, sizeof need, est->resident_bytes);
    fmt_bytes(over, sizeof over, est->resident_bytes - room);
    fmt_bytes(have, sizeof have, room);
    fmt_bytes(peak, sizeof peak, est->peak_bytes);
    fmt_bytes(buffers, sizeof buffers, est_buffer_room(m, est->table_bytes_max));
    diag_fail_fit(d,
                  "%s: error: does not fit machine '%s': the parameters and inputs alone take %s of every tile, %s more "
                  "than its %s for data\n"
                  "  detail: in the plan nearest to fitting (estimated peak %s of the %s a tile has for buffers), they are "
                  "all held from the first step, each at one address on every tile\n",
                  g->path, m->name, need, over, have, peak, buffers);
    return true;
}

/* The search of info's compiled graph (attempt 0's already in info->search
 * when searched), then the best finalist that lowers and places; the others
 * in order when it does not (memory, exchange tables). When none places,
 * the search runs again judging memory by what the buffers reserve (whole
 * interleaved elements; est_result.reserved_peak_bytes) instead of their
 * payload, then so with a tenth of the room kept back: both are models of
 * the allocator, not runs of it, and each errs where the other does not
 * (docs/search.md). A search none of whose plans fits the estimate has its
 * least peak first: only that one is placed (the others peak higher), and
 * no later attempt runs (a room judged tighter cannot help), so a model
 * that does not fit is answered after one placement, not a dozen. TESSEL_REFUSE_FINALISTS=N makes placement refuse the
 * first N finalists tried (*tried counts them), so tests can watch the
 * fallback. A nonzero return is a search error; a plan that does not place
 * leaves *placed false and its reason in d. */
static int place_plans(const graph *g, const machine *m, const compile_options *o, compile_info *info, const mid_plan *start,
                       bool searched, int nrefuse, int *tried, package *out, bool *placed, diag *d) {
    static const double room_scales[COMPILE_ATTEMPTS] = {1.0, 1.0, 0.9};
    static const bool reservations[COMPILE_ATTEMPTS] = {false, true, true};
    const graph *gc = driver_compiled_graph(g, info);
    int rc = 0;
    for (int attempt = 0; rc == 0 && !*placed && attempt < COMPILE_ATTEMPTS; attempt++) {
        /* A replay has one plan; a tighter room cannot help a search none of whose plans fit. */
        if (attempt > 0 && (o->search_steps == 0 || !info->search.finalists_fit)) break;
        search_options so = {.steps = o->search_steps, .beam = o->beam, .quiet = o->quiet, .room_scale = room_scales[attempt],
                             .reserved = reservations[attempt], .reasons = o->fusion_report};
        if (!(attempt == 0 && searched)) {
            if (attempt > 0) search_result_free(&info->search);
            double ts = util_now_seconds();
            rc = search_plan(gc, m, start, &so, &info->search, d);
            info->search_seconds += util_now_seconds() - ts;
        }
        int nplace = info->search.finalists_fit ? info->search.nfinalists : info->search.nfinalists > 0;
        for (int i = 0; rc == 0 && i < nplace; i++, (*tried)++) {
            free(info->recipe);
            info->recipe = search_recipe_json(gc, m, &info->search.finalist[i]);
            diag fd = {0};
            if (*tried < nrefuse) {
                diag_fail(&fd, "%s: error: placement refused finalist %d (TESSEL_REFUSE_FINALISTS=%d)", g->path, *tried + 1, nrefuse);
            } else if (!info->search.finalists_fit && i == 0 && resident_over(g, m, &info->search.est, &fd)) {
                /* proven without lowering it */
            } else if (build_package(g, gc, m, o, &info->search.finalist[i], out, info, &fd) == 0) {
                info->finalist = i;
                *placed = true;
                break;
            }
            if (info->nfailed < (int)(sizeof info->failed / sizeof info->failed[0])) {
                compile_failure *f = &info->failed[info->nfailed++];
                f->predicted = info->search.finalist_cycles[i];
                f->room_scale = so.room_scale;
                f->reserved = so.reserved;
                f->joined = info->joined != NULL;
                snprintf(f->why, sizeof f->why, "%s", fd.text);
                size_t n = strlen(f->why);
                if (n && f->why[n - 1] == '\n') f->why[n - 1] = 0;
            }
            *d = fd; /* if none places, the last tried's reason */
        }
    }
    return rc;
}

/* Each sibling group's members by name, for the report (joined or not). */
static void name_sibling_groups(const graph *g, compile_info *info) {
    info->nsibling_groups = info->siblings.n;
    info->sibling_groups = xcalloc((size_t)info->siblings.n + 1, sizeof(char *));
    for (int32_t k = 0; k < info->siblings.n; k++) {
        const sib_group *sg = &info->siblings.v[k];
        size_t len = 1;
        for (int32_t i = 0; i < sg->n; i++) len += strlen(graph_op_name(g, sg->mm[i])) + 2;
        char *t = info->sibling_groups[k] = xcalloc(len, 1);
        for (int32_t i = 0; i < sg->n; i++) strcat(strcat(t, i ? ", " : ""), graph_op_name(g, sg->mm[i]));
    }
}

/* The graph passes: sibling matmuls joined, then the optimizer epilogue
 * fusion; the search plans what they make. Joining is a choice: a recipe
 * that names the members apart keeps them apart (its choices do not fit
 * the joined graph), and a search prices both graphs (search_graphs). */
static int graph_passes(const graph *g, const machine *m, const compile_options *o, compile_info *info, mid_plan *start,
                        diag *d) {
    int rc = setup(g, !o->no_siblings, m, o, info, start, d);
    name_sibling_groups(g, info);
    if (rc && info->joined && o->recipe) {
        compile_info alt = {0};
        mid_plan as;
        mid_plan_init(&as, g);
        diag ad = {0};
        if (setup(g, false, m, o, &alt, &as, &ad) == 0) {
            swap_setup(info, &alt, start, &as);
            rc = 0;
        }
        setup_free(&alt, &as);
    }
    return rc;
}

/* With siblings joined and a search to run, both graphs are searched and
 * the faster plan's kept in info (the joined one on a tie: a wider GEMM
 * gathers its operand once but its block may fill the tiles worse, which
 * shows only in the whole program); the other graph, searched, goes to alt
 * for when none of the faster's plans places. *searched: info->search
 * holds attempt 0's search. */
static int search_graphs(const graph *g, const machine *m, const compile_options *o, compile_info *info, mid_plan *start,
                         compile_info *alt, mid_plan *as, bool *searched, diag *d) {
    *searched = false;
    if (!info->joined || o->recipe || o->search_steps == 0) return 0; /* place_plans searches the one graph */
    search_options so = {.steps = o->search_steps, .beam = o->beam, .quiet = o->quiet, .room_scale = 1.0,
                         .reasons = o->fusion_report};
    double ts = util_now_seconds();
    int rc = search_plan(driver_compiled_graph(g, info), m, start, &so, &info->search, d);
    if (rc == 0) rc = setup(g, false, m, o, alt, as, d);
    if (rc == 0) rc = search_plan(driver_compiled_graph(g, alt), m, as, &so, &alt->search, d);
    info->search_seconds += util_now_seconds() - ts;
    if (rc) return rc;
    info->siblings_joined_cycles = info->search.nfinalists ? info->search.finalist_cycles[0] : 0;
    info->siblings_apart_cycles = alt->search.nfinalists ? alt->search.finalist_cycles[0] : 0;
    if (better(&alt->search, &info->search, m)) swap_setup(info, alt, start, as);
    *searched = true;
    return 0;
}

/* The first finalist that lowers and places, of the chosen graph, then of
 * the other one (alt) when none of the chosen's does, unless neither's
 * search found a plan that fits (then the chosen has the smaller peak). */
static int package_best(const graph *g, const machine *m, const compile_options *o, compile_info *info, mid_plan *start,
                        compile_info *alt, mid_plan *as, bool searched, package *out, diag *d) {
    /* Tests: refuse the first N plans placement is given, or ("searched") every searched one. */
    const char *refuse = getenv("TESSEL_REFUSE_FINALISTS");
    bool refuse_searched = refuse && strcmp(refuse, "searched") == 0;
    int nrefuse = refuse_searched ? INT_MAX : refuse ? atoi(refuse) : 0, tried = 0;
    bool placed = false, chosen_fit = info->search.finalists_fit; /* when searched: both graphs' first searches */
    int rc = place_plans(g, m, o, info, start, searched, nrefuse, &tried, out, &placed, d);
    if (rc == 0 && !placed && alt->search.nfinalists && (alt->search.finalists_fit || chosen_fit)) {
        swap_setup(info, alt, start, as);
        rc = place_plans(g, m, o, info, start, true, nrefuse, &tried, out, &placed, d);
    }
    /* No searched plan placed: the start plan (each matmul's best-scored
     * grid, what --search-steps 0 gives) spreads memory differently, and
     * where the estimate says it fits it is placed, the graph in info
     * first, then the other one when both were searched. */
    compile_options so = *o;
    so.search_steps = 0;
    for (int k = 0; rc == 0 && !placed && o->search_steps != 0 && k < (searched ? 2 : 1); k++) {
        if (k == 1) swap_setup(info, alt, start, as);
        search_result_free(&info->search);
        search_options sopt = {.quiet = o->quiet, .room_scale = 1.0, .reasons = o->fusion_report};
        double ts = util_now_seconds();
        rc = search_plan(driver_compiled_graph(g, info), m, start, &sopt, &info->search, d);
        info->search_seconds += util_now_seconds() - ts;
        if (rc == 0 && info->search.finalists_fit)
            rc = place_plans(g, m, &so, info, start, true, refuse_searched ? 0 : nrefuse, &tried, out, &placed, d);
        info->start_plan_fallback = placed;
    }
    return rc == 0 && !placed ? -1 : rc;
}

/* Whether s reads as UTF-8 (the package's metadata is JSON text). */
static bool is_utf8(const char *s) {
    json_t *j = s ? json_string(s) : NULL;
    json_decref(j);
    return !s || j != NULL;
}

int driver_compile(const graph *g, const machine *m, const compile_options *o, package *out, compile_info *info, diag *d) {
    double t0 = util_now_seconds();
    memset(info, 0, sizeof *info);
    if (!is_utf8(o->model) || !is_utf8(g->name))
        return diag_fail(d, "tessel compile: error: the model's name '%s' is not UTF-8 text; the package's metadata must be",
                         is_utf8(o->model) ? g->name : o->model);
    if (o->print_after && !driver_pass_find(o->print_after, NULL)) {
        char names[1024];
        driver_pass_names(names, sizeof names);
        return diag_fail(d, "tessel compile: error: option '--print-after=%s': no pass is called '%s' (%s)", o->print_after,
                         o->print_after, names);
    }
    if (m->chips != 1)
        return diag_fail(d, "tessel compile: error: machine '%s' has %u chips; driver_compile plans one chip "
                            "(the caller splits the model over chips first)", m->name, (unsigned)m->chips);
    mid_plan start, as;   /* the search's start (a recipe's choices), for the chosen graph and the other */
    compile_info alt = {0};
    bool searched = false;
    mid_plan_init(&start, g);
    mid_plan_init(&as, g);
    int rc = graph_passes(g, m, o, info, &start, d);                                      /* join-siblings, fuse-epilogue */
    if (rc == 0) rc = search_graphs(g, m, o, info, &start, &alt, &as, &searched, d);     /* the plan (both graphs) */
    if (rc == 0) {
        print_graph_after(o, "join-siblings", driver_model_graph(g, info));
        print_graph_after(o, "fuse-epilogue", driver_compiled_graph(g, info));
        rc = package_best(g, m, o, info, &start, &alt, &as, searched, out, d);           /* expand ... place */
    }
    setup_free(&alt, &as);
    mid_plan_free(&start);
    if (rc == 0 && o->fusion_report && (rc = fusion_report(driver_model_graph(g, info), m, out, info, d)) != 0) package_free(out);
    info->seconds = util_now_seconds() - t0;
    return rc;
}

void compile_info_free(compile_info *info) {
    search_result_free(&info->search);
    free(info->recipe);
    info->recipe = NULL;
    for (int32_t k = 0; info->fusion_saved_names && k < info->fusions.n; k++) free(info->fusion_saved_names[k]);
    free(info->fusion_saved_names);
    free(info->fusion_saved);
    free(info->fusion_proofs);
    info->fusion_saved_names = NULL, info->fusion_saved = NULL, info->fusion_proofs = NULL;
    graph_fuse_free(&info->fusions);
    graph_free(info->fused);
    info->fused = NULL;
    graph_siblings_free(&info->siblings);
    graph_free(info->joined);
    info->joined = NULL;
    for (int32_t k = 0; k < info->nsibling_groups; k++) free(info->sibling_groups[k]);
    free(info->sibling_groups);
    info->sibling_groups = NULL, info->nsibling_groups = 0;
}

/* The packaged plan for g without fusion: every grid as chosen, a fused
 * op's given to its matmul. */
static void unfused_plan(const graph *g, const compile_info *info, mid_plan *pl) {
    const graph *gc = driver_compiled_graph(g, info);
    const mid_plan *fin = &info->search.finalist[info->finalist];
    mid_plan_init(pl, g);
    for (int32_t i = 0; i < gc->ops.n && i < fin->nops; i++) {
        bool gemm;
        if (fin->row_parts[i]) pl->row_parts[model_op(g, gc, &info->fusions, i, &gemm)] = fin->row_parts[i];
        if (fin->cast_early[i]) pl->cast_early[model_op(g, gc, &info->fusions, i, &gemm)] = fin->cast_early[i];
        if (!fin->has[i]) continue;
        int32_t at = model_op(g, gc, &info->fusions, i, &gemm);
        pl->gemm[at] = fin->gemm[i];
        pl->has[at] = true;
    }
}

char *driver_unfused_recipe(const graph *model, const machine *m, const compile_info *info) {
    const graph *g = driver_model_graph(model, info);
    mid_plan pl;
    unfused_plan(g, info, &pl);
    char *r = search_recipe_json(g, m, &pl);
    mid_plan_free(&pl);
    return r;
}

/* What the packaged plan, with no fusion, would store of each fused
 * candidate's gradient: g expanded with the same grids (a fused op's for its
 * matmul), the bytes per tile of the tensors holding the gradient (its
 * GEMM's result and the copies made of it). */
static void fusion_savings(const graph *g, const machine *m, compile_info *info) {
    const fuse_plan *fp = &info->fusions;
    if (!graph_fuse_count(fp)) return;
    mid_plan pl;
    unfused_plan(g, info, &pl);
    mid_program mid;
    diag d = {0};
    int rc = mid_build(g, m, &pl, &mid, NULL, &d);
    mid_plan_free(&pl);
    if (rc) return; /* the unfused plan does not even expand: nothing to compare with */
    for (int32_t k = 0; k < fp->n; k++) {
        if (!fp->c[k].fused || fp->c[k].given) continue;
        char list[1024] = "";
        size_t at = 0;
        for (int32_t t = 0; t < mid.tensors.n; t++) {
            const mid_tensor *x = mid_t(&mid, t);
            if (x->value != fp->c[k].gradient || !x->placed || mid_storage(&mid, t) != t) continue;
            int64_t b = layout_shard_bytes(&x->lay);
            info->fusion_saved[k] += b;
            if (at < sizeof list - 1) at += (size_t)snprintf(list + at, sizeof list - at, "%s%s %lld", at ? ", " : "", x->name, (long long)b);
        }
        info->fusion_saved_names[k] = xstrdup(list);
    }
    mid_free(&mid);
}

static int fusion_report(const graph *g, const machine *m, const package *out, compile_info *info, diag *d) {
    int32_t n = info->fusions.n;
    info->fusion_saved = xcalloc((size_t)n + 1, sizeof(int64_t));
    info->fusion_saved_names = xcalloc((size_t)n + 1, sizeof(char *));
    info->fusion_proofs = xcalloc((size_t)n + 1, sizeof(epilogue_proof));
    fusion_savings(g, m, info);
    if (driver_fusion_proofs(g, &info->fusions, out, info->fusion_proofs, d)) return -1;
    return package_live_peak(out, &info->peak, d);
}

int driver_fusion_proofs(const graph *g, const fuse_plan *fp, const package *p, epilogue_proof *proofs, diag *d) {
    for (int32_t k = 0; k < fp->n; k++) {
        const graph_op *o = graph_opr(g, fp->c[k].consumer);
        const char *outs[MID_MAX_OUT];
        int n = 0;
        for (int32_t i = 0; i < o->nout && n < MID_MAX_OUT; i++) outs[n++] = graph_val(g, o->out[i])->name;
        if (package_epilogue_proof(p, outs, n, &proofs[k], d)) return -1;
    }
    return 0;
}
