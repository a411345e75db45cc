/* fuzz_onnx.c: libFuzzer target: the ONNX reader (wire scan, protobuf-c,
 * constant folding, raising, block folding) on arbitrary bytes must never
 * read out of bounds or abort: it fails with a message or returns a graph
 * that verifies. External data is looked up in a folder that does not exist. */
#include "models/models.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    diag d = {0};
    models_keep *keep = models_keep_new();
    graph *g = models_onnx_import_buffer("/nonexistent/fuzz.onnx", data, size, keep, NULL, &d);
    if (!g) {
        TS_ASSERT(d.set);
        models_keep_free(keep);
        return 0;
    }
    g->keep = keep;
    g->keep_free = models_keep_free;
    models_options o = {.precision = MODELS_FP8, .reroll = true, .fp8_unmeasured = true};
    g = models_raise(g, &o, &d);
    TS_ASSERT(g || d.set);
    if (g) {
        diag vd = {0};
        TS_ASSERT(graph_verify(g, &vd) == 0);
        graph_free(g);
    }
    return 0;
}
