/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-replay against a real kvtierd, on a small kvt-trace trace:
 *
 * 1. A host tier with room for the whole trace and one engine: the GPU and
 *    host tiers together hit exactly the blocks seen before (what a tier
 *    that never evicts gets), and the bytes the engines moved are the
 *    bytes the daemon counted.
 * 2. Three engines taking requests in turn: every loaded byte right, and
 *    the counts add up.
 * 3. A small host tier in front of an NVMe tier: blocks come back from
 *    NVMe, byte-exact.
 * 4. A small host tier and the engine's lifecycle hints: ended sessions
 *    are demoted and evicted first, every hint is taken, every loaded byte
 *    right.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

struct summary {
	uint64_t requests, lookups, gpu_hits, host_hits, nvme_hits, misses, unbounded_hits;
	uint64_t load_bytes, store_bytes, daemon_load_bytes, daemon_store_bytes, evictions;
	uint64_t wrong_bytes, demotions, demoted_evictions, hint_failed;
};

static uint64_t field(const char *line, const char *name)
{
	char key[64];
	snprintf(key, sizeof(key), " %s=", name);
	const char *p = strstr(line, key);
	CHECK(p, "no %s in '%s'", name, line);
	return strtoull(p + strlen(key), NULL, 10);
}

/* The small trace every part replays, in the daemon's directory. */
static void make_trace(const char *trace, const struct daemon *d)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "'%s' --seed 3 --requests 400 --rate 2 --think 10 --docs 200 --system-len 256 "
		 "--doc-len 256 -o '%s/t.trace' 2>&1",
		 trace, d->dir);
	CHECK(system(cmd) == 0, "%s", cmd);
}

/* Run a shell command line; its summary line parsed into s. */
static int run(const char *cmd, struct summary *s)
{
	char out[16384];
	size_t len = 0;
	FILE *f = popen(cmd, "re");
	CHECK(f, "popen %s", cmd);
	while (len < sizeof(out) - 1 && fgets(out + len, (int)(sizeof(out) - len), f))
		len += strlen(out + len);
	int status = pclose(f);
	fputs(out, stderr);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		return 1;
	const char *line = strstr(out, "summary ");
	CHECK(line, "no summary from '%s'", cmd);
#define F(x) s->x = field(line, #x)
	F(requests);
	F(lookups);
	F(gpu_hits);
	F(host_hits);
	F(nvme_hits);
	F(misses);
	F(unbounded_hits);
	F(load_bytes);
	F(demotions);
	F(demoted_evictions);
	F(hint_failed);
	F(store_bytes);
	F(daemon_load_bytes);
	F(daemon_store_bytes);
	F(evictions);
	F(wrong_bytes);
#undef F
	return 0;
}

static void check_sums(const struct summary *s, const char *what)
{
	CHECK(s->requests == 400, "%s: %" PRIu64 " requests", what, s->requests);
	CHECK(s->wrong_bytes == 0, "%s: %" PRIu64 " wrong bytes", what, s->wrong_bytes);
	CHECK(s->gpu_hits + s->host_hits + s->nvme_hits + s->misses == s->lookups,
	      "%s: hits and misses do not add up to the lookups", what);
	CHECK(s->load_bytes == s->daemon_load_bytes, "%s: loaded %" PRIu64 ", daemon %" PRIu64,
	      what, s->load_bytes, s->daemon_load_bytes);
	CHECK(s->store_bytes == s->daemon_store_bytes, "%s: stored %" PRIu64 ", daemon %" PRIu64,
	      what, s->store_bytes, s->daemon_store_bytes);
}

int main(void)
{
	const char *trace = getenv("KVT_TRACE"), *replay = getenv("KVT_REPLAY");
	struct daemon d;
	struct summary s;
	char cmd[1024];

	if (!trace || !replay) {
		fprintf(stderr, "test-replay: KVT_TRACE and KVT_REPLAY must name the programs\n");
		return KVT_TEST_SKIP;
	}

	/* 512 MiB: 16384 tiny blocks, more than the trace's 11561. */
	daemon_start(&d, "[pool]\ncapacity = 512M\nextent_size = 2M\n");
	make_trace(trace, &d);

	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' --gpu-blocks 256 --salt one '%s/t.trace' 2>&1",
		 replay, d.socket, d.dir);
	CHECK(run(cmd, &s) == 0, "one engine");
	check_sums(&s, "one engine");
	CHECK(s.evictions == 0, "%" PRIu64 " evictions with room for everything", s.evictions);
	CHECK(s.gpu_hits > 0 && s.host_hits > 0, "both tiers hit");
	CHECK(s.gpu_hits + s.host_hits == s.unbounded_hits,
	      "GPU %" PRIu64 " + host %" PRIu64 " hits, never-evicting tier %" PRIu64, s.gpu_hits,
	      s.host_hits, s.unbounded_hits);

	snprintf(cmd, sizeof(cmd),
		 "'%s' --socket '%s' --engines 3 --route request --gpu-blocks 64 --salt three "
		 "'%s/t.trace' 2>&1",
		 replay, d.socket, d.dir);
	CHECK(run(cmd, &s) == 0, "three engines");
	check_sums(&s, "three engines");
	CHECK(s.host_hits > 0, "host hits with three engines");
	daemon_stop(&d);
	daemon_cleanup(&d);

	/* 16 MiB of host memory (512 blocks) in front of NVMe, written back
	 * at once: host eviction spills, lookups stage back. */
	daemon_start(&d, "[pool]\ncapacity = 16M\nextent_size = 2M\n"
			 "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
			 "[spill.a]\npath = @DIR@/spill0\ncapacity = 512M\n");
	make_trace(trace, &d);
	snprintf(cmd, sizeof(cmd),
		 "'%s' --socket '%s' --engines 2 --gpu-blocks 128 '%s/t.trace' 2>&1", replay,
		 d.socket, d.dir);
	CHECK(run(cmd, &s) == 0, "NVMe");
	check_sums(&s, "NVMe");
	CHECK(s.nvme_hits > 0, "no block came back from NVMe");
	daemon_stop(&d);
	daemon_cleanup(&d);

	/* 16 MiB again, host only, with hints. */
	daemon_start(&d, "[pool]\ncapacity = 16M\nextent_size = 2M\n");
	make_trace(trace, &d);
	snprintf(cmd, sizeof(cmd),
		 "'%s' --socket '%s' --gpu-blocks 128 --hints end+shared '%s/t.trace' 2>&1", replay,
		 d.socket, d.dir);
	CHECK(run(cmd, &s) == 0, "hints");
	check_sums(&s, "hints");
	CHECK(s.hint_failed == 0, "%" PRIu64 " hint requests failed", s.hint_failed);
	CHECK(s.demotions > 0, "no block was demoted by an end of session");
	CHECK(s.demoted_evictions > 0 && s.demoted_evictions <= s.evictions,
	      "%" PRIu64 " demoted of %" PRIu64 " evictions", s.demoted_evictions, s.evictions);
	daemon_stop(&d);
	daemon_cleanup(&d);
	printf("test-replay: ok\n");
	return 0;
}
