/* SPDX-License-Identifier: Apache-2.0 */
/* Byte buffers and bounds-checked cursors: how values are written and read. */
#include <stdlib.h>
#include <string.h>

#include "byteorder.h"
#include "kvt-proto.h"

void kvt_buf_init(struct kvt_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void kvt_buf_free(struct kvt_buf *b)
{
	free(b->data);
	kvt_buf_init(b);
}

void kvt_buf_reset(struct kvt_buf *b)
{
	b->len = 0;
	b->error = 0;
}

uint8_t *kvt_buf_reserve(struct kvt_buf *b, size_t n)
{
	if (b->error)
		return NULL;
	if (n > SIZE_MAX / 2 - b->len) {
		b->error = -ENOMEM;
		return NULL;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *d = realloc(b->data, cap);
		if (!d) {
			b->error = -ENOMEM;
			return NULL;
		}
		b->data = d;
		b->cap = cap;
	}
	uint8_t *p = b->data + b->len;
	b->len += n;
	return p;
}

void kvt_put_u8(struct kvt_buf *b, uint8_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 1);
	if (p)
		p[0] = v;
}

void kvt_put_u16(struct kvt_buf *b, uint16_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 2);
	if (p)
		kvt_put_le16(p, v);
}

void kvt_put_u32(struct kvt_buf *b, uint32_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 4);
	if (p)
		kvt_put_le32(p, v);
}

void kvt_put_u64(struct kvt_buf *b, uint64_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 8);
	if (p)
		kvt_put_le64(p, v);
}

void kvt_put_bytes(struct kvt_buf *b, const void *src, size_t n)
{
	uint8_t *p = kvt_buf_reserve(b, n);
	if (p && n)
		memcpy(p, src, n);
}

void kvt_put_str(struct kvt_buf *b, const char *s)
{
	size_t n = s ? strnlen(s, KVT_MAX_STRING) : 0;
	kvt_put_u16(b, (uint16_t)n);
	kvt_put_bytes(b, s, n);
}

int kvt_get_bytes(struct kvt_cursor *c, size_t n, const uint8_t **ret)
{
	if (n > c->left)
		return -EBADMSG;
	*ret = c->p;
	c->p += n;
	c->left -= n;
	return 0;
}

int kvt_get_u8(struct kvt_cursor *c, uint8_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 1, &p);
	if (r < 0)
		return r;
	*ret = p[0];
	return 0;
}

int kvt_get_u16(struct kvt_cursor *c, uint16_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 2, &p);
	if (r < 0)
		return r;
	*ret = kvt_get_le16(p);
	return 0;
}

int kvt_get_u32(struct kvt_cursor *c, uint32_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 4, &p);
	if (r < 0)
		return r;
	*ret = kvt_get_le32(p);
	return 0;
}

int kvt_get_u64(struct kvt_cursor *c, uint64_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 8, &p);
	if (r < 0)
		return r;
	*ret = kvt_get_le64(p);
	return 0;
}

int kvt_get_str(struct kvt_cursor *c, size_t max, char *ret, size_t ret_size)
{
	uint16_t n;
	const uint8_t *p;
	int r = kvt_get_u16(c, &n);
	if (r < 0)
		return r;
	if (n > max || n >= ret_size)
		return -EBADMSG;
	r = kvt_get_bytes(c, n, &p);
	if (r < 0)
		return r;
	/* Strings are text for logs and tables: no embedded NULs. */
	if (memchr(p, 0, n))
		return -EBADMSG;
	memcpy(ret, p, n);
	ret[n] = 0;
	return 0;
}

int kvt_cursor_end(const struct kvt_cursor *c)
{
	return c->left == 0 ? 0 : -EBADMSG;
}
