/* SPDX-License-Identifier: MIT */
/*
 * mpi_allreduce.c — the baseline for bench/coll.sh: MPI_Allreduce (float sum)
 * latency and bus bandwidth, printed in the same "BENCH ..." format as
 * mt_coll_peer --mode bench. Not part of the CMake build (needs mpicc);
 * bench/coll.sh compiles it under the build directory.
 * Usage: mpirun -np N mpi_allreduce BYTES...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    for (int a = 1; a < argc; a++) {
        size_t n = strtoull(argv[a], NULL, 10) / sizeof(float);
        float *buf = calloc(n + 1, sizeof(float));
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(i % 97) * 1e-3f;
        /* warm up, then rank 0 picks an iteration count for ~0.25 s */
        double t = MPI_Wtime();
        for (int k = 0; k < 3; k++)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double per = (MPI_Wtime() - t) / 3;
        int iters = per > 0 ? (int)(0.25 / per) : 1000;
        iters = iters < 5 ? 5 : (iters > 2000 ? 2000 : iters);
        MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
        /* best of 3 timed trials, as mt_coll_peer --mode bench does */
        double secs = 1e30;
        for (int trial = 0; trial < 3; trial++) {
            MPI_Barrier(MPI_COMM_WORLD);
            t = MPI_Wtime();
            for (int k = 0; k < iters; k++)
                MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double s = (MPI_Wtime() - t) / iters;
            secs = s < secs ? s : secs;
        }
        if (rank == 0) {
            double bytes = (double)n * sizeof(float), algbw = bytes / secs / 1e9;
            printf("BENCH bytes=%.0f ranks=%d iters=%d lat_us=%.1f algbw_GBps=%.3f "
                   "busbw_GBps=%.3f\n",
                   bytes, np, iters, secs * 1e6, algbw, algbw * 2 * (np - 1) / np);
            fflush(stdout);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
