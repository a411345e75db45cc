/* cmd_calibrate.c: `tessel calibrate POINTS.json`: measured hardware points against the
 * simulator, point by point and per kind (the work is in src/calib, the tables in src/report/calibrate.c). */
#include "../report/report.h"
#include "cli.h"

int cmd_calibrate(const cmd *c, int argc, char **argv) {
    parsed p;
    int rc = cli_parse(c, argc, argv, 1, 1, &p);
    if (rc || p.help) return rc ? rc : (cli_help(c, stdout), 0);
    diag d = {0};
    machine m;
    if (cli_machine(c, &p, &m, &d)) return cli_report(&d);
    calib_result r;
    if (calib_run_file(p.pos[0], &m, &r, &d)) return cli_report(&d);
    if (cli_flag(c, &p, "--json")) report_calibration_json(stdout, &r);
    else report_calibration_table(stdout, &r);
    calib_result_free(&r);
    return 0;
}
