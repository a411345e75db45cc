/* progress.c: a single redrawn status line on a terminal, sparse lines in logs. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <unistd.h>

void progress_begin(progress *p, const char *what, int64_t total, bool quiet) {
    p->what = what;
    p->total = total;
    p->done = 0;
    p->start_s = p->last_s = util_now_seconds();
    p->tty = isatty(STDERR_FILENO);
    p->quiet = quiet;
    p->drawn = false;
}

void progress_step(progress *p, int64_t done, const char *detail) {
    p->done = done;
    if (p->quiet) return;
    double now = util_now_seconds();
    /* Redraw at most 10 times a second on a terminal, every 5 s in a log. */
    if (now - p->last_s < (p->tty ? 0.1 : 5.0) && done != p->total) return;
    if (!p->tty && now - p->start_s < 5.0) return;
    p->last_s = now;
    if (p->tty) {
        int width = 30, fill = p->total > 0 ? (int)(width * done / p->total) : 0;
        fprintf(stderr, "\r\033[K%s [", p->what);
        for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
        fprintf(stderr, "] %lld/%lld %.1fs %s", (long long)done, (long long)p->total, now - p->start_s,
                detail ? detail : "");
        p->drawn = true;
    } else {
        fprintf(stderr, "%s: %lld/%lld after %.1fs %s\n", p->what, (long long)done, (long long)p->total,
                now - p->start_s, detail ? detail : "");
    }
    fflush(stderr);
}

void progress_end(progress *p) {
    if (p->tty && p->drawn) fprintf(stderr, "\r\033[K");
    p->drawn = false;
}
