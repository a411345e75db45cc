/* calibrate.c: `tessel calibrate`'s tables: every measured point against
 * the simulator, and per kind the median and worst error; or the same as
 * JSON. */
#include "report.h"

#include <math.h>
#include <string.h>

void report_calibration_table(FILE *f, const calib_result *r) {
    fprintf(f, "%-40s %-10s %10s %10s %8s\n", "point", "kind", "measured", "simulated", "error");
    for (int i = 0; i < r->n; i++) {
        const calib_point *p = &r->pts[i];
        if (!p->built) continue;
        fprintf(f, "%-40s %-10s %10.0f %10.0f %+7.1f%%%s\n", p->id, p->kind, p->measured, p->simulated,
                100.0 * (p->simulated / p->measured - 1.0), p->superseded ? "  (older kernel, not summarised)" : "");
    }
    fprintf(f, "\n%-10s %6s %8s %8s\n", "kind", "points", "median", "worst");
    for (int k = 0; k < r->nkinds; k++) {
        const calib_kind *c = &r->kinds[k];
        if (!c->points) continue;
        fprintf(f, "%-10s %6d %7.1f%% %7.1f%%\n", c->kind, c->points, 100.0 * c->median_abs_error,
                100.0 * c->worst_abs_error);
    }
    int skipped = 0;
    for (int i = 0; i < r->n; i++) skipped += !r->pts[i].built;
    if (skipped) fprintf(f, "\nskipped (%d):\n", skipped);
    for (int i = 0; i < r->n; i++)
        if (!r->pts[i].built) fprintf(f, "  %-40s %s\n", r->pts[i].id, r->pts[i].why);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

void report_calibration_json(FILE *f, const calib_result *r) {
    fprintf(f, "{\"points\": [");
    for (int i = 0, first = 1; i < r->n; i++) {
        const calib_point *p = &r->pts[i];
        fprintf(f, "%s\n  {\"id\": ", first ? "" : ",");
        first = 0;
        json_str(f, p->id);
        fprintf(f, ", \"kind\": ");
        json_str(f, p->kind);
        fprintf(f, ", \"measured\": %.0f", p->measured);
        if (p->built)
            fprintf(f, ", \"simulated\": %.0f, \"error\": %.4f, \"summarised\": %s", p->simulated,
                    p->simulated / p->measured - 1.0, p->superseded ? "false" : "true");
        else {
            fprintf(f, ", \"simulated\": null, \"skipped\": ");
            json_str(f, p->why);
        }
        fputc('}', f);
    }
    fprintf(f, "\n], \"summary\": {");
    for (int k = 0, first = 1; k < r->nkinds; k++) {
        const calib_kind *c = &r->kinds[k];
        if (!c->points) continue;
        fprintf(f, "%s\n  ", first ? "" : ",");
        first = 0;
        json_str(f, c->kind);
        fprintf(f, ": {\"points\": %d, \"median_abs_error\": %.4f, \"worst_abs_error\": %.4f}", c->points,
                c->median_abs_error, c->worst_abs_error);
    }
    fprintf(f, "\n}}\n");
}
