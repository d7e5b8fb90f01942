/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Little-endian integers at a byte address, aligned or not: the order of
 * every integer kvtier writes, on the wire and on disk (spill slot
 * headers).  No bounds are checked here; the callers check lengths first.
 */
#pragma once

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void kvt_put_le16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void kvt_put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void kvt_put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t kvt_get_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static inline uint32_t kvt_get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static inline uint64_t kvt_get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}
