/* chips.c: a package for several chips (docs/chips.md): the machine, a
 * manifest and one ordinary package per chip, each read alone.
 *
 *   "TESSCHIP"                      8 bytes
 *   u32 version, u32 programs, u32 replicas, u32 kind
 *   u64 machine bytes, u64 manifest bytes, programs x u64 package bytes
 *   u32 CRC-32C of everything above
 *   machine JSON, manifest JSON, CRC-32C of the two (u32)
 *   each program's package, as package_write writes it (its own checksums)
 *
 * A pipeline (kind 0): the machine has programs x replicas chips, chip c
 * runs program c % programs (the stages of replica c / programs), so
 * data-parallel copies share their bytes. A training step over replicas
 * (kind 1): one replica per chip, programs = replicas + 1: every chip runs
 * program 0 (the replica's) and then program 1 + c (its owner's).
 *
 * All little-endian. A reader checks the header and the two JSON texts
 * before it uses them, then parses only the packages it is asked for. */
#define _POSIX_C_SOURCE 200809L
#include "package.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'T', 'E', 'S', 'S', 'C', 'H', 'I', 'P'};
enum { VERSION = 2, MAX_CHIPS = 64, HEAD = 40 };

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

bool pkg_chips_magic(const void *bytes, size_t len) { return len >= 8 && memcmp(bytes, MAGIC, 8) == 0; }

/* The chips a package of this kind, programs and replicas runs on; 0: none. */
static uint64_t chips_of(uint32_t kind, uint64_t n, uint64_t replicas) {
    if (kind == PKG_CHIPS_PIPELINE) return n * replicas;
    return kind == PKG_CHIPS_TRAIN && n == replicas + 1 && replicas >= 2 ? replicas : 0;
}

int pkg_chips_write(const machine *m, const char *manifest, const package *pkgs, int32_t n, int32_t replicas,
                    pkg_chips_kind kind, FILE *f, const char *path, diag *d) {
    TS_ASSERT(n >= 1 && replicas >= 1 && chips_of(kind, (uint64_t)n, (uint64_t)replicas) == m->chips && m->chips <= MAX_CHIPS);
    char *mj = machine_to_json(m);
    size_t hlen = HEAD + 8 * (size_t)n, mlen = strlen(mj), flen = strlen(manifest);
    uint8_t *head = xmalloc(hlen + 4), crc[4];
    uint8_t **img = xcalloc((size_t)n, sizeof(uint8_t *));
    size_t *len = xcalloc((size_t)n, sizeof(size_t));
    int rc = 0;
    for (int32_t c = 0; c < n && rc == 0; c++)
        if (!(img[c] = package_image(&pkgs[c], &len[c], path, d))) rc = -1;
    if (rc == 0) {
        memcpy(head, MAGIC, 8);
        put_u32(head + 8, VERSION);
        put_u32(head + 12, (uint32_t)n);
        put_u32(head + 16, (uint32_t)replicas);
        put_u32(head + 20, (uint32_t)kind);
        put_u64(head + 24, mlen);
        put_u64(head + 32, flen);
        for (int32_t c = 0; c < n; c++) put_u64(head + HEAD + 8 * (size_t)c, len[c]);
        put_u32(head + hlen, util_crc32c(head, hlen));
        char *both = xmalloc(mlen + flen + 1);
        memcpy(both, mj, mlen);
        memcpy(both + mlen, manifest, flen);
        put_u32(crc, util_crc32c(both, mlen + flen));
        free(both);
        bool ok = fwrite(head, 1, hlen + 4, f) == hlen + 4 && fwrite(mj, 1, mlen, f) == mlen &&
                  fwrite(manifest, 1, flen, f) == flen && fwrite(crc, 1, 4, f) == 4;
        for (int32_t c = 0; c < n && ok; c++) ok = fwrite(img[c], 1, len[c], f) == len[c];
        if (!ok) rc = diag_fail(d, "%s: error: cannot write", path);
    }
    for (int32_t c = 0; c < n; c++) free(img[c]);
    free(img);
    free(len);
    free(head);
    free(mj);
    return rc;
}

int pkg_chips_parse(const void *bytes, size_t size, const char *path, const bool *want, pkg_chips *out, diag *d) {
    memset(out, 0, sizeof *out);
    const uint8_t *b = bytes;
    if (!pkg_chips_magic(bytes, size)) return diag_fail(d, "%s: error: not a package for several chips", path);
    if (size < HEAD + 4) return diag_fail(d, "%s: error: truncated package header", path);
    uint32_t version = get_u32(b + 8), n = get_u32(b + 12), replicas = get_u32(b + 16), kind = get_u32(b + 20);
    if (version != VERSION)
        return diag_fail(d, "%s: error: package for several chips of format %u; this tessel reads %d", path, version, VERSION);
    uint64_t chips = n <= MAX_CHIPS + 1 && replicas <= MAX_CHIPS ? chips_of(kind, n, replicas) : 0;
    if (n < 1 || replicas < 1 || chips < 1 || chips > MAX_CHIPS)
        return diag_fail(d, "%s: error: the package claims %u programs for %u replicas of kind %u (at most %d chips)", path,
                         n, replicas, kind, MAX_CHIPS);
    size_t hlen = HEAD + 8 * (size_t)n;
    if (size < hlen + 4) return diag_fail(d, "%s: error: truncated package header", path);
    if (get_u32(b + hlen) != util_crc32c(b, hlen))
        return diag_fail(d, "%s: error: the header's checksum does not match (the file is damaged)", path);
    uint64_t mlen = get_u64(b + 24), flen = get_u64(b + 32), at = hlen + 4;
    if (mlen > size || flen > size || at + mlen + flen + 4 > size)
        return diag_fail(d, "%s: error: truncated package (machine and manifest)", path);
    const uint8_t *mj = b + at, *fj = mj + mlen;
    if (get_u32(fj + flen) != util_crc32c(mj, mlen + flen))
        return diag_fail(d, "%s: error: the machine's and manifest's checksum does not match (the file is damaged)", path);
    if (machine_from_json((const char *)mj, mlen, path, &out->machine, d)) return -1;
    if (out->machine.chips != chips)
        return diag_fail(d, "%s: error: the package holds %u programs for %u replicas, for a machine of %u chips", path, n,
                         replicas, out->machine.chips);
    out->replicas = (int32_t)replicas;
    out->kind = (pkg_chips_kind)kind;
    at += mlen + flen + 4;
    out->n = (int32_t)n;
    out->manifest = xmalloc(flen + 1);
    memcpy(out->manifest, fj, flen);
    out->manifest[flen] = 0;
    json_t *man = json_loads(out->manifest, 0, NULL), *mb = json_object_get(man, "micro_batches"),
           *rp = json_object_get(man, "replicas");
    out->micro_batches = json_is_integer(mb) ? (int64_t)json_integer_value(mb) : 1;
    json_t *bt = json_object_get(man, "batch");
    out->batch = json_is_integer(bt) ? (int64_t)json_integer_value(bt) : out->micro_batches;
    bool man_ok = json_is_object(man) && out->micro_batches >= 1 && out->micro_batches <= (1 << 20) && out->batch >= 1 &&
                  out->batch % ((int64_t)out->replicas * out->micro_batches) == 0 &&
                  (json_is_integer(rp) ? json_integer_value(rp) : 1) == out->replicas;
    json_decref(man);
    if (!man_ok) {
        pkg_chips_free(out);
        return diag_fail(d, "%s: error: the manifest is not a JSON object whose batch splits into its replicas and "
                            "micro_batches", path);
    }
    out->pkg = xcalloc(n, sizeof(package));
    out->loaded = xcalloc(n, sizeof(bool));
    int rc = 0;
    for (uint32_t c = 0; c < n && rc == 0; c++) {
        uint64_t len = get_u64(b + HEAD + 8 * (size_t)c);
        if (len > size - at) {
            rc = diag_fail(d, "%s: error: truncated package (program %u)", path, c);
            break;
        }
        if (!want || want[c]) {
            char name[1024];
            snprintf(name, sizeof name, "%s (program %u)", path, c);
            rc = package_parse(b + at, len, name, &out->pkg[c], d);
            out->loaded[c] = rc == 0;
        }
        at += len;
    }
    if (rc == 0 && at != size) rc = diag_fail(d, "%s: error: %zu bytes after the last program", path, (size_t)(size - at));
    if (rc) pkg_chips_free(out);
    return rc;
}

int pkg_chips_load(const char *path, const bool *want, pkg_chips *out, diag *d) {
    char *text;
    size_t len;
    memset(out, 0, sizeof *out);
    if (file_read_all(path, &text, &len, d) != 0) return -1;
    int rc = pkg_chips_parse(text, len, path, want, out, d);
    free(text);
    return rc;
}

void pkg_chips_fix_checksums(uint8_t *b, size_t size) {
    if (size < HEAD + 4 || !pkg_chips_magic(b, size)) return;
    uint32_t n = get_u32(b + 12);
    if (n < 1 || n > MAX_CHIPS + 1) return;
    size_t hlen = HEAD + 8 * (size_t)n;
    if (size < hlen + 4) return;
    put_u32(b + hlen, util_crc32c(b, hlen));
    uint64_t mlen = get_u64(b + 24), flen = get_u64(b + 32), at = hlen + 4;
    if (mlen > size || flen > size || at + mlen + flen + 4 > size) return;
    put_u32(b + at + mlen + flen, util_crc32c(b + at, mlen + flen));
}

int pkg_chips_count(const char *path, int32_t *programs, int32_t *replicas, pkg_chips_kind *kind, diag *d) {
    FILE *f = fopen(path, "rb");
    uint8_t head[24];
    bool ok = f && fread(head, 1, 24, f) == 24 && pkg_chips_magic(head, 8) && get_u32(head + 8) == VERSION;
    if (f) fclose(f);
    if (!ok) return diag_fail(d, "%s: error: not a package for several chips of format %d", path, VERSION);
    uint32_t n = get_u32(head + 12), r = get_u32(head + 16), k = get_u32(head + 20);
    uint64_t chips = n <= MAX_CHIPS + 1 && r <= MAX_CHIPS ? chips_of(k, n, r) : 0;
    if (n < 1 || r < 1 || chips < 1 || chips > MAX_CHIPS)
        return diag_fail(d, "%s: error: the package claims %u programs for %u replicas of kind %u (at most %d chips)", path,
                         n, r, k, MAX_CHIPS);
    *programs = (int32_t)n, *replicas = (int32_t)r, *kind = (pkg_chips_kind)k;
    return 0;
}

bool pkg_chips_file(const char *path) {
    FILE *f = fopen(path, "rb");
    char head[8];
    bool yes = f && fread(head, 1, 8, f) == 8 && pkg_chips_magic(head, 8);
    if (f) fclose(f);
    return yes;
}

void pkg_chips_free(pkg_chips *p) {
    for (int32_t c = 0; p->loaded && c < p->n; c++)
        if (p->loaded[c]) package_free(&p->pkg[c]);
    free(p->pkg);
    free(p->loaded);
    free(p->manifest);
    memset(p, 0, sizeof *p);
}
