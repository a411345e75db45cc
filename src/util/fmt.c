/* fmt.c: number formatting and clocks. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

void fmt_double(char *buf, size_t cap, double x) {
    TS_ASSERT(cap >= 32);
    if (isnan(x)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(x)) { snprintf(buf, cap, x < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, x);
        if (strtod(tmp, NULL) == x) break;
    }
    char *e = strchr(tmp, 'e');
    int ex = e ? atoi(e + 1) : 0;
    if (e && ex >= -5 && ex < 16) {
        /* Plain digits read better than 1e2 for moderate magnitudes. */
        snprintf(tmp, sizeof tmp, "%.*f", prec - 1 - ex > 0 ? prec - 1 - ex : 0, x);
        e = NULL;
    }
    if (e) {
        /* Tidy the exponent: "1e-06" -> "1e-6", "1e+20" -> "1e20". */
        snprintf(buf, cap, "%.*se%d", (int)(e - tmp), tmp, ex);
    } else {
        snprintf(buf, cap, "%s%s", tmp, strchr(tmp, '.') ? "" : ".0");
    }
}

void fmt_count(char *buf, size_t cap, double x) {
    static const char *unit[] = {"", " K", " M", " G", " T", " P"};
    int u = 0;
    while (fabs(x) >= 1000 && u < 5) { x /= 1000; u++; }
    if (u == 0) snprintf(buf, cap, "%.0f", x);
    else snprintf(buf, cap, fabs(x) >= 100 ? "%.0f%s" : "%.3g%s", x, unit[u]);
}

void fmt_bytes(char *buf, size_t cap, double bytes) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) { bytes /= 1024; u++; }
    if (u == 0) snprintf(buf, cap, "%.0f B", bytes);
    else snprintf(buf, cap, bytes >= 100 ? "%.0f %s" : "%.3g %s", bytes, unit[u]);
}

double util_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t util_physical_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

size_t util_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

void fmt_dims(char *buf, size_t cap, int rank, const int64_t *dim) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)dim[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}
