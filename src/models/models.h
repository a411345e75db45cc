/* models: where graphs come from. A MODEL argument is either a .tsl file or
 * a zoo entry with parameters:
 *
 *   zoo:NAME[:key=value,key=value...]     e.g. zoo:vit:layers=2,width=192
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

#endif
