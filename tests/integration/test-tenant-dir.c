/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tenant's socket directory ([tenant.NAME] socket_dir =), mounted into a
 * pod as Kubernetes mounts a hostPath: here a bind mount in a mount
 * namespace of the test's own.
 *
 *  1. root through the mounted directory is that tenant and never an
 *     administrator: it sees its own tenant only, evicting another
 *     tenant's namespace is refused with the reason, and the other
 *     tenant's blocks stay, every byte checked;
 *  2. after a restart the daemon's new socket is in the mounted
 *     directory: a client there connects again, while a socket file
 *     mounted by itself is the dead one the old daemon left.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define N 8

static struct daemon d;
static char pod_dir[200], pod_file[200], pod_sock[220];

struct mine {
	char tenant[64];
};

/* This process's client record names its tenant. */
static int client_cb(const kvt_record *r, void *userdata)
{
	struct mine *m = userdata;
	uint64_t pid;
	if (!strcmp(kvt_record_kind(r), "client") && kvt_record_get_u64(r, "pid", &pid) == 0 &&
	    pid == (uint64_t)getpid())
		snprintf(m->tenant, sizeof(m->tenant), "%s", kvt_record_get_str(r, "tenant"));
	return 0;
}

static void expect_pod_tenant(kvt_client *c)
{
	struct mine m = {""};
	CHECK(kvt_stats(c, KVT_STATS_CLIENTS, client_cb, &m) == 0, "stats");
	CHECK(!strcmp(m.tenant, "pod"), "root through the pod's directory is tenant '%s'",
	      m.tenant);
}

/* The mounts a pod would have: the tenant's directory, and (as some did)
 * its socket file alone. */
static void mount_as_pod(void)
{
	char dir[200], sock[220];

	snprintf(dir, sizeof(dir), "%s/tenants/pod", d.dir);
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	snprintf(pod_dir, sizeof(pod_dir), "%s/pod-run", d.dir);
	snprintf(pod_file, sizeof(pod_file), "%s/pod-file.sock", d.dir);
	snprintf(pod_sock, sizeof(pod_sock), "%s/kvtierd.sock", pod_dir);
	struct stat st;
	CHECK(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode), "the daemon made %s", sock);
	CHECK(mkdir(pod_dir, 0755) == 0, "mkdir");
	int fd = open(pod_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0, "touch");
	close(fd);
	CHECK(mount(dir, pod_dir, NULL, MS_BIND, NULL) == 0, "bind %s: %s", dir, strerror(errno));
	CHECK(mount(sock, pod_file, NULL, MS_BIND, NULL) == 0, "bind %s: %s", sock,
	      strerror(errno));
}

static void store_blocks(kvt_ns *ns, const uint8_t *keys, size_t bytes)
{
	uint8_t *buf = malloc(bytes);
	CHECK(buf, "out of memory");
	for (int i = 0; i < N; i++) {
		block_pattern(buf, bytes, 1, keys + i * KVT_KEY_BYTES);
		const void *src = buf;
		int32_t st;
		CHECK(kvt_store(ns, 0, keys + i * KVT_KEY_BYTES, 1, &src, &st) == 1 && st == 0,
		      "store: %d", st);
	}
	free(buf);
}

static void check_blocks(kvt_ns *ns, const uint8_t *keys, size_t bytes)
{
	uint8_t *buf = malloc(bytes), *want = malloc(bytes);
	CHECK(buf && want, "out of memory");
	for (int i = 0; i < N; i++) {
		void *dst = buf;
		int32_t st = -1;
		CHECK(kvt_load(ns, 0, keys + i * KVT_KEY_BYTES, 1, &dst, &st) == 1 && st == 0,
		      "block %d loads: %d", i, st);
		block_pattern(want, bytes, 1, keys + i * KVT_KEY_BYTES);
		CHECK(!memcmp(buf, want, bytes), "block %d has its bytes", i);
	}
	free(buf);
	free(want);
}

/* 1, in a child: root through the mounted directory. */
static void pod_root(uint32_t other_tenant, uint32_t other_ns, const uint8_t *keys)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		kvt_client *c = NULL;
		CHECK(kvt_client_connect(pod_sock, "pod-root", &c) == 0, "connect: %s",
		      kvt_connect_error());
		kvt_ns *ns = engine_ns(c, "tiny", 1);
		expect_pod_tenant(c);
		CHECK(stat_count(c, "tenant") == 1, "it sees its own tenant only (%u)",
		      stat_count(c, "tenant"));
		CHECK(kvt_admin_evict(c, other_tenant, other_ns, 0) == -EPERM,
		      "root through the pod's directory may not evict");
		CHECK(strstr(kvt_client_error(c), "pod's socket"),
		      "the refusal names the tenant socket: '%s'", kvt_client_error(c));
		uint8_t st[N];
		CHECK(kvt_lookup(ns, keys, N, 0, st) == 0, "the other tenant's blocks are not its own");
		kvt_ns_close(ns);
		kvt_client_free(c);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "root in the pod");
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: mounting a directory as a pod does needs root\n");
		return KVT_TEST_SKIP;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		printf("SKIP: no mount namespace of the test's own: %s\n", strerror(errno));
		return KVT_TEST_SKIP;
	}
	const char *config = "[tenant.pod]\nsocket_dir = @DIR@/tenants/pod\nquota = 4M\n";
	daemon_start(&d, config);
	mount_as_pod();

	/* Another tenant's blocks: root's own, through the main socket. */
	kvt_client *c = client_connect(&d, "other");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "namespace info");
	uint8_t keys[N * KVT_KEY_BYTES];
	for (int i = 0; i < N; i++)
		token_key(0x7d1, (uint32_t)i, keys + i * KVT_KEY_BYTES);
	store_blocks(ns, keys, info.shard_bytes);
	uint64_t used = stat_get(c, "tenant", "used");
	uint32_t tenant = (uint32_t)stat_get(c, "tenant", "id");

	pod_root(tenant, info.ns_id, keys);
	CHECK(stat_count(c, "tenant") == 2, "root through the main socket sees both tenants");
	check_blocks(ns, keys, info.shard_bytes);
	CHECK(stat_sum(c, "tenant", "used") == used, "the other tenant's blocks all stay, none of the pod's");
	kvt_ns_close(ns);
	kvt_client_free(c);

	/* 2: a new socket, in the directory the pod mounted. */
	daemon_stop(&d);
	daemon_restart(&d, config);
	kvt_client *p = NULL;
	CHECK(kvt_client_connect(pod_sock, "pod-again", &p) == 0,
	      "the pod reaches the restarted daemon through its directory: %s",
	      kvt_connect_error());
	kvt_ns_close(engine_ns(p, "tiny", 1));
	expect_pod_tenant(p);
	kvt_client_free(p);
	p = NULL;
	CHECK(kvt_client_connect(pod_file, "pod-file", &p) < 0 && !p,
	      "a socket file mounted by itself is the old daemon's, dead");

	umount(pod_file);
	umount(pod_dir);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
