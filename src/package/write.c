/* write.c: a package to bytes: the header, then every section in its fixed
 * order, records through the one codec; the same package gives the same bytes. */
#include "format.h"

#include <stdlib.h>
#include <string.h>

/* What one image is made of: per section the records (or raw bytes). */
typedef struct image_parts {
    const void *data[SEC_COUNT];
    uint64_t n[SEC_COUNT];  /* records, or bytes for raw sections */
    char *machine_json;     /* malloc'd */
    pkg_out enc[SEC_COUNT]; /* the variable-length record sections, encoded (records.c) */
    char *strings;          /* malloc'd: the program's labels, then binding names not among them */
    strmap offsets;         /* each string of `strings` -> offset of its first occurrence */
} image_parts;

/* The string table: the program's own, then each binding name that is not
 * already a string of it. Names already present reuse their offset, so a
 * loaded package (whose table holds the names) writes back the same bytes. */
static void gather_strings(const package *p, image_parts *w) {
    const char *t = p->prog.strings.v;
    size_t n = (size_t)p->prog.strings.n, cap = n;
    TS_ASSERT(n == 0 || t[n - 1] == 0);
    for (int32_t i = 0; i < p->bindings.n; i++) {
        TS_ASSERT(p->bindings.v[i].name);
        cap += strlen(p->bindings.v[i].name) + 1;
    }
    w->strings = xmalloc(cap + 1);
    if (n) memcpy(w->strings, t, n);
    for (size_t at = 0; at < n; at += strlen(t + at) + 1)
        if (!strmap_get(&w->offsets, t + at, NULL)) strmap_put(&w->offsets, t + at, (int32_t)at);
    size_t len = n;
    for (int32_t i = 0; i < p->bindings.n; i++) {
        const char *name = p->bindings.v[i].name;
        if (strmap_get(&w->offsets, name, NULL)) continue;
        size_t k = strlen(name) + 1;
        memcpy(w->strings + len, name, k);
        strmap_put(&w->offsets, name, (int32_t)len);
        len += k;
    }
    TS_ASSERT(len <= INT32_MAX);  /* offsets are u32 in the file, int32 in the map */
    w->data[SEC_STRINGS] = w->strings;
    w->n[SEC_STRINGS] = len;
}

static void gather(const package *p, image_parts *w) {
    memset(w, 0, sizeof *w);
    w->machine_json = machine_to_json(&p->machine);
    const char *meta = p->meta ? p->meta : "";
#define PART(s, ptr, count) (w->data[s] = (ptr), w->n[s] = (uint64_t)(count))
    PART(SEC_MACHINE, w->machine_json, strlen(w->machine_json));
    gather_strings(p, w);
    pkg_steps_encode(&w->enc[SEC_STEPS], &p->prog);
    pkg_runs_encode(&w->enc[SEC_RUNS], &p->prog);
    PART(SEC_STEPS, w->enc[SEC_STEPS].v, w->enc[SEC_STEPS].n);
    PART(SEC_RUNS, w->enc[SEC_RUNS].v, w->enc[SEC_RUNS].n);
    pkg_groups_encode(&w->enc[SEC_GROUPS], &p->tables);
    pkg_tables_encode(&w->enc[SEC_TABLES], &p->tables, p->machine.tiles);
    PART(SEC_GROUPS, w->enc[SEC_GROUPS].v, w->enc[SEC_GROUPS].n);
    PART(SEC_TABLES, w->enc[SEC_TABLES].v, w->enc[SEC_TABLES].n);
    PART(SEC_BUFS, p->prog.bufs.v, p->prog.bufs.n);
    pkg_buf_tiles_encode(&w->enc[SEC_BUFTILES], p);
    PART(SEC_BUFTILES, w->enc[SEC_BUFTILES].v, w->enc[SEC_BUFTILES].n);
    PART(SEC_SEGMENTS, p->segments.v, p->segments.n);
    PART(SEC_BLOB, p->blob, p->blob_bytes);
    PART(SEC_BINDINGS, p->bindings.v, p->bindings.n);
    PART(SEC_META, meta, strlen(meta));
#undef PART
}

static void release(image_parts *w) {
    free(w->machine_json);
    for (int s = 0; s < SEC_COUNT; s++) free(w->enc[s].v);
    free(w->strings);
    strmap_free(&w->offsets);
}

static uint64_t payload_bytes(const image_parts *w, int s) {
    const pkg_record *rec = pkg_sections[s].rec;
    return rec ? w->n[s] * pkg_record_file_bytes(rec) : w->n[s];
}

static uint8_t *put(uint8_t *at, uint64_t v, int bytes) {
    pkg_put_le(at, v, bytes);
    return at + bytes;
}

/* Where an image's bytes go, in order: memory (package_image) or a file
 * (package_write, which never holds the whole image: a SigLIP package is
 * 421 MiB of parameters already in memory once). */
typedef struct image_sink {
    uint8_t *at; /* memory: the next byte */
    FILE *f;     /* else the file */
} image_sink;

static void sink_bytes(image_sink *k, const void *b, size_t n) {
    if (!n) return;
    if (k->f) {
        fwrite(b, 1, n, k->f); /* a short write sets the error flag outset_close reports */
        return;
    }
    memcpy(k->at, b, n);
    k->at += n;
}

/* A section: its header (tag, the payload's checksum, length), then the
 * payload; record sections are encoded first, to checksum them. */
static int emit_section(image_sink *k, const image_parts *w, int s, const char *path, diag *d) {
    const pkg_record *rec = pkg_sections[s].rec;
    uint64_t bytes = payload_bytes(w, s);
    const uint8_t *body = w->data[s];
    uint8_t *encoded = NULL;
    if (rec) {
        uint64_t rec_bytes = pkg_record_file_bytes(rec);
        if (bytes > SIZE_MAX)
            return diag_fail(d, "%s: error: the package's %s section needs %llu bytes, more than this host addresses", path,
                             pkg_sections[s].name, (unsigned long long)bytes);
        encoded = util_try_malloc((size_t)(bytes ? bytes : 1), 1, d, "%s: error: the package's %s section", path,
                                  pkg_sections[s].name);
        if (!encoded) return -1;
        for (uint64_t i = 0; i < w->n[s]; i++)
            pkg_encode(encoded + i * rec_bytes, rec, (const uint8_t *)w->data[s] + i * rec->mem_bytes, &w->offsets);
        body = encoded;
    }
    uint8_t head[PKG_SECTION_HEADER_BYTES], *at = head;
    at = put(at, pkg_sections[s].tag, 4);
    at = put(at, util_crc32c(bytes ? (const void *)body : head, (size_t)bytes), 4); /* an empty payload's checksum is a constant */
    put(at, bytes, 8);
    sink_bytes(k, head, sizeof head);
    sink_bytes(k, body, (size_t)bytes);
    free(encoded);
    return 0;
}

static int emit_image(image_sink *k, const package *p, const image_parts *w, const char *path, diag *d) {
    uint8_t head[PKG_HEADER_BYTES], *at = head;
    memcpy(at, pkg_magic, PKG_MAGIC_BYTES);
    at = put(at + PKG_MAGIC_BYTES, PACKAGE_VERSION, 4);
    at = put(at, SEC_COUNT, 4);
    at = put(at, machine_fingerprint(&p->machine), 8);
    TS_ASSERT(at == head + PKG_HEADER_BYTES);
    sink_bytes(k, head, sizeof head);
    for (int s = 0; s < SEC_COUNT; s++)
        if (emit_section(k, w, s, path, d)) return -1;
    return 0;
}

void package_fix_checksums(uint8_t *img, size_t len) {
    size_t at = PKG_HEADER_BYTES;
    while (at + PKG_SECTION_HEADER_BYTES <= len) {
        uint64_t bytes = pkg_get_le(img + at + 8, 8);
        if (bytes > len - at - PKG_SECTION_HEADER_BYTES) return;
        pkg_put_le(img + at + 4, util_crc32c(img + at + PKG_SECTION_HEADER_BYTES, (size_t)bytes), 4);
        at += PKG_SECTION_HEADER_BYTES + (size_t)bytes;
    }
}

uint8_t *package_image(const package *p, size_t *len, const char *path, diag *d) {
    image_parts w;
    gather(p, &w);
    uint64_t total = PKG_HEADER_BYTES;
    for (int s = 0; s < SEC_COUNT; s++) total += PKG_SECTION_HEADER_BYTES + payload_bytes(&w, s);
    uint8_t *img = total > SIZE_MAX ? NULL : util_try_malloc((size_t)total, 1, d, "%s: error: the package image", path);
    if (!img) {
        if (total > SIZE_MAX) diag_fail(d, "%s: error: the package image needs %llu bytes, more than this host addresses", path,
                                        (unsigned long long)total);
        release(&w);
        return NULL;
    }
    image_sink k = {img, NULL};
    int rc = emit_image(&k, p, &w, path, d);
    TS_ASSERT(rc != 0 || k.at == img + total);
    release(&w);
    if (rc) {
        free(img);
        return NULL;
    }
    *len = (size_t)total;
    return img;
}

/* Checked first: the compiler never writes a package the simulator refuses. */
int package_write(const package *p, FILE *f, const char *path, diag *d) {
    if (pkg_check(p, path, d) != 0) return -1;
    image_parts w;
    gather(p, &w);
    image_sink k = {NULL, f};
    int rc = emit_image(&k, p, &w, path, d);
    release(&w);
    return rc;
}

int package_save(const package *p, const char *path, diag *d) {
    outset o = {0};
    FILE *f = outset_open(&o, path, d);
    if (!f) return -1;
    int rc = package_write(p, f, path, d);
    if (outset_close(&o, f, path, d)) rc = -1;
    if (rc == 0) rc = outset_commit(&o, d);
    else outset_abort(&o);
    return rc;
}
