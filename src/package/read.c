/* read.c: bytes to a package. The header and the section directory are
 * checked against the bytes really present before anything is allocated;
 * records go through the one codec; pkg_check then validates the program. */
#include "format.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const uint8_t *bytes;
    size_t len;                          /* bytes of the image */
    const char *path;
    diag *d;
    package *p;
    uint32_t sections;                   /* count the header gives */
    uint64_t fingerprint;                /* the header's */
    const uint8_t *payload[SEC_COUNT];
    uint64_t payload_bytes[SEC_COUNT];
    bool seen[SEC_COUNT];
} reader;

static int fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(reader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = diag_vfail_in(r->d, r->path, "", fmt, ap);
    va_end(ap);
    return rc;
}

void package_init(package *p) {
    memset(p, 0, sizeof *p);
    arena_init(&p->arena);
}

void package_free(package *p) {
    arena_free(&p->arena);
    package_init(p);
}

/* ---- header and directory --------------------------------------------- */

static int read_header(reader *r) {
    size_t n = r->len < PKG_MAGIC_BYTES ? r->len : PKG_MAGIC_BYTES;
    if (pkg_chips_magic(r->bytes, r->len))
        return fail(r, "a package for several chips: 'tessel run' and 'tessel check --package' take it, this takes one "
                       "chip's (docs/chips.md)");
    if (n && memcmp(r->bytes, pkg_magic, n) != 0)
        return fail(r, "not a tessel package (it does not start with the magic \"TESSPKG\\0\")");
    if (r->len < PKG_HEADER_BYTES)
        return fail(r, "truncated header: the file has %zu bytes, the header needs %d", r->len, PKG_HEADER_BYTES);
    uint32_t version = (uint32_t)pkg_get_le(r->bytes + 8, 4);
    if (version != PACKAGE_VERSION)
        return fail(r, "package format version %" PRIu32 ", but this tessel reads only version %d (rebuild the package)",
                    version, PACKAGE_VERSION);
    r->sections = (uint32_t)pkg_get_le(r->bytes + 12, 4);
    r->fingerprint = pkg_get_le(r->bytes + 16, 8);
    return 0;
}

static int section_of(uint32_t tag) {
    for (int s = 0; s < SEC_COUNT; s++)
        if (pkg_sections[s].tag == tag) return s;
    return -1;
}

/* The expected order, for messages: "MACH STRS ... META". */
static const char *section_order(char *buf, size_t cap) {
    size_t n = 0;
    for (int s = 0; s < SEC_COUNT && n < cap; s++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", s ? " " : "", pkg_sections[s].name);
    return buf;
}

/* One section header at byte at: its place in the order and its payload. */
static int read_section(reader *r, uint32_t i, size_t *at, int *last) {
    char order[80];
    if (r->len - *at < PKG_SECTION_HEADER_BYTES)
        return fail(r, "truncated: section %" PRIu32 " (of %" PRIu32 ") has its header at byte %zu, but only %zu bytes remain",
                    i, r->sections, *at, r->len - *at);
    const uint8_t *h = r->bytes + *at;
    uint32_t tag = (uint32_t)pkg_get_le(h, 4), crc = (uint32_t)pkg_get_le(h + 4, 4);
    uint64_t bytes = pkg_get_le(h + 8, 8);
    int s = section_of(tag);
    if (s < 0) {
        char text[5];
        for (int k = 0; k < 4; k++) text[k] = h[k] >= 32 && h[k] < 127 ? (char)h[k] : '?';
        text[4] = 0;
        return fail(r, "unknown section tag 0x%08" PRIx32 " (\"%s\") at byte %zu; the sections are %s", tag, text, *at,
                    section_order(order, sizeof order));
    }
    const char *name = pkg_sections[s].name;
    if (r->seen[s]) return fail(r, "duplicate section %s at byte %zu", name, *at);
    if (s < *last)
        return fail(r, "section %s at byte %zu comes after %s; the sections are, in order, %s", name, *at,
                    pkg_sections[*last].name, section_order(order, sizeof order));
    *at += PKG_SECTION_HEADER_BYTES;
    if (bytes > r->len - *at)
        return fail(r, "truncated: section %s at byte %zu holds %" PRIu64 " bytes, but only %zu remain", name,
                    *at - PKG_SECTION_HEADER_BYTES, bytes, r->len - *at);
    uint32_t got = util_crc32c(r->bytes + *at, (size_t)bytes);
    if (got != crc)
        return fail(r, "section %s at byte %zu is damaged: its checksum is 0x%08" PRIx32 " but its %" PRIu64
                    " bytes give 0x%08" PRIx32,
                    name, *at - PKG_SECTION_HEADER_BYTES, crc, bytes, got);
    r->seen[s] = true;
    r->payload[s] = r->bytes + *at;
    r->payload_bytes[s] = bytes;
    *at += (size_t)bytes;
    *last = s;
    return 0;
}

static int read_directory(reader *r) {
    size_t at = PKG_HEADER_BYTES;
    int last = -1;
    /* Every section header takes 16 bytes, so a huge count fails as truncation. */
    for (uint32_t i = 0; i < r->sections; i++)
        if (read_section(r, i, &at, &last) != 0) return -1;
    for (int s = 0; s < SEC_COUNT; s++)
        if (!r->seen[s]) return fail(r, "missing section %s", pkg_sections[s].name);
    if (at != r->len)
        return fail(r, "%zu unexpected byte%s after the last section, at byte %zu", r->len - at, r->len - at == 1 ? "" : "s",
                    at);
    return 0;
}

/* ---- sections --------------------------------------------------------- */

static int read_machine(reader *r) {
    package *p = r->p;
    const char *label = arena_printf(&p->arena, "%s (machine section)", r->path);
    if (machine_from_json((const char *)r->payload[SEC_MACHINE], (size_t)r->payload_bytes[SEC_MACHINE], label,
                          &p->machine, r->d) != 0)
        return -1;
    uint64_t fp = machine_fingerprint(&p->machine);
    if (fp != r->fingerprint)
        return fail(r, "the header's machine fingerprint %016" PRIx64 " does not match the machine in the package (%016" PRIx64 ")",
                    r->fingerprint, fp);
    p->fingerprint = fp;
    return 0;
}

static int read_strings(reader *r) {
    uint64_t n = r->payload_bytes[SEC_STRINGS];
    const uint8_t *t = r->payload[SEC_STRINGS];
    if (n > INT32_MAX) return fail(r, "the string table holds %" PRIu64 " bytes, more than %d", n, INT32_MAX);
    if (n && t[n - 1] != 0) return fail(r, "the string table (section STRS) does not end with a NUL byte");
    char *v = arena_alloc(&r->p->arena, (size_t)n);
    if (n) memcpy(v, t, (size_t)n);
    r->p->prog.strings.v = v;
    r->p->prog.strings.n = r->p->prog.strings.cap = (int32_t)n;
    return 0;
}

/* Decodes the records of section s into a new array of *count structs. */
static int read_records(reader *r, int s, void **out, int32_t *count) {
    const pkg_record *rec = pkg_sections[s].rec;
    uint64_t rec_bytes = pkg_record_file_bytes(rec), bytes = r->payload_bytes[s], n = bytes / rec_bytes;
    if (bytes % rec_bytes)
        return fail(r, "section %s holds %" PRIu64 " bytes, not a whole number of %" PRIu64 "-byte %s records",
                    pkg_sections[s].name, bytes, rec_bytes, rec->name);
    if (n > INT32_MAX) return fail(r, "section %s holds %" PRIu64 " records, more than %d", pkg_sections[s].name, n, INT32_MAX);
    /* n is bounded by the bytes present, so this is at most a few times the file. */
    uint8_t *v = arena_alloc(&r->p->arena, (size_t)(n * rec->mem_bytes));
    const char *strings = r->p->prog.strings.v;
    uint64_t nstrings = (uint64_t)r->p->prog.strings.n;
    char why[320];
    for (uint64_t i = 0; i < n; i++)
        if (!pkg_decode(r->payload[s] + i * rec_bytes, rec, v + i * rec->mem_bytes, strings, nstrings, why, sizeof why))
            return fail(r, "%s %" PRIu64 ": %s", rec->name, i, why);
    *out = v;
    *count = (int32_t)n;
    return 0;
}

static int read_blob(reader *r) {
    uint64_t n = r->payload_bytes[SEC_BLOB];
    r->p->blob = arena_alloc(&r->p->arena, (size_t)n);
    if (n) memcpy(r->p->blob, r->payload[SEC_BLOB], (size_t)n);
    r->p->blob_bytes = n;
    return 0;
}

static int read_meta(reader *r) {
    size_t n = (size_t)r->payload_bytes[SEC_META];
    const char *t = (const char *)r->payload[SEC_META];
    const char *nul = memchr(t, 0, n);
    if (nul) return fail(r, "the meta text (section META) holds a NUL byte at offset %zu", (size_t)(nul - t));
    r->p->meta = arena_strndup(&r->p->arena, t, n);
    return 0;
}

/* Record sections into the package's arrays, in file order (the string
 * table comes before every record that points into it). */
static int read_sections(reader *r) {
    package *p = r->p;
    if (read_machine(r) != 0 || read_strings(r) != 0) return -1;
#define RECORDS(vec, s)                                             \
    do {                                                            \
        void *v_;                                                   \
        int32_t n_;                                                 \
        if (read_records(r, s, &v_, &n_) != 0) return -1;           \
        (vec).v = v_;                                               \
        (vec).n = (vec).cap = n_;                                   \
    } while (0)
    pkg_in_ctx c = {&p->arena, r->path, r->d};
    pkg_in steps = {r->payload[SEC_STEPS], r->payload_bytes[SEC_STEPS], 0}, runs = {r->payload[SEC_RUNS], r->payload_bytes[SEC_RUNS], 0};
    pkg_in groups = {r->payload[SEC_GROUPS], r->payload_bytes[SEC_GROUPS], 0};
    pkg_in tables = {r->payload[SEC_TABLES], r->payload_bytes[SEC_TABLES], 0};
    if (pkg_steps_decode(&c, &steps, &p->prog) != 0 || pkg_runs_decode(&c, &runs, &p->prog) != 0 ||
        pkg_groups_decode(&c, &groups, &p->tables) != 0 || pkg_tables_decode(&c, &tables, &p->tables, p->machine.tiles) != 0)
        return -1;
    RECORDS(p->prog.bufs, SEC_BUFS);
    pkg_in btil = {r->payload[SEC_BUFTILES], r->payload_bytes[SEC_BUFTILES], 0};
    if (pkg_buf_tiles_decode(&c, &btil, p) != 0) return -1;
    RECORDS(p->segments, SEC_SEGMENTS);
    if (read_blob(r) != 0) return -1;
    RECORDS(p->bindings, SEC_BINDINGS);
#undef RECORDS
    return read_meta(r);
}

int package_parse(const void *bytes, size_t len, const char *path, package *out, diag *d) {
    package_init(out);
    reader r = {.bytes = bytes, .len = len, .path = path, .d = d, .p = out};
    if (read_header(&r) != 0 || read_directory(&r) != 0 || read_sections(&r) != 0 || pkg_check(out, path, d) != 0) {
        package_free(out);
        return -1;
    }
    return 0;
}

int package_load(const char *path, package *out, diag *d) {
    char *text;
    size_t len;
    package_init(out);
    if (file_read_all(path, &text, &len, d) != 0) return -1;
    int rc = package_parse(text, len, path, out, d);
    free(text);
    return rc;
}
