/* SPDX-License-Identifier: MIT */
/*
 * mt_clock.h — the two clocks meshtrain uses: wall time (unix ms, stored and shown)
 * and monotonic time (ms, for deadlines and intervals). Thread-safe, never blocks.
 */
#ifndef MT_CLOCK_H
#define MT_CLOCK_H

#include <stdint.h>

/* Milliseconds since the unix epoch (CLOCK_REALTIME). */
int64_t mt_clock_wall_ms(void);
/* Milliseconds on CLOCK_MONOTONIC; only differences are meaningful. */
int64_t mt_clock_mono_ms(void);
/* Microseconds on CLOCK_MONOTONIC. */
int64_t mt_clock_mono_us(void);

#endif
