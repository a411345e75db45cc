/* api_job.c: the allocation-failure sweep's library job (scripts/alloc_sweep.py,
 * job "api"): through the public header alone, a model from a .tsl file, a
 * machine from JSON, compile, run, save the package and write the HTML
 * report. A failed call prints the library's message and exits 2; host
 * memory running out where the library has no error path reaches the
 * handler, which does the same. Each call writes its file whole or not at
 * all; the job, like any program writing two files, removes the one it
 * wrote when a later call fails.
 *   api_job MODEL.tsl MACHINE.json OUT_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tessel/tessel.h>

static const char *written; /* the file written so far, if any */

static void out_of_memory(size_t bytes) {
    if (written) unlink(written);
    fprintf(stderr, "api_job: error: out of host memory (allocating %zu bytes)\n", bytes);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: api_job MODEL.tsl MACHINE.json OUT_DIR\n");
        return 2;
    }
    tessel_set_oom_handler(out_of_memory);
    tessel_error err = {0};
    tessel_model *model = NULL;
    tessel_machine *machine = NULL;
    tessel_package *pkg = NULL;
    tessel_result *run = NULL;
    char pkg_path[4096], html_path[4096];
    snprintf(pkg_path, sizeof pkg_path, "%s/mlp.tpk", argv[3]);
    snprintf(html_path, sizeof html_path, "%s/report.html", argv[3]);
    tessel_compile_options o;
    tessel_compile_options_init(&o);
    o.search_steps = 8;
    o.report = 1;
    int rc = tessel_model_load(argv[1], NULL, &model, &err) || tessel_machine_load(argv[2], &machine, &err) ||
             tessel_compile(model, machine, &o, &pkg, &err) || tessel_run(pkg, NULL, 0, NULL, 0, NULL, &run, &err) ||
             tessel_package_save(pkg, pkg_path, &err) || ((written = pkg_path), 0) ||
             tessel_report_html(pkg, NULL, 0, NULL, html_path, &err);
    if (rc && written) unlink(written);
    if (rc) fprintf(stderr, "%s", err.message);
    else printf("%llu cycles\n", (unsigned long long)tessel_result_cycles(run));
    tessel_result_free(run);
    tessel_package_free(pkg);
    tessel_machine_free(machine);
    tessel_model_free(model);
    return rc ? 2 : 0;
}
