/* inspect.c: what a package puts where (`tessel inspect`). Per tile the memory its buffers
 * reach, its code and exchange-table bytes and its headroom below the loader
 * limit, their distribution over the tiles, the tiles with the least
 * headroom first, and one tile's memory map: every buffer with its address,
 * payload, reservation and live steps. Which tile holds which buffer the
 * package says (section BTIL, written by placement from the program's runs,
 * fragments, parameter data and host bindings).
 * Table bytes are the encoded tables' own sizes. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

typedef struct view {
    const package *p;
    uint8_t *holds;       /* [tile][buffer]: the buffer has bytes on the tile */
    int32_t nbufs;
} view;

static const low_buf *vb(const view *v, int32_t b) { return &v->p->prog.bufs.v[b]; }

/* Buffers v[0, n) of p by address, stably (buffers at one address keep
 * their order): an insertion sort, as C11's qsort takes no context. */
static void sort_by_addr(const package *p, int32_t *v, int32_t n) {
    for (int32_t i = 1; i < n; i++)
        for (int32_t k = i; k > 0 && p->prog.bufs.v[v[k - 1]].addr > p->prog.bufs.v[v[k]].addr; k--) {
            int32_t t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
}

/* Which tile holds which buffer: the package says (section BTIL, the tiles
 * where a run reads or writes it, a fragment leaves or lands in it, its
 * parameter data or a host binding sits); a buffer that reserves nothing
 * holds no bytes anywhere. */
static void index_tiles(view *v) {
    uint32_t tiles = v->p->machine.tiles;
    v->holds = xcalloc((size_t)tiles * (size_t)(v->nbufs + 1), 1);
    for (uint32_t t = 0; t < tiles; t++)
        for (int32_t b = 0; b < v->nbufs; b++)
            v->holds[(size_t)t * (size_t)v->nbufs + (size_t)b] = vb(v, b)->reserved && package_buf_on_tile(v->p, b, t);
}

static int cmp_headroom(const void *a, const void *b) {
    const report_tile *x = a, *y = b;
    if (x->headroom != y->headroom) return x->headroom < y->headroom ? -1 : 1;
    return x->tile < y->tile ? -1 : x->tile > y->tile;
}

static int cmp_u32v(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* min, median, max of one column over the tiles */
static void spread(const report_tile *rows, uint32_t n, size_t field, uint32_t out[3]) {
    uint32_t *v = xmalloc(sizeof(uint32_t) * n);
    for (uint32_t i = 0; i < n; i++) memcpy(&v[i], (const char *)&rows[i] + field, sizeof(uint32_t));
    qsort(v, n, sizeof(uint32_t), cmp_u32v);
    out[0] = v[0], out[1] = v[n / 2], out[2] = v[n - 1];
    free(v);
}

static void print_bytes_row(const char *what, const uint32_t s[3]) {
    char a[32], b[32], c[32];
    fmt_bytes(a, sizeof a, s[0]);
    fmt_bytes(b, sizeof b, s[1]);
    fmt_bytes(c, sizeof c, s[2]);
    printf("  %-22s %12s %12s %12s\n", what, a, b, c);
}

int report_tiles_build(const package *pkg, const char *path, report_tiles *out, diag *d) {
    memset(out, 0, sizeof *out);
    const machine *m = &pkg->machine;
    pkg_xplan xp;
    if (pkg_xplan_build(pkg, path, &xp, d)) return -1;
    for (uint32_t k = 0; k < xp.nphases; k++) out->fragments += xp.phase[k].nsend;
    view v = {.p = pkg, .nbufs = pkg->prog.bufs.n};
    index_tiles(&v);
    out->xp = xp;
    uint32_t tiles = m->tiles, *code = xmalloc(sizeof(uint32_t) * tiles);
    place_code_bytes(&pkg->prog, m, code);
    out->tiles = tiles;
    out->nbufs = v.nbufs;
    out->holds = v.holds;
    out->rows = xmalloc(sizeof(report_tile) * tiles);
    for (uint32_t t = 0; t < tiles; t++) {
        uint32_t tables = pkg->tables.at ? (uint32_t)(pkg->tables.at[t + 1] - pkg->tables.at[t]) : 0;
        uint64_t end = m->tile_memory_base + code[t] + tables;
        for (int32_t b = 0; b < v.nbufs; b++)
            if (report_tile_holds(out, t, b) && vb(&v, b)->addr + (uint64_t)vb(&v, b)->reserved > end)
                end = vb(&v, b)->addr + (uint64_t)vb(&v, b)->reserved;
        out->rows[t] = (report_tile){t, (uint32_t)(end - m->tile_memory_base), code[t], tables, (int64_t)m->loader_limit - (int64_t)end};
    }
    free(code);
    return 0;
}

void report_tiles_free(report_tiles *r) {
    pkg_xplan_free(&r->xp);
    free(r->holds);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

int report_inspect(FILE *f, const package *pkg, const char *path, int64_t want_tile, bool json, diag *d) {
    const machine *m = &pkg->machine;
    report_tiles rt;
    if (report_tiles_build(pkg, path, &rt, d)) return -1;
    uint32_t tiles = rt.tiles;
    uint64_t frags = rt.fragments;
    const report_tile *rows = rt.rows;
    view v = {.p = pkg, .nbufs = rt.nbufs, .holds = rt.holds};
    uint32_t s_end[3], s_code[3], s_tab[3];
    spread(rows, tiles, offsetof(report_tile, end), s_end);
    spread(rows, tiles, offsetof(report_tile, code), s_code);
    spread(rows, tiles, offsetof(report_tile, tables), s_tab);
    report_tile *sorted = xmalloc(sizeof(report_tile) * tiles);
    memcpy(sorted, rows, sizeof(report_tile) * tiles);
    qsort(sorted, tiles, sizeof(report_tile), cmp_headroom);
    uint32_t shown = want_tile >= 0 ? (uint32_t)want_tile : sorted[0].tile;
    /* that tile's buffers, by address */
    int32_t *map = xmalloc(sizeof(int32_t) * (size_t)(v.nbufs + 1)), nmap = 0;
    for (int32_t b = 0; b < v.nbufs; b++)
        if (report_tile_holds(&rt, shown, b)) map[nmap++] = b;
    sort_by_addr(pkg, map, nmap);
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:i}", "package", path, "machine", m->name, "steps",
                              (json_int_t)pkg->prog.steps.n, "runs", (json_int_t)pkg->prog.runs.n, "fragments",
                              (json_int_t)frags, "buffers", (int)v.nbufs);
        json_t *jt = json_array(), *jm = json_array();
        for (uint32_t t = 0; t < tiles; t++)
            json_array_append_new(jt, json_pack("{s:i, s:i, s:i, s:i, s:I}", "tile", (int)rows[t].tile, "end_bytes",
                                                (int)rows[t].end, "code_bytes", (int)rows[t].code, "table_bytes",
                                                (int)rows[t].tables, "headroom_bytes", (json_int_t)rows[t].headroom));
        for (int32_t k = 0; k < nmap; k++) {
            const low_buf *b = vb(&v, map[k]);
            json_array_append_new(jm, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "buffer", pkg->prog.strings.v + b->label,
                                                "addr", (int)b->addr, "payload_bytes", (int)b->bytes, "reserved_bytes",
                                                (int)b->reserved, "first_step", (int)b->first, "last_step", (int)b->last));
        }
        json_object_set_new(j, "tiles", jt);
        json_object_set_new(j, "memory_map", json_pack("{s:i, s:o}", "tile", (int)shown, "buffers", jm));
        json_object_set_new(j, "least_headroom_tile", json_integer(sorted[0].tile));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        fprintf(f, "%s\n", s);
        free(s);
        json_decref(j);
    } else {
        char blob[32];
        fmt_bytes(blob, sizeof blob, (double)pkg->blob_bytes);
        fprintf(f, "package %s for %s: %d steps, %d kernel runs, %lld exchange fragments (repeat bodies once), %d buffers, %s of "
               "initial data\n",
               path, m->name, (int)pkg->prog.steps.n, (int)pkg->prog.runs.n, (long long)frags, (int)v.nbufs, blob);
        fprintf(f, "  %-22s %12s %12s %12s\n", "per tile", "min", "median", "max");
        print_bytes_row("memory reached", s_end);
        print_bytes_row("code and descriptors", s_code);
        print_bytes_row("exchange tables", s_tab);
        fprintf(f, "tiles with the least headroom below the loader limit (0x%x):\n", m->loader_limit);
        for (uint32_t k = 0; k < 5 && k < tiles; k++) {
            char e[32], h[32], cd[32], tb[32];
            fmt_bytes(e, sizeof e, sorted[k].end);
            fmt_bytes(h, sizeof h, (double)sorted[k].headroom);
            fmt_bytes(cd, sizeof cd, sorted[k].code);
            fmt_bytes(tb, sizeof tb, sorted[k].tables);
            fprintf(f, "  tile %-5u %10s reached, %10s free; code %s, tables %s\n", sorted[k].tile, e, h, cd, tb);
        }
        fprintf(f, "memory map of tile %u%s:\n", shown, want_tile >= 0 ? "" : " (--tile N for another)");
        fprintf(f, "  %-10s %10s %10s %-11s %s\n", "address", "reserved", "payload", "live steps", "buffer");
        char sup[32];
        fmt_bytes(sup, sizeof sup, rows[shown].code + rows[shown].tables);
        fprintf(f, "  0x%-8x %10s %10s %-11s %s\n", m->tile_memory_base, sup, "-", "all", "code, descriptors and exchange tables");
        for (int32_t k = 0; k < nmap; k++) {
            const low_buf *b = vb(&v, map[k]);
            char r[32], pl[32], live[32];
            fmt_bytes(r, sizeof r, b->reserved);
            fmt_bytes(pl, sizeof pl, b->bytes);
            snprintf(live, sizeof live, "%d..%d", (int)b->first, (int)b->last);
            fprintf(f, "  0x%-8x %10s %10s %-11s %s%s\n", b->addr, r, pl, live, pkg->prog.strings.v + b->label,
                   b->addr >= m->interleaved_base ? "  (interleaved)" : "");
        }
    }
    report_tiles_free(&rt);
    free(sorted);
    free(map);
    return 0;
}
