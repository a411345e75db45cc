/* format.h (private to src/package): the section and record tables the
 * writer, the reader and the checker share, so the byte layout of the file is
 * written down once (docs/package.md describes the same tables).
 *
 *   file     header | section 0 | section 1 | ... | section SEC_COUNT-1
 *   header   magic "TESSPKG\0" (8) | u32 version | u32 sections | u64 fingerprint
 *   section  u32 tag | u32 CRC-32C of the payload | u64 payload bytes | payload
 *   payload  raw bytes (machine JSON, strings, blob, meta), a packed array
 *            of fixed-size records, each field little-endian in table order
 *            (BUFS, SEGS, BIND), or variable-length records (STEP, RUNS,
 *            GRPS, XTAB: records.c)
 */
#ifndef TESSEL_PACKAGE_FORMAT_H
#define TESSEL_PACKAGE_FORMAT_H

#include "package.h"

enum {
    PKG_MAGIC_BYTES = 8,
    PKG_HEADER_BYTES = 24,          /* magic, version, section count, fingerprint */
    PKG_SECTION_HEADER_BYTES = 16,  /* tag, reserved, payload length */
    PKG_MAX_REPEAT_DEPTH = 16,      /* nested REPEATs a program may open */
};

extern const char pkg_magic[PKG_MAGIC_BYTES];

/* Sections in file order; a package holds each exactly once. */
typedef enum {
    SEC_MACHINE,
    SEC_STRINGS,
    SEC_STEPS,
    SEC_RUNS,
    SEC_GROUPS,
    SEC_TABLES,
    SEC_BUFS,
    SEC_BUFTILES,
    SEC_SEGMENTS,
    SEC_BLOB,
    SEC_BINDINGS,
    SEC_META,
    SEC_COUNT
} pkg_section;

/* How a struct field is stored. UINT and SINT copy an integer (or a float's
 * bits) between its struct width and its file width; STR is a char pointer
 * stored as a u32 offset into the string table; SUB is a nested record. */
typedef enum { FK_UINT, FK_SINT, FK_STR, FK_SUB } pkg_field_kind;

typedef struct pkg_record pkg_record;

typedef struct pkg_field {
    const char *name;       /* as in the struct, for messages and docs */
    uint8_t kind;           /* pkg_field_kind */
    uint8_t mem_bytes;      /* bytes of one element in the struct */
    uint8_t file_bytes;     /* bytes of one element in the file (SUB: unused) */
    uint8_t count;          /* array elements (1 for a scalar) */
    uint32_t offset;        /* bytes from the start of the struct */
    uint64_t max;           /* UINT: largest legal value (enums, bools); 0 = any */
    const pkg_record *sub;  /* SUB: the element's record */
} pkg_field;

struct pkg_record {
    const char *name;       /* "run": messages say "run 17: ..." */
    uint32_t mem_bytes;     /* sizeof the struct: the stride of an array of them */
    int32_t nfields;
    const pkg_field *fields;
};

typedef struct pkg_section_info {
    uint32_t tag;           /* four ASCII characters, first in the lowest byte */
    const char *name;       /* the tag as text, for messages */
    const pkg_record *rec;  /* NULL: the payload is raw bytes */
} pkg_section_info;

extern const pkg_section_info pkg_sections[SEC_COUNT];

/* ---- format.c --------------------------------------------------------- */

/* Bytes one record takes in the file. */
uint64_t pkg_record_file_bytes(const pkg_record *rec);

void pkg_put_le(uint8_t *p, uint64_t v, int bytes);
uint64_t pkg_get_le(const uint8_t *p, int bytes);

/* Writes the record at elem to out (pkg_record_file_bytes bytes); STR
 * fields become their offsets in names (every string must be in it). */
void pkg_encode(uint8_t *out, const pkg_record *rec, const void *elem, const strmap *names);
/* Reads one record from in into elem (zeroed, rec->mem_bytes). STR offsets
 * must name a string in table[0, table_bytes), which ends with a NUL. On a
 * value the struct cannot hold, writes the reason to why and returns false. */
bool pkg_decode(const uint8_t *in, const pkg_record *rec, void *elem, const char *table, uint64_t table_bytes,
                char *why, size_t cap);

/* Whether off names a NUL-terminated string of the table: the table must be
 * empty or end with a NUL, so any offset inside it is terminated. */
bool pkg_string_ok(const char *table, uint64_t table_bytes, uint64_t off);

/* ---- records.c -------------------------------------------------------- */

/* Bytes being written: grows as needed (malloc'd). */
typedef struct pkg_out {
    uint8_t *v;
    size_t n, cap;
} pkg_out;
void pkg_out_le(pkg_out *o, uint64_t v, int bytes);

/* A section payload being read: at most n bytes from p. */
typedef struct pkg_in {
    const uint8_t *p;
    uint64_t n, at;
} pkg_in;

/* Where decoded records go and errors are told. */
typedef struct pkg_in_ctx {
    arena *a;
    const char *path;
    diag *d;
} pkg_in_ctx;

void pkg_steps_encode(pkg_out *o, const low_program *g);
void pkg_runs_encode(pkg_out *o, const low_program *g);
/* Decode the whole payload into g's steps (runs); -1 with d naming the
 * section and record on anything the format cannot hold. */
int pkg_steps_decode(pkg_in_ctx *c, pkg_in *in, low_program *g);
int pkg_runs_decode(pkg_in_ctx *c, pkg_in *in, low_program *g);
void pkg_groups_encode(pkg_out *o, const pkg_tables *t);
int pkg_groups_decode(pkg_in_ctx *c, pkg_in *in, pkg_tables *t);
void pkg_tables_encode(pkg_out *o, const pkg_tables *t, uint32_t tiles);
int pkg_tables_decode(pkg_in_ctx *c, pkg_in *in, pkg_tables *t, uint32_t tiles);
void pkg_buf_tiles_encode(pkg_out *o, const package *p);
int pkg_buf_tiles_decode(pkg_in_ctx *c, pkg_in *in, package *p);

/* ---- check.c ---------------------------------------------------------- */

/* Validates everything the simulator relies on (docs/package.md, "Validation");
 * errors read "path: error: ...". Used on every package read and written. */
int pkg_check(const package *p, const char *path, diag *d);

#endif
