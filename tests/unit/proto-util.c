/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the wire-format tests; proto-util.h says what each is for.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto-util.h"

void prefill(struct kvt_buf *b, uint8_t fill)
{
	kvt_buf_init(b);
	if (kvt_buf_reserve(b, 8192))
		memset(b->data, fill, b->cap);
	kvt_buf_reset(b);
}

struct kvt_cursor payload_of(const struct kvt_buf *b)
{
	return (struct kvt_cursor){ b->data + KVT_HEADER_SIZE,
				    b->len - KVT_HEADER_SIZE };
}

bool same_bytes(const struct kvt_buf *a, const struct kvt_buf *b)
{
	return a->error == 0 && b->error == 0 && a->len == b->len &&
	       memcmp(a->data, b->data, a->len) == 0;
}

void check_frame(const char *file, int line, struct kvt_buf *b,
		 uint16_t version, uint16_t opcode, uint16_t flags, uint64_t rid)
{
	struct kvt_header h;

	if (kvt_msg_finish(b, 0) < 0 || kvt_header_parse(b->data, &h) < 0) {
		fprintf(stderr, "%s:%d: message does not frame\n", file, line);
		failures++;
		return;
	}
	if (h.magic != KVT_MAGIC || h.version != version ||
	    h.opcode != opcode || h.flags != flags || h.request_id != rid ||
	    h.length != b->len - KVT_HEADER_SIZE || h.n_fds != 0) {
		fprintf(stderr,
			"%s:%d: header mismatch: version %u opcode %u flags 0x%x rid %" PRIu64
			" length %u n_fds %u\n",
			file, line, h.version, h.opcode, h.flags, h.request_id,
			h.length, h.n_fds);
		failures++;
	}
}

int dec_copy(dec_fn dec, const uint8_t *p, size_t len)
{
	_cleanup_free_ uint8_t *copy = malloc(len ? len : 1);

	if (!copy)
		abort();
	if (len)
		memcpy(copy, p, len);
	return dec(copy, len);
}

void expect_dec(const char *file, int line, dec_fn fn, const struct kvt_buf *b,
		int want, const char *what)
{
	int r = b->error ? b->error : dec_copy(fn, b->data, b->len);

	if (r != want) {
		fprintf(stderr, "%s:%d: %s: decode returned %d, expected %d\n",
			file, line, what, r, want);
		failures++;
	}
}

void put_raw_str(struct kvt_buf *b, const void *s, uint16_t n)
{
	kvt_put_u16(b, n);
	kvt_put_bytes(b, s, n);
}

void fill_key(uint8_t *key, unsigned seed)
{
	for (unsigned i = 0; i < KVT_KEY_SIZE; i++)
		key[i] = (uint8_t)(seed * 131 + i * 7 + 1);
}

void set_extent_note(struct kvt_extent_note *m)
{
	m->extent_id = 0x00c0ffee;
	m->flags = KVT_EXTENT_HUGETLB | KVT_EXTENT_LOCKED;
	m->size = UINT64_C(64) << 30;
	m->slot_bytes = (UINT64_C(2) << 20) + 4096;
	m->numa_node = -1;
}

struct kvt_id_group mha(uint32_t layers, uint32_t kv_heads,
			uint32_t head_bytes)
{
	return (struct kvt_id_group){ layers, KVT_ATTN_MHA, 0, 2, kv_heads,
				      head_bytes, 1, 0 };
}

void build_identity(struct kvt_identity *id)
{
	memset(id, 0, sizeof(*id));
	id->key_scheme = 1;
	strcpy(id->model, "meta-llama/Meta-Llama-3-8B");
	for (unsigned i = 0; i < 32; i++)
		id->weights[i] = (uint8_t)(0xa0 + i);
	id->weights_len = 32;
	id->layer_first = 0;
	id->layer_end = 32;
	id->tp_size = 1;
	id->cp_size = 1;
	id->block_tokens = 16;
	id->n_groups = 1;
	id->groups[0] = mha(32, 8, 256);
}

/* ---- the table runner --------------------------------------------- */

static void encode_sample(const struct proto_sample *s, uint8_t fill,
			  struct kvt_buf *out)
{
	prefill(out, fill);
	s->encode(out, fill, s->op);
	if (!s->bare)
		CHECK(kvt_msg_finish(out, 0) == 0, "%s does not frame",
		      s->name);
}

/* The decoder takes the whole encoding, refuses every shorter prefix and,
 * where it must end at the end, a trailing byte. */
static void check_cuts(const struct proto_sample *s, const struct kvt_buf *b)
{
	size_t off = s->bare ? 0 : KVT_HEADER_SIZE;
	const uint8_t *p = b->data + off;
	size_t len = b->len - off;

	CHECK(b->error == 0 && len > 0, "%s", s->name);
	CHECK(dec_copy(s->dec, p, len) == 0, "%s does not decode", s->name);
	for (size_t k = 0; k < len; k++)
		CHECK(dec_copy(s->dec, p, k) < 0,
		      "%s cut at %zu of %zu decodes", s->name, k, len);
	if (s->trailing) {
		_cleanup_free_ uint8_t *more = malloc(len + 1);

		if (!more)
			abort();
		memcpy(more, p, len);
		more[len] = 0;
		CHECK(dec_copy(s->dec, more, len + 1) < 0,
		      "%s with a trailing byte decodes", s->name);
	}
}

void check_samples(const struct proto_sample *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		_cleanup_(kvt_buf_free) struct kvt_buf a;
		_cleanup_(kvt_buf_free) struct kvt_buf b;

		encode_sample(&s[i], 0xaa, &a);
		encode_sample(&s[i], 0x55, &b);
		CHECK(same_bytes(&a, &b),
		      "%s: the encoder emitted bytes that depend on padding "
		      "or buffer contents",
		      s[i].name);
		if (s[i].dec)
			check_cuts(&s[i], &a);
	}
}

int proto_test_end(const char *name)
{
	if (failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}
