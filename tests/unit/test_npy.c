/* test_npy.c: .npy round trips, every rejection on hand-built images, every
 * truncation, and numpy itself (when installed) as the independent party. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "num/num.h"

static char tmp_dir[64]; /* made by setup, emptied by teardown */

static int setup(void **state) {
    (void)state;
    strcpy(tmp_dir, "/tmp/tessel_npy_XXXXXX");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    DIR *dir = opendir(tmp_dir);
    if (!dir) return -1;
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char *p = path_join(tmp_dir, e->d_name);
        unlink(p);
        free(p);
    }
    closedir(dir);
    return rmdir(tmp_dir);
}

static char *tmp_path(const char *name) { return path_join(tmp_dir, name); }

/* A .npy image: magic, version major.0, header length, header text, then
 * data_bytes bytes of a counting pattern. */
static uint8_t *build(int major, const char *hdr, size_t data_bytes, size_t *len) {
    size_t h = strlen(hdr), len_bytes = major == 1 ? 2 : 4, at = 8 + len_bytes;
    *len = at + h + data_bytes;
    uint8_t *p = malloc(*len);
    memcpy(p, "\x93NUMPY", 6);
    p[6] = (uint8_t)major;
    p[7] = 0;
    for (size_t i = 0; i < len_bytes; i++) p[8 + i] = (uint8_t)(h >> (8 * i));
    memcpy(p + at, hdr, h);
    for (size_t i = 0; i < data_bytes; i++) p[at + h + i] = (uint8_t)(i * 7 + 1);
    return p;
}

/* Parses from an exactly-sized heap copy, so a sanitizer sees any overread. */
static int parse_exact(const uint8_t *img, size_t len, npy_array *a, diag *d) {
    uint8_t *copy = malloc(len ? len : 1);
    if (len) memcpy(copy, img, len);
    int rc = npy_parse(copy, len, "bad.npy", a, d);
    free(copy);
    return rc;
}

static void expect_fail(const uint8_t *img, size_t len, const char *want) {
    npy_array a;
    diag d = {0};
    int rc = parse_exact(img, len, &a, &d);
    if (rc == 0) fail_msg("accepted; expected an error containing \"%s\"", want);
    if (!strstr(d.text, "bad.npy: error: ") || !strstr(d.text, want))
        fail_msg("message \"%s\" lacks \"%s\"", d.text, want);
    assert_null(a.data);
}

/* ---- rejections ------------------------------------------------------- */

static void test_rejects(void **state) {
    (void)state;
    static const struct {
        int major;
        const char *hdr;
        size_t data_bytes;
        const char *want;
    } cases[] = {
        {4, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 12, "version 4.0 (supported: 1.0, 2.0, 3.0)"},
        {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }\n", 12, "unsupported dtype '>f4' (supported: '<f4', '<f2', '<i4', '<f8', '<i8')"},
        {1, "{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }\n", 24, "unsupported dtype '>f8'"},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n", 12, "data is 12 bytes but 3 elements of float64 need 24"},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }\n", 3, "unsupported dtype '|u1'"},
        {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }\n", 12, "structured"},
        {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", 24, "Fortran-order"},
        {1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }\n", 12, "expected True or False"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }\n", 0, "negative dimension"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", 0, "does not fit in 64 bits"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", 0, "more than 2^63"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }\n", 0, "overflows 64 bits"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }\n", 4, "rank above the maximum of 8"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 11, "data is 11 bytes but 3 elements of f32 need 12 (file truncated)"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 13, "has trailing bytes"},
        {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }\n", 0, "data is 0 bytes but 1 elements of i32 need 4"},
        {1, "{'descr': '<f4', 'fortran_order': False, }\n", 12, "missing key 'shape'"},
        {1, "{'fortran_order': False, 'shape': (3,), }\n", 12, "missing key 'descr'"},
        {1, "{'descr': '<f4', 'shape': (3,), }\n", 12, "missing key 'fortran_order'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'foo': 1}\n", 12, "unknown key 'foo'"},
        {1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}\n", 12, "duplicate key 'descr'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }\n", 12, "rank 1 is written (N,)"},
        {1, "{'descr' '<f4', 'fortran_order': False, 'shape': (3,), }\n", 12, "bad.npy: error: header byte 19: expected ':'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x\n", 12, "after the header dict"},
        {1, "{'descr': '<f4, 'fortran_order': False, 'shape': (3,)}\n", 12, "unsupported dtype '<f4, '"},
        {1, "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}\n", 12, "header byte 26: expected ',' or '}'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x\n", 12, "unterminated string"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,), }\n", 12, "expected ',' or ')'"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,", 12, "unterminated shape"},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", 12, "unterminated header dict"},
        {1, "{'descr': '<\\f4', 'fortran_order': False, 'shape': (3,)}", 12, "escape sequences"},
        {1, "[1]\n", 0, "header byte 10: expected '{'"},
        {1, "", 0, "header byte 10: expected '{', found the end of the header"},
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}\n", 0, "data is 0 bytes"},
    };
    for (size_t i = 0; i < TS_COUNT(cases); i++) {
        size_t len;
        uint8_t *img = build(cases[i].major, cases[i].hdr, cases[i].data_bytes, &len);
        expect_fail(img, len, cases[i].want);
        free(img);
    }
    /* Problems before the header. */
    size_t len;
    uint8_t *img = build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 12, &len);
    expect_fail((const uint8_t *)"\x93NUMPX\x01\x00", 8, "not a .npy file");
    expect_fail(img, 3, "not a .npy file");
    expect_fail(img, 7, "truncated before the format version");
    expect_fail(img, 9, "truncated before the header length");
    img[7] = 1;
    expect_fail(img, len, "version 1.1");
    img[7] = 0;
    img[8] = 0xff; /* header length 0x..ff runs past the end */
    expect_fail(img, len, "runs past the end of the file");
    free(img);
    img = build(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 12, &len);
    img[11] = 0x80; /* a 4-byte length near 2^31 */
    expect_fail(img, len, "runs past the end of the file");
    free(img);
}

/* A valid image cut at every length fails cleanly. */
static void test_truncations(void **state) {
    (void)state;
    for (int major = 1; major <= 3; major++) {
        size_t len;
        uint8_t *img = build(major, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }          \n", 12, &len);
        npy_array a;
        diag d = {0};
        assert_int_equal(parse_exact(img, len, &a, &d), 0);
        npy_free(&a);
        for (size_t cut = 0; cut < len; cut++) {
            diag dc = {0};
            if (parse_exact(img, cut, &a, &dc) == 0) fail_msg("version %d cut at %zu accepted", major, cut);
            assert_non_null(strstr(dc.text, "bad.npy: error: "));
        }
        free(img);
    }
}

/* ---- accepted variants ------------------------------------------------ */

static void expect_ok(int major, const char *hdr, size_t data_bytes, dtype t, int rank, const int64_t *dims) {
    size_t len;
    uint8_t *img = build(major, hdr, data_bytes, &len);
    npy_array a;
    diag d = {0};
    if (parse_exact(img, len, &a, &d)) fail_msg("rejected %s: %s", hdr, d.text);
    assert_int_equal(a.dtype, t);
    assert_int_equal(a.rank, rank);
    uint64_t numel = 1; /* unsigned: a zero axis after huge ones may wrap first */
    for (int i = 0; i < rank; i++) {
        assert_int_equal(a.dim[i], dims[i]);
        numel *= (uint64_t)dims[i];
    }
    assert_int_equal(a.numel, numel);
    assert_memory_equal(a.data, img + len - data_bytes, data_bytes);
    npy_free(&a);
    assert_null(a.data);
    free(img);
}

static void test_accepts(void **state) {
    (void)state;
    const int64_t d23[] = {2, 3}, d1[] = {1}, d0[] = {0, 5}, big0[] = {4611686018427387904, 4, 0};
    expect_ok(1, "{'shape': (2, 3), 'fortran_order': False, 'descr': '<i4'}", 24, DT_I32, 2, d23);
    expect_ok(1, "{ 'descr' : '<f2' ,\n\t'fortran_order':False,'shape':( 2 , 3 , ) }   \n", 12, DT_F16, 2, d23);
    expect_ok(1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1,)}", 4, DT_F32, 1, d1);
    expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n", 24, DT_F32, 2, d23);
    expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", 4, DT_F32, 0, NULL);
    expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }\n", 0, DT_F32, 2, d0);
    expect_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4, 0), }\n", 0, DT_F32, 3,
              big0);
    expect_ok(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, DT_F32, 2, d23);
    expect_ok(3, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }\n", 12, DT_F16, 2, d23);
}

/* ---- write then read -------------------------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    static const dtype types[] = {DT_F32, DT_F16, DT_I32};
    static const int64_t dims[] = {3, 2, 4, 1};
    for (size_t ti = 0; ti < TS_COUNT(types); ti++)
        for (int rank = 0; rank <= 4; rank++) {
            npy_array a = {.dtype = types[ti], .rank = rank, .numel = 1};
            for (int i = 0; i < rank; i++) a.numel *= a.dim[i] = dims[i];
            size_t bytes = (size_t)a.numel * (size_t)dtype_bytes(a.dtype);
            uint8_t *data = malloc(bytes);
            for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)(i * 37 + ti);
            a.data = data;
            char *path = tmp_path("rt.npy");
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(npy_write(f, &a), 0);
            long file_bytes = ftell(f);
            fclose(f);
            /* numpy's layout: data starts at a multiple of 64, after a '\n'. */
            assert_int_equal((file_bytes - (long)bytes) % 64, 0);
            npy_array b;
            diag d = {0};
            assert_int_equal(npy_read(path, &b, &d), 0);
            assert_int_equal(b.dtype, a.dtype);
            assert_int_equal(b.rank, rank);
            assert_int_equal(b.numel, a.numel);
            assert_memory_equal(b.dim, a.dim, (size_t)rank * sizeof(int64_t));
            assert_memory_equal(b.data, data, bytes);
            npy_free(&b);
            free(data);
            free(path);
        }
}

static void test_write_header_text(void **state) {
    (void)state;
    float v[3] = {1, 2, 3};
    npy_array a = {.dtype = DT_F32, .rank = 1, .dim = {3}, .numel = 3, .data = v};
    char *path = tmp_path("hdr.npy");
    FILE *f = fopen(path, "wb");
    assert_int_equal(npy_write(f, &a), 0);
    fclose(f);
    char *buf;
    size_t len;
    diag d = {0};
    assert_int_equal(file_read_all(path, &buf, &len, &d), 0);
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
    assert_int_equal(len, 128 + 12); /* 10 + 58 header bytes pad up to 128 */
    assert_memory_equal(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
    assert_memory_equal(buf + 10, want, strlen(want));
    for (size_t i = 10 + strlen(want); i < 127; i++) assert_int_equal(buf[i], ' ');
    assert_int_equal(buf[127], '\n');
    free(buf);
    free(path);
    /* Only the three file dtypes and ranks up to NPY_MAX_RANK can be written. */
    f = tmpfile();
    a.dtype = DT_BF16;
    assert_int_equal(npy_write(f, &a), -1);
    a.dtype = DT_F32;
    a.rank = NPY_MAX_RANK + 1;
    assert_int_equal(npy_write(f, &a), -1);
    a.rank = 1;
    a.numel = 4; /* not the product of dim */
    assert_int_equal(npy_write(f, &a), -1);
    a = (npy_array){.dtype = DT_F32, .rank = 2, .dim = {4294967296, 4294967296}, .numel = 0, .data = v};
    assert_int_equal(npy_write(f, &a), -1); /* 2^64 elements wrap to 0 */
    fclose(f);
    npy_array b;
    d = (diag){0};
    assert_int_equal(npy_read("/nonexistent/x.npy", &b, &d), -1);
    assert_non_null(strstr(d.text, "/nonexistent/x.npy: error:"));
}

/* ---- numpy as the independent party ---------------------------------- */

static const char NUMPY_SCRIPT[] =
    "import io, sys\n"
    "import numpy as np\n"
    "from numpy.lib import format as fmt\n"
    "d = sys.argv[1]\n"
    "f32 = np.array([0, 0x80000000, 0x3f800000, 0xc0490fdb, 1, 0x7f7fffff, 0x7f800000, 0xff800000,\n"
    "                0x3eaaaaab, 0x4b800001, 0x12345678, 0x7fc00001], dtype=np.uint32).view(np.float32)\n"
    "np.save(d + '/np_f32.npy', f32.reshape(3, 4))\n"
    "np.save(d + '/np_f16.npy', np.arange(65536, dtype=np.uint16).view(np.float16).reshape(256, 256))\n"
    "np.save(d + '/np_i32.npy', np.array([0, 1, -1, 2**31 - 1, -2**31, 123456789], dtype=np.int32).reshape(2, 3, 1))\n"
    "for v in (2, 3):\n"
    "    with open(d + '/np_v%d.npy' % v, 'wb') as f:\n"
    "        fmt.write_array(f, np.arange(6, dtype=np.float32).reshape(2, 3), version=(v, 0))\n"
    "np.save(d + '/np_scalar.npy', np.float32(2.5))\n"
    "np.save(d + '/np_empty.npy', np.zeros((0, 3), np.float32))\n"
    "np.save(d + '/np_fortran.npy', np.asfortranarray(np.zeros((2, 3), np.float32)))\n"
    "np.save(d + '/np_f8.npy', np.array([0.5, -2.0, 1e300, 0.1, float('nan')]))\n"
    "np.save(d + '/np_f8_exact.npy', np.array([[0.5, -2.0], [3.0, 0.25]]))\n"
    "np.save(d + '/np_i8.npy', np.array([[7, -3], [2**31 - 1, 0]], dtype=np.int64))\n"
    "np.save(d + '/np_i8_wide.npy', np.array([1, 2**31, -2**31 - 1], dtype=np.int64))\n"
    "np.save(d + '/np_be.npy', np.zeros(3, dtype='>f4'))\n"
    "# What we wrote: numpy reads the same values and would write the same bytes.\n"
    "want = {'ours_f32.npy': (np.arange(24, dtype=np.float32) * np.float32(0.25) - 1).reshape(2, 3, 4),\n"
    "        'ours_f16.npy': np.arange(7, dtype=np.float16) / np.float16(4),\n"
    "        'ours_i32.npy': np.array(-7, dtype=np.int32)}\n"
    "for name, w in want.items():\n"
    "    got = np.load(d + '/' + name)\n"
    "    assert got.dtype == w.dtype and got.shape == w.shape and np.array_equal(got, w), name\n"
    "    b = io.BytesIO(); np.save(b, w)\n"
    "    assert b.getvalue() == open(d + '/' + name, 'rb').read(), name + ': bytes differ from np.save'\n";

static bool have_numpy(void) {
    return access("/usr/bin/python3", X_OK) == 0 &&
           system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

static void write_ours(const char *name, dtype t, int rank, const int64_t *dims, const void *data) {
    npy_array a = {.dtype = t, .rank = rank, .numel = 1, .data = (void *)data};
    for (int i = 0; i < rank; i++) a.numel *= a.dim[i] = dims[i];
    char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    assert_int_equal(npy_write(f, &a), 0);
    fclose(f);
    free(path);
}

static npy_array read_theirs(const char *name) {
    char *path = tmp_path(name);
    npy_array a;
    diag d = {0};
    if (npy_read(path, &a, &d)) fail_msg("%s", d.text);
    free(path);
    return a;
}

static void expect_read_fails(const char *name, const char *want) {
    char *path = tmp_path(name);
    npy_array a;
    diag d = {0};
    assert_int_equal(npy_read(path, &a, &d), -1);
    if (!strstr(d.text, path) || !strstr(d.text, want)) fail_msg("%s lacks \"%s\"", d.text, want);
    free(path);
}

static void test_numpy_interop(void **state) {
    (void)state;
    if (!have_numpy()) skip();
    /* Ours first, for numpy to check. */
    float f32[24];
    for (int i = 0; i < 24; i++) f32[i] = (float)i * 0.25f - 1;
    uint16_t f16[7];
    for (int i = 0; i < 7; i++) f16[i] = f32_to_f16((float)i / 4);
    int32_t i32 = -7;
    const int64_t d234[] = {2, 3, 4}, d7[] = {7};
    write_ours("ours_f32.npy", DT_F32, 3, d234, f32);
    write_ours("ours_f16.npy", DT_F16, 1, d7, f16);
    write_ours("ours_i32.npy", DT_I32, 0, NULL, &i32);
    char *script = tmp_path("interop.py");
    FILE *f = fopen(script, "w");
    fputs(NUMPY_SCRIPT, f);
    fclose(f);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, tmp_dir);
    free(script);
    assert_int_equal(system(cmd), 0);

    /* Then theirs, value for value (bit patterns, NaN payloads included). */
    static const uint32_t want32[] = {0, 0x80000000, 0x3f800000, 0xc0490fdb, 1, 0x7f7fffff,
                                      0x7f800000, 0xff800000, 0x3eaaaaab, 0x4b800001, 0x12345678, 0x7fc00001};
    npy_array a = read_theirs("np_f32.npy");
    assert_true(a.dtype == DT_F32 && a.rank == 2 && a.dim[0] == 3 && a.dim[1] == 4 && a.numel == 12);
    assert_memory_equal(a.data, want32, sizeof want32);
    npy_free(&a);
    a = read_theirs("np_f16.npy");
    assert_true(a.dtype == DT_F16 && a.rank == 2 && a.dim[0] == 256 && a.dim[1] == 256);
    for (uint32_t i = 0; i < 65536; i++) assert_int_equal(((uint16_t *)a.data)[i], i);
    npy_free(&a);
    static const int32_t want_i[] = {0, 1, -1, INT32_MAX, INT32_MIN, 123456789};
    a = read_theirs("np_i32.npy");
    assert_true(a.dtype == DT_I32 && a.rank == 3 && a.dim[0] == 2 && a.dim[1] == 3 && a.dim[2] == 1);
    assert_memory_equal(a.data, want_i, sizeof want_i);
    npy_free(&a);
    const char *versions[] = {"np_v2.npy", "np_v3.npy"};
    for (int v = 0; v < 2; v++) {
        a = read_theirs(versions[v]);
        assert_true(a.dtype == DT_F32 && a.rank == 2 && a.dim[0] == 2 && a.dim[1] == 3);
        for (int i = 0; i < 6; i++) assert_true(((float *)a.data)[i] == (float)i);
        npy_free(&a);
    }
    a = read_theirs("np_scalar.npy");
    assert_true(a.rank == 0 && a.numel == 1 && *(float *)a.data == 2.5f);
    npy_free(&a);
    a = read_theirs("np_empty.npy");
    assert_true(a.rank == 2 && a.dim[0] == 0 && a.dim[1] == 3 && a.numel == 0);
    npy_free(&a);
    expect_read_fails("np_fortran.npy", "Fortran-order");
    /* float64, NumPy's default: rounded into f32 once, and said whether exactly. */
    a = read_theirs("np_f8.npy");
    assert_true(a.dtype == DT_F32 && a.wide && !a.wide_exact && a.numel == 5);
    const float *v = a.data;
    assert_true(v[0] == 0.5f && v[1] == -2.0f && isinf(v[2]) && v[3] == (float)0.1 && isnan(v[4]));
    npy_free(&a);
    a = read_theirs("np_f8_exact.npy");
    assert_true(a.dtype == DT_F32 && a.wide && a.wide_exact && a.rank == 2 && ((float *)a.data)[3] == 0.25f);
    npy_free(&a);
    /* int64, PyTorch's ids: narrowed into i32, saturating, and said whether exactly. */
    a = read_theirs("np_i8.npy");
    assert_true(a.dtype == DT_I32 && a.wide && a.wide_exact && a.numel == 4 && strcmp(npy_held_name(&a), "int64") == 0);
    const int32_t *iv = a.data;
    assert_true(iv[0] == 7 && iv[1] == -3 && iv[2] == INT32_MAX && iv[3] == 0);
    npy_free(&a);
    a = read_theirs("np_i8_wide.npy");
    iv = a.data;
    assert_true(a.dtype == DT_I32 && a.wide && !a.wide_exact && iv[0] == 1 && iv[1] == INT32_MAX && iv[2] == INT32_MIN);
    npy_free(&a);
    expect_read_fails("np_be.npy", "unsupported dtype '>f4'");
}

/* ---- the fuzz seed corpus --------------------------------------------- */

/* fuzz/corpus/npy/ok_* parse, bad_* are rejected. */
static void test_seed_corpus(void **state) {
    (void)state;
    const char *root = getenv("TESSEL_SOURCE_DIR");
    if (!root) skip();
    char *dir_path = path_join(root, "fuzz/corpus/npy");
    DIR *dir = opendir(dir_path);
    assert_non_null(dir);
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        bool ok = strncmp(e->d_name, "ok_", 3) == 0, bad = strncmp(e->d_name, "bad_", 4) == 0;
        if (!ok && !bad) continue;
        char *p = path_join(dir_path, e->d_name);
        npy_array a;
        diag d = {0};
        int rc = npy_read(p, &a, &d);
        if ((rc == 0) != ok) fail_msg("%s: %s", p, rc ? d.text : "accepted");
        if (rc == 0) npy_free(&a);
        free(p);
        seen++;
    }
    closedir(dir);
    free(dir_path);
    assert_true(seen >= 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rejects),     cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_accepts),     cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_write_header_text), cmocka_unit_test(test_numpy_interop),
        cmocka_unit_test(test_seed_corpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
