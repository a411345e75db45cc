/* test_machine.c: machine presets, JSON machine files and their errors, the
 * fingerprint. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "machine/machine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Computed once from c600; a change here means every recorded package
 * fingerprint changes, so it must be deliberate. */
#define C600_FINGERPRINT 0x2ef7d1852264e34dull

/* ---- temporary files -------------------------------------------------- */

static char g_dir[64];
static char *g_files[256];
static int g_nfiles;

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/tessel-machine-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    for (int i = 0; i < g_nfiles; i++) {
        unlink(g_files[i]);
        free(g_files[i]);
    }
    g_nfiles = 0;
    return rmdir(g_dir);
}

/* Writes text to a new file under the temporary directory; returns its path
 * (owned by the test run). */
static const char *write_file(const char *name, const char *text) {
    assert_true(g_nfiles < (int)(sizeof g_files / sizeof g_files[0]));
    char *path = path_join(g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    g_files[g_nfiles++] = path;
    return path;
}

/* ---- presets ---------------------------------------------------------- */

static void test_presets(void **state) {
    (void)state;
    int n = 0;
    for (const char *name; (name = machine_preset_name(n)); n++) {
        machine a, b;
        diag d = {0};
        assert_int_equal(machine_preset(name, &a), 0);
        assert_string_equal(a.name, name);
        assert_int_equal(machine_validate(&a, &d), 0);
        assert_int_equal(machine_resolve(name, &b, &d), 0);
        assert_true(machine_equal(&a, &b));
    }
    assert_int_equal(n, 7);

    machine m, def;
    diag d = {0};
    assert_int_equal(machine_resolve(NULL, &def, &d), 0);
    assert_string_equal(def.name, "c600");

    assert_int_equal(machine_preset("c600", &m), 0);
    assert_int_equal(m.tiles, 1472);
    assert_int_equal(machine_tile_bytes(&m), 624 * 1024);
    assert_int_equal(m.tile_memory_end - m.interleaved_base, 416 * 1024);
    assert_int_equal(m.memory_element_bytes * m.interleave_factor, 32 * 1024);
    assert_false(machine_addr_interleaved(&m, 0x7fffc));
    assert_true(machine_addr_interleaved(&m, 0x80000));
    assert_true(machine_addr_interleaved(&m, 0xe7ffc));
    assert_false(machine_addr_interleaved(&m, 0xe8000));
    assert_int_equal(machine_amp_macs(&m, DT_F32), 16);
    assert_int_equal(machine_amp_macs(&m, DT_F16), 64);
    assert_int_equal(machine_amp_macs(&m, DT_F8E4M3), 128);
    assert_int_equal(machine_amp_macs(&m, DT_F8E5M2), 128);
    assert_int_equal(machine_amp_macs(&m, DT_F143), 128);
    assert_int_equal(machine_amp_macs(&m, DT_BF16), 0);
    assert_int_equal(machine_amp_macs(&m, DT_I32), 0);
    assert_int_equal(machine_amp_panel_depth(&m, DT_F32), 8);
    assert_int_equal(machine_amp_panel_depth(&m, DT_F16), 16);
    assert_int_equal(machine_amp_panel_depth(&m, DT_F143), 32);
    assert_int_equal(machine_amp_panel_depth(&m, DT_BF16), 0);
    /* The product brief: 280 TFLOPS f16, 560 f8 (about, at 1.5 GHz). */
    assert_true(fabs(machine_peak_flops(&m, DT_F16) / 1e12 - 282.6) < 0.1);
    assert_true(fabs(machine_peak_flops(&m, DT_F8E4M3) / 1e12 - 565.2) < 0.1);
    assert_true(machine_total_bytes(&m) == 1472ull * 624 * 1024);

    assert_int_equal(machine_preset("mk2", &m), 0);
    assert_int_equal(machine_amp_macs(&m, DT_F8E4M3), 0);
    assert_int_equal(machine_amp_panel_depth(&m, DT_F8E4M3), 0);
    assert_true(m.clock_hz == 1.33e9);

    assert_int_equal(machine_preset("tiny", &m), 0);
    assert_int_equal(m.tiles, 16);
    assert_int_equal(machine_tile_bytes(&m), 128 * 1024);
    assert_true(m.tile_memory_base < m.interleaved_base && m.interleaved_base < m.tile_memory_end);
    assert_true(m.loader_limit < m.tile_memory_end);

    assert_int_equal(machine_preset("c700", &m), -1);
}

static void test_unknown_preset(void **state) {
    (void)state;
    machine m;
    diag d = {0};
    assert_int_equal(machine_resolve("x", &m, &d), -1);
    assert_string_equal(d.text, "error: unknown machine 'x' (presets: c600, mk2, tiny, c600x2, c600x4, tinyx2, tinyx4; or a .json file)\n");
}

static void test_validate_programmatic(void **state) {
    (void)state;
    machine m;
    diag d = {0};
    machine_preset("c600", &m);
    m.tiles = 0;
    assert_int_equal(machine_validate(&m, &d), -1);
    assert_string_equal(d.text, "error: machine 'c600': tiles must be at least 1 (got 0)\n");
}

/* ---- JSON ------------------------------------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    for (int i = 0; machine_preset_name(i); i++) {
        machine a, b;
        diag d = {0};
        machine_preset(machine_preset_name(i), &a);
        char *text = machine_to_json(&a);
        char file[MACHINE_NAME_CAP + 8];
        snprintf(file, sizeof file, "%s.json", a.name);
        const char *path = write_file(file, text);
        if (machine_resolve(path, &b, &d) != 0) fail_msg("%s", d.text);
        assert_true(machine_equal(&a, &b));
        assert_true(machine_fingerprint(&a) == machine_fingerprint(&b));
        char *again = machine_to_json(&b);
        assert_string_equal(text, again);
        free(text);
        free(again);
    }
}

/* Text that is a slice of a larger buffer (no NUL after it) loads the same
 * as a file, and its errors name the given path and line. */
static void test_from_json_text(void **state) {
    (void)state;
    machine a, b;
    diag d = {0};
    machine_preset("tiny", &a);
    char *text = machine_to_json(&a);
    size_t len = strlen(text);
    char *slice = malloc(len + 8);
    memcpy(slice, text, len);
    memset(slice + len, '"', 8);  /* trailing bytes that are not part of the text */
    if (machine_from_json(slice, len, "pkg (machine)", &b, &d) != 0) fail_msg("%s", d.text);
    assert_true(machine_equal(&a, &b));

    static const char bad[] = "{\n  \"base\": \"tiny\",\n  \"tiles\": 0\n}\n";
    machine before = b;
    assert_int_equal(machine_from_json(bad, strlen(bad), "pkg (machine)", &b, &d), -1);
    assert_non_null(strstr(d.text, "pkg (machine):3:3: error: tiles must be at least 1"));
    assert_true(machine_equal(&b, &before));

    d = (diag){0};
    assert_int_equal(machine_from_json("{\"tiles\": ", 11, "pkg (machine)", &b, &d), -1);
    assert_non_null(strstr(d.text, "pkg (machine):1:"));
    free(slice);
    free(text);
}

static void test_base_override(void **state) {
    (void)state;
    machine m, c600;
    diag d = {0};
    machine_preset("c600", &c600);
    const char *path = write_file("override.json",
                                  "{\n"
                                  "  \"base\": \"c600\",\n"
                                  "  \"name\": \"c600-1mib\",\n"
                                  "  \"tile_memory_base\": \"0x40000\",\n"
                                  "  \"tile_memory_end\": 1310720,\n"
                                  "  \"loader_limit\": \"0x13FBB0\",\n"
                                  "  \"clock_hz\": 1000000000\n"
                                  "}\n");
    if (machine_resolve(path, &m, &d) != 0) fail_msg("%s", d.text);
    assert_string_equal(m.name, "c600-1mib");
    assert_int_equal(m.tile_memory_base, 0x40000);
    assert_int_equal(m.tile_memory_end, 0x140000);
    assert_int_equal(machine_tile_bytes(&m), 1024 * 1024);
    assert_int_equal(m.loader_limit, 0x13fbb0);
    assert_true(m.clock_hz == 1e9);
    assert_int_equal(m.interleaved_base, c600.interleaved_base);
    assert_int_equal(m.amp_macs_f8, c600.amp_macs_f8);

    /* The 8-bit rate alone may be 0: that is how mk2-like machines say so. */
    path = write_file("nof8.json", "{\"base\": \"c600\", \"amp_macs_f8\": 0}");
    if (machine_resolve(path, &m, &d) != 0) fail_msg("%s", d.text);
    assert_int_equal(machine_amp_macs(&m, DT_F8E4M3), 0);

    /* The example shipped in machines/. */
    const char *src = getenv("TESSEL_SOURCE_DIR");
    char *example = path_join(src ? src : ".", "machines/c600-1mib.json");
    if (access(example, R_OK) == 0) {
        if (machine_resolve(example, &m, &d) != 0) fail_msg("%s", d.text);
        assert_string_equal(m.name, "c600-1mib");
        assert_int_equal(machine_tile_bytes(&m), 1024 * 1024);
    } else {
        print_message("skipping %s: not found (set TESSEL_SOURCE_DIR)\n", example);
    }
    free(example);
}

/* One malformed file: resolve must fail, leave the machine alone and say
 * where. `where` is "L:C" (or "L:" when only the line is stable). */
typedef struct bad_case {
    const char *text;
    const char *where;
    const char *msg;
} bad_case;

static const bad_case BAD[] = {
    /* syntax, reported by jansson */
    {"{\n  \"tiles\": 16,\n  \"name\" \"x\"\n}\n", "3:", "':' expected"},
    {"", "1:1", "'[' or '{' expected"},
    {"{\n  \"tiles\": 1,\n  \"tiles\": 2\n}\n", "3:", "duplicate object key"},
    {"{\"tiles\": 99999999999999999999}", "1:", "too big integer"},
    /* shape */
    {"\n  [1, 2]\n", "2:3", "a machine file holds one JSON object, not an array"},
    {"{\n  \"name\": \"x\"\n}\n", "1:1", "missing field 'tiles' and others: without \"base\" every field is required"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memroy_end\": 1\n}\n", "3:3",
     "unknown field 'tile_memroy_end' (did you mean 'tile_memory_end'?)"},
    {"{\n  \"base\": \"c600\",\n  \"Tiles\": 1\n}\n", "3:3", "unknown field 'Tiles' (did you mean 'tiles'?)"},
    {"{\n  \"base\": \"c600\",\n  \"zzzzzzzz\": 1\n}\n", "3:3", "unknown field 'zzzzzzzz'\n"},
    {"{\n  \"base\": \"c700\"\n}\n", "2:3", "unknown base machine 'c700' (presets: c600, mk2, tiny, c600x2, c600x4, tinyx2, tinyx4)"},
    {"{\n  \"base\": 5\n}\n", "2:3", "base must be a preset name (c600, mk2, tiny, c600x2, c600x4, tinyx2, tinyx4), not an integer"},
    /* types */
    {"{\n  \"base\": \"c600\",\n  \"tiles\": \"16\"\n}\n", "3:3", "tiles must be an integer, not a string"},
    {"{\n  \"base\": \"c600\",\n  \"tiles\": 16.5\n}\n", "3:3", "tiles must be an integer, not a real number"},
    {"{\n  \"base\": \"c600\",\n  \"tiles\": -1\n}\n", "3:3", "tiles: -1 is out of range 0..4294967295"},
    {"{\n  \"base\": \"c600\",\n  \"tiles\": 4294967296\n}\n", "3:3", "out of range"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_end\": \"0xzz\"\n}\n", "3:3", "is not a hex address"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_end\": \"0x100000000\"\n}\n", "3:3", "is not a hex address"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_end\": true\n}\n", "3:3",
     "tile_memory_end must be an integer or a hex string like \"0x4c000\", not a boolean"},
    {"{\n  \"base\": \"c600\",\n  \"clock_hz\": \"fast\"\n}\n", "3:3", "clock_hz must be a number, not a string"},
    {"{\n  \"base\": \"c600\",\n  \"name\": 7\n}\n", "3:3", "name must be a string, not an integer"},
    /* ranges and consistency; the key at fault is the one the file set */
    {"{\"base\": \"c600\", \"tiles\": 0}", "1:18", "tiles must be at least 1 (got 0)"},
    {"{\n  \"base\": \"c600\",\n  \"tiles\": 2000000\n}\n", "3:3", "tiles must be at most"},
    {"{\n  \"base\": \"c600\",\n  \"name\": \"bad name!\"\n}\n", "3:3", "name must be 1..63 characters"},
    {"{\n  \"base\": \"c600\",\n  \"name\": \"\"\n}\n", "3:3", "name must be 1..63 characters"},
    {"{\n  \"base\": \"c600\",\n  \"name\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n}\n", "3:3",
     "name is longer than 63 characters"},
    {"{\n  \"base\": \"c600\",\n  \"clock_hz\": 0\n}\n", "3:3", "clock_hz must be a finite number of at least 1"},
    {"{\n  \"base\": \"c600\",\n  \"amp_macs_f16\": 0\n}\n", "3:3", "amp_macs_f16 must be at least 1"},
    {"{\n  \"base\": \"c600\",\n  \"memory_element_bytes\": 12288\n}\n", "3:3", "must be a power of two"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_base\": \"0xe8000\"\n}\n", "3:3",
     "tile_memory_end (0xe8000) must be above tile_memory_base (0xe8000)"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_end\": \"0xe8004\"\n}\n", "3:3",
     "tile_memory_end (0xe8004) must be a multiple of memory_element_bytes (16384)"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_end\": \"0x70000\"\n}\n", "3:3",
     "interleaved_base (0x80000) must be above tile_memory_base"},
    {"{\n  \"base\": \"c600\",\n  \"interleaved_base\": \"0xf0000\"\n}\n", "3:3", "interleaved_base (0xf0000) must be"},
    {"{\n  \"base\": \"c600\",\n  \"tile_memory_end\": \"0xec000\",\n  \"loader_limit\": \"0xebbb0\"\n}\n", "3:3",
     "must be a whole number of 32768-byte interleaved elements"},
    {"{\n  \"base\": \"c600\",\n  \"interleave_factor\": 3\n}\n", "3:3", "whole number of 49152-byte"},
    {"{\n  \"base\": \"c600\",\n  \"code_limit\": \"0x90000\"\n}\n", "3:3", "code_limit (0x90000) must be"},
    {"{\n  \"base\": \"c600\",\n  \"code_limit\": 311298\n}\n", "3:3", "code_limit (0x4c002) must be a multiple of 4"},
    {"{\n  \"base\": \"c600\",\n  \"loader_limit\": \"0xe8010\"\n}\n", "3:3", "loader_limit (0xe8010) must be"},
    {"{\n  \"base\": \"c600\",\n  \"max_send_bytes\": 250\n}\n", "3:3", "max_send_bytes must be a multiple of 4"},
    {"{\n  \"base\": \"c600\",\n  \"table_budget_bytes\": 1000000\n}\n", "3:3",
     "table_budget_bytes (1000000) exceeds the tile memory (638976 bytes)"},
    {"{\n  \"base\": \"c600\",\n  \"amp_panel_bytes\": 500\n}\n", "3:3", "must be a multiple of amp_col_panel * 4"},
    {"{\n  \"base\": \"c600\",\n  \"amp_k_block\": 48\n}\n", "3:3", "amp_k_block (48) must be a multiple of the 8-bit"},
};

static void test_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char file[32];
        snprintf(file, sizeof file, "bad%zu.json", i);
        const char *path = write_file(file, BAD[i].text);
        machine m, before;
        machine_preset("tiny", &m);
        before = m;
        diag d = {0};
        int rc = machine_resolve(path, &m, &d);
        char want[256];
        snprintf(want, sizeof want, "%s:%s", path, BAD[i].where);
        if (rc != -1 || strncmp(d.text, want, strlen(want)) != 0 || !strstr(d.text, "error: ") ||
            !strstr(d.text, BAD[i].msg))
            fail_msg("case %zu: want '%s' ... '%s', got rc %d:\n%s", i, want, BAD[i].msg, rc, d.text);
        assert_true(machine_equal(&m, &before));
    }

    machine m;
    diag d = {0};
    assert_int_equal(machine_resolve("/nonexistent/x.json", &m, &d), -1);
    assert_non_null(strstr(d.text, "/nonexistent/x.json: error: cannot open"));
}

/* The caret line shows the offending key. */
static void test_error_caret(void **state) {
    (void)state;
    const char *path = write_file("caret.json", "{\n  \"base\": \"c600\",\n    \"tiles\": 0\n}\n");
    machine m;
    diag d = {0};
    assert_int_equal(machine_resolve(path, &m, &d), -1);
    char want[512];
    snprintf(want, sizeof want,
             "%s:3:5: error: tiles must be at least 1 (got 0)\n"
             "        \"tiles\": 0\n"
             "        ^\n",
             path);
    assert_string_equal(d.text, want);
}

/* ---- fingerprint ------------------------------------------------------ */

static void expect_fingerprint(const char *field, uint64_t before, const machine *m, bool same) {
    uint64_t after = machine_fingerprint(m);
    if ((after == before) != same)
        fail_msg("changing %s %s the fingerprint", field, same ? "changed" : "did not change");
}

static void test_fingerprint(void **state) {
    (void)state;
    machine c600, other;
    machine_preset("c600", &c600);
    uint64_t fp = machine_fingerprint(&c600);
    if (fp != C600_FINGERPRINT) fail_msg("c600 fingerprint is 0x%016llx", (unsigned long long)fp);

    /* Every field but the name takes part: change one at a time, by as
     * little as its type allows. */
#define MUTATE_STR(f) snprintf(m.f, sizeof m.f, "renamed")
#define MUTATE_ADDR(f) m.f += 4
#define MUTATE_U32(f) m.f += 1
#define MUTATE_F64(f) m.f = nextafter(m.f, INFINITY)
#define SAME_STR true
#define SAME_ADDR false
#define SAME_U32 false
#define SAME_F64 false
    /* On one chip the link fields do not exist; on several each counts. */
    machine x4;
    machine_preset("c600x4", &x4);
    uint64_t fp4 = machine_fingerprint(&x4);
    assert_true(fp4 != fp);
#define X(kind, field, lo, unit, doc)                                                      \
    {                                                                                      \
        machine m = c600;                                                                  \
        MUTATE_##kind(field);                                                              \
        bool link = MACHINE_F_##field > MACHINE_F_chips;                                   \
        expect_fingerprint(#field, fp, &m, SAME_##kind || link);                           \
        m = x4;                                                                            \
        MUTATE_##kind(field);                                                              \
        expect_fingerprint(#field " (4 chips)", fp4, &m, SAME_##kind);                     \
    }
    MACHINE_FIELDS(X)
#undef X

    machine_preset("mk2", &other);
    assert_true(machine_fingerprint(&other) != fp);
    machine_preset("tiny", &other);
    assert_true(machine_fingerprint(&other) != fp);
}

static void test_print(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    machine m;
    machine_preset("c600", &m);
    machine_print(f, &m);
    machine_preset("mk2", &m);
    machine_print(f, &m);
    fclose(f);
    static const char *const want[] = {
        "machine c600 (fingerprint 2ef7d1852264e34d)",
        "tile_memory_end                   0xe8000 (base+624 KiB)",
        "multiply-adds/cycle/tile",
        "ordinary 208 KiB + interleaved 416 KiB (13 x 32 KiB)",
        "f16 282.6, 8-bit 565.2",
        "machine mk2",
        "8-bit none",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(buf, want[i])) fail_msg("print lacks '%s':\n%s", want[i], buf);
    /* Every field of a one-chip machine appears, by name; no chip field does. */
    for (int i = 0; i < MACHINE_F_chips; i++) assert_non_null(strstr(buf, machine_field_name(i)));
    for (int i = MACHINE_F_chips; i < MACHINE_FIELD_COUNT; i++) assert_null(strstr(buf, machine_field_name(i)));
    free(buf);

    f = open_memstream(&buf, &len);
    machine_preset("c600x4", &m);
    machine_print(f, &m);
    fclose(f);
    for (int i = 0; i < MACHINE_FIELD_COUNT; i++) assert_non_null(strstr(buf, machine_field_name(i)));
    if (!strstr(buf, "chips            4 in a ring")) fail_msg("print lacks the chips line:\n%s", buf);
    free(buf);
}

/* ---- several chips ---------------------------------------------------- */

static void test_chips(void **state) {
    (void)state;
    machine one, x4, back;
    diag d = {0};
    machine_preset("c600", &one);
    machine_preset("c600x4", &x4);
    assert_int_equal(one.chips, 1);
    assert_int_equal(x4.chips, 4);
    assert_true(x4.link_bytes_per_cycle > 0 && x4.link_latency_cycles > 0 && x4.chip_sync_cycles > 0);
    assert_int_equal(x4.tiles, one.tiles);

    /* One chip of c600x4 is c600, name and fingerprint included. */
    back = machine_one_chip(&x4, NULL);
    assert_true(machine_equal(&back, &one));
    back = machine_one_chip(&x4, "chip0");
    assert_string_equal(back.name, "chip0");
    assert_true(machine_fingerprint(&back) == machine_fingerprint(&one));

    /* A one-chip machine's JSON has no chip field; loading it gives one chip. */
    char *text = machine_to_json(&one);
    assert_null(strstr(text, "chips"));
    assert_null(strstr(text, "link_"));
    free(text);
    text = machine_to_json(&x4);
    assert_non_null(strstr(text, "\"chips\": 4"));
    free(text);

    /* A file may make a preset several chips, but not without links; and a
     * one-chip machine's link figures are dropped, not kept half-meaningful. */
    const char *path = write_file("x3.json", "{\"base\": \"c600x2\", \"chips\": 3}");
    assert_int_equal(machine_resolve(path, &back, &d), 0);
    assert_int_equal(back.chips, 3);
    assert_int_equal(back.link_bytes_per_cycle, x4.link_bytes_per_cycle);
    path = write_file("nolink.json", "{\"base\": \"c600\",\n \"chips\": 2}");
    assert_int_equal(machine_resolve(path, &back, &d), -1);
    if (!strstr(d.text, "nolink.json:2:") || !strstr(d.text, "link_bytes_per_cycle must be at least 1"))
        fail_msg("%s", d.text);
    d = (diag){0};
    path = write_file("one.json", "{\"base\": \"c600x4\", \"chips\": 1}");
    assert_int_equal(machine_resolve(path, &back, &d), 0);
    assert_int_equal(back.link_bytes_per_cycle, 0);
    assert_true(machine_fingerprint(&back) == machine_fingerprint(&one));
    path = write_file("many.json", "{\"base\": \"c600x4\", \"chips\": 65}");
    assert_int_equal(machine_resolve(path, &back, &d), -1);
    if (!strstr(d.text, "chips must be at most 64")) fail_msg("%s", d.text);
    d = (diag){0};
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_unknown_preset),
        cmocka_unit_test(test_validate_programmatic),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_from_json_text),
        cmocka_unit_test(test_base_override),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_error_caret),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_print),
        cmocka_unit_test(test_chips),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
