/* SPDX-License-Identifier: MIT */
/*
 * mt_blas.h — make OpenBLAS use this CPU's fast kernels and one thread per device.
 *
 * Debian's OpenBLAS 0.3.21 misdetects recent Intel CPUs and falls back to its slowest kernels
 * (about 5x slower sgemm). OPENBLAS_CORETYPE fixes that but is read when the library loads,
 * before main(), so mt_blas_boot() sets it from the CPU's features and re-executes the program
 * once (an environment marker prevents loops). It never picks a type the CPU lacks.
 * Called first thing in main() of every program (CLI, coordinator, worker).
 * Threading: call from main() before any thread exists (it may exec). Tests:
 * tests/unit/test_blas.c.
 */
#ifndef MT_BLAS_H
#define MT_BLAS_H

#include <stdbool.h>

/* Environment marker set before the re-exec. */
#define MT_BLAS_BOOT_ENV "MT_BLAS_BOOTED"

/* The core type for these CPU features: "SkylakeX" (avx512f), "Haswell" (avx2) or NULL (leave
 * OpenBLAS' own detection). Pure function. */
const char *mt_blas_pick_coretype(bool avx512f, bool avx2);

/*
 * If OPENBLAS_CORETYPE is unset and this process was not re-executed yet: pick the type from
 * __builtin_cpu_supports, setenv it, the marker and (when unset) OPENBLAS_NUM_THREADS=1, and
 * execv("/proc/self/exe", argv) (argv borrowed; on exec failure it logs a warning, restores the
 * environment and continues). Then, unless OPENBLAS_NUM_THREADS was set by the user, use one BLAS
 * thread. Logs the choice at debug level. Never returns an error.
 */
void mt_blas_boot(int argc, char **argv);

/* OpenBLAS' name of the core in use ("SkylakeX", "Prescott" ...). Static string. */
const char *mt_blas_corename(void);

#endif
