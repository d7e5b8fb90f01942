/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake.h"

struct cursor {
	const char *s, *p, *end;
	struct mooncake_parser *mp;
};

static int fail(struct cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct cursor *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->mp->error, sizeof(c->mp->error), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A syntax error, with the column: the line may be megabytes long. */
static int bad_json(struct cursor *c, const char *what)
{
	if (c->p >= c->end)
		return fail(c, "bad JSON: the line ends where %s was expected", what);
	return fail(c, "bad JSON at column %zu: %s expected", (size_t)(c->p - c->s) + 1, what);
}

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
		c->p++;
}

static bool take(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return true;
	}
	return false;
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static int hex_value(char ch)
{
	if (is_digit(ch))
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * A string, at its opening quote.  Its decoded bytes go to out (up to cap;
 * *ret_len is the whole decoded length, so a longer one is known not to be
 * any field name).  A \u escape beyond ASCII decodes to one 0xff byte: no
 * field of the format is spelled with one.
 */
static int parse_string(struct cursor *c, char *out, size_t cap, size_t *ret_len)
{
	size_t n = 0;

	if (!take(c, '"'))
		return bad_json(c, "a string");
	for (;;) {
		if (c->p >= c->end)
			return bad_json(c, "the end of a string");
		unsigned char ch = (unsigned char)*c->p++;
		if (ch == '"')
			break;
		if (ch < 0x20) {
			c->p--;
			return bad_json(c, "an escape instead of a control character in a string,");
		}
		if (ch == '\\') {
			if (c->p >= c->end)
				return bad_json(c, "an escape");
			char e = *c->p++;
			const char *plain = strchr("\"\\/bfnrt", e);
			if (e && plain) {
				static const char to[] = "\"\\/\b\f\n\r\t";
				ch = (unsigned char)to[plain - "\"\\/bfnrt"];
			} else if (e == 'u') {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					int h = c->p < c->end ? hex_value(*c->p) : -1;
					if (h < 0)
						return bad_json(c, "four hex digits after \\u");
					v = v * 16 + (unsigned)h;
					c->p++;
				}
				ch = v < 0x80 ? (unsigned char)v : 0xff;
			} else {
				c->p -= 2;
				return bad_json(c, "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
			}
		}
		if (out && n < cap)
			out[n] = (char)ch;
		n++;
	}
	if (ret_len)
		*ret_len = n;
	return 0;
}

/* A JSON number as written: the format's fields need more (parse_uint),
 * an unknown field only its syntax. */
struct number {
	const char *start;
	int width; /* of its text, at most 40, for messages */
	bool neg, integral, overflow;
	uint64_t v;
};

static int scan_number(struct cursor *c, struct number *ret)
{
	struct number n = {.integral = true};

	skip_ws(c);
	n.start = c->p;
	if (c->p < c->end && *c->p == '-') {
		n.neg = true;
		c->p++;
	}
	if (c->p >= c->end || !is_digit(*c->p))
		return c->p = n.start, bad_json(c, "a value");
	if (*c->p == '0' && c->p + 1 < c->end && is_digit(c->p[1]))
		return c->p++, bad_json(c, "no leading zero in a number;");
	for (; c->p < c->end && is_digit(*c->p); c->p++) {
		unsigned d = (unsigned)(*c->p - '0');
		if (n.v > (UINT64_MAX - d) / 10)
			n.overflow = true;
		else
			n.v = n.v * 10 + d;
	}
	if (c->p < c->end && *c->p == '.') {
		n.integral = false;
		if (++c->p >= c->end || !is_digit(*c->p))
			return bad_json(c, "a digit after the decimal point");
		while (c->p < c->end && is_digit(*c->p))
			c->p++;
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
		n.integral = false;
		if (++c->p < c->end && (*c->p == '+' || *c->p == '-'))
			c->p++;
		if (c->p >= c->end || !is_digit(*c->p))
			return bad_json(c, "a digit in the exponent");
		while (c->p < c->end && is_digit(*c->p))
			c->p++;
	}
	n.width = (int)(c->p - n.start > 40 ? 40 : c->p - n.start);
	*ret = n;
	return 0;
}

/* What every field of the format is: a non-negative integer that fits 64
 * bits.  1.0 and 1e3 are refused too: the format writes integers. */
static int parse_uint(struct cursor *c, const char *field, uint64_t *ret)
{
	struct number n;
	int r;

	skip_ws(c);
	if (c->p < c->end && *c->p != '-' && !is_digit(*c->p))
		return fail(c, "%s: a non-negative integer expected at column %zu", field,
			    (size_t)(c->p - c->s) + 1);
	r = scan_number(c, &n);
	if (r < 0)
		return r;
	if (n.neg)
		return fail(c, "%s: %.*s is negative", field, n.width, n.start);
	if (!n.integral)
		return fail(c, "%s: %.*s is not an integer", field, n.width, n.start);
	if (n.overflow)
		return fail(c, "%s: %.*s does not fit 64 bits", field, n.width, n.start);
	*ret = n.v;
	return 0;
}

static int parse_ids(struct cursor *c, struct mooncake_req *ret)
{
	struct mooncake_parser *mp = c->mp;
	uint32_t n = 0;

	if (!take(c, '['))
		return bad_json(c, "hash_ids: an array");
	if (!take(c, ']'))
		for (;;) {
			uint64_t v;
			int r = parse_uint(c, "hash_ids", &v);
			if (r < 0)
				return r;
			if (n == MOONCAKE_MAX_IDS)
				return fail(c, "hash_ids: more than %u ids", MOONCAKE_MAX_IDS);
			if (n == mp->cap_ids) {
				uint32_t cap = mp->cap_ids ? mp->cap_ids * 2 : 256;
				uint64_t *ids = realloc(mp->ids, (size_t)cap * sizeof(*ids));
				if (!ids)
					return -ENOMEM;
				mp->ids = ids;
				mp->cap_ids = cap;
			}
			mp->ids[n++] = v;
			if (take(c, ']'))
				break;
			if (!take(c, ','))
				return bad_json(c, "',' or ']'");
		}
	ret->hash_ids = mp->ids;
	ret->n_hash_ids = n;
	return 0;
}

/* Any JSON value, passed over: the fields the format does not define. */
static int skip_value(struct cursor *c, unsigned depth)
{
	static const char *const words[] = {"true", "false", "null"};
	struct number ignored;
	int r;

	skip_ws(c);
	if (c->p >= c->end)
		return bad_json(c, "a value");
	char open = *c->p;
	if (open == '"')
		return parse_string(c, NULL, 0, NULL);
	if (open == '[' || open == '{') {
		char close = open == '[' ? ']' : '}';
		if (depth >= MOONCAKE_MAX_DEPTH)
			return fail(c, "values nested deeper than %d at column %zu", MOONCAKE_MAX_DEPTH,
				    (size_t)(c->p - c->s) + 1);
		c->p++;
		if (take(c, close))
			return 0;
		for (;;) {
			if (open == '{') {
				r = parse_string(c, NULL, 0, NULL);
				if (r < 0)
					return r;
				if (!take(c, ':'))
					return bad_json(c, "':'");
			}
			r = skip_value(c, depth + 1);
			if (r < 0)
				return r;
			if (take(c, close))
				return 0;
			if (!take(c, ','))
				return bad_json(c, open == '[' ? "',' or ']'" : "',' or '}'");
		}
	}
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		size_t n = strlen(words[i]);
		if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, words[i], n)) {
			c->p += n;
			return 0;
		}
	}
	/* Any number will do for a field the format does not define. */
	return scan_number(c, &ignored);
}

enum { F_TIMESTAMP, F_INPUT, F_OUTPUT, F_HASH_IDS, N_FIELDS };
static const char *const field_names[N_FIELDS] = {"timestamp", "input_length", "output_length",
						  "hash_ids"};

static int parse_field(struct cursor *c, struct mooncake_req *ret, bool *seen)
{
	char name[32];
	size_t len;
	int f, r = parse_string(c, name, sizeof(name), &len);

	if (r < 0)
		return r;
	if (!take(c, ':'))
		return bad_json(c, "':'");
	for (f = 0; f < N_FIELDS; f++)
		if (len == strlen(field_names[f]) && !memcmp(name, field_names[f], len))
			break;
	if (f == N_FIELDS)
		return skip_value(c, 1);
	if (seen[f])
		return fail(c, "field '%s' appears twice", field_names[f]);
	seen[f] = true;
	switch (f) {
	case F_TIMESTAMP: return parse_uint(c, field_names[f], &ret->timestamp_ms);
	case F_INPUT: return parse_uint(c, field_names[f], &ret->input_length);
	case F_OUTPUT: return parse_uint(c, field_names[f], &ret->output_length);
	default: return parse_ids(c, ret);
	}
}

int mooncake_parse_line(struct mooncake_parser *p, const char *line, size_t len,
			struct mooncake_req *ret)
{
	struct cursor c = {.s = line, .p = line, .end = line + len, .mp = p};
	bool seen[N_FIELDS] = {false};
	int r;

	*ret = (struct mooncake_req){0};
	p->error[0] = 0;
	if (!take(&c, '{'))
		return bad_json(&c, "'{' (one JSON object per line)");
	if (!take(&c, '}'))
		for (;;) {
			r = parse_field(&c, ret, seen);
			if (r < 0)
				return r;
			if (take(&c, '}'))
				break;
			if (!take(&c, ','))
				return bad_json(&c, "',' or '}'");
		}
	skip_ws(&c);
	if (c.p < c.end)
		return bad_json(&c, "the end of the line after the object");
	for (int f = 0; f < N_FIELDS; f++)
		if (!seen[f])
			return fail(&c, "missing field '%s'", field_names[f]);
	/* The last block may be partial; no block may be empty. */
	uint64_t need = ret->input_length / MOONCAKE_BLOCK_TOKENS +
			(ret->input_length % MOONCAKE_BLOCK_TOKENS != 0);
	if (need != ret->n_hash_ids)
		return fail(&c,
			    "input_length %" PRIu64 " needs %" PRIu64 " blocks of %d tokens, but hash_ids "
			    "has %u",
			    ret->input_length, need, MOONCAKE_BLOCK_TOKENS, ret->n_hash_ids);
	return 0;
}

void mooncake_parser_done(struct mooncake_parser *p)
{
	free(p->ids);
	p->ids = NULL;
	p->cap_ids = 0;
}
