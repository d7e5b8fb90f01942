/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-engine: an inference engine's side of kvtier, without the model.
 *
 * It holds a vLLM-style paged KV cache (per layer (2, pages, 16, heads,
 * head_dim), fp16-sized elements) in its own memory, builds a request from a
 * shared prompt prefix and a private suffix, asks kvtierd how many leading
 * blocks it already has, loads those into its pages, "computes" the rest and
 * stores them.  Every element's bytes are a function of the block key and
 * the element's coordinates, so every byte that comes back is checked
 * against what the engine that computed it would have written.
 *
 * The demo, the integration tests and the benchmarks drive kvtierd with it.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine-request.h"
#include "kvtier.h"

#define BLOCK_TOKENS ENGINE_BLOCK_TOKENS

struct engine {
	const struct engine_model *m;
	uint32_t tp_size, tp_rank, heads; /* heads held by this rank */
	uint32_t head_bytes;
	uint32_t n_blocks;
	uint8_t *keys;
	uint8_t **layer_mem; /* [layers] (2, n_blocks, 16, heads, head_bytes) */
	void **layer_base;
	kvt_layout layout;
	kvt_client *c;
	kvt_ns *ns;
};

static uint8_t *engine_elem(struct engine *e, uint32_t layer, uint32_t plane,
			    uint32_t page, uint32_t token, uint32_t head)
{
	return e->layer_mem[layer] + e->layout.stride_plane * plane +
	       e->layout.stride_page * page + e->layout.stride_token * token +
	       e->layout.stride_head * head;
}

/* "Compute" block b's KV into page b. */
static void compute_page(struct engine *e, uint32_t b)
{
	const uint8_t *key = e->keys + (size_t)b * 32;
	for (uint32_t l = 0; l < e->m->layers; l++)
		for (uint32_t p = 0; p < 2; p++)
			for (uint32_t t = 0; t < BLOCK_TOKENS; t++)
				for (uint32_t h = 0; h < e->heads; h++)
					engine_element(key, l, p, t, e->tp_rank * e->heads + h,
						       engine_elem(e, l, p, b, t, h), e->head_bytes);
}

/* Count bytes of page b that differ from what its block must hold. */
static uint64_t verify_page(struct engine *e, uint32_t b)
{
	const uint8_t *key = e->keys + (size_t)b * 32;
	uint8_t want[4096];
	uint64_t bad = 0;
	for (uint32_t l = 0; l < e->m->layers; l++)
		for (uint32_t p = 0; p < 2; p++)
			for (uint32_t t = 0; t < BLOCK_TOKENS; t++)
				for (uint32_t h = 0; h < e->heads; h++) {
					engine_element(key, l, p, t, e->tp_rank * e->heads + h,
						       want, e->head_bytes);
					if (memcmp(want, engine_elem(e, l, p, b, t, h), e->head_bytes))
						bad += e->head_bytes;
				}
	return bad;
}

/* Verify a shard in kvtier's block layout [layer][plane][token][head]. */
static uint64_t verify_shard(struct engine *e, const uint8_t *key, const uint8_t *shard)
{
	uint8_t want[4096];
	uint64_t bad = 0;
	const uint8_t *p = shard;
	for (uint32_t l = 0; l < e->m->layers; l++)
		for (uint32_t pl = 0; pl < 2; pl++)
			for (uint32_t t = 0; t < BLOCK_TOKENS; t++)
				for (uint32_t h = 0; h < e->heads; h++) {
					engine_element(key, l, pl, t, e->tp_rank * e->heads + h,
						       want, e->head_bytes);
					if (memcmp(want, p, e->head_bytes))
						bad += e->head_bytes;
					p += e->head_bytes;
				}
	return bad;
}

static int engine_setup(struct engine *e, uint32_t n_blocks)
{
	e->head_bytes = e->m->head_dim * e->m->elem_bytes;
	e->heads = e->m->kv_heads / e->tp_size;
	e->n_blocks = n_blocks;
	uint64_t page = (uint64_t)BLOCK_TOKENS * e->heads * e->head_bytes;
	e->layer_mem = calloc(e->m->layers, sizeof(*e->layer_mem));
	e->layer_base = calloc(e->m->layers, sizeof(*e->layer_base));
	if (!e->layer_mem || !e->layer_base)
		return -ENOMEM;
	for (uint32_t l = 0; l < e->m->layers; l++) {
		/* Poisoned: a page that is never written cannot pass. */
		e->layer_mem[l] = malloc(2 * page * (n_blocks ? n_blocks : 1));
		if (!e->layer_mem[l])
			return -ENOMEM;
		memset(e->layer_mem[l], 0xA5, 2 * page * (n_blocks ? n_blocks : 1));
		e->layer_base[l] = e->layer_mem[l];
	}
	e->layout = (kvt_layout){
		.n_layers = e->m->layers,
		.planes = 2,
		.heads = e->heads,
		.head_bytes = e->head_bytes,
		.page_tokens = BLOCK_TOKENS,
		.index_kind = KVT_INDEX_PAGE,
		.layer_base = e->layer_base,
		.stride_plane = (int64_t)(page * n_blocks),
		.stride_page = (int64_t)page,
		.stride_token = (int64_t)e->heads * e->head_bytes,
		.stride_head = e->head_bytes,
	};
	return 0;
}

static void engine_free(struct engine *e)
{
	kvt_ns_close(e->ns);
	kvt_client_free(e->c);
	for (uint32_t l = 0; e->layer_mem && l < e->m->layers; l++)
		free(e->layer_mem[l]);
	free(e->layer_mem);
	free(e->layer_base);
	free(e->keys);
}

static int open_ns(struct engine *e, const char *salt)
{
	kvt_layer_group g;
	kvt_ns_desc d;

	engine_ns_desc(e->m, e->tp_size, salt, &g, &d);
	return kvt_ns_open(e->c, &d, &e->ns);
}

static void usage(void)
{
	printf("Usage: kvt-engine [OPTIONS]\n"
	       "\n"
	       "Serve one request like an inference engine would: reuse the leading\n"
	       "blocks kvtierd has, compute and store the rest, verify every byte.\n"
	       "\n"
	       "  --socket PATH        kvtierd socket (default: $KVTIER_SOCKET or the daemon default)\n"
	       "  --name NAME          client name shown by kvtierctl clients\n"
	       "  --model NAME         llama3-8b (default), llama3-70b or tiny\n"
	       "  --prefix N           shared prompt prefix tokens (default 1024)\n"
	       "  --prefix-seed S      which shared prefix (default 1)\n"
	       "  --suffix N           private suffix tokens (default 256)\n"
	       "  --suffix-seed S      which suffix (default: the pid)\n"
	       "  --tp-size T --tp-rank R   tensor-parallel rank R of T\n"
	       "  --salt STR           cache salt (narrows sharing)\n"
	       "  --expect-hits N      fail unless exactly N leading blocks hit\n"
	       "  --no-store           look up and load only\n"
	       "  --hold               reserve the request's blocks, half-write them, print\n"
	       "                       HELD and wait to be killed (crash tests)\n"
	       "  --pin FILE           scheduler: acquire the leading hits, write their\n"
	       "                       handles to FILE, wait for end of stdin\n"
	       "  --copy FILE          worker: copy and verify the blocks pinned in FILE,\n"
	       "                       then release them\n"
	       "  --repeat N           serve the request N times (default 1)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"name", required_argument, NULL, 'n'},
		{"model", required_argument, NULL, 'm'},
		{"prefix", required_argument, NULL, 'p'},
		{"prefix-seed", required_argument, NULL, 'P'},
		{"suffix", required_argument, NULL, 'x'},
		{"suffix-seed", required_argument, NULL, 'X'},
		{"tp-size", required_argument, NULL, 't'},
		{"tp-rank", required_argument, NULL, 'r'},
		{"salt", required_argument, NULL, 'S'},
		{"expect-hits", required_argument, NULL, 'e'},
		{"no-store", no_argument, NULL, 'N'},
		{"hold", no_argument, NULL, 'H'},
		{"pin", required_argument, NULL, 'I'},
		{"copy", required_argument, NULL, 'C'},
		{"repeat", required_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	const char *socket = NULL, *name = "kvt-engine", *salt = NULL;
	const char *pin = NULL, *copy = NULL;
	uint32_t prefix = 1024, suffix = 256, repeat = 1;
	uint64_t prefix_seed = 1, suffix_seed = (uint64_t)getpid();
	long expect = -1;
	int no_store = 0, hold = 0, c, r;
	struct engine e = {.m = &engine_models[0], .tp_size = 1};

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		switch (c) {
		case 's': socket = optarg; break;
		case 'n': name = optarg; break;
		case 'm':
			e.m = engine_model_find(optarg);
			if (!e.m) {
				fprintf(stderr, "kvt-engine: unknown model '%s'\n", optarg);
				return 2;
			}
			break;
		case 'p': prefix = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'P': prefix_seed = strtoull(optarg, NULL, 10); break;
		case 'x': suffix = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'X': suffix_seed = strtoull(optarg, NULL, 10); break;
		case 't': e.tp_size = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'r': e.tp_rank = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'S': salt = optarg; break;
		case 'e': expect = strtol(optarg, NULL, 10); break;
		case 'N': no_store = 1; break;
		case 'H': hold = 1; break;
		case 'I': pin = optarg; break;
		case 'C': copy = optarg; break;
		case 'R': repeat = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (e.tp_size == 0 || e.tp_rank >= e.tp_size || e.m->kv_heads % e.tp_size) {
		fprintf(stderr, "kvt-engine: bad tensor-parallel rank/size\n");
		return 2;
	}

	uint32_t n_tokens = prefix + suffix;
	uint32_t *tokens = calloc(n_tokens ? n_tokens : 1, sizeof(uint32_t));
	engine_tokens(tokens, prefix_seed, prefix, suffix_seed, suffix);
	uint32_t n_blocks = n_tokens / BLOCK_TOKENS;
	e.keys = calloc(n_blocks ? n_blocks : 1, 32);
	r = kvt_hash_chain(NULL, tokens, n_tokens, BLOCK_TOKENS, NULL, 0, e.keys, n_blocks);
	free(tokens);
	if (r < 0 || engine_setup(&e, n_blocks) < 0) {
		fprintf(stderr, "kvt-engine: setup failed\n");
		return 1;
	}

	r = kvt_client_connect(socket, name, &e.c);
	if (r < 0) {
		fprintf(stderr, "kvt-engine %s: cannot connect to kvtierd at %s: %s\n", name,
			socket ? socket : kvt_default_socket(), strerror(-r));
		engine_free(&e);
		return 1;
	}
	r = open_ns(&e, salt);
	if (r < 0) {
		fprintf(stderr, "kvt-engine %s: cannot open namespace: %s (%s)\n", name,
			strerror(-r), kvt_client_error(e.c));
		engine_free(&e);
		return 1;
	}
	kvt_ns_info info;
	kvt_ns_get_info(e.ns, &info);

	if (hold) {
		kvt_slot_ref *refs = calloc(n_blocks, sizeof(*refs));
		r = kvt_reserve(e.ns, e.tp_rank, e.keys, n_blocks, refs);
		for (uint32_t i = 0; i < n_blocks; i++)
			if (refs[i].status == 0)
				memset(refs[i].ptr, 0x5A, refs[i].bytes / 2);
		printf("HELD %d\n", r);
		fflush(stdout);
		for (;;)
			pause();
	}

	if (copy) {
		FILE *f = fopen(copy, "re");
		char hex[65];
		uint32_t ext;
		uint64_t off, handle, bytes;
		uint64_t bad = 0, n = 0;
		if (!f) {
			perror("kvt-engine: --copy");
			engine_free(&e);
			return 1;
		}
		while (fscanf(f, "%u %" SCNu64 " %" SCNu64 " %" SCNu64 " %64s", &ext, &off,
			      &bytes, &handle, hex) == 5) {
			uint8_t key[32];
			void *p;
			for (int i = 0; i < 32; i++)
				sscanf(hex + 2 * i, "%2hhx", &key[i]);
			r = kvt_client_map(e.c, ext, off, bytes, &p);
			if (r < 0) {
				fprintf(stderr, "kvt-engine %s: cannot map extent %u: %s\n", name, ext,
					strerror(-r));
				fclose(f);
				engine_free(&e);
				return 1;
			}
			bad += verify_shard(&e, key, p);
			int32_t st;
			r = kvt_release(e.c, &handle, 1, &st);
			if (r < 0 || st != 0) {
				fprintf(stderr, "kvt-engine %s: release of handle %" PRIu64 " failed: %d/%d\n",
					name, handle, r, st);
				fclose(f);
				engine_free(&e);
				return 1;
			}
			n++;
		}
		fclose(f);
		printf("kvt-engine %s: copied %" PRIu64 " pinned blocks, %" PRIu64 " wrong bytes\n",
		       name, n, bad);
		engine_free(&e);
		return bad || n == 0 ? 1 : 0;
	}

	int failed = 0;
	for (uint32_t round = 0; round < repeat; round++) {
		uint8_t *states = calloc(n_blocks ? n_blocks : 1, 1);
		int32_t *st = calloc(n_blocks ? n_blocks : 1, sizeof(int32_t));
		int64_t *pages = calloc(n_blocks ? n_blocks : 1, sizeof(int64_t));
		for (uint32_t i = 0; i < n_blocks; i++)
			pages[i] = i;

		int hits = kvt_lookup(e.ns, e.keys, n_blocks, KVT_LOOKUP_TOUCH, states);
		if (hits < 0) {
			fprintf(stderr, "kvt-engine %s: lookup failed: %s\n", name, strerror(-hits));
			free(states);
			free(st);
			free(pages);
			engine_free(&e);
			return 1;
		}
		/* Leading hits on NVMe are being staged into host memory: wait
		 * until they are there (what an engine's "hit, pending" means),
		 * for a bounded time. */
		int disk = 0;
		for (int i = 0; i < hits; i++)
			disk += states[i] == KVT_DISK;
		if (disk) {
			int again = kvt_wait_resident(e.ns, e.keys, (size_t)hits, 10000);
			if (again >= 0 && again < hits)
				hits = again; /* a staged block failed verification: a miss */
		}

		if (pin) {
			kvt_slot_ref *refs = calloc(hits ? hits : 1, sizeof(*refs));
			r = kvt_acquire(e.ns, e.tp_rank, e.keys, (size_t)hits, refs);
			FILE *f = fopen(pin, "we");
			for (int i = 0; i < hits; i++) {
				if (refs[i].status != 0)
					continue;
				fprintf(f, "%u %" PRIu64 " %" PRIu64 " %" PRIu64 " ", refs[i].extent_id,
					refs[i].offset, refs[i].bytes, refs[i].handle);
				for (int j = 0; j < 32; j++)
					fprintf(f, "%02x", e.keys[(size_t)i * 32 + j]);
				fprintf(f, "\n");
			}
			fclose(f);
			printf("PINNED %d\n", r);
			fflush(stdout);
			/* Hold the pins until the test closes our stdin. */
			while (getchar() != EOF)
				;
			free(refs);
			free(states);
			free(st);
			free(pages);
			engine_free(&e);
			return 0;
		}

		uint64_t t0 = kvt_now_ns();
		int loaded = hits ? kvt_load_paged(e.ns, e.tp_rank, &e.layout, e.keys,
						   (size_t)hits, pages, st)
				  : 0;
		uint64_t t1 = kvt_now_ns();
		uint64_t bad = 0;
		for (int i = 0; i < hits; i++) {
			if (st[i] != 0) {
				/* Evicted between lookup and load: a miss, not an
				 * error, and the engine computes it instead. */
				compute_page(&e, (uint32_t)i);
				continue;
			}
			bad += verify_page(&e, (uint32_t)i);
		}
		for (uint32_t i = (uint32_t)hits; i < n_blocks; i++)
			compute_page(&e, i);
		int stored = 0;
		if (!no_store && n_blocks > (uint32_t)hits) {
			stored = kvt_store_paged(e.ns, e.tp_rank, &e.layout,
						 e.keys + (size_t)hits * 32,
						 n_blocks - (uint32_t)hits, pages + hits, st);
			if (stored < 0)
				fprintf(stderr, "kvt-engine %s: store failed: %s %s\n", name,
					strerror(-stored), kvt_client_error(e.c));
		}
		double mib = (double)loaded * (double)info.shard_bytes / (1 << 20);
		double secs = (double)(t1 - t0) / 1e9;
		printf("kvt-engine %s: %u blocks (%u tokens); %d leading hits reused (%d tokens, %.1f MiB loaded at %.2f GB/s); %u computed, %d stored; %s\n",
		       name, n_blocks, n_blocks * BLOCK_TOKENS, hits, hits * BLOCK_TOKENS,
		       mib, secs > 0 ? mib * 1.048576 / 1e3 / secs : 0.0, n_blocks - (uint32_t)hits,
		       stored < 0 ? 0 : stored,
		       bad ? "VERIFY FAILED" : "every loaded byte verified");
		if (bad) {
			fprintf(stderr, "kvt-engine %s: %" PRIu64 " bytes differ from what was stored\n",
				name, bad);
			failed = 1;
		}
		if (expect >= 0 && hits != expect) {
			fprintf(stderr, "kvt-engine %s: expected %ld leading hits, got %d\n", name,
				expect, hits);
			failed = 1;
		}
		if (stored < 0)
			failed = 1;
		free(states);
		free(st);
		free(pages);
	}
	engine_free(&e);
	return failed;
}
