/* arena.c: bump allocation in chained blocks; everything is freed at once. */
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct arena_block {
    arena_block *prev;
    size_t cap;   /* payload bytes */
    size_t used;  /* payload bytes handed out */
    size_t last;  /* offset of the newest allocation, for arena_grow */
    _Alignas(16) unsigned char data[];
};

enum { ARENA_ALIGN = 16, ARENA_MIN_BLOCK = 64 * 1024 };

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

static size_t round_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

void *arena_alloc(arena *a, size_t bytes) {
    size_t need = round_up(bytes ? bytes : 1);
    arena_block *b = a->head;
    if (!b || b->cap - b->used < need) {
        size_t cap = need > ARENA_MIN_BLOCK ? need : ARENA_MIN_BLOCK;
        if (b && cap < b->cap * 2 && b->cap < 64u * 1024 * 1024) cap = b->cap * 2;
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

void *arena_grow(arena *a, void *p, size_t old_bytes, size_t new_bytes) {
    if (new_bytes <= old_bytes) return p;
    arena_block *b = a->head;
    if (p && b && (unsigned char *)p == b->data + b->last) {
        size_t need = round_up(new_bytes);
        if (b->last + need <= b->cap) {
            size_t old_round = b->used - b->last;
            memset(b->data + b->used, 0, b->last + need - b->used);
            b->used = b->last + need;
            a->used_bytes += need - old_round;
            return p;
        }
    }
    void *q = arena_alloc(a, new_bytes);
    if (old_bytes) memcpy(q, p, old_bytes);
    return q;
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

static void *check_alloc(void *p, size_t bytes) {
    if (!p && bytes) {
        fprintf(stderr, "tessel: out of memory allocating %zu bytes\n", bytes);
        abort();
    }
    return p;
}

void *xmalloc(size_t bytes) { return check_alloc(malloc(bytes ? bytes : 1), bytes); }
void *xcalloc(size_t n, size_t bytes) { return check_alloc(calloc(n ? n : 1, bytes ? bytes : 1), n * bytes); }
void *xrealloc(void *p, size_t bytes) { return check_alloc(realloc(p, bytes ? bytes : 1), bytes); }
char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}
