/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-trace: write a trace of inference requests as an engine in front of
 * kvtier would see them, for kvt-policy-sim and kvt-replay.
 *
 * What makes KV reuse in real traffic, each with its own knob: system
 * prompts shared by every conversation of an application; conversations
 * whose context grows by the previous answer and a new question every
 * turn; retrieved documents placed after the system prompt and reused by
 * other users who retrieve the same one; Zipf popularity for prompts,
 * documents and tenants.  Every request is a token sequence, and its block
 * keys are computed with kvt_hash_chain over those tokens, so the keys in
 * the trace are the keys kvtierd would see; a block shared by two requests
 * is one key only when their whole prefixes agree.
 *
 * The format is in docs/workload.md.  The same parameters and seed give
 * the same file, byte for byte, from the same build.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "trace.h"
#include "../helpers.h"

#define VOCAB 128256

struct params {
	uint64_t seed;
	uint64_t requests;
	uint32_t tenants;
	double tenant_zipf;
	uint32_t block_tokens;
	uint32_t system_prompts;
	double system_zipf;
	uint32_t system_len;
	uint32_t docs;
	double doc_zipf;
	uint32_t doc_len;
	double rag_fraction;
	uint32_t rag_docs;
	double turns;
	uint32_t user_len;
	uint32_t output_len;
	uint32_t max_context;
	double rate;
	double think;
	bool keys;
};

static const struct params defaults = {
	.seed = 1,
	.requests = 20000,
	.tenants = 4,
	.tenant_zipf = 1.0,
	.block_tokens = 16,
	.system_prompts = 16,
	.system_zipf = 1.0,
	.system_len = 1024,
	.docs = 2000,
	.doc_zipf = 0.9,
	.doc_len = 768,
	.rag_fraction = 0.3,
	.rag_docs = 2,
	.turns = 4.0,
	.user_len = 128,
	.output_len = 256,
	.max_context = 32768,
	.rate = 4.0,
	.think = 30.0,
	.keys = true,
};

/* ---- randomness ---------------------------------------------------- */

/* xoshiro256**: one stream drives every draw, in event order. */
struct rng {
	uint64_t s[4];
};

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = seed = mix(seed);
}

static uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t x = s[1] * 5;
	uint64_t out = ((x << 7) | (x >> 57)) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = (s[3] << 45) | (s[3] >> 19);
	return out;
}

/* Uniform in [0, 1). */
static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static double rng_exp(struct rng *r, double mean)
{
	return -log1p(-rng_unit(r)) * mean;
}

/* A length with the given mean: exponential, at least 1, at most 8 × mean,
 * the long tail of chat messages without their rare extremes. */
static uint32_t rng_len(struct rng *r, uint32_t mean)
{
	double v = ceil(rng_exp(r, mean));
	if (v < 1)
		v = 1;
	if (v > 8.0 * mean)
		v = 8.0 * mean;
	return (uint32_t)v;
}

/* Uniform in [mean / 2, 3 mean / 2]: prompts and documents vary, but
 * none is empty. */
static uint32_t rng_around(struct rng *r, uint32_t mean)
{
	uint32_t lo = mean / 2 ? mean / 2 : 1;
	return lo + (uint32_t)(rng_next(r) % (mean + 1));
}

/* Zipf over n items: P(i) ∝ 1 / (i + 1)^s, drawn by bisecting the CDF. */
struct zipf {
	double *cdf;
	uint32_t n;
};

static int zipf_init(struct zipf *z, uint32_t n, double s)
{
	double sum = 0;

	z->n = n;
	z->cdf = calloc(n ? n : 1, sizeof(double));
	if (!z->cdf)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		z->cdf[i] = sum += pow((double)i + 1, -s);
	for (uint32_t i = 0; i < n; i++)
		z->cdf[i] /= sum;
	return 0;
}

static uint32_t zipf_draw(const struct zipf *z, struct rng *r)
{
	double u = rng_unit(r);
	uint32_t lo = 0, hi = z->n - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (z->cdf[mid] > u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* ---- block keys to ids --------------------------------------------- */

/* Every distinct key gets the next id; the trace names blocks by id and
 * defines each id's key once, before its first use. */
struct keymap {
	uint8_t *keys; /* [n] */
	uint32_t *table; /* id + 1, 0 empty */
	uint64_t n, cap, tcap;
};

static uint64_t key_hash(const uint8_t *k)
{
	uint64_t h;
	memcpy(&h, k, 8); /* SHA-256 output: uniform already */
	return h;
}

static int keymap_grow(struct keymap *m)
{
	uint64_t tcap = m->tcap ? m->tcap * 2 : 1 << 16;
	uint32_t *t = calloc(tcap, sizeof(uint32_t));
	if (!t)
		return -ENOMEM;
	for (uint64_t i = 0; i < m->tcap; i++) {
		if (!m->table[i])
			continue;
		uint64_t j = key_hash(m->keys + (uint64_t)(m->table[i] - 1) * TRACE_KEY_BYTES) & (tcap - 1);
		while (t[j])
			j = (j + 1) & (tcap - 1);
		t[j] = m->table[i];
	}
	free(m->table);
	m->table = t;
	m->tcap = tcap;
	return 0;
}

/* The id of key; *ret_new tells whether it is seen for the first time. */
static int keymap_id(struct keymap *m, const uint8_t *key, uint32_t *ret_id, bool *ret_new)
{
	if ((m->n + 1) * 2 > m->tcap && keymap_grow(m) < 0)
		return -ENOMEM;
	uint64_t j = key_hash(key) & (m->tcap - 1);
	for (; m->table[j]; j = (j + 1) & (m->tcap - 1))
		if (!memcmp(m->keys + (uint64_t)(m->table[j] - 1) * TRACE_KEY_BYTES, key, TRACE_KEY_BYTES)) {
			*ret_id = m->table[j] - 1;
			*ret_new = false;
			return 0;
		}
	if (m->n >= UINT32_MAX - 1)
		return -E2BIG;
	if (m->n == m->cap) {
		uint64_t cap = m->cap ? m->cap * 2 : 1 << 16;
		uint8_t *k = realloc(m->keys, cap * TRACE_KEY_BYTES);
		if (!k)
			return -ENOMEM;
		m->keys = k;
		m->cap = cap;
	}
	memcpy(m->keys + m->n * TRACE_KEY_BYTES, key, TRACE_KEY_BYTES);
	m->table[j] = (uint32_t)++m->n;
	*ret_id = (uint32_t)(m->n - 1);
	*ret_new = true;
	return 0;
}

/* ---- conversations --------------------------------------------------- */

struct conv {
	uint64_t id;
	uint32_t tenant;
	bool rag;
	uint32_t turn, turns;
	uint64_t tokens;   /* context so far */
	uint8_t last[TRACE_KEY_BYTES]; /* key of the last full block */
	uint32_t *pend;    /* tokens of the unfinished block */
	uint32_t n_pend;
	uint32_t *ids;     /* full blocks so far */
	uint32_t n_ids, cap_ids;
	uint32_t next_user; /* the next turn's question, drawn with its time */
	uint32_t shared;    /* full blocks of its system prompt */
};

struct gen {
	struct params p;
	struct rng rng;
	struct zipf tenant_z, system_z, doc_z;
	uint32_t *system_len; /* [tenants][system_prompts] */
	uint32_t *doc_len;    /* [tenants][docs] */
	struct keymap km;
	FILE *out;
	uint64_t defined;     /* ids whose key has been written */
	uint32_t *tok;        /* scratch for one segment of tokens */
	uint64_t cap_tok;
	uint8_t *keybuf;
	uint64_t cap_keys;
	/* totals for the summary */
	uint64_t blocks_lookup, blocks_new, convs, per_tenant[TRACE_MAX_TENANTS];
};

static int conv_push_id(struct conv *c, uint32_t id)
{
	if (c->n_ids == c->cap_ids) {
		uint32_t cap = c->cap_ids ? c->cap_ids * 2 : 64;
		uint32_t *ids = realloc(c->ids, cap * sizeof(uint32_t));
		if (!ids)
			return -ENOMEM;
		c->ids = ids;
		c->cap_ids = cap;
	}
	c->ids[c->n_ids++] = id;
	return 0;
}

/* The token stream of one segment: which text, its i-th token. */
static uint32_t token(uint64_t seed, char kind, uint64_t a, uint64_t b, uint64_t i)
{
	uint64_t h = mix(seed ^ mix(((uint64_t)(unsigned char)kind << 56) ^ a));
	h = mix(h ^ mix(b * UINT64_C(0x100000001b3) ^ (i << 20)));
	return (uint32_t)(h % VOCAB);
}

/* Append n tokens of a segment to c's context, hashing every block that
 * becomes full. */
static int conv_append(struct gen *g, struct conv *c, char kind, uint64_t a, uint64_t b,
		       uint32_t n)
{
	uint32_t bt = g->p.block_tokens;
	uint64_t total = (uint64_t)c->n_pend + n;

	if (total > g->cap_tok) {
		uint32_t *t = realloc(g->tok, total * sizeof(uint32_t));
		if (!t)
			return -ENOMEM;
		g->tok = t;
		g->cap_tok = total;
	}
	memcpy(g->tok, c->pend, c->n_pend * sizeof(uint32_t));
	for (uint32_t i = 0; i < n; i++)
		g->tok[c->n_pend + i] = token(g->p.seed, kind, a, b, i);
	uint64_t full = total / bt;
	if (full > g->cap_keys) {
		uint8_t *k = realloc(g->keybuf, full * TRACE_KEY_BYTES);
		if (!k)
			return -ENOMEM;
		g->keybuf = k;
		g->cap_keys = full;
	}
	if (full) {
		int r = kvt_hash_chain(c->n_ids ? c->last : NULL, g->tok, full * bt, bt, NULL, 0,
				       g->keybuf, full);
		if (r < 0)
			return r;
		for (uint64_t i = 0; i < full; i++) {
			uint32_t id;
			bool fresh;
			r = keymap_id(&g->km, g->keybuf + i * TRACE_KEY_BYTES, &id, &fresh);
			if (r < 0)
				return r;
			r = conv_push_id(c, id);
			if (r < 0)
				return r;
		}
		memcpy(c->last, g->keybuf + (full - 1) * TRACE_KEY_BYTES, TRACE_KEY_BYTES);
	}
	c->n_pend = (uint32_t)(total - full * bt);
	memcpy(c->pend, g->tok + full * bt, c->n_pend * sizeof(uint32_t));
	c->tokens += n;
	return 0;
}

/* One record: its blocks as runs of consecutive ids. */
static void emit(struct gen *g, uint64_t seq, uint64_t t_us, const struct conv *c,
		 uint32_t n_lookup, uint32_t n_new, bool last)
{
	struct trace_record rec = {
		.seq = seq,
		.t_us = t_us,
		.tenant = c->tenant,
		.conv = c->id,
		.turn = c->turn,
		.kind = c->rag ? 'r' : 'c',
		.n_lookup = n_lookup,
		.n_new = n_new,
		.shared = c->shared,
		.last = last,
	};

	if (g->p.keys)
		for (; g->defined < g->km.n; g->defined++)
			trace_write_key(g->out, g->km.keys + g->defined * TRACE_KEY_BYTES);
	trace_write_record(g->out, &rec, c->ids);
	g->blocks_lookup += n_lookup;
	g->blocks_new += n_new;
	g->per_tenant[c->tenant]++;
}

static void conv_free(struct conv *c)
{
	if (!c)
		return;
	free(c->pend);
	free(c->ids);
	free(c);
}

static int conv_new(struct gen *g, uint64_t id, struct conv **ret)
{
	const struct params *p = &g->p;
	struct conv *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	c->pend = calloc(p->block_tokens, sizeof(uint32_t));
	if (!c->pend) {
		free(c);
		return -ENOMEM;
	}
	c->id = id;
	c->tenant = zipf_draw(&g->tenant_z, &g->rng);
	c->rag = rng_unit(&g->rng) < p->rag_fraction;
	/* Geometric with the given mean: each turn is the last with
	 * probability 1 / turns. */
	c->turns = 1;
	while (c->turns < 1000000 && rng_unit(&g->rng) >= 1.0 / p->turns)
		c->turns++;
	uint32_t sp = zipf_draw(&g->system_z, &g->rng);
	r = conv_append(g, c, 'S', c->tenant, sp,
			g->system_len[(size_t)c->tenant * p->system_prompts + sp]);
	c->shared = c->n_ids;
	/* Retrieved documents, most relevant first, after the system
	 * prompt: shared with another conversation only as far as both
	 * agree from the first token on. */
	uint32_t k = c->rag ? 1 + (uint32_t)(rng_next(&g->rng) % p->rag_docs) : 0;
	uint32_t picked[64];
	for (uint32_t i = 0; r >= 0 && i < k && i < 64; i++) {
		uint32_t d;
		bool dup;
		int tries = 0;
		do {
			d = zipf_draw(&g->doc_z, &g->rng);
			dup = false;
			for (uint32_t j = 0; j < i; j++)
				dup |= picked[j] == d;
		} while (dup && ++tries < 100);
		picked[i] = d;
		r = conv_append(g, c, 'D', c->tenant, d,
				g->doc_len[(size_t)c->tenant * p->docs + d]);
	}
	if (r < 0) {
		conv_free(c);
		return r;
	}
	c->next_user = rng_len(&g->rng, p->user_len);
	g->convs++;
	*ret = c;
	return 0;
}

/* ---- events -------------------------------------------------------- */

/* A min-heap of pending turns by time, then by the order they were made. */
struct event {
	uint64_t t_us, order;
	struct conv *c; /* NULL: a new conversation arrives */
};

struct heap {
	struct event *e;
	size_t n, cap;
};

static bool ev_before(const struct event *a, const struct event *b)
{
	return a->t_us != b->t_us ? a->t_us < b->t_us : a->order < b->order;
}

static int heap_push(struct heap *h, struct event ev)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 1024;
		struct event *e = realloc(h->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		h->e = e;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i && ev_before(&ev, &h->e[(i - 1) / 2])) {
		h->e[i] = h->e[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->e[i] = ev;
	return 0;
}

static struct event heap_pop(struct heap *h)
{
	struct event top = h->e[0], last = h->e[--h->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && ev_before(&h->e[c + 1], &h->e[c]))
			c++;
		if (!ev_before(&h->e[c], &last))
			break;
		h->e[i] = h->e[c];
		i = c;
	}
	if (h->n)
		h->e[i] = last;
	return top;
}

static uint64_t us(double seconds)
{
	return (uint64_t)llround(seconds * 1e6);
}

static int generate(struct gen *g)
{
	const struct params *p = &g->p;
	struct heap h = {0};
	uint64_t order = 0, seq = 0, next_conv = 0;
	int r;

	r = heap_push(&h, (struct event){us(rng_exp(&g->rng, 1.0 / p->rate)), order++, NULL});
	while (r >= 0 && seq < p->requests && h.n) {
		struct event ev = heap_pop(&h);
		struct conv *c = ev.c;

		if (!c) {
			r = conv_new(g, next_conv++, &c);
			if (r < 0)
				break;
			r = heap_push(&h, (struct event){ev.t_us + us(rng_exp(&g->rng, 1.0 / p->rate)),
							 order++, NULL});
			if (r < 0) {
				conv_free(c);
				break;
			}
		}
		/* This turn: the question, then the answer.  The prompt is
		 * everything before the answer; the answer's full blocks are
		 * what the request adds. */
		c->turn++;
		r = conv_append(g, c, 'U', c->id, c->turn, c->next_user);
		uint32_t n_lookup = c->n_ids;
		uint32_t out = rng_len(&g->rng, p->output_len);
		if (r >= 0)
			r = conv_append(g, c, 'O', c->id, c->turn, out);
		if (r < 0) {
			conv_free(c);
			break;
		}
		c->next_user = rng_len(&g->rng, p->user_len);
		double think = rng_exp(&g->rng, p->think);
		bool last = c->turn >= c->turns || c->tokens + c->next_user > p->max_context;
		emit(g, seq++, ev.t_us, c, n_lookup, c->n_ids - n_lookup, last);
		if (last) {
			conv_free(c);
			continue;
		}
		r = heap_push(&h, (struct event){ev.t_us + us(think), order++, c});
		if (r < 0)
			conv_free(c);
	}
	while (h.n) {
		struct event ev = heap_pop(&h);
		conv_free(ev.c);
	}
	free(h.e);
	return r;
}

/* ---- command line -------------------------------------------------- */

static void usage(FILE *f)
{
	const struct params *d = &defaults;
	fprintf(f,
		"Usage: kvt-trace [OPTIONS] > TRACE\n"
		"\n"
		"Write a trace of LLM inference requests, one record per request with the\n"
		"chain of kvtier block keys its prompt looks up and the blocks its answer\n"
		"adds; the format is described in docs/workload.md.  Keys are real kvtier\n"
		"keys (kvt_hash_chain over the request's token ids), so two requests share\n"
		"a block exactly when their prompts agree up to the end of that block.\n"
		"\n"
		"Traffic: conversations arrive as a Poisson process.  Each belongs to a\n"
		"tenant and opens with one of that tenant's system prompts; some retrieve\n"
		"documents (RAG), placed after the system prompt.  Each turn appends a\n"
		"question, sends the whole context as the prompt, and appends the answer,\n"
		"so the next turn's prompt extends this one.  Prompts, documents and\n"
		"tenants are chosen with Zipf popularity: P(i) ~ 1/(i+1)^s, s = 0 uniform.\n"
		"\n"
		"Size and randomness:\n"
		"  --seed N             every draw follows from it (default %" PRIu64 ")\n"
		"  --requests N         records to write (default %" PRIu64 ")\n"
		"  --block-tokens N     tokens per block, as the namespace has it (default %u)\n"
		"  --no-keys            leave out the K lines: ids only, enough for\n"
		"                       kvt-policy-sim, a third of the size; kvt-replay needs keys\n"
		"  -o, --output FILE    write here instead of standard output\n"
		"\n"
		"Tenants and shared prefixes:\n"
		"  --tenants N          tenants, traffic Zipf over them (default %u)\n"
		"  --tenant-zipf S      skew of traffic across tenants (default %.2f)\n"
		"  --system-prompts N   system prompts per tenant (default %u)\n"
		"  --system-zipf S      their popularity skew (default %.2f)\n"
		"  --system-len N       mean system prompt tokens, each one uniform in\n"
		"                       [N/2, 3N/2] (default %u)\n"
		"\n"
		"Retrieval (RAG):\n"
		"  --rag-fraction F     share of conversations that retrieve (default %.2f)\n"
		"  --rag-docs N         documents per retrieving conversation, 1..N (default %u)\n"
		"  --docs N             documents per tenant (default %u)\n"
		"  --doc-zipf S         their popularity skew (default %.2f)\n"
		"  --doc-len N          mean document tokens, uniform in [N/2, 3N/2] (default %u)\n"
		"\n"
		"Conversations:\n"
		"  --rate R             new conversations per second (default %.2f)\n"
		"  --turns T            mean turns per conversation, geometric (default %.2f)\n"
		"  --think S            mean seconds from one turn to the next, exponential;\n"
		"                       covers the answer's generation and the user (default %.1f)\n"
		"  --user-len N         mean question tokens, exponential, at most 8N (default %u)\n"
		"  --output-len N       mean answer tokens, exponential, at most 8N (default %u)\n"
		"  --max-context N      a conversation ends before its prompt would exceed\n"
		"                       N tokens (default %u)\n"
		"\n"
		"The number of conversations open at once, which sets how far apart a\n"
		"conversation's turns are in the trace, is about rate x turns x think.\n",
		d->seed, d->requests, d->block_tokens, d->tenants, d->tenant_zipf,
		d->system_prompts, d->system_zipf, d->system_len, d->rag_fraction, d->rag_docs,
		d->docs, d->doc_zipf, d->doc_len, d->rate, d->turns, d->think, d->user_len,
		d->output_len, d->max_context);
}

static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "kvt-trace: --%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n",
			opt, s, min, max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

static int parse_u32(const char *opt, const char *s, uint32_t min, uint32_t max, uint32_t *ret)
{
	uint64_t v;
	int r = parse_u64(opt, s, min, max, &v);
	if (r >= 0)
		*ret = (uint32_t)v;
	return r;
}

static int parse_double(const char *opt, const char *s, double min, double max, double *ret)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max)) {
		fprintf(stderr, "kvt-trace: --%s: '%s' is not a number in [%g, %g]\n", opt, s, min,
			max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

static void write_header(FILE *f, const struct params *p)
{
	fprintf(f, "# kvtier trace v1, written by kvt-trace; format: docs/workload.md\n");
	fprintf(f,
		"# kvt-trace --seed %" PRIu64 " --requests %" PRIu64 " --block-tokens %u%s"
		" --tenants %u --tenant-zipf %g --system-prompts %u --system-zipf %g"
		" --system-len %u --rag-fraction %g --rag-docs %u --docs %u --doc-zipf %g"
		" --doc-len %u --rate %g --turns %g --think %g --user-len %u --output-len %u"
		" --max-context %u\n",
		p->seed, p->requests, p->block_tokens, p->keys ? "" : " --no-keys", p->tenants,
		p->tenant_zipf, p->system_prompts, p->system_zipf, p->system_len, p->rag_fraction,
		p->rag_docs, p->docs, p->doc_zipf, p->doc_len, p->rate, p->turns, p->think,
		p->user_len, p->output_len, p->max_context);
	trace_write_params(f, p->block_tokens, p->keys);
}

int main(int argc, char **argv)
{
	/* In the order of opts[], which names them in error messages. */
	enum {
		O_SEED = 256, O_REQUESTS, O_TENANTS, O_TENANT_ZIPF, O_BLOCK_TOKENS,
		O_SYSTEM_PROMPTS, O_SYSTEM_ZIPF, O_SYSTEM_LEN, O_DOCS, O_DOC_ZIPF, O_DOC_LEN,
		O_RAG_FRACTION, O_RAG_DOCS, O_TURNS, O_USER_LEN, O_OUTPUT_LEN, O_MAX_CONTEXT,
		O_RATE, O_THINK, O_NO_KEYS,
	};
	static const struct option opts[] = {
		{"seed", required_argument, NULL, O_SEED},
		{"requests", required_argument, NULL, O_REQUESTS},
		{"tenants", required_argument, NULL, O_TENANTS},
		{"tenant-zipf", required_argument, NULL, O_TENANT_ZIPF},
		{"block-tokens", required_argument, NULL, O_BLOCK_TOKENS},
		{"system-prompts", required_argument, NULL, O_SYSTEM_PROMPTS},
		{"system-zipf", required_argument, NULL, O_SYSTEM_ZIPF},
		{"system-len", required_argument, NULL, O_SYSTEM_LEN},
		{"docs", required_argument, NULL, O_DOCS},
		{"doc-zipf", required_argument, NULL, O_DOC_ZIPF},
		{"doc-len", required_argument, NULL, O_DOC_LEN},
		{"rag-fraction", required_argument, NULL, O_RAG_FRACTION},
		{"rag-docs", required_argument, NULL, O_RAG_DOCS},
		{"turns", required_argument, NULL, O_TURNS},
		{"user-len", required_argument, NULL, O_USER_LEN},
		{"output-len", required_argument, NULL, O_OUTPUT_LEN},
		{"max-context", required_argument, NULL, O_MAX_CONTEXT},
		{"rate", required_argument, NULL, O_RATE},
		{"think", required_argument, NULL, O_THINK},
		{"no-keys", no_argument, NULL, O_NO_KEYS},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct gen g = {.p = defaults};
	struct params *p = &g.p;
	const char *output = NULL;
	int c, r = 0;

	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) >= 0) {
		const char *name = c >= O_SEED && c <= O_NO_KEYS ? opts[c - O_SEED].name : "";
		switch (c) {
		case O_SEED: r = parse_u64(name, optarg, 0, UINT64_MAX, &p->seed); break;
		case O_REQUESTS: r = parse_u64(name, optarg, 1, UINT64_C(1) << 32, &p->requests); break;
		case O_TENANTS: r = parse_u32(name, optarg, 1, TRACE_MAX_TENANTS, &p->tenants); break;
		case O_TENANT_ZIPF: r = parse_double(name, optarg, 0, 10, &p->tenant_zipf); break;
		case O_BLOCK_TOKENS: r = parse_u32(name, optarg, 1, 4096, &p->block_tokens); break;
		case O_SYSTEM_PROMPTS: r = parse_u32(name, optarg, 1, 1 << 20, &p->system_prompts); break;
		case O_SYSTEM_ZIPF: r = parse_double(name, optarg, 0, 10, &p->system_zipf); break;
		case O_SYSTEM_LEN: r = parse_u32(name, optarg, 1, 1 << 20, &p->system_len); break;
		case O_DOCS: r = parse_u32(name, optarg, 1, 1 << 24, &p->docs); break;
		case O_DOC_ZIPF: r = parse_double(name, optarg, 0, 10, &p->doc_zipf); break;
		case O_DOC_LEN: r = parse_u32(name, optarg, 1, 1 << 20, &p->doc_len); break;
		case O_RAG_FRACTION: r = parse_double(name, optarg, 0, 1, &p->rag_fraction); break;
		case O_RAG_DOCS: r = parse_u32(name, optarg, 1, 64, &p->rag_docs); break;
		case O_TURNS: r = parse_double(name, optarg, 1, 1000, &p->turns); break;
		case O_USER_LEN: r = parse_u32(name, optarg, 1, 1 << 20, &p->user_len); break;
		case O_OUTPUT_LEN: r = parse_u32(name, optarg, 1, 1 << 20, &p->output_len); break;
		case O_MAX_CONTEXT: r = parse_u32(name, optarg, 1, 1 << 24, &p->max_context); break;
		case O_RATE: r = parse_double(name, optarg, 1e-6, 1e6, &p->rate); break;
		case O_THINK: r = parse_double(name, optarg, 0, 1e6, &p->think); break;
		case O_NO_KEYS: p->keys = false; break;
		case 'o': output = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (r < 0)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "kvt-trace: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (p->rag_docs > p->docs) {
		fprintf(stderr, "kvt-trace: --rag-docs %u is more than --docs %u\n", p->rag_docs,
			p->docs);
		return 2;
	}

	rng_seed(&g.rng, p->seed);
	if (zipf_init(&g.tenant_z, p->tenants, p->tenant_zipf) < 0 ||
	    zipf_init(&g.system_z, p->system_prompts, p->system_zipf) < 0 ||
	    zipf_init(&g.doc_z, p->docs, p->doc_zipf) < 0)
		goto oom;
	g.system_len = calloc((size_t)p->tenants * p->system_prompts, sizeof(uint32_t));
	g.doc_len = calloc((size_t)p->tenants * p->docs, sizeof(uint32_t));
	if (!g.system_len || !g.doc_len)
		goto oom;
	for (size_t i = 0; i < (size_t)p->tenants * p->system_prompts; i++)
		g.system_len[i] = rng_around(&g.rng, p->system_len);
	for (size_t i = 0; i < (size_t)p->tenants * p->docs; i++)
		g.doc_len[i] = rng_around(&g.rng, p->doc_len);

	g.out = output ? fopen(output, "we") : stdout;
	if (!g.out) {
		fprintf(stderr, "kvt-trace: cannot open '%s': %m\n", output);
		return 1;
	}
	write_header(g.out, p);
	r = generate(&g);
	if (r < 0) {
		fprintf(stderr, "kvt-trace: %s\n", strerror(-r));
		return 1;
	}
	if (fflush(g.out) != 0 || ferror(g.out) || (output && fclose(g.out) != 0)) {
		fprintf(stderr, "kvt-trace: write failed: %m\n");
		return 1;
	}

	uint64_t req = p->requests;
	fprintf(stderr,
		"kvt-trace: %" PRIu64 " requests from %" PRIu64 " conversations; %" PRIu64
		" distinct blocks; %" PRIu64 " blocks looked up (%.1f per request), %" PRIu64
		" added by answers\n",
		req, g.convs, g.km.n, g.blocks_lookup, (double)g.blocks_lookup / (double)req,
		g.blocks_new);
	fprintf(stderr, "kvt-trace: requests per tenant:");
	for (uint32_t t = 0; t < p->tenants; t++)
		fprintf(stderr, " %" PRIu64, g.per_tenant[t]);
	fprintf(stderr, "\n");
	free(g.tenant_z.cdf);
	free(g.system_z.cdf);
	free(g.doc_z.cdf);
	free(g.system_len);
	free(g.doc_len);
	free(g.km.keys);
	free(g.km.table);
	free(g.tok);
	free(g.keybuf);
	return 0;
oom:
	fprintf(stderr, "kvt-trace: out of memory\n");
	return 1;
}
