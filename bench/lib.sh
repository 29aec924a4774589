# SPDX-License-Identifier: MIT
# bench/lib.sh — sourced by the bench/ scripts (never run by itself):
#   bench_blas_env    one OpenBLAS thread per process, and OPENBLAS_CORETYPE from the CPU flags
#                     unless the caller set it (Debian's OpenBLAS 0.3.21 misdetects some CPUs)
#   BENCH_AWK_MEDIAN  an awk function med(s): the median of the space-separated numbers in s;
#                     prepend it to an awk program: awk "$BENCH_AWK_MEDIAN"'{ ... med(x) ... }'
bench_blas_env() {
    export OPENBLAS_NUM_THREADS=1
    if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
        if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
        elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
    fi
    return 0
}
# shellcheck disable=SC2034 # used by the scripts that source this file
BENCH_AWK_MEDIAN='function med(s,    a, n, i, j, t) { n = split(s, a, " ");
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
'
