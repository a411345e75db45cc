/* hello.c: the complete program in include/tessel/tessel.h, as it stands there (tests/install/install.test checks they agree). */
#include <stdio.h>
#include <tessel/tessel.h>

int main(void) {
    tessel_error err;
    tessel_model *model = NULL;
    tessel_machine *machine = NULL;
    tessel_package *pkg = NULL;
    tessel_result *run = NULL;
    if (tessel_model_load("zoo:mlp:tokens=64,width=128,hidden=256", NULL, &model, &err) ||
        tessel_machine_load("c600", &machine, &err) ||
        tessel_compile(model, machine, NULL, &pkg, &err) ||
        tessel_run(pkg, NULL, 0, NULL, 0, NULL, &run, &err)) {
        fprintf(stderr, "%s", err.message);
        tessel_model_free(model);
        tessel_machine_free(machine);
        tessel_package_free(pkg);
        return err.status;
    }
    printf("%llu cycles\n", (unsigned long long)tessel_result_cycles(run));
    tessel_result_free(run);
    tessel_package_free(pkg);
    tessel_machine_free(machine);
    tessel_model_free(model);
    return 0;
}
