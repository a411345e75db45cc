/* test_roundtrip.c: print(parse(x)) == x for every .tsl file under tests/
 * (files under an errors/ folder must instead fail to parse). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graph/graph.h"

static int files_ok, files_bad, errors_ok;

static void check_file(const char *path, bool expect_error) {
    char *text;
    size_t len;
    diag d = {0};
    assert_int_equal(file_read_all(path, &text, &len, &d), 0);
    graph *g = graph_parse(path, text, len, &d);
    if (expect_error) {
        if (g) {
            fprintf(stderr, "%s: parsed, but files under errors/ must fail\n", path);
            files_bad++;
        } else {
            errors_ok++;
        }
    } else if (!g) {
        fprintf(stderr, "%s: does not parse:\n%s", path, d.text);
        files_bad++;
    } else {
        char *out = graph_print(g);
        if (strcmp(out, text) != 0) {
            size_t i = 0;
            while (out[i] && out[i] == text[i]) i++;
            fprintf(stderr, "%s: printed text differs from the file at byte %zu:\n  file:    %.60s\n  printed: %.60s\n", path,
                    i, text + i, out + i);
            files_bad++;
        } else {
            files_ok++;
        }
        free(out);
        graph_free(g);
    }
    free(text);
}

static void walk(const char *dir, bool in_errors) {
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        char *p = path_join(dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(p, in_errors || strcmp(e->d_name, "errors") == 0);
        } else {
            size_t n = strlen(p);
            if (n > 4 && strcmp(p + n - 4, ".tsl") == 0) check_file(p, in_errors);
        }
        free(p);
    }
    closedir(dp);
}

static void every_tsl_file_round_trips(void **state) {
    (void)state;
    const char *root = getenv("TESSEL_SOURCE_DIR");
    assert_non_null(root);
    char *tests = path_join(root, "tests");
    walk(tests, false);
    free(tests);
    fprintf(stderr, "round trip: %d files exact, %d error files rejected, %d failures\n", files_ok, errors_ok, files_bad);
    assert_int_equal(files_bad, 0);
    assert_true(files_ok >= 3);
    assert_true(errors_ok >= 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(every_tsl_file_round_trips)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
