/* cmd_inspect.c: `tessel inspect PKG`: what a package puts where (the
 * report is src/report/inspect.c). */
#include <stdlib.h>

#include "../report/report.h"
#include "cli.h"

int cmd_inspect(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    package pkg;
    if (package_load(p.pos[0], &pkg, &d)) return cli_report(&d);
    const machine *m = &pkg.machine;
    const char *tile_opt = cli_opt(c, &p, "--tile");
    int64_t want_tile = -1;
    if (tile_opt) {
        char *end;
        want_tile = strtoll(tile_opt, &end, 10);
        if (*end || end == tile_opt || want_tile < 0 || want_tile >= m->tiles) {
            diag_fail(&d, "tessel inspect: error: option '--tile %s': a tile of machine '%s' is 0..%u", tile_opt, m->name, m->tiles - 1);
            package_free(&pkg);
            return cli_report(&d);
        }
    }
    rc = report_inspect(stdout, &pkg, p.pos[0], want_tile, cli_flag(c, &p, "--json"), &d);
    package_free(&pkg);
    return rc ? cli_report(&d) : 0;
}
