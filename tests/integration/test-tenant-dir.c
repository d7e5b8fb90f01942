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
 *  2. a uid in no group of the socket's, as a pod in a user namespace of
 *     its own arrives (its ids mapped to unprivileged host ones): through
 *     the 0660 directory it is refused with EACCES and the client
 *     library's "Permission denied"; through a socket_mode = 0666
 *     directory (made 0711, the socket 0666) it is that tenant, stores and
 *     loads every byte, and is refused an administrator's request;
 *  3. after a restart the daemon's new socket is in the mounted
 *     directory: a client there connects again, while a socket file
 *     mounted by itself is the dead one the old daemon left; a 0666
 *     tenant's directory that lost o+x gets it back.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define N 8

/* A uid and gid of nobody's, in no group of the daemon's. */
#define NOBODY 65534

static struct daemon d;
static char pod_dir[200], pod_file[200], pod_sock[220];
static char open_dir[200], open_sock[220];

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

static void expect_tenant(kvt_client *c, const char *tenant)
{
	struct mine m = {""};
	CHECK(kvt_stats(c, KVT_STATS_CLIENTS, client_cb, &m) == 0, "stats");
	CHECK(!strcmp(m.tenant, tenant), "the client through %s's directory is tenant '%s'",
	      tenant, m.tenant);
}

static void expect_pod_tenant(kvt_client *c)
{
	expect_tenant(c, "pod");
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

	/* The socket_mode = 0666 tenant's: the directory every uid may
	 * traverse, not list; the socket every uid's. */
	snprintf(dir, sizeof(dir), "%s/tenants/open", d.dir);
	snprintf(sock, sizeof(sock), "%s/kvtierd.sock", dir);
	CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0711, "%s is mode %04o, not 0711",
	      dir, (unsigned)(st.st_mode & 07777));
	CHECK(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0666,
	      "%s is mode %04o, not 0666", sock, (unsigned)(st.st_mode & 07777));
	snprintf(dir, sizeof(dir), "%s/tenants/pod/kvtierd.sock", d.dir);
	CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0660,
	      "the default tenant socket is mode %04o, not 0660", (unsigned)(st.st_mode & 07777));
	snprintf(dir, sizeof(dir), "%s/tenants/open", d.dir);
	snprintf(open_dir, sizeof(open_dir), "%s/open-run", d.dir);
	snprintf(open_sock, sizeof(open_sock), "%s/kvtierd.sock", open_dir);
	CHECK(mkdir(open_dir, 0755) == 0, "mkdir");
	CHECK(mount(dir, open_dir, NULL, MS_BIND, NULL) == 0, "bind %s: %s", dir, strerror(errno));
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

/* 2, in a child: nobody, in no group of the socket's, through each
 * tenant's mounted directory. */
static void pod_nobody(uint32_t other_tenant, uint32_t other_ns, const uint8_t *keys)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		CHECK(setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0,
		      "become nobody: %s", strerror(errno));
		kvt_client *c = NULL;
		int r = kvt_client_connect(pod_sock, "nobody-0660", &c);
		CHECK(r == -EACCES && !c, "nobody through the 0660 socket: %d", r);
		CHECK(strstr(kvt_connect_error(), "Permission denied"), "the refusal: '%s'",
		      kvt_connect_error());

		CHECK(kvt_client_connect(open_sock, "nobody-0666", &c) == 0,
		      "nobody through the 0666 socket: %s", kvt_connect_error());
		kvt_ns *ns = engine_ns(c, "tiny", 1);
		expect_tenant(c, "open");
		CHECK(stat_count(c, "tenant") == 1, "it sees its own tenant only (%u)",
		      stat_count(c, "tenant"));
		kvt_ns_info info;
		CHECK(kvt_ns_get_info(ns, &info) == 0, "namespace info");
		uint8_t st[N], mine[N * KVT_KEY_BYTES];
		CHECK(kvt_lookup(ns, keys, N, 0, st) == 0, "the other tenant's blocks are not its own");
		for (int i = 0; i < N; i++)
			token_key(0x0666, (uint32_t)i, mine + i * KVT_KEY_BYTES);
		store_blocks(ns, mine, info.shard_bytes);
		check_blocks(ns, mine, info.shard_bytes);
		CHECK(kvt_admin_evict(c, other_tenant, other_ns, 0) == -EPERM,
		      "nobody through the 0666 directory may not evict");
		CHECK(strstr(kvt_client_error(c), "open's socket"),
		      "the refusal names the tenant socket: '%s'", kvt_client_error(c));
		kvt_ns_close(ns);
		kvt_client_free(c);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "nobody in the pods");
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
	const char *config = "[tenant.pod]\nsocket_dir = @DIR@/tenants/pod\nquota = 4M\n"
			     "[tenant.open]\nsocket_dir = @DIR@/tenants/open\nsocket_mode = 0666\n"
			     "quota = 4M\n";
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

	pod_nobody(tenant, info.ns_id, keys);
	CHECK(stat_count(c, "tenant") == 3, "root through the main socket sees the open tenant too");
	check_blocks(ns, keys, info.shard_bytes);
	CHECK(stat_sum(c, "tenant", "used") == used + N * info.shard_bytes,
	      "nobody's %d blocks are the open tenant's", N);
	kvt_ns_close(ns);
	kvt_client_free(c);

	/* 3: a new socket, in the directory the pod mounted. */
	daemon_stop(&d);
	char dir[200];
	snprintf(dir, sizeof(dir), "%s/tenants/open", d.dir);
	CHECK(chmod(dir, 0700) == 0, "chmod");
	daemon_restart(&d, config);
	struct stat sb;
	CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 07777) == 0701,
	      "the restarted daemon let every uid through %s again: %04o", dir,
	      (unsigned)(sb.st_mode & 07777));
	kvt_client *p = NULL;
	CHECK(kvt_client_connect(pod_sock, "pod-again", &p) == 0,
	      "the pod reaches the restarted daemon through its directory: %s",
	      kvt_connect_error());
	kvt_ns_close(engine_ns(p, "tiny", 1));
	expect_pod_tenant(p);
	kvt_client_free(p);
	p = NULL;
	pod_nobody(tenant, info.ns_id, keys);
	CHECK(kvt_client_connect(pod_file, "pod-file", &p) < 0 && !p,
	      "a socket file mounted by itself is the old daemon's, dead");

	umount(open_dir);
	umount(pod_file);
	umount(pod_dir);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
