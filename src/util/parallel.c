/* parallel.c: split an index range over host threads. Callers make results
 * independent of the split, so any thread count gives the same bytes. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* syscall */
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct job {
    void (*fn)(void *ctx, int64_t begin, int64_t end);
    void *ctx;
    int64_t begin, end;
} job;

static void *run_job(void *p) {
    job *j = p;
    j->fn(j->ctx, j->begin, j->end);
    return NULL;
}

int util_threads(void) {
    const char *e = getenv("TESSEL_THREADS");
    if (e && *e) {
        int n = atoi(e);
        if (n >= 1 && n <= 256) return n;
    }
    static int online; /* asked once: glibc reads a file in /sys for it */
    if (!__atomic_load_n(&online, __ATOMIC_RELAXED)) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        __atomic_store_n(&online, n < 1 ? 1 : n > 64 ? 64 : (int)n, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&online, __ATOMIC_RELAXED);
}

void util_parallel(int64_t n, int64_t min_chunk, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    enum { MAX_JOBS = 64 };
    int t = util_threads();
    if (t > MAX_JOBS) t = MAX_JOBS; /* TESSEL_THREADS may ask for more */
    if (min_chunk < 1) min_chunk = 1;
    if (n / min_chunk < t) t = (int)(n / min_chunk);
    if (t <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    job jobs[MAX_JOBS];
    pthread_t th[MAX_JOBS];
    bool started[MAX_JOBS] = {0};
    for (int i = 0; i < t; i++) jobs[i] = (job){fn, ctx, n * i / t, n * (i + 1) / t};
    for (int i = 1; i < t; i++) {
        started[i] = pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0;
        if (!started[i]) run_job(&jobs[i]); /* no thread to be had: do the share here */
    }
    run_job(&jobs[0]);
    for (int i = 1; i < t; i++)
        if (started[i]) pthread_join(th[i], NULL);
}

void util_thread_background(void) {
#ifdef __linux__
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10); /* best effort: a refusal leaves it as it was */
#endif
}
