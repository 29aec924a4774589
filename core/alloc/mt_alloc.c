/* SPDX-License-Identifier: MIT */
/*
 * mt_alloc.c — allocation wrappers and the failure-injection hook (mt_alloc.h).
 */
#include "alloc/mt_alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic long fail_countdown = -1; /* < 0: disarmed */
static _Atomic long fail_count = 0;

static int should_fail(void)
{
    long left = atomic_load_explicit(&fail_countdown, memory_order_relaxed);

    if (left < 0)
        return 0;
    if (left == 0) {
        atomic_fetch_add(&fail_count, 1);
        return 1;
    }
    atomic_fetch_sub(&fail_countdown, 1);
    return 0;
}

void *mt_malloc(size_t n)
{
    return should_fail() ? NULL : malloc(n ? n : 1);
}

void *mt_calloc(size_t count, size_t size)
{
    return should_fail() ? NULL : calloc(count ? count : 1, size ? size : 1);
}

void *mt_realloc(void *p, size_t n)
{
    return should_fail() ? NULL : realloc(p, n ? n : 1);
}

char *mt_strdup(const char *s)
{
    size_t n;
    char *d;

    if (s == NULL)
        return NULL;
    n = strlen(s) + 1;
    d = mt_malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

void mt_free(void *p)
{
    free(p);
}

void mt_alloc_fail_after(long n)
{
    atomic_store(&fail_count, 0);
    atomic_store(&fail_countdown, n);
}

void mt_alloc_fail_reset(void)
{
    atomic_store(&fail_countdown, -1);
}

long mt_alloc_failures(void)
{
    return atomic_load(&fail_count);
}
