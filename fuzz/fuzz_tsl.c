/* fuzz_tsl.c: libFuzzer target for the .tsl parser. Any input either fails
 * with a diagnostic or parses; what parses must print to canonical text
 * that parses again and prints identically. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    diag d = {0};
    graph *g = graph_parse("fuzz.tsl", (const char *)data, size, &d);
    if (!g) {
        if (!d.set) __builtin_trap(); /* every failure explains itself */
        return 0;
    }
    char *a = graph_print(g);
    diag d2 = {0};
    graph *h = graph_parse("fuzz.tsl", a, strlen(a), &d2);
    if (!h) __builtin_trap();
    char *b = graph_print(h);
    if (strcmp(a, b) != 0) __builtin_trap();
    free(a);
    free(b);
    graph_free(g);
    graph_free(h);
    return 0;
}
