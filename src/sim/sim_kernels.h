/* sim_kernels.h: the simulator's tile kernels (internal to src/sim): what one kernel run computes
 * on one tile's memory image (what it costs there is kern.h's kernel_run_cycles).
 *
 *   executor ──resolve addresses──► ptr[i] (host pointers into the tile image)
 *            ──sim_kernel_run──────► results written in place, kern.h semantics
 *
 * A pure function of its arguments, thread-safe (each thread keeps its own scratch); it expects
 * runs that passed kernel_run_valid with operands inside the tile (nothing is re-checked).
 * docs/sim.md gives the arithmetic.
 */
#ifndef TESSEL_SIM_KERNELS_H
#define TESSEL_SIM_KERNELS_H

#include "../kern/kern.h"

/* Runs r with its operands already resolved to host pointers (ptr[i] points at the operand's
 * first byte inside the tile's memory image; unused operands are NULL). */
void sim_kernel_run(const kernel_run *r, uint8_t *const ptr[KERNEL_MAX_OPERANDS]);

#endif
