/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-policy-sim: replay a kvt-trace trace against one host tier of a given
 * capacity, once per eviction policy, and count what prefix caching gets
 * out of it: the leading run of each request's lookup that is resident.  A
 * block resident after a missing one saves nothing (the engine recomputes
 * from the first miss on), so it is not counted.
 *
 * The online policies are the daemon's own code (daemon/evict/), driven
 * in the order the daemon calls it for kvt-engine's requests: a lookup
 * that touches every resident key from the tail of the chain to its head,
 * leases on the leading hits (off the list) released in chain order, then
 * reservations of the missing blocks (each one evicting a victim when the
 * tier is full) committed from the tail to the head, then the same for the
 * blocks the answer adds.
 *
 * Belady's rule (evict the block whose next use is farthest, keep the new
 * block out if its own next use is farther still; ties to the deepest
 * block of a chain) runs beside them as a reference.  It is not a proven
 * optimum for prefix chains in general: see docs/workload.md for what it
 * bounds in this simulator's model and where that stops.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "evict-lrfu-admit.h"
#include "evict-s3fifo.h"
#include "evict.h"
#include "keyhash.h"
#include "sim-hints.h"
#include "tier-report.h"
#include "trace.h"

#define NEVER UINT32_MAX
#define MAX_CAPS 32

/* ---- the trace ----------------------------------------------------- */

/* When each position's block is used next: a request index, or NEVER. */
static uint32_t *next_uses(const struct trace *t)
{
	uint32_t *last = malloc((size_t)t->n_blocks * sizeof(uint32_t));
	uint32_t *next = malloc(t->n_pos * sizeof(uint32_t));
	if (!last || !next) {
		free(last);
		free(next);
		return NULL;
	}
	for (uint32_t i = 0; i < t->n_blocks; i++)
		last[i] = NEVER;
	/* A block appears at most once in a request: its key names the
	 * whole prefix before it. */
	for (uint64_t q = t->n_req; q-- > 0;) {
		const struct trace_req *r = &t->r[q];
		for (uint64_t p = r->off; p < r->off + r->n_lookup + r->n_new; p++) {
			next[p] = last[t->ids[p]];
			last[t->ids[p]] = (uint32_t)q;
		}
	}
	free(last);
	return next;
}

/* ---- the tiers ------------------------------------------------------ */

enum { ABSENT, RESERVED, RESIDENT };

struct result {
	uint64_t hits;        /* leading-run blocks */
	uint64_t evictions;
	uint64_t rejected;    /* blocks not stored: the tier was all pinned */
	uint64_t stray;       /* resident blocks after a request's first miss */
	/* lrfu-admit: new blocks put on probation, the windows and the
	 * changes of setting, tiers with the filter on at the end; lrfu*: bytes of the
	 * count sketches and shadow tiers */
	uint64_t refused, windows, switches, filter_on, policy_bytes;
	bool admission; /* the policy has the admission filter */
};

/* One tier: the whole capacity (shared) or one tenant's part of it. */
struct tier {
	uint64_t cap, used;
	struct evict ev;       /* online policies */
	uint32_t *heap, n_heap; /* Belady: max-heap of block ids */
};

struct sim {
	const struct trace *t;
	const uint32_t *next; /* [n_pos]: the request that next uses this block */
	struct tier tiers[TRACE_MAX_TENANTS];
	uint32_t n_tiers;
	bool partitioned;
	bool release_reverse;
	uint32_t small_percent;
	/* per block */
	uint8_t *state;
	struct evict_entry *ent;
	uint32_t *heap_pos, *key_next, *key_depth;
	uint64_t *fps; /* a lookup's fingerprints, for evict_lookup */
	struct sim_hints hints;
	struct result res;
};

static struct tier *tier_of(struct sim *s, const struct trace_req *r)
{
	return &s->tiers[s->partitioned ? r->tenant : 0];
}

static void fresh_entry(struct sim *s, uint32_t id)
{
	memset(&s->ent[id], 0, sizeof(s->ent[id]));
	s->ent[id].fp = id;
}

static uint32_t id_of(const struct sim *s, const struct evict_entry *x)
{
	return (uint32_t)(x - s->ent);
}

/* Store blocks ids[0..n) as kvt_store does: reserve in order, commit from
 * the tail, so that the head of the chain is the most recent. */
static void online_store(struct sim *s, struct tier *tr, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = ids[i];
		if (s->state[id] != ABSENT)
			continue; /* -EEXIST */
		if (tr->used >= tr->cap) {
			struct evict_entry *v = evict_victim(&tr->ev);
			if (!v) {
				s->res.rejected++;
				continue;
			}
			uint32_t vid = id_of(s, v);
			evict_evicted(&tr->ev, v);
			fresh_entry(s, vid); /* the daemon frees the block */
			sim_hints_forget(&s->hints, vid);
			s->state[vid] = ABSENT;
			tr->used--;
			s->res.evictions++;
		}
		s->state[id] = RESERVED;
		tr->used++;
	}
	for (uint32_t i = n; i-- > 0;)
		if (s->state[ids[i]] == RESERVED) {
			s->state[ids[i]] = RESIDENT;
			evict_insert(&tr->ev, &s->ent[ids[i]]);
		}
}

static void online_request(struct sim *s, const struct trace_req *r)
{
	struct tier *tr = tier_of(s, r);
	const uint32_t *ids = s->t->ids + r->off;
	uint32_t n = r->n_lookup, lead = 0;

	if (sim_hints_due(&s->hints, r->t_us))
		for (uint32_t i = 0; i < s->n_tiers; i++)
			sim_hints_lapse(&s->hints, &s->tiers[i].ev);
	/* The lookup gives the policy its keys, then touches every resident
	 * key, tail first. */
	for (uint32_t i = 0; i < n; i++)
		s->fps[i] = ids[i];
	evict_lookup(&tr->ev, s->fps, n, true);
	for (uint32_t i = n; i-- > 0;)
		if (s->state[ids[i]] == RESIDENT)
			evict_touch(&tr->ev, &s->ent[ids[i]]);
	while (lead < n && s->state[ids[lead]] == RESIDENT)
		lead++;
	for (uint32_t i = lead; i < n; i++)
		s->res.stray += s->state[ids[i]] == RESIDENT;
	s->res.hits += lead;

	/* Leases on the leading run take it off the list; releases put it
	 * back. */
	for (uint32_t i = 0; i < lead; i++)
		evict_remove(&tr->ev, &s->ent[ids[i]]);
	for (uint32_t k = 0; k < lead; k++) {
		uint32_t i = s->release_reverse ? lead - 1 - k : k;
		evict_insert(&tr->ev, &s->ent[ids[i]]);
	}

	online_store(s, tr, ids + lead, n - lead);
	online_store(s, tr, ids + n, r->n_new);
	sim_hints_request(&s->hints, &tr->ev, s->ent, s->t, r, s->state, RESIDENT);
}

/* Belady: a max-heap on (next use, depth); NEVER is the farthest. */
static bool farther(const struct sim *s, uint32_t a, uint32_t b)
{
	if (s->key_next[a] != s->key_next[b])
		return s->key_next[a] > s->key_next[b];
	return s->key_depth[a] > s->key_depth[b];
}

static void heap_set(struct sim *s, struct tier *tr, uint32_t i, uint32_t id)
{
	tr->heap[i] = id;
	s->heap_pos[id] = i;
}

static void heap_up(struct sim *s, struct tier *tr, uint32_t i)
{
	uint32_t id = tr->heap[i];
	while (i && farther(s, id, tr->heap[(i - 1) / 2])) {
		heap_set(s, tr, i, tr->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(s, tr, i, id);
}

static void heap_down(struct sim *s, struct tier *tr, uint32_t i)
{
	uint32_t id = tr->heap[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= tr->n_heap)
			break;
		if (c + 1 < tr->n_heap && farther(s, tr->heap[c + 1], tr->heap[c]))
			c++;
		if (!farther(s, tr->heap[c], id))
			break;
		heap_set(s, tr, i, tr->heap[c]);
		i = c;
	}
	heap_set(s, tr, i, id);
}

static void belady_request(struct sim *s, uint64_t q)
{
	const struct trace_req *r = &s->t->r[q];
	struct tier *tr = tier_of(s, r);
	const uint32_t *ids = s->t->ids + r->off;
	const uint32_t *next = s->next + r->off;
	uint32_t n = r->n_lookup, all = r->n_lookup + r->n_new, lead = 0;

	while (lead < n && s->state[ids[lead]] == RESIDENT)
		lead++;
	s->res.hits += lead;
	for (uint32_t i = 0; i < all; i++) {
		uint32_t id = ids[i];
		if (s->state[id] != RESIDENT)
			continue;
		if (i >= lead && i < n)
			s->res.stray++;
		/* Used now: its next use moves later, never earlier. */
		s->key_next[id] = next[i];
		heap_up(s, tr, s->heap_pos[id]);
	}
	for (uint32_t i = lead; i < all; i++) {
		uint32_t id = ids[i];
		if (s->state[id] == RESIDENT)
			continue;
		s->key_next[id] = next[i];
		s->key_depth[id] = i;
		if (tr->used >= tr->cap) {
			uint32_t top = tr->heap[0]; /* used == n_heap >= cap >= 1 */
			if (!farther(s, top, id))
				continue; /* kept out: needed later than anything held */
			s->state[top] = ABSENT;
			s->heap_pos[top] = NEVER;
			heap_set(s, tr, 0, tr->heap[--tr->n_heap]);
			if (tr->n_heap)
				heap_down(s, tr, 0);
			tr->used--;
			s->res.evictions++;
		}
		s->state[id] = RESIDENT;
		tr->used++;
		heap_set(s, tr, tr->n_heap++, id);
		heap_up(s, tr, tr->n_heap - 1);
	}
}

enum { POL_BELADY = _EVICT_POLICY_MAX, N_POLICIES };

static const char *policy_name(int p)
{
	return p == POL_BELADY ? "belady" : evict_policy_to_string(p);
}

/* What a run is, beside its policy and capacity. */
struct run_opts {
	bool partitioned, release_reverse;
	uint32_t small_percent;
	unsigned hints; /* enum trace_hint, 0 none */
	uint64_t hint_duration_us;
};

static int run(const struct trace *t, const uint32_t *next, int policy, uint64_t cap,
	       const struct run_opts *o, struct result *ret)
{
	struct sim *s = calloc(1, sizeof(*s));
	bool partitioned = o->partitioned;
	uint32_t small_percent = o->small_percent;
	int r = -ENOMEM;

	if (!s)
		return -ENOMEM;
	if (sim_hints_init(&s->hints, t, policy == POL_BELADY ? 0 : o->hints,
			   o->hint_duration_us) < 0) {
		free(s);
		return -ENOMEM;
	}
	s->t = t;
	s->next = next;
	s->partitioned = partitioned;
	s->release_reverse = o->release_reverse;
	s->n_tiers = partitioned ? t->n_tenants : 1;
	s->state = calloc(t->n_blocks, 1);
	if (!s->state)
		goto out;
	uint64_t total = 0;
	for (uint32_t i = 0; i < t->n_tenants; i++)
		total += t->tenant_blocks[i];
	for (uint32_t i = 0; i < s->n_tiers; i++) {
		struct tier *tr = &s->tiers[i];
		/* Split in proportion to each tenant's traffic: the quota an
		 * operator who knew the traffic would set. */
		tr->cap = partitioned ? (uint64_t)llround((double)cap * (double)t->tenant_blocks[i] /
							  (double)total)
				      : cap;
		if (tr->cap < 1)
			tr->cap = 1;
		if (policy == POL_BELADY) {
			tr->heap = malloc((tr->cap < t->n_blocks ? tr->cap : t->n_blocks) *
					  sizeof(uint32_t));
			if (!tr->heap)
				goto out;
		} else {
			/* A fixed secret: runs repeat.  Where a fingerprint
			 * lands changes no decision, only probe lengths. */
			static struct keyhash hash;
			keyhash_init_seed(&hash, 0);
			r = evict_init(&tr->ev, policy, &hash);
			if (r < 0)
				goto out;
			r = -ENOMEM;
			struct evict_s3fifo_state *s3 = evict_state(&tr->ev, &evict_policy_s3fifo);
			if (s3 && small_percent)
				s3->small_percent = small_percent;
		}
	}
	if (policy == POL_BELADY) {
		s->heap_pos = malloc((size_t)t->n_blocks * sizeof(uint32_t));
		s->key_next = malloc((size_t)t->n_blocks * sizeof(uint32_t));
		s->key_depth = malloc((size_t)t->n_blocks * sizeof(uint32_t));
		if (!s->heap_pos || !s->key_next || !s->key_depth)
			goto out;
		for (uint32_t i = 0; i < t->n_blocks; i++)
			s->heap_pos[i] = NEVER;
		for (uint64_t q = 0; q < t->n_req; q++)
			belady_request(s, q);
	} else {
		uint32_t most = 1;
		for (uint64_t q = 0; q < t->n_req; q++)
			most = t->r[q].n_lookup > most ? t->r[q].n_lookup : most;
		s->ent = malloc((size_t)t->n_blocks * sizeof(*s->ent));
		s->fps = malloc((size_t)most * sizeof(*s->fps));
		if (!s->ent || !s->fps)
			goto out;
		for (uint32_t i = 0; i < t->n_blocks; i++)
			fresh_entry(s, i);
		for (uint64_t q = 0; q < t->n_req; q++)
			online_request(s, &t->r[q]);
	}
	*ret = s->res;
	r = 0;
out:
	if (r < 0)
		memset(ret, 0, sizeof(*ret));
	for (uint32_t i = 0; i < s->n_tiers && policy != POL_BELADY; i++) {
		const struct evict *ev = &s->tiers[i].ev;
		const struct evict_lrfu_admit_state *a = evict_state(ev, &evict_policy_lrfu_admit);
		const struct evict_lrfu_state *l = a ? &a->lrfu : evict_state(ev, &evict_policy_lrfu);
		if (l)
			ret->policy_bytes += count_sketch_bytes(&l->sketch);
		if (a) {
			ret->admission = true;
			ret->refused += a->refused;
			ret->windows += a->admit.windows;
			ret->switches += a->admit.switches;
			ret->filter_on += a->admit.filter > 0;
			ret->policy_bytes += evict_admit_bytes(&a->admit);
		}
	}
	for (uint32_t i = 0; i < s->n_tiers; i++) {
		if (policy != POL_BELADY)
			evict_done(&s->tiers[i].ev);
		free(s->tiers[i].heap);
	}
	free(s->state);
	free(s->ent);
	free(s->fps);
	free(s->heap_pos);
	free(s->key_next);
	free(s->key_depth);
	sim_hints_done(&s->hints);
	free(s);
	return r;
}

/* ---- output -------------------------------------------------------- */

static void print_row(const struct trace *t, uint64_t cap, const struct run_opts *o, int policy,
		      unsigned hints, const struct result *res,
		      const struct result *belady, double lookups, bool csv)
{
	double rate = (double)res->hits / lookups;
	double of = belady && belady->hits ? (double)res->hits / (double)belady->hits : NAN;
	double frac = (double)cap / (double)t->n_blocks;
	char name[64], mode[48];

	trace_hint_name(hints, mode, sizeof(mode));
	snprintf(name, sizeof(name), "%s%s%s", policy_name(policy), hints ? "/" : "",
		 hints ? mode : "");
	if (csv) {
		printf("%.4f,%" PRIu64 ",%s,%s,%.6f,%" PRIu64 ",%.4f,%" PRIu64 ",%" PRIu64
		       ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%s\n",
		       frac, cap, o->partitioned ? "tenant" : "shared", policy_name(policy), rate,
		       res->hits * t->block_tokens, of, res->evictions, res->rejected, res->stray,
		       res->refused, res->windows, res->switches, res->filter_on, res->policy_bytes,
		       mode);
		return;
	}
	printf("%8.1f%% %10" PRIu64 "  %-28s %9.4f %15" PRIu64 " %10.3f\n", 100 * frac, cap, name,
	       rate, res->hits * t->block_tokens, of);
	if (res->admission)
		printf("#   lrfu-admit: %" PRIu64 " new blocks on probation; the setting "
		       "changed %" PRIu64 " times in %" PRIu64 " windows, the filter on at the end "
		       "in %" PRIu64 " of %u tiers; sketch and shadows %.1f bytes a "
		       "block of the tier\n", res->refused, res->switches, res->windows,
		       res->filter_on, o->partitioned ? t->n_tenants : 1,
		       (double)res->policy_bytes / (double)cap);
}

/* ---- command line -------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvt-policy-sim [OPTIONS] TRACE\n"
		"\n"
		"Replay a kvt-trace trace (\"-\" for standard input) against a host tier of\n"
		"several capacities, once per eviction policy, and report for each the\n"
		"leading-run hit rate (blocks at the head of a lookup that are resident,\n"
		"over blocks looked up), the prefill tokens those hits save, and the hit\n"
		"rate as a fraction of Belady's.\n"
		"\n"
		"The online policies are daemon/evict/, called as kvtierd calls it; Belady\n"
		"(farthest next use evicted, the new block kept out when it is the\n"
		"farthest, ties to the deepest block of a chain) is a clairvoyant reference,\n"
		"not a proven optimum for prefix chains (docs/workload.md).\n"
		"\n"
		"  --capacities LIST    tier sizes as fractions of the trace's distinct blocks\n"
		"                       (its working set), comma-separated\n"
		"                       (default 0.05,0.1,0.25,0.5)\n"
		"  --blocks LIST        tier sizes in blocks instead\n"
		"  --policies LIST      of lru, s3fifo, sieve, arc, lrfu, lrfu-admit, belady,\n"
		"                       and default: kvtierd's when [pool] eviction is not\n"
		"                       set (default: all)\n"
		"  --partition MODE     shared: one tier for all tenants (default); tenant:\n"
		"                       one per tenant, the capacity split by traffic\n"
		"  --release-order O    forward: leases on a lookup's hits released head\n"
		"                       first, as libkvtier-client does (default); reverse:\n"
		"                       tail first, so the head ends the most recent\n"
		"  --s3fifo-small PCT   S3-FIFO's small queue, percent of the tier (default:\n"
		"                       the daemon's, EVICT_S3FIFO_SMALL_PERCENT)\n"
		"  --nvme LIST          an NVMe tier behind host, in the unit of the host\n"
		"                       capacities (0 allowed); every pair of host and NVMe\n"
		"                       capacity is run, online policies only (no Belady for\n"
		"                       two tiers), with hits per tier, NVMe traffic and the\n"
		"                       prefill time saved against recomputing everything\n"
		"  --block-bytes N      bytes of KV per block (default 2097152: 16 tokens of a\n"
		"                       Llama-3-8B-shaped model, 128 KiB a token)\n"
		"  --host-gbps X        host to GPU, GB/s (default 25: PCIe 4.0 x16)\n"
		"  --nvme-gbps X        NVMe to host, GB/s (default 6: one PCIe 4.0 drive)\n"
		"  --recompute-tokens-per-s X\n"
		"                       prefill throughput (default 10000)\n"
		"  --hints LIST         also run each online policy with the engine's lifecycle\n"
		"                       hints (docs/workload.md); each item joins with '+'\n"
		"                       any of: request (every request ends with an end of\n"
		"                       request), end (a conversation's last turn ends its\n"
		"                       session over its private blocks), turns (every\n"
		"                       other turn retains its private blocks for the hint\n"
		"                       duration), shared (the system prompt retained); or\n"
		"                       all (end+turns+shared); shown as POLICY/HINTS\n"
		"  --hint-duration S    how long a turn's retention lasts (default 120)\n"
		"  --csv                one line per capacity and policy, for programs\n"
		"  --check              exit 1 unless: Belady >= every online policy and <=\n"
		"                       the unbounded tier at every capacity; Belady and LRU\n"
		"                       do not lose hits as capacity grows; with room for\n"
		"                       the working set every policy reaches the unbounded\n"
		"                       tier; Belady never holds a block without its prefix\n");
}

static int parse_list(const char *s, double *ret, unsigned *n)
{
	char *end;
	*n = 0;
	for (;;) {
		errno = 0;
		double v = strtod(s, &end);
		if (errno || end == s || !(v > 0) || *n >= MAX_CAPS)
			return -EINVAL;
		ret[(*n)++] = v;
		if (!*end)
			return 0;
		if (*end != ',')
			return -EINVAL;
		s = end + 1;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* kvtierd's policy when kvtierd.conf does not name one: its own defaults. */
static int default_policy(void)
{
	struct config c;
	int r = config_defaults(&c);

	if (r >= 0)
		r = (int)c.eviction;
	config_free(&c);
	return r;
}

int main(int argc, char **argv)
{
	enum { O_CAPS = 256, O_BLOCKS, O_POLICIES, O_PARTITION, O_RELEASE, O_SMALL, O_CSV, O_CHECK,
	       O_NVME, O_BLOCK_BYTES, O_HOST_GBPS, O_NVME_GBPS, O_RECOMPUTE, O_HINTS,
	       O_HINT_DURATION };
	static const struct option opts[] = {
		{"capacities", required_argument, NULL, O_CAPS},
		{"blocks", required_argument, NULL, O_BLOCKS},
		{"policies", required_argument, NULL, O_POLICIES},
		{"partition", required_argument, NULL, O_PARTITION},
		{"release-order", required_argument, NULL, O_RELEASE},
		{"s3fifo-small", required_argument, NULL, O_SMALL},
		{"csv", no_argument, NULL, O_CSV},
		{"check", no_argument, NULL, O_CHECK},
		{"nvme", required_argument, NULL, O_NVME},
		{"block-bytes", required_argument, NULL, O_BLOCK_BYTES},
		{"host-gbps", required_argument, NULL, O_HOST_GBPS},
		{"nvme-gbps", required_argument, NULL, O_NVME_GBPS},
		{"recompute-tokens-per-s", required_argument, NULL, O_RECOMPUTE},
		{"hints", required_argument, NULL, O_HINTS},
		{"hint-duration", required_argument, NULL, O_HINT_DURATION},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	double caps[MAX_CAPS] = {0.05, 0.1, 0.25, 0.5};
	unsigned n_caps = 4;
	bool in_blocks = false, partitioned = false, reverse = false, csv = false, check = false;
	uint32_t small_percent = 0;
	double nvme[MAX_CAPS];
	unsigned n_nvme = 0;
	struct tier_cost cost = {2097152, 25e9, 6e9, 10000};
	bool want[N_POLICIES];
	unsigned hint_modes[MAX_CAPS], n_hint_modes = 0;
	double hint_duration = 120;
	int c;

	for (int p = 0; p < N_POLICIES; p++)
		want[p] = true;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		switch (c) {
		case O_CAPS:
		case O_BLOCKS:
			in_blocks = c == O_BLOCKS;
			if (parse_list(optarg, caps, &n_caps) < 0) {
				fprintf(stderr, "kvt-policy-sim: bad capacity list '%s'\n", optarg);
				return 2;
			}
			break;
		case O_POLICIES: {
			char *dup = strdup(optarg), *save = NULL;
			memset(want, 0, sizeof(want));
			for (char *w = strtok_r(dup, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
				int p = !strcmp(w, "belady")    ? POL_BELADY
					: !strcmp(w, "default") ? default_policy()
								: evict_policy_from_string(w);
				if (p < 0) {
					fprintf(stderr, "kvt-policy-sim: unknown policy '%s'\n", w);
					free(dup);
					return 2;
				}
				want[p] = true;
			}
			free(dup);
			break;
		}
		case O_PARTITION:
			if (!strcmp(optarg, "shared") || !strcmp(optarg, "tenant")) {
				partitioned = !strcmp(optarg, "tenant");
				break;
			}
			fprintf(stderr, "kvt-policy-sim: --partition is shared or tenant\n");
			return 2;
		case O_RELEASE:
			if (!strcmp(optarg, "forward") || !strcmp(optarg, "reverse")) {
				reverse = !strcmp(optarg, "reverse");
				break;
			}
			fprintf(stderr, "kvt-policy-sim: --release-order is forward or reverse\n");
			return 2;
		case O_SMALL: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || v < 1 || v > 100) {
				fprintf(stderr, "kvt-policy-sim: --s3fifo-small is a percentage, 1 to 100\n");
				return 2;
			}
			small_percent = (uint32_t)v;
			break;
		}
		case O_NVME:
			/* 0 is a host tier alone, through the two-tier model */
			for (char *w = optarg;; w++) {
				char *end;
				errno = 0;
				nvme[n_nvme] = strtod(w, &end);
				if (errno || end == w || !(nvme[n_nvme] >= 0) || n_nvme >= MAX_CAPS - 1 ||
				    (*end && *end != ',')) {
					fprintf(stderr, "kvt-policy-sim: bad --nvme list '%s'\n", optarg);
					return 2;
				}
				n_nvme++;
				if (!*end)
					break;
				w = end;
			}
			break;
		case O_BLOCK_BYTES:
		case O_HOST_GBPS:
		case O_NVME_GBPS:
		case O_RECOMPUTE: {
			char *end;
			errno = 0;
			double v = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(v > 0) || !(v < 1e15)) {
				fprintf(stderr, "kvt-policy-sim: bad number '%s'\n", optarg);
				return 2;
			}
			if (c == O_BLOCK_BYTES)
				cost.block_bytes = v;
			else if (c == O_RECOMPUTE)
				cost.recompute_tokens_per_s = v;
			else
				*(c == O_HOST_GBPS ? &cost.host_bytes_per_s : &cost.nvme_bytes_per_s) = v * 1e9;
			break;
		}
		case O_HINTS: {
			char *dup = strdup(optarg), *save = NULL;
			for (char *w = strtok_r(dup, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
				int m = trace_hint_from_name(w);
				if (m < 0 || n_hint_modes == MAX_CAPS) {
					fprintf(stderr, "kvt-policy-sim: bad hint mode '%s' (request, end, "
						"turns, shared joined by '+', or all)\n", w);
					free(dup);
					return 2;
				}
				if (m)
					hint_modes[n_hint_modes++] = (unsigned)m;
			}
			free(dup);
			break;
		}
		case O_HINT_DURATION: {
			char *end;
			errno = 0;
			hint_duration = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(hint_duration > 0) ||
			    !(hint_duration < 1e7)) {
				fprintf(stderr, "kvt-policy-sim: --hint-duration is seconds, above 0\n");
				return 2;
			}
			break;
		}
		case O_CSV: csv = true; break;
		case O_CHECK: check = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return 2;
	}
	qsort(caps, n_caps, sizeof(caps[0]), cmp_double);
	if (n_nvme && (check || partitioned)) {
		fprintf(stderr, "kvt-policy-sim: --nvme models one shared host tier; no --check, "
			"no --partition tenant\n");
		return 2;
	}
	if (check)
		want[EVICT_LRU] = want[POL_BELADY] = true;
	if (n_hint_modes && n_nvme) {
		fprintf(stderr, "kvt-policy-sim: --hints runs the one-tier model; no --nvme\n");
		return 2;
	}
	struct run_opts o = {
		.partitioned = partitioned,
		.release_reverse = reverse,
		.small_percent = small_percent,
		.hint_duration_us = (uint64_t)(hint_duration * 1e6),
	};

	struct trace t;
	if (trace_read(&t, argv[optind], false, "kvt-policy-sim") < 0)
		return 1;
	if (n_nvme) {
		int r = tier_report(&t, argv[optind], want, caps, n_caps, nvme, n_nvme, in_blocks,
					reverse, small_percent, &cost, csv);
		if (r < 0)
			fprintf(stderr, "kvt-policy-sim: out of memory\n");
		trace_free(&t);
		return r < 0;
	}
	uint32_t *next = next_uses(&t);
	if (!next) {
		fprintf(stderr, "kvt-policy-sim: out of memory\n");
		return 1;
	}
	uint64_t bound = trace_unbounded_hits(&t);
	double lookups = (double)t.lookups;

	if (csv) {
		printf("capacity_fraction,capacity_blocks,partition,policy,hit_rate,tokens_saved,"
		       "of_belady,evictions,rejected,stray,refused,admit_windows,admit_switches,"
		       "admit_on_tiers,policy_bytes,hints\n");
	} else {
		printf("# trace %s: %" PRIu64 " requests, %u tenants, %u distinct blocks (the working set), "
		       "%" PRIu64 " blocks looked up, %u tokens per block\n",
		       argv[optind], t.n_req, t.n_tenants, t.n_blocks, t.lookups, t.block_tokens);
		printf("# hits: the leading run of each lookup only; a tier that never evicts gets %.4f\n",
		       (double)bound / lookups);
		printf("# tier: %s%s\n",
		       partitioned ? "one per tenant, capacity split by traffic" : "shared by all tenants",
		       reverse ? "; leases released tail first" : "");
		printf("# belady: clairvoyant reference, not a proven optimum for prefix chains\n");
		printf("%-9s %10s  %-28s %9s %15s %10s\n", "capacity", "blocks", "policy", "hit rate",
		       "tokens saved", "of belady");
	}

	int failed = 0;
	uint64_t prev[N_POLICIES] = {0};
	for (unsigned k = 0; k < n_caps; k++) {
		uint64_t cap = in_blocks ? (uint64_t)caps[k]
					 : (uint64_t)llround(caps[k] * (double)t.n_blocks);
		struct result res[N_POLICIES];
		if (cap < 1)
			cap = 1;
		for (int p = N_POLICIES - 1; p >= 0; p--) {
			if (!want[p])
				continue;
			int r = run(&t, next, p, cap, &o, &res[p]);
			if (r < 0) {
				fprintf(stderr, "kvt-policy-sim: out of memory\n");
				return 1;
			}
		}
		for (int p = 0; p < N_POLICIES; p++) {
			int q = (p + N_POLICIES - 1) % N_POLICIES; /* belady first */
			if (!want[q])
				continue;
			const struct result *belady = want[POL_BELADY] ? &res[POL_BELADY] : NULL;
			print_row(&t, cap, &o, q, 0, &res[q], belady, lookups, csv);
			for (unsigned h = 0; q != POL_BELADY && h < n_hint_modes; h++) {
				struct result hr;
				o.hints = hint_modes[h];
				int r = run(&t, next, q, cap, &o, &hr);
				o.hints = 0;
				if (r < 0) {
					fprintf(stderr, "kvt-policy-sim: out of memory\n");
					return 1;
				}
				print_row(&t, cap, &o, q, hint_modes[h], &hr, belady, lookups, csv);
			}
		}
		if (!check)
			continue;
		for (int p = 0; p < _EVICT_POLICY_MAX; p++)
			if (want[p] && res[p].hits > res[POL_BELADY].hits) {
				fprintf(stderr, "check: %s beats belady at %" PRIu64 " blocks (%" PRIu64
					" > %" PRIu64 " hits)\n", policy_name(p), cap, res[p].hits,
					res[POL_BELADY].hits);
				failed = 1;
			}
		if (res[POL_BELADY].hits > bound) {
			fprintf(stderr, "check: belady beats an unbounded tier at %" PRIu64 " blocks\n", cap);
			failed = 1;
		}
		if (res[POL_BELADY].stray) {
			fprintf(stderr, "check: belady held %" PRIu64 " blocks without their prefix at %"
				PRIu64 " blocks\n", res[POL_BELADY].stray, cap);
			failed = 1;
		}
		int mono[] = {EVICT_LRU, POL_BELADY};
		for (unsigned i = 0; k && i < 2; i++)
			if (res[mono[i]].hits < prev[mono[i]]) {
				fprintf(stderr, "check: %s loses hits as the tier grows to %" PRIu64 " blocks\n",
					policy_name(mono[i]), cap);
				failed = 1;
			}
		for (int p = 0; p < N_POLICIES; p++) {
			prev[p] = want[p] ? res[p].hits : 0;
			/* Per tenant, a tier's share of the traffic need not be its
			 * share of the working set: shared only. */
			if (want[p] && !partitioned && cap >= (uint64_t)t.n_blocks &&
			    res[p].hits != bound) {
				fprintf(stderr, "check: %s misses with room for the working set (%" PRIu64
					" hits, unbounded %" PRIu64 ")\n", policy_name(p), res[p].hits,
					bound);
				failed = 1;
			}
		}
	}
	trace_free(&t);
	free(next);
	if (check)
		fprintf(stderr, "kvt-policy-sim: checks %s\n", failed ? "FAILED" : "passed");
	return failed;
}
