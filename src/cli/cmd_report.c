/* cmd_report.c: `tessel report`: a package's run as one HTML page. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../report/report.h"
#include "cli.h"

/* The compile report given with --compile-report: a tessel compile report
 * of this package's model and machine, or a located error. */
static json_t *load_plan(const char *path, const package *pkg, diag *d) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) {
        diag_fail(d, "%s:%d:%d: error: option '--compile-report': %s", path, e.line, e.column, e.text);
        return NULL;
    }
    const char *format = json_string_value(json_object_get(j, "format"));
    json_t *meta = json_loads(pkg->meta ? pkg->meta : "{}", 0, NULL);
    const char *pkg_graph = json_string_value(json_object_get(meta, "graph")), *model = json_string_value(json_object_get(j, "model"));
    const char *mach = json_string_value(json_object_get(j, "machine"));
    if (!format || strcmp(format, "tessel-compile-report") != 0)
        diag_fail(d, "%s: error: option '--compile-report': not a tessel compile report (tessel compile --report)", path);
    else if (pkg_graph && model && strcmp(pkg_graph, model) != 0)
        diag_fail(d, "%s: error: option '--compile-report': the report is of %s, the package of %s", path, model, pkg_graph);
    else if (mach && strcmp(mach, pkg->machine.name) != 0)
        diag_fail(d, "%s: error: option '--compile-report': the report is for machine %s, the package for %s", path, mach,
                  pkg->machine.name);
    json_decref(meta);
    if (d->set) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int cmd_report(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    const char *out = cli_opt(c, &p, "-o"), *given = cli_opt(c, &p, "--compile-report");
    if (!out) return diag_fail(&d, "tessel report: error: option '-o FILE.html' is required"), cli_report(&d);
    cli_pkg_run r;
    if (cli_pkg_run_open(p.pos[0], &r, &d)) return cli_report(&d);
    sim_options so = {.trace = true, .quiet = cli_flag(c, &p, "--quiet")};
    cli_outputs files = {0};
    json_t *plan = NULL;
    rc = cli_max_host_memory(c, &p, &so.max_host_bytes, &d);
    if (rc == 0 && given && !(plan = load_plan(given, &r.pkg, &d))) rc = -1;
    if (rc == 0) rc = sim_host_check(&r.pkg.machine, so.max_host_bytes, "--max-host-memory", &d);
    if (rc == 0) rc = cli_outputs_open(&files, NULL, NULL, 0, NULL, &d);
    if (rc == 0) rc = cli_outputs_open_html(&files, out, &d);
    if (rc == 0) rc = cli_load_inputs(c, &p, r.ins, r.nin, r.inputs, r.source, &d);
    if (rc == 0) rc = sim_run(&r.pkg, &so, r.inputs, r.outputs, &r.st, &d);
    /* The page is titled by the model the package was compiled from. */
    json_t *meta = json_loads(r.pkg.meta ? r.pkg.meta : "{}", 0, NULL);
    const char *model = json_string_value(json_object_get(meta, "model"));
    report_html_input hi = {.pkg = &r.pkg, .path = p.pos[0], .title = model ? model : p.pos[0], .sim = &r.st, .plan = plan};
    if (rc == 0) rc = cli_outputs_commit(&files, NULL, NULL, &r.st, &r.pkg, p.pos[0], &hi, &d);
    else cli_outputs_abort(&files);
    if (rc == 0) {
        progress_done(); /* the results follow */
        printf("report of %s on %s: %llu cycles, written to %s\n", p.pos[0], r.pkg.machine.name, (unsigned long long)r.st.cycles,
               out);
    }
    json_decref(plan);
    json_decref(meta);
    cli_pkg_run_free(&r);
    return rc ? cli_report(&d) : 0;
}
