/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-codec: a namespace's codec on the CPU copy path, end to end,
 * against limits measured in the same run.
 *
 * A bfloat16 paged cache of Llama-3-8B's shape (32 layers, 8 KV heads of
 * 128, 16-token pages, so 2 MiB a block) goes through its own kvtierd with
 * kvt_store_paged and comes back into a second cache with kvt_load_paged,
 * in namespaces of codec none, fp8-e4m3 and int4; the limit is memcpy of
 * the same bfloat16 bytes twice (cache to a middle buffer, back into the
 * other cache).  To tell the codec's work from the rest, the same copies
 * run without the daemon too: kvt_layout_gather into private block
 * buffers, kvt_layout_scatter back out ("copy alone").  Beside each copy
 * alone, the memory traffic it makes, with nothing else done: each
 * (layer, plane) region of a block's pages read whole and its coded bytes
 * written (memcpy of as many bytes as the codec writes, and a read loop
 * over the rest), then the coded bytes read and the region written
 * whole (memcpy, and memset of the rest): what the copy would cost were
 * it bound by memory alone.  The four contenders alternate round by round, and every
 * figure is per logical (bfloat16) byte, so that a codec is compared on
 * the work an engine asks of it.  Every round is checked outside the
 * timed region: byte for byte for memcpy and none, a sample of values
 * against the codec's bound for the others.  What it reports is the median
 * of the pairwise ratios and their range, and the medians of the absolute
 * figures for context: a measurement, not a test.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../codec-bound.h"
#include "bench-util.h"
#include "codec.h"
#include "kvt-proto.h"
#include "kvtier.h"

#define MIB (1024ull * 1024ull)
#define LAYERS 32
#define HEADS 8
#define D 128 /* elements a head */
#define BT 16
#define BLOCK ((uint64_t)LAYERS * 2 * BT * HEADS * D * 2) /* logical bytes */
#define SAMPLES 512 /* values checked per round of a codec */
#define START_LIMIT_NS 10000000000ull

enum { C_MEMCPY, C_NONE, C_FP8, C_INT4, N_CONTENDERS };

static const char *const names[N_CONTENDERS] = {"memcpy", "none", "fp8-e4m3", "int4"};
static const char *const keys_json[N_CONTENDERS] = {"memcpy", "none", "fp8", "int4"};
/* The codec of each contender's copy alone (memcpy has none). */
static const uint32_t codecs[N_CONTENDERS] = {0, KVT_CODEC_NONE, KVT_CODEC_FP8_E4M3,
					      KVT_CODEC_INT4};

static struct {
	unsigned pairs;
	unsigned rounds;
	uint64_t bytes; /* logical bytes a round: the cache */
	bool json;
} opt = {.pairs = 7, .rounds = 1, .bytes = 256 * MIB};

const char bench_name[] = "bench-codec";

static struct bench_daemon daemon_state;

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	bench_vsay(fmt, ap);
	va_end(ap);
	bench_daemon_abort(&daemon_state);
	exit(1);
}

static void on_signal(int sig)
{
	bench_daemon_kill(&daemon_state);
	bench_daemon_unlink(&daemon_state);
	_exit(128 + sig);
}

/* One cache: per layer (2, pages, BT, HEADS, D), FlashAttention's NHD. */
struct cache {
	uint8_t *mem;
	void *base[LAYERS];
	kvt_layout lay;
};

static void cache_init(struct cache *c, uint64_t pages)
{
	uint64_t layer = BLOCK / LAYERS * pages;

	c->mem = alloc_populated(layer * LAYERS);
	for (int l = 0; l < LAYERS; l++)
		c->base[l] = c->mem + l * layer;
	c->lay = (kvt_layout){.n_layers = LAYERS, .planes = 2, .heads = HEADS, .head_bytes = D * 2,
			      .page_tokens = BT, .index_kind = KVT_INDEX_PAGE, .layer_base = c->base,
			      .stride_plane = (int64_t)(pages * BT * HEADS * D * 2),
			      .stride_page = BT * HEADS * D * 2, .stride_token = HEADS * D * 2,
			      .stride_head = D * 2, .n_pages = pages};
}

/* Values as a model's K and V might hold them: each (layer, plane, head)
 * its own magnitude (2^-4 .. 2^3), a few channels larger still. */
static void cache_fill(struct cache *c, uint64_t pages)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (int l = 0; l < LAYERS; l++)
		for (uint64_t p = 0; p < 2; p++)
			for (uint64_t g = 0; g < pages; g++)
				for (uint64_t t = 0; t < BT; t++)
					for (uint64_t h = 0; h < HEADS; h++) {
						uint8_t *e = (uint8_t *)c->base[l] +
							     p * (uint64_t)c->lay.stride_plane +
							     g * BT * HEADS * D * 2 + (t * HEADS + h) * D * 2;
						float mag = ldexpf(1.0f, (int)((l + p * 3 + h) % 8) - 4);

						for (int i = 0; i < D; i++) {
							uint16_t u = codec_test_bf16(&x, mag, (unsigned)i);
							memcpy(e + 2 * i, &u, 2);
						}
					}
}

struct bench {
	struct cache src, dst;
	uint8_t *mid; /* memcpy's middle buffer; the blocks of a copy alone */
	uint64_t n;   /* blocks a round */
	int64_t *pages;
	uint8_t *keys;
	int32_t *status;
	kvt_ns *ns[N_CONTENDERS];
	uint64_t slot[N_CONTENDERS]; /* bytes a block takes in the pool */
	uint64_t key_counter;
};

static kvt_ns *open_ns(kvt_client *c, uint32_t codec, uint64_t *ret_slot)
{
	static const uint8_t weights[16] = "bench-weights";
	const kvt_layer_group g = {.n_layers = LAYERS, .attn = KVT_ATTN_MHA, .planes = 2,
				   .kv_heads = HEADS, .head_bytes = D * 2,
				   .dtype = KVT_DTYPE_BFLOAT16};
	const kvt_ns_desc desc = {.model = "bench-codec-llama3-8b", .weights = weights,
				  .weights_len = sizeof(weights), .layer_end = LAYERS, .tp_size = 1,
				  .cp_size = 1, .block_tokens = BT, .n_groups = 1, .groups = &g,
				  .codec = codec};
	kvt_ns_info info;
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);

	if (r < 0)
		die("kvt_ns_open %s: %s (%s)", kvt_codec_name(codec), strerror(-r),
		    kvt_client_error(c));
	kvt_ns_get_info(ns, &info);
	*ret_slot = info.shard_bytes;
	return ns;
}

/* The sample's values within the codec's bound (tests/unit/test-codec.c),
 * loosened to the tile's range: |x - x'| <= amax/16 + 2^-8 |x| for fp8,
 * (max - min)/15 + 2^-8 |x| for int4 (half a step, and half's rounding). */
static void verify_sample(const struct bench *b, int who, uint64_t round, uint64_t blocks,
			  uint64_t layers)
{
	uint64_t x = round * 0x2545f4914f6cdd1dull + 1;

	for (int s = 0; s < SAMPLES; s++) {
		uint64_t g, t, h, i, l, p;
		float amax = 0, lo = INFINITY, hi = -INFINITY, v, got, tol;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		g = (x >> 33) % blocks;
		l = (x >> 20) % layers;
		p = (x >> 10) % 2;
		h = (x >> 5) % HEADS;
		t = (x >> 1) % BT;
		i = (x >> 40) % D;
#define AT(c, tt, ii)                                                                      \
	((uint8_t *)(c).base[l] + p * (uint64_t)(c).lay.stride_plane + g * BT * HEADS * D * 2 + \
	 ((tt) * HEADS + h) * D * 2 + (ii) * 2)
		for (uint64_t tt = 0; tt < BT; tt++)
			for (uint64_t ii = 0; ii < D; ii++) {
				float e = codec_test_bf16_at(AT(b->src, tt, ii));

				amax = fmaxf(amax, fabsf(e));
				lo = fminf(lo, e);
				hi = fmaxf(hi, e);
			}
		v = codec_test_bf16_at(AT(b->src, t, i));
		got = codec_test_bf16_at(AT(b->dst, t, i));
#undef AT
		tol = (who == C_FP8 ? amax / 16 : (hi - lo) / 15) + ldexpf(fabsf(v), -8);
		if (!(fabsf(got - v) <= tol))
			die("%s, round %llu: block %llu (%llu, %llu, %llu, %llu, %llu) came back as %g, stored %g",
			    names[who], (unsigned long long)round, (unsigned long long)g,
			    (unsigned long long)l, (unsigned long long)p, (unsigned long long)t,
			    (unsigned long long)h, (unsigned long long)i, got, v);
	}
}

/* This thread's CPU time: what a copy alone costs whatever else the
 * machine runs (a wall clock counts the time other processes take the
 * core too). */
static uint64_t cpu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One round of a contender; ret_ns[0] store, ret_ns[1] load. */
static void run_round(struct bench *b, int who, uint64_t *ret_ns)
{
	static uint64_t round;
	uint64_t t0, t1, t2;
	int r;

	round++;
	/* Outside the timed region: a poisoned destination, fresh keys. */
	memset(b->dst.mem, 0xa5, opt.bytes);
	make_keys(b->keys, b->n, (b->key_counter + 1) * 4);
	b->key_counter += b->n;

	t0 = kvt_now_ns();
	if (who == C_MEMCPY) {
		memcpy(b->mid, b->src.mem, opt.bytes);
		t1 = kvt_now_ns();
		memcpy(b->dst.mem, b->mid, opt.bytes);
		t2 = kvt_now_ns();
	} else {
		r = kvt_store_paged(b->ns[who], 0, &b->src.lay, b->keys, b->n, b->pages, b->status);
		t1 = kvt_now_ns();
		if (r != (int)b->n)
			die("%s: kvt_store_paged of %llu blocks stored %d (%s)", names[who],
			    (unsigned long long)b->n, r, strerror(r < 0 ? -r : 0));
		for (uint64_t i = 0; i < b->n; i++)
			if (b->status[i] != 0)
				die("%s: kvt_store_paged: block %llu status %d", names[who],
				    (unsigned long long)i, b->status[i]);
		r = kvt_load_paged(b->ns[who], 0, &b->dst.lay, b->keys, b->n, b->pages, b->status);
		t2 = kvt_now_ns();
		if (r != (int)b->n)
			die("%s: kvt_load_paged of %llu blocks loaded %d", names[who],
			    (unsigned long long)b->n, r);
		/* Free the slots: the next round's stores are real ones into
		 * memory already mapped. */
		if (kvt_delete(b->ns[who], b->keys, b->n) != (int)b->n)
			die("%s: kvt_delete", names[who]);
	}

	if (who == C_MEMCPY || who == C_NONE) {
		if (memcmp(b->src.mem, b->dst.mem, opt.bytes))
			die("%s, round %llu: the cache came back with different bytes", names[who],
			    (unsigned long long)round);
	} else {
		verify_sample(b, who, round, b->n, LAYERS);
	}
	ret_ns[0] += t1 - t0;
	ret_ns[1] += t2 - t1;
}

/* The copy path alone: gather into blocks in b->mid, scatter them out. */
static void alone_round(struct bench *b, int who, uint64_t *ret_ns, uint64_t *ret_cpu)
{
	kvt_layout lay = b->src.lay, back = b->dst.lay;
	uint64_t t0, t1, t2, c0, c1, c2;
	void **blocks = calloc(b->n, sizeof(*blocks));

	if (!blocks)
		die("out of memory");
	lay.codec = back.codec = codecs[who];
	lay.dtype = back.dtype = KVT_DTYPE_BFLOAT16;
	for (uint64_t i = 0; i < b->n; i++)
		blocks[i] = b->mid + i * b->slot[who];
	memset(b->dst.mem, 0xa5, opt.bytes);

	c0 = cpu_now_ns();
	t0 = kvt_now_ns();
	if (kvt_layout_gather(&lay, BT, b->pages, b->n, blocks) < 0)
		die("%s: kvt_layout_gather", names[who]);
	t1 = kvt_now_ns();
	c1 = cpu_now_ns();
	if (kvt_layout_scatter(&back, BT, b->pages, b->n, (const void *const *)blocks) < 0)
		die("%s: kvt_layout_scatter", names[who]);
	t2 = kvt_now_ns();
	c2 = cpu_now_ns();
	free(blocks);

	if (who == C_NONE) {
		if (memcmp(b->src.mem, b->dst.mem, opt.bytes))
			die("%s alone: the cache came back with different bytes", names[who]);
	} else {
		verify_sample(b, who, 0, b->n, LAYERS);
	}
	ret_ns[0] += t1 - t0;
	ret_ns[1] += t2 - t1;
	ret_cpu[0] += c1 - c0;
	ret_cpu[1] += c2 - c1;
}

/* The bytes of a block's (layer, plane) region of the cache: its pages. */
#define REGION ((uint64_t)BT * HEADS * D * 2)

/* Layers of the block that cached_round() copies over and over. */
#define CACHED_LAYERS 2

/*
 * The copy alone of one block of CACHED_LAYERS layers, again and again
 * until a round's logical bytes have gone each way: its pages (128 KiB),
 * its coded block and the destination's pages stay in the core's L2
 * cache, so that what it costs is the codec's arithmetic and the copy's
 * own steps, not the memory's.  Checked like a copy alone, on those
 * layers of block 0.
 */
static void cached_round(struct bench *b, int who, uint64_t *ret_cpu)
{
	uint64_t reps = opt.bytes / (BLOCK / LAYERS * CACHED_LAYERS), c0, c1, c2;
	kvt_layout lay = b->src.lay, back = b->dst.lay;
	const int64_t page = 0;
	void *block = b->mid;

	lay.codec = back.codec = codecs[who];
	lay.dtype = back.dtype = KVT_DTYPE_BFLOAT16;
	lay.n_layers = back.n_layers = CACHED_LAYERS;
	memset(b->dst.mem, 0xa5, opt.bytes);
	c0 = cpu_now_ns();
	for (uint64_t r = 0; r < reps; r++)
		if (kvt_layout_gather(&lay, BT, &page, 1, &block) < 0)
			die("%s: kvt_layout_gather in cache", names[who]);
	c1 = cpu_now_ns();
	for (uint64_t r = 0; r < reps; r++)
		if (kvt_layout_scatter(&back, BT, &page, 1, (const void *const *)&block) < 0)
			die("%s: kvt_layout_scatter in cache", names[who]);
	c2 = cpu_now_ns();

	if (who == C_NONE) {
		for (int l = 0; l < CACHED_LAYERS; l++)
			for (uint64_t p = 0; p < 2; p++) {
				uint64_t off = p * (uint64_t)b->src.lay.stride_plane;

				if (memcmp((uint8_t *)b->src.base[l] + off,
					   (uint8_t *)b->dst.base[l] + off, REGION))
					die("%s in cache: the block came back with different bytes",
					    names[who]);
			}
	} else {
		verify_sample(b, who, 0, 1, CACHED_LAYERS);
	}
	ret_cpu[0] += c1 - c0;
	ret_cpu[1] += c2 - c1;
}


/* A sink for the read loop, so that the compiler keeps it. */
static volatile uint64_t traffic_sink;

/* Reads n bytes (a multiple of 8) as 64-bit words. */
static uint64_t read_words(const uint8_t *p, uint64_t n)
{
	uint64_t acc = 0, w;

	for (uint64_t i = 0; i < n; i += 8) {
		memcpy(&w, p + i, 8);
		acc ^= w;
	}
	return acc;
}

/*
 * The memory traffic of a copy alone of codec who, region by region in
 * the copy's order: store reads REGION bytes of the cache and writes
 * the codec's share of a block, load reads that share and writes REGION
 * bytes.  The destination cache is not checked: its bytes are not the
 * values.
 */
static void traffic_round(struct bench *b, int who, uint64_t *ret_ns, uint64_t *ret_cpu)
{
	uint64_t coded = b->slot[who] / (LAYERS * 2), t0, t1, t2, c0, c1, c2, acc = 0;

	memset(b->dst.mem, 0xa5, opt.bytes);
	c0 = cpu_now_ns();
	t0 = kvt_now_ns();
	for (uint64_t g = 0; g < b->n; g++)
		for (int l = 0; l < LAYERS; l++)
			for (uint64_t p = 0; p < 2; p++) {
				const uint8_t *src = (const uint8_t *)b->src.base[l] +
						     p * (uint64_t)b->src.lay.stride_plane +
						     g * REGION;
				uint8_t *slot = b->mid + g * b->slot[who] + (l * 2 + p) * coded;

				memcpy(slot, src, coded);
				acc ^= read_words(src + coded, REGION - coded);
			}
	t1 = kvt_now_ns();
	c1 = cpu_now_ns();
	for (uint64_t g = 0; g < b->n; g++)
		for (int l = 0; l < LAYERS; l++)
			for (uint64_t p = 0; p < 2; p++) {
				uint8_t *dst = (uint8_t *)b->dst.base[l] +
					       p * (uint64_t)b->dst.lay.stride_plane + g * REGION;
				const uint8_t *slot = b->mid + g * b->slot[who] + (l * 2 + p) * coded;

				memcpy(dst, slot, coded);
				memset(dst + coded, 0, REGION - coded);
			}
	t2 = kvt_now_ns();
	c2 = cpu_now_ns();
	traffic_sink = acc;
	ret_ns[0] += t1 - t0;
	ret_ns[1] += t2 - t1;
	ret_cpu[0] += c1 - c0;
	ret_cpu[1] += c2 - c1;
}

static struct {
	double alone_store[N_CONTENDERS][BENCH_MAX_PAIRS], alone_load[N_CONTENDERS][BENCH_MAX_PAIRS];
	double alone_vs_none[N_CONTENDERS][BENCH_MAX_PAIRS];
	double traffic_store[N_CONTENDERS][BENCH_MAX_PAIRS];
	double traffic_load[N_CONTENDERS][BENCH_MAX_PAIRS];
	double traffic_both[N_CONTENDERS][BENCH_MAX_PAIRS];
	double alone_vs_traffic[N_CONTENDERS][BENCH_MAX_PAIRS];
	/* The same, on the copying thread's CPU time. */
	double cpu_alone[N_CONTENDERS][BENCH_MAX_PAIRS], cpu_traffic[N_CONTENDERS][BENCH_MAX_PAIRS];
	double cpu_vs_none[N_CONTENDERS][BENCH_MAX_PAIRS];
	double cpu_vs_traffic[N_CONTENDERS][BENCH_MAX_PAIRS];
	/* The copy alone in cache, on CPU time; against none's copy alone
	 * from memory (the most a codec could reach on one core were its
	 * memory traffic free), and the copy alone from memory against it. */
	double cached_store[N_CONTENDERS][BENCH_MAX_PAIRS], cached_load[N_CONTENDERS][BENCH_MAX_PAIRS];
	double cached_both[N_CONTENDERS][BENCH_MAX_PAIRS];
	double cached_vs_none[N_CONTENDERS][BENCH_MAX_PAIRS];
	double cpu_vs_cached[N_CONTENDERS][BENCH_MAX_PAIRS];
	double store[N_CONTENDERS][BENCH_MAX_PAIRS], load[N_CONTENDERS][BENCH_MAX_PAIRS];
	double both[N_CONTENDERS][BENCH_MAX_PAIRS];
	double vs_memcpy[N_CONTENDERS][BENCH_MAX_PAIRS], vs_none[N_CONTENDERS][BENCH_MAX_PAIRS];
	uint64_t slot[N_CONTENDERS];
	uint64_t n;
} R;

static void print_table(FILE *out)
{
	char a[64], b[64];

	fprintf(out, "bench-codec: %d layers x %d KV heads x %d bfloat16, %d-token blocks (%llu MiB); "
		     "%llu blocks (%llu MiB) a round, %u pair(s) x %u round(s)\n",
		LAYERS, HEADS, D, BT, (unsigned long long)(BLOCK / MIB), (unsigned long long)R.n,
		(unsigned long long)(opt.bytes / MIB), opt.pairs, opt.rounds);
	fprintf(out, "GB/s of logical (bfloat16) bytes; ratios: median [min..max] of the pairs'\n");
	fprintf(out, "%-9s %10s %7s %7s %7s  %-24s %s\n", "codec", "slot", "store", "load",
		"both", "store+load vs memcpy", "vs none (>1: faster)");
	for (int k = 0; k < N_CONTENDERS; k++) {
		fprintf(out, "%-9s %10llu %7.2f %7.2f %7.2f  %-24s %s\n", names[k],
			(unsigned long long)R.slot[k], median(R.store[k], opt.pairs),
			median(R.load[k], opt.pairs), median(R.both[k], opt.pairs),
			k == C_MEMCPY ? "" : ratio_range(R.vs_memcpy[k], opt.pairs, a, sizeof(a)),
			k < C_FP8 ? "" : ratio_range(R.vs_none[k], opt.pairs, b, sizeof(b)));
	}
	fprintf(out, "copy alone (kvt_layout_gather into private blocks, kvt_layout_scatter back):\n");
	for (int k = C_NONE; k < N_CONTENDERS; k++)
		fprintf(out, "%-9s %10s %7.2f %7.2f %7s  %-24s %s\n", names[k], "",
			median(R.alone_store[k], opt.pairs), median(R.alone_load[k], opt.pairs), "",
			"", k < C_FP8 ? "" : ratio_range(R.alone_vs_none[k], opt.pairs, b, sizeof(b)));
	fprintf(out, "memory traffic of the copy alone (its bytes read and written, nothing else), "
		     "and the copy alone against it:\n");
	fprintf(out, "%-9s %10s %7s %7s %7s  %s\n", "codec", "", "store", "load", "both",
		"copy alone vs traffic");
	for (int k = C_NONE; k < N_CONTENDERS; k++)
		fprintf(out, "%-9s %10s %7.2f %7.2f %7.2f  %s\n", names[k], "",
			median(R.traffic_store[k], opt.pairs), median(R.traffic_load[k], opt.pairs),
			median(R.traffic_both[k], opt.pairs),
			ratio_range(R.alone_vs_traffic[k], opt.pairs, a, sizeof(a)));
	fprintf(out, "the same on the copying thread's CPU time (store+load GB/s, copy alone and traffic):\n");
	fprintf(out, "%-9s %10s %7s %7s %7s  %-24s %s\n", "codec", "", "copy", "traffic", "",
		"copy vs traffic", "copy vs none's copy");
	for (int k = C_NONE; k < N_CONTENDERS; k++)
		fprintf(out, "%-9s %10s %7.2f %7.2f %7s  %-24s %s\n", names[k], "",
			median(R.cpu_alone[k], opt.pairs), median(R.cpu_traffic[k], opt.pairs), "",
			ratio_range(R.cpu_vs_traffic[k], opt.pairs, a, sizeof(a)),
			k < C_FP8 ? "" : ratio_range(R.cpu_vs_none[k], opt.pairs, b, sizeof(b)));
	fprintf(out, "the copy alone with its data in the core's cache (one block of %d layers, "
		     "again and again; CPU time): the codec's arithmetic and the copy's own steps, "
		     "and that against none's copy alone from memory (the most the codec could "
		     "reach on one core were memory free):\n", CACHED_LAYERS);
	fprintf(out, "%-9s %10s %7s %7s %7s  %-24s %s\n", "codec", "", "store", "load", "both",
		"in cache vs none's copy", "copy vs in cache");
	for (int k = C_NONE; k < N_CONTENDERS; k++)
		fprintf(out, "%-9s %10s %7.2f %7.2f %7.2f  %-24s %s\n", names[k], "",
			median(R.cached_store[k], opt.pairs), median(R.cached_load[k], opt.pairs),
			median(R.cached_both[k], opt.pairs),
			ratio_range(R.cached_vs_none[k], opt.pairs, a, sizeof(a)),
			ratio_range(R.cpu_vs_cached[k], opt.pairs, b, sizeof(b)));
}

static void print_json(void)
{
	printf("{\"bench\":\"bench-codec\",\"pairs\":%u,\"mib\":%llu", opt.pairs,
	       (unsigned long long)(opt.bytes / MIB));
	for (int k = 0; k < N_CONTENDERS; k++) {
		printf(",\"%s\":{\"slot\":%llu,\"store_gbs\":%.3f,\"load_gbs\":%.3f,\"gbs\":%.3f",
		       keys_json[k], (unsigned long long)R.slot[k], median(R.store[k], opt.pairs),
		       median(R.load[k], opt.pairs), median(R.both[k], opt.pairs));
		if (k != C_MEMCPY)
			printf(",\"vs_memcpy\":%.4f", median(R.vs_memcpy[k], opt.pairs));
		if (k >= C_FP8)
			printf(",\"vs_none\":%.4f", median(R.vs_none[k], opt.pairs));
		if (k >= C_NONE)
			printf(",\"alone_store_gbs\":%.3f,\"alone_load_gbs\":%.3f"
			       ",\"traffic_gbs\":%.3f,\"alone_vs_traffic\":%.4f"
			       ",\"cpu_alone_gbs\":%.3f,\"cpu_traffic_gbs\":%.3f"
			       ",\"cpu_vs_traffic\":%.4f,\"cpu_vs_none\":%.4f"
			       ",\"cached_gbs\":%.3f,\"cached_vs_none\":%.4f,\"cpu_vs_cached\":%.4f",
			       median(R.alone_store[k], opt.pairs), median(R.alone_load[k], opt.pairs),
			       median(R.traffic_both[k], opt.pairs),
			       median(R.alone_vs_traffic[k], opt.pairs), median(R.cpu_alone[k], opt.pairs),
			       median(R.cpu_traffic[k], opt.pairs), median(R.cpu_vs_traffic[k], opt.pairs),
			       median(R.cpu_vs_none[k], opt.pairs), median(R.cached_both[k], opt.pairs),
			       median(R.cached_vs_none[k], opt.pairs),
			       median(R.cpu_vs_cached[k], opt.pairs));
		printf("}");
	}
	printf("}\n");
}

static void help(void)
{
	printf("Usage: bench-codec [OPTIONS] [KVTIERD]\n"
	       "\n"
	       "Store+load of a bfloat16 paged cache (Llama-3-8B's shape) through a\n"
	       "kvtierd it starts itself, in namespaces of codec none, fp8-e4m3 and\n"
	       "int4, against memcpy of the same bytes; contenders alternate round\n"
	       "by round, the medians of the pairwise ratios are reported.\n"
	       "\n"
	       "Options:\n"
	       "  -p, --pairs N    pairs of samples (default %u)\n"
	       "  -m, --mib N      MiB of bfloat16 cache a round, even (default %llu)\n"
	       "  -r, --rounds N   rounds of each contender per pair (default %u)\n"
	       "  -j, --json       one JSON line on stdout (the table goes to stderr)\n"
	       "  -h, --help       show this help\n",
	       opt.pairs, (unsigned long long)(opt.bytes / MIB), opt.rounds);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pairs", required_argument, NULL, 'p'}, {"mib", required_argument, NULL, 'm'},
		{"rounds", required_argument, NULL, 'r'}, {"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},         {},
	};
	struct bench b = {0};
	kvt_client *c;
	int ch;

	while ((ch = getopt_long(argc, argv, "p:m:r:jh", opts, NULL)) >= 0) {
		switch (ch) {
		case 'p': opt.pairs = (unsigned)parse_u64(optarg, 1, BENCH_MAX_PAIRS, "--pairs"); break;
		case 'm': opt.bytes = parse_u64(optarg, 2, 4096, "--mib") * MIB; break;
		case 'r': opt.rounds = (unsigned)parse_u64(optarg, 1, 100, "--rounds"); break;
		case 'j': opt.json = true; break;
		case 'h': help(); return 0;
		default: return bench_try_help();
		}
	}
	if (opt.bytes % BLOCK) {
		fprintf(stderr, "bench-codec: --mib must be a multiple of %llu\n",
			(unsigned long long)(BLOCK / MIB));
		return 2;
	}
	daemon_state.kvtierd = bench_kvtierd(argc, argv);
	bench_catch_signals(on_signal);

	/* Room for one round of the largest slots; nothing is evicted. */
	ch = bench_daemon_mkdir(&daemon_state, "/tmp", "kvt-bench-codec");
	if (ch < 0)
		die("mkdtemp: %s", strerror(-ch));
	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %lluM\nextent_size = 64M\n"
			    "[limits]\nkeys_per_request = 4096\n",
			    (unsigned long long)(opt.bytes / MIB * 2 + 256));
	bench_daemon_start(&daemon_state, START_LIMIT_NS);
	c = bench_daemon_connect(&daemon_state);

	b.n = R.n = opt.bytes / BLOCK;
	b.pages = calloc(b.n, sizeof(*b.pages));
	b.keys = calloc(b.n, KVT_KEY_BYTES);
	b.status = calloc(b.n, sizeof(*b.status));
	if (!b.pages || !b.keys || !b.status)
		die("out of memory");
	for (uint64_t i = 0; i < b.n; i++)
		b.pages[i] = (int64_t)i;
	cache_init(&b.src, b.n);
	cache_init(&b.dst, b.n);
	b.mid = alloc_populated(opt.bytes);
	cache_fill(&b.src, b.n);
	R.slot[C_MEMCPY] = BLOCK;
	b.ns[C_NONE] = open_ns(c, KVT_CODEC_NONE, &R.slot[C_NONE]);
	b.ns[C_FP8] = open_ns(c, KVT_CODEC_FP8_E4M3, &R.slot[C_FP8]);
	b.ns[C_INT4] = open_ns(c, KVT_CODEC_INT4, &R.slot[C_INT4]);
	memcpy(b.slot, R.slot, sizeof(b.slot));
	if (R.slot[C_NONE] != BLOCK)
		die("codec none: a block of %llu bytes, not %llu", (unsigned long long)R.slot[C_NONE],
		    (unsigned long long)BLOCK);

	/* Untimed: the daemon makes the extents, the library maps them. */
	for (int k = 0; k < N_CONTENDERS; k++) {
		uint64_t warm[2] = {0, 0};

		run_round(&b, k, warm);
	}
	progress("%u pair(s) x %u round(s) x %llu MiB, contenders in turn", opt.pairs, opt.rounds,
		 (unsigned long long)(opt.bytes / MIB));
	for (unsigned p = 0; p < opt.pairs; p++) {
		uint64_t ns[N_CONTENDERS][2] = {{0}};
		uint64_t logical = opt.bytes * opt.rounds;

		uint64_t alone[N_CONTENDERS][2] = {{0}};
		uint64_t traffic[N_CONTENDERS][2] = {{0}};
		uint64_t cpu[N_CONTENDERS][2] = {{0}}, cpu_traffic[N_CONTENDERS][2] = {{0}};
		uint64_t cached[N_CONTENDERS][2] = {{0}};

		for (unsigned r = 0; r < opt.rounds; r++)
			for (int k = 0; k < N_CONTENDERS; k++) {
				run_round(&b, k, ns[k]);
				if (k != C_MEMCPY) {
					alone_round(&b, k, alone[k], cpu[k]);
					traffic_round(&b, k, traffic[k], cpu_traffic[k]);
					cached_round(&b, k, cached[k]);
				}
			}
		for (int k = 0; k < N_CONTENDERS; k++) {
			R.store[k][p] = gbs(logical, ns[k][0]);
			R.load[k][p] = gbs(logical, ns[k][1]);
			R.both[k][p] = gbs(2 * logical, ns[k][0] + ns[k][1]);
			R.vs_memcpy[k][p] = R.both[k][p] / R.both[C_MEMCPY][p];
			R.vs_none[k][p] = R.both[k][p] / R.both[C_NONE][p];
			R.alone_store[k][p] = gbs(logical, alone[k][0]);
			R.alone_load[k][p] = gbs(logical, alone[k][1]);
			R.alone_vs_none[k][p] = (double)(alone[C_NONE][0] + alone[C_NONE][1]) /
						(double)(alone[k][0] + alone[k][1] + 1);
			R.traffic_store[k][p] = gbs(logical, traffic[k][0]);
			R.traffic_load[k][p] = gbs(logical, traffic[k][1]);
			R.traffic_both[k][p] = gbs(2 * logical, traffic[k][0] + traffic[k][1]);
			R.alone_vs_traffic[k][p] = (double)(traffic[k][0] + traffic[k][1]) /
						   (double)(alone[k][0] + alone[k][1] + 1);
			R.cpu_alone[k][p] = gbs(2 * logical, cpu[k][0] + cpu[k][1]);
			R.cpu_traffic[k][p] = gbs(2 * logical, cpu_traffic[k][0] + cpu_traffic[k][1]);
			R.cpu_vs_traffic[k][p] = (double)(cpu_traffic[k][0] + cpu_traffic[k][1]) /
						 (double)(cpu[k][0] + cpu[k][1] + 1);
			R.cpu_vs_none[k][p] = (double)(cpu[C_NONE][0] + cpu[C_NONE][1]) /
					      (double)(cpu[k][0] + cpu[k][1] + 1);
			R.cached_store[k][p] = gbs(logical, cached[k][0]);
			R.cached_load[k][p] = gbs(logical, cached[k][1]);
			R.cached_both[k][p] = gbs(2 * logical, cached[k][0] + cached[k][1]);
			R.cached_vs_none[k][p] = (double)(cpu[C_NONE][0] + cpu[C_NONE][1]) /
						 (double)(cached[k][0] + cached[k][1] + 1);
			R.cpu_vs_cached[k][p] = (double)(cached[k][0] + cached[k][1]) /
						(double)(cpu[k][0] + cpu[k][1] + 1);
		}
		progress("  pair %u/%u: memcpy %.2f, none %.2f, fp8 %.2f (store %.2f, load %.2f), int4 %.2f (store %.2f, load %.2f) GB/s",
			 p + 1, opt.pairs, R.both[C_MEMCPY][p], R.both[C_NONE][p], R.both[C_FP8][p],
			 R.store[C_FP8][p], R.load[C_FP8][p], R.both[C_INT4][p], R.store[C_INT4][p],
			 R.load[C_INT4][p]);
	}

	for (int k = C_NONE; k < N_CONTENDERS; k++)
		kvt_ns_close(b.ns[k]);
	kvt_client_free(c);
	bench_daemon_stop(&daemon_state);
	bench_daemon_remove(&daemon_state);
	munmap(b.src.mem, opt.bytes);
	munmap(b.dst.mem, opt.bytes);
	munmap(b.mid, opt.bytes);
	free(b.pages);
	free(b.keys);
	free(b.status);

	bench_print(opt.json, print_table, print_json);
	return 0;
}
