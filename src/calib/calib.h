/* calib: measured hardware timing points against the simulator.
 *
 *   POINTS.json   [ {id, kind, shape{}, dtypes{}, measured_cycles, what_it_includes, source,
 *                    confidence}, ... ]   (the format of ../shared/calibration)
 *   each point    -> a one-kernel package (one run on tile 0) or a one-phase package (one
 *                    exchange step, in a repeat when the point patches addresses), built on a
 *                    copy of the machine cut to the tiles the point uses, and run by sim_run
 *   simulated     sim_stats.cycles; for `sync` points the phase's overhead part
 *                    (sim_stats.sync_cycles per phase), which is what those points measure
 *
 * A point tessel cannot build (a fused kernel it does not have, a whole program, a phase
 * whose per-tile traffic the point does not give) is kept with the reason. A point whose id
 * marks a superseded kernel (`-0909`, `-old`, as the file's README defines) is simulated and
 * printed but left out of the summary.
 */
#ifndef TESSEL_CALIB_H
#define TESSEL_CALIB_H

#include "../machine/machine.h"

enum { CALIB_ID_CAP = 96, CALIB_KIND_CAP = 24, CALIB_WHY_CAP = 192 };

typedef struct calib_point {
    char id[CALIB_ID_CAP];
    char kind[CALIB_KIND_CAP];
    double measured;           /* cycles on hardware */
    double simulated;          /* cycles, when built */
    bool built;                /* false: skipped, why says so */
    bool superseded;           /* an older kernel's figure: printed, not summarised */
    char why[CALIB_WHY_CAP];
} calib_point;

typedef struct calib_kind {
    char kind[CALIB_KIND_CAP];
    int points;                /* simulated and summarised */
    double median_abs_error;   /* |simulated / measured - 1| */
    double worst_abs_error;
} calib_kind;

typedef struct calib_result {
    calib_point *pts;          /* malloc'd, file order */
    int n;
    calib_kind *kinds;         /* malloc'd, in order of first appearance */
    int nkinds;
} calib_result;

/* Parses text (len bytes, NUL-terminated) as a points file named path, builds and simulates
 * every point on machine m. Errors (bad JSON, unknown fields, bad values) name path:line. */
int calib_run_text(const char *text, size_t len, const char *path, const machine *m, calib_result *r, diag *d);
/* The same for a file. */
int calib_run_file(const char *path, const machine *m, calib_result *r, diag *d);
void calib_result_free(calib_result *r);

#endif
