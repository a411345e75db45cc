/* fuzz_mid.c: libFuzzer target for the mid text parser and verifier. Any
 * input either fails with a diagnostic or parses; what parses is verified
 * (pass or fail, never a crash) and must print to text that parses again
 * and prints identically (print is a fixed point). The machine is tiny, as
 * in the seed corpus (fuzz/corpus/mid: printed zoo programs). */
#include <stdlib.h>
#include <string.h>

#include "mid/mid.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static machine m;
    static bool ready;
    if (!ready) {
        if (machine_preset("tiny", &m)) __builtin_trap();
        ready = true;
    }
    diag d = {0};
    graph *g;
    mid_program p;
    if (mid_parse((const char *)data, size, "fuzz.mid", &m, &g, &p, &d)) {
        if (!d.set) __builtin_trap(); /* every failure explains itself */
        return 0;
    }
    diag vd = {0};
    if (mid_verify(&p, &vd) && !vd.set) __builtin_trap();
    size_t na, nb;
    char *a = mid_print_text(&p, &na);
    graph *h;
    mid_program q;
    diag d2 = {0};
    if (mid_parse(a, na, "fuzz.mid", &m, &h, &q, &d2)) __builtin_trap(); /* what prints must parse */
    char *b = mid_print_text(&q, &nb);
    if (na != nb || memcmp(a, b, na) != 0) __builtin_trap();
    free(a);
    free(b);
    mid_free(&q);
    graph_free(h);
    mid_free(&p);
    graph_free(g);
    return 0;
}
