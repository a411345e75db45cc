/* report: what a run looked like, for people and tools.
 *
 *   trace   Chrome Trace Event JSON: compute sets and exchange phases as
 *           slices on a cycle timeline (one viewer microsecond is one cycle),
 *           opened by Perfetto UI or chrome://tracing
 */
#ifndef TESSEL_REPORT_H
#define TESSEL_REPORT_H

#include "../sim/sim.h"

/* Writes the events of st as a Chrome trace to f; clock_hz gives each slice
 * its wall time too. */
int report_trace_write(FILE *f, const sim_stats *st, double clock_hz, const char *title);

#endif
