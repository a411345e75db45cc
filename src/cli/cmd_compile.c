/* cmd_compile.c: `tessel compile`: a model into a package. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../models/models.h"
#include "../report/report.h"
#include "cli.h"

/* Writes text through the output set. */
static int write_text(outset *os, FILE *f, const char *path, const char *text, diag *d) {
    if (!f) return 0;
    if (fputs(text, f) < 0) return diag_fail(d, "%s: error: cannot write", path);
    return outset_close(os, f, path, d);
}

int cmd_compile(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 0, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    if (cli_flag(c, &p, "--list-passes")) {
        for (int i = 0; i < driver_pass_count(); i++) printf("%s\n", driver_pass_at(i).name);
        return 0;
    }
    const char *out = cli_opt(c, &p, "-o"), *save = cli_opt(c, &p, "--save-recipe"), *report = cli_opt(c, &p, "--report");
    diag d = {0};
    if (p.npos == 0) return diag_fail(&d, "tessel compile: error: a MODEL is required (tessel compile --help)"), cli_report(&d);
    if (!out) return diag_fail(&d, "tessel compile: error: option '-o PKG' is required"), cli_report(&d);
    graph *g = NULL;
    machine m;
    compile_options co;
    const char *after = cli_opt(c, &p, "--print-after");
    if (after && !driver_pass_find(after, NULL)) {
        char names[1024];
        driver_pass_names(names, sizeof names);
        return diag_fail(&d, "tessel compile: error: option '--print-after=%s': no pass is called '%s' (%s)", after, after, names),
               cli_report(&d);
    }
    if (cli_plan_options(c, &p, p.pos[0], cli_flag(c, &p, "--quiet"), &co, &d)) return cli_report(&d);
    if (cli_load_machine_model(p.pos[0], c, &p, &g, &m, &d)) return cli_report(&d);
    co.print_after = after;
    co.print_to = stdout; /* then the summary goes to stderr: stdout is the IR alone */
    co.no_fuse = cli_flag(c, &p, "--no-fuse");
    co.no_siblings = cli_flag(c, &p, "--no-siblings");
    co.fusion_report = report != NULL;
    const char *chip_opt = cli_opt(c, &p, "--micro-batches") ? "--micro-batches" : cli_opt(c, &p, "--replicas") ? "--replicas" : NULL;
    if (m.chips == 1 && chip_opt) {
        graph_free(g);
        return diag_fail(&d, "tessel compile: error: option '%s': for a machine of several chips (%s has one)", chip_opt,
                         m.name), cli_report(&d);
    }
    if (m.chips > 1) {
        if (after) rc = diag_fail(&d, "tessel compile: error: option '--print-after': not for a machine of several chips yet");
        else rc = cli_compile_chips(p.pos[0], g, &m, &co, out, save, report, &d);
        graph_free(g);
        return rc ? cli_report(&d) : 0;
    }
    /* Every output exists as a temporary from the start: an unwritable path
     * fails before the work, and an interrupted compile leaves nothing. */
    outset os = {0};
    FILE *f = outset_open(&os, out, &d), *fr = NULL, *fp = NULL;
    if (f && save && !(fr = outset_open(&os, save, &d))) f = NULL;
    if (f && report && !(fp = outset_open(&os, report, &d))) f = NULL;
    if (!f) {
        outset_abort(&os);
        graph_free(g);
        return cli_report(&d);
    }
    package pkg;
    compile_info ci;
    rc = driver_compile(g, &m, &co, &pkg, &ci, &d);
    if (rc == 0) {
        rc = package_write(&pkg, f, out, &d);
        package_free(&pkg);
    }
    if (outset_close(&os, f, out, &d)) rc = -1;
    if (rc == 0) rc = write_text(&os, fr, save, ci.recipe, &d);
    if (rc == 0 && fp) {
        char *text = report_compile_json(g, &m, &ci);
        rc = write_text(&os, fp, report, text, &d);
        free(text);
        report_fusion_summary(stderr, driver_model_graph(g, &ci), &ci.fusions, ci.fusion_saved, ci.fusion_saved_names);
    }
    if (rc == 0) rc = outset_commit(&os, &d);
    else outset_abort(&os);
    if (rc == 0) {
        /* The file's size, without serialising the package a second time. */
        struct stat sb;
        progress_done(); /* the results follow */
        report_search_summary(g, &ci);
        report_compile_summary(after ? stderr : stdout, p.pos[0], &m, &ci, stat(out, &sb) == 0 ? (uint64_t)sb.st_size : 0, out);
    }
    compile_info_free(&ci);
    graph_free(g);
    if (rc) cli_fit_suggestions(p.pos[0], cli_precision(c, &p), &m, &d);
    return rc ? cli_report(&d) : 0;
}

