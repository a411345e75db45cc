/* lower: a mid program into the per-tile low program (lower.c). The low
 * program itself (low.h) knows nothing of mid or the graph; this header
 * joins them. */
#ifndef TESSEL_LOWER_H
#define TESSEL_LOWER_H

#include "../mid/mid.h"
#include "low.h"

/* Lowers an expanded program into out (allocated in arena a): every
 * storage tensor a buffer, every prim its steps, and what placement needs
 * besides (low.h: buffer roles, parameters by reference to the graph's
 * values, host bindings, probes). */
int low_lower(const mid_program *p, const machine *m, arena *a, low_program *out, diag *d);

#endif
