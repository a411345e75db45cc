/* sim_kernels.h: the simulator's tile kernels (internal to src/sim): what one kernel run computes
 * on one tile's memory image, and how many cycles it takes there.
 *
 *   executor ──resolve addresses──► ptr[i] (host pointers into the tile image)
 *            ──sim_kernel_run──────► results written in place, low.h semantics
 *            ──sim_kernel_cycles───► cycles of the run on the tile, launch excluded
 *
 * Both are pure functions of their arguments, thread-safe (each thread keeps its own scratch), and
 * expect runs that passed low_run_valid with operands inside the tile (nothing is re-checked).
 * docs/sim.md gives the arithmetic and the cycle formulas.
 */
#ifndef TESSEL_SIM_KERNELS_H
#define TESSEL_SIM_KERNELS_H

#include "../low/low.h"
#include "../machine/machine.h"

/* What sim_kernel_cycles returns for a GEMM the machine's AMP cannot take (8-bit operands on mk2,
 * bf16): large enough that any plan containing one loses, small enough that a sum of a few
 * thousand of them does not wrap. The compiler must never emit such a run. */
#define SIM_CYCLES_UNSUPPORTED MACHINE_CYCLES_UNSUPPORTED

/* Runs r with its operands already resolved to host pointers (ptr[i] points at the operand's
 * first byte inside the tile's memory image; unused operands are NULL). */
void sim_kernel_run(const low_run *r, uint8_t *const ptr[LOW_MAX_OPERANDS]);

/* Cycles r takes on one tile of machine m, launch cost excluded (the executor adds
 * m->launch_cycles per run); interleaved[i] says whether operand i lies in interleaved memory
 * (loads at interleaved_load_bytes_per_cycle instead of load_bytes_per_cycle). interleaved may be
 * NULL: nothing interleaved (what an estimate that has not placed buffers assumes). */
uint64_t sim_kernel_cycles(const low_run *r, const machine *m, const bool interleaved[LOW_MAX_OPERANDS]);

#endif
