/* diag.c: located user-facing error messages, chibicc style:
 *
 *   model.tsl:3:14: error: unknown op 'matmull'
 *       %h = matmull(%x, %w)
 *            ^
 */
#include "util.h"

#include <string.h>

int diag_vfail_in(diag *d, const char *path, const char *prefix, const char *fmt, va_list ap) {
    char msg[1536];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return diag_fail(d, "%s: error: %s%s", path, prefix, msg);
}

int diag_vfail(diag *d, const char *fmt, va_list ap) {
    if (!d || d->set) return -1;
    int n = vsnprintf(d->text, sizeof d->text - 1, fmt, ap);
    if (n < 0) n = 0;
    if ((size_t)n > sizeof d->text - 2) n = (int)sizeof d->text - 2;
    if (n == 0 || d->text[n - 1] != '\n') {
        d->text[n] = '\n';
        d->text[n + 1] = 0;
    }
    d->set = true;
    return -1;
}

int diag_fail(diag *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    diag_vfail(d, fmt, ap);
    va_end(ap);
    return -1;
}

int diag_fail_fit(diag *d, const char *fmt, ...) {
    bool first = d && !d->set;
    va_list ap;
    va_start(ap, fmt);
    diag_vfail(d, fmt, ap);
    va_end(ap);
    if (first) d->no_fit = true;
    return -1;
}

void src_line_col(const src_text *src, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    if (off > src->len) off = src->len;
    for (size_t i = 0; i < off; i++) {
        if (src->text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

int diag_fail_at(diag *d, const src_text *src, int line, int col, const char *fmt, ...) {
    if (!d || d->set) return -1;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    /* Find the text of line `line` to show under the message. */
    const char *p = src ? src->text : NULL, *end = p ? p + src->len : NULL;
    for (int l = 1; p && l < line && p < end; p++)
        if (*p == '\n') l++;
    if (!p || p > end) return diag_fail(d, "%s:%d:%d: error: %s", src ? src->path : "?", line, col, msg);
    const char *e = memchr(p, '\n', (size_t)(end - p));
    if (!e) e = end;
    if (e > p && e[-1] == '\r') e--; /* a CRLF line end is not part of the line */
    /* Show at most 160 bytes of the line, a window around the column when
     * the line is longer; the caret line copies the tabs before the column
     * so the caret sits under the fault however tabs are displayed. */
    enum { SHOW = 160 };
    int len = (int)(e - p), from = 0;
    if (col - 1 >= SHOW && len > SHOW) from = col - 1 - SHOW / 2 > len - SHOW ? len - SHOW : col - 1 - SHOW / 2;
    int width = len - from < SHOW ? len - from : SHOW;
    char shown[SHOW + 1], under[SHOW + 1];
    int caret = col - 1 - from < 0 ? 0 : (col - 1 - from > width ? width : col - 1 - from);
    for (int i = 0; i < width; i++) {
        unsigned char ch = (unsigned char)p[from + i];
        shown[i] = (ch == '\t' || (ch >= 32 && ch < 127)) ? (char)ch : '?';
        if (i < caret) under[i] = ch == '\t' ? '\t' : ' ';
    }
    shown[width] = 0;
    under[caret] = 0;
    return diag_fail(d, "%s:%d:%d: error: %s\n    %s%s\n    %s%s^", src->path, line, col, msg, from ? "..." : "", shown,
                     from ? "   " : "", under);
}
