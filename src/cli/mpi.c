/* mpi.c: tessel run under mpirun (docs/chips.md, "Over MPI"): each rank
 * simulates its own chips and hands its last chip's outputs to the next
 * rank as MPI messages. Built into the tessel command only (libtessel does
 * not depend on MPI); without MPI at build time, a launch of several ranks
 * is refused. Every wait has a timeout (TESSEL_MPI_TIMEOUT seconds, default
 * 600): a rank that never starts or dies without a word is an error, never
 * a hang. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* Under a launcher: OpenMPI's and PMIx's variables, MPICH's. */
static int launched_ranks(void) {
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v) v = getenv("PMI_SIZE");
    return v ? atoi(v) : 0;
}

#ifdef TESSEL_MPI
#include <limits.h>
#include <mpi.h>

enum { TAG_LEN = 71, TAG_DATA = 72 };

static chips_transport tp;
static double timeout_s = 600;
static bool started;

static int wait_for(MPI_Request *rq, const char *what, int peer, diag *d) {
    double end = util_now_seconds() + timeout_s;
    for (;;) {
        int done = 0;
        MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (done) return 0;
        if (util_now_seconds() > end) {
            MPI_Cancel(rq);
            MPI_Request_free(rq);
            return diag_fail(d, "tessel run: error: rank %d: no word from rank %d in %.0f s while %s (is it running? "
                                "TESSEL_MPI_TIMEOUT sets the wait)", tp.rank, peer, timeout_s, what);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static int mpi_send(void *ctx, int to, const uint8_t *bytes, size_t len, diag *d) {
    (void)ctx;
    uint64_t n = len;
    MPI_Request rq;
    MPI_Isend(&n, 1, MPI_UINT64_T, to, TAG_LEN, MPI_COMM_WORLD, &rq);
    if (wait_for(&rq, "handing over", to, d)) return -1;
    for (size_t at = 0; at < len;) {
        int k = len - at > (size_t)INT_MAX ? INT_MAX : (int)(len - at);
        MPI_Isend(bytes + at, k, MPI_BYTE, to, TAG_DATA, MPI_COMM_WORLD, &rq);
        if (wait_for(&rq, "handing over", to, d)) return -1;
        at += (size_t)k;
    }
    return 0;
}

static int mpi_recv(void *ctx, int from, uint8_t **bytes, size_t *len, diag *d) {
    (void)ctx;
    uint64_t n = 0;
    MPI_Request rq;
    MPI_Irecv(&n, 1, MPI_UINT64_T, from, TAG_LEN, MPI_COMM_WORLD, &rq);
    if (wait_for(&rq, "waiting for its chips' results", from, d)) return -1;
    if (n > ((uint64_t)1 << 46)) return diag_fail(d, "tessel run: error: rank %d announced a handover of %llu bytes", from, (unsigned long long)n);
    *bytes = xmalloc(n ? n : 1);
    *len = n;
    for (size_t at = 0; at < n;) {
        int k = n - at > (size_t)INT_MAX ? INT_MAX : (int)(n - at);
        MPI_Irecv(*bytes + at, k, MPI_BYTE, from, TAG_DATA, MPI_COMM_WORLD, &rq);
        if (wait_for(&rq, "receiving its chips' results", from, d)) return -1;
        at += (size_t)k;
    }
    return 0;
}

int cli_mpi_start(int *argc, char ***argv, diag *d) {
    if (launched_ranks() < 1) return 0;
    const char *t = getenv("TESSEL_MPI_TIMEOUT");
    if (t) {
        char *e;
        double v = strtod(t, &e);
        if (*e || !(v > 0)) return diag_fail(d, "tessel: error: TESSEL_MPI_TIMEOUT='%s': a number of seconds above 0", t);
        timeout_s = v;
    }
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return diag_fail(d, "tessel: error: MPI_Init failed");
    started = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &tp.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &tp.ranks);
    tp.send = mpi_send;
    tp.recv = mpi_recv;
    if (tp.ranks > 1) cli_transport = &tp;
    return 0;
}

void cli_mpi_end(void) {
    if (started) MPI_Finalize();
    started = false;
}

#else

int cli_mpi_start(int *argc, char ***argv, diag *d) {
    (void)argc, (void)argv;
    if (launched_ranks() > 1)
        return diag_fail(d, "tessel: error: launched as %d MPI ranks, but this tessel was built without MPI "
                            "(install libopenmpi-dev and rebuild)", launched_ranks());
    return 0;
}

void cli_mpi_end(void) {}

#endif
