/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fragmentation on purpose: one tenant with two block sizes (32 KiB and
 * 96 KiB) in a pool of four 2 MiB extents.  First the 32 KiB namespace
 * fills the pool and evicts its own blocks: full, not fragmented, no
 * warning.  Then 240 of its 256 blocks are deleted and the 96 KiB
 * namespace stores: the free 32 KiB slots are of no use to it and no
 * extent is left, so its stores are refused.  The daemon must report the
 * fill (16 of 256 slots), the stranded bytes and the starved allocations
 * in STATS, kvtierctl status, --json and metrics, log one warning, and
 * take a new alert level from a reload at once.
 */
#include <ctype.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine-request.h"
#include "harness.h"

#define KiB (UINT64_C(1) << 10)
#define WARNING "host memory fragmented"

static struct daemon d;

struct class_query {
	uint64_t slot_bytes; /* 0: the tenant record */
	const char *field;
	uint64_t value;
	int found;
};

static int class_cb(const kvt_record *r, void *userdata)
{
	struct class_query *q = userdata;
	uint64_t slot = 0;
	const char *kind = kvt_record_kind(r);

	if (q->slot_bytes ? strcmp(kind, "class") ||
				    kvt_record_get_u64(r, "slot_bytes", &slot) < 0 ||
				    slot != q->slot_bytes
			  : strcmp(kind, "tenant"))
		return 0;
	if (kvt_record_get_u64(r, q->field, &q->value) == 0)
		q->found++;
	return 0;
}

/* A field of the tenant's record (slot_bytes 0) or of its class of that
 * slot size; fails the test unless exactly one record has it. */
static uint64_t frag_stat(kvt_client *c, uint64_t slot_bytes, const char *field)
{
	struct class_query q = {slot_bytes, field, 0, 0};
	CHECK(kvt_stats(c, KVT_STATS_ALL, class_cb, &q) == 0 && q.found == 1,
	      "%s of class %" PRIu64 ": %d records", field, slot_bytes, q.found);
	return q.value;
}

/* kvtierctl's output for these arguments (joined by spaces), malloc'd. */
static char *ctl(const char *args)
{
	const char *p = getenv("KVTIERCTL");
	char cmd[512];
	size_t len = 0, cap = 1 << 16;
	char *out = malloc(cap);

	CHECK(out, "out of memory");
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' %s", p && *p ? p : "kvtierctl", d.socket,
		 args);
	FILE *f = popen(cmd, "r");
	CHECK(f, "popen %s", cmd);
	for (size_t n; (n = fread(out + len, 1, cap - 1 - len, f)) > 0;)
		if ((len += n) == cap - 1)
			CHECK((out = realloc(out, cap *= 2)), "out of memory");
	out[len] = 0;
	CHECK(pclose(f) == 0, "%s failed:\n%s", cmd, out);
	return out;
}

/* The number after the nth (from 0) "key": in JSON text; -1 if none. */
static double json_num(const char *text, const char *key, int nth)
{
	char pat[80];
	const char *p = text;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	for (int i = 0; i <= nth; i++) {
		p = strstr(p, pat);
		if (!p)
			return -1;
		p += strlen(pat);
	}
	return isdigit((unsigned char)*p) ? strtod(p, NULL) : -1;
}

static void key_of(uint8_t *key, uint32_t ns_tag, uint32_t i)
{
	memset(key, 0, KVT_KEY_BYTES);
	memcpy(key, &i, sizeof(i));
	memcpy(key + 4, &ns_tag, sizeof(ns_tag));
	key[31] = 0x5a;
}

/* Store blocks [from, from + n) of a namespace, one at a time so that
 * each eviction is the store's own; \return how many were stored. */
static int store(kvt_ns *ns, uint32_t tag, uint64_t bytes, uint32_t from, uint32_t n)
{
	uint8_t *buf = malloc(bytes);
	int stored = 0;

	CHECK(buf, "out of memory");
	for (uint32_t i = from; i < from + n; i++) {
		uint8_t key[KVT_KEY_BYTES];
		const void *src = buf;
		int32_t st;
		key_of(key, tag, i);
		block_pattern(buf, bytes, tag, key);
		int r = kvt_store(ns, 0, key, 1, &src, &st);
		CHECK(r >= 0, "store: %s", strerror(-r));
		stored += r;
	}
	free(buf);
	return stored;
}

static kvt_ns *open_ns(kvt_client *c, uint32_t block_tokens)
{
	const struct engine_model *m = engine_model_find("tiny");
	kvt_layer_group g;
	kvt_ns_desc desc;
	kvt_ns *ns = NULL;

	engine_ns_desc(m, 1, NULL, &g, &desc);
	desc.block_tokens = block_tokens;
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "ns open: %s %s", strerror(-r), kvt_client_error(c));
	return ns;
}

#define S (32 * KiB) /* tiny: 2 KiB a token, 16 tokens a block */
#define L (96 * KiB) /* 48 tokens a block */

/* Full and evicting its own blocks, the other block size holding
 * nothing: no memory is free anywhere, so none is stranded. */
static void check_full(kvt_client *c, kvt_ns *small)
{
	CHECK(store(small, 1, S, 0, 320) == 320, "every small block stored");
	CHECK(stat_get(c, "namespace", "evictions") == 64, "64 evictions");
	CHECK(frag_stat(c, S, "extents") == 4 && frag_stat(c, S, "free_slots") == 0,
	      "four full extents");
	CHECK(frag_stat(c, S, "fill_ppm") == 1000000, "small blocks fill their extents");
	CHECK(frag_stat(c, 0, "fill_ppm") == 1000000 && frag_stat(c, 0, "stranded_bytes") == 0 &&
	      frag_stat(c, 0, "starved") == 0 && frag_stat(c, 0, "fragmented") == 0,
	      "a full pool is not fragmented");
	CHECK(frag_stat(c, L, "extents") == 0 && frag_stat(c, L, "can_grow") == 0,
	      "no room for a large extent");
	CHECK(stat_get(c, "daemon", "fragmentation_warnings") == 0 && !daemon_log_contains(&d, WARNING),
	      "an unfragmented pool does not warn");
	char *json = ctl("--json status");
	CHECK(json_num(json, "fill", 0) == 1 && json_num(json, "fragmented", 0) == 0 &&
	      json_num(json, "fragmentation_alert", 0) == 0.3, "status --json, unfragmented:\n%s", json);
	free(json);
}

/* Keep every 16th of the blocks still there (64..319): 16 blocks, four in
 * each extent, so no extent is empty either; then the large stores. */
static void fragment(kvt_client *c, kvt_ns *small, kvt_ns *large)
{
	for (uint32_t i = 64; i < 320; i++) {
		uint8_t key[KVT_KEY_BYTES];
		key_of(key, 1, i);
		if (i % 16 && kvt_delete(small, key, 1) != 1)
			CHECK(0, "delete block %u", i);
	}
	CHECK(store(large, 2, L, 0, 8) == 0, "no large block finds room");

	/* 16 × 32 KiB of 8 MiB; 240 free small slots stranded. */
	CHECK(frag_stat(c, S, "free_slots") == 240 && frag_stat(c, S, "data_bytes") == 16 * S,
	      "240 free small slots");
	CHECK(frag_stat(c, S, "fill_ppm") == 62500, "small fill 1/16");
	CHECK(frag_stat(c, S, "empty_extents") == 0, "no empty extent");
	CHECK(frag_stat(c, L, "starved") == 8 && frag_stat(c, S, "starved") == 0,
	      "the eight large stores starved");
	CHECK(frag_stat(c, 0, "fill_ppm") == 62500, "tenant fill 1/16");
	CHECK(frag_stat(c, 0, "stranded_bytes") == 240 * S, "7.5 MiB stranded");
	CHECK(frag_stat(c, 0, "fragmented") == 1, "the tenant is fragmented");
	CHECK(stat_get(c, "daemon", "fragmented_tenants") == 1, "one tenant fragmented");
	/* Eight starved stores, one warning: the rest are within the minute. */
	CHECK(stat_get(c, "daemon", "fragmentation_warnings") == 1, "one warning");
	CHECK(daemon_log_contains(&d, WARNING) && daemon_log_contains(&d, "[pool] extent_size"),
	      "the warning is logged and says what to do");
}

/* The same figures through kvtierctl: --json, the tables, Prometheus. */
static void check_ctl(void)
{
	char *json = ctl("--json status");
	CHECK(json_num(json, "fill", 0) == 0.0625 && json_num(json, "stranded_bytes", 0) == 240 * S &&
	      json_num(json, "fragmented", 0) == 1 && json_num(json, "fragmented_tenants", 0) == 1,
	      "status --json, fragmented:\n%s", json);
	/* The classes after the tenants and namespaces: small, then large. */
	const char *classes = strstr(json, "\"classes\": [");
	CHECK(classes && json_num(classes, "fill", 0) == 0.0625 && json_num(classes, "fill", 1) == 1 &&
	      json_num(classes, "slot_bytes", 1) == L && json_num(classes, "starved", 1) == 8,
	      "status --json classes:\n%s", classes ? classes : json);
	free(json);
	char *text = ctl("status");
	fputs(text, stderr);
	CHECK(strstr(text, "Block sizes:") && strstr(text, "6.2%") && strstr(text, "is fragmented") &&
	      strstr(text, "7.5 MiB"), "kvtierctl status:\n%s", text);
	free(text);
	char *prom = ctl("metrics");
	CHECK(strstr(prom, "kvtier_tenant_fill_ratio{tenant=") && strstr(prom, "} 0.062500\n") &&
	      strstr(prom, "kvtier_class_fill_ratio{tenant=") &&
	      strstr(prom, ",slot_bytes=\"98304\"} 1.000000\n") &&
	      strstr(prom, "# TYPE kvtier_class_starved_allocations_total counter") &&
	      strstr(prom, "kvtier_fragmentation_alert_ratio 0.300000\n") &&
	      strstr(prom, "kvtier_fragmented_tenants 1\n"), "kvtierctl metrics:\n%s", prom);
	free(prom);
}

int main(void)
{
	/* 8 MiB: four 2 MiB extents, 64 slots of 32 KiB each. */
	daemon_start(&d, "[pool]\ncapacity = 8M\nextent_size = 2M\nfragmentation_alert = 0.3\n");
	kvt_client *c = client_connect(&d, "fragmenter");
	kvt_ns *small = open_ns(c, 16);
	kvt_ns *large = open_ns(c, 48);

	check_full(c, small);
	fragment(c, small, large);
	check_ctl();

	/* A lower level, live: the same pool is no longer below it. */
	daemon_rewrite_config(&d, "[pool]\ncapacity = 8M\nextent_size = 2M\nfragmentation_alert = 5%\n");
	kill(d.pid, SIGHUP);
	WAIT_FOR(stat_get(c, "daemon", "fragmentation_alert_ppm") == 50000, "the reload");
	CHECK(frag_stat(c, 0, "fragmented") == 0 && stat_get(c, "daemon", "fragmented_tenants") == 0,
	      "1/16 is above 5%%");
	CHECK(frag_stat(c, 0, "stranded_bytes") == 240 * S, "still stranded");

	kvt_ns_close(small);
	kvt_ns_close(large);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
