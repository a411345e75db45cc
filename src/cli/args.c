/* args.c: option parsing and the conventions every command shares. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../models/models.h"
#include "cli.h"

void cli_help(const cmd *c, FILE *f) {
    fprintf(f, "usage: tessel %s %s\n\n%s\n", c->name, c->usage, c->summary);
    if (c->opts[0].name) fprintf(f, "\noptions:\n");
    for (const opt_spec *o = c->opts; o->name; o++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-28s %s\n", lhs, o->help);
    }
    fprintf(f, "  %-28s %s\n", "--help", "show this help");
}

static int usage_error(const cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const cmd *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tessel %s: error: ", c->name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'tessel %s --help')\n", c->name);
    va_end(ap);
    return EXIT_USER;
}

int cli_parse(const cmd *c, int argc, char **argv, int npos_min, int npos_max, parsed *p) {
    memset(p, 0, sizeof *p);
    int nopts = 0;
    while (c->opts[nopts].name) nopts++;
    TS_ASSERT(nopts <= MAX_OPTS); /* parsed holds values for that many */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            p->help = true;
            return 0;
        }
        if (a[0] == '-' && a[1]) {
            const char *eq = strchr(a, '=');
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            int k = 0;
            for (; c->opts[k].name; k++)
                if (strlen(c->opts[k].name) == n && strncmp(c->opts[k].name, a, n) == 0) break;
            const opt_spec *o = &c->opts[k];
            if (!o->name) return usage_error(c, "unknown option '%.*s'", (int)n, a);
            const char *v = NULL;
            if (o->arg) {
                if (eq) v = eq + 1;
                else if (i + 1 < argc) v = argv[++i];
                else return usage_error(c, "option '%s' needs a value (%s)", o->name, o->arg);
            } else if (eq) {
                return usage_error(c, "option '%s' takes no value", o->name);
            }
            if (p->nval[k] && !o->repeat) return usage_error(c, "option '%s' given twice", o->name);
            if (p->nval[k] == MAX_OPT_VALUES) return usage_error(c, "option '%s' given too often", o->name);
            p->val[k][p->nval[k]++] = v ? v : "";
            continue;
        }
        if (p->npos == (int)TS_COUNT(p->pos) || p->npos == npos_max) return usage_error(c, "unexpected argument '%s'", a);
        p->pos[p->npos++] = a;
    }
    if (p->npos < npos_min) return usage_error(c, "missing %s", c->usage);
    /* Stage lines (loading, lowering, placing) follow the command's --quiet;
     * --json keeps stderr for errors alone. */
    bool quiet = false;
    for (int k = 0; c->opts[k].name; k++)
        quiet |= p->nval[k] && (strcmp(c->opts[k].name, "--quiet") == 0 || strcmp(c->opts[k].name, "--json") == 0);
    progress_quiet(quiet);
    return 0;
}

int cli_opt_index(const cmd *c, const char *name) {
    for (int k = 0; c->opts[k].name; k++)
        if (strcmp(c->opts[k].name, name) == 0) return k;
    TS_UNREACHABLE();
}

const char *cli_opt(const cmd *c, const parsed *p, const char *name) {
    int k = cli_opt_index(c, name);
    return p->nval[k] ? p->val[k][0] : NULL;
}

bool cli_flag(const cmd *c, const parsed *p, const char *name) { return p->nval[cli_opt_index(c, name)] > 0; }

int cli_report(const diag *d) {
    progress_done();
    fflush(stdout);
    fputs(d->text, stderr);
    return d->no_fit ? EXIT_NO_FIT : EXIT_USER;
}

int cli_machine_spec(const cmd *c, const char *what, const char *spec, machine *m, diag *d) {
    char who[64];
    snprintf(who, sizeof who, "tessel %s", c->name);
    return machine_resolve_for(spec, who, what, m, d);
}

/* The --precision given (-1: a value that is none). */
static int precision_of(const cmd *c, const parsed *p, const char **given) {
    *given = NULL;
    for (int k = 0; c->opts[k].name; k++) {
        if (strcmp(c->opts[k].name, "--precision") != 0 || !p->nval[k]) continue;
        const char *v = *given = p->val[k][0];
        return strcmp(v, "fp8") == 0       ? MODELS_FP8
               : strcmp(v, "fp8-all") == 0 ? MODELS_FP8_ALL
               : strcmp(v, "f32") == 0     ? MODELS_F32
               : strcmp(v, "f16") == 0     ? MODELS_F16
                                           : -1;
    }
    return MODELS_F16;
}

models_precision cli_precision(const cmd *c, const parsed *p) {
    const char *v;
    int k = precision_of(c, p, &v);
    return k < 0 ? MODELS_F16 : (models_precision)k;
}

graph *cli_load_model(const cmd *c, const parsed *p, const char *spec, diag *d) {
    const char *v;
    int k = precision_of(c, p, &v);
    if (k < 0)
        return diag_fail(d, "tessel %s: error: option '--precision' must be f16, fp8, fp8-all or f32, not '%s'", c->name, v), NULL;
    models_options o = {.precision = (models_precision)k, .reroll = true, .report = stderr};
    return models_load_opts(spec, &o, d);
}

int cli_machine(const cmd *c, const parsed *p, machine *m, diag *d) {
    const char *spec = cli_opt(c, p, "--machine");
    char what[300];
    snprintf(what, sizeof what, "option '--machine %s'", spec ? spec : "");
    return cli_machine_spec(c, what, spec ? spec : "c600", m, d);
}

int cli_max_host_memory(const cmd *c, const parsed *p, uint64_t *limit, diag *d) {
    const char *v = cli_opt(c, p, "--max-host-memory");
    if (!v) {
        *limit = util_physical_bytes() / 10 * 9; /* leave the host a tenth */
        return 0;
    }
    char *end;
    double x = strtod(v, &end);
    double unit = 1;
    if (!strcmp(end, "K") || !strcmp(end, "KiB")) unit = 1024.0;
    else if (!strcmp(end, "M") || !strcmp(end, "MiB")) unit = 1024.0 * 1024;
    else if (!strcmp(end, "G") || !strcmp(end, "GiB")) unit = 1024.0 * 1024 * 1024;
    else if (*end) unit = -1;
    if (end == v || unit < 0 || !(x > 0) || x * unit > 1e18)
        return diag_fail(d, "tessel %s: error: option '--max-host-memory %s': expected bytes, e.g. 8G, 512M or 1000000", c->name, v);
    *limit = (uint64_t)(x * unit);
    return 0;
}

int cli_load_machine_model(const char *spec, const cmd *c, const parsed *p, graph **g, machine *m, diag *d) {
    if (cli_machine(c, p, m, d)) return -1;
    *g = cli_load_model(c, p, spec, d);
    return *g ? 0 : -1;
}


/* Option `name`'s value into *v when given: a whole number from 0 to max
 * (`what` names it in the message). */
static int count_option(const cmd *c, const parsed *p, const char *name, const char *what, long long max, long long *v,
                        diag *d) {
    const char *text = cli_opt(c, p, name);
    if (!text) return 0;
    char *end = NULL;
    long long n = strtoll(text, &end, 10);
    if (!*text || *end || n < 0 || n > max)
        return diag_fail(d, "tessel %s: error: option '%s': '%s' is not a %s from 0 to %lld", c->name, name, text, what, max);
    *v = n;
    return 0;
}

int cli_plan_options(const cmd *c, const parsed *p, const char *model, bool quiet, compile_options *o, diag *d) {
    long long steps = DRIVER_SEARCH_STEPS, beam = SEARCH_BEAM, micro = 0, replicas = 0;
    if (count_option(c, p, "--search-steps", "count", DRIVER_SEARCH_STEPS_MAX, &steps, d) ||
        count_option(c, p, "--beam", "width", SEARCH_BEAM_MAX, &beam, d) ||
        (cli_opt(c, p, "--micro-batches") && strcmp(cli_opt(c, p, "--micro-batches"), "auto") == 0
             ? (micro = CHIPS_MICRO_AUTO, 0)
             : count_option(c, p, "--micro-batches", "count", 1 << 20, &micro, d)) ||
        (cli_opt(c, p, "--replicas") && strcmp(cli_opt(c, p, "--replicas"), "auto") == 0 ? (replicas = CHIPS_REPLICAS_AUTO, 0)
                                                                                   : count_option(c, p, "--replicas", "count", 64, &replicas, d)))
        return -1;
    if (cli_opt(c, p, "--micro-batches") && micro == 0)
        return diag_fail(d, "tessel %s: error: option '--micro-batches': at least 1", c->name);
    if (cli_opt(c, p, "--replicas") && replicas == 0)
        return diag_fail(d, "tessel %s: error: option '--replicas': at least 1", c->name);
    *o = (compile_options){.model = model, .recipe = cli_opt(c, p, "--recipe"), .search_steps = steps, .beam = (int)beam,
                           .quiet = quiet, .micro_batches = micro, .replicas = (int32_t)replicas};
    return 0;
}
