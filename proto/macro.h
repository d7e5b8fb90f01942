/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The few macros every part of kvtier uses: error propagation, array
 * lengths, the structure that holds a member, scope-bound cleanup in the
 * manner of systemd's _cleanup_, and the monotonic clock.
 *
 *	_cleanup_free_ char *p = malloc(n);
 *	_cleanup_close_ int fd = open(path, O_RDONLY);
 *	...
 *	return TAKE_PTR(p);	   (ownership leaves the scope; nothing freed)
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Return the negative errno of x, if any, from the calling function. */
#define TRY(x)                          \
	do {                            \
		int _try_r = (x);       \
		if (_try_r < 0)         \
			return _try_r;  \
	} while (0)

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The type (a struct) whose field member is at ptr: from an embedded list
 * node or ops base back to what embeds it. */
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void kvt_freep(void *p)
{
	free(*(void **)p);
}

static inline void kvt_closep(const int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

#define _cleanup_free_ _cleanup_(kvt_freep)
#define _cleanup_close_ _cleanup_(kvt_closep)

/* Declares name##p(type **), which calls func on a non-NULL pointer. */
#define KVT_DEFINE_CLEANUP(type, func)                  \
	static inline void func##p(type **p)            \
	{                                               \
		if (*p)                                 \
			func(*p);                       \
	}

/* Hand a pointer (or a descriptor) out of a _cleanup_ scope. */
#define TAKE_PTR(p)                                     \
	({                                              \
		__typeof__(p) _take_p = (p);            \
		(p) = NULL;                             \
		_take_p;                                \
	})
#define TAKE_FD(fd)                                     \
	({                                              \
		int _take_fd = (fd);                    \
		(fd) = -1;                              \
		_take_fd;                               \
	})

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t kvt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
