/* cmd_run.c: `tessel run`: a package on the simulator. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../report/report.h"
#include "cli.h"

int cmd_run(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    package pkg;
    if (package_load(p.pos[0], &pkg, &d)) return cli_report(&d);
    int32_t nin, nout;
    host_spec *ins, *outs;
    cli_package_specs(&pkg, &ins, &nin, &outs, &nout);
    float **inputs = xcalloc((size_t)nin + 1, sizeof(float *)), **outputs = xcalloc((size_t)nout + 1, sizeof(float *));
    const char **source = xcalloc((size_t)nin + 1, sizeof(char *));
    bool json = cli_flag(c, &p, "--json");
    const char *trace = cli_opt(c, &p, "--trace"), *dir = cli_opt(c, &p, "--output-dir");
    sim_options so = {.trace = trace != NULL, .quiet = json};
    sim_stats st = {0};
    cli_outputs files = {0};
    rc = cli_max_host_memory(c, &p, &so.max_host_bytes, &d);
    if (rc == 0) rc = sim_host_check(&pkg.machine, so.max_host_bytes, "--max-host-memory", &d);
    if (rc == 0) rc = cli_outputs_open(&files, dir, outs, nout, trace, &d);
    if (rc == 0) rc = cli_load_inputs(c, &p, ins, nin, inputs, source, &d);
    if (rc == 0) rc = sim_run(&pkg, &so, inputs, outputs, &st, &d);
    if (rc == 0) rc = cli_outputs_commit(&files, outs, outputs, &st, &pkg, p.pos[0], NULL, &d);
    else cli_outputs_abort(&files);
    if (rc == 0 && json) {
        json_t *j = report_sim_json(&st, &pkg.machine);
        json_object_set_new(j, "package", json_string(p.pos[0]));
        json_object_set_new(j, "machine", json_string(pkg.machine.name));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(s);
        free(s);
        json_decref(j);
    } else if (rc == 0) {
        progress_done(); /* the results follow */
        printf("ran %s on %s\n", p.pos[0], pkg.machine.name);
        report_sim_summary(&st, &pkg.machine);
        for (int32_t j = 0; j < nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", source[j] ? source[j] : "seeded normal(0, 1)");
            cli_print_stats("input", &ins[j], inputs[j], note);
        }
        for (int32_t j = 0; j < nout; j++) cli_print_stats("output", &outs[j], outputs[j], NULL);
    }
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

