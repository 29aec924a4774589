/* SPDX-License-Identifier: MIT */
/*
 * mt_alloc.h — allocation wrappers with a failure-injection hook for tests.
 *
 * Constructors and decoders allocate through these so unit tests can fail the
 * 1st, 2nd, ... Nth allocation (curl's torture mode) and prove, under ASan,
 * that every failure path returns RESOURCE_EXHAUSTED and leaks nothing.
 * The hook is test-only process state; in production it is never armed and
 * costs one relaxed atomic load. Thread-safe.
 * Tests: tests/unit/test_alloc.c.
 */
#ifndef MT_ALLOC_H
#define MT_ALLOC_H

#include <stddef.h>

/* malloc/calloc/realloc/strdup that fail (return NULL) when the test hook says so. */
void *mt_malloc(size_t n);
void *mt_calloc(size_t count, size_t size);
void *mt_realloc(void *p, size_t n);
char *mt_strdup(const char *s);
/* free(); NULL is a no-op. */
void mt_free(void *p);

/*
 * Test hook: after `n` more successful allocations, every further allocation
 * fails until mt_alloc_fail_reset(). n < 0 disarms. Returns nothing.
 */
void mt_alloc_fail_after(long n);
void mt_alloc_fail_reset(void);
/* Number of allocations refused since the hook was last armed. */
long mt_alloc_failures(void);

#endif
