/* models: where graphs come from. A MODEL argument is either a .tsl file or
 * a zoo entry with parameters:
 *
 *   zoo:NAME[:key=value,key=value...]     e.g. zoo:vit:layers=2,width=192
 *   FILE.onnx                             a model exported by torch.onnx.export
 *
 *   mlp        tokens, width, hidden, precision (f16 | fp8)
 *   qk         heads, queries, keys, channels, qk (f16 | fp8), pv (f16 | fp8)
 *   vit        image, patch, width, heads, mlp, layers, batch, precision
 *   train-mlp  tokens, width, hidden, optimizer (sgd | adamw), clip (none | global_norm)
 *
 * `tessel zoo` lists every parameter with its default.
 */
#ifndef TESSEL_MODELS_H
#define TESSEL_MODELS_H

#include "../graph/graph.h"

/* A verified graph from a .tsl path or a "zoo:" spec; NULL with d set. */
graph *models_load(const char *spec, diag *d);
graph *models_zoo_build(const char *spec, diag *d);
/* Human-readable list of zoo models and their parameters. */
void models_zoo_list(FILE *f);

/* How an imported model is typed (zoo models take precision= in their spec). */
/* fp8: f143 GEMM weights except the attention-score projections and the
 * first and last GEMM (docs/onnx.md); fp8-all: every GEMM weight f143. */
typedef enum { MODELS_F16, MODELS_FP8, MODELS_F32, MODELS_FP8_ALL } models_precision;

typedef struct models_options {
    models_precision precision;  /* imported models: f16 unless told */
    bool reroll;                 /* imported models: reroll repeated blocks into one repeat (default on) */
    FILE *report;                /* the import report (NULL: none) */
    bool shapes_only;            /* zoo models, for a fit check (shapes and dtypes, not values): FP8 weights keep
                                    scale 0 rather than have every value generated to choose theirs */
    bool fp8_unmeasured;         /* imported fp8: keep every weight the rules allow, without running the model to
                                    measure what that costs (reroll.c; the ONNX fuzzer, which tests the importer) */
} models_options;

/* models_load with options for imported models. */
graph *models_load_opts(const char *spec, const models_options *o, diag *d);

/* ---- onnx.c: the ONNX reader ---------------------------------------------- */

/* What data() parameters of an imported graph point into. */
typedef struct models_keep models_keep;
void models_keep_free(void *keep);
/* The flat f32 graph of an ONNX file (memory-mapped; external data resolved
 * next to it). Decomposed GeLU and layer norms are raised, shape chains
 * folded, convolutions become their taps and GEMMs (onnx_conv.c). */
graph *models_onnx_import(const char *path, FILE *report, diag *d);
/* The same from a buffer the caller keeps alive (keep receives any maps). */
graph *models_onnx_import_buffer(const char *path, const uint8_t *data, size_t len, models_keep *keep, FILE *report,
                                 diag *d);
models_keep *models_keep_new(void);

/* ---- reroll.c: raising imported graphs ----------------------------------------- */

/* Rebuilds the flat f32 graph g: consecutive identical blocks become one
 * repeat with stacked parameters (if o->reroll), and values take o's precision
 * (f16 activations and parameters; fp8: GEMM weights in f143 with per-tensor
 * power-of-two scales, activation casts before them). Takes g (and its keep). */
graph *models_raise(graph *g, const models_options *o, diag *d);

#endif
