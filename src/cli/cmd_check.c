/* cmd_check.c: `tessel check`: compile (or load) a package, simulate it, compare
 * with the references. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../report/report.h"
#include "cli.h"

/* "Does not fit" as JSON on stdout (--json): the first line of the error
 * (the reason), the rest of it, and the options that would fit. */
static void print_no_fit_json(const char *model, const machine *m, const diag *d) {
    json_t *sug = json_array();
    const char *text = d->text, *nl = strchr(text, '\n');
    for (const char *l = nl; l && l[1];) {
        const char *e = strchr(l + 1, '\n');
        if (!e) break;
        if (strncmp(l + 1, "  would fit: ", 13) == 0) json_array_append_new(sug, json_stringn(l + 14, (size_t)(e - l - 14)));
        l = e;
    }
    json_t *j = json_pack("{s:s, s:s, s:b, s:s%, s:s, s:o}", "model", model, "machine", m->name, "does_not_fit", 1, "reason",
                          text, nl ? (size_t)(nl - text) : strlen(text), "error", text, "would_fit", sug);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    puts(s);
    free(s);
    json_decref(j);
}

/* The package to check: PKG as given, or MODEL compiled and sent through
 * the file format and its reader (what runs is what a file holds). A
 * machine too large to simulate here is refused before any work. */
static int check_package(const cmd *c, const parsed *p, const graph *g, machine *m, uint64_t host_limit, package *pkg,
                         compile_info *ci, bool *compiled, diag *d) {
    const char *given = cli_opt(c, p, "--package");
    *compiled = !given;
    if (given) {
        if (cli_opt(c, p, "--machine"))
            return diag_fail(d, "tessel check: error: option '--machine': a package carries its machine (--package %s)", given);
        if (package_load(given, pkg, d)) return -1;
        *m = pkg->machine;
        if (sim_host_check(m, host_limit, "--max-host-memory", d) == 0 && driver_package_matches(g, pkg, given, d) == 0) return 0;
        package_free(pkg);
        return -1;
    }
    if (cli_machine(c, p, m, d) || sim_host_check(m, host_limit, "--max-host-memory", d)) return -1;
    package built;
    compile_options co;
    if (cli_plan_options(c, p, p->pos[0], cli_flag(c, p, "--quiet") || cli_flag(c, p, "--json"), &co, d)) return -1;
    co.no_fuse = cli_flag(c, p, "--no-fuse");
    co.no_siblings = cli_flag(c, p, "--no-siblings");
    if (driver_compile(g, m, &co, &built, ci, d)) return -1;
    size_t n;
    uint8_t *img = package_image(&built, &n, p->pos[0], d);
    package_free(&built);
    int rc = img ? package_parse(img, n, p->pos[0], pkg, d) : -1;
    free(img);
    return rc;
}

static void print_json(const graph *g, const char *model, const machine *m, const compile_info *ci, const check_result *r,
                       const check_proofs *pv, json_t *nonfinite) {
    json_t *j = report_check_json(g, model, m, ci, r, pv, nonfinite);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    puts(s);
    free(s);
    json_decref(j);
}

int cmd_check(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    graph *g = cli_load_model(c, &p, p.pos[0], &d);
    if (!g) return cli_report(&d);
    int chips = cli_check_on_chips(c, &p, &d); /* several chips: src/cli/chips.c */
    if (chips) {
        bool pass = false;
        rc = chips < 0 ? -1 : cli_check_chips(c, &p, g, &pass, &d);
        graph_free(g);
        return rc ? cli_report(&d) : pass ? 0 : EXIT_CHECK_FAILED;
    }
    bool json = cli_flag(c, &p, "--json"), compiled = false;
    const char *trace = cli_opt(c, &p, "--trace"), *html = cli_opt(c, &p, "--html");
    int32_t nin;
    host_spec *specs = driver_graph_specs(g, false, &nin);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    machine m;
    package pkg;
    compile_info ci = {0};
    check_result r = {0};
    int32_t nout;
    host_spec *out_specs = driver_graph_specs(g, true, &nout);
    float **expect = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **expect_src = xcalloc((size_t)nout + 1, sizeof(char *));
    rc = cli_load_inputs(c, &p, specs, nin, inputs, source, &d);
    if (rc == 0) rc = cli_load_expected(c, &p, out_specs, nout, expect, expect_src, &d);
    json_t *nonfinite = rc == 0 ? report_nonfinite_json(g, specs, nin, inputs, stderr) : json_array();
    cli_outputs files = {0};
    uint64_t host_limit = 0;
    if (rc == 0) rc = cli_max_host_memory(c, &p, &host_limit, &d);
    if (rc == 0) rc = cli_outputs_open(&files, NULL, NULL, 0, trace, &d);
    if (rc == 0) rc = cli_outputs_open_html(&files, html, &d);
    /* The pure FP32 reference needs no package: it runs beside the compile. */
    driver_pure *pure = rc == 0 ? driver_pure_start(g, inputs, json || cli_flag(c, &p, "--quiet"), &d) : NULL;
    if (!pure) rc = -1;
    if (rc == 0) rc = check_package(c, &p, g, &m, host_limit, &pkg, &ci, &compiled, &d);
    bool have_pkg = rc == 0; /* until the trace is written: its events name the package's strings */
    check_proofs pv = {0};
    if (rc == 0) rc = driver_check_proofs(g, compiled ? &ci : NULL, &pkg, &pv, &d);
    if (rc == 0) {
        const char *given = cli_opt(c, &p, "--package");
        check_options co = {.package = given ? given : p.pos[0],
                            .inputs = inputs,
                            .expect = expect,
                            .sim = {.trace = trace || html, .quiet = json || cli_flag(c, &p, "--quiet"), .max_host_bytes = host_limit},
                            .locate = cli_flag(c, &p, "--locate"),
                            .pure = pure};
        pure = NULL; /* driver_check's now */
        rc = driver_check(g, &pkg, &co, &r, &d);
    }
    driver_pure_cancel(pure); /* not used: the check stopped before it */
    if (rc == 0 && pv.fail) r.pass = false;
    if (rc == 0) {
        /* The page shows the check as --json prints it, and the compile report when this compiled. */
        report_html_input hi = {.pkg = &pkg, .path = cli_opt(c, &p, "--package") ? cli_opt(c, &p, "--package") : p.pos[0],
                                .title = p.pos[0], .sim = &r.sim};
        if (html) {
            hi.check = report_check_json(g, p.pos[0], &m, compiled ? &ci : NULL, &r, &pv, nonfinite);
            if (compiled) {
                char *text = report_compile_json(g, &m, &ci);
                hi.plan = json_loads(text, 0, NULL);
                free(text);
            }
        }
        rc = cli_outputs_commit(&files, NULL, NULL, &r.sim, &pkg, p.pos[0], &hi, &d);
        json_decref(hi.check);
        json_decref(hi.plan);
    } else {
        cli_outputs_abort(&files);
    }
    if (have_pkg) package_free(&pkg);
    if (rc && d.no_fit) cli_fit_suggestions(p.pos[0], cli_precision(c, &p), &m, &d); /* with progress */
    progress_done(); /* the results follow */
    if (rc == 0 && json) print_json(g, p.pos[0], &m, compiled ? &ci : NULL, &r, &pv, nonfinite);
    else if (rc == 0) {
        if (compiled) report_compile_summary(stdout, p.pos[0], &m, &ci, 0, NULL);
        else printf("checking %s against %s on %s\n", cli_opt(c, &p, "--package"), p.pos[0], m.name);
        report_sim_summary(&r.sim, &m);
        for (int32_t j = 0; j < nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", cli_input_source(&specs[j], source[j]));
            cli_print_stats("input", &specs[j], inputs[j], note);
        }
        report_epilogue_summary(pv.gf, pv.fp, pv.proofs);
        report_check_summary(g, &r, expect_src);
    }
    bool pass = r.pass;
    check_proofs_free(&pv);
    json_decref(nonfinite);
    for (int32_t j = 0; j < nout; j++) free(expect[j]);
    free(expect);
    free(expect_src);
    free(out_specs);
    for (int32_t j = 0; j < nin; j++) free(inputs[j]);
    free(inputs);
    free(source);
    free(specs);
    check_result_free(&r);
    compile_info_free(&ci);
    graph_free(g);
    if (rc && d.no_fit && json) print_no_fit_json(p.pos[0], &m, &d);
    if (rc) return cli_report(&d);
    return pass ? 0 : EXIT_CHECK_FAILED;
}
