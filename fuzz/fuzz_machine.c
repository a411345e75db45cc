/* fuzz_machine.c: libFuzzer target: a machine file is untrusted input.
 * machine_from_json on arbitrary bytes must never crash; it refuses with a
 * message naming the file, or gives a machine whose JSON reads back to an
 * equal machine (with the same fingerprint), valid or refused alike. */
#include "machine/machine.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    machine m, back;
    diag d = {0};
    if (machine_from_json((const char *)data, size, "fuzz.json", &m, &d) != 0) {
        TS_ASSERT(d.set && strncmp(d.text, "fuzz.json", 9) == 0);
        return 0;
    }
    diag v = {0};
    bool valid = machine_validate(&m, &v) == 0;
    char *j = machine_to_json(&m);
    TS_ASSERT(machine_from_json(j, strlen(j), "again.json", &back, &d) == 0);
    TS_ASSERT(machine_equal(&m, &back) && machine_fingerprint(&m) == machine_fingerprint(&back));
    TS_ASSERT(valid == (machine_validate(&back, &v) == 0));
    free(j);
    return 0;
}
