/* SPDX-License-Identifier: MIT */
/* mt_clock.c — wall and monotonic clocks (contract in mt_clock.h). */
#include "clock/mt_clock.h"

#include <time.h>

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t mt_clock_wall_ms(void)
{
    return clock_us(CLOCK_REALTIME) / 1000;
}

int64_t mt_clock_mono_ms(void)
{
    return clock_us(CLOCK_MONOTONIC) / 1000;
}

int64_t mt_clock_mono_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}
