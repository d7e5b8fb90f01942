/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-replay: drive a running kvtierd with a kvt-trace trace, through
 * libkvtier-client, as a set of engine processes.
 *
 * Each engine has a GPU tier of its own: a fixed number of blocks kept in
 * least-recently-used order, standing for the engine's paged KV cache.  A
 * request's leading blocks found there cost nothing; kvtierd is asked only
 * for the blocks after them, as an engine's connector asks only for tokens
 * it has not computed.  The leading hits kvtierd reports are loaded (those
 * on NVMe waited for first), every byte checked against what its writer
 * stored; the rest is "computed" and stored, then the blocks the answer
 * adds.  Every block the request touched is then in the GPU tier.
 *
 * Reported: leading hits per tier (GPU, host, NVMe), prefill tokens saved,
 * bytes moved between the tiers, and the daemon's own counters over the
 * run.  Engines run at once, each on its share of the requests in trace
 * order, as fast as they can; with one engine the order is the trace's.
 * With --hints, each request ends with the lifecycle hints an engine that
 * knows its traffic would send (trace.h, docs/workload.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine-request.h"
#include "kvtier.h"
#include "trace.h"

#define MAX_ENGINES 64
#define NONE UINT32_MAX

/* What one engine saw; summed over engines by the parent. */
struct counts {
	uint64_t requests, lookups;
	uint64_t gpu_hits, host_hits, nvme_hits;
	uint64_t load_bytes, store_bytes; /* host → GPU, GPU → host */
	uint64_t stored, store_busy, store_failed, load_failed, lookup_failed;
	uint64_t wrong_bytes;
	uint64_t hint_failed;
	uint64_t elapsed_ns;
};

/* ---- one engine ----------------------------------------------------- */

struct engine {
	const struct trace *t;
	const char *salt;
	unsigned hints; /* enum trace_hint */
	const struct engine_model *m;
	kvt_client *c;
	kvt_ns *ns[TRACE_MAX_TENANTS];
	uint64_t shard_bytes;
	/* The GPU tier: an LRU of block ids, in arrays indexed by id. */
	uint8_t *held_by_gpu;
	uint32_t *prev, *next; /* NONE at the ends */
	uint32_t head, tail;   /* head: most recently used; NONE when empty */
	uint64_t held, cap;
	/* scratch for one request */
	uint8_t *keys, *states, *buf;
	int32_t *status;
	void **ptrs;
	uint64_t cap_blocks;
	struct counts n;
};

static bool gpu_has(const struct engine *e, uint32_t id)
{
	return e->held_by_gpu[id];
}

static void gpu_unlink(struct engine *e, uint32_t id)
{
	uint32_t p = e->prev[id], n = e->next[id];

	if (p != NONE)
		e->next[p] = n;
	else
		e->head = n;
	if (n != NONE)
		e->prev[n] = p;
	else
		e->tail = p;
	e->held_by_gpu[id] = 0;
	e->held--;
}

static void gpu_push_head(struct engine *e, uint32_t id)
{
	if (gpu_has(e, id))
		gpu_unlink(e, id);
	e->prev[id] = NONE;
	e->next[id] = e->head;
	if (e->head != NONE)
		e->prev[e->head] = id;
	else
		e->tail = id;
	e->head = id;
	e->held_by_gpu[id] = 1;
	e->held++;
}

/* A block's bytes: a function of its key, as its writer computed them. */
static void pattern(uint8_t *buf, uint64_t len, const uint8_t *key)
{
	uint64_t s;
	memcpy(&s, key, 8);
	for (uint64_t i = 0; i < len; i += 8) {
		uint64_t v = mix(s + i);
		memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
	}
}

static uint64_t pattern_diff(const uint8_t *buf, uint64_t len, const uint8_t *key)
{
	uint64_t s, bad = 0;
	memcpy(&s, key, 8);
	for (uint64_t i = 0; i < len; i += 8) {
		uint64_t v = mix(s + i);
		uint64_t n = len - i < 8 ? len - i : 8;
		if (memcmp(buf + i, &v, n))
			bad += n;
	}
	return bad;
}

static int engine_ns(struct engine *e, uint32_t tenant, kvt_ns **ret)
{
	if (!e->ns[tenant]) {
		/* kvtierd scopes keys by tenant; one client uid is one tenant
		 * there, so each trace tenant gets a namespace of its own. */
		char salt[160];
		kvt_layer_group g;
		kvt_ns_desc d;
		kvt_ns_info info;
		snprintf(salt, sizeof(salt), "%s-tenant-%u", e->salt, tenant);
		engine_ns_desc(e->m, 1, salt, &g, &d);
		int r = kvt_ns_open(e->c, &d, &e->ns[tenant]);
		if (r < 0) {
			fprintf(stderr, "kvt-replay: cannot open a namespace: %s (%s)\n",
				strerror(-r), kvt_client_error(e->c));
			return r;
		}
		kvt_ns_get_info(e->ns[tenant], &info);
		e->shard_bytes = info.shard_bytes;
	}
	*ret = e->ns[tenant];
	return 0;
}

static int engine_scratch(struct engine *e, uint64_t blocks)
{
	if (blocks <= e->cap_blocks)
		return 0;
	free(e->keys);
	free(e->states);
	free(e->buf);
	free(e->status);
	free(e->ptrs);
	e->keys = malloc(blocks * TRACE_KEY_BYTES);
	e->states = malloc(blocks);
	e->buf = malloc(blocks * e->shard_bytes);
	e->status = malloc(blocks * sizeof(int32_t));
	e->ptrs = malloc(blocks * sizeof(void *));
	e->cap_blocks = blocks;
	if (!e->keys || !e->states || !e->buf || !e->status || !e->ptrs) {
		e->cap_blocks = 0;
		return -ENOMEM;
	}
	return 0;
}

/* The request's hints, for its keys in e->keys; a refused one is counted
 * (no hint changes what is served). */
static void engine_hints(struct engine *e, kvt_ns *ns, const struct trace_req *q)
{
	uint32_t all = q->n_lookup + q->n_new, shared = q->shared < all ? q->shared : all;
	const uint8_t *own = e->keys + (size_t)shared * TRACE_KEY_BYTES;
	int r = 0;

	if ((e->hints & TRACE_HINT_SHARED) && shared)
		r = kvt_retain(ns, e->keys, shared, TRACE_HINT_SHARED_PRIORITY, 0);
	if (r >= 0 && (e->hints & TRACE_HINT_END) && q->last && all > shared)
		r = kvt_end(ns, own, all - shared, KVT_END_SESSION);
	if (r >= 0 && (e->hints & TRACE_HINT_REQUEST))
		r = kvt_end(ns, e->keys, all, 0);
	e->n.hint_failed += r < 0;
}

static int engine_request(struct engine *e, const struct trace_req *q, uint32_t wait_ms)
{
	const uint32_t *ids = e->t->ids + q->off;
	uint32_t n = q->n_lookup, all = q->n_lookup + q->n_new, g = 0;
	int hits = 0, r;
	kvt_ns *ns;

	r = engine_ns(e, q->tenant, &ns);
	if (r < 0)
		return r;
	r = engine_scratch(e, all ? all : 1);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < all; i++)
		memcpy(e->keys + (size_t)i * TRACE_KEY_BYTES,
		       e->t->keys + (size_t)ids[i] * TRACE_KEY_BYTES, TRACE_KEY_BYTES);
	e->n.requests++;
	e->n.lookups += n;

	while (g < n && gpu_has(e, ids[g]))
		g++;
	e->n.gpu_hits += g;

	uint8_t *keys = e->keys + (size_t)g * TRACE_KEY_BYTES;
	if (g < n) {
		hits = kvt_lookup(ns, keys, n - g, KVT_LOOKUP_TOUCH, e->states);
		if (hits < 0) {
			e->n.lookup_failed++;
			hits = 0;
		}
		int disk = 0;
		for (int i = 0; i < hits; i++)
			disk += e->states[i] == KVT_DISK;
		if (disk) {
			int again = kvt_wait_resident(ns, keys, (size_t)hits, wait_ms);
			if (again >= 0 && again < hits)
				hits = again; /* failed its checks on the way up: a miss */
		}
	}
	if (hits > 0) {
		for (int i = 0; i < hits; i++)
			e->ptrs[i] = e->buf + (size_t)i * e->shard_bytes;
		kvt_load(ns, 0, keys, (size_t)hits, e->ptrs, e->status);
		/* Evicted between lookup and load: from there on it is
		 * computed, like any miss. */
		int ok = 0, moved = 0;
		while (ok < hits && e->status[ok] == 0)
			ok++;
		for (int i = 0; i < hits; i++)
			moved += e->status[i] == 0;
		/* Blocks after a failed one were loaded all the same: bytes
		 * moved, but no prefill saved. */
		e->n.load_bytes += (uint64_t)moved * e->shard_bytes;
		e->n.load_failed += (uint64_t)(hits - ok);
		hits = ok;
		for (int i = 0; i < hits; i++) {
			e->n.wrong_bytes += pattern_diff(e->ptrs[i], e->shard_bytes,
							  keys + (size_t)i * TRACE_KEY_BYTES);
			e->n.nvme_hits += e->states[i] == KVT_DISK;
		}
		/* kvtierd's leading hits, those staged from NVMe included. */
		e->n.host_hits += (uint64_t)hits;
	}

	/* Compute and store what was missing, then the answer's blocks. */
	uint32_t from = g + (uint32_t)hits;
	if (from < all) {
		for (uint32_t i = from; i < all; i++) {
			void *p = e->buf + (size_t)(i - from) * e->shard_bytes;
			pattern(p, e->shard_bytes, e->keys + (size_t)i * TRACE_KEY_BYTES);
			e->ptrs[i - from] = p;
		}
		r = kvt_store(ns, 0, e->keys + (size_t)from * TRACE_KEY_BYTES, all - from,
			      (const void *const *)e->ptrs, e->status);
		for (uint32_t i = 0; i < all - from; i++) {
			if (e->status[i] == 0) {
				e->n.stored++;
				e->n.store_bytes += e->shard_bytes;
			} else if (e->status[i] == -EBUSY) {
				/* Another engine is storing it right now. */
				e->n.store_busy++;
			} else if (e->status[i] != -EEXIST) {
				e->n.store_failed++;
			}
		}
	}

	if (e->hints)
		engine_hints(e, ns, q);
	/* The whole request is in GPU memory now, its head the most
	 * recent. */
	for (uint32_t i = all; i-- > 0;)
		gpu_push_head(e, ids[i]);
	while (e->held > e->cap)
		gpu_unlink(e, e->tail);
	return 0;
}

static int engine_run(struct engine *e, const char *socket, const char *name,
		      uint32_t index, uint32_t engines, bool by_conversation, uint32_t wait_ms,
		      uint64_t n_ids)
{
	int r = kvt_client_connect(socket, name, &e->c);
	if (r < 0) {
		fprintf(stderr, "kvt-replay: cannot connect to kvtierd at %s: %s (%s)\n",
			socket ? socket : kvt_default_socket(), strerror(-r), kvt_connect_error());
		return r;
	}
	e->held_by_gpu = calloc(n_ids ? n_ids : 1, 1);
	e->prev = malloc((n_ids ? n_ids : 1) * sizeof(uint32_t));
	e->next = malloc((n_ids ? n_ids : 1) * sizeof(uint32_t));
	if (!e->held_by_gpu || !e->prev || !e->next)
		return -ENOMEM;
	e->head = e->tail = NONE;

	uint64_t t0 = kvt_now_ns();
	for (uint64_t i = 0; i < e->t->n_req; i++) {
		const struct trace_req *q = &e->t->r[i];
		/* Conversations stick to an engine, as a router with session
		 * affinity sends them; otherwise requests go round. */
		uint64_t who = by_conversation ? mix(q->conv) % engines : i % engines;
		if (who != index)
			continue;
		r = engine_request(e, q, wait_ms);
		if (r < 0)
			return r;
	}
	e->n.elapsed_ns = kvt_now_ns() - t0;
	for (uint32_t i = 0; i < TRACE_MAX_TENANTS; i++)
		kvt_ns_close(e->ns[i]);
	kvt_client_free(e->c);
	return 0;
}

/* ---- the daemon's counters ----------------------------------------- */

struct daemon_counts {
	const char *model; /* count namespaces of this model only */
	uint64_t loads, load_bytes, stores, store_bytes, evictions, spills, restores, disk_hits;
	uint64_t dirty_drops, demotions, demoted_evictions;
	uint64_t nvme_write_bytes, nvme_read_bytes;
	bool nvme;
};

static int add_record(const kvt_record *r, void *userdata)
{
	struct daemon_counts *d = userdata;
	uint64_t v;

	if (!strcmp(kvt_record_kind(r), "daemon")) {
		if (kvt_record_get_u64(r, "nvme_write_bytes", &d->nvme_write_bytes) == 0)
			d->nvme = true;
		kvt_record_get_u64(r, "nvme_read_bytes", &d->nvme_read_bytes);
		return 0;
	}
	if (strcmp(kvt_record_kind(r), "namespace"))
		return 0;
	const char *model = kvt_record_get_str(r, "model");
	if (!model || strcmp(model, d->model))
		return 0;
#define ADD(f) d->f += kvt_record_get_u64(r, #f, &v) == 0 ? v : 0
	ADD(loads);
	ADD(load_bytes);
	ADD(stores);
	ADD(store_bytes);
	ADD(evictions);
	ADD(spills);
	ADD(restores);
	ADD(disk_hits);
	ADD(dirty_drops);
	ADD(demotions);
	ADD(demoted_evictions);
#undef ADD
	return 0;
}

static int daemon_counts(const char *socket, const char *model, struct daemon_counts *ret)
{
	kvt_client *c;
	int r = kvt_client_connect(socket, "kvt-replay", &c);
	if (r < 0)
		return r;
	*ret = (struct daemon_counts){.model = model};
	r = kvt_stats(c, KVT_STATS_DAEMON | KVT_STATS_NAMESPACES, add_record, ret);
	kvt_client_free(c);
	return r;
}

/* ---- main ------------------------------------------------------------ */

/* Leading hits of a tier: how many, their share of the blocks looked up,
 * the prefill tokens they save. */
static void tier_row(const char *tier, uint64_t hits, double lookups, uint32_t block_tokens)
{
	printf("%-6s %14" PRIu64 " %9.4f %16" PRIu64 "\n", tier, hits, (double)hits / lookups,
	       hits * block_tokens);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: kvt-replay [OPTIONS] TRACE\n"
		"\n"
		"Replay a kvt-trace trace (with keys) against a running kvtierd as a set of\n"
		"engine processes, each with a GPU tier of its own (an LRU of blocks), and\n"
		"report leading hits per tier (GPU, host, NVMe), prefill tokens saved and\n"
		"bytes moved.  Every loaded byte is checked against what was stored.\n"
		"\n"
		"  --socket PATH      kvtierd's socket (default: $KVTIER_SOCKET or the daemon's)\n"
		"  --engines N        engine processes (default 1: the trace's order exactly)\n"
		"  --gpu-blocks N     blocks each engine's GPU tier holds (default 256)\n"
		"  --model NAME       the namespace geometry, as kvt-engine: tiny (default,\n"
		"                     32 KiB blocks), llama3-8b (2 MiB), llama3-70b (5 MiB)\n"
		"  --route MODE       conversation: a conversation stays on one engine (default);\n"
		"                     request: requests go round the engines\n"
		"  --wait-ms MS       longest wait for blocks staged from NVMe (default 10000)\n"
		"  --salt STR         namespace salt prefix (default kvt-replay): a new one\n"
		"                     starts from an empty tier, the same one reuses what an\n"
		"                     earlier run left\n"
		"  --hints H          each request ends with the engine's lifecycle hints, any\n"
		"                     of request, end, shared joined by '+' (docs/workload.md;\n"
		"                     turns needs the trace's clock, which a replay as fast as\n"
		"                     it can go does not keep: kvt-policy-sim has it)\n"
		"\n"
		"Trace tenants map to namespaces salted STR-tenant-N, under the caller's own\n"
		"kvtierd tenant.  The daemon's counters are differences over the run, for\n"
		"namespaces of the model, and include anything else using them.\n");
}

/* Run the engines over trace t and print what each tier saved. */
static int replay(const struct trace *t, const char *path, const char *socket, const char *salt,
		  const struct engine_model *model, uint32_t engines, uint64_t gpu_blocks,
		  bool by_conversation, uint32_t wait_ms, unsigned hints)
{
	if (t->block_tokens != ENGINE_BLOCK_TOKENS) {
		fprintf(stderr, "kvt-replay: the trace has %u tokens per block, the engine's "
				"namespace %u\n", t->block_tokens, ENGINE_BLOCK_TOKENS);
		return 1;
	}

	struct daemon_counts before, after;
	int r = daemon_counts(socket, model->name, &before);
	if (r < 0) {
		fprintf(stderr, "kvt-replay: cannot read kvtierd's counters at %s: %s (%s)\n",
			socket ? socket : kvt_default_socket(), strerror(-r), kvt_connect_error());
		return 1;
	}

	/* One pipe per engine: its counts come back when it is done. */
	pid_t pids[MAX_ENGINES];
	int fds[MAX_ENGINES];
	uint64_t t0 = kvt_now_ns();
	for (uint32_t i = 0; i < engines; i++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) < 0) {
			perror("kvt-replay: pipe");
			return 1;
		}
		fflush(NULL);
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("kvt-replay: fork");
			return 1;
		}
		if (pids[i] == 0) {
			struct engine e = {.t = t, .salt = salt, .hints = hints, .m = model,
					   .cap = gpu_blocks};
			char name[32];
			close(p[0]);
			snprintf(name, sizeof(name), "kvt-replay-%u", i);
			r = engine_run(&e, socket, name, i, engines, by_conversation, wait_ms, t->n_keys);
			if (r < 0) {
				fprintf(stderr, "kvt-replay: engine %u: %s\n", i, strerror(-r));
				_exit(1);
			}
			_exit(write(p[1], &e.n, sizeof(e.n)) == sizeof(e.n) ? 0 : 1);
		}
		close(p[1]);
		fds[i] = p[0];
	}

	struct counts sum = {0};
	int failed = 0;
	uint64_t shard_bytes = 0;
	for (uint32_t i = 0; i < engines; i++) {
		struct counts n;
		ssize_t got = read(fds[i], &n, sizeof(n));
		int status;
		close(fds[i]);
		if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0 || got != (ssize_t)sizeof(n)) {
			fprintf(stderr, "kvt-replay: engine %u failed\n", i);
			failed = 1;
			continue;
		}
		sum.requests += n.requests;
		sum.lookups += n.lookups;
		sum.gpu_hits += n.gpu_hits;
		sum.host_hits += n.host_hits;
		sum.nvme_hits += n.nvme_hits;
		sum.load_bytes += n.load_bytes;
		sum.store_bytes += n.store_bytes;
		sum.stored += n.stored;
		sum.store_busy += n.store_busy;
		sum.store_failed += n.store_failed;
		sum.load_failed += n.load_failed;
		sum.lookup_failed += n.lookup_failed;
		sum.wrong_bytes += n.wrong_bytes;
		sum.hint_failed += n.hint_failed;
		if (n.stored)
			shard_bytes = n.store_bytes / n.stored;
	}
	double secs = (double)(kvt_now_ns() - t0) / 1e9;
	if (failed)
		return 1;
	if (daemon_counts(socket, model->name, &after) < 0) {
		fprintf(stderr, "kvt-replay: cannot read kvtierd's counters after the run\n");
		return 1;
	}

	uint64_t host_only = sum.host_hits - sum.nvme_hits;
	uint64_t misses = sum.lookups - sum.gpu_hits - sum.host_hits;
	uint64_t bound = trace_unbounded_hits(t);
	double L = sum.lookups ? (double)sum.lookups : 1;
	uint32_t bt = t->block_tokens;

	printf("# kvt-replay %s: %" PRIu64 " requests, %" PRIu64 " blocks looked up; %u engine%s, "
	       "GPU tier %" PRIu64 " blocks each, model %s (%" PRIu64 " bytes per block), routed by %s\n",
	       path, sum.requests, sum.lookups, engines, engines == 1 ? "" : "s",
	       gpu_blocks, model->name, shard_bytes, by_conversation ? "conversation" : "request");
	printf("# hits: the leading run only; without evictions they would be %.4f\n",
	       (double)bound / L);
	printf("%-6s %14s %9s %16s\n", "tier", "leading hits", "hit rate", "tokens saved");
	tier_row("gpu", sum.gpu_hits, L, bt);
	tier_row("host", host_only, L, bt);
	tier_row("nvme", sum.nvme_hits, L, bt);
	printf("%-6s %14" PRIu64 " %9.4f %16s\n", "miss", misses, (double)misses / L, "-");
	printf("bytes: host to GPU %" PRIu64 ", GPU to host %" PRIu64, sum.load_bytes,
	       sum.store_bytes);
	if (after.nvme)
		printf(", NVMe to host %" PRIu64 ", host to NVMe %" PRIu64,
		       after.nvme_read_bytes - before.nvme_read_bytes,
		       after.nvme_write_bytes - before.nvme_write_bytes);
	printf("\n");
	printf("daemon: %" PRIu64 " loads, %" PRIu64 " stores, %" PRIu64 " evictions (%" PRIu64
	       " of them dropped before write-back reached them), %" PRIu64 " spills, %" PRIu64
	       " restores\n",
	       after.loads - before.loads, after.stores - before.stores,
	       after.evictions - before.evictions, after.dirty_drops - before.dirty_drops,
	       after.spills - before.spills, after.restores - before.restores);
	if (hints) {
		char name[48];
		trace_hint_name(hints, name, sizeof(name));
		printf("hints %s: %" PRIu64 " blocks demoted, %" PRIu64 " evicted while demoted, %"
		       PRIu64 " hint requests failed\n", name, after.demotions - before.demotions,
		       after.demoted_evictions - before.demoted_evictions, sum.hint_failed);
	}
	printf("%.1f s, %.0f requests/s; %" PRIu64 " lookups failed, %" PRIu64 " loads failed, %"
	       PRIu64 " stores failed, %" PRIu64 " left to another engine storing the block\n",
	       secs, (double)sum.requests / secs, sum.lookup_failed, sum.load_failed,
	       sum.store_failed, sum.store_busy);
	printf("summary requests=%" PRIu64 " lookups=%" PRIu64 " gpu_hits=%" PRIu64
	       " host_hits=%" PRIu64 " nvme_hits=%" PRIu64 " misses=%" PRIu64
	       " unbounded_hits=%" PRIu64 " load_bytes=%" PRIu64 " store_bytes=%" PRIu64
	       " daemon_load_bytes=%" PRIu64 " daemon_store_bytes=%" PRIu64
	       " evictions=%" PRIu64 " wrong_bytes=%" PRIu64 " demotions=%" PRIu64
	       " demoted_evictions=%" PRIu64 " hint_failed=%" PRIu64 "\n",
	       sum.requests, sum.lookups, sum.gpu_hits, host_only, sum.nvme_hits, misses, bound,
	       sum.load_bytes, sum.store_bytes, after.load_bytes - before.load_bytes,
	       after.store_bytes - before.store_bytes, after.evictions - before.evictions,
	       sum.wrong_bytes, after.demotions - before.demotions,
	       after.demoted_evictions - before.demoted_evictions, sum.hint_failed);
	if (sum.wrong_bytes) {
		fprintf(stderr, "kvt-replay: %" PRIu64 " loaded bytes differ from what was stored\n",
			sum.wrong_bytes);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	enum { O_SOCKET = 256, O_ENGINES, O_GPU, O_MODEL, O_ROUTE, O_WAIT, O_SALT, O_HINTS };
	static const struct option opts[] = {
		{"socket", required_argument, NULL, O_SOCKET},
		{"engines", required_argument, NULL, O_ENGINES},
		{"gpu-blocks", required_argument, NULL, O_GPU},
		{"model", required_argument, NULL, O_MODEL},
		{"route", required_argument, NULL, O_ROUTE},
		{"wait-ms", required_argument, NULL, O_WAIT},
		{"salt", required_argument, NULL, O_SALT},
		{"hints", required_argument, NULL, O_HINTS},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	const char *socket = NULL, *salt = "kvt-replay";
	const struct engine_model *model = engine_model_find("tiny");
	uint32_t engines = 1, wait_ms = 10000;
	uint64_t gpu_blocks = 256;
	bool by_conversation = true;
	unsigned hints = 0;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		char *end = NULL;
		switch (c) {
		case O_SOCKET: socket = optarg; break;
		case O_ENGINES:
			engines = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || engines < 1 || engines > MAX_ENGINES) {
				fprintf(stderr, "kvt-replay: --engines is 1 to %d\n", MAX_ENGINES);
				return 2;
			}
			break;
		case O_GPU:
			gpu_blocks = strtoull(optarg, &end, 10);
			if (*end || optarg[0] == '-') {
				fprintf(stderr, "kvt-replay: --gpu-blocks is a block count\n");
				return 2;
			}
			break;
		case O_MODEL:
			model = engine_model_find(optarg);
			if (!model) {
				fprintf(stderr, "kvt-replay: unknown model '%s'\n", optarg);
				return 2;
			}
			break;
		case O_ROUTE:
			if (strcmp(optarg, "conversation") && strcmp(optarg, "request")) {
				fprintf(stderr, "kvt-replay: --route is conversation or request\n");
				return 2;
			}
			by_conversation = !strcmp(optarg, "conversation");
			break;
		case O_WAIT:
			wait_ms = (uint32_t)strtoul(optarg, &end, 10);
			if (*end) {
				fprintf(stderr, "kvt-replay: --wait-ms is milliseconds\n");
				return 2;
			}
			break;
		case O_SALT:
			if (strlen(optarg) > 100) {
				fprintf(stderr, "kvt-replay: --salt is at most 100 bytes\n");
				return 2;
			}
			salt = optarg;
			break;
		case O_HINTS: {
			int h = trace_hint_from_name(optarg);
			if (h < 0 || (h & TRACE_HINT_TURNS)) {
				fprintf(stderr, "kvt-replay: --hints is request, end and shared, joined "
					"by '+' (turns: kvt-policy-sim --hints)\n");
				return 2;
			}
			hints = (unsigned)h;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return 2;
	}

	struct trace t;
	if (trace_read(&t, argv[optind], true, "kvt-replay") < 0)
		return 1;
	int ret = replay(&t, argv[optind], socket, salt, model, engines, gpu_blocks,
			 by_conversation, wait_ms, hints);
	trace_free(&t);
	return ret;
}
