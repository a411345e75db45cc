/* cmd_machine.c: `tessel machine` and `tessel zoo`: the machine descriptions and the
 * built-in models, listed. */
#include <stdlib.h>
#include <string.h>

#include "../models/models.h"
#include "cli.h"

int cmd_machine(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 0, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    machine m;
    if (cli_machine_spec(c, NULL, p.npos ? p.pos[0] : "c600", &m, &d)) return cli_report(&d);
    if (cli_flag(c, &p, "--json")) {
        char *j = machine_to_json(&m);
        fputs(j, stdout);
        free(j);
    } else {
        machine_print(stdout, &m);
    }
    return 0;
}

int cmd_zoo(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 0, 0, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    models_zoo_list(stdout);
    return 0;
}
