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
    if (pkg_chips_file(p.pos[0])) return cli_run_chips(c, &p, p.pos[0], &d) ? cli_report(&d) : 0;
    if (cli_transport) { /* said once, by rank 0 */
        if (cli_transport->rank == 0)
            fprintf(stderr, "tessel run: error: %s is a package for one chip: it runs in one process, not over %d MPI "
                            "ranks\n", p.pos[0], cli_transport->ranks);
        return EXIT_USER;
    }
    cli_pkg_run r;
    if (cli_pkg_run_open(p.pos[0], &r, &d)) return cli_report(&d);
    bool json = cli_flag(c, &p, "--json");
    const char *trace = cli_opt(c, &p, "--trace"), *dir = cli_opt(c, &p, "--output-dir");
    sim_options so = {.trace = trace != NULL, .quiet = json};
    cli_outputs files = {0};
    rc = cli_max_host_memory(c, &p, &so.max_host_bytes, &d);
    if (rc == 0) rc = sim_host_check(&r.pkg.machine, so.max_host_bytes, "--max-host-memory", &d);
    if (rc == 0) rc = cli_outputs_open(&files, dir, r.outs, r.nout, trace, &d);
    if (rc == 0) rc = cli_load_inputs(c, &p, r.ins, r.nin, r.inputs, r.source, &d);
    if (rc == 0) rc = sim_run(&r.pkg, &so, r.inputs, r.outputs, &r.st, &d);
    if (rc == 0) rc = cli_outputs_commit(&files, r.outs, r.outputs, &r.st, &r.pkg, p.pos[0], NULL, &d);
    else cli_outputs_abort(&files);
    if (rc == 0 && json) {
        json_t *j = report_sim_json(&r.st, &r.pkg.machine);
        json_object_set_new(j, "package", json_string(p.pos[0]));
        json_object_set_new(j, "machine", json_string(r.pkg.machine.name));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        puts(s);
        free(s);
        json_decref(j);
    } else if (rc == 0) {
        progress_done(); /* the results follow */
        printf("ran %s on %s\n", p.pos[0], r.pkg.machine.name);
        report_sim_summary(&r.st, &r.pkg.machine);
        for (int32_t j = 0; j < r.nin; j++) {
            char note[300];
            snprintf(note, sizeof note, "from %s", cli_input_source(&r.ins[j], r.source[j]));
            cli_print_stats("input", &r.ins[j], r.inputs[j], note);
        }
        for (int32_t j = 0; j < r.nout; j++) cli_print_stats("output", &r.outs[j], r.outputs[j], NULL);
    }
    cli_pkg_run_free(&r);
    return rc ? cli_report(&d) : 0;
}

