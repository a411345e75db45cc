/* kern.c: the op tables kern.h declares, from its lists. */
#include "kern.h"

const char *const kernel_ew_names[KERNEL_EW_COUNT] = {
#define X(id, name, arity, cls) [KERNEL_EW_##id] = #name,
    KERNEL_EW_OPS(X)
#undef X
};

const int kernel_ew_arity[KERNEL_EW_COUNT] = {
#define X(id, name, arity, cls) [KERNEL_EW_##id] = arity,
    KERNEL_EW_OPS(X)
#undef X
};

const machine_ew_class kernel_ew_class[KERNEL_EW_COUNT] = {
#define X(id, name, arity, cls) [KERNEL_EW_##id] = cls,
    KERNEL_EW_OPS(X)
#undef X
};

const char *const kernel_epi_names[KERNEL_EPI_COUNT] = {
#define X(id, name) [KERNEL_EPI_##id] = #name,
    KERNEL_EPI_OPS(X)
#undef X
};
