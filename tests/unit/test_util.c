/* test_util.c: util-layer edge cases that the command line can reach. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

/* An empty directory name (tessel ref --output-dir=) is an error, not a read
 * past the end of the string. */
static void mkdir_p_rejects_an_empty_name(void **state) {
    (void)state;
    diag d = {0};
    outset o = {0};
    assert_int_equal(outset_mkdir(&o, "", &d), -1);
    assert_string_equal(d.text, "error: the directory name is empty\n");
    outset_abort(&o);
}

static int entries(const char *dir);

/* The directories an outset makes for its files go again when it aborts
 * (those that were there stay); a commit keeps them. */
static void outset_removes_the_directories_it_made(void **state) {
    (void)state;
    char base[] = "/tmp/tessel-util-XXXXXX", deep[128], file[160];
    assert_non_null(mkdtemp(base));
    snprintf(deep, sizeof deep, "%s/a/b", base);
    snprintf(file, sizeof file, "%s/x.npy", deep);
    diag d = {0};
    outset o = {0};
    assert_int_equal(outset_mkdir(&o, deep, &d), 0);
    assert_int_equal(o.ndirs, 2);
    FILE *f = outset_open(&o, file, &d);
    assert_non_null(f);
    fclose(f);
    outset_abort(&o);
    assert_int_equal(entries(base), 0); /* a/ and a/b/ gone, base kept */
    assert_int_equal(outset_mkdir(&o, deep, &d), 0);
    f = outset_open(&o, file, &d);
    assert_non_null(f);
    assert_int_equal(outset_close(&o, f, file, &d), 0);
    assert_int_equal(outset_commit(&o, &d), 0);
    assert_int_equal(access(file, F_OK), 0);
    unlink(file);
    snprintf(file, sizeof file, "%s/a", base);
    rmdir(deep);
    rmdir(file);
    rmdir(base);
}

static int entries(const char *dir) {
    DIR *dp = opendir(dir);
    int n = 0;
    for (struct dirent *e; dp && (e = readdir(dp));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++; /* temporaries are dot files */
    if (dp) closedir(dp);
    return n;
}

/* A final name a little under NAME_MAX (255 bytes) is written: the temporary
 * is not the final name plus a suffix. Aborting leaves nothing behind. */
static void outset_handles_long_names(void **state) {
    (void)state;
    char dir[] = "/tmp/tessel-util-XXXXXX", name[252];
    assert_non_null(mkdtemp(dir));
    memset(name, 'n', 247);
    strcpy(name + 247, ".npy");
    char *path = path_join(dir, name);
    diag d = {0};
    outset os = {0};
    FILE *f = outset_open(&os, path, &d);
    if (!f) fail_msg("%s", d.text);
    fputs("data", f);
    assert_int_equal(outset_close(&os, f, path, &d), 0);
    assert_int_equal(outset_commit(&os, &d), 0);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(entries(dir), 1);
    outset ab = {0};
    char *other = path_join(dir, "other.npy");
    f = outset_open(&ab, other, &d);
    assert_non_null(f);
    assert_int_equal(outset_close(&ab, f, other, &d), 0);
    outset_abort(&ab);
    assert_int_equal(entries(dir), 1);
    remove(path);
    rmdir(dir);
    free(path);
    free(other);
}

/* The checked paths (malloc, calloc, realloc, mmap): NULL and a message
 * naming what needs how many bytes, never an abort, for a product that
 * overflows or a size past the host's. */
static void try_alloc_names_what_and_bytes(void **state) {
    (void)state;
    diag d = {0};
    assert_null(util_try_malloc(SIZE_MAX / 2, 4, &d, "t: error: input '%s'", "x"));
    assert_non_null(strstr(d.text, "t: error: input 'x' needs "));
    assert_non_null(strstr(d.text, "more than 2^64"));
    diag e = {0};
    assert_null(util_try_calloc((size_t)1 << 40, 1024, &e, "t: error: value '%s'", "y"));
    assert_non_null(strstr(e.text, "t: error: value 'y' needs 1125899906842624 bytes of host memory, more than this host has ("));
    float *p = util_try_calloc(16, sizeof(float), &d, "t");
    assert_non_null(p);
    assert_true(p[15] == 0);
    float *q = util_try_realloc(p, (size_t)1 << 62, 8, &d, "t");
    assert_null(q); /* p stays ours */
    free(p);
    /* Mapped memory: zeroed pages, every byte ours; too much is refused the same way. */
    size_t bytes = 3 * 4096 + 1;
    unsigned char *m = util_try_map(bytes, &d, "t");
    assert_non_null(m);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += m[i] != 0;
    assert_int_equal(nonzero, 0);
    m[0] = m[bytes - 1] = 0xff;
    util_unmap(m, bytes);
    util_unmap(NULL, 0);
    diag f = {0};
    assert_null(util_try_map((size_t)1 << 62, &f, "t: error: tile memory"));
    assert_non_null(strstr(f.text, "t: error: tile memory needs 4611686018427387904 bytes of host memory, more than this host has ("));
}

/* xcalloc's n * size overflowing reaches the handler with SIZE_MAX bytes
 * instead of allocating a wrapped-around small block. */
static jmp_buf oom_jump;
static size_t oom_bytes;
static void jump_on_oom(size_t bytes) {
    oom_bytes = bytes;
    longjmp(oom_jump, 1);
}

static void xcalloc_overflow_reaches_the_handler(void **state) {
    (void)state;
    util_set_oom_handler(jump_on_oom);
    if (setjmp(oom_jump) == 0) {
        void *volatile p = xcalloc(SIZE_MAX / 8, 16);
        free(p);
        fail_msg("xcalloc returned on an overflowing size");
    }
    util_set_oom_handler(NULL);
    assert_int_equal(oom_bytes, SIZE_MAX);
}

/* util_parallel covers [0, n) exactly once whatever TESSEL_THREADS asks,
 * past its 64 jobs too (256 once wrote past its job array). */
static void mark_range(void *ctx, int64_t b, int64_t e) {
    unsigned char *seen = ctx;
    for (int64_t i = b; i < e; i++) seen[i]++;
}

static void parallel_covers_the_range_at_any_thread_count(void **state) {
    (void)state;
    static const char *const counts[] = {"1", "2", "3", "64", "100", "256"};
    enum { N = 5000 };
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        setenv("TESSEL_THREADS", counts[k], 1);
        unsigned char seen[N] = {0};
        util_parallel(N, 1, mark_range, seen);
        for (int i = 0; i < N; i++)
            if (seen[i] != 1) fail_msg("TESSEL_THREADS=%s: index %d visited %d times", counts[k], i, seen[i]);
    }
    unsetenv("TESSEL_THREADS");
}

/* arena_reset keeps the largest block: the next allocations land in it,
 * zeroed, and nothing handed out before is counted. */
static void arena_reset_reuses_its_largest_block(void **state) {
    (void)state;
    arena a;
    arena_init(&a);
    unsigned char *small = arena_alloc(&a, 100);
    unsigned char *big = arena_alloc(&a, 3 << 20); /* a block of its own size */
    memset(small, 0xab, 100);
    memset(big, 0xcd, 3 << 20);
    unsigned char *grown = arena_grow(&a, NULL, 0, 5 << 20); /* the largest: an own block */
    memset(grown, 0xef, 5 << 20);
    arena_reset(&a);
    assert_int_equal(a.used_bytes, 0);
    unsigned char *again = arena_alloc(&a, 4 << 20);
    assert_ptr_equal(again, grown);
    for (size_t i = 0; i < (4u << 20); i += 4093) assert_int_equal(again[i], 0);
    unsigned char *next = arena_alloc(&a, 2 << 20); /* past the kept block (1 MiB left): a new one */
    assert_true(next < again || next >= again + (5 << 20));
    arena_reset(&a);
    /* A fresh arena_grow (p NULL) takes room in the kept block too, and
     * grows there in place: scratch reused from copy to copy faults once. */
    unsigned char *fresh = arena_grow(&a, NULL, 0, 3 << 20); /* next's block (twice again's: 10 MiB) kept */
    assert_ptr_equal(fresh, next);
    assert_ptr_equal(arena_grow(&a, fresh, 3 << 20, 10 << 20), fresh);
    unsigned char *past = arena_grow(&a, NULL, 0, 16); /* no room left: elsewhere */
    assert_true(past < fresh || past >= fresh + (10 << 20));
    arena_reset(&a);
    arena_reset(&a); /* twice, and on an empty arena, is fine */
    arena_free(&a);
    arena_reset(&a);
    assert_null(a.head);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(arena_reset_reuses_its_largest_block),
        cmocka_unit_test(parallel_covers_the_range_at_any_thread_count),
        cmocka_unit_test(mkdir_p_rejects_an_empty_name), cmocka_unit_test(outset_removes_the_directories_it_made),
        cmocka_unit_test(outset_handles_long_names),
        cmocka_unit_test(try_alloc_names_what_and_bytes),
        cmocka_unit_test(xcalloc_overflow_reaches_the_handler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
