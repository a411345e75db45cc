/* fuzz_recipe.c: libFuzzer target: a recipe is untrusted input. Parsed for a
 * small ViT on the `tiny` machine, arbitrary bytes must never crash: they are
 * refused with a message naming the file, or give choices every one of which
 * the op can build. Such a plan is then completed and expanded (the search
 * with no steps, as `--search-steps 0` does), and its recipe reads back to the
 * very same plan. */
#include "machine/machine.h"
#include "models/models.h"
#include "search/search.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static graph *model;
static machine mach;

static bool same_choices(const mid_plan *a, const mid_plan *b) {
    for (int32_t i = 0; i < a->nops; i++)
        if (a->has[i] != b->has[i] || (a->has[i] && !mid_gemm_plan_equal(&a->gemm[i], &b->gemm[i]))) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    diag d = {0};
    if (!model) {
        model = models_load("zoo:vit:layers=1,width=64,heads=2,mlp=128,image=32,patch=8", &d);
        TS_ASSERT(model && machine_preset("tiny", &mach) == 0);
    }
    mid_plan pl;
    mid_plan_init(&pl, model);
    if (search_recipe_parse((const char *)data, size, "fuzz.json", model, &mach, &pl, &d) != 0) {
        TS_ASSERT(d.set && strncmp(d.text, "fuzz.json", 9) == 0);
        mid_plan_free(&pl);
        return 0;
    }
    for (int32_t i = 0; i < pl.nops; i++) {
        if (!pl.has[i]) continue;
        mid_gemm_site s;
        mid_gemm_site_of(model, i, &s);
        TS_ASSERT(mid_gemm_plan_valid(&mach, &s, &pl.gemm[i], NULL, 0));
    }
    search_options o = {.steps = 0, .quiet = true};
    search_result r;
    if (search_plan(model, &mach, &pl, &o, &r, &d) == 0) {
        TS_ASSERT(r.nfinalists == 1);
        for (int32_t i = 0; i < pl.nops; i++) /* the recipe's choices are the plan's */
            TS_ASSERT(!pl.has[i] || mid_gemm_plan_equal(&pl.gemm[i], &r.finalist[0].gemm[i]));
        char *j = search_recipe_json(model, &mach, &r.finalist[0]);
        mid_plan back;
        mid_plan_init(&back, model);
        TS_ASSERT(search_recipe_parse(j, strlen(j), "again.json", model, &mach, &back, &d) == 0);
        TS_ASSERT(same_choices(&back, &r.finalist[0]));
        mid_plan_free(&back);
        free(j);
    } else {
        TS_ASSERT(d.set);
    }
    search_result_free(&r);
    mid_plan_free(&pl);
    return 0;
}
