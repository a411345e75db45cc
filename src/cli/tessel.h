/* The tessel driver: the whole compiler as one function, and the check that
 * compiles, simulates and compares against the references. The command
 * (main.c) and the tests call these. */
#ifndef TESSEL_DRIVER_H
#define TESSEL_DRIVER_H

#include "../place/place.h"
#include "../sim/sim.h"

typedef struct compile_info {
    place_stats place;
    int64_t prims;            /* mid prims, repeat bodies once */
    int64_t steps, runs, frags;
    double seconds;           /* compile wall time */
} compile_info;

/* graph -> package for machine m; model names the source in the package's
 * metadata. print_mid, if not NULL, receives the expanded program. */
int tessel_compile(const graph *g, const machine *m, const char *model, FILE *print_mid, package *out, compile_info *info,
                   diag *d);

typedef struct check_output {
    const char *name;
    num_diff pure;        /* against the pure FP32 model (precision casts stripped) */
    num_mismatch exact;   /* against the plan-exact emulated reference: must be none */
    double min_cosine;    /* the pure-model threshold for this output */
    bool pass;
} check_output;

typedef struct check_result {
    sim_stats sim;
    int32_t n;
    check_output *out;    /* malloc'd, one per output */
    bool fp8;             /* the graph has 8-bit values: FP8 thresholds */
    bool pass;
    int64_t differing;    /* output elements, all outputs, that differ from the plan-exact reference */
    double cosine;        /* worst output, against the pure model */
    double max_abs_err;   /* worst output, against the pure model */
    double ref_seconds;
} check_result;

/* Runs p on inputs (given[k] for input k when given and not NULL, else its
 * seeded default), then the pure FP32 model and the plan-exact reference
 * (from the plan's numeric decisions in p's metadata), and compares each
 * output: bit for bit with the plan-exact reference, by cosine with the
 * pure model. sim options pass through (trace, quiet). */
int tessel_check(const graph *g, const package *p, float *const *given, const sim_options *so, check_result *r, diag *d);
void check_result_free(check_result *r);

#endif
