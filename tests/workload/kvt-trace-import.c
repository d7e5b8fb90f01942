/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-trace-import: turn a published Mooncake trace (jsonl, one request per
 * line, the prompt as hash ids of 512-token blocks) into kvtier's trace
 * format, so that kvt-policy-sim and kvt-replay run on the traffic operators
 * publish.
 *
 * It assumes no more than the format promises.  Ids are remapped: they are
 * only names, equal when the prefixes up to the end of their block are
 * equal, so they are mapped to the trace's dense ids in order of first use
 * and their values mean nothing.  The last block of a prompt may be
 * partial: only its full sub-blocks are blocks an engine looks up, and the
 * partial rest, when kept, is a block of its own that a full block of the
 * same id never shares.  Answers add no ids: what an answer's tokens are,
 * no later hash id says, so its blocks (when written) are fresh and never
 * looked up again.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mooncake.h"
#include "trace.h"
#include "../helpers.h"

/* Longer lines are refused: a line's memory is bounded whatever the input.
 * The longest prompt the ids allow (MOONCAKE_MAX_IDS) fits easily. */
#define MAX_LINE (32u << 20)
#define PROGRESS_MIN_BYTES (16u << 20)

struct params {
	uint32_t block_tokens;
	bool partial_tail; /* the partial rest of a prompt is a block of its own */
	bool answer_blocks; /* the blocks an answer completes are written */
	bool keys;
};

/* ---- sub-blocks to ids --------------------------------------------- */

/* What names a block of the output: a hash id, the sub-block within its
 * 512 tokens, and for a partial rest its token count (0: full).  Answer
 * blocks are not in the map: each is new. */
struct slot {
	uint64_t hash;
	uint32_t sub; /* index | tail tokens << 16 */
	uint32_t id1; /* id + 1; 0 empty */
};

struct idmap {
	struct slot *t;
	uint64_t cap, n;
};

static uint64_t slot_hash(uint64_t hash, uint32_t sub)
{
	return mix(hash ^ mix(sub));
}

static int idmap_grow(struct idmap *m)
{
	uint64_t cap = m->cap ? m->cap * 2 : 1 << 16;
	struct slot *t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint64_t i = 0; i < m->cap; i++) {
		if (!m->t[i].id1)
			continue;
		uint64_t j = slot_hash(m->t[i].hash, m->t[i].sub) & (cap - 1);
		while (t[j].id1)
			j = (j + 1) & (cap - 1);
		t[j] = m->t[i];
	}
	free(m->t);
	m->t = t;
	m->cap = cap;
	return 0;
}

/* The slot for (hash, sub): its id1 is 0 when it is new. */
static int idmap_find(struct idmap *m, uint64_t hash, uint32_t sub, struct slot **ret)
{
	if ((m->n + 1) * 2 > m->cap && idmap_grow(m) < 0)
		return -ENOMEM;
	uint64_t j = slot_hash(hash, sub) & (m->cap - 1);
	for (; m->t[j].id1; j = (j + 1) & (m->cap - 1))
		if (m->t[j].hash == hash && m->t[j].sub == sub)
			break;
	*ret = &m->t[j];
	return 0;
}

/* ---- the import ---------------------------------------------------- */

struct importer {
	struct params p;
	FILE *out;
	struct idmap map;
	uint32_t n_ids;       /* ids given so far: 0..n_ids-1 */
	uint32_t *ids;        /* the record being built */
	uint32_t cap_ids;
	uint64_t *sorted;     /* scratch: one request's hash ids, sorted */
	uint32_t cap_sorted;
	uint64_t seq, last_ms;
	/* totals for the summary */
	uint64_t lookups, tails, answers;
	char error[160];
};

/*
 * A block's key for kvt-replay: a function of what names it.  The first
 * word is a bijection of the id, so two ids never share a key and the
 * trace's one-to-one rule holds by construction, not by luck.
 */
static void block_key(uint32_t id, uint64_t a, uint64_t b, uint8_t *key)
{
	uint64_t w[4];

	w[0] = mix(id);
	w[1] = mix(a ^ mix(b));
	w[2] = mix(w[1] ^ UINT64_C(0x6b76746965722d31));
	w[3] = mix(w[2] ^ a);
	memcpy(key, w, sizeof(w));
}

static int push(struct importer *im, uint32_t id, uint32_t n)
{
	if (n == im->cap_ids) {
		uint32_t cap = im->cap_ids ? im->cap_ids * 2 : 1024;
		uint32_t *ids = realloc(im->ids, (size_t)cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		im->ids = ids;
		im->cap_ids = cap;
	}
	im->ids[n] = id;
	return 0;
}

/* The next id; its K line goes out at once, before the record using it. */
static int new_id(struct importer *im, uint64_t a, uint64_t b, uint32_t *ret)
{
	if (im->n_ids >= UINT32_MAX - 1)
		return -EOVERFLOW;
	if (im->p.keys) {
		uint8_t key[TRACE_KEY_BYTES];
		block_key(im->n_ids, a, b, key);
		trace_write_key(im->out, key);
	}
	*ret = im->n_ids++;
	return 0;
}

static int block_id(struct importer *im, uint64_t hash, uint32_t index, uint32_t tail,
		    uint32_t *ret)
{
	uint32_t sub = index | tail << 16;
	struct slot *s;
	int r = idmap_find(&im->map, hash, sub, &s);

	if (r < 0)
		return r;
	if (!s->id1) {
		uint32_t id;
		r = new_id(im, hash, sub, &id);
		if (r < 0)
			return r;
		*s = (struct slot){.hash = hash, .sub = sub, .id1 = id + 1};
		im->map.n++;
	}
	*ret = s->id1 - 1;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* What the format promises but the parser cannot see: a prefix hash names
 * its whole prefix, so no chain holds one twice, and requests come in
 * arrival order. */
static int check_request(struct importer *im, const struct mooncake_req *q)
{
	uint32_t n = q->n_hash_ids;

	if (q->timestamp_ms < im->last_ms) {
		snprintf(im->error, sizeof(im->error),
			 "timestamp %" PRIu64 " is before the previous request's %" PRIu64
			 " (requests must be in arrival order)",
			 q->timestamp_ms, im->last_ms);
		return -EINVAL;
	}
	if (q->timestamp_ms > UINT64_MAX / 1000) {
		snprintf(im->error, sizeof(im->error), "timestamp %" PRIu64 " ms overflows in µs",
			 q->timestamp_ms);
		return -EINVAL;
	}
	if (n > im->cap_sorted) {
		uint64_t *s = realloc(im->sorted, (size_t)n * sizeof(*s));
		if (!s)
			return -ENOMEM;
		im->sorted = s;
		im->cap_sorted = n;
	}
	if (n)
		memcpy(im->sorted, q->hash_ids, (size_t)n * sizeof(*im->sorted));
	qsort(im->sorted, n, sizeof(*im->sorted), cmp_u64);
	for (uint32_t i = 1; i < n; i++)
		if (im->sorted[i] == im->sorted[i - 1]) {
			snprintf(im->error, sizeof(im->error),
				 "hash id %" PRIu64 " appears twice in one prompt", im->sorted[i]);
			return -EINVAL;
		}
	if (im->p.answer_blocks && q->output_length > (uint64_t)MOONCAKE_BLOCK_TOKENS * MOONCAKE_MAX_IDS) {
		snprintf(im->error, sizeof(im->error), "output_length %" PRIu64 " is more than %u tokens",
			 q->output_length, MOONCAKE_BLOCK_TOKENS * MOONCAKE_MAX_IDS);
		return -EINVAL;
	}
	return 0;
}

static int import_request(struct importer *im, const struct mooncake_req *q)
{
	const uint32_t bt = im->p.block_tokens;
	uint32_t n = 0, id;
	int r = check_request(im, q);

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < q->n_hash_ids; i++) {
		uint64_t h = q->hash_ids[i];
		uint32_t tokens = i + 1 < q->n_hash_ids || q->input_length % MOONCAKE_BLOCK_TOKENS == 0
					  ? MOONCAKE_BLOCK_TOKENS
					  : (uint32_t)(q->input_length % MOONCAKE_BLOCK_TOKENS);
		for (uint32_t j = 0; j < tokens / bt; j++) {
			if ((r = block_id(im, h, j, 0, &id)) < 0 || (r = push(im, id, n++)) < 0)
				return r;
		}
		if (tokens % bt) {
			im->tails++;
			if (im->p.partial_tail &&
			    ((r = block_id(im, h, tokens / bt, tokens % bt, &id)) < 0 ||
			     (r = push(im, id, n++)) < 0))
				return r;
		}
	}
	uint32_t n_lookup = n;
	if (im->p.answer_blocks) {
		/* The blocks that become full once the answer is appended. */
		uint64_t added = (q->input_length + q->output_length) / bt - q->input_length / bt;
		for (uint64_t k = 0; k < added; k++)
			if ((r = new_id(im, UINT64_C(1) << 63 | im->seq, k, &id)) < 0 ||
			    (r = push(im, id, n++)) < 0)
				return r;
	}
	struct trace_record rec = {
		.seq = im->seq,
		.t_us = q->timestamp_ms * 1000,
		.tenant = 0,
		.conv = im->seq, /* the format has no sessions */
		.turn = 1,
		.kind = 'c',
		.n_lookup = n_lookup,
		.n_new = n - n_lookup,
	};
	trace_write_record(im->out, &rec, im->ids);
	im->lookups += n_lookup;
	im->answers += n - n_lookup;
	im->last_ms = q->timestamp_ms;
	im->seq++;
	return 0;
}

/* ---- input --------------------------------------------------------- */

/*
 * One line into buf (without its newline), at most MAX_LINE bytes.
 * \return 1 a line, 0 the end, -E2BIG too long, -EILSEQ a NUL byte,
 * -EIO a read error
 */
static int read_line(FILE *f, char *buf, size_t *ret_len)
{
	size_t n = 0;
	int ch;

	while ((ch = getc_unlocked(f)) != EOF && ch != '\n') {
		if (n == MAX_LINE)
			return -E2BIG;
		if (ch == 0)
			return -EILSEQ;
		buf[n++] = (char)ch;
	}
	if (ferror(f))
		return -EIO;
	*ret_len = n;
	return ch == EOF && n == 0 ? 0 : 1;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static const char *line_error(int r)
{
	switch (r) {
	case -E2BIG: return "the line is longer than 32 MiB";
	case -EILSEQ: return "a NUL byte in the line";
	default: return "read error";
	}
}

/* Every 10 % of a large file: an import of a big trace takes a while. */
static void progress(const struct importer *im, uint64_t done, uint64_t size, uint64_t *next)
{
	if (!size || done < *next)
		return;
	fprintf(stderr, "kvt-trace-import: %3" PRIu64 " %%, %" PRIu64 " requests, %u blocks\n",
		done * 100 / size, im->seq, im->n_ids);
	*next += size / 10;
}

static int import_file(struct importer *im, FILE *in, const char *path)
{
	struct mooncake_parser mp = {0};
	struct mooncake_req q;
	struct stat st;
	uint64_t lineno = 0, done = 0, size = 0, next = 0;
	char *buf = malloc(MAX_LINE);
	size_t len;
	int r;

	if (!buf)
		return -ENOMEM;
	if (fstat(fileno(in), &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= PROGRESS_MIN_BYTES)
		next = (size = (uint64_t)st.st_size) / 10;
	for (;;) {
		const char *why = NULL;
		r = read_line(in, buf, &len);
		if (r < 0)
			why = line_error(r);
		if (r <= 0) {
			if (why)
				fprintf(stderr, "kvt-trace-import: %s:%" PRIu64 ": %s\n", path, lineno + 1,
					why);
			break;
		}
		lineno++;
		done += len + 1;
		if (blank(buf, len))
			continue;
		r = mooncake_parse_line(&mp, buf, len, &q);
		if (r == -EINVAL)
			why = mp.error;
		if (r >= 0) {
			r = import_request(im, &q);
			why = im->error;
		}
		if (r < 0) {
			if (r != -EINVAL)
				why = r == -EOVERFLOW ? "more than 2^32 - 2 distinct blocks" : strerror(-r);
			fprintf(stderr, "kvt-trace-import: %s:%" PRIu64 ": %s\n", path, lineno, why);
			break;
		}
		progress(im, done, size, &next);
	}
	if (r >= 0 && !im->seq) {
		fprintf(stderr, "kvt-trace-import: %s: no requests\n", path);
		r = -EINVAL;
	}
	mooncake_parser_done(&mp);
	free(buf);
	return r < 0 ? r : 0;
}

/* ---- command line -------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvt-trace-import [OPTIONS] MOONCAKE.jsonl > TRACE\n"
		"\n"
		"Convert a Mooncake trace (the FAST'25 release of kvcache-ai/Mooncake: one\n"
		"JSON object per line with \"timestamp\" in ms, \"input_length\" and\n"
		"\"output_length\" in tokens, and \"hash_ids\", one per 512-token block of the\n"
		"prompt) into kvtier's trace format (docs/workload.md), for kvt-policy-sim\n"
		"and kvt-replay.  \"-\" reads standard input.\n"
		"\n"
		"Each 512-token block becomes 512/N blocks of N tokens, the namespace's\n"
		"block size.  Two requests share a block exactly when they have the same\n"
		"hash id and the block is at the same place in it; the trace's ids count\n"
		"from 0 in order of first use, whatever the hash ids' values.  Timestamps\n"
		"become the records' microseconds.  Fields other than these four are passed\n"
		"over.  The format has no tenants or sessions: every record is tenant 0,\n"
		"its own conversation, turn 1.\n"
		"\n"
		"A prompt's last hash id covers the rest of input_length, which may be less\n"
		"than 512 tokens.  Its full blocks of N tokens are shared like any others;\n"
		"a partial rest of fewer than N tokens is no block an engine looks up, and\n"
		"is dropped unless --partial-tail block is given.\n"
		"\n"
		"  --block-tokens N     tokens per block; must divide 512 (default 16)\n"
		"  --partial-tail MODE  drop (default): a prompt's partial last block is not\n"
		"                       written; block: it is the record's last looked-up\n"
		"                       block, as in a cache that stores a prompt's partial\n"
		"                       end, shared only with the same hash id cut at the\n"
		"                       same length, never with a full block\n"
		"  --answer-blocks      also write, as the record's new blocks, the blocks\n"
		"                       that output_length tokens complete after the prompt:\n"
		"                       an engine stores them, but the format says nothing\n"
		"                       of their content, so each is new and never reused\n"
		"  --no-keys            leave out the K lines: enough for kvt-policy-sim;\n"
		"                       kvt-replay needs keys\n"
		"  -o, --output FILE    write here instead of standard output (removed\n"
		"                       again if the import fails)\n"
		"\n"
		"A line that breaks the format stops the import with FILE:LINE and the\n"
		"reason: bad JSON, a field missing or given twice, a value that is not a\n"
		"non-negative integer, hash_ids that do not match input_length (one per\n"
		"512 tokens, the last possibly partial), an id twice in one prompt, or a\n"
		"timestamp before the previous line's.  Blank lines are passed over.\n"
		"\n"
		"Example:\n"
		"  kvt-trace-import --no-keys -o mooncake.trace mooncake_trace.jsonl\n"
		"  kvt-policy-sim --capacities 0.01,0.02,0.05,0.1,0.25 mooncake.trace\n");
}

static void write_header(FILE *f, const struct params *p, const char *path)
{
	fprintf(f, "# kvtier trace v1, written by kvt-trace-import; format: docs/workload.md\n");
	fprintf(f, "# kvt-trace-import --block-tokens %u --partial-tail %s%s%s %s\n",
		p->block_tokens, p->partial_tail ? "block" : "drop",
		p->answer_blocks ? " --answer-blocks" : "", p->keys ? "" : " --no-keys", path);
	trace_write_params(f, p->block_tokens, p->keys);
}

static int parse_args(int argc, char **argv, struct params *p, const char **ret_output)
{
	enum { O_BLOCK_TOKENS = 256, O_PARTIAL, O_ANSWERS, O_NO_KEYS };
	static const struct option opts[] = {
		{"block-tokens", required_argument, NULL, O_BLOCK_TOKENS},
		{"partial-tail", required_argument, NULL, O_PARTIAL},
		{"answer-blocks", no_argument, NULL, O_ANSWERS},
		{"no-keys", no_argument, NULL, O_NO_KEYS},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int c;

	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) >= 0) {
		switch (c) {
		case O_BLOCK_TOKENS: {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v < 1 ||
			    v > MOONCAKE_BLOCK_TOKENS || MOONCAKE_BLOCK_TOKENS % v) {
				fprintf(stderr, "kvt-trace-import: --block-tokens: '%s' does not divide %d\n",
					optarg, MOONCAKE_BLOCK_TOKENS);
				return -EINVAL;
			}
			p->block_tokens = (uint32_t)v;
			break;
		}
		case O_PARTIAL:
			if (strcmp(optarg, "drop") && strcmp(optarg, "block")) {
				fprintf(stderr, "kvt-trace-import: --partial-tail is drop or block\n");
				return -EINVAL;
			}
			p->partial_tail = !strcmp(optarg, "block");
			break;
		case O_ANSWERS: p->answer_blocks = true; break;
		case O_NO_KEYS: p->keys = false; break;
		case 'o': *ret_output = optarg; break;
		case 'h': usage(stdout); return 1;
		default: usage(stderr); return -EINVAL;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "kvt-trace-import: %s\n",
			optind == argc ? "which trace? (see --help)" : "one trace at a time");
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct importer im = {.p = {.block_tokens = 16, .keys = true}};
	const char *output = NULL;
	int r = parse_args(argc, argv, &im.p, &output);

	if (r)
		return r < 0 ? 2 : 0;
	const char *path = argv[optind];
	FILE *in = strcmp(path, "-") ? fopen(path, "re") : stdin;
	if (!in) {
		fprintf(stderr, "kvt-trace-import: cannot open '%s': %m\n", path);
		return 1;
	}
	im.out = output ? fopen(output, "we") : stdout;
	if (!im.out) {
		fprintf(stderr, "kvt-trace-import: cannot open '%s': %m\n", output);
		return 1;
	}
	write_header(im.out, &im.p, path);
	r = import_file(&im, in, path);
	if (r >= 0 && (fflush(im.out) != 0 || ferror(im.out))) {
		fprintf(stderr, "kvt-trace-import: write failed: %m\n");
		r = -EIO;
	}
	if (output && fclose(im.out) != 0 && r >= 0) {
		fprintf(stderr, "kvt-trace-import: write failed: %m\n");
		r = -EIO;
	}
	if (r < 0 && output)
		unlink(output); /* no half trace left behind */
	if (in != stdin)
		fclose(in);
	if (r >= 0)
		fprintf(stderr,
			"kvt-trace-import: %" PRIu64 " requests; %u distinct blocks of %u tokens; "
			"%" PRIu64 " blocks looked up (%.1f per request); %" PRIu64
			" partial tails %s; %" PRIu64 " answer blocks\n",
			im.seq, im.n_ids, im.p.block_tokens, im.lookups,
			(double)im.lookups / (double)im.seq, im.tails,
			im.p.partial_tail ? "kept as blocks" : "dropped", im.answers);
	free(im.map.t);
	free(im.ids);
	free(im.sorted);
	return r < 0 ? 1 : 0;
}
