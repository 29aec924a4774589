/* SPDX-License-Identifier: MIT */
/*
 * mt_blas.c — OpenBLAS core type selection by re-exec and thread count (contract in mt_blas.h).
 * Threading: main() only, before threads. Tests: tests/unit/test_blas.c,
 * tests/integration/test_train_cli.sh.
 */
#include "blas/mt_blas.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log/mt_log.h"

const char *mt_blas_pick_coretype(bool avx512f, bool avx2)
{
    if (avx512f)
        return "SkylakeX";
    if (avx2)
        return "Haswell";
    return NULL;
}

void mt_blas_boot(int argc, char **argv)
{
    const char *type = getenv("OPENBLAS_CORETYPE");
    const char *threads = getenv("OPENBLAS_NUM_THREADS");

    if ((type == NULL || type[0] == '\0') && getenv(MT_BLAS_BOOT_ENV) == NULL && argc > 0) {
        const char *pick;
        __builtin_cpu_init();
        pick = mt_blas_pick_coretype(__builtin_cpu_supports("avx512f") != 0,
                                     __builtin_cpu_supports("avx2") != 0);
        /* the re-executed process also starts with one BLAS thread: OpenBLAS spawns its
         * thread pool when it loads, and idle pool threads spin in sched_yield */
        if (setenv(MT_BLAS_BOOT_ENV, "1", 1) == 0 && pick != NULL &&
            setenv("OPENBLAS_CORETYPE", pick, 1) == 0 &&
            (threads != NULL || setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0)) {
            /* exec the resolved path, not /proc/self/exe: the process name (comm) comes
             * from the file name, and ps/pgrep/systemd must keep seeing meshtrain-worker */
            char self[4096];
            ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
            if (n > 0) {
                self[n] = '\0';
                execv(self, argv);
            }
            execv("/proc/self/exe", argv);
            mt_log_warn("OpenBLAS core type %s: re-exec failed (%s); keeping %s", pick,
                        strerror(errno), mt_blas_corename());
            unsetenv("OPENBLAS_CORETYPE");
            if (threads == NULL)
                unsetenv("OPENBLAS_NUM_THREADS");
        }
    }
    if (threads == NULL || threads[0] == '\0')
        openblas_set_num_threads(1);
    mt_log_debug("OpenBLAS core %s (OPENBLAS_CORETYPE=%s), %s thread(s)", mt_blas_corename(),
                 getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset",
                 threads && threads[0] ? threads : "1");
}

const char *mt_blas_corename(void)
{
    const char *n = openblas_get_corename();
    return n != NULL ? n : "unknown";
}
