/* api.c: the public library (include/tessel/tessel.h) over the driver.
 *
 * A handle wraps what the command would hold: a model's graph, a machine, a
 * package read back from its own image (what runs is what a file holds),
 * and a run's statistics. Host tensors are checked against the inputs and
 * outputs by name, shape and dtype here, by the rule the command uses
 * (driver_host_entry), and every failure becomes a status with the diag's
 * located message. */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tessel/tessel.h"
#include "../driver/driver.h"
#include "../models/models.h"
#include "../report/report.h"

_Static_assert((int)TESSEL_F32 == DT_F32 && (int)TESSEL_F16 == DT_F16 && (int)TESSEL_BF16 == DT_BF16 &&
                   (int)TESSEL_F8E4M3 == DT_F8E4M3 && (int)TESSEL_F8E5M2 == DT_F8E5M2 && (int)TESSEL_F143 == DT_F143 &&
                   (int)TESSEL_I32 == DT_I32 && (int)TESSEL_F64 == DT_COUNT,
               "tessel_dtype follows NUM_DTYPES, then f64");
_Static_assert((int)TESSEL_MAX_RANK == (int)GRAPH_MAX_RANK, "one rank limit");
_Static_assert((int)TESSEL_PRECISION_F16 == MODELS_F16 && (int)TESSEL_PRECISION_FP8 == MODELS_FP8 &&
                   (int)TESSEL_PRECISION_F32 == MODELS_F32 && (int)TESSEL_PRECISION_FP8_ALL == MODELS_FP8_ALL,
               "tessel_precision follows models_precision");

/* A model's or a package's inputs and outputs, as the host sees them. */
typedef struct host_io {
    char *name;                 /* what messages call it */
    host_spec *ins, *outs;
    int32_t nin, nout;
} host_io;

struct tessel_model {
    host_io io;                 /* name: the spec, or the ONNX bytes' name */
    graph *g;
    uint8_t *bytes;             /* ONNX bytes from memory (the graph's parameters point into them) */
};

struct tessel_machine {
    machine m;
    char *json;                 /* its description as JSON */
};

struct tessel_package {
    host_io io;                 /* name: the file, or the model it was compiled from */
    package pkg;
    tessel_machine machine;
    char *recipe, *report;
};

struct tessel_result {
    sim_stats st;
    char *json;
};

const char *tessel_version(void) { return TESSEL_VERSION; }

static _Atomic(tessel_oom_handler) user_oom;

/* Out of host memory where no error path exists: the temporaries of files
 * being written go, then the caller's handler runs; util's default aborts
 * if it returns or there is none. */
static void on_out_of_memory(size_t bytes) {
    util_remove_temporaries();
    tessel_oom_handler h = user_oom;
    if (h) h(bytes);
}

void tessel_set_oom_handler(tessel_oom_handler handler) {
    user_oom = handler;
    util_set_oom_handler(on_out_of_memory);
}

/* Once per process, before any call does work: the out-of-memory path
 * above, and jansson allocating through the library's allocator (counted,
 * and never a NULL it would hand back). */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_library(void) {
    util_set_oom_handler(on_out_of_memory);
    json_set_alloc_funcs(xmalloc, free);
}
static void lib_init(void) { pthread_once(&init_once, init_library); }

void tessel_free(void *p) { free(p); }

const char *tessel_dtype_name(tessel_dtype t) {
    if (t == TESSEL_F64) return "f64";
    return (int)t >= 0 && (int)t < DT_COUNT ? dtype_name((dtype)t) : NULL;
}

/* The status of a failure in d, with its message in err. */
static tessel_status fail(const diag *d, tessel_error *err) {
    tessel_status s = d->no_fit ? TESSEL_NO_FIT : TESSEL_ERROR;
    if (err) {
        err->status = s;
        snprintf(err->message, sizeof err->message, "%s", d->set ? d->text : "tessel: error: failed\n");
    }
    return s;
}

static tessel_status ok(tessel_error *err) {
    if (err) err->status = TESSEL_OK, err->message[0] = 0;
    return TESSEL_OK;
}

/* A user error with a message of its own. */
__attribute__((format(printf, 2, 3))) static tessel_status fail_with(tessel_error *err, const char *fmt, ...) {
    diag d = {0};
    va_list ap;
    va_start(ap, fmt);
    diag_vfail(&d, fmt, ap);
    va_end(ap);
    return fail(&d, err);
}

static void tensor_info(const host_spec *s, tessel_tensor_info *out) {
    *out = (tessel_tensor_info){.name = s->name, .dtype = (tessel_dtype)s->dtype, .declared = (tessel_dtype)s->declared,
                                .rank = s->rank};
    for (int a = 0; a < s->rank; a++) out->shape[a] = s->dim[a];
}

static int io_count(const host_io *io, tessel_role role) {
    return role == TESSEL_INPUT ? io->nin : role == TESSEL_OUTPUT ? io->nout : 0;
}

static tessel_status io_tensor(const host_io *io, tessel_role role, int i, tessel_tensor_info *out, tessel_error *err) {
    const char *what = io->name, *r = role == TESSEL_INPUT ? "input" : "output";
    if (role != TESSEL_INPUT && role != TESSEL_OUTPUT) return fail_with(err, "tessel: error: %s: role %d is neither input nor output", what, (int)role);
    if (!out) return fail_with(err, "tessel: error: %s: no tessel_tensor_info to fill (out is NULL)", what);
    int32_t n = io_count(io, role);
    if (i < 0 || i >= n) return fail_with(err, "tessel: error: %s has %d %ss; there is no %s %d", what, (int)n, r, r, i);
    tensor_info(role == TESSEL_INPUT ? &io->ins[i] : &io->outs[i], out);
    return ok(err);
}

static void io_free(host_io *io) {
    free(io->ins);
    free(io->outs);
    free(io->name);
}

/* ---- models ---------------------------------------------------------------- */

static models_options model_options(const tessel_model_options *o) {
    tessel_model_options z = {0};
    if (!o) o = &z;
    return (models_options){.precision = (models_precision)o->precision, .reroll = !o->no_reroll,
                            .report = o->import_report ? stderr : NULL};
}

static bool precision_valid(const tessel_model_options *o) {
    return !o || (o->precision >= TESSEL_PRECISION_F16 && o->precision <= TESSEL_PRECISION_FP8_ALL);
}

static tessel_model *model_new(graph *g, const char *name, uint8_t *bytes) {
    tessel_model *m = xcalloc(1, sizeof *m);
    m->g = g;
    m->io.name = xstrdup(name);
    m->bytes = bytes;
    m->io.ins = driver_graph_specs(g, false, &m->io.nin);
    m->io.outs = driver_graph_specs(g, true, &m->io.nout);
    return m;
}

tessel_status tessel_model_load(const char *spec, const tessel_model_options *opts, tessel_model **out, tessel_error *err) {
    lib_init();
    if (!out) return fail_with(err, "tessel: error: tessel_model_load: out is NULL");
    *out = NULL;
    if (!spec || !spec[0]) return fail_with(err, "tessel: error: a model is a .tsl or .onnx file, or zoo:NAME[:key=value,...]; got none");
    if (!precision_valid(opts)) return fail_with(err, "tessel: error: %s: precision %d is none of tessel_precision", spec, (int)opts->precision);
    diag d = {0};
    models_options mo = model_options(opts);
    graph *g = models_load_opts(spec, &mo, &d);
    if (!g) return fail(&d, err);
    *out = model_new(g, spec, NULL);
    return ok(err);
}

tessel_status tessel_model_from_onnx(const void *bytes, size_t len, const char *name, const tessel_model_options *opts,
                                     tessel_model **out, tessel_error *err) {
    lib_init();
    if (!out) return fail_with(err, "tessel: error: tessel_model_from_onnx: out is NULL");
    *out = NULL;
    if (!name) name = "model.onnx";
    if (!bytes || !len) return fail_with(err, "%s: error: no ONNX bytes were given", name);
    if (!precision_valid(opts)) return fail_with(err, "tessel: error: %s: precision %d is none of tessel_precision", name, (int)opts->precision);
    diag d = {0};
    uint8_t *copy = util_try_malloc(len, 1, &d, "%s: error: the model's %zu bytes", name, len);
    if (!copy) return fail(&d, err);
    memcpy(copy, bytes, len);
    models_options mo = model_options(opts);
    models_keep *keep = models_keep_new();
    graph *g = models_onnx_import_buffer(name, copy, len, keep, mo.report, &d);
    if (g) {
        g->keep = keep;
        g->keep_free = models_keep_free;
        g = models_raise(g, &mo, &d);
    } else {
        models_keep_free(keep);
    }
    if (!g) {
        free(copy);
        return fail(&d, err);
    }
    *out = model_new(g, name, copy);
    return ok(err);
}

void tessel_model_free(tessel_model *m) {
    if (!m) return;
    graph_free(m->g);
    io_free(&m->io);
    free(m->bytes);
    free(m);
}

int tessel_model_count(const tessel_model *m, tessel_role role) { return m ? io_count(&m->io, role) : 0; }

tessel_status tessel_model_tensor(const tessel_model *m, tessel_role role, int i, tessel_tensor_info *out, tessel_error *err) {
    if (!m) return fail_with(err, "tessel: error: tessel_model_tensor: the model is NULL");
    return io_tensor(&m->io, role, i, out, err);
}

/* ---- machines -------------------------------------------------------------- */

tessel_status tessel_machine_load(const char *spec, tessel_machine **out, tessel_error *err) {
    lib_init();
    if (!out) return fail_with(err, "tessel: error: tessel_machine_load: out is NULL");
    *out = NULL;
    diag d = {0};
    machine m;
    if (machine_resolve_for(spec, "tessel", NULL, &m, &d)) return fail(&d, err);
    *out = xcalloc(1, sizeof **out);
    (*out)->m = m;
    (*out)->json = machine_to_json(&m);
    return ok(err);
}

void tessel_machine_free(tessel_machine *m) {
    if (!m) return;
    free(m->json);
    free(m);
}

const char *tessel_machine_name(const tessel_machine *m) { return m ? m->m.name : NULL; }

const char *tessel_machine_json(const tessel_machine *m) { return m ? m->json : NULL; }

/* ---- compiling and packages ------------------------------------------------ */

void tessel_compile_options_init(tessel_compile_options *o) {
    if (o) *o = (tessel_compile_options){.search_steps = DRIVER_SEARCH_STEPS, .beam = SEARCH_BEAM};
}

/* A package handle taking pkg over. */
static tessel_package *package_new(package *pkg, const char *name) {
    tessel_package *p = xcalloc(1, sizeof *p);
    p->pkg = *pkg;
    p->io.name = xstrdup(name);
    p->machine.m = pkg->machine;
    p->machine.json = machine_to_json(&pkg->machine);
    driver_package_specs(&p->pkg, &p->io.ins, &p->io.nin, &p->io.outs, &p->io.nout);
    return p;
}

tessel_status tessel_compile(const tessel_model *model, const tessel_machine *mach, const tessel_compile_options *opts,
                             tessel_package **out, tessel_error *err) {
    lib_init();
    if (!out) return fail_with(err, "tessel: error: tessel_compile: out is NULL");
    *out = NULL;
    if (!model || !mach) return fail_with(err, "tessel: error: tessel_compile: the %s is NULL", model ? "machine" : "model");
    tessel_compile_options o;
    tessel_compile_options_init(&o);
    if (opts) o = *opts;
    if (o.search_steps < 0 || o.search_steps > DRIVER_SEARCH_STEPS_MAX)
        return fail_with(err, "tessel: error: search_steps %lld is not a count from 0 to %d", (long long)o.search_steps,
                         DRIVER_SEARCH_STEPS_MAX);
    if (o.beam < 0 || o.beam > SEARCH_BEAM_MAX)
        return fail_with(err, "tessel: error: beam %d is not a width from 0 to %d", o.beam, SEARCH_BEAM_MAX);
    compile_options co = {.model = model->io.name, .recipe = o.recipe, .search_steps = o.search_steps, .beam = o.beam,
                          .quiet = !o.progress, .no_fuse = o.no_fuse, .no_siblings = o.no_siblings, .fusion_report = o.report};
    progress_quiet(!o.progress);
    diag d = {0};
    package built;
    compile_info ci;
    int rc = driver_compile(model->g, &mach->m, &co, &built, &ci, &d);
    package pkg;
    if (rc == 0) { /* what runs is what a file holds */
        size_t n;
        uint8_t *img = package_image(&built, &n, model->io.name, &d);
        package_free(&built);
        rc = img ? package_parse(img, n, model->io.name, &pkg, &d) : -1;
        free(img);
    }
    if (rc == 0) {
        *out = package_new(&pkg, model->io.name);
        (*out)->recipe = xstrdup(ci.recipe);
        if (o.report) (*out)->report = report_compile_json(model->g, &mach->m, &ci);
    }
    compile_info_free(&ci);
    if (o.progress) progress_done();
    return rc ? fail(&d, err) : ok(err);
}

tessel_status tessel_package_save(const tessel_package *p, const char *path, tessel_error *err) {
    lib_init();
    if (!p || !path) return fail_with(err, "tessel: error: tessel_package_save: the %s is NULL", p ? "path" : "package");
    diag d = {0};
    return package_save(&p->pkg, path, &d) ? fail(&d, err) : ok(err);
}

tessel_status tessel_package_load(const char *path, tessel_package **out, tessel_error *err) {
    lib_init();
    if (!out) return fail_with(err, "tessel: error: tessel_package_load: out is NULL");
    *out = NULL;
    if (!path) return fail_with(err, "tessel: error: tessel_package_load: the path is NULL");
    diag d = {0};
    package pkg;
    if (package_load(path, &pkg, &d)) return fail(&d, err);
    tessel_package *p = package_new(&pkg, path);
    json_t *meta = json_loads(p->pkg.meta ? p->pkg.meta : "{}", 0, NULL), *recipe = json_object_get(meta, "recipe");
    if (recipe) p->recipe = util_newline_terminated(json_dumps(recipe, JSON_INDENT(2) | JSON_SORT_KEYS));
    json_decref(meta);
    *out = p;
    return ok(err);
}

void tessel_package_free(tessel_package *p) {
    if (!p) return;
    package_free(&p->pkg);
    free(p->machine.json);
    free(p->recipe);
    free(p->report);
    io_free(&p->io);
    free(p);
}

int tessel_package_count(const tessel_package *p, tessel_role role) { return p ? io_count(&p->io, role) : 0; }

tessel_status tessel_package_tensor(const tessel_package *p, tessel_role role, int i, tessel_tensor_info *out,
                                    tessel_error *err) {
    if (!p) return fail_with(err, "tessel: error: tessel_package_tensor: the package is NULL");
    return io_tensor(&p->io, role, i, out, err);
}

const char *tessel_package_recipe(const tessel_package *p) { return p ? p->recipe : NULL; }
const char *tessel_package_report_json(const tessel_package *p) { return p ? p->report : NULL; }
const tessel_machine *tessel_package_machine(const tessel_package *p) { return p ? &p->machine : NULL; }

/* ---- host tensors ---------------------------------------------------------- */

/* The spec called name among specs, or -1 with the message naming every one. */
static int32_t find_spec(const char *where, const char *role, const host_spec *specs, int32_t n, const char *name, diag *d) {
    int32_t j = host_find(specs, n, name);
    if (j >= 0) return j;
    char known[1024];
    host_names(specs, n, known, sizeof known);
    diag_fail(d, "%s: error: there is no %s '%s' (%ss: %s)", where, role, name ? name : "(null)", role, known);
    return -1;
}

static bool same_shape(const tessel_tensor *t, const host_spec *s) {
    if (t->rank != s->rank) return false;
    for (int a = 0; a < s->rank; a++)
        if (t->shape[a] != s->dim[a]) return false;
    return true;
}

static int shape_error(const char *where, const char *role, const tessel_tensor *t, const host_spec *s, diag *d) {
    char got[160] = "rank out of range", want[160];
    if (t->rank >= 0 && t->rank <= TESSEL_MAX_RANK) fmt_dims(got, sizeof got, t->rank, t->shape);
    fmt_dims(want, sizeof want, s->rank, s->dim);
    return diag_fail(d, "%s: error: %s '%s' is given with shape %s but is %s%s", where, role, s->name, got, dtype_name(s->dtype), want);
}

/* Host tensors given for io's inputs into data[j] (f32, rounded to the input's
 * dtype); every input not given takes its seeded default. */
static int take_inputs(const host_io *io, const tessel_tensor *given, int ngiven, bool convert, float **data, diag *d) {
    const char *where = io->name;
    const host_spec *specs = io->ins;
    int32_t n = io->nin;
    if (ngiven < 0 || (ngiven > 0 && !given)) return diag_fail(d, "%s: error: %d inputs given but no array of them", where, ngiven);
    for (int k = 0; k < ngiven; k++) {
        const tessel_tensor *t = &given[k];
        int32_t j = find_spec(where, "input", specs, n, t->name, d);
        if (j < 0) return -1;
        const host_spec *s = &specs[j];
        if (data[j]) return diag_fail(d, "%s: error: input '%s' is given twice", where, s->name);
        if (!same_shape(t, s)) return shape_error(where, "input", t, s, d);
        bool f64 = t->dtype == TESSEL_F64;
        if (!f64 && t->dtype != TESSEL_F32 && t->dtype != TESSEL_F16 && t->dtype != TESSEL_BF16 && (int)t->dtype != (int)s->dtype)
            return diag_fail(d, "%s: error: input '%s' is given as %s; host data is f32, f16, bf16 or f64, or the input's own %s",
                             where, s->name, tessel_dtype_name(t->dtype) ? tessel_dtype_name(t->dtype) : "an unknown dtype",
                             dtype_name(s->dtype));
        int64_t numel = host_numel(s);
        if (numel && !t->data) return diag_fail(d, "%s: error: input '%s' has no data", where, s->name);
        float *x = util_try_malloc((size_t)(numel ? numel : 1), sizeof(float), d, "%s: error: input '%s'", where, s->name);
        if (!x) return -1;
        data[j] = x;
        bool exact = true;
        if (f64) {
            const double *v = t->data;
            for (int64_t i = 0; i < numel; i++) {
                x[i] = (float)v[i];
                exact &= (double)x[i] == v[i] || v[i] != v[i];
            }
        } else {
            num_decode_buf((dtype)t->dtype, (int)t->dtype == (int)s->dtype ? s->scale : 0, t->data, x, (size_t)numel);
        }
        host_entry how = driver_host_entry(s, f64 ? DT_F32 : (dtype)t->dtype, f64, exact);
        if (how == HOST_LOSSY && !convert)
            return diag_fail(d,
                             "%s: error: input '%s' is given as %s but is %s, and the conversion can lose information "
                             "(set convert to round it)",
                             where, s->name, tessel_dtype_name(t->dtype), dtype_name(s->dtype));
        num_round_buf(s->dtype, s->scale, x, (size_t)numel);
    }
    return host_seed_missing(specs, n, data, where, d);
}

/* The caller's output tensors, checked before the run: which spec each is. */
static int match_outputs(const host_io *io, const tessel_tensor *t, int nt, int32_t *which, diag *d) {
    const char *where = io->name, *role = "output";
    const host_spec *specs = io->outs;
    int32_t n = io->nout;
    if (nt < 0 || (nt > 0 && !t)) return diag_fail(d, "%s: error: %d %ss given but no array of them", where, nt, role);
    for (int k = 0; k < nt; k++) {
        int32_t j = find_spec(where, role, specs, n, t[k].name, d);
        if (j < 0) return -1;
        for (int q = 0; q < k; q++)
            if (which[q] == j) return diag_fail(d, "%s: error: %s '%s' is given twice", where, role, specs[j].name);
        if (!same_shape(&t[k], &specs[j])) return shape_error(where, role, &t[k], &specs[j], d);
        if (t[k].dtype != TESSEL_F32)
            return diag_fail(d, "%s: error: %s '%s' is asked for as %s; outputs are written as f32", where, role, specs[j].name,
                             tessel_dtype_name(t[k].dtype) ? tessel_dtype_name(t[k].dtype) : "an unknown dtype");
        if (host_numel(&specs[j]) && !t[k].data) return diag_fail(d, "%s: error: %s '%s' has no buffer", where, role, specs[j].name);
        which[k] = j;
    }
    return 0;
}

static void free_all(float **v, int32_t n) {
    for (int32_t j = 0; j < n; j++) free(v[j]);
    free(v);
}

/* ---- running ---------------------------------------------------------------- */

static sim_options run_options(const tessel_run_options *o, bool trace) {
    return (sim_options){.trace = trace, .quiet = !o->progress,
                         .max_host_bytes = o->max_host_bytes ? o->max_host_bytes : util_physical_bytes() / 10 * 9};
}

/* Runs p on the given inputs; the outputs in *outputs (per output binding). */
static int run_package(const tessel_package *p, const tessel_tensor *inputs, int ninputs, const tessel_run_options *o,
                       bool trace, float ***outputs, sim_stats *st, diag *d) {
    sim_options so = run_options(o, trace);
    float **in = xcalloc((size_t)p->io.nin + 1, sizeof(float *));
    *outputs = xcalloc((size_t)p->io.nout + 1, sizeof(float *));
    progress_quiet(!o->progress);
    int rc = sim_host_check(&p->pkg.machine, so.max_host_bytes, "max_host_bytes", d);
    if (rc == 0) rc = take_inputs(&p->io, inputs, ninputs, o->convert, in, d);
    if (rc == 0) rc = sim_run(&p->pkg, &so, in, *outputs, st, d);
    if (o->progress) progress_done();
    free_all(in, p->io.nin);
    return rc;
}

tessel_status tessel_run(const tessel_package *p, const tessel_tensor *inputs, int ninputs, tessel_tensor *outputs,
                         int noutputs, const tessel_run_options *opts, tessel_result **out, tessel_error *err) {
    lib_init();
    if (!out) return fail_with(err, "tessel: error: tessel_run: out is NULL");
    *out = NULL;
    if (!p) return fail_with(err, "tessel: error: tessel_run: the package is NULL");
    tessel_run_options z = {0};
    if (!opts) opts = &z;
    diag d = {0};
    int32_t *which = xcalloc((size_t)(noutputs > 0 ? noutputs : 0) + 1, sizeof(int32_t));
    float **outs = NULL;
    sim_stats st = {0};
    int rc = match_outputs(&p->io, outputs, noutputs, which, &d);
    if (rc == 0) rc = run_package(p, inputs, ninputs, opts, false, &outs, &st, &d);
    for (int k = 0; rc == 0 && k < noutputs; k++)
        memcpy(outputs[k].data, outs[which[k]], sizeof(float) * (size_t)host_numel(&p->io.outs[which[k]]));
    free(which);
    if (outs) free_all(outs, p->io.nout);
    if (rc) {
        sim_stats_free(&st);
        return fail(&d, err);
    }
    tessel_result *r = xcalloc(1, sizeof *r);
    r->st = st;
    json_t *j = report_sim_json(&st, &p->pkg.machine);
    json_object_set_new(j, "package", json_string(p->io.name));
    json_object_set_new(j, "machine", json_string(p->pkg.machine.name));
    r->json = util_newline_terminated(json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS));
    json_decref(j);
    *out = r;
    return ok(err);
}

void tessel_result_free(tessel_result *r) {
    if (!r) return;
    sim_stats_free(&r->st);
    free(r->json);
    free(r);
}

uint64_t tessel_result_cycles(const tessel_result *r) { return r ? r->st.cycles : 0; }
const char *tessel_result_json(const tessel_result *r) { return r ? r->json : NULL; }

tessel_status tessel_report_html(const tessel_package *p, const tessel_tensor *inputs, int ninputs,
                                 const tessel_run_options *opts, const char *path, tessel_error *err) {
    lib_init();
    if (!p || !path) return fail_with(err, "tessel: error: tessel_report_html: the %s is NULL", p ? "path" : "package");
    tessel_run_options z = {0};
    if (!opts) opts = &z;
    diag d = {0};
    outset os = {0};
    FILE *f = outset_open(&os, path, &d);
    if (!f) return fail(&d, err);
    float **outs = NULL;
    sim_stats st = {0};
    int rc = run_package(p, inputs, ninputs, opts, true, &outs, &st, &d);
    if (rc == 0) {
        json_t *meta = json_loads(p->pkg.meta ? p->pkg.meta : "{}", 0, NULL);
        const char *model = json_string_value(json_object_get(meta, "model"));
        report_html_input hi = {.pkg = &p->pkg, .path = p->io.name, .title = model ? model : p->io.name, .sim = &st,
                                .plan = p->report ? json_loads(p->report, 0, NULL) : NULL};
        rc = report_html_write(f, &hi, &d);
        json_decref(hi.plan);
        json_decref(meta);
    }
    if (outset_close(&os, f, path, &d)) rc = -1;
    if (rc == 0) rc = outset_commit(&os, &d);
    else outset_abort(&os);
    if (outs) free_all(outs, p->io.nout);
    sim_stats_free(&st);
    return rc ? fail(&d, err) : ok(err);
}

/* ---- checking --------------------------------------------------------------- */

/* The expected values given, per output of the model (NULL: none). */
static int take_expected(const tessel_model *model, const tessel_check_options *o, float **expect, diag *d) {
    int32_t *which = xcalloc((size_t)(o->nexpect > 0 ? o->nexpect : 0) + 1, sizeof(int32_t));
    int rc = match_outputs(&model->io, o->expect, o->nexpect, which, d);
    for (int k = 0; rc == 0 && k < o->nexpect; k++) {
        size_t n = (size_t)host_numel(&model->io.outs[which[k]]);
        expect[which[k]] = util_try_malloc(n ? n : 1, sizeof(float), d, "%s: error: expected output '%s'", model->io.name,
                                           model->io.outs[which[k]].name);
        if (!expect[which[k]]) rc = -1;
        else memcpy(expect[which[k]], o->expect[k].data, n * sizeof(float));
    }
    free(which);
    return rc;
}

tessel_status tessel_check(const tessel_model *model, const tessel_package *p, const tessel_tensor *inputs, int ninputs,
                           const tessel_check_options *opts, char **json, tessel_error *err) {
    lib_init();
    if (json) *json = NULL;
    if (!model || !p) return fail_with(err, "tessel: error: tessel_check: the %s is NULL", model ? "package" : "model");
    tessel_check_options z = {0};
    if (!opts) opts = &z;
    diag d = {0};
    float **in = xcalloc((size_t)model->io.nin + 1, sizeof(float *)), **expect = xcalloc((size_t)model->io.nout + 1, sizeof(float *));
    check_result r = {0};
    check_proofs pv = {0};
    int rc = driver_package_matches(model->g, &p->pkg, p->io.name, &d);
    if (rc == 0) rc = take_inputs(&model->io, inputs, ninputs, opts->run.convert, in, &d);
    if (rc == 0) rc = take_expected(model, opts, expect, &d);
    /* The proofs of a fresh analysis of the model: what the package shows. */
    if (rc == 0) rc = driver_check_proofs(model->g, NULL, &p->pkg, &pv, &d);
    if (rc == 0) {
        progress_quiet(!opts->run.progress);
        check_options co = {.package = p->io.name, .inputs = in, .expect = expect, .sim = run_options(&opts->run, false),
                            .locate = opts->locate};
        rc = sim_host_check(&p->pkg.machine, co.sim.max_host_bytes, "max_host_bytes", &d);
        if (rc == 0) rc = driver_check(model->g, &p->pkg, &co, &r, &d);
        if (opts->run.progress) progress_done();
    }
    if (rc == 0 && pv.fail) r.pass = false;
    if (rc == 0 && json) {
        json_t *nonfinite = report_nonfinite_json(model->g, model->io.ins, model->io.nin, in, NULL);
        json_t *j = report_check_json(model->g, model->io.name, &p->pkg.machine, NULL, &r, &pv, nonfinite);
        *json = util_newline_terminated(json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS));
        json_decref(j);
        json_decref(nonfinite);
    }
    bool pass = r.pass;
    check_proofs_free(&pv);
    check_result_free(&r);
    free_all(in, model->io.nin);
    free_all(expect, model->io.nout);
    if (rc) return fail(&d, err);
    if (pass) return ok(err);
    if (err) {
        err->status = TESSEL_CHECK_FAILED;
        snprintf(err->message, sizeof err->message, "%s: an output differs from a reference (see the check's JSON)\n", p->io.name);
    }
    return TESSEL_CHECK_FAILED;
}
