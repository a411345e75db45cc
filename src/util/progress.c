/* progress.c: a single redrawn status line on a terminal, sparse lines in logs. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The last line any progress printed (0: none yet), the process-wide quiet
 * switch of progress_stage, and what is being done now: a heartbeat thread
 * repeats it when nothing else has printed for PROGRESS_LOG_SECONDS, so a
 * stage that makes no calls for a while (one big kernel, one large
 * parameter) is not silence. Printing and these fields go under one lock. */
static double last_line;
static bool all_quiet, beating;
static char now_what[64], now_detail[200];
static double now_since;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* On a terminal: whose bar is drawn, and since when. */
static char bar_what[64];
static double bar_at;

/* Whether a line is due now: PROGRESS_LOG_SECONDS since the last one (or
 * since the command started). Under mu. */
static bool log_due(double now) {
    if (last_line == 0) last_line = now;
    if (now - last_line < PROGRESS_LOG_SECONDS) return false;
    last_line = now;
    return true;
}

/* since: when the work under way began (0: now, if it is new). Several
 * progresses may run at once (check's references beside the simulation):
 * each says its own time. */
static void set_doing(const char *what, const char *detail, double since) {
    if (since > 0) now_since = since;
    else if (strcmp(now_what, what) != 0) now_since = util_now_seconds();
    snprintf(now_what, sizeof now_what, "%s", what);
    snprintf(now_detail, sizeof now_detail, "%s", detail ? detail : "");
}

static void *heartbeat(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&mu);
        double now = util_now_seconds();
        if (!all_quiet && now_what[0] && log_due(now)) {
            fprintf(stderr, "%s%s: %s (%.0f s so far)\n", isatty(STDERR_FILENO) ? "\r\033[K" : "", now_what, now_detail,
                    now - now_since);
            fflush(stderr);
        }
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

/* Called once a command knows its options: the clock of the first line
 * starts then, and the heartbeat (unless quiet). */
void progress_quiet(bool quiet) {
    pthread_mutex_lock(&mu);
    all_quiet = quiet;
    if (last_line == 0) last_line = util_now_seconds();
    bool start = !quiet && !beating;
    beating |= start;
    pthread_mutex_unlock(&mu);
    pthread_t t;
    if (start && pthread_create(&t, NULL, heartbeat, NULL) == 0) pthread_detach(t);
}

void progress_done(void) {
    pthread_mutex_lock(&mu);
    now_what[0] = 0;
    all_quiet = true;
    pthread_mutex_unlock(&mu);
}

void progress_begin(progress *p, const char *what, int64_t total, bool quiet) {
    p->what = what;
    p->total = total;
    p->done = 0;
    p->start_s = p->last_s = util_now_seconds();
    p->tty = isatty(STDERR_FILENO);
    p->quiet = quiet;
    p->drawn = false;
    if (quiet) return;
    pthread_mutex_lock(&mu);
    set_doing(what, "starting", p->start_s);
    if (!p->tty && log_due(p->start_s)) {
        fprintf(stderr, "%s: starting\n", what);
        fflush(stderr);
    }
    pthread_mutex_unlock(&mu);
}

void progress_stage(const char *what, const char *detail) {
    pthread_mutex_lock(&mu);
    if (!all_quiet) {
        set_doing(what, detail, 0);
        /* A whole line, on a terminal too (over a bar being redrawn, if any). */
        if (log_due(util_now_seconds())) {
            fprintf(stderr, "%s%s: %s\n", isatty(STDERR_FILENO) ? "\r\033[K" : "", what, detail);
            fflush(stderr);
        }
    }
    pthread_mutex_unlock(&mu);
}

void progress_step(progress *p, int64_t done, const char *detail) {
    p->done = done;
    if (p->quiet) return;
    double now = util_now_seconds();
    /* Redraw at most 10 times a second on a terminal; in a log, a line when
     * one is due (log_due), whichever progress printed the last. */
    if (p->tty && now - p->last_s < 0.1 && done != p->total) return;
    pthread_mutex_lock(&mu);
    char d[200];
    snprintf(d, sizeof d, "%lld/%lld %s", (long long)done, (long long)p->total, detail ? detail : "");
    set_doing(p->what, d, p->start_s);
    /* On a terminal, one bar at a time: another progress's bar is redrawn
     * over at most once a second, so concurrent work does not flicker. */
    bool due = p->tty ? !(bar_what[0] && strcmp(bar_what, p->what) != 0 && now - bar_at < 1.0) : log_due(now);
    if (due && p->tty) last_line = now; /* a redrawn bar is a line the heartbeat need not repeat */
    if (!due) {
        pthread_mutex_unlock(&mu);
        return;
    }
    p->last_s = now;
    if (p->tty) {
        int width = 30, fill = p->total > 0 ? (int)(width * done / p->total) : 0;
        fprintf(stderr, "\r\033[K%s [", p->what);
        for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
        fprintf(stderr, "] %lld/%lld %.1fs %s", (long long)done, (long long)p->total, now - p->start_s,
                detail ? detail : "");
        p->drawn = true;
        if (strcmp(bar_what, p->what) != 0) bar_at = now;
        snprintf(bar_what, sizeof bar_what, "%s", p->what);
    } else {
        fprintf(stderr, "%s: %lld/%lld after %.1fs %s\n", p->what, (long long)done, (long long)p->total,
                now - p->start_s, detail ? detail : "");
    }
    fflush(stderr);
    pthread_mutex_unlock(&mu);
}

void progress_end(progress *p) {
    pthread_mutex_lock(&mu);
    if (p->tty && p->drawn) fprintf(stderr, "\r\033[K");
    p->drawn = false;
    if (strcmp(bar_what, p->what ? p->what : "") == 0) bar_what[0] = 0;
    if (strcmp(now_what, p->what ? p->what : "") == 0) now_what[0] = 0; /* nothing to repeat until the next stage */
    pthread_mutex_unlock(&mu);
}
