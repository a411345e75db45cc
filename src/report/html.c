/* html.c: the HTML report (`tessel report PKG -o FILE.html`, `tessel check
 * MODEL --html FILE.html`): one self-contained file, nothing fetched when
 * it opens (its Content-Security-Policy forbids every request).
 *
 * The file is a JSON document of the figures (the same objects the JSON
 * reports print: the run's `report_sim_json`, the compile report, the check
 * summary), the per-tile arrays, the step events in columns, and the
 * package's recipe, followed by the page's own style sheet and script
 * (src/report/html/report.{css,js}, built in as html_assets.c), which draw
 * everything from that document on canvases and in tables: no DOM node per
 * run or fragment, so SigLIP's 34,000 runs and 2 million fragments cost the
 * file only its 1,472-tile arrays and one event per executed step. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/sim_kernels.h"
#include "report.h"

extern const char report_html_css[], report_html_js[], report_chips_js[];

static json_t *u64_array(const uint64_t *v, uint32_t n) {
    json_t *a = json_array();
    for (uint32_t i = 0; i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

/* What tile t does in program step s, in a line: its kernel runs by kind
 * with their cycles (launch included, as the simulator charges them), or
 * the fragments it sends and receives in an exchange phase. */
static char *work_text(const package *pkg, const pkg_xplan *xp, uint32_t s, uint32_t t) {
    const low_step *st = &pkg->prog.steps.v[s];
    const machine *m = &pkg->machine;
    char buf[1024];
    size_t n = 0;
    buf[0] = 0;
    if (st->kind == LOW_STEP_COMPUTE) {
        uint64_t runs[KERNEL_K_COUNT] = {0}, cycles[KERNEL_K_COUNT] = {0};
        for (uint32_t k = st->first; k < st->first + st->count; k++) {
            const kernel_run *r = &pkg->prog.runs.v[k];
            if (r->tile != t) continue;
            bool inter[KERNEL_MAX_OPERANDS] = {0};
            for (int op = 0; op < KERNEL_MAX_OPERANDS; op++)
                inter[op] = kernel_run_uses(r, op) && machine_addr_interleaved(m, r->ptr[op].off);
            runs[r->kernel]++;
            cycles[r->kernel] += m->launch_cycles + kernel_run_cycles(r, m, inter);
        }
        for (int k = 0; k < KERNEL_K_COUNT && n < sizeof buf - 80; k++)
            if (runs[k])
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s x%llu: %llu cycles", n ? "; " : "", kernel_names[k],
                                      (unsigned long long)runs[k], (unsigned long long)cycles[k]);
    } else if (st->kind == LOW_STEP_EXCHANGE && st->first < xp->nphases) {
        const pkg_xphase *ph = &xp->phase[st->first];
        uint64_t ns = 0, bs = 0, nr = 0, br = 0;
        for (uint32_t k = 0; k < ph->nsenders; k++) {
            const pkg_xtile *x = &xp->tiles[ph->senders + k];
            if (x->tile != t) continue;
            ns = x->n;
            for (uint64_t i = x->first; i < x->first + x->n; i++) bs += xp->send[i].bytes;
        }
        for (uint32_t k = 0; k < ph->nreceivers; k++) {
            const pkg_xtile *x = &xp->tiles[ph->receivers + k];
            if (x->tile != t) continue;
            nr = x->n;
            for (uint64_t i = x->first; i < x->first + x->n; i++) br += xp->send[xp->recv[i].send].bytes;
        }
        snprintf(buf, sizeof buf, "sends %llu fragments (%llu B), receives %llu (%llu B)", (unsigned long long)ns,
                 (unsigned long long)bs, (unsigned long long)nr, (unsigned long long)br);
    }
    return xstrdup(buf);
}

/* The steps executed, in columns (a row each would repeat every key), with
 * the busiest tile's work in each: one line per distinct (step, tile). */
static json_t *events_json(const package *pkg, const pkg_xplan *xp, const sim_stats *st) {
    json_t *labels = json_array(), *l = json_array(), *k = json_array(), *s = json_array(), *c = json_array(), *b = json_array(),
           *it = json_array(), *dp = json_array(), *cp = json_array(), *works = json_array(), *w = json_array();
    /* Labels are the package's strings: equal pointers, one entry. */
    const char **seen = xcalloc((size_t)st->nevents + 1, sizeof(char *));
    uint64_t *pairs = xcalloc((size_t)st->nevents + 1, sizeof(uint64_t)); /* step << 32 | tile, per works entry */
    int32_t nseen = 0, npairs = 0;
    for (int64_t i = 0; i < st->nevents; i++) {
        const sim_event *e = &st->events[i];
        int32_t id = 0;
        while (id < nseen && seen[id] != e->label && strcmp(seen[id], e->label) != 0) id++;
        if (id == nseen) {
            seen[nseen++] = e->label;
            json_array_append_new(labels, json_string(e->label));
        }
        uint64_t key = (uint64_t)e->step << 32 | e->busiest_tile;
        int32_t wk = 0;
        while (wk < npairs && pairs[wk] != key) wk++;
        if (wk == npairs) {
            pairs[npairs++] = key;
            char *text = work_text(pkg, xp, e->step, e->busiest_tile);
            json_array_append_new(works, json_string(text));
            free(text);
        }
        json_array_append_new(l, json_integer(id));
        json_array_append_new(k, json_integer(e->kind == LOW_STEP_EXCHANGE));
        json_array_append_new(s, json_integer((json_int_t)e->start));
        json_array_append_new(c, json_integer((json_int_t)e->cycles));
        json_array_append_new(b, json_integer(e->busiest_tile));
        json_array_append_new(it, json_integer(e->depth ? (json_int_t)e->iteration : -1));
        json_array_append_new(dp, json_integer(e->depth));
        json_array_append_new(cp, json_integer((json_int_t)e->copy_cycles));
        json_array_append_new(w, json_integer(wk));
    }
    free(seen);
    free(pairs);
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "labels", labels, "label", l, "exchange", k, "start",
                     s, "cycles", c, "busiest_tile", b, "iteration", it, "depth", dp, "copy_cycles", cp, "works", works, "work", w);
}

/* Per tile: memory, tables, compute; and each tile's memory map as an
 * index into the distinct sets of buffers tiles hold (most tiles of a
 * uniform plan share a few). */
static json_t *tiles_json(const package *pkg, const report_tiles *rt, const sim_stats *st) {
    uint32_t n = rt->tiles;
    json_t *end = json_array(), *code = json_array(), *tab = json_array(), *head = json_array(), *set = json_array(),
           *sets = json_array();
    uint8_t **rows = xcalloc((size_t)n + 1, sizeof(uint8_t *)); /* the first tile of each distinct set */
    uint64_t *hash = xcalloc((size_t)n + 1, sizeof(uint64_t));    /* its FNV-1a hash: compared first */
    int32_t nsets = 0;
    for (uint32_t t = 0; t < n; t++) {
        const report_tile *r = &rt->rows[t];
        json_array_append_new(end, json_integer(r->end));
        json_array_append_new(code, json_integer(r->code));
        json_array_append_new(tab, json_integer(r->tables));
        json_array_append_new(head, json_integer((json_int_t)r->headroom));
        const uint8_t *h = rt->holds + (size_t)t * (size_t)rt->nbufs;
        uint64_t hh = 1469598103934665603ull;
        for (int32_t b = 0; b < rt->nbufs; b++) hh = (hh ^ h[b]) * 1099511628211ull;
        int32_t id = 0;
        while (id < nsets && (hash[id] != hh || memcmp(rows[id], h, (size_t)rt->nbufs) != 0)) id++;
        if (id == nsets) {
            hash[nsets] = hh;
            rows[nsets++] = (uint8_t *)h;
            json_t *bs = json_array();
            for (int32_t b = 0; b < rt->nbufs; b++)
                if (h[b]) json_array_append_new(bs, json_integer(b));
            json_array_append_new(sets, bs);
        }
        json_array_append_new(set, json_integer(id));
    }
    free(rows);
    free(hash);
    json_t *bn = json_array(), *ba = json_array(), *bp = json_array(), *br = json_array(), *bf = json_array(), *bl = json_array();
    for (int32_t b = 0; b < rt->nbufs; b++) {
        const low_buf *lb = &pkg->prog.bufs.v[b];
        json_array_append_new(bn, json_string(pkg->prog.strings.v + lb->label));
        json_array_append_new(ba, json_integer(lb->addr));
        json_array_append_new(bp, json_integer(lb->bytes));
        json_array_append_new(br, json_integer(lb->reserved));
        json_array_append_new(bf, json_integer(lb->first));
        json_array_append_new(bl, json_integer(lb->last));
    }
    json_t *j = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:{s:o, s:o, s:o, s:o, s:o, s:o}}", "end_bytes", end, "code_bytes", code,
                          "table_bytes", tab, "headroom_bytes", head, "set", set, "sets", sets, "buffers", "name", bn, "addr", ba,
                          "payload_bytes", bp, "reserved_bytes", br, "first_step", bf, "last_step", bl);
    if (st->tile_compute) {
        json_object_set_new(j, "compute_cycles", u64_array(st->tile_compute, n));
        json_object_set_new(j, "longest_step_cycles", u64_array(st->tile_longest, n));
        json_object_set_new(j, "longest_step", json_integer(st->longest_step));
    }
    return j;
}

static json_t *machine_json(const machine *m) {
    return json_pack("{s:s, s:i, s:f, s:i, s:i, s:i, s:i, s:i}", "name", m->name, "tiles", (int)m->tiles, "clock_hz", m->clock_hz,
                     "tile_memory_base", (int)m->tile_memory_base, "tile_memory_end", (int)m->tile_memory_end, "loader_limit",
                     (int)m->loader_limit, "interleaved_base", (int)m->interleaved_base, "table_budget_bytes",
                     (int)m->table_budget_bytes);
}

/* The data document the page draws from; NULL with d on failure. */
static json_t *document(const report_html_input *in, diag *d) {
    const package *pkg = in->pkg;
    report_tiles rt;
    if (report_tiles_build(pkg, in->path, &rt, d)) return NULL;
    json_t *meta = pkg->meta ? json_loads(pkg->meta, 0, NULL) : NULL;
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "format", "tessel-html-report", "version", TESSEL_VERSION, "title",
                          in->title, "machine", machine_json(&pkg->machine), "run", report_sim_json(in->sim, &pkg->machine),
                          "events", events_json(pkg, &rt.xp, in->sim), "tiles", tiles_json(pkg, &rt, in->sim));
    json_object_set_new(j, "package", json_pack("{s:s, s:I, s:I, s:I, s:i}", "path", in->path, "steps",
                                                (json_int_t)pkg->prog.steps.n, "runs", (json_int_t)pkg->prog.runs.n, "fragments",
                                                (json_int_t)rt.fragments, "buffers", (int)rt.nbufs));
    json_object_set(j, "meta", meta ? meta : json_null());
    if (in->plan) json_object_set(j, "plan", in->plan);
    if (in->check) json_object_set(j, "check", in->check);
    json_decref(meta);
    report_tiles_free(&rt);
    return j;
}

/* The page: title, style sheet, the data document (doc, taken), script. */
static int write_page(FILE *f, const char *title, json_t *doc, const char *script) {
    /* Escaping '/' keeps "</script>" out of the embedded document. */
    char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS | JSON_ESCAPE_SLASH);
    json_decref(doc);
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
          "script-src 'unsafe-inline'; img-src data:\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>tessel: ",
          f);
    for (const char *c = title; *c; c++) { /* the title as text */
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else fputc(*c, f);
    }
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<script id=\"data\" type=\"application/json\">%s</script>\n"
               "<script>\n%s</script>\n</body>\n</html>\n",
            report_html_css, text, script);
    free(text);
    return ferror(f) ? -1 : 0;
}

int report_html_write(FILE *f, const report_html_input *in, diag *d) {
    json_t *doc = document(in, d);
    if (!doc) return -1;
    return write_page(f, in->title, doc, report_html_js);
}

int report_chips_html_write(FILE *f, const char *title, const machine *m, const char *plan_words, struct json_t *check) {
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:i, s:f}, s:O}", "format", "tessel-chips-html", "version",
                            TESSEL_VERSION, "title", title, "plan_words", plan_words, "machine", "name", m->name, "chips",
                            (int)m->chips, "clock_hz", m->clock_hz, "check", check);
    return write_page(f, title, doc, report_chips_js);
}
