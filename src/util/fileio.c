/* fileio.c: whole-file reads and all-or-nothing output sets. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- temporaries a signal must not leave behind ------------------------ */

/* Every temporary an outset holds, for the signal handler: it unlinks them
 * (async-signal-safe) and exits 128 + the signal. Entries are written
 * before the count grows, and the list changes only with the signals
 * blocked, so the handler never sees half an entry. */
enum { MAX_LIVE_TMP = 256 };
static char *live_tmp[MAX_LIVE_TMP];
static volatile sig_atomic_t nlive;
/* And the directories an outset made for its files, removed (deepest
 * first) after them: a stopped command leaves no empty --output-dir. */
static char *live_dir[MAX_LIVE_TMP];
static volatile sig_atomic_t nlive_dir;

void util_remove_temporaries(void) {
    for (sig_atomic_t i = 0; i < nlive; i++)
        if (live_tmp[i]) unlink(live_tmp[i]);
    for (sig_atomic_t i = nlive_dir; i > 0; i--)
        if (live_dir[i - 1]) rmdir(live_dir[i - 1]);
}

static void on_fatal_signal(int sig) {
    util_remove_temporaries();
    /* A word on why it stopped (write(2) is async-signal-safe; its result cannot matter now). */
    static const char intr[] = "\ntessel: interrupted (SIGINT): stopped, no partial output left\n";
    static const char term[] = "\ntessel: terminated (SIGTERM): stopped, no partial output left\n";
    ssize_t n = sig == SIGINT ? write(2, intr, sizeof intr - 1) : write(2, term, sizeof term - 1);
    (void)n;
    _exit(128 + sig);
}

void util_cleanup_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The lists change under a lock (threads may write files at once: the
 * library's calls on distinct handles) with this thread's SIGINT and
 * SIGTERM held off, so its own handler never sees a half-made change. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static void block_signals(sigset_t *old) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &s, old);
    pthread_mutex_lock(&live_mu);
}

static void unblock_signals(const sigset_t *old) {
    pthread_mutex_unlock(&live_mu);
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Appends path to a list the signal handler reads (live_tmp or live_dir). */
static void live_push(char **list, volatile sig_atomic_t *n, char *path) {
    sigset_t old;
    block_signals(&old);
    if (*n < MAX_LIVE_TMP) {
        list[*n] = path;
        *n = *n + 1;
    }
    unblock_signals(&old);
}

static void live_add(char *path) { live_push(live_tmp, &nlive, path); }
static void live_add_dir(char *path) { live_push(live_dir, &nlive_dir, path); }

/* Forgets the directories from entry `from` on (an outset's, made last). */
static void live_drop_dirs(char *const *dirs, int32_t n) {
    sigset_t old;
    block_signals(&old);
    for (int32_t k = 0; k < n; k++)
        for (sig_atomic_t i = 0; i < nlive_dir; i++)
            if (live_dir[i] == dirs[k]) {
                for (sig_atomic_t j = i; j + 1 < nlive_dir; j++) live_dir[j] = live_dir[j + 1];
                nlive_dir = nlive_dir - 1;
                break;
            }
    unblock_signals(&old);
}

static void live_remove(const char *path) {
    sigset_t old;
    block_signals(&old);
    for (sig_atomic_t i = 0; i < nlive; i++)
        if (live_tmp[i] == path) {
            live_tmp[i] = live_tmp[nlive - 1];
            nlive = nlive - 1;
            break;
        }
    unblock_signals(&old);
}

int file_read_all(const char *path, char **data, size_t *len, diag *d) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return diag_fail(d, "%s: error: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return diag_fail(d, "%s: error: is a directory", path);
    }
    /* The file's size from fstat when it has one (a pipe grows the buffer). */
    size_t cap = 1 << 16, n = 0;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size < SIZE_MAX / 2)
        cap = (size_t)st.st_size + 1;
    char *buf = util_try_malloc(cap + 1, 1, d, "%s: error: the file", path);
    if (!buf) {
        fclose(f);
        return -1;
    }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            char *more = cap < SIZE_MAX / 4 ? util_try_realloc(buf, cap * 2 + 1, 1, d, "%s: error: the file", path) : NULL;
            if (!more) {
                if (!d->set) diag_fail(d, "%s: error: the file is too large to read", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = more;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return diag_fail(d, "%s: error: read failed", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

static void outset_release(outset *o);

FILE *outset_open(outset *o, const char *path, diag *d) {
    /* A device or pipe (-o /dev/null) is written in place: renaming over it
     * would replace the device with a file. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) {
            diag_fail(d, "%s: error: is a directory", path);
            return NULL;
        }
        FILE *f = fopen(path, "wb");
        if (!f) diag_fail(d, "%s: error: cannot open for writing: %s", path, strerror(errno));
        return f;
    }
    /* The temporary sits in the destination's directory (so the rename stays
     * in one file system) under a short name of its own: path + ".tmp.PID"
     * would exceed NAME_MAX for a legal final name of 240-odd bytes. */
    static long counter;
    char *dir = path_dirname(path), tmp_name[64];
    snprintf(tmp_name, sizeof tmp_name, ".tessel-tmp-%ld-%ld", (long)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    char *tmp = path_join(dir, tmp_name);
    free(dir);
    /* Everything that allocates comes before the file exists: out of memory
     * (which exits) must not strand a temporary the cleanup list lacks. */
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 8;
        o->final_paths = xrealloc(o->final_paths, (size_t)o->cap * sizeof(char *));
        o->tmp_paths = xrealloc(o->tmp_paths, (size_t)o->cap * sizeof(char *));
    }
    char *final = xstrdup(path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        diag_fail(d, "%s: error: cannot create: %s", path, strerror(errno));
        free(tmp);
        free(final);
        if (o->n == 0) outset_abort(o); /* a failed first open leaves nothing to abort */
        return NULL;
    }
    live_add(tmp);
    o->final_paths[o->n] = final;
    o->tmp_paths[o->n] = tmp;
    o->n++;
    return f;
}

int outset_close(outset *o, FILE *f, const char *path, diag *d) {
    (void)o;
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return diag_fail(d, "%s: error: write failed", path);
    return 0;
}

static void outset_release(outset *o) {
    for (int32_t i = 0; i < o->n; i++) {
        live_remove(o->tmp_paths[i]);
        free(o->final_paths[i]);
        free(o->tmp_paths[i]);
    }
    live_drop_dirs(o->dirs, o->ndirs);
    for (int32_t i = 0; i < o->ndirs; i++) free(o->dirs[i]);
    free(o->dirs);
    free(o->final_paths);
    free(o->tmp_paths);
    memset(o, 0, sizeof *o);
}

void outset_abort(outset *o) {
    for (int32_t i = 0; i < o->n; i++) remove(o->tmp_paths[i]);
    for (int32_t i = o->ndirs; i > 0; i--) rmdir(o->dirs[i - 1]); /* those it made, deepest first; empty now */
    outset_release(o);
}

int outset_mkdir(outset *o, const char *dir, diag *d) {
    if (!dir[0]) return diag_fail(d, "error: the directory name is empty");
    char *p = xstrdup(dir);
    int rc = 0;
    for (char *s = p + 1; rc == 0; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        struct stat st;
        if (stat(p, &st) != 0) {
            char *made = xstrdup(p); /* before mkdir: out of memory must not strand it */
            o->dirs = xrealloc(o->dirs, sizeof(char *) * (size_t)(o->ndirs + 1));
            if (mkdir(p, 0777) == 0) {
                o->dirs[o->ndirs++] = made;
                live_add_dir(made);
            } else {
                free(made);
                if (errno != EEXIST) rc = diag_fail(d, "%s: error: cannot create directory: %s", p, strerror(errno));
            }
        } else if (!S_ISDIR(st.st_mode)) {
            rc = diag_fail(d, "%s: error: not a directory", p);
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}

int outset_commit(outset *o, diag *d) {
    for (int32_t i = 0; i < o->n; i++) {
        if (rename(o->tmp_paths[i], o->final_paths[i]) != 0) {
            diag_fail(d, "%s: error: cannot rename into place: %s", o->final_paths[i], strerror(errno));
            outset_abort(o);
            return -1;
        }
    }
    outset_release(o);
    return 0;
}

char *path_join(const char *dir, const char *name) {
    if (name[0] == '/' || !dir[0]) return xstrdup(name);
    size_t a = strlen(dir), b = strlen(name);
    char *r = xmalloc(a + b + 2);
    memcpy(r, dir, a);
    size_t k = a;
    if (dir[a - 1] != '/') r[k++] = '/';
    memcpy(r + k, name, b + 1);
    return r;
}

char *path_dirname(const char *path) {
    const char *s = strrchr(path, '/');
    if (!s) return xstrdup(".");
    if (s == path) return xstrdup("/");
    size_t n = (size_t)(s - path);
    char *r = xmalloc(n + 1);
    memcpy(r, path, n);
    r[n] = 0;
    return r;
}

char *util_newline_terminated(char *s) {
    size_t n = strlen(s);
    s = xrealloc(s, n + 2);
    s[n] = '\n';
    s[n + 1] = 0;
    return s;
}
