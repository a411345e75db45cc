/* search: choosing the plan (docs/search.md).
 *
 *   candidates  per matmul, every distinct (batch, rows, columns, K) grid the
 *               machine's tiles allow, scored alone: the AMP run (machine.h's
 *               formula), operand delivery, and for a K split the partials'
 *               exchange and reduction; parameter operands must be cut into
 *               enough distinct pieces that every parameter fits. The best
 *               SEARCH_ALTERNATIVES stay as the op's alternatives.
 *   greedy      expansion asks for each matmul's grid as it reaches it and
 *               takes the best-scored candidate: the starting plan.
 *   beam        over the matmuls in program order, the o->beam best plans
 *               each extended by every alternative and variant of the next
 *               matmul, priced whole; the best distinct ones go on, and the
 *               best of all starts the local search.
 *   local       one proposal at a time, one matmul's alternative (then one
 *               layer norm's row cut, one elementwise op's layout, one cast
 *               site moved ahead of its copies or back behind them); the whole
 *               program is expanded and priced (src/estimate), and the change
 *               is kept only when the program gets faster and its estimated
 *               peak still fits. A round tries every alternative of one op in
 *               parallel and keeps the best (ties: the earlier alternative),
 *               so the result does not depend on the thread count.
 *   finalists   every accepted plan is a finalist; the caller lowers and
 *               places the best and falls back to earlier ones.
 *   recipes     every choice under the graph op's stable name, as JSON.
 */
#ifndef TESSEL_SEARCH_H
#define TESSEL_SEARCH_H

#include "../estimate/estimate.h"
#include "../mid/mid.h"

enum { SEARCH_ALTERNATIVES = 8, SEARCH_FINALISTS = 4, SEARCH_BEAM = 3, SEARCH_BEAM_MAX = 16, SEARCH_CAST_PROPOSALS = 64 };

typedef struct search_options {
    int64_t steps;           /* local-search proposals at most; 0: expand the plan as given (no beam either) */
    int beam;                /* plans the beam keeps, at most SEARCH_BEAM_MAX (0: no beam) */
    bool quiet;              /* no progress line */
    double room_scale;       /* the part of est_buffer_room a plan's estimated peak may take (0: all of it) */
    bool reserved;           /* judge that peak by est_result.reserved_peak_bytes, not peak_bytes */
    bool reasons;            /* price each matmul's runner-up in the whole program (the report's `why`) */
} search_options;

/* One accepted step: the beam's best plan improving at a matmul, or a local-search step. */
typedef struct search_step {
    int32_t op;              /* the op changed; -1: the start streaming B where that scored better */
    double before, after;    /* predicted cycles */
    bool beam;               /* the beam's step at op, not a local search's */
    int32_t cast;            /* a cast site's step: its ordinal in op's expansion (op is the cast), else -1 */
    bool early;              /* a cast site's step: it moved ahead of its copies (else back behind them) */
} search_step;

/* Per matmul: its choice, predicted cost alone, and the runner-up; per
 * layer norm (parts > 0): the tiles its rows are cut over; per elementwise
 * op not in the rule's layout (ew > 0): the layout it works in. */
typedef struct search_op {
    int32_t op;
    int32_t parts;                     /* a layer norm's row parts, 0 for a matmul */
    int ew;                            /* an elementwise op's layout (mid_ew_layout) + 1, else 0 */
    mid_gemm_plan chosen, runner_up;
    double chosen_score, runner_score; /* cycles of the op alone (candidate score); 0: the choice was no
                                          scored candidate (a recipe's, or a variant of one) */
    double runner_cycles, runner_peak; /* the whole program with the runner-up instead, predicted */
    bool runner_fits, runner_priced;   /* ... its estimated peak within the room; whether it expanded */
    double cycles;                     /* predicted cycles of its prims in the whole program, one execution */
    double exchange_cycles;            /* ... of which their exchange phases */
    bool has_runner;
} search_op;

typedef struct search_result {
    mid_plan finalist[SEARCH_FINALISTS]; /* best first */
    double finalist_cycles[SEARCH_FINALISTS];
    int nfinalists;
    bool finalists_fit;                  /* the best one's estimated peak is within the room */
    est_result est;                      /* of the best finalist */
    VEC(search_step) steps;
    VEC(search_op) ops;
    int64_t proposals, rejected_memory, rejected_slower, evaluations, beam_evaluations;
    int64_t copies_priced, copies_reused;
    double *op_cycles;                   /* per op of the graph planned: its prims' predicted cycles, one
                                            execution (arena; NULL without a best plan) */
    mid_cast_site *sites;                /* the best finalist's cast sites (arena), eligible or not, */
    int32_t nsites;                      /* `early` as it runs them */
    double seconds;
    arena arena;
} search_result;

/* Plans g for m starting from `start` (choices given, e.g. from a recipe;
 * NULL: none), then improves it by the beam and local search (neither when
 * o->steps is 0). */
int search_plan(const graph *g, const machine *m, const mid_plan *start, const search_options *o, search_result *r, diag *d);
void search_result_free(search_result *r);

/* What every op's tile share may take for temporaries, and the distinct
 * pieces a parameter must be cut into so all parameters fit (docs/search.md). */
int64_t search_min_pieces(const graph *g, const machine *m);

/* ---- recipes (recipe.c) ---- */

/* The plan as a recipe: JSON text (caller frees), keyed by op names, with the
 * model's name, every matmul's shape and the machine's fingerprint. */
char *search_recipe_json(const graph *g, const machine *m, const mid_plan *pl);
/* Reads a recipe into pl (initialised for g): refuses one for another model
 * or machine, saying what differs; d names the file. */
int search_recipe_load(const char *path, const graph *g, const machine *m, mid_plan *pl, diag *d);
/* The same from text already read; path names it in messages. */
int search_recipe_parse(const char *text, size_t len, const char *path, const graph *g, const machine *m, mid_plan *pl,
                        diag *d);

#endif
