/* lower: a mid program into the per-tile low program (lower.c). The low
 * program itself (low.h) knows nothing of mid; this header joins the two. */
#ifndef TESSEL_LOWER_H
#define TESSEL_LOWER_H

#include "../mid/mid.h"
#include "low.h"

/* The steps a mid prim became: first is its first step (a REPEAT prim's
 * REPEAT step), last the last step emitted up to and including it (-1 when
 * none has been yet), so a value a prim completes is complete after `last`. */
typedef struct low_prim_steps {
    int32_t first, last;
} low_prim_steps;

/* Lowers an expanded program; storage tensors get buffers (buf_of[t], -1 for
 * tensors without storage of their own), allocated in arena a; prim_steps[i]
 * receives the steps of mid prim i. */
int low_lower(const mid_program *p, const machine *m, arena *a, low_program *out, int32_t *buf_of,
              low_prim_steps *prim_steps, diag *d);

#endif
