/* test_e2e.c: the compiled program end to end, through the public header
 * alone: the same model, machine and options give byte-identical package
 * files whatever the host thread count, and a run's outputs and cycles do
 * not depend on it either. (That the exact check can fail, on a corrupted
 * weight, table row or kernel operand, is test_mutation's.) */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessel/tessel.h>

/* The package file p saves to, as bytes (malloc'd). */
static uint8_t *saved_bytes(const tessel_package *p, size_t *len) {
    char path[] = "/tmp/tessel-e2e-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tessel_error err;
    if (tessel_package_save(p, path, &err)) fail_msg("%s", err.message);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    uint8_t *b = malloc((size_t)n);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    unlink(path);
    *len = (size_t)n;
    return b;
}

/* spec compiled for c600 with `threads` host threads. */
static tessel_package *compile_with(const tessel_model *model, const char *threads) {
    setenv("TESSEL_THREADS", threads, 1);
    tessel_error err;
    tessel_machine *m = NULL;
    if (tessel_machine_load("c600", &m, &err)) fail_msg("%s", err.message);
    tessel_compile_options o;
    tessel_compile_options_init(&o);
    o.search_steps = 8;
    tessel_package *p = NULL;
    if (tessel_compile(model, m, &o, &p, &err)) fail_msg("%s", err.message);
    tessel_machine_free(m);
    unsetenv("TESSEL_THREADS");
    return p;
}

static void packages_are_byte_identical(void **state) {
    (void)state;
    const char *models[] = {"zoo:mlp:tokens=24,width=64,hidden=96",
                            "zoo:qk:heads=4,queries=17,keys=19,channels=72,qk=fp8,pv=fp8",
                            "zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4",
                            "zoo:train-mlp:tokens=16,width=48,hidden=64,optimizer=adamw"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        tessel_error err;
        tessel_model *model = NULL;
        if (tessel_model_load(models[i], NULL, &model, &err)) fail_msg("%s", err.message);
        tessel_package *a = compile_with(model, "1"), *b = compile_with(model, "2"), *c = compile_with(model, "2");
        size_t la, lb, lc;
        uint8_t *ia = saved_bytes(a, &la), *ib = saved_bytes(b, &lb), *ic = saved_bytes(c, &lc);
        if (la != lb || memcmp(ia, ib, la)) fail_msg("%s: the package differs between 1 and 2 threads", models[i]);
        if (lb != lc || memcmp(ib, ic, lb)) fail_msg("%s: two compiles give different packages", models[i]);
        assert_string_equal(tessel_package_recipe(a), tessel_package_recipe(b));
        free(ia);
        free(ib);
        free(ic);
        tessel_package_free(a);
        tessel_package_free(b);
        tessel_package_free(c);
        tessel_model_free(model);
    }
}

/* Outputs and cycles do not depend on the host thread count. */
static void thread_count_does_not_matter(void **state) {
    (void)state;
    tessel_error err;
    tessel_model *model = NULL;
    const char *spec = "zoo:vit:layers=2,width=32,heads=2,mlp=48,image=16,patch=4,precision=fp8";
    if (tessel_model_load(spec, NULL, &model, &err)) fail_msg("%s", err.message);
    tessel_package *p = compile_with(model, "2");
    assert_int_equal(tessel_package_count(p, TESSEL_OUTPUT), 1);
    tessel_tensor_info info;
    if (tessel_package_tensor(p, TESSEL_OUTPUT, 0, &info, &err)) fail_msg("%s", err.message);
    int64_t n = 1;
    for (int a = 0; a < info.rank; a++) n *= info.shape[a];
    uint64_t cycles[2];
    float *out[2];
    for (int t = 0; t < 2; t++) {
        setenv("TESSEL_THREADS", t ? "2" : "1", 1);
        out[t] = calloc((size_t)n, sizeof(float));
        tessel_tensor o = {.name = info.name, .dtype = TESSEL_F32, .rank = info.rank, .data = out[t]};
        memcpy(o.shape, info.shape, sizeof o.shape);
        tessel_result *r = NULL;
        if (tessel_run(p, NULL, 0, &o, 1, NULL, &r, &err)) fail_msg("%s", err.message);
        cycles[t] = tessel_result_cycles(r);
        tessel_result_free(r);
    }
    unsetenv("TESSEL_THREADS");
    assert_true(cycles[0] > 0);
    assert_int_equal(cycles[0], cycles[1]);
    assert_memory_equal(out[0], out[1], sizeof(float) * (size_t)n);
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += out[0][i] != 0;
    assert_true(nonzero > n / 2); /* the outputs were written */
    free(out[0]);
    free(out[1]);
    tessel_package_free(p);
    tessel_model_free(model);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(packages_are_byte_identical),
        cmocka_unit_test(thread_count_does_not_matter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
