/* fit.c: when a model does not fit, what would: each option checked by the
 * compiler itself (its start plan compiled through placement, without the
 * parameters' values), never guessed. */
#include <stdlib.h>
#include <string.h>

#include "../models/models.h"
#include "../search/search.h"
#include "cli.h"

/* Whether g fits m: its start plan compiled through placement, as
 * `--search-steps 0` would, without the parameters' values (only their
 * shapes matter); *peak and *room receive the estimate's figures. */
static bool fits(const graph *g, const machine *m, double *peak, double *room) {
    compile_options co = {.model = g->path, .search_steps = 0, .quiet = true, .fit_only = true};
    package pkg;
    compile_info ci;
    diag d = {0};
    bool ok = driver_compile(g, m, &co, &pkg, &ci, &d) == 0;
    *peak = ci.search.est.peak_bytes;
    *room = est_buffer_room(m, ci.search.est.table_bytes_max);
    if (ok) package_free(&pkg);
    compile_info_free(&ci);
    return ok;
}

/* spec with key=value set (replaced, or added), for a zoo spec. */
static char *with_arg(const char *spec, const char *key, const char *value) {
    size_t n = strlen(spec) + strlen(key) + strlen(value) + 4;
    char *out = xmalloc(n), *kv = xmalloc(strlen(key) + 2);
    sprintf(kv, "%s=", key);
    const char *at = strstr(spec, kv);
    bool colon2 = strchr(spec + 4, ':') != NULL; /* "zoo:NAME:..." has arguments already */
    if (at && (at[-1] == ':' || at[-1] == ',')) {
        const char *end = strchr(at, ',');
        snprintf(out, n, "%.*s%s%s%s", (int)(at - spec), spec, kv, value, end ? end : "");
    } else {
        snprintf(out, n, "%s%s%s%s", spec, colon2 ? "," : ":", kv, value);
    }
    free(kv);
    return out;
}

typedef struct trial {
    char what[200];   /* how the user asks for it */
    char *spec;       /* the model to load (malloc'd) */
    models_precision precision;
    const char *machine;  /* a preset, or NULL: the same machine */
} trial;

void cli_fit_suggestions(const char *spec, models_precision precision, const machine *m, diag *d) {
    if (!d->no_fit) return;
    trial t[8];
    int n = 0;
    bool zoo = strncmp(spec, "zoo:", 4) == 0;
    /* 8-bit GEMM operands. */
    if (zoo && !strstr(spec, "precision=fp8")) {
        t[n] = (trial){"", with_arg(spec, "precision", "fp8"), precision, NULL};
        snprintf(t[n].what, sizeof t[n].what, "the model in FP8: %s", t[n].spec);
        n++;
    } else if (!zoo && precision == MODELS_F16) {
        t[n] = (trial){"--precision fp8 (f143 GEMM weights)", xstrdup(spec), MODELS_FP8, NULL};
        n++;
        t[n] = (trial){"--precision fp8-all (f143 GEMM operands)", xstrdup(spec), MODELS_FP8_ALL, NULL};
        n++;
    }
    /* A smaller batch. */
    const char *b = zoo ? strstr(spec, "batch=") : NULL;
    if (b && (b[-1] == ':' || b[-1] == ',') && atoll(b + 6) > 1) {
        char half[32];
        snprintf(half, sizeof half, "%lld", atoll(b + 6) / 2);
        t[n] = (trial){"", with_arg(spec, "batch", half), precision, NULL};
        snprintf(t[n].what, sizeof t[n].what, "half the batch: %s", t[n].spec);
        n++;
    }
    /* The nearest preset with more memory in all (the smallest such). */
    const char *near = NULL;
    double have = (double)m->tiles * machine_tile_bytes(m), best = 0;
    for (int i = 0; machine_preset_name(i); i++) {
        machine pm;
        double total = machine_preset(machine_preset_name(i), &pm) == 0 ? (double)pm.tiles * machine_tile_bytes(&pm) : 0;
        if (total > have && (!near || total < best)) near = machine_preset_name(i), best = total;
    }
    if (near) {
        t[n] = (trial){"", xstrdup(spec), precision, near};
        snprintf(t[n].what, sizeof t[n].what, "--machine %s, the nearest preset with more memory", near);
        n++;
    }
    char lines[1024] = "";
    size_t at = 0;
    int good = 0;
    for (int i = 0; i < n; i++) {
        char what[240];
        snprintf(what, sizeof what, "does it fit with %.200s?", t[i].what);
        progress_stage("fit", what);
        models_options mo = {.precision = t[i].precision, .reroll = true, .report = NULL, .shapes_only = true};
        diag ld = {0};
        graph *g = models_load_opts(t[i].spec, &mo, &ld);
        machine tm = *m;
        if (t[i].machine) machine_preset(t[i].machine, &tm);
        double peak = 0, room = 0;
        if (g && fits(g, &tm, &peak, &room)) {
            char p[32], r[32];
            fmt_bytes(p, sizeof p, peak);
            fmt_bytes(r, sizeof r, room);
            at += (size_t)snprintf(lines + at, at < sizeof lines ? sizeof lines - at : 0,
                                   "  would fit: %s (estimated peak %s of the %s a tile has for buffers)\n", t[i].what, p, r);
            good++;
        }
        graph_free(g);
        free(t[i].spec);
    }
    if (!good && n)
        snprintf(lines, sizeof lines, "  nothing tried fits either (%d option%s checked: %s%s)\n", n, n > 1 ? "s" : "", t[0].what,
                 n > 1 ? ", ..." : "");
    size_t len = strlen(d->text);
    snprintf(d->text + len, sizeof d->text - len, "%s", lines);
}
