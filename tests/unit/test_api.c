/* test_api.c: the public library through its header alone: a model from a
 * spec and from ONNX bytes, compile, run with caller memory, save and load,
 * check (passing, and failing against wrong expected values), the reports,
 * every failure a status with a message naming what is at fault, and
 * distinct handles on two threads at once. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessel/tessel.h>

static const char *MODEL = "zoo:mlp:tokens=24,width=64,hidden=96";

/* The call succeeds (its tessel_error is `err`, in scope). */
#define OK(call)                                                                             \
    do {                                                                                     \
        tessel_status s_ = (call);                                                           \
        if (s_ != TESSEL_OK) fail_msg("%s: status %d: %s", #call, (int)s_, err.message);     \
    } while (0)

/* The call fails with status want, and its message holds every needle. */
static void expect_failure(tessel_status got, const tessel_error *err, tessel_status want, const char *needle, const char *needle2) {
    if (got != want) fail_msg("status %d, want %d: %s", (int)got, (int)want, err->message);
    assert_int_equal(err->status, want);
    if (!strstr(err->message, needle)) fail_msg("'%s' not in: %s", needle, err->message);
    if (needle2 && !strstr(err->message, needle2)) fail_msg("'%s' not in: %s", needle2, err->message);
}

typedef struct compiled {
    tessel_model *model;
    tessel_machine *machine;
    tessel_package *pkg;
} compiled;

static compiled compile_model(const char *spec, const char *mach, int report) {
    compiled c = {0};
    tessel_error err;
    if (tessel_model_load(spec, NULL, &c.model, &err)) fail_msg("%s", err.message);
    if (tessel_machine_load(mach, &c.machine, &err)) fail_msg("%s", err.message);
    tessel_compile_options o;
    tessel_compile_options_init(&o);
    o.search_steps = 8;
    o.report = report;
    if (tessel_compile(c.model, c.machine, &o, &c.pkg, &err)) fail_msg("%s", err.message);
    assert_int_equal(err.status, TESSEL_OK);
    assert_string_equal(err.message, "");
    return c;
}

static void compiled_free(compiled *c) {
    tessel_package_free(c->pkg);
    tessel_machine_free(c->machine);
    tessel_model_free(c->model);
}

static int64_t numel(const tessel_tensor_info *t) {
    int64_t n = 1;
    for (int a = 0; a < t->rank; a++) n *= t->shape[a];
    return n;
}

/* A tensor for info t over data. */
static tessel_tensor tensor_of(const tessel_tensor_info *t, tessel_dtype dt, void *data) {
    tessel_tensor x = {.name = t->name, .dtype = dt, .rank = t->rank, .data = data};
    memcpy(x.shape, t->shape, sizeof x.shape);
    return x;
}

static void test_version(void **state) {
    (void)state;
    assert_string_equal(tessel_version(), TESSEL_VERSION);
    assert_string_equal(tessel_dtype_name(TESSEL_F16), "f16");
    assert_string_equal(tessel_dtype_name(TESSEL_F64), "f64");
    assert_null(tessel_dtype_name((tessel_dtype)99));
}

static void test_bad_inputs_to_loaders(void **state) {
    (void)state;
    tessel_error err;
    tessel_model *m = (tessel_model *)&err; /* set to NULL on failure */
    expect_failure(tessel_model_load("nonesuch.tsl", NULL, &m, &err), &err, TESSEL_ERROR, "nonesuch.tsl", NULL);
    assert_null(m);
    expect_failure(tessel_model_load("zoo:mlp:tokns=3", NULL, &m, &err), &err, TESSEL_ERROR, "tokns", NULL);
    expect_failure(tessel_model_load("model.bin", NULL, &m, &err), &err, TESSEL_ERROR, "model.bin", NULL);
    tessel_model_options mo = {.precision = (tessel_precision)7};
    expect_failure(tessel_model_load(MODEL, &mo, &m, &err), &err, TESSEL_ERROR, "precision 7", NULL);
    expect_failure(tessel_model_from_onnx("not onnx", 8, "junk.onnx", NULL, &m, &err), &err, TESSEL_ERROR, "junk.onnx", NULL);
    assert_null(m);
    tessel_machine *mach = NULL;
    expect_failure(tessel_machine_load("c700", &mach, &err), &err, TESSEL_ERROR, "unknown machine 'c700'", "c600");
    expect_failure(tessel_machine_load("/nonexistent/m.json", &mach, &err), &err, TESSEL_ERROR, "/nonexistent/m.json", NULL);
    assert_null(mach);
    /* A NULL err is allowed: the status alone. */
    assert_int_equal(tessel_machine_load("c700", &mach, NULL), TESSEL_ERROR);
    OK(tessel_machine_load("c600", &mach, &err));
    assert_string_equal(tessel_machine_name(mach), "c600");
    assert_non_null(strstr(tessel_machine_json(mach), "\"tiles\": 1472"));
    tessel_machine_free(mach);
    tessel_model_free(NULL);
    tessel_package_free(NULL);
    tessel_result_free(NULL);
}

static void test_compile_run_save_load(void **state) {
    (void)state;
    compiled c = compile_model(MODEL, "c600", 0);
    tessel_error err;
    assert_int_equal(tessel_model_count(c.model, TESSEL_INPUT), 1);
    assert_int_equal(tessel_package_count(c.pkg, TESSEL_INPUT), 1);
    assert_int_equal(tessel_package_count(c.pkg, TESSEL_OUTPUT), 1);
    tessel_tensor_info in, out;
    OK(tessel_package_tensor(c.pkg, TESSEL_INPUT, 0, &in, &err));
    OK(tessel_package_tensor(c.pkg, TESSEL_OUTPUT, 0, &out, &err));
    assert_int_equal(in.dtype, TESSEL_F16);
    assert_int_equal(in.rank, 2);
    assert_int_equal(in.shape[0], 24);
    assert_int_equal(in.shape[1], 64);
    expect_failure(tessel_package_tensor(c.pkg, TESSEL_OUTPUT, 1, &out, &err), &err, TESSEL_ERROR, "no output 1", NULL);
    assert_non_null(tessel_package_recipe(c.pkg));
    assert_null(tessel_package_report_json(c.pkg)); /* not asked for */

    /* The same values given as f32 (rounded, as asked) and as f16: one
     * result. f32 data for an f16 input is refused unless convert is set,
     * as the command refuses it without --convert. */
    int64_t n = numel(&in), m = numel(&out);
    float *x = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)m), *y2 = malloc(sizeof(float) * (size_t)m);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 37 % 101) - 50) / 64.0f; /* exact in f16 */
    tessel_tensor ti = tensor_of(&in, TESSEL_F32, x), to = tensor_of(&out, TESSEL_F32, y1);
    tessel_result *r1 = NULL, *r2 = NULL;
    expect_failure(tessel_run(c.pkg, &ti, 1, &to, 1, NULL, &r1, &err), &err, TESSEL_ERROR, "'x' is given as f32 but is f16",
                   "convert");
    assert_null(r1);
    tessel_run_options conv = {.convert = 1};
    OK(tessel_run(c.pkg, &ti, 1, &to, 1, &conv, &r1, &err));
    assert_true(tessel_result_cycles(r1) > 0);
    char want[64];
    snprintf(want, sizeof want, "\"cycles\": %llu", (unsigned long long)tessel_result_cycles(r1));
    assert_non_null(strstr(tessel_result_json(r1), want));
    _Float16 *h = malloc(sizeof(_Float16) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = (_Float16)x[i];
    tessel_tensor th = tensor_of(&in, TESSEL_F16, h);
    to.data = y2;
    OK(tessel_run(c.pkg, &th, 1, &to, 1, NULL, &r2, &err));
    assert_memory_equal(y1, y2, sizeof(float) * (size_t)m);
    assert_int_equal(tessel_result_cycles(r1), tessel_result_cycles(r2));
    tessel_result_free(r2);

    /* Saved and loaded: the same program. */
    char path[] = "/tmp/tessel-api-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    OK(tessel_package_save(c.pkg, path, &err));
    tessel_package *loaded = NULL;
    OK(tessel_package_load(path, &loaded, &err));
    unlink(path);
    assert_non_null(strstr(tessel_package_recipe(loaded), "\"grid\""));
    assert_string_equal(tessel_machine_name(tessel_package_machine(loaded)), "c600");
    r2 = NULL;
    memset(y2, 0, sizeof(float) * (size_t)m);
    OK(tessel_run(loaded, &th, 1, &to, 1, NULL, &r2, &err));
    assert_memory_equal(y1, y2, sizeof(float) * (size_t)m);
    assert_int_equal(tessel_result_cycles(r1), tessel_result_cycles(r2));
    tessel_result_free(r2);
    tessel_package_free(loaded);
    tessel_result *r3 = (tessel_result *)&err;
    expect_failure(tessel_package_load("/nonexistent/p.tpk", &loaded, &err), &err, TESSEL_ERROR, "/nonexistent/p.tpk", NULL);
    expect_failure(tessel_package_save(c.pkg, "/nonexistent/dir/p.tpk", &err), &err, TESSEL_ERROR, "/nonexistent/dir/p.tpk", NULL);

    /* Host tensors that do not fit name what is wrong. */
    tessel_tensor bad = ti;
    bad.name = "z";
    expect_failure(tessel_run(c.pkg, &bad, 1, NULL, 0, NULL, &r3, &err), &err, TESSEL_ERROR, "no input 'z'", "inputs: x");
    assert_null(r3);
    bad = ti;
    bad.shape[1] = 65;
    expect_failure(tessel_run(c.pkg, &bad, 1, NULL, 0, NULL, &r3, &err), &err, TESSEL_ERROR, "shape [24, 65]", "f16[24, 64]");
    bad = ti;
    bad.dtype = TESSEL_I32;
    expect_failure(tessel_run(c.pkg, &bad, 1, NULL, 0, NULL, &r3, &err), &err, TESSEL_ERROR, "'x' is given as i32", NULL);
    tessel_tensor twice[2] = {th, th};
    expect_failure(tessel_run(c.pkg, twice, 2, NULL, 0, NULL, &r3, &err), &err, TESSEL_ERROR, "'x' is given twice", NULL);
    /* f64 values f16 cannot hold are a loss the caller must ask for. */
    double *xd = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) xd[i] = x[i] + 1e-9;
    bad = tensor_of(&in, TESSEL_F64, xd);
    expect_failure(tessel_run(c.pkg, &bad, 1, NULL, 0, NULL, &r3, &err), &err, TESSEL_ERROR, "'x' is given as f64 but is f16",
                   "convert");
    OK(tessel_run(c.pkg, &bad, 1, &to, 1, &conv, &r3, &err));
    assert_memory_equal(y1, y2, sizeof(float) * (size_t)m); /* rounded to the same f16 values */
    tessel_result_free(r3);
    tessel_tensor badout = to;
    badout.dtype = TESSEL_F16;
    expect_failure(tessel_run(c.pkg, &th, 1, &badout, 1, NULL, &r3, &err), &err, TESSEL_ERROR, "written as f32", NULL);
    badout = to;
    badout.name = "q";
    expect_failure(tessel_run(c.pkg, &th, 1, &badout, 1, NULL, &r3, &err), &err, TESSEL_ERROR, "no output 'q'", NULL);
    free(xd);
    free(h);
    free(x);
    free(y1);
    free(y2);
    tessel_result_free(r1);
    compiled_free(&c);
}

static void test_onnx_bytes(void **state) {
    (void)state;
    const char *src = getenv("TESSEL_SOURCE_DIR");
    if (!src) skip();
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/onnx/hand_tanh_op13.onnx", src);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tessel_error err;
    tessel_model *a = NULL, *b = NULL;
    OK(tessel_model_load(path, NULL, &a, &err));
    OK(tessel_model_from_onnx(buf, len, "tanh.onnx", NULL, &b, &err));
    for (int role = TESSEL_INPUT; role <= TESSEL_OUTPUT; role++) {
        assert_int_equal(tessel_model_count(a, (tessel_role)role), tessel_model_count(b, (tessel_role)role));
        for (int i = 0; i < tessel_model_count(a, (tessel_role)role); i++) {
            tessel_tensor_info ta, tb;
            OK(tessel_model_tensor(a, (tessel_role)role, i, &ta, &err));
            OK(tessel_model_tensor(b, (tessel_role)role, i, &tb, &err));
            assert_string_equal(ta.name, tb.name);
            assert_int_equal(ta.dtype, tb.dtype);
            assert_int_equal(ta.rank, tb.rank);
            assert_memory_equal(ta.shape, tb.shape, sizeof ta.shape);
        }
    }
    /* An ONNX f32 input compiled at f16 takes f32 data (the declared dtype). */
    tessel_tensor_info in;
    OK(tessel_model_tensor(b, TESSEL_INPUT, 0, &in, &err));
    assert_int_equal(in.dtype, TESSEL_F16);
    assert_int_equal(in.declared, TESSEL_F32);
    tessel_model_free(a);
    tessel_model_free(b);
}

static void test_check_and_reports(void **state) {
    (void)state;
    compiled c = compile_model(MODEL, "c600", 1);
    const char *rep = tessel_package_report_json(c.pkg);
    assert_non_null(rep);
    assert_non_null(strstr(rep, "\"tessel-compile-report\""));
    tessel_error err;
    char *json = NULL;
    OK(tessel_check(c.model, c.pkg, NULL, 0, NULL, &json, &err));
    assert_non_null(strstr(json, "\"pass\": true"));
    assert_non_null(strstr(json, "\"exact\": true"));
    tessel_free(json);

    /* Expected values that are wrong: the check runs and fails. */
    tessel_tensor_info out;
    OK(tessel_model_tensor(c.model, TESSEL_OUTPUT, 0, &out, &err));
    float *wrong = calloc((size_t)numel(&out), sizeof(float));
    for (int64_t i = 0; i < numel(&out); i++) wrong[i] = (float)(i % 7) - 3;
    tessel_tensor e = tensor_of(&out, TESSEL_F32, wrong);
    tessel_check_options co = {.expect = &e, .nexpect = 1};
    tessel_status s = tessel_check(c.model, c.pkg, NULL, 0, &co, &json, &err);
    expect_failure(s, &err, TESSEL_CHECK_FAILED, "differs", NULL);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"pass\": false"));
    assert_non_null(strstr(json, "\"expect_cosine\""));
    tessel_free(json);
    free(wrong);

    /* A package of another model is refused by name. */
    compiled other = compile_model("zoo:mlp:tokens=16,width=64,hidden=96", "c600", 0);
    expect_failure(tessel_check(c.model, other.pkg, NULL, 0, NULL, &json, &err), &err, TESSEL_ERROR, "input", NULL);
    assert_null(json);
    compiled_free(&other);

    /* The HTML report: written whole, or (to a directory that is none) not at all. */
    char dir[] = "/tmp/tessel-api-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char page[256];
    snprintf(page, sizeof page, "%s/r.html", dir);
    OK(tessel_report_html(c.pkg, NULL, 0, NULL, page, &err));
    FILE *f = fopen(page, "r");
    assert_non_null(f);
    char head[64] = "";
    assert_true(fread(head, 1, sizeof head - 1, f) > 0);
    fclose(f);
    assert_non_null(strstr(head, "<!DOCTYPE html>"));
    unlink(page);
    snprintf(page, sizeof page, "%s/no/r.html", dir);
    expect_failure(tessel_report_html(c.pkg, NULL, 0, NULL, page, &err), &err, TESSEL_ERROR, page, NULL);
    rmdir(dir);
    compiled_free(&c);
}

static void test_no_fit(void **state) {
    (void)state;
    tessel_error err;
    tessel_model *m = NULL;
    tessel_machine *mach = NULL;
    tessel_package *p = (tessel_package *)&err;
    OK(tessel_model_load("zoo:vit:layers=1", NULL, &m, &err));
    OK(tessel_machine_load("tiny", &mach, &err));
    tessel_compile_options o;
    tessel_compile_options_init(&o);
    o.search_steps = 4;
    expect_failure(tessel_compile(m, mach, &o, &p, &err), &err, TESSEL_NO_FIT, "does not fit", NULL);
    assert_null(p);
    o.search_steps = -1;
    expect_failure(tessel_compile(m, mach, &o, &p, &err), &err, TESSEL_ERROR, "search_steps -1", NULL);
    tessel_model_free(m);
    tessel_machine_free(mach);
}

/* Distinct handles on two threads at once give what one thread gives. */
typedef struct job {
    const char *spec;
    uint64_t cycles;
    char *recipe;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    compiled c = compile_model(j->spec, "c600", 0);
    tessel_result *r = NULL;
    tessel_error err;
    if (tessel_run(c.pkg, NULL, 0, NULL, 0, NULL, &r, &err) == TESSEL_OK) j->cycles = tessel_result_cycles(r);
    j->recipe = strdup(tessel_package_recipe(c.pkg));
    tessel_result_free(r);
    compiled_free(&c);
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    job alone[2] = {{.spec = MODEL}, {.spec = "zoo:mlp:tokens=32,width=64,hidden=128"}}, both[2];
    memcpy(both, alone, sizeof both);
    for (int k = 0; k < 2; k++) run_job(&alone[k]);
    pthread_t t[2];
    for (int k = 0; k < 2; k++) assert_int_equal(pthread_create(&t[k], NULL, run_job, &both[k]), 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) {
        assert_true(alone[k].cycles > 0);
        assert_int_equal(alone[k].cycles, both[k].cycles);
        assert_string_equal(alone[k].recipe, both[k].recipe);
        free(alone[k].recipe);
        free(both[k].recipe);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_bad_inputs_to_loaders),
        cmocka_unit_test(test_compile_run_save_load),
        cmocka_unit_test(test_onnx_bytes),
        cmocka_unit_test(test_check_and_reports),
        cmocka_unit_test(test_no_fit),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
