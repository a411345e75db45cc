/* arena.c: bump allocation in chained blocks; everything is freed at once. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct arena_block {
    arena_block *prev;
    size_t cap;   /* payload bytes */
    size_t used;  /* payload bytes handed out */
    size_t last;  /* offset of the newest allocation, for arena_grow */
    _Alignas(16) unsigned char data[];
};

enum { ARENA_ALIGN = 16, ARENA_MIN_BLOCK = 64 * 1024 };
#define ARENA_OWN ((size_t)-1) /* arena_block.last of a block holding one large allocation */

void arena_init(arena *a) { a->head = NULL; a->used_bytes = 0; }

void arena_free(arena *a) {
    arena_block *b = a->head;
    while (b) {
        arena_block *p = b->prev;
        free(b);
        b = p;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

void arena_reset(arena *a) {
    arena_block *keep = NULL;
    for (arena_block *b = a->head, *p; b; b = p) {
        p = b->prev;
        if (!keep || b->cap > keep->cap) {
            if (keep) free(keep);
            keep = b;
        } else {
            free(b);
        }
    }
    if (keep) keep->prev = NULL, keep->used = keep->last = 0; /* a bump block now, own or not */
    a->head = keep;
    a->used_bytes = 0;
}

static size_t round_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

void *arena_alloc(arena *a, size_t bytes) {
    size_t need = round_up(bytes ? bytes : 1);
    arena_block *b = a->head;
    if (!b || b->cap - b->used < need) {
        size_t cap = need > ARENA_MIN_BLOCK ? need : ARENA_MIN_BLOCK;
        if (b && b->last != ARENA_OWN && cap < b->cap * 2 && b->cap < 64u * 1024 * 1024) cap = b->cap * 2;
        b = xmalloc(sizeof(arena_block) + cap);
        b->prev = a->head;
        b->cap = cap;
        b->used = 0;
        b->last = 0;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->last = b->used;
    b->used += need;
    a->used_bytes += need;
    memset(p, 0, need);
    return p;
}

/* An allocation this large grows in a block of its own, which realloc can
 * extend without copying (glibc moves large blocks by remapping pages). */
enum { ARENA_OWN_BLOCK = 1 << 20 };

static arena_block *own_block(size_t bytes) {
    arena_block *b = xmalloc(sizeof(arena_block) + bytes);
    b->cap = b->used = bytes;
    b->last = ARENA_OWN; /* never the head's bump block, nor the size the next one doubles */
    return b;
}

void *arena_grow(arena *a, void *p, size_t old_bytes, size_t new_bytes) {
    if (new_bytes <= old_bytes) return p;
    size_t need = round_up(new_bytes);
    arena_block *b = a->head;
    if (!p && b && b->last != ARENA_OWN && b->cap - b->used >= need) { /* fresh, and room in the head: not zeroed */
        b->last = b->used;
        b->used += need;
        a->used_bytes += need;
        return b->data + b->last;
    }
    if (p && b && b->last != ARENA_OWN && (unsigned char *)p == b->data + b->last && b->last + need <= b->cap) {
        a->used_bytes += b->last + need - b->used;
        b->used = b->last + need;
        return p;
    }
    if (need < ARENA_OWN_BLOCK) {
        void *q = arena_alloc(a, new_bytes);
        if (old_bytes) memcpy(q, p, old_bytes);
        return q;
    }
    /* p alone in its own block (a large allocation grown before): resize
     * that block, relinking the newer one that points at it. */
    for (arena_block **link = &a->head; p && *link; link = &(*link)->prev) {
        arena_block *o = *link;
        if (o->last != ARENA_OWN || (unsigned char *)p != o->data || o->used != round_up(old_bytes)) continue;
        o = xrealloc(o, sizeof(arena_block) + need);
        o->cap = o->used = need; /* last stays ARENA_OWN */
        a->used_bytes += need - round_up(old_bytes);
        *link = o;
        return o->data;
    }
    /* Else a block of its own, behind the head so small allocations go on
     * bumping in the head. */
    arena_block *o = own_block(need);
    if (old_bytes) memcpy(o->data, p, old_bytes);
    if (b) o->prev = b->prev, b->prev = o;
    else o->prev = NULL, a->head = o;
    a->used_bytes += need;
    return o->data;
}

char *arena_strndup(arena *a, const char *s, size_t n) {
    char *d = arena_alloc(a, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(arena *a, const char *fmt, ...) {
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    TS_ASSERT(n >= 0);
    char *d = arena_alloc(a, (size_t)n + 1);
    vsnprintf(d, (size_t)n + 1, fmt, aq);
    va_end(aq);
    return d;
}

void util_assert_fail(const char *file, int line, const char *expr) {
    fflush(stdout);
    fprintf(stderr, "%s:%d: internal error: assertion failed: %s\n", file, line, expr);
    abort();
}

/* ---- host allocation ------------------------------------------------------
 *
 * Every heap allocation of the program goes through raw_alloc below, so a
 * test build (TESSEL_ALLOC_FAIL) can count them and fail the N-th one:
 *   TESSEL_FAIL_ALLOC=N   allocation N (1-based) returns NULL, once
 *   TESSEL_COUNT_ALLOC=1  print "tessel: allocations: N" on stderr at exit
 * Without the build option both are ignored and nothing is counted. */
#ifdef TESSEL_ALLOC_FAIL
static unsigned long long alloc_count, alloc_fail_at;

static void print_alloc_count(void) {
    fprintf(stderr, "tessel: allocations: %llu\n", __atomic_load_n(&alloc_count, __ATOMIC_RELAXED));
}

__attribute__((constructor)) static void alloc_fail_init(void) {
    const char *n = getenv("TESSEL_FAIL_ALLOC"), *c = getenv("TESSEL_COUNT_ALLOC");
    if (n && *n) alloc_fail_at = strtoull(n, NULL, 10);
    if (c && *c && strcmp(c, "0") != 0) atexit(print_alloc_count);
}

static bool alloc_fails(void) {
    unsigned long long k = __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
    return k == alloc_fail_at;
}
#else
static bool alloc_fails(void) { return false; }
#endif

/* malloc (p NULL, zero false), calloc (zero) or realloc (p), of bytes > 0. */
static void *raw_alloc(void *p, size_t bytes, bool zero) {
    if (alloc_fails()) return NULL;
    if (p) return realloc(p, bytes);
    return zero ? calloc(1, bytes) : malloc(bytes);
}

static _Noreturn void oom_abort(size_t bytes) {
    fflush(stdout);
    fprintf(stderr, "tessel: internal error: out of host memory allocating %zu bytes\n", bytes);
    abort();
}

static util_oom_fn oom_handler = oom_abort;

void util_set_oom_handler(util_oom_fn fn) { oom_handler = fn ? fn : oom_abort; }

static void *check_alloc(void *p, size_t bytes) {
    if (!p) {
        oom_handler(bytes);
        oom_abort(bytes); /* a handler that returns is a bug */
    }
    return p;
}

static size_t product(size_t n, size_t bytes) {
    size_t r;
    if (__builtin_mul_overflow(n, bytes, &r)) check_alloc(NULL, SIZE_MAX);
    return r;
}

void *xmalloc(size_t bytes) { return check_alloc(raw_alloc(NULL, bytes ? bytes : 1, false), bytes); }
void *xcalloc(size_t n, size_t bytes) {
    size_t total = product(n, bytes);
    return check_alloc(raw_alloc(NULL, total ? total : 1, true), total);
}
void *xrealloc(void *p, size_t bytes) { return check_alloc(raw_alloc(p, bytes ? bytes : 1, false), bytes); }
char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

/* mmap's pages, or NULL (allocation failures injected as raw_alloc's). */
static void *raw_map(size_t bytes) {
    if (alloc_fails()) return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

enum alloc_how { ALLOC_PLAIN, ALLOC_ZERO, ALLOC_MAP };

/* The input-sized path: "<what> needs N bytes of host memory: out of memory".
 * old: a block to resize (realloc), left as it was on failure. */
static void *try_alloc(void *old, size_t n, size_t size, enum alloc_how how, diag *d, const char *fmt, va_list ap) {
    size_t bytes;
    bool over = __builtin_mul_overflow(n, size, &bytes);
    uint64_t host = util_physical_bytes();
    void *p = NULL;
    if (!over && (!host || bytes <= host))
        p = how == ALLOC_MAP ? raw_map(bytes ? bytes : 1) : raw_alloc(old, bytes ? bytes : 1, how == ALLOC_ZERO);
    if (p) return p;
    char what[1024];
    vsnprintf(what, sizeof what, fmt, ap);
    if (over)
        diag_fail(d, "%s needs %zu x %zu bytes of host memory, more than 2^64", what, n, size);
    else if (host && bytes > host) {
        char h[32];
        fmt_bytes(h, sizeof h, (double)host);
        diag_fail(d, "%s needs %zu bytes of host memory, more than this host has (%s)", what, bytes, h);
    } else
        diag_fail(d, "%s needs %zu bytes of host memory: out of memory", what, bytes);
    return NULL;
}

void *util_try_malloc(size_t n, size_t size, diag *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    void *p = try_alloc(NULL, n, size, ALLOC_PLAIN, d, fmt, ap);
    va_end(ap);
    return p;
}

void *util_try_map(size_t bytes, diag *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    void *p = try_alloc(NULL, bytes, 1, ALLOC_MAP, d, fmt, ap);
    va_end(ap);
    return p;
}

void util_unmap(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}

void *util_try_calloc(size_t n, size_t size, diag *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    void *p = try_alloc(NULL, n, size, ALLOC_ZERO, d, fmt, ap);
    va_end(ap);
    return p;
}

void *util_try_realloc(void *old, size_t n, size_t size, diag *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    void *p = try_alloc(old, n, size, ALLOC_PLAIN, d, fmt, ap);
    va_end(ap);
    return p;
}
