/* spans.c: contiguous element spans of every shard, for moving whole tensors
 * between host arrays and tile memory (parameters, inputs, outputs). */
#include "layout.h"

#include <string.h>

void layout_spans(const layout *l, const int64_t *shard, layout_span_fn fn, void *ctx) {
    int last = l->rank - 1;
    int64_t s[LAYOUT_MAX_RANK] = {0}, rowstride[LAYOUT_MAX_RANK];
    int64_t st = 1;
    for (int a = last; a >= 0; a--) {
        rowstride[a] = st;
        st *= l->dim[a];
    }
    int64_t pw = layout_panel_width(l);
    if (shard) memcpy(s, shard, sizeof(int64_t) * (size_t)l->rank);
    for (;;) {
        int64_t lo[LAYOUT_MAX_RANK], hi[LAYOUT_MAX_RANK], e[LAYOUT_MAX_RANK];
        layout_shard_extent(l, s, lo, hi);
        memcpy(e, lo, sizeof e);
        for (;;) {
            int64_t n = hi[last] - lo[last];
            for (int64_t i = 0; i < n;) {
                int64_t take = pw - i % pw < n - i ? pw - i % pw : n - i;
                e[last] = lo[last] + i;
                int64_t elem = 0;
                for (int a = 0; a <= last; a++) elem += e[a] * rowstride[a];
                fn(ctx, s, layout_offset(l, e), elem, take);
                i += take;
            }
            int a = last - 1;
            for (; a >= 0; a--) {
                if (++e[a] < hi[a]) break;
                e[a] = lo[a];
            }
            if (a < 0) break;
        }
        if (shard) return;
        int a = last;
        for (; a >= 0; a--) {
            if (++s[a] < l->parts[a]) break;
            s[a] = 0;
        }
        if (a < 0) return;
    }
}
