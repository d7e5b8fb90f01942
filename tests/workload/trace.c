/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

/* ---- reading ------------------------------------------------------- */

static int grow(void **p, uint64_t *cap, uint64_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	uint64_t c = *cap ? *cap : 1024;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static int read_key(struct trace *t, const char *line)
{
	const char *s = line + 2;
	uint8_t *key;

	if (grow((void **)&t->keys, &t->cap_keys, t->n_keys + 1, TRACE_KEY_BYTES) < 0)
		return -ENOMEM;
	key = t->keys + t->n_keys * TRACE_KEY_BYTES;
	for (int i = 0; i < TRACE_KEY_BYTES; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		key[i] = (uint8_t)v;
	}
	if (strspn(s, "0123456789abcdef") != 2 * TRACE_KEY_BYTES)
		return -EINVAL;
	t->n_keys++;
	return 0;
}

/* The fields of an R line; *ret_runs: what follows them. */
static int parse_record(const char *line, struct trace_record *ret, const char **ret_runs)
{
	const char *p = line + 1;
	char *end;
	uint64_t f[8];

	/* seq, time, tenant, conversation, turn, kind, lookup, new */
	for (int i = 0; i < 8; i++) {
		while (*p == ' ')
			p++;
		if (i == 5) {
			if (*p != 'c' && *p != 'r')
				return -EINVAL;
			ret->kind = *p++;
			continue;
		}
		errno = 0;
		f[i] = strtoull(p, &end, 10);
		if (errno || end == p)
			return -EINVAL;
		p = end;
	}
	if (f[2] >= TRACE_MAX_TENANTS || f[6] > UINT32_MAX || f[7] > UINT32_MAX)
		return -EINVAL;
	ret->seq = f[0];
	ret->t_us = f[1];
	ret->tenant = (uint32_t)f[2];
	ret->conv = f[3];
	ret->turn = f[4];
	ret->n_lookup = (uint32_t)f[6];
	ret->n_new = (uint32_t)f[7];
	*ret_runs = p;
	return 0;
}

static int read_record(struct trace *t, const char *line, bool keys)
{
	struct trace_record rec;
	const char *p;
	char *end;
	int r = parse_record(line, &rec, &p);

	if (r < 0)
		return r;
	if (grow((void **)&t->r, &t->cap_req, t->n_req + 1, sizeof(*t->r)) < 0)
		return -ENOMEM;
	struct trace_req *q = &t->r[t->n_req];
	*q = (struct trace_req){.off = t->n_pos, .n_lookup = rec.n_lookup, .n_new = rec.n_new,
				.tenant = rec.tenant, .conv = rec.conv, .t_us = rec.t_us};
	uint64_t want = (uint64_t)q->n_lookup + q->n_new;
	while (t->n_pos - q->off < want) {
		while (*p == ' ')
			p++;
		errno = 0;
		uint64_t first = strtoull(p, &end, 10);
		if (errno || end == p || *end != '+')
			return -EINVAL;
		p = end + 1;
		uint64_t count = strtoull(p, &end, 10);
		if (errno || end == p || count == 0 || count > want - (t->n_pos - q->off) ||
		    first + count > UINT32_MAX)
			return -EINVAL;
		p = end;
		/* Keys come before the records that use them. */
		if (keys && first + count > t->n_keys)
			return -ENOKEY;
		if (grow((void **)&t->ids, &t->cap_pos, t->n_pos + count, sizeof(uint32_t)) < 0)
			return -ENOMEM;
		for (uint64_t i = 0; i < count; i++)
			t->ids[t->n_pos++] = (uint32_t)(first + i);
		if (first + count > t->n_blocks)
			t->n_blocks = (uint32_t)(first + count);
	}
	/* What the engine knows: "s<blocks>" shared, "e" the last turn. */
	for (;;) {
		while (*p == ' ' || *p == '\n')
			p++;
		if (*p == 's') {
			errno = 0;
			uint64_t v = strtoull(p + 1, &end, 10);
			if (errno || end == p + 1 || v > q->n_lookup + q->n_new)
				return -EINVAL;
			q->shared = (uint32_t)v;
			p = end;
		} else if (*p == 'e' && (p[1] == ' ' || p[1] == '\n' || !p[1])) {
			q->last = true;
			p++;
		} else {
			break;
		}
	}
	if (*p)
		return -EINVAL;
	if (q->tenant >= t->n_tenants)
		t->n_tenants = q->tenant + 1;
	t->lookups += q->n_lookup;
	t->tenant_blocks[q->tenant] += want;
	t->n_req++;
	return 0;
}

static const char *read_error(int r, const char *line)
{
	if (r == -ENOMEM)
		return "out of memory";
	if (r == -ENOKEY)
		return "a block without a key (a --no-keys trace?)";
	return line[0] == 'K' ? "malformed key" : "malformed record";
}

int trace_read(struct trace *t, const char *path, bool keys, const char *prog)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
	char *line = NULL;
	size_t len = 0;
	uint64_t lineno = 0;
	int r = 0;

	*t = (struct trace){.block_tokens = 16};
	if (!f) {
		r = -errno;
		fprintf(stderr, "%s: cannot open '%s': %s\n", prog, path, strerror(-r));
		return r;
	}
	while (r >= 0 && getline(&line, &len, f) > 0) {
		lineno++;
		if (line[0] == 'K' && keys)
			r = read_key(t, line);
		else if (line[0] == 'R')
			r = read_record(t, line, keys);
		else if (!strncmp(line, "block_tokens ", 13))
			t->block_tokens = (uint32_t)strtoul(line + 13, NULL, 10);
		/* Comments, other headers, and K lines when keys are not
		 * wanted: not needed. */
		if (r < 0)
			fprintf(stderr, "%s: %s:%" PRIu64 ": %s\n", prog, path, lineno,
				read_error(r, line));
	}
	free(line);
	if (f != stdin)
		fclose(f);
	if (r >= 0 && !t->n_req) {
		fprintf(stderr, "%s: %s: no requests\n", prog, path);
		r = -EINVAL;
	}
	return r;
}

void trace_free(struct trace *t)
{
	free(t->r);
	free(t->ids);
	free(t->keys);
}

uint64_t trace_unbounded_hits(const struct trace *t)
{
	uint8_t *seen = calloc(t->n_blocks ? t->n_blocks : 1, 1);
	uint64_t hits = 0;

	if (!seen)
		return 0;
	for (uint64_t q = 0; q < t->n_req; q++) {
		const struct trace_req *r = &t->r[q];
		const uint32_t *ids = t->ids + r->off;
		uint32_t lead = 0;
		while (lead < r->n_lookup && seen[ids[lead]])
			lead++;
		hits += lead;
		for (uint32_t i = 0; i < r->n_lookup + r->n_new; i++)
			seen[ids[i]] = 1;
	}
	free(seen);
	return hits;
}

/* ---- writing ------------------------------------------------------- */

void trace_write_params(FILE *f, uint32_t block_tokens, bool keys)
{
	fprintf(f, "block_tokens %u\n", block_tokens);
	fprintf(f, "keys %d\n", keys ? 1 : 0);
}

void trace_write_key(FILE *f, const uint8_t *key)
{
	static const char hex[] = "0123456789abcdef";
	char s[2 * TRACE_KEY_BYTES + 1];
	for (int i = 0; i < TRACE_KEY_BYTES; i++) {
		s[2 * i] = hex[key[i] >> 4];
		s[2 * i + 1] = hex[key[i] & 15];
	}
	s[2 * TRACE_KEY_BYTES] = 0;
	fprintf(f, "K %s\n", s);
}

void trace_write_record(FILE *f, const struct trace_record *rec, const uint32_t *ids)
{
	uint32_t n = rec->n_lookup + rec->n_new;

	fprintf(f, "R %" PRIu64 " %" PRIu64 " %u %" PRIu64 " %" PRIu64 " %c %u %u", rec->seq,
		rec->t_us, rec->tenant, rec->conv, rec->turn, rec->kind, rec->n_lookup, rec->n_new);
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i + 1;
		while (j < n && ids[j] == ids[j - 1] + 1)
			j++;
		fprintf(f, " %u+%u", ids[i], j - i);
		i = j;
	}
	if (rec->shared)
		fprintf(f, " s%u", rec->shared);
	if (rec->last)
		fputs(" e", f);
	fputc('\n', f);
}

/* ---- hints ----------------------------------------------------------- */

static const char *const names[] = {"request", "end", "turns", "shared"};

void trace_hint_name(unsigned mode, char *buf, size_t size)
{
	size_t len = 0;

	snprintf(buf, size, "none");
	for (unsigned i = 0; mode && i < sizeof(names) / sizeof(names[0]); i++)
		if (mode & (1u << i))
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s",
						len ? "+" : "", names[i]);
}

int trace_hint_from_name(const char *s)
{
	unsigned mode = 0;

	if (!strcmp(s, "none"))
		return 0;
	if (!strcmp(s, "all"))
		return TRACE_HINT_END | TRACE_HINT_TURNS | TRACE_HINT_SHARED;
	while (*s) {
		size_t n = strcspn(s, "+");
		unsigned i = 0;
		while (i < sizeof(names) / sizeof(names[0]) &&
		       (strlen(names[i]) != n || strncmp(s, names[i], n)))
			i++;
		if (i == sizeof(names) / sizeof(names[0]))
			return -1;
		mode |= 1u << i;
		s += n + (s[n] == '+');
	}
	return mode ? (int)mode : -1;
}
