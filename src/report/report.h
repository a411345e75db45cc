/* report: what the compiler and the simulator tell people and tools.
 *
 *   compile.c  the compile report (--report JSON): plan per op, predictions,
 *              search steps, failed finalists, statistics, the fusions
 *   run.c      the summaries compile, run and check print, and their --json
 *   html.c     the HTML report: one self-contained page (html/report.js
 *              draws it from the figures it embeds)
 *   trace.c    Chrome Trace Event JSON: compute sets and exchange phases as
 *              slices on a cycle timeline (one viewer microsecond is one
 *              cycle), sampled tiles' own tracks and memory counters,
 *              opened by Perfetto UI or chrome://tracing
 */
#ifndef TESSEL_REPORT_H
#define TESSEL_REPORT_H

#include "../calib/calib.h"
#include "../driver/driver.h"

struct json_t;

/* ---- compile.c ------------------------------------------------------------ */

/* The compile report of info (compiled from g): JSON text, caller frees. */
char *report_compile_json(const graph *g, const machine *m, const compile_info *info);
/* The epilogue fusion's candidates (saved, saved_names and proofs may be
 * NULL) as a JSON array, and their summary on a stream. */
struct json_t *report_fusion_json(const graph *g, const fuse_plan *fp, const int64_t *saved, char *const *saved_names,
                                  const epilogue_proof *proofs);
void report_fusion_summary(FILE *f, const graph *g, const fuse_plan *fp, const int64_t *saved, char *const *saved_names);

/* ---- run.c ------------------------------------------------------------------ */

/* What a compile made, on f; path NULL: no package file. */
void report_compile_summary(FILE *f, const char *model, const machine *m, const compile_info *ci, uint64_t pkg_bytes, const char *path);
/* What the search chose and how sure it is (stderr). */
void report_search_summary(const graph *model, const compile_info *ci);
/* A run's cycles, by kind, tiles and memory: as JSON, and as lines on stdout. */
struct json_t *report_sim_json(const sim_stats *st, const machine *m);
void report_sim_summary(const sim_stats *st, const machine *m);
/* A check's comparisons (ci NULL: a given package) as JSON (`check
 * --json`), with the fusion proofs and peak of pv and the inputs'
 * non-finite values (nonfinite, a JSON array, or NULL), and as lines. */
struct json_t *report_check_json(const graph *g, const char *model, const machine *m, const compile_info *ci,
                                 const check_result *r, const check_proofs *pv, struct json_t *nonfinite);
/* NaN or infinity in what the user gave (inputs, and parameters read from
 * .npy files; seeded ones cannot hold any) as a JSON array, with a note on
 * notes (or NULL) for each. */
struct json_t *report_nonfinite_json(const graph *g, const host_spec *specs, int32_t nin, float *const *inputs, FILE *notes);
void report_check_summary(const graph *g, const check_result *r, const char *const *expect_src);
/* One line on the fused optimizer steps and what the package stores. */
void report_epilogue_summary(const graph *g, const fuse_plan *fp, const epilogue_proof *proofs);
/* Where the first difference is (locate.c's result), for people. */
void report_locate_print(FILE *f, const graph *g, const locate_result *r);

/* ---- inspect.c, calibrate.c ---------------------------------------------- */

/* Per tile of a package: the memory its buffers reach, its code and table
 * bytes, its headroom, and which buffers it holds (inspect.c's header says
 * how that is found). */
typedef struct report_tile {
    uint32_t tile, end, code, tables; /* end: bytes from tile_memory_base to its last reserved byte */
    int64_t headroom;                 /* bytes left below the loader limit */
} report_tile;
typedef struct report_tiles {
    uint32_t tiles;
    report_tile *rows;   /* per tile */
    int32_t nbufs;       /* the program's buffers */
    uint8_t *holds;      /* [tile * nbufs + buffer]: the tile uses the buffer */
    uint64_t fragments;  /* the exchange tables' sends, repeat bodies once */
    pkg_xplan xp;        /* the exchange tables, decoded (the holdings come from them) */
} report_tiles;
int report_tiles_build(const package *pkg, const char *path, report_tiles *out, diag *d);
void report_tiles_free(report_tiles *r);
static inline bool report_tile_holds(const report_tiles *r, uint32_t tile, int32_t buf) {
    return r->holds[(size_t)tile * (size_t)r->nbufs + (size_t)buf] != 0;
}

/* What package pkg (read from path) puts where: per tile the memory reached,
 * code and table bytes and headroom, the tiles with the least headroom, and
 * one tile's memory map (want_tile, or -1: the one with the least); as text
 * or JSON on f. */
int report_inspect(FILE *f, const package *pkg, const char *path, int64_t want_tile, bool json, diag *d);
/* tessel calibrate's results, as a table or JSON, on f. */
void report_calibration_table(FILE *f, const calib_result *r);
void report_calibration_json(FILE *f, const calib_result *r);

/* ---- html.c ------------------------------------------------------------------ */

/* The HTML report of a run of pkg (read from path): sim must come from a
 * run with trace on; plan (the compile report) and check (the check
 * summary's JSON) may be NULL. */
typedef struct report_html_input {
    const package *pkg;
    const char *path;
    const char *title;
    const sim_stats *sim;
    struct json_t *plan;
    struct json_t *check;
} report_html_input;
int report_html_write(FILE *f, const report_html_input *in, diag *d);
/* The page of a check on several chips (html/chips.js): check is what
 * `tessel check --json` prints there (a pipeline's stages or a training
 * step's programs, and the simulated timing); plan_words says the plan. */
int report_chips_html_write(FILE *f, const char *title, const machine *m, const char *plan_words, struct json_t *check);

/* ---- trace.c ---------------------------------------------------------------- */

/* Writes the events of st (a run of pkg with trace on) as a Chrome trace
 * to f: compute and exchange tracks, a track per sampled tile and a counter
 * of its live buffers' bytes; the machine's clock gives each slice its wall
 * time too. */
int report_trace_write(FILE *f, const sim_stats *st, const package *pkg, const char *title, diag *d);

#endif
