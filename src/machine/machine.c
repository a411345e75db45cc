/* machine.c: presets, JSON machine files, validation, printing and the
 * fingerprint, all walking the one MACHINE_FIELDS table. */
#define _POSIX_C_SOURCE 200809L
#include "machine.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the field table -------------------------------------------------- */

typedef enum { K_STR, K_ADDR, K_U32, K_F64 } field_kind;

typedef struct field_info {
    const char *name;
    field_kind kind;
    size_t offset;     /* bytes into struct machine */
    double lo;         /* least legal value (STR: least length) */
    const char *unit;
    const char *doc;
} field_info;

static const field_info FIELDS[MACHINE_FIELD_COUNT] = {
#define X(kind, field, lo, unit, doc) {#field, K_##kind, offsetof(machine, field), lo, unit, doc},
    MACHINE_FIELDS(X)
#undef X
};

/* Adding a field means a value in every preset below and a row in
 * docs/machine.md; this assert is the reminder. */
_Static_assert(MACHINE_FIELD_COUNT == 70, "new machine field: update the presets and docs/machine.md");

static uint32_t *u32_at(machine *m, int i) { return (uint32_t *)((char *)m + FIELDS[i].offset); }
static uint32_t u32_of(const machine *m, int i) { return *(const uint32_t *)((const char *)m + FIELDS[i].offset); }
static double *f64_at(machine *m, int i) { return (double *)((char *)m + FIELDS[i].offset); }
static double f64_of(const machine *m, int i) { return *(const double *)((const char *)m + FIELDS[i].offset); }
static char *str_at(machine *m, int i) { return (char *)m + FIELDS[i].offset; }
static const char *str_of(const machine *m, int i) { return (const char *)m + FIELDS[i].offset; }

const char *machine_field_name(int field) {
    return field >= 0 && field < MACHINE_FIELD_COUNT ? FIELDS[field].name : NULL;
}

bool machine_field_present(const machine *m, int field) {
    return field < MACHINE_F_chips || m->chips > 1;
}

/* A one-chip machine has no link: the chip fields are cleared so a round
 * trip through JSON (which leaves them out) gives an equal machine. */
static void normalise(machine *m) {
    if (m->chips != 1) return;
    m->link_bytes_per_cycle = 0;
    m->link_latency_cycles = 0;
    m->chip_sync_cycles = 0;
}

machine machine_one_chip(const machine *m, const char *name) {
    machine one = *m;
    one.chips = 1;
    normalise(&one);
    if (name) {
        snprintf(one.name, sizeof one.name, "%s", name);
    } else {
        char *x = strrchr(one.name, 'x');
        if (x && x > one.name && x[1] && strspn(x + 1, "0123456789") == strlen(x + 1)) *x = 0;
    }
    return one;
}

/* The canonical text of a value, as machine_to_json writes it (strings
 * unquoted). */
static void value_text(const machine *m, int i, char *buf, size_t cap) {
    switch (FIELDS[i].kind) {
    case K_STR: snprintf(buf, cap, "%s", str_of(m, i)); break;
    case K_ADDR: snprintf(buf, cap, "0x%" PRIx32, u32_of(m, i)); break;
    case K_U32: snprintf(buf, cap, "%" PRIu32, u32_of(m, i)); break;
    case K_F64: fmt_double(buf, cap, f64_of(m, i)); break;
    }
}

/* ---- presets ---------------------------------------------------------- */

/* C600 (IPU21). Sources for every value: docs/machine.md. */
static const machine C600 = {
    .name = "c600",
    .tiles = 1472,
    .tile_memory_base = 0x4c000,
    .tile_memory_end = 0xe8000,          /* 624 KiB per tile */
    .memory_element_bytes = 16 * 1024,
    .interleaved_base = 0x80000,         /* upper 416 KiB */
    .interleave_factor = 2,              /* logical interleaved element: 32 KiB */
    .code_limit = 0x80000,               /* instruction fetch from the ordinary region only */
    .loader_limit = 0xe7bb0,             /* base + 0x10 + 643 frames of 992 payload bytes */
    .clock_hz = 1.5e9,                   /* 280 TFLOPS f16 / (2 * 64 * 1472) = 1.49 GHz */
    .amp_macs_f32 = 16,
    .amp_macs_f16 = 64,
    .amp_macs_f8 = 128,
    .vector_bytes_per_cycle = 8,         /* one 64-bit operand per cycle */
    .load_bytes_per_cycle = 8,
    .interleaved_load_bytes_per_cycle = 16,
    .copy_bytes_per_cycle = 8,
    .exchange_bytes_per_cycle = 4,
    .fragment_cycles = 3,
    .sync_cycles = 270,                 /* measured per-phase overhead: docs/calibration.md */
    .launch_cycles = 11,
    .max_send_bytes = 256,               /* 6-bit word count in a send: 64 words */
    .table_budget_bytes = 64 * 1024,
    .amp_k_block = 64,
    .amp_col_panel = 16,
    .amp_panel_bytes = 512,              /* coefficient store: 64 entries of 8 bytes */
    .gemm_run_cycles = 389,              /* calibrated: docs/calibration.md */
    .gemm_panel_cycles = 146,
    .gemm_row_cycles = 0,
    .vector_run_cycles = 850,            /* estimates for the unmeasured kernels: docs/machine.md */
    .vector_row_cycles = 12,
    .vector_func_cycles = 4,
    .copy_run_cycles = 277,              /* calibrated: docs/calibration.md */
    .workers = 6,
    .amp_macs_f8_f32acc = 64,            /* no measurement above the f16 rate: docs/calibration.md */
    .gemm_packed_row_cycles = 3,
    .exchange_latency_cycles = 281,
    .exchange_patch_cycles = 21,
    .exchange_conflict_percent = 18,
    .copy_span_cycles = 8,
    .ewise_run_cycles = 309,
    .ewise_grain_elems = 16,
    .ewise_add_instrs = 15,
    .ewise_gelu_instrs = 79,
    .ewise_cast_instrs = 37,
    .ewise_f8_out_instrs = 8,
    .reduce_run_cycles = 271,
    .reduce_grain_elems = 8,
    .reduce_grain_instrs = 9,
    .reduce_partial_instrs = 2,
    .reduce_gelu_instrs = 30,            /* reduce-f16-82x32x6-biasgelu: docs/calibration.md */
    .softmax_run_cycles = 1089,
    .softmax_row_cycles = 0,
    .softmax_key_centi = 1500,
    .softmax_merge_cycles = 200,
    .softmax_segment_cycles = 350,
    .layer_norm_run_cycles = 121,
    .layer_norm_row_cycles = 1416,
    .layer_norm_grain_instrs = 38,
    .ln_moments_run_cycles = 115,        /* the stage points: docs/calibration.md */
    .ln_moments_row_cycles = 1122,
    .ln_moments_grain_instrs = 12,
    .ln_apply_run_cycles = 721,
    .ln_apply_row_cycles = 456,
    .ln_apply_grain_instrs = 24,
    .ln_part_cycles = 60,                /* not measured: docs/machine.md */
    .chips = 1,
};

/* The links of the c600xN presets: docs/machine.md, "Several chips". */
enum { C600_LINK_BYTES_PER_CYCLE = 42, C600_LINK_LATENCY_CYCLES = 1500, C600_CHIP_SYNC_CYCLES = 1000 };

static void preset_c600(machine *m) { *m = C600; }

/* The same chip without FP8, at the GC200's 1.33 GHz (250 TFLOPS f16). */
static void preset_mk2(machine *m) {
    *m = C600;
    snprintf(m->name, sizeof m->name, "mk2");
    m->clock_hz = 1.33e9;
    m->amp_macs_f8 = 0;
    m->amp_macs_f8_f32acc = 0;
}

/* Small enough to simulate in a unit test, with the same memory structure:
 * 64 KiB ordinary (code) region, 64 KiB interleaved region, the loader limit
 * the same 0x450 bytes below the end as on the C600. */
static void preset_tiny(machine *m) {
    *m = C600;
    snprintf(m->name, sizeof m->name, "tiny");
    m->tiles = 16;
    m->tile_memory_end = 0x6c000;
    m->interleaved_base = 0x5c000;
    m->code_limit = 0x5c000;
    m->loader_limit = 0x6bbb0;
    m->table_budget_bytes = 16 * 1024;
}

/* n chips of one preset in a ring, named "<name>x<n>". */
static void with_chips(machine *m, uint32_t n) {
    char base[MACHINE_NAME_CAP];
    snprintf(base, sizeof base, "%s", m->name);
    snprintf(m->name, sizeof m->name, "%.40sx%" PRIu32, base, n);
    m->chips = n;
    m->link_bytes_per_cycle = C600_LINK_BYTES_PER_CYCLE;
    m->link_latency_cycles = C600_LINK_LATENCY_CYCLES;
    m->chip_sync_cycles = C600_CHIP_SYNC_CYCLES;
}
static void preset_c600x2(machine *m) { preset_c600(m); with_chips(m, 2); }
static void preset_c600x4(machine *m) { preset_c600(m); with_chips(m, 4); }
static void preset_tinyx2(machine *m) { preset_tiny(m); with_chips(m, 2); }
static void preset_tinyx4(machine *m) { preset_tiny(m); with_chips(m, 4); }

static const struct {
    const char *name;
    void (*fill)(machine *m);
} PRESETS[] = {
    {"c600", preset_c600},
    {"mk2", preset_mk2},
    {"tiny", preset_tiny},
    {"c600x2", preset_c600x2},
    {"c600x4", preset_c600x4},
    {"tinyx2", preset_tinyx2},
    {"tinyx4", preset_tinyx4},
};

const char *machine_preset_name(int i) {
    return i >= 0 && (size_t)i < TS_COUNT(PRESETS) ? PRESETS[i].name : NULL;
}

int machine_preset(const char *name, machine *m) {
    for (size_t i = 0; i < TS_COUNT(PRESETS); i++) {
        if (strcmp(name, PRESETS[i].name) == 0) {
            memset(m, 0, sizeof *m);
            PRESETS[i].fill(m);
            return 0;
        }
    }
    return -1;
}

/* "c600, mk2, tiny, ..." for error messages. */
static void preset_list(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < TS_COUNT(PRESETS) && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", PRESETS[i].name);
}

/* ---- validation ------------------------------------------------------- */

/* A broken rule: the message, and up to three fields it concerns, the one
 * most likely at fault first (a JSON file points at the first it set). */
typedef struct problem {
    char msg[512];
    int field[3];
} problem;

static int fail(problem *p, int f0, int f1, int f2, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(problem *p, int f0, int f1, int f2, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
    p->field[0] = f0;
    p->field[1] = f1;
    p->field[2] = f2;
    return -1;
}

static bool name_ok(const char *s, size_t min_len) {
    size_t n = strnlen(s, MACHINE_NAME_CAP);
    if (n < min_len || n >= MACHINE_NAME_CAP) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.' || c == '+';
        if (!ok) return false;
    }
    return true;
}

#define F(field) MACHINE_F_##field
#define NONE (-1)

/* Tile ids must stay far inside int32 and per-tile tables affordable. */
enum { MAX_TILES = 1 << 20, MAX_CHIPS = 64 };

static int check(const machine *m, problem *p) {
    /* Per-field floors, straight from the table. */
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) {
        const field_info *fi = &FIELDS[i];
        switch (fi->kind) {
        case K_STR:
            if (!name_ok(str_of(m, i), (size_t)fi->lo))
                return fail(p, i, NONE, NONE, "%s must be %.0f..%d characters from A-Z a-z 0-9 _ - . +",
                            fi->name, fi->lo, MACHINE_NAME_CAP - 1);
            break;
        case K_ADDR:
        case K_U32:
            if (u32_of(m, i) < fi->lo)
                return fail(p, i, NONE, NONE, "%s must be at least %.0f (got %" PRIu32 ")", fi->name,
                            fi->lo, u32_of(m, i));
            break;
        case K_F64:
            if (!(f64_of(m, i) >= fi->lo) || !isfinite(f64_of(m, i)))
                return fail(p, i, NONE, NONE, "%s must be a finite number of at least %g", fi->name, fi->lo);
            break;
        }
    }
    if (m->chips > MAX_CHIPS)
        return fail(p, F(chips), NONE, NONE, "chips must be at most %d (got %" PRIu32 ")", MAX_CHIPS, m->chips);
    if (m->chips > 1 && m->link_bytes_per_cycle == 0)
        return fail(p, F(link_bytes_per_cycle), F(chips), NONE,
                    "link_bytes_per_cycle must be at least 1 when chips is %" PRIu32 " (chips are joined by links)",
                    m->chips);
    if (m->tiles > MAX_TILES)
        return fail(p, F(tiles), NONE, NONE, "tiles must be at most %d (got %" PRIu32 ")", MAX_TILES, m->tiles);

    /* The memory map. */
    uint32_t el = m->memory_element_bytes;
    if (el & (el - 1))
        return fail(p, F(memory_element_bytes), NONE, NONE,
                    "memory_element_bytes must be a power of two (got %" PRIu32 ")", el);
    if (m->tile_memory_base >= m->tile_memory_end)
        return fail(p, F(tile_memory_end), F(tile_memory_base), NONE,
                    "tile_memory_end (0x%" PRIx32 ") must be above tile_memory_base (0x%" PRIx32 ")",
                    m->tile_memory_end, m->tile_memory_base);
    static const int aligned[] = {F(tile_memory_base), F(tile_memory_end), F(interleaved_base)};
    for (size_t k = 0; k < TS_COUNT(aligned); k++) {
        int i = aligned[k];
        if (u32_of(m, i) % el)
            return fail(p, i, F(memory_element_bytes), NONE,
                        "%s (0x%" PRIx32 ") must be a multiple of memory_element_bytes (%" PRIu32 ")",
                        FIELDS[i].name, u32_of(m, i), el);
    }
    if (m->interleaved_base <= m->tile_memory_base || m->interleaved_base > m->tile_memory_end)
        return fail(p, F(interleaved_base), F(tile_memory_end), F(tile_memory_base),
                    "interleaved_base (0x%" PRIx32 ") must be above tile_memory_base (0x%" PRIx32
                    ") and at most tile_memory_end (0x%" PRIx32 ")",
                    m->interleaved_base, m->tile_memory_base, m->tile_memory_end);
    uint64_t logical = (uint64_t)el * m->interleave_factor;
    if ((m->tile_memory_end - m->interleaved_base) % logical)
        return fail(p, F(interleaved_base), F(tile_memory_end), F(interleave_factor),
                    "the interleaved region 0x%" PRIx32 "..0x%" PRIx32 " must be a whole number of %" PRIu64
                    "-byte interleaved elements (memory_element_bytes * interleave_factor)",
                    m->interleaved_base, m->tile_memory_end, logical);
    if (m->code_limit <= m->tile_memory_base || m->code_limit > m->interleaved_base || m->code_limit % 4)
        return fail(p, F(code_limit), F(interleaved_base), F(tile_memory_base),
                    "code_limit (0x%" PRIx32 ") must be a multiple of 4 above tile_memory_base (0x%" PRIx32
                    ") and at most interleaved_base (0x%" PRIx32 "): code runs from the ordinary region only",
                    m->code_limit, m->tile_memory_base, m->interleaved_base);
    if (m->loader_limit <= m->tile_memory_base || m->loader_limit > m->tile_memory_end || m->loader_limit % 4)
        return fail(p, F(loader_limit), F(tile_memory_end), F(tile_memory_base),
                    "loader_limit (0x%" PRIx32 ") must be a multiple of 4 above tile_memory_base (0x%" PRIx32
                    ") and at most tile_memory_end (0x%" PRIx32 ")",
                    m->loader_limit, m->tile_memory_base, m->tile_memory_end);

    /* Exchange. */
    if (m->max_send_bytes % 4)
        return fail(p, F(max_send_bytes), NONE, NONE,
                    "max_send_bytes must be a multiple of 4, the exchange word (got %" PRIu32 ")",
                    m->max_send_bytes);
    if (m->table_budget_bytes > machine_tile_bytes(m))
        return fail(p, F(table_budget_bytes), F(tile_memory_end), F(tile_memory_base),
                    "table_budget_bytes (%" PRIu32 ") exceeds the tile memory (%" PRIu32 " bytes)",
                    m->table_budget_bytes, machine_tile_bytes(m));

    /* AMP panels: every operand dtype's panel depth must be whole and divide
     * the K block, so K padding serves f32, f16 and 8-bit alike. */
    uint64_t f32_row = (uint64_t)m->amp_col_panel * 4;
    if (m->amp_panel_bytes % f32_row)
        return fail(p, F(amp_panel_bytes), F(amp_col_panel), NONE,
                    "amp_panel_bytes (%" PRIu32 ") must be a multiple of amp_col_panel * 4 (%" PRIu64
                    "), one f32 row of a panel", m->amp_panel_bytes, f32_row);
    uint32_t depth8 = m->amp_panel_bytes / m->amp_col_panel;
    if (m->amp_k_block % depth8)
        return fail(p, F(amp_k_block), F(amp_panel_bytes), F(amp_col_panel),
                    "amp_k_block (%" PRIu32 ") must be a multiple of the 8-bit panel depth "
                    "amp_panel_bytes / amp_col_panel (%" PRIu32 ")", m->amp_k_block, depth8);
    return 0;
}

int machine_validate(const machine *m, diag *d) {
    problem p;
    if (check(m, &p) == 0) return 0;
    return diag_fail(d, "error: machine '%.*s': %s", MACHINE_NAME_CAP - 1, m->name, p.msg);
}

/* ---- JSON files ------------------------------------------------------- */

/* Byte offset of the top-level key `key` (its opening quote) in a JSON
 * object's text. jansson keeps no positions, so we scan: strings are
 * skipped whole, and only strings in key position at depth 1 compare. */
static bool key_offset(const src_text *s, const char *key, size_t *off) {
    size_t klen = strlen(key);
    int depth = 0;
    bool want_key = false;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->text[i];
        if (c == '"') {
            size_t start = i++;
            while (i < s->len && s->text[i] != '"') i += s->text[i] == '\\' ? 2 : 1;
            if (depth == 1 && want_key) {
                if (i - start - 1 == klen && memcmp(s->text + start + 1, key, klen) == 0) {
                    *off = start;
                    return true;
                }
                want_key = false;
            }
        } else if (c == '{' || c == '[') {
            depth++;
            want_key = c == '{' && depth == 1;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            want_key = true;
        }
    }
    return false;
}

static size_t first_token(const src_text *s) {
    size_t i = 0;
    while (i < s->len && s->text[i] && strchr(" \t\r\n", s->text[i])) i++;
    return i;
}

/* Reports msg at the key (or, if it cannot be found, at the file). */
static int fail_at_key(diag *d, const src_text *s, const char *key, const char *msg) {
    size_t off;
    if (!key || !key_offset(s, key, &off)) return diag_fail(d, "%s: error: %s", s->path, msg);
    int line, col;
    src_line_col(s, off, &line, &col);
    return diag_fail_at(d, s, line, col, "%s", msg);
}

/* The known key closest to `key`, or NULL if none is close enough to be a
 * plausible typo. */
static const char *closest_key(const char *key) {
    const char *names[MACHINE_FIELD_COUNT + 1] = {"base"};
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) names[i + 1] = FIELDS[i].name;
    return util_closest(key, names, MACHINE_FIELD_COUNT + 1);
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* "0x4c000" -> 0x4c000; false unless the whole string is 0x + 1..8 hex digits. */
static bool parse_hex(const char *s, uint32_t *out) {
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || !s[2] || strlen(s + 2) > 8) return false;
    uint32_t v = 0;
    for (const char *p = s + 2; *p; p++) {
        int dgt = *p >= '0' && *p <= '9'   ? *p - '0'
                  : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                  : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                           : -1;
        if (dgt < 0) return false;
        v = v << 4 | (uint32_t)dgt;
    }
    *out = v;
    return true;
}

static int set_u32(machine *m, int i, const json_t *v, char *msg, size_t cap) {
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > (json_int_t)UINT32_MAX) {
        snprintf(msg, cap, "%s: %" JSON_INTEGER_FORMAT " is out of range 0..4294967295", FIELDS[i].name, x);
        return -1;
    }
    *u32_at(m, i) = (uint32_t)x;
    return 0;
}

/* Stores JSON value v into field i of m; on a type or range error writes
 * the message to msg and returns -1. */
static int set_field(machine *m, int i, const json_t *v, char *msg, size_t cap) {
    const field_info *fi = &FIELDS[i];
    switch (fi->kind) {
    case K_STR:
        if (!json_is_string(v)) break;
        if (json_string_length(v) >= MACHINE_NAME_CAP) {
            snprintf(msg, cap, "%s is longer than %d characters", fi->name, MACHINE_NAME_CAP - 1);
            return -1;
        }
        snprintf(str_at(m, i), MACHINE_NAME_CAP, "%s", json_string_value(v));
        return 0;
    case K_ADDR:
        if (json_is_string(v)) {
            if (parse_hex(json_string_value(v), u32_at(m, i))) return 0;
            snprintf(msg, cap, "%s: \"%.40s\" is not a hex address like \"0x4c000\" (at most 8 digits)",
                     fi->name, json_string_value(v));
            return -1;
        }
        if (json_is_integer(v)) return set_u32(m, i, v, msg, cap);
        break;
    case K_U32:
        if (json_is_integer(v)) return set_u32(m, i, v, msg, cap);
        break;
    case K_F64:
        if (!json_is_number(v)) break;
        *f64_at(m, i) = json_number_value(v);
        return 0;
    }
    static const char *const want[] = {
        [K_STR] = "a string",
        [K_ADDR] = "an integer or a hex string like \"0x4c000\"",
        [K_U32] = "an integer",
        [K_F64] = "a number",
    };
    snprintf(msg, cap, "%s must be %s, not %s", fi->name, want[fi->kind], json_kind(v));
    return -1;
}

static int field_index(const char *name) {
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++)
        if (strcmp(FIELDS[i].name, name) == 0) return i;
    return -1;
}

/* Reads the object in root into m: "base" first, then every field given. */
static int load_object(const src_text *s, json_t *root, machine *m, diag *d) {
    char msg[1024], list[128];
    preset_list(list, sizeof list);
    if (!json_is_object(root)) {
        int line, col;
        src_line_col(s, first_token(s), &line, &col);
        return diag_fail_at(d, s, line, col, "a machine file holds one JSON object, not %s", json_kind(root));
    }
    memset(m, 0, sizeof *m);
    m->chips = 1;
    json_t *base = json_object_get(root, "base");
    if (base) {
        if (!json_is_string(base)) {
            snprintf(msg, sizeof msg, "base must be a preset name (%s), not %s", list, json_kind(base));
            return fail_at_key(d, s, "base", msg);
        }
        if (machine_preset(json_string_value(base), m) != 0) {
            snprintf(msg, sizeof msg, "unknown base machine '%.64s' (presets: %s)", json_string_value(base), list);
            return fail_at_key(d, s, "base", msg);
        }
    }
    bool given[MACHINE_FIELD_COUNT] = {0};
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "base") == 0) continue;
        int i = field_index(key);
        if (i < 0) {
            const char *near = closest_key(key);
            if (near) snprintf(msg, sizeof msg, "unknown field '%.64s' (did you mean '%s'?)", key, near);
            else snprintf(msg, sizeof msg, "unknown field '%.64s'", key);
            return fail_at_key(d, s, key, msg);
        }
        if (set_field(m, i, v, msg, sizeof msg) != 0) return fail_at_key(d, s, key, msg);
        given[i] = true;
    }
    if (!base) {
        int missing = 0, first = -1;
        for (int i = 0; i < MACHINE_FIELD_COUNT; i++) {
            if (given[i] || i >= MACHINE_F_chips) continue;  /* the chip fields default to one chip */
            if (first < 0) first = i;
            missing++;
        }
        if (first >= 0) {
            int line, col;
            src_line_col(s, first_token(s), &line, &col);
            return diag_fail_at(d, s, line, col,
                                "missing field '%s'%s: without \"base\" every field is required "
                                "(or start from a preset: \"base\": \"c600\")",
                                FIELDS[first].name, missing > 1 ? " and others" : "");
        }
    }
    normalise(m);
    problem p;
    if (check(m, &p) != 0) {
        for (int k = 0; k < 3 && p.field[k] != NONE; k++)
            if (given[p.field[k]]) return fail_at_key(d, s, FIELDS[p.field[k]].name, p.msg);
        /* Every field concerned came from the base: point at "base". */
        return fail_at_key(d, s, base ? "base" : NULL, p.msg);
    }
    return 0;
}

/* Parses NUL-terminated text (len bytes before the NUL); the key scan in
 * key_offset may look one byte past an unterminated string, at the NUL. */
static int load_text(const char *text, size_t len, const char *path, machine *m, diag *d) {
    src_text s = {path, text, len};
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return diag_fail_at(d, &s, err.line < 1 ? 1 : err.line, err.column < 1 ? 1 : err.column, "%s", err.text);
    machine tmp;
    int rc = load_object(&s, root, &tmp, d);
    if (rc == 0) *m = tmp;  /* m is untouched on error */
    json_decref(root);
    return rc;
}

int machine_from_json(const char *text, size_t len, const char *path, machine *m, diag *d) {
    char *copy = xmalloc(len + 1);  /* the text may be a slice of a larger buffer */
    memcpy(copy, text, len);
    copy[len] = 0;
    int rc = load_text(copy, len, path, m, d);
    free(copy);
    return rc;
}

static int load_file(const char *path, machine *m, diag *d) {
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, d) != 0) return -1;
    int rc = load_text(text, len, path, m, d);
    free(text);
    return rc;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int machine_resolve(const char *spec, machine *m, diag *d) { return machine_resolve_for(spec, NULL, NULL, m, d); }

int machine_resolve_for(const char *spec, const char *who, const char *what, machine *m, diag *d) {
    if (!spec) spec = PRESETS[0].name;
    if (ends_with(spec, ".json") || strchr(spec, '/')) return load_file(spec, m, d);
    if (machine_preset(spec, m) == 0) return 0;
    char list[128];
    preset_list(list, sizeof list);
    return diag_fail(d, "%s%serror: %s%sunknown machine '%s' (presets: %s; or a .json file)", who ? who : "", who ? ": " : "",
                     what ? what : "", what ? ": " : "", spec, list);
}

/* ---- writing ---------------------------------------------------------- */

static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

char *machine_to_json(const machine *m) {
    char *buf = NULL, val[64];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    TS_ASSERT(f);
    fputs("{\n", f);
    int last = MACHINE_FIELD_COUNT - 1;
    while (!machine_field_present(m, last)) last--;
    for (int i = 0; i <= last; i++) {
        fprintf(f, "  \"%s\": ", FIELDS[i].name);
        value_text(m, i, val, sizeof val);
        if (FIELDS[i].kind == K_STR) put_json_string(f, str_of(m, i));
        else if (FIELDS[i].kind == K_ADDR) fprintf(f, "\"%s\"", val);
        else fputs(val, f);
        fputs(i < last ? ",\n" : "\n", f);
    }
    fputs("}\n", f);
    TS_ASSERT(fclose(f) == 0);
    return buf;
}

uint64_t machine_fingerprint(const machine *m) {
    /* Each field as its name, a NUL and its value in 8 little-endian bytes
     * (integers zero-extended, doubles as their IEEE bits): independent of
     * number formatting, byte order and struct layout. */
    unsigned char buf[4096];
    size_t n = 0;
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) {
        if (FIELDS[i].kind == K_STR) continue;  /* a name is a label, not a property */
        if (!machine_field_present(m, i)) continue;
        uint64_t v = 0;
        if (FIELDS[i].kind == K_F64) {
            double x = f64_of(m, i);
            memcpy(&v, &x, sizeof v);
        } else {
            v = u32_of(m, i);
        }
        size_t len = strlen(FIELDS[i].name) + 1;
        TS_ASSERT(n + len + 8 <= sizeof buf);
        memcpy(buf + n, FIELDS[i].name, len);
        n += len;
        for (int b = 0; b < 8; b++) buf[n++] = (unsigned char)(v >> (8 * b));
    }
    return util_hash_bytes(buf, n, 0);
}

bool machine_equal(const machine *a, const machine *b) {
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) {
        switch (FIELDS[i].kind) {
        case K_STR:
            if (strncmp(str_of(a, i), str_of(b, i), MACHINE_NAME_CAP) != 0) return false;
            break;
        case K_ADDR:
        case K_U32:
            if (u32_of(a, i) != u32_of(b, i)) return false;
            break;
        case K_F64: {
            /* Bitwise, so a round trip must reproduce the exact double. */
            double x = f64_of(a, i), y = f64_of(b, i);
            if (memcmp(&x, &y, sizeof x) != 0) return false;
            break;
        }
        }
    }
    return true;
}

/* ---- derived figures -------------------------------------------------- */

uint32_t machine_tile_bytes(const machine *m) { return m->tile_memory_end - m->tile_memory_base; }

uint64_t machine_total_bytes(const machine *m) { return (uint64_t)m->tiles * machine_tile_bytes(m); }

bool machine_addr_interleaved(const machine *m, uint32_t addr) {
    return addr >= m->interleaved_base && addr < m->tile_memory_end;
}

uint32_t machine_amp_macs(const machine *m, dtype t) {
    if (dtype_is_f8(t)) return m->amp_macs_f8;
    if (t == DT_F32) return m->amp_macs_f32;
    if (t == DT_F16) return m->amp_macs_f16;
    return 0;  /* bf16, i32: no AMP path on IPU21; cast first */
}

uint32_t machine_amp_panel_depth(const machine *m, dtype t) {
    if (!machine_amp_macs(m, t)) return 0;
    return m->amp_panel_bytes / (m->amp_col_panel * (uint32_t)dtype_bytes(t));
}

double machine_peak_flops(const machine *m, dtype t) {
    return 2.0 * machine_amp_macs(m, t) * m->tiles * m->clock_hz;
}

/* ---- printing --------------------------------------------------------- */

/* Sizes inside one tile in KiB, always, so the rows of a memory map compare
 * at a glance: "624 KiB", "622.9 KiB". */
static void kib(char *buf, size_t cap, uint64_t bytes) {
    if (bytes % 1024 == 0) snprintf(buf, cap, "%" PRIu64 " KiB", bytes / 1024);
    else snprintf(buf, cap, "%.1f KiB", (double)bytes / 1024);
}

/* The value with a size where a size helps: addresses as an offset from
 * the base of tile memory, byte counts of a KiB or more in KiB. */
static void value_shown(const machine *m, int i, char *buf, size_t cap) {
    char val[64], size[32];
    value_text(m, i, val, sizeof val);
    const field_info *fi = &FIELDS[i];
    if (fi->kind == K_ADDR && i != F(tile_memory_base) && u32_of(m, i) >= m->tile_memory_base) {
        kib(size, sizeof size, u32_of(m, i) - m->tile_memory_base);
        snprintf(buf, cap, "%s (base+%s)", val, size);
    } else if (fi->kind == K_U32 && strncmp(fi->unit, "bytes", 5) == 0 && !strstr(fi->unit, "cycle") &&
               u32_of(m, i) >= 1024) {
        kib(size, sizeof size, u32_of(m, i));
        snprintf(buf, cap, "%s (%s)", val, size);
    } else {
        snprintf(buf, cap, "%s", val);
    }
}

void machine_print(FILE *f, const machine *m) {
    int wname = 0, wval = 0, wunit = 0;
    char val[128];
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) {
        if (!machine_field_present(m, i)) continue;
        value_shown(m, i, val, sizeof val);
        int a = (int)strlen(FIELDS[i].name), b = (int)strlen(val), c = (int)strlen(FIELDS[i].unit);
        wname = a > wname ? a : wname;
        wval = b > wval ? b : wval;
        wunit = c > wunit ? c : wunit;
    }
    fprintf(f, "machine %.*s (fingerprint %016" PRIx64 ")\n", MACHINE_NAME_CAP - 1, m->name,
            machine_fingerprint(m));
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) {
        if (!machine_field_present(m, i)) continue;
        value_shown(m, i, val, sizeof val);
        fprintf(f, "  %-*s  %-*s  %-*s  %s\n", wname, FIELDS[i].name, wval, val, wunit, FIELDS[i].unit,
                FIELDS[i].doc);
    }

    char a[32], b[32], c[32], e[32];
    uint32_t ordinary = m->interleaved_base - m->tile_memory_base;
    uint32_t inter = m->tile_memory_end - m->interleaved_base;
    uint64_t logical = (uint64_t)m->memory_element_bytes * m->interleave_factor;
    kib(a, sizeof a, machine_tile_bytes(m));
    kib(b, sizeof b, ordinary);
    kib(c, sizeof c, inter);
    kib(e, sizeof e, logical);
    fprintf(f, "derived\n");
    fprintf(f, "  tile memory      %s: ordinary %s + interleaved %s (%" PRIu64 " x %s)\n", a, b, c,
            logical ? inter / logical : 0, e);
    kib(a, sizeof a, m->code_limit - m->tile_memory_base);
    kib(b, sizeof b, m->loader_limit - m->tile_memory_base);
    fprintf(f, "  per tile         code up to %s; loadable %s\n", a, b);
    fmt_bytes(a, sizeof a, (double)machine_total_bytes(m));
    fprintf(f, "  total SRAM       %s over %" PRIu32 " tiles (%.1f MB)\n", a, m->tiles,
            (double)machine_total_bytes(m) / 1e6);
    char f8[32] = "none";
    if (m->amp_macs_f8) snprintf(f8, sizeof f8, "%.1f", machine_peak_flops(m, DT_F8E4M3) / 1e12);
    fprintf(f, "  peak TFLOPS      f32 %.1f, f16 %.1f, 8-bit %s (2 x macs x tiles x clock)\n",
            machine_peak_flops(m, DT_F32) / 1e12, machine_peak_flops(m, DT_F16) / 1e12, f8);
    fprintf(f, "  exchange         %.2f TB/s aggregate (%" PRIu32 " B/cycle x tiles x clock)\n",
            (double)m->exchange_bytes_per_cycle * m->tiles * m->clock_hz / 1e12, m->exchange_bytes_per_cycle);
    if (m->chips > 1)
        fprintf(f, "  chips            %" PRIu32 " in a ring, figures above per chip; links %.1f GB/s each way "
                   "(%" PRIu32 " B/cycle x clock)\n",
                m->chips, (double)m->link_bytes_per_cycle * m->clock_hz / 1e9, m->link_bytes_per_cycle);
}
