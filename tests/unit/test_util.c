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
    assert_int_equal(util_mkdir_p("", &d), -1);
    assert_string_equal(d.text, "error: the directory name is empty\n");
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mkdir_p_rejects_an_empty_name),
        cmocka_unit_test(outset_handles_long_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
