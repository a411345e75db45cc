/* strmap.c: open addressing with linear probing; keys are borrowed. And
 * the nearest name to a misspelt one (util_closest). */
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a folded through a 64-bit finaliser: cheap and well spread. */
uint64_t util_hash_bytes(const void *p, size_t n, uint64_t seed) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

void strmap_free(strmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static uint32_t slot_of(const strmap *m, const char *key) {
    uint32_t i = (uint32_t)util_hash_bytes(key, strlen(key), 0) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (m->cap - 1);
    return i;
}

bool strmap_get(const strmap *m, const char *key, int32_t *val) {
    if (!m->cap) return false;
    uint32_t i = slot_of(m, key);
    if (!m->keys[i]) return false;
    if (val) *val = m->vals[i];
    return true;
}

void strmap_put(strmap *m, const char *key, int32_t val) {
    if ((m->len + 1) * 2 > m->cap) {
        strmap old = *m;
        m->cap = old.cap ? old.cap * 2 : 64;
        m->keys = xcalloc(m->cap, sizeof *m->keys);
        m->vals = xcalloc(m->cap, sizeof *m->vals);
        m->len = 0;
        for (uint32_t i = 0; i < old.cap; i++)
            if (old.keys[i]) strmap_put(m, old.keys[i], old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    uint32_t i = slot_of(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->len++;
    }
    m->vals[i] = val;
}

static int edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 64 || nb > 64) return 1 << 20;
    int row[65];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag_prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag_prev + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag_prev = up;
        }
    }
    return row[nb];
}

const char *util_closest(const char *key, const char *const *names, size_t n) {
    const char *best = NULL;
    int best_d = 1 << 20;
    for (size_t i = 0; i < n; i++) {
        int dist = edit_distance(key, names[i]);
        if (dist < best_d) {
            best_d = dist;
            best = names[i];
        }
    }
    int len = (int)strlen(key), limit = len / 3 > 3 ? len / 3 : 3;
    return best_d <= limit && best_d < len ? best : NULL;
}
