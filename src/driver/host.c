/* host.c: tensors crossing the host boundary (the command line's .npy files,
 * the library's caller memory): a graph's or a package's inputs and
 * outputs, and the one rule for what data an input accepts. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

int64_t host_numel(const host_spec *s) {
    int64_t n = 1;
    for (int a = 0; a < s->rank; a++) n *= s->dim[a];
    return n;
}

host_spec *driver_graph_specs(const graph *g, bool outputs, int32_t *n) {
    *n = outputs ? graph_outputs(g, NULL, 0) : graph_inputs(g, NULL, 0);
    int32_t *ids = xcalloc((size_t)*n + 1, sizeof(int32_t));
    if (outputs) graph_outputs(g, ids, *n);
    else graph_inputs(g, ids, *n);
    host_spec *s = xcalloc((size_t)*n + 1, sizeof(host_spec));
    for (int32_t i = 0; i < *n; i++) {
        const graph_value *v = graph_val(g, ids[i]);
        s[i] = (host_spec){.name = v->name, .dtype = v->type.dtype, .scale = v->type.scale, .rank = v->type.rank,
                           .declared = !outputs && g->declared ? g->declared[i] : v->type.dtype};
        memcpy(s[i].dim, v->type.dim, sizeof s[i].dim);
    }
    free(ids);
    return s;
}

/* A binding as a host tensor; an input's declared dtype from the package's
 * metadata (declared_inputs: an imported model's f32 input compiled at
 * f16), else its own. */
static host_spec binding_spec(const pkg_binding *b, json_t *declared) {
    host_spec s = {.name = b->name, .dtype = b->dtype, .declared = b->dtype, .scale = b->scale, .rank = b->layout.rank};
    for (int a = 0; a < b->layout.rank; a++) s.dim[a] = b->layout.dim[a];
    const char *dn = json_string_value(json_object_get(declared, b->name));
    dtype dt;
    if (dn && dtype_parse(dn, strlen(dn), &dt)) s.declared = dt;
    return s;
}

void driver_package_specs(const package *p, host_spec **ins, int32_t *nin, host_spec **outs, int32_t *nout) {
    *ins = xcalloc((size_t)p->bindings.n + 1, sizeof(host_spec));
    *outs = xcalloc((size_t)p->bindings.n + 1, sizeof(host_spec));
    *nin = *nout = 0;
    json_t *meta = json_loads(p->meta ? p->meta : "{}", 0, NULL), *declared = json_object_get(meta, "declared_inputs");
    for (int32_t i = 0; i < p->bindings.n; i++) {
        const pkg_binding *b = &p->bindings.v[i];
        if (b->role == PKG_OUTPUT) (*outs)[(*nout)++] = binding_spec(b, NULL);
        else if (b->role == PKG_INPUT) (*ins)[(*nin)++] = binding_spec(b, declared);
    }
    json_decref(meta);
}

int32_t host_find(const host_spec *s, int32_t n, const char *name) {
    for (int32_t j = 0; name && j < n; j++)
        if (strcmp(s[j].name, name) == 0) return j;
    return -1;
}

void host_names(const host_spec *s, int32_t n, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", n ? "" : "none");
    for (int32_t t = 0; t < n; t++) {
        strncat(buf, t ? ", " : "", cap - strlen(buf) - 1);
        strncat(buf, s[t].name, cap - strlen(buf) - 1);
    }
}

int host_seed_missing(const host_spec *s, int32_t n, float **data, const char *who, diag *d) {
    for (int32_t j = 0; j < n; j++) {
        if (data[j]) continue;
        int64_t numel = host_numel(&s[j]);
        char shape[128];
        fmt_dims(shape, sizeof shape, s[j].rank, s[j].dim);
        data[j] = util_try_malloc((size_t)(numel ? numel : 1), sizeof(float), d, "%s: error: input '%s' (%s%s)", who, s[j].name,
                                  dtype_name(s[j].dtype), shape);
        if (!data[j]) return -1;
        graph_default_input_fill(j, s[j].dtype, s[j].scale, data[j], numel);
    }
    return 0;
}

host_entry driver_host_entry(const host_spec *s, dtype given, bool wide, bool wide_exact) {
    bool exact = (given == s->dtype || ((given == DT_F16 || given == DT_BF16) && s->dtype == DT_F32)) && (!wide || wide_exact);
    if (exact) return given == s->dtype && !wide ? HOST_AS_IS : HOST_WIDENED;
    if (s->declared != s->dtype && given == s->declared && !wide) return HOST_DECLARED;
    return HOST_LOSSY;
}
