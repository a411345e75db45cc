/* util: the small machinery every layer shares.
 *
 *   arena    one bump allocator per compilation; memory is released all at once
 *   vec      growable arrays whose storage lives in an arena
 *   strmap   string -> int32 hash map (names to ids)
 *   diag     user-facing errors: "file:line:col: error: message" + caret line
 *   fileio   whole-file reads; outputs written to a temporary and renamed on commit
 *   progress one status line on stderr while long work runs
 *
 * Two error channels (STYLE.md): user errors return -1 with a filled diag;
 * broken invariants stop through TS_ASSERT with file and line.
 */
#ifndef TESSEL_UTIL_H
#define TESSEL_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- invariants ------------------------------------------------------- */

_Noreturn void util_assert_fail(const char *file, int line, const char *expr);
#define TS_ASSERT(c) ((c) ? (void)0 : util_assert_fail(__FILE__, __LINE__, #c))
#define TS_UNREACHABLE() util_assert_fail(__FILE__, __LINE__, "unreachable")
#define TS_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* malloc/calloc/realloc for sizes the program picks (not the input): on
 * exhaustion they call the out-of-memory handler, which never returns. The
 * library's handler reports an internal error and aborts; the command
 * installs one that removes its temporaries and exits 2. */
void *xmalloc(size_t bytes);
void *xcalloc(size_t n, size_t bytes);  /* n * bytes checked for overflow */
void *xrealloc(void *p, size_t bytes);
char *xstrdup(const char *s);
typedef void (*util_oom_fn)(size_t bytes);
void util_set_oom_handler(util_oom_fn fn);  /* NULL: the default */

struct diag;
/* n * size bytes for a buffer whose size comes from the input (a tensor, a
 * file): NULL with "<what> needs B bytes of host memory: out of memory" in
 * d when they cannot be had (the product overflows, exceeds the host's
 * physical memory, or malloc fails); fmt, ... names what, e.g.
 * "tessel ref: error: input 'x' (f32[100000, 100000])". free() the result. */
void *util_try_malloc(size_t n, size_t size, struct diag *d, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void *util_try_calloc(size_t n, size_t size, struct diag *d, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* bytes of zeroed memory mapped from the kernel, for a large buffer touched
 * sparsely (the simulator's tile memory): pages are faulted in as they are
 * used and never come from memory malloc keeps. NULL with util_try_malloc's
 * diagnostic when they cannot be had. Freed with util_unmap(p, bytes). */
void *util_try_map(size_t bytes, struct diag *d, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void util_unmap(void *p, size_t bytes);
/* Resizes old (which stays valid, and the caller's to free, on failure). */
void *util_try_realloc(void *old, size_t n, size_t size, struct diag *d, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- arena.c ---------------------------------------------------------- */

typedef struct arena_block arena_block;
typedef struct arena {
    arena_block *head;  /* newest block; allocations bump inside it */
    size_t used_bytes;  /* bytes handed out, for statistics */
} arena;

void arena_init(arena *a);
void arena_free(arena *a);                   /* releases every block */
/* Forgets every allocation but keeps the largest block for the next ones
 * (its pages stay mapped: scratch reused many times faults once). */
void arena_reset(arena *a);
void *arena_alloc(arena *a, size_t bytes);   /* zeroed, 16-byte aligned */
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);
char *arena_printf(arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Grows the allocation p (old_bytes long) to new_bytes, keeping its bytes;
 * those past old_bytes are not zeroed. In place when p is the newest
 * allocation; a large one (1 MiB on) gets a block of its own that later
 * grows by realloc; otherwise by copy. p NULL: a fresh allocation, not
 * zeroed, in the newest block when it has room (an arena_reset's kept
 * block is reused so), else as a grown one. */
void *arena_grow(arena *a, void *p, size_t old_bytes, size_t new_bytes);

/* A growable array in an arena: VEC(int32_t) ids; vec_push(a, &ids, 7); */
#define VEC(T) struct { T *v; int32_t n, cap; }
#define vec_push(ar, vp, x)                                                   \
    do {                                                                      \
        if ((vp)->n == (vp)->cap) {                                           \
            int32_t nc_ = (vp)->cap ? (vp)->cap * 2 : 8;                      \
            (vp)->v = arena_grow((ar), (vp)->v,                               \
                                 (size_t)(vp)->cap * sizeof(*(vp)->v),        \
                                 (size_t)nc_ * sizeof(*(vp)->v));             \
            (vp)->cap = nc_;                                                  \
        }                                                                     \
        (vp)->v[(vp)->n++] = (x);                                             \
    } while (0)

/* ---- strmap.c --------------------------------------------------------- */

/* Open-addressing map from NUL-terminated keys (not copied: they must outlive
 * the map, e.g. live in the same arena) to int32 values. */
typedef struct strmap {
    const char **keys;  /* NULL marks an empty slot */
    int32_t *vals;
    uint32_t cap;       /* slots, a power of two */
    uint32_t len;       /* occupied slots */
} strmap;

void strmap_free(strmap *m);
/* Of n names, the one closest to key (edit distance) when it is near
 * enough to be a plausible typo of it, else NULL: for "did you mean". */
const char *util_closest(const char *key, const char *const *names, size_t n);
bool strmap_get(const strmap *m, const char *key, int32_t *val);
void strmap_put(strmap *m, const char *key, int32_t val);
/* FNV-1a with a 64-bit finaliser. Stable: machine fingerprints recorded in
 * packages are made with it. */
uint64_t util_hash_bytes(const void *p, size_t n, uint64_t seed);
/* CRC-32C (Castagnoli, reflected 0x82f63b78, init and final xor ~0) of n
 * bytes: what package sections carry ("123456789" gives 0xe3069283). */
uint32_t util_crc32c(const void *p, size_t n);

/* ---- diag.c ----------------------------------------------------------- */

/* A source buffer that diagnostics can point into. */
typedef struct src_text {
    const char *path;  /* as the user named it */
    const char *text;  /* NUL-terminated contents */
    size_t len;        /* bytes, excluding the NUL */
} src_text;

typedef struct diag {
    char text[2048];   /* complete message, newline-terminated */
    bool set;          /* a message has been recorded */
    bool no_fit;       /* it says the model does not fit the machine (exit status 3) */
} diag;

/* Record "fmt" as the error; every variant returns -1 so callers can write
 * `return diag_fail(d, ...)`. The first error recorded wins. */
int diag_fail(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int diag_vfail(diag *d, const char *fmt, va_list ap);
/* The same for "does not fit": the model is fine, the machine too small for
 * it (or for the plans the compiler can make); commands exit 3. */
int diag_fail_fit(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "path: error: " + prefix + the formatted message: the one shape of every
 * error about a file, for the variadic wrappers that add context. */
int diag_vfail_in(diag *d, const char *path, const char *prefix, const char *fmt, va_list ap);
/* "path:line:col: error: msg" followed by the source line and a caret. */
int diag_fail_at(diag *d, const src_text *src, int line, int col,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Line and column (1-based) of byte offset off in src. */
void src_line_col(const src_text *src, size_t off, int *line, int *col);

/* ---- fileio.c --------------------------------------------------------- */

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
int file_read_all(const char *path, char **data, size_t *len, diag *d);

/* Outputs that appear only if the whole command succeeds: each is written to
 * a temporary ".tessel-tmp-PID-N" next to it and renamed into place by
 * outset_commit; outset_abort (or a failed commit) removes every temporary. */
typedef struct outset {
    char **final_paths, **tmp_paths;
    int32_t n, cap;
    char **dirs;   /* directories outset_mkdir made, outermost first */
    int32_t ndirs;
} outset;

FILE *outset_open(outset *o, const char *path, diag *d);  /* "wb" temp file */
/* SIGINT and SIGTERM remove every open outset's temporaries and exit with
 * 130 or 143 (the command installs this once, at start). */
void util_cleanup_on_signals(void);
/* Unlinks every temporary an open outset holds (async-signal-safe): what
 * the signal and out-of-memory handlers do before they exit. */
void util_remove_temporaries(void);
int outset_close(outset *o, FILE *f, const char *path, diag *d);
int outset_commit(outset *o, diag *d);
void outset_abort(outset *o);
/* Makes dir and its missing parents for the outset's files: the ones it
 * makes are removed again by outset_abort, a failed commit, SIGINT and
 * SIGTERM, so a command that stops leaves no empty directory. */
int outset_mkdir(outset *o, const char *dir, diag *d);
char *path_join(const char *dir, const char *name); /* malloc'd */
char *path_dirname(const char *path);               /* malloc'd, "." if none */
/* s (malloc'd, taken over) with a newline appended: text files end in one. */
char *util_newline_terminated(char *s);

/* ---- fmt.c ------------------------------------------------------------ */

/* Shortest decimal text that reads back as exactly x, always with a '.' or an
 * exponent so it reads as a float: 0.0, 0.02, 1e-6, -3.5e+20 is 3.5e20. */
void fmt_double(char *buf, size_t cap, double x);
/* Human-readable counts: 1.23 G, 456 K; bytes: 1.5 MiB. */
void fmt_count(char *buf, size_t cap, double x);
void fmt_bytes(char *buf, size_t cap, double bytes);
/* A shape as "[3, 4]" ("[]" for a scalar). */
void fmt_dims(char *buf, size_t cap, int rank, const int64_t *dim);
double util_now_seconds(void);       /* monotonic */
size_t util_peak_rss_bytes(void);    /* of this process so far */
uint64_t util_physical_bytes(void);  /* the host's physical memory, 0 if unknown */

/* ---- parallel.c ------------------------------------------------------- */

/* Host threads to use: $TESSEL_THREADS, else the online CPU count. */
int util_threads(void);
/* Runs fn over [0, n) in contiguous chunks of at least min_chunk, one chunk
 * per thread, and returns when all are done. */
void util_parallel(int64_t n, int64_t min_chunk, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);
/* Lowers the calling thread's scheduling priority (on Linux, where nice is
 * per thread; elsewhere nothing): work it does takes the cores only when the
 * rest of the process leaves them idle. */
void util_thread_background(void);

/* ---- progress.c ------------------------------------------------------- */

/* One status line on stderr, redrawn in place on a terminal, and in a log
 * (stderr not a terminal) a line whenever PROGRESS_LOG_SECONDS have passed
 * since the last one any progress printed: however the work is split into
 * stages, a reader never waits longer than that plus one step. Quiet mode
 * prints nothing. */
enum { PROGRESS_LOG_SECONDS = 4 };
typedef struct progress {
    const char *what;   /* e.g. "reference" */
    int64_t total;      /* units of work, 0 if unknown */
    int64_t done;
    double start_s, last_s;
    bool tty, quiet, drawn;
} progress;

void progress_begin(progress *p, const char *what, int64_t total, bool quiet);
void progress_step(progress *p, int64_t done, const char *detail);
void progress_end(progress *p);
/* A stage of work with no count of its own (lowering, placement, loading a
 * model): `what: detail` under the same rules, unless progress_quiet(true)
 * was called (the command's --quiet or --json). */
void progress_stage(const char *what, const char *detail);
/* Called once per command with its --quiet (or --json): starts the clock
 * and, unless quiet, a heartbeat thread that repeats the stage under way
 * when nothing has printed for PROGRESS_LOG_SECONDS. progress_done stops
 * every line (the command's results follow). */
void progress_quiet(bool quiet);
void progress_done(void);

#endif
