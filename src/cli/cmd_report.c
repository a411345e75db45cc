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
    package pkg;
    if (package_load(p.pos[0], &pkg, &d)) return cli_report(&d);
    int32_t nin, nout;
    host_spec *ins, *outs;
    cli_package_specs(&pkg, &ins, &nin, &outs, &nout);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    sim_options so = {.trace = true, .quiet = cli_flag(c, &p, "--quiet")};
    sim_stats st = {0};
    cli_outputs files = {0};
    json_t *plan = NULL;
    rc = cli_max_host_memory(c, &p, &so.max_host_bytes, &d);
    if (rc == 0 && given && !(plan = load_plan(given, &pkg, &d))) rc = -1;
    if (rc == 0) rc = sim_host_check(&pkg.machine, so.max_host_bytes, "--max-host-memory", &d);
    if (rc == 0) rc = cli_outputs_open(&files, NULL, NULL, 0, NULL, &d);
    if (rc == 0) rc = cli_outputs_open_html(&files, out, &d);
    if (rc == 0) rc = cli_load_inputs(c, &p, ins, nin, inputs, source, &d);
    if (rc == 0) rc = sim_run(&pkg, &so, inputs, outputs, &st, &d);
    /* The page is titled by the model the package was compiled from. */
    json_t *meta = json_loads(pkg.meta ? pkg.meta : "{}", 0, NULL);
    const char *model = json_string_value(json_object_get(meta, "model"));
    report_html_input hi = {.pkg = &pkg, .path = p.pos[0], .title = model ? model : p.pos[0], .sim = &st, .plan = plan};
    if (rc == 0) rc = cli_outputs_commit(&files, NULL, NULL, &st, &pkg, p.pos[0], &hi, &d);
    else cli_outputs_abort(&files);
    if (rc == 0) {
        progress_done(); /* the results follow */
        printf("report of %s on %s: %llu cycles, written to %s\n", p.pos[0], pkg.machine.name, (unsigned long long)st.cycles, out);
    }
    json_decref(plan);
    json_decref(meta);
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    for (int32_t j = 0; j < nout; j++) free(outputs[j]);
    free(inputs);
    free(outputs);
    free(source);
    free(ins);
    free(outs);
    sim_stats_free(&st);
    package_free(&pkg);
    return rc ? cli_report(&d) : 0;
}
