/* cmd_opt.c: `tessel opt FILE.mid --machine M [--passes=A,B,...]`: mid
 * passes run on mid text, one after another, and the result printed (as
 * LLVM's opt and mlir-opt do). The input is verified first and the program
 * again after every pass; with no passes the output is the input, byte for
 * byte. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The mid pass names, and one pass's rewrites, for messages. */
static void pass_names(char *buf, size_t cap, const mid_pass *only) {
    size_t at = 0;
    buf[0] = 0;
    if (only) {
        for (int r = 0; r < only->nrewrites && at < cap; r++)
            at += (size_t)snprintf(buf + at, cap - at, "%s%s.%s", r ? ", " : "", only->name, only->rewrites[r]);
        return;
    }
    for (const mid_pass *p = mid_passes; p->name && at < cap; p++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", p == mid_passes ? "" : ", ", p->name);
}

/* Runs the passes of the comma-separated list on prog, verifying after each. */
static int run_passes(const char *list, mid_program *prog, diag *d) {
    char *copy = xstrdup(list), *next = copy;
    int rc = 0;
    while (next && rc == 0) {
        char *spec = next, *comma = strchr(next, ',');
        if (comma) *comma = 0;
        next = comma ? comma + 1 : NULL;
        const mid_pass *pass = NULL;
        uint32_t rewrites;
        int found = mid_pass_find(spec, &pass, &rewrites);
        char names[512];
        if (found == -1) {
            pass_names(names, sizeof names, NULL);
            rc = diag_fail(d, "tessel opt: error: option '--passes=%s': no mid pass is called '%s' (%s)", list, spec, names);
        } else if (found == -2) {
            pass_names(names, sizeof names, pass);
            rc = diag_fail(d, "tessel opt: error: option '--passes=%s': pass '%s' has no rewrite '%s' (%s)", list, pass->name,
                           strchr(spec, '.') + 1, pass->nrewrites ? names : "it has none");
        } else if ((rc = pass->run(prog, rewrites, d)) == 0 && mid_verify(prog, d)) {
            char was[sizeof d->text];
            snprintf(was, sizeof was, "%s", d->text);
            rc = diag_fail(d, "tessel opt: error: the program after pass '%s' does not verify (a compiler bug): %s", spec, was);
        }
    }
    free(copy);
    return rc;
}

int cmd_opt(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    machine m;
    if (cli_machine(c, &p, &m, &d)) return cli_report(&d);
    char *text = NULL;
    size_t len = 0;
    if (file_read_all(p.pos[0], &text, &len, &d)) return cli_report(&d);
    graph *g = NULL;
    mid_program prog;
    rc = mid_parse(text, len, p.pos[0], &m, &g, &prog, &d);
    free(text);
    if (rc) return cli_report(&d);
    rc = mid_verify(&prog, &d);
    const char *list = cli_opt(c, &p, "--passes");
    if (rc == 0 && list) rc = run_passes(list, &prog, &d);
    if (rc == 0) mid_print(stdout, &prog);
    mid_free(&prog);
    graph_free(g);
    return rc ? cli_report(&d) : 0;
}
