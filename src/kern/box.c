/* box.c: the boxes runs walk (kern.h). */
#include "kern.h"

void kernel_box_order(kernel_box *b) {
    for (int d = 1; d < b->nd; d++)
        for (int k = d; k > 0 && b->st[0][k - 1] < b->st[0][k]; k--) {
            int64_t t = b->n[k];
            b->n[k] = b->n[k - 1];
            b->n[k - 1] = t;
            for (int i = 0; i < b->nops; i++) {
                t = b->st[i][k];
                b->st[i][k] = b->st[i][k - 1];
                b->st[i][k - 1] = t;
            }
        }
}

void kernel_box_collapse(kernel_box *b) {
    int m = 0;
    for (int d = 0; d < b->nd; d++) {
        if (b->n[d] == 1) continue;
        bool merge = m > 0;
        for (int i = 0; i < b->nops && merge; i++) merge = b->st[i][m - 1] == b->st[i][d] * b->n[d];
        if (merge) {
            b->n[m - 1] *= b->n[d];
            for (int i = 0; i < b->nops; i++) b->st[i][m - 1] = b->st[i][d];
            continue;
        }
        b->n[m] = b->n[d];
        for (int i = 0; i < b->nops; i++) b->st[i][m] = b->st[i][d];
        m++;
    }
    if (m == 0) {
        b->n[0] = 1;
        for (int i = 0; i < b->nops; i++) b->st[i][0] = 0;
        m = 1;
    }
    b->nd = m;
}
