/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd under seccomp profiles, loaded as a container runtime loads them
 * (seccomp-exec.py), with an NVMe tier and a GPU on NUMA node 0 of a fake
 * sysfs:
 *
 *  1. deploy/kubernetes/seccomp-kvtierd.json as shipped: the daemon serves
 *     with io_uring, places its extents on the node asked for, watches its
 *     clients by pidfd (one SIGKILLed holding 16 reservations: they end),
 *     writes blocks back to NVMe and loads them again, every byte checked,
 *     and upgrades in place (SIGUSR2) under the same filter;
 *  2. the same profile without io_uring_setup, io_uring_enter,
 *     io_uring_register, mbind, set_mempolicy and get_mempolicy, as a
 *     container runtime's default profile without CAP_SYS_NICE: it serves
 *     all the same on the thread engine, and says why and what to do, in
 *     its log, in STATS (nvme_engine_reason, the numa record) and in
 *     kvtierctl status.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define N 16
#define FIX "deploy/kubernetes/seccomp-kvtierd.json"

static const char *const refused_by_default =
	"io_uring_setup,io_uring_enter,io_uring_register,mbind,set_mempolicy,get_mempolicy";

#if defined(__SANITIZE_ADDRESS__)
static const char sanitizer_env[] = "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\"\n";
#else
static const char sanitizer_env[] = "";
#endif

/* KVTIERD becomes a script that runs the real one under the profile. */
static void wrap(const char *dir, const char *real, const char *refuse)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/kvtierd", dir);
	FILE *f = fopen(path, "we");
	CHECK(f, "cannot write %s", path);
	/* LeakSanitizer stops the daemon's threads with ptrace, which the
	 * profile refuses: a sanitizer build checks the rest. */
	fprintf(f, "#!/bin/sh\n%sexec python3 '%s' '%s' %s%s -- '%s' \"$@\"\n", sanitizer_env,
		getenv("KVT_SECCOMP_EXEC"), getenv("KVT_SECCOMP_PROFILE"), refuse ? "--refuse " : "",
		refuse ? refuse : "", real);
	fclose(f);
	CHECK(chmod(path, 0755) == 0, "chmod");
	setenv("KVTIERD", path, 1);
}

struct str_query {
	const char *kind, *field;
	char value[512];
	bool found;
};

static int str_cb(const kvt_record *r, void *userdata)
{
	struct str_query *q = userdata;
	const char *v;
	if (!q->found && !strcmp(kvt_record_kind(r), q->kind) &&
	    (v = kvt_record_get_str(r, q->field))) {
		snprintf(q->value, sizeof(q->value), "%s", v);
		q->found = true;
	}
	return 0;
}

/* A string field of the first record of that kind; "" when there is none. */
static const char *stat_str(kvt_client *c, const char *kind, const char *field)
{
	static struct str_query q;
	q = (struct str_query){.kind = kind, .field = field};
	CHECK(kvt_stats(c, KVT_STATS_ALL, str_cb, &q) == 0, "stats");
	return q.value;
}

static kvt_client *connect_gpu(const struct daemon *d, const char *bus)
{
	kvt_connect_opts o = {.size = sizeof(o), .socket_path = d->socket, .name = bus,
			      .pci_bus_id = bus};
	kvt_client *c = NULL;
	CHECK(kvt_client_connect_opts(&o, &c) == 0, "connect: %s", kvt_connect_error());
	return c;
}

static void load_all(kvt_ns *ns, const uint8_t *keys, size_t bytes)
{
	uint8_t *buf = malloc((size_t)N * bytes), *want = malloc(bytes);
	void *dsts[N];
	int32_t st[N];
	CHECK(buf && want, "out of memory");
	for (int i = 0; i < N; i++)
		dsts[i] = buf + (size_t)i * bytes;
	load_staged(ns, keys, N, dsts, st);
	for (int i = 0; i < N; i++) {
		CHECK(st[i] == 0, "block %d loads: %d", i, st[i]);
		block_pattern(want, bytes, 1, keys + i * KVT_KEY_BYTES);
		CHECK(!memcmp(dsts[i], want, bytes), "block %d has its bytes", i);
	}
	free(buf);
	free(want);
}

/* What kvtierctl status prints, in out. */
static void ctl_status(const struct daemon *d, char *out, size_t size)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' status 2>&1", getenv("KVTIERCTL"),
		 d->socket);
	FILE *p = popen(cmd, "r");
	CHECK(p, "popen");
	size_t n = fread(out, 1, size - 1, p);
	out[n] = 0;
	CHECK(pclose(p) == 0, "kvtierctl status: %s", out);
}

static void round_under(const char *real, const char *refuse)
{
	struct daemon d;
	char fake[256], line[256], config[512];
	bool fallback = refuse != NULL;

	daemon_start(&d, NULL);
	daemon_stop(&d);
	snprintf(fake, sizeof(fake), "%s/fake", d.dir);
	put_file(fake, "/sys/devices/system/node/has_memory", "0\n");
	put_file(fake, "/sys/bus/pci/devices/0000:18:00.0/numa_node", "0\n");
	wrap(d.dir, real, refuse);
	snprintf(config, sizeof(config),
		 "topology_root = @DIR@/fake\n"
		 "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 128M\n");
	daemon_restart(&d, config);

	kvt_client *c = connect_gpu(&d, "0000:18:00.0");
	CHECK(kvt_client_numa_node(c) == 0, "the GPU is on node 0");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "namespace info");
	uint8_t keys[N * KVT_KEY_BYTES];
	uint8_t *buf = malloc(info.shard_bytes);
	CHECK(buf, "out of memory");
	for (int i = 0; i < N; i++) {
		token_key(0x5ecc, (uint32_t)i, keys + i * KVT_KEY_BYTES);
		block_pattern(buf, info.shard_bytes, 1, keys + i * KVT_KEY_BYTES);
		const void *src = buf;
		int32_t st;
		CHECK(kvt_store(ns, 0, keys + i * KVT_KEY_BYTES, 1, &src, &st) == 1 && st == 0,
		      "store: %d", st);
	}
	free(buf);

	/* The engine it says it has, and why. */
	const char *engine = stat_str(c, "daemon", "nvme_engine");
	CHECK(!strcmp(engine, fallback ? "threads" : "io_uring"), "NVMe engine %s", engine);
	const char *why = stat_str(c, "daemon", "nvme_engine_reason");
	if (fallback)
		CHECK(strstr(why, "seccomp") && strstr(why, "io_uring_setup") && strstr(why, FIX),
		      "STATS says why and what to do: %s", why);
	CHECK(daemon_log_count(&d, "I/O engine: threads") == (fallback ? 2 : 0) &&
		      daemon_log_count(&d, FIX) >= (fallback ? 2 : 0),
	      "the log says so, with the profile to use, once for each engine");

	/* Placement: on node 0, or refused and said so. */
	CHECK(stat_get(c, "daemon", "extents") >= 1, "an extent");
	uint64_t fallbacks = stat_get(c, "daemon", "numa_fallbacks");
	CHECK(fallback ? fallbacks >= 1 : fallbacks == 0, "fallbacks: %llu", (unsigned long long)fallbacks);
	const char *numa = stat_str(c, "numa", "reason");
	if (fallback) {
		CHECK(strstr(numa, "mbind() refused") && strstr(numa, "CAP_SYS_NICE") &&
			      strstr(numa, FIX),
		      "the numa record says why and what to do: '%s'", numa);
		CHECK(daemon_log_count(&d, "Failed to place pool memory on NUMA node 0") >= 1,
		      "the log says so");
		char out[8192];
		ctl_status(&d, out, sizeof(out));
		CHECK(strstr(out, "engine threads") && strstr(out, "mbind() refused") &&
			      strstr(out, "CAP_SYS_NICE"),
		      "kvtierctl status shows both: %s", out);
	} else {
		CHECK(!numa[0], "no numa record: '%s'", numa);
	}

	/* Through NVMe and back. */
	WAIT_FOR(stat_get(c, "daemon", "nvme_writes") >= N &&
			 stat_get(c, "daemon", "nvme_in_flight") == 0,
		 "every block written back");
	uint32_t tenant = (uint32_t)stat_get(c, "tenant", "id");
	CHECK(kvt_admin_evict(c, tenant, info.ns_id, 0) == N, "evicted from host memory");
	load_all(ns, keys, info.shard_bytes);

	/* A client killed holding reservations: watched by its pidfd. */
	int in;
	FILE *fout;
	pid_t holder = engine_spawn(&d, &in, &fout, "--model", "tiny", "--prefix", "256",
				    "--prefix-seed", "7", "--suffix", "0", "--hold", "--name",
				    "holder", NULL);
	CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "HELD 16", 7),
	      "holder reserved 16 blocks: %s", line);
	CHECK(stat_get(c, "tenant", "handles") == 16, "its reservations");
	kill(holder, SIGKILL);
	CHECK(wait_exit(holder) == 128 + SIGKILL, "holder killed");
	close(in);
	fclose(fout);
	WAIT_FOR(stat_get(c, "tenant", "handles") == 0, "its reservations to end");

	/* An upgrade in place: the re-executed binary under the same filter. */
	int before = daemon_log_count(&d, "Adopted the host tier");
	kill(d.pid, SIGUSR2);
	WAIT_FOR(daemon_log_count(&d, "Adopted the host tier") == before + 1,
		 "the re-executed daemon to adopt");
	WAIT_FOR(kvt_client_ping(c) == 0, "the client to reconnect");
	engine = stat_str(c, "daemon", "nvme_engine");
	CHECK(!strcmp(engine, fallback ? "threads" : "io_uring"), "NVMe engine %s after the upgrade",
	      engine);
	load_all(ns, keys, info.shard_bytes);

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	printf("%s: engine %s, %s\n", fallback ? "default-like profile" : "shipped profile",
	       fallback ? "threads" : "io_uring", fallback ? "placement refused" : "placed");
}

int main(void)
{
	if (!getenv("KVT_SECCOMP_EXEC") || !getenv("KVT_SECCOMP_PROFILE")) {
		printf("SKIP: KVT_SECCOMP_EXEC and KVT_SECCOMP_PROFILE unset (run from meson)\n");
		return KVT_TEST_SKIP;
	}
	if (system("python3 -c 'import platform, sys; sys.exit(platform.machine() != \"x86_64\")'")) {
		printf("SKIP: seccomp-exec.py numbers system calls for x86_64 only\n");
		return KVT_TEST_SKIP;
	}
	char real[256];
	snprintf(real, sizeof(real), "%s", getenv("KVTIERD"));
	round_under(real, NULL);
	setenv("KVTIERD", real, 1);
	round_under(real, refused_by_default);
	return 0;
}
