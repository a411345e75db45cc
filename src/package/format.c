/* format.c: the record tables of every package section and the one codec
 * that writes and reads any record field by field, little-endian. */
#include "format.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

const char pkg_magic[PKG_MAGIC_BYTES] = {'T', 'E', 'S', 'S', 'P', 'K', 'G', 0};

/* The file stores these enums as numbers (docs/package.md lists them): a
 * change to any of them is a format change and bumps PACKAGE_VERSION. A code
 * appended at the end (EWISE gelu_erf = 7, then num.h's plain unary ops from 8 in their order,
 * relu .. erf = 8 .. 17, softplus = 18, max = 19, min = 20; the kernels gemm_epi = 12,
 * reduce_epi = 13, adamw_apply = 14, whose runs alone store a grad byte; the
 * kernel ln_moments = 15 (format 11); a reduce's residual operand and second float (format 12); ln_moments's own-slot operand and n[2] (format 13); the kernel gather = 16 and i32 bindings (format 14); the
 * layout encodings row_major_t = 3, amp_left_t = 4)
 * keeps every older file valid. */
_Static_assert(PACKAGE_VERSION == 15 && PKG_PROBE == 2 && KERNEL_K_COUNT == 17 && KERNEL_EPI_COUNT == 2 && KERNEL_EW_GELU_ERF == 7 &&
                   KERNEL_EW_RELU == 8 && KERNEL_EW_ERF == 17 && KERNEL_EW_SOFTPLUS == 18 && KERNEL_EW_MAX == 19 && KERNEL_EW_MIN == 20 &&
                   KERNEL_EW_COUNT == 21 && LOW_STEP_END == 3 &&
                   DT_COUNT == 7 && ENC_AMP_LEFT_T == 4 && KERNEL_MAX_OPERANDS == 7 && KERNEL_MAX_BOX == 4 &&
                   LAYOUT_MAX_RANK == 6,
               "package format codes changed: bump PACKAGE_VERSION and update docs/package.md");

/* ---- record tables ---------------------------------------------------- */

/* A field's struct width comes from the struct itself; its file width is
 * written here, so the file layout never depends on the compiler's. */
#define MEMBER_BYTES(T, f) sizeof(((T *)0)->f)
#define SCALAR(T, f, kind, file_bytes, max) \
    {#f, kind, (uint8_t)MEMBER_BYTES(T, f), file_bytes, 1, (uint32_t)offsetof(T, f), max, NULL}
#define ARRAY(T, f, kind, file_bytes, n) \
    {#f, kind, (uint8_t)(MEMBER_BYTES(T, f) / (n)), file_bytes, n, (uint32_t)offsetof(T, f), 0, NULL}
#define NESTED(T, f, rec, n) \
    {#f, FK_SUB, (uint8_t)(MEMBER_BYTES(T, f) / (n)), 0, n, (uint32_t)offsetof(T, f), 0, &rec}
#define RECORD(T, label, fields) {label, sizeof(T), (int32_t)TS_COUNT(fields), fields}

static const pkg_field BUF_FIELDS[] = {
    SCALAR(low_buf, bytes, FK_UINT, 4, 0),
    SCALAR(low_buf, label, FK_UINT, 4, 0),
    SCALAR(low_buf, first, FK_SINT, 4, 0),
    SCALAR(low_buf, last, FK_SINT, 4, 0),
    SCALAR(low_buf, addr, FK_UINT, 4, 0),
    SCALAR(low_buf, reserved, FK_UINT, 4, 0),
};

static const pkg_field SEGMENT_FIELDS[] = {
    SCALAR(pkg_segment, tile, FK_UINT, 4, 0),
    SCALAR(pkg_segment, addr, FK_UINT, 4, 0),
    SCALAR(pkg_segment, bytes, FK_UINT, 4, 0),
    SCALAR(pkg_segment, blob_off, FK_UINT, 8, 0),
};

static const pkg_field LAYOUT_FIELDS[] = {
    SCALAR(layout, rank, FK_SINT, 4, 0),
    SCALAR(layout, elem_bytes, FK_SINT, 4, 0),
    SCALAR(layout, enc, FK_UINT, 4, ENC_AMP_LEFT_T),
    ARRAY(layout, dim, FK_SINT, 8, LAYOUT_MAX_RANK),
    ARRAY(layout, parts, FK_SINT, 8, LAYOUT_MAX_RANK),
    ARRAY(layout, block, FK_SINT, 8, LAYOUT_MAX_RANK),
    ARRAY(layout, tile_stride, FK_SINT, 4, LAYOUT_MAX_RANK),
    SCALAR(layout, nrep, FK_SINT, 4, 0),
    ARRAY(layout, rep, FK_SINT, 8, LAYOUT_MAX_RANK),
    ARRAY(layout, rep_stride, FK_SINT, 4, LAYOUT_MAX_RANK),
    SCALAR(layout, tile_base, FK_SINT, 4, 0),
};
static const pkg_record LAYOUT = RECORD(layout, "layout", LAYOUT_FIELDS);

static const pkg_field BINDING_FIELDS[] = {
    SCALAR(pkg_binding, name, FK_STR, 4, 0),
    SCALAR(pkg_binding, role, FK_UINT, 1, PKG_PROBE),
    SCALAR(pkg_binding, dtype, FK_UINT, 4, DT_COUNT - 1),
    SCALAR(pkg_binding, scale, FK_SINT, 1, 0),
    NESTED(pkg_binding, layout, LAYOUT, 1),
    SCALAR(pkg_binding, addr, FK_UINT, 4, 0),
    SCALAR(pkg_binding, step, FK_SINT, 4, 0),
};

static const pkg_record BUF = RECORD(low_buf, "buffer", BUF_FIELDS);
static const pkg_record SEGMENT = RECORD(pkg_segment, "segment", SEGMENT_FIELDS);
static const pkg_record BINDING = RECORD(pkg_binding, "binding", BINDING_FIELDS);

#define TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)

const pkg_section_info pkg_sections[SEC_COUNT] = {
    [SEC_MACHINE] = {TAG('M', 'A', 'C', 'H'), "MACH", NULL},
    [SEC_STRINGS] = {TAG('S', 'T', 'R', 'S'), "STRS", NULL},
    [SEC_STEPS] = {TAG('S', 'T', 'E', 'P'), "STEP", NULL}, /* records.c */
    [SEC_RUNS] = {TAG('R', 'U', 'N', 'S'), "RUNS", NULL},  /* records.c */
    [SEC_GROUPS] = {TAG('G', 'R', 'P', 'S'), "GRPS", NULL}, /* records.c */
    [SEC_TABLES] = {TAG('X', 'T', 'A', 'B'), "XTAB", NULL}, /* records.c */
    [SEC_BUFS] = {TAG('B', 'U', 'F', 'S'), "BUFS", &BUF},
    [SEC_BUFTILES] = {TAG('B', 'T', 'I', 'L'), "BTIL", NULL}, /* records.c */
    [SEC_SEGMENTS] = {TAG('S', 'E', 'G', 'S'), "SEGS", &SEGMENT},
    [SEC_BLOB] = {TAG('B', 'L', 'O', 'B'), "BLOB", NULL},
    [SEC_BINDINGS] = {TAG('B', 'I', 'N', 'D'), "BIND", &BINDING},
    [SEC_META] = {TAG('M', 'E', 'T', 'A'), "META", NULL},
};

/* ---- the codec -------------------------------------------------------- */

void pkg_put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t pkg_get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Struct memory as an unsigned integer of its width, and back: memcpy
 * through a typed integer keeps this independent of host byte order. */
static uint64_t load_mem(const uint8_t *p, int bytes) {
    switch (bytes) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    case 8: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
    TS_UNREACHABLE();
}

static void store_mem(uint8_t *p, uint64_t v, int bytes) {
    switch (bytes) {
    case 1: *p = (uint8_t)v; return;
    case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); return; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); return; }
    case 8: memcpy(p, &v, 8); return;
    }
    TS_UNREACHABLE();
}

static int64_t sign_extend(uint64_t v, int bytes) {
    if (bytes == 8) return (int64_t)v;
    uint64_t sign = 1ull << (8 * bytes - 1);
    return (int64_t)((v ^ sign) - sign);
}

/* Whether v fits `bytes` bytes as an unsigned (or, if is_signed, signed) integer. */
static bool fits(uint64_t v, int bytes, bool is_signed) {
    if (bytes == 8) return true;
    if (!is_signed) return v >> (8 * bytes) == 0;
    int64_t s = (int64_t)v, lim = (int64_t)1 << (8 * bytes - 1);
    return s >= -lim && s < lim;
}

uint64_t pkg_record_file_bytes(const pkg_record *rec) {
    uint64_t n = 0;
    for (int32_t i = 0; i < rec->nfields; i++) {
        const pkg_field *f = &rec->fields[i];
        n += (uint64_t)f->count * (f->kind == FK_SUB ? pkg_record_file_bytes(f->sub) : f->file_bytes);
    }
    return n;
}

static uint8_t *encode(uint8_t *out, const pkg_record *rec, const uint8_t *elem, const strmap *names) {
    for (int32_t i = 0; i < rec->nfields; i++) {
        const pkg_field *f = &rec->fields[i];
        for (int k = 0; k < f->count; k++) {
            const uint8_t *src = elem + f->offset + (size_t)k * f->mem_bytes;
            if (f->kind == FK_SUB) {
                out = encode(out, f->sub, src, names);
                continue;
            }
            uint64_t v;
            if (f->kind == FK_STR) {
                const char *s;
                memcpy(&s, src, sizeof s);
                int32_t off = -1;
                TS_ASSERT(s && strmap_get(names, s, &off));
                v = (uint64_t)off;
            } else {
                v = load_mem(src, f->mem_bytes);
                if (f->kind == FK_SINT) v = (uint64_t)sign_extend(v, f->mem_bytes);
                TS_ASSERT(fits(v, f->file_bytes, f->kind == FK_SINT));
            }
            pkg_put_le(out, v, f->file_bytes);
            out += f->file_bytes;
        }
    }
    return out;
}

void pkg_encode(uint8_t *out, const pkg_record *rec, const void *elem, const strmap *names) {
    encode(out, rec, elem, names);
}

bool pkg_string_ok(const char *table, uint64_t table_bytes, uint64_t off) {
    return off < table_bytes && table[table_bytes - 1] == 0;
}

/* The name of element k of field f, as "dt[3]" or "rank". */
static void field_label(const pkg_field *f, int k, char *buf, size_t cap) {
    if (f->count > 1) snprintf(buf, cap, "%s[%d]", f->name, k);
    else snprintf(buf, cap, "%s", f->name);
}

/* One scalar element: false (with the reason in why) if the struct cannot
 * hold the value the file gives. */
static bool decode_scalar(const pkg_field *f, const uint8_t *in, uint8_t *dst, const char *table,
                          uint64_t table_bytes, char *why, size_t cap) {
    uint64_t v = pkg_get_le(in, f->file_bytes);
    switch ((pkg_field_kind)f->kind) {
    case FK_STR:
        if (!pkg_string_ok(table, table_bytes, v)) {
            snprintf(why, cap, "= %" PRIu64 " is outside the string table (%" PRIu64 " bytes)", v, table_bytes);
            return false;
        }
        const char *s = table + v;
        memcpy(dst, &s, sizeof s);
        return true;
    case FK_SINT:
        v = (uint64_t)sign_extend(v, f->file_bytes);
        if (!fits(v, f->mem_bytes, true)) {
            snprintf(why, cap, "= %" PRId64 " does not fit in %d bytes", (int64_t)v, f->mem_bytes);
            return false;
        }
        break;
    case FK_UINT:
        if ((f->max && v > f->max) || !fits(v, f->mem_bytes, false)) {
            snprintf(why, cap, "= %" PRIu64 " is out of range (at most %" PRIu64 ")", v,
                     f->max ? f->max : UINT64_MAX >> (64 - 8 * f->mem_bytes));
            return false;
        }
        break;
    case FK_SUB: TS_UNREACHABLE();
    }
    store_mem(dst, v, f->mem_bytes);
    return true;
}

/* Decodes one record; on failure why reads "<field path> <reason>". */
static const uint8_t *decode(const uint8_t *in, const pkg_record *rec, uint8_t *elem, const char *table,
                             uint64_t table_bytes, char *why, size_t cap) {
    for (int32_t i = 0; i < rec->nfields; i++) {
        const pkg_field *f = &rec->fields[i];
        for (int k = 0; k < f->count; k++) {
            uint8_t *dst = elem + f->offset + (size_t)k * f->mem_bytes;
            char inner[200], label[48];
            if (f->kind == FK_SUB) {
                const uint8_t *next = decode(in, f->sub, dst, table, table_bytes, inner, sizeof inner);
                if (next) {
                    in = next;
                    continue;
                }
                field_label(f, k, label, sizeof label);
                snprintf(why, cap, "%s.%.150s", label, inner);
                return NULL;
            }
            if (!decode_scalar(f, in, dst, table, table_bytes, inner, sizeof inner)) {
                field_label(f, k, label, sizeof label);
                snprintf(why, cap, "%s %.150s", label, inner);
                return NULL;
            }
            in += f->file_bytes;
        }
    }
    return in;
}

bool pkg_decode(const uint8_t *in, const pkg_record *rec, void *elem, const char *table, uint64_t table_bytes,
                char *why, size_t cap) {
    char inner[240];
    if (decode(in, rec, elem, table, table_bytes, inner, sizeof inner)) return true;
    snprintf(why, cap, "field %s", inner);
    return false;
}
