/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the wire-format tests (test-proto-*.c, one per message family)
 * share: buffers with a known fill, the header check of a framed message,
 * decoding from an exact-length copy, the sample identity, and the one
 * table runner every encoder/decoder pair goes through (check_samples):
 * no byte of the output depends on padding or on the buffer's old
 * contents, and the decoder takes the whole encoding but refuses every
 * truncation of it and a trailing byte.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../check.h"
#include "kvt-proto.h"
#include "macro.h"

#define RID UINT64_C(0x8877665544332211)

/* A decoder over exactly len bytes of payload: 0 or a negative errno. */
typedef int (*dec_fn)(const uint8_t *p, size_t len);

/* Give the buffer's storage a known fill (and reset it), so a byte the
 * encoder reserves but never writes shows up as a difference between two
 * fills. */
void prefill(struct kvt_buf *b, uint8_t fill);
/* The payload of the message in b. */
struct kvt_cursor payload_of(const struct kvt_buf *b);
bool same_bytes(const struct kvt_buf *a, const struct kvt_buf *b);

/* Finish the message in b and check its header says what was asked for. */
void check_frame(const char *file, int line, struct kvt_buf *b,
		 uint16_t version, uint16_t opcode, uint16_t flags, uint64_t rid);
#define CHECK_FRAME(b, v, op, fl, rid) \
	check_frame(__FILE__, __LINE__, b, v, op, fl, rid)

/* Decode a copy of exactly len bytes, so a read past them is caught by the
 * sanitizers rather than landing in the rest of the message. */
int dec_copy(dec_fn dec, const uint8_t *p, size_t len);
/* Decode the payload built in b (no header) with fn; expect want. */
void expect_dec(const char *file, int line, dec_fn fn, const struct kvt_buf *b,
		int want, const char *what);
#define EXPECT_DEC(fn, b, want, what) \
	expect_dec(__FILE__, __LINE__, fn, b, want, what)

/* A u16 length and n raw bytes, which may break the string rules. */
void put_raw_str(struct kvt_buf *b, const void *s, uint16_t n);
/* Key bytes that differ from seed to seed and from byte to byte. */
void fill_key(uint8_t *key, unsigned seed);

/* The sample EXTENT_ADDED note (also the message the socket tests send). */
void set_extent_note(struct kvt_extent_note *m);

/* An MHA group: K and V planes, dtype 1, no scales. */
struct kvt_id_group mha(uint32_t layers, uint32_t kv_heads,
			uint32_t head_bytes);
/* Llama-3-8B-like: 32 layers, 8 KV heads of 128 fp16 values. */
void build_identity(struct kvt_identity *id);

/* One row of a family's table of encoder/decoder pairs. */
struct proto_sample {
	const char *name;
	/* Encode into b (already filled and reset); every struct it encodes
	 * from is filled with fill before its fields are set.  op is the row's
	 * opcode, for the encoders that take one. */
	void (*encode)(struct kvt_buf *b, uint8_t fill, uint16_t op);
	uint16_t op;
	dec_fn dec;    /* NULL: no one decoder takes all of it (records) */
	bool bare;     /* no header to finish: records, identities */
	bool trailing; /* the decoder must refuse bytes after its end */
};

void check_samples(const struct proto_sample *s, size_t n);
#define CHECK_SAMPLES(table) check_samples(table, ARRAY_SIZE(table))

/* Print the verdict; returns the program's exit status. */
int proto_test_end(const char *name);
