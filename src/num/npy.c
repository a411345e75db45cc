/* npy.c: NumPy .npy tensor files: a strict reader and a version 1.0 writer.
 *
 *   offset 0  "\x93NUMPY" major minor          6 + 2 bytes
 *   offset 8  header bytes, little-endian      u16 for 1.0, u32 for 2.0 and 3.0
 *   then      header: a Python dict literal, space padded, ending in '\n'
 *               {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *   then      the data: numel * element bytes, C order, little-endian
 *
 * Input is untrusted: every read is bounded by the image length, and errors
 * in the header name the file byte offset where parsing stopped.
 */
#include "num.h"

#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads and writes element data as little-endian host memory"
#endif

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
enum { NPY_ALIGN = 64 }; /* bytes; numpy aligns the data start to this */

static const struct {
    const char *descr;
    dtype t;
} NPY_DTYPES[] = {{"<f4", DT_F32}, {"<f2", DT_F16}, {"<i4", DT_I32},
                   {"<f8", DT_F32}, {"<i8", DT_I32} /* read into f32, i32 (npy_array.wide) */};
#define NPY_SUPPORTED "'<f4', '<f2', '<i4', '<f8', '<i8'"

/* ---- header parser ---------------------------------------------------- */

typedef struct hdr_parser {
    const uint8_t *p;   /* the whole image */
    size_t pos;         /* cursor, bytes from the start of the file */
    size_t end;         /* end of the header, bytes from the start of the file */
    const char *path;
    diag *d;
} hdr_parser;

static int hdr_fail(hdr_parser *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int hdr_fail(hdr_parser *h, const char *fmt, ...) {
    char at[48];
    snprintf(at, sizeof at, "header byte %zu: ", h->pos);
    va_list ap;
    va_start(ap, fmt);
    int rc = diag_vfail_in(h->d, h->path, at, fmt, ap);
    va_end(ap);
    return rc;
}

/* Up to cap-1 bytes of s, with anything unprintable shown as '?'. */
static void printable(char *buf, size_t cap, const uint8_t *s, size_t n) {
    size_t k = n < cap - 1 ? n : cap - 1;
    for (size_t i = 0; i < k; i++) buf[i] = (s[i] >= 32 && s[i] < 127) ? (char)s[i] : '?';
    buf[k] = 0;
}

static bool at_end(hdr_parser *h) { return h->pos >= h->end; }

static void skip_ws(hdr_parser *h) {
    while (!at_end(h)) {
        uint8_t c = h->p[h->pos];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') break;
        h->pos++;
    }
}

/* Skips blanks; true (and consumes it) if the next byte is ch. */
static bool accept(hdr_parser *h, char ch) {
    skip_ws(h);
    if (at_end(h) || h->p[h->pos] != (uint8_t)ch) return false;
    h->pos++;
    return true;
}

static int expect(hdr_parser *h, char ch) {
    if (accept(h, ch)) return 0;
    if (at_end(h)) return hdr_fail(h, "expected '%c', found the end of the header", ch);
    return hdr_fail(h, "expected '%c'", ch);
}

/* A quoted Python string without escapes; *s and *n give its contents. */
static int parse_string(hdr_parser *h, const uint8_t **s, size_t *n) {
    skip_ws(h);
    if (at_end(h) || (h->p[h->pos] != '\'' && h->p[h->pos] != '"')) return hdr_fail(h, "expected a quoted string");
    uint8_t quote = h->p[h->pos];
    size_t start = h->pos + 1, i = start;
    while (i < h->end && h->p[i] != quote) {
        if (h->p[i] == '\\') {
            h->pos = i;
            return hdr_fail(h, "escape sequences are not supported in the header");
        }
        i++;
    }
    if (i >= h->end) return hdr_fail(h, "unterminated string");
    *s = h->p + start;
    *n = i - start;
    h->pos = i + 1;
    return 0;
}

static bool is_word(const uint8_t *s, size_t n, const char *w) { return strlen(w) == n && memcmp(s, w, n) == 0; }

static int parse_descr(hdr_parser *h, npy_array *a) {
    skip_ws(h);
    if (!at_end(h) && h->p[h->pos] == '[')
        return hdr_fail(h, "unsupported dtype: structured arrays (supported: " NPY_SUPPORTED ")");
    size_t at = h->pos;
    const uint8_t *s;
    size_t n;
    if (parse_string(h, &s, &n)) return -1;
    for (size_t i = 0; i < TS_COUNT(NPY_DTYPES); i++) {
        if (is_word(s, n, NPY_DTYPES[i].descr)) {
            a->dtype = NPY_DTYPES[i].t;
            a->wide = is_word(s, n, "<f8") || is_word(s, n, "<i8");
            return 0;
        }
    }
    char shown[40];
    printable(shown, sizeof shown, s, n);
    h->pos = at;
    return hdr_fail(h, "unsupported dtype '%s' (supported: " NPY_SUPPORTED ")", shown);
}

static int parse_bool(hdr_parser *h, bool *v) {
    skip_ws(h);
    size_t n = 0;
    while (h->pos + n < h->end && ((h->p[h->pos + n] | 0x20) >= 'a' && (h->p[h->pos + n] | 0x20) <= 'z')) n++;
    if (is_word(h->p + h->pos, n, "True")) *v = true;
    else if (is_word(h->p + h->pos, n, "False")) *v = false;
    else return hdr_fail(h, "expected True or False");
    h->pos += n;
    return 0;
}

/* A non-negative Python integer that fits int64 (Python 2's 'L' allowed). */
static int parse_dim(hdr_parser *h, int64_t *v) {
    skip_ws(h);
    if (at_end(h)) return hdr_fail(h, "unterminated shape");
    if (h->p[h->pos] == '-') return hdr_fail(h, "negative dimension");
    if (h->p[h->pos] < '0' || h->p[h->pos] > '9') return hdr_fail(h, "expected a dimension");
    int64_t x = 0;
    size_t start = h->pos;
    while (!at_end(h) && h->p[h->pos] >= '0' && h->p[h->pos] <= '9') {
        int digit = h->p[h->pos] - '0';
        if (x > (INT64_MAX - digit) / 10) {
            h->pos = start;
            return hdr_fail(h, "dimension does not fit in 64 bits");
        }
        x = x * 10 + digit;
        h->pos++;
    }
    if (!at_end(h) && h->p[h->pos] == 'L') h->pos++;
    *v = x;
    return 0;
}

/* "()", "(5,)", "(2, 3)" or "(2, 3,)"; "(5)" is the integer 5 in Python,
 * not a shape, so numpy rejects it and so do we. */
static int parse_shape(hdr_parser *h, npy_array *a) {
    if (expect(h, '(')) return -1;
    a->rank = 0;
    if (accept(h, ')')) return 0;
    for (;;) {
        if (a->rank == NPY_MAX_RANK) return hdr_fail(h, "rank above the maximum of %d", (int)NPY_MAX_RANK);
        if (parse_dim(h, &a->dim[a->rank++])) return -1;
        bool comma = accept(h, ',');
        if (accept(h, ')')) {
            if (a->rank == 1 && !comma) return hdr_fail(h, "a shape of rank 1 is written (N,)");
            return 0;
        }
        if (!comma) return at_end(h) ? hdr_fail(h, "unterminated shape") : hdr_fail(h, "expected ',' or ')'");
    }
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static int parse_entry(hdr_parser *h, npy_array *a, unsigned *seen) {
    skip_ws(h);
    size_t key_at = h->pos;
    const uint8_t *s;
    size_t n;
    if (parse_string(h, &s, &n)) return -1;
    unsigned key = is_word(s, n, "descr") ? KEY_DESCR
                 : is_word(s, n, "fortran_order") ? KEY_FORTRAN
                 : is_word(s, n, "shape") ? KEY_SHAPE : 0;
    if (!key || (*seen & key)) {
        char shown[40];
        printable(shown, sizeof shown, s, n);
        h->pos = key_at;
        if (!key) return hdr_fail(h, "unknown key '%s' (expected 'descr', 'fortran_order', 'shape')", shown);
        return hdr_fail(h, "duplicate key '%s'", shown);
    }
    *seen |= key;
    if (expect(h, ':')) return -1;
    if (key == KEY_DESCR) return parse_descr(h, a);
    if (key == KEY_SHAPE) return parse_shape(h, a);
    skip_ws(h);
    size_t value_at = h->pos;
    bool fortran = false;
    if (parse_bool(h, &fortran)) return -1;
    if (!fortran) return 0;
    h->pos = value_at;
    return hdr_fail(h, "Fortran-order arrays are not supported (write C order)");
}

static int parse_header(hdr_parser *h, npy_array *a) {
    unsigned seen = 0;
    if (expect(h, '{')) return -1;
    while (!accept(h, '}')) {
        if (parse_entry(h, a, &seen)) return -1;
        if (accept(h, ',')) continue;
        if (accept(h, '}')) break;
        return at_end(h) ? hdr_fail(h, "unterminated header dict") : hdr_fail(h, "expected ',' or '}'");
    }
    if (!(seen & KEY_DESCR)) return hdr_fail(h, "missing key 'descr'");
    if (!(seen & KEY_FORTRAN)) return hdr_fail(h, "missing key 'fortran_order'");
    if (!(seen & KEY_SHAPE)) return hdr_fail(h, "missing key 'shape'");
    skip_ws(h);
    if (!at_end(h)) return hdr_fail(h, "unexpected text after the header dict");
    return 0;
}

/* ---- reading ---------------------------------------------------------- */

static uint32_t load_le(const uint8_t *p, int bytes) {
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Magic, version and header length: sets *hdr_at and *data_at (bytes). */
static int parse_preamble(const uint8_t *p, size_t len, const char *path, size_t *hdr_at, size_t *data_at,
                          diag *d) {
    if (len < sizeof NPY_MAGIC || memcmp(p, NPY_MAGIC, sizeof NPY_MAGIC) != 0)
        return diag_fail(d, "%s: error: not a .npy file (no \\x93NUMPY magic)", path);
    if (len < 8) return diag_fail(d, "%s: error: truncated before the format version", path);
    if (p[6] < 1 || p[6] > 3 || p[7] != 0)
        return diag_fail(d, "%s: error: unsupported .npy format version %u.%u (supported: 1.0, 2.0, 3.0)", path,
                         p[6], p[7]);
    int len_bytes = p[6] == 1 ? 2 : 4;
    *hdr_at = 8 + (size_t)len_bytes;
    if (len < *hdr_at) return diag_fail(d, "%s: error: truncated before the header length", path);
    uint32_t hdr_bytes = load_le(p + 8, len_bytes);
    if (hdr_bytes > len - *hdr_at)
        return diag_fail(d, "%s: error: header length %u bytes runs past the end of the file (%zu bytes)", path,
                         hdr_bytes, len);
    *data_at = *hdr_at + hdr_bytes;
    return 0;
}

/* numel and the data size in bytes; both must fit in int64 and size_t. */
static int array_size(npy_array *a, const char *path, size_t *data_bytes, diag *d) {
    int64_t numel = 1;
    bool any_zero = false;
    for (int32_t i = 0; i < a->rank; i++) any_zero |= a->dim[i] == 0;
    for (int32_t i = 0; i < a->rank && !any_zero; i++) {
        if (numel > INT64_MAX / a->dim[i])
            return diag_fail(d, "%s: error: the shape has more than 2^63 elements", path);
        numel *= a->dim[i];
    }
    a->numel = any_zero ? 0 : numel;
    int64_t elem = a->wide ? 8 : dtype_bytes(a->dtype);
    if (a->numel > INT64_MAX / elem || (uint64_t)(a->numel * elem) > SIZE_MAX)
        return diag_fail(d, "%s: error: the data size overflows 64 bits", path);
    *data_bytes = (size_t)(a->numel * elem);
    return 0;
}

int npy_parse(const void *bytes, size_t len, const char *path, npy_array *out, diag *d) {
    memset(out, 0, sizeof *out);
    const uint8_t *p = bytes;
    size_t hdr_at = 0, data_at = 0, data_bytes = 0;
    if (parse_preamble(p, len, path, &hdr_at, &data_at, d)) return -1;
    npy_array a = {0};
    hdr_parser h = {p, hdr_at, data_at, path, d};
    if (parse_header(&h, &a) || array_size(&a, path, &data_bytes, d)) return -1;
    size_t have = len - data_at;
    if (have != data_bytes)
        return diag_fail(d, "%s: error: data is %zu bytes but %lld elements of %s need %zu (file %s)", path, have,
                         (long long)a.numel, npy_held_name(&a), data_bytes,
                         have < data_bytes ? "truncated" : "has trailing bytes");
    char shape[160];
    fmt_dims(shape, sizeof shape, a.rank, a.dim);
    size_t held = a.wide ? data_bytes / 2 : data_bytes;
    a.data = util_try_malloc(held, 1, d, "%s: error: the array (%s%s)", path, dtype_name(a.dtype), shape);
    if (!a.data) return -1;
    if (!a.wide && data_bytes) memcpy(a.data, p + data_at, data_bytes);
    /* float64 (NumPy's default) rounded to f32 once: rounding that on to
     * f16, bf16 or 8 bits gives what rounding the float64 directly would
     * (f32's 24 bits are at least twice theirs plus two). int64 (PyTorch's
     * and NumPy's default integers) saturated to i32. */
    a.wide_exact = true;
    for (int64_t i = 0; a.wide && i < a.numel; i++) {
        if (a.dtype == DT_I32) {
            int64_t v;
            memcpy(&v, p + data_at + 8 * (size_t)i, 8);
            int32_t x = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
            memcpy((uint8_t *)a.data + 4 * (size_t)i, &x, 4);
            a.wide_exact &= x == v;
            continue;
        }
        double v;
        memcpy(&v, p + data_at + 8 * (size_t)i, 8);
        float f = (float)v;
        ((float *)a.data)[i] = f;
        a.wide_exact &= (double)f == v || v != v;
    }
    *out = a;
    return 0;
}

const char *npy_held_name(const npy_array *a) {
    return !a->wide ? dtype_name(a->dtype) : a->dtype == DT_I32 ? "int64" : "float64";
}

int npy_read(const char *path, npy_array *out, diag *d) {
    char *buf;
    size_t len;
    memset(out, 0, sizeof *out);
    if (file_read_all(path, &buf, &len, d)) return -1;
    int rc = npy_parse(buf, len, path, out, d);
    free(buf);
    return rc;
}

void npy_free(npy_array *a) {
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- writing ---------------------------------------------------------- */

static const char *npy_descr(dtype t) {
    for (size_t i = 0; i < TS_COUNT(NPY_DTYPES); i++)
        if (NPY_DTYPES[i].t == t) return NPY_DTYPES[i].descr;
    return NULL;
}

/* The header dict as numpy writes it, space padded and '\n' terminated so
 * the data starts at a multiple of NPY_ALIGN bytes; returns its bytes. */
static size_t format_header(char *buf, size_t cap, const char *descr, const npy_array *a) {
    size_t n = (size_t)snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int32_t i = 0; i < a->rank; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)a->dim[i]);
    n += (size_t)snprintf(buf + n, cap - n, "%s), }", a->rank == 1 ? "," : "");
    size_t preamble = sizeof NPY_MAGIC + 2 + 2;
    while ((preamble + n + 1) % NPY_ALIGN) buf[n++] = ' ';
    buf[n++] = '\n';
    return n;
}

/* numel is the product of dim, so the file we write is one we would read. */
static bool numel_matches(const npy_array *a) {
    uint64_t numel = 1; /* unsigned: wraps instead of overflowing */
    bool zero = false, wrapped = false;
    for (int32_t i = 0; i < a->rank; i++) {
        if (a->dim[i] < 0) return false;
        zero |= a->dim[i] == 0;
        wrapped |= a->dim[i] && numel > UINT64_MAX / (uint64_t)a->dim[i];
        numel *= (uint64_t)a->dim[i];
    }
    return (zero || !wrapped) && a->numel >= 0 && numel == (uint64_t)a->numel;
}

int npy_write(FILE *f, const npy_array *a) {
    const char *descr = npy_descr(a->dtype);
    if (!descr || a->rank < 0 || a->rank > NPY_MAX_RANK || !numel_matches(a)) return -1;
    /* Rank 8 with 19-digit dims needs about 240 bytes before the padding. */
    char hdr[512];
    size_t n = format_header(hdr, sizeof hdr, descr, a);
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(n & 0xff), (uint8_t)(n >> 8)};
    size_t data_bytes = (size_t)a->numel * (size_t)dtype_bytes(a->dtype);
    if (fwrite(pre, 1, sizeof pre, f) != sizeof pre || fwrite(hdr, 1, n, f) != n) return -1;
    if (data_bytes && fwrite(a->data, 1, data_bytes, f) != data_bytes) return -1;
    return 0;
}

bool npy_has_shape(const npy_array *a, int rank, const int64_t *dim, char *buf, size_t cap) {
    bool same = a->rank == rank;
    for (int i = 0; same && i < rank; i++) same = a->dim[i] == dim[i];
    if (same) return true;
    fmt_dims(buf, cap, a->rank, a->dim);
    return false;
}
