/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Handles across a reconnect, one step at a time.
 *
 * A restarted daemon: a lease, a half-written reservation and a pointer
 * from kvt_client_map taken from the killed daemon stay readable (the lease
 * with its bytes); the new daemon numbers its handles from the start again,
 * and the library never hands out a value it still holds from the old one
 * (such a handle is given straight back, its key -ENOBUFS); the old lease's
 * release and the old reservation's abort end here without reaching the
 * new daemon, whose handles they might name, and a commit says -ESTALE.
 * Once they are back nothing of the dead daemon stays mapped.
 *
 * The same daemon, after a reply timed out (it was stopped): the client
 * reconnects to it and everything stays as it was: the mappings (a new
 * lease of the same block has the same address), the lease and the
 * reservation, whose commit stores the block; a release made while the
 * daemon did not answer reaches it once it does.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* The first token of every block this test stores. */
#define TAG 0x7e57

static struct daemon d;
static kvt_client *c;
static kvt_ns *ns;
static uint64_t shard_bytes;

static void store(const uint8_t *key)
{
	uint8_t *buf = malloc(shard_bytes);
	CHECK(buf, "out of memory");
	block_pattern(buf, shard_bytes, 1, key);
	const void *src[1] = {buf};
	int32_t st;
	CHECK(kvt_store(ns, 0, key, 1, src, &st) == 1, "store: %d", st);
	free(buf);
}

static bool bytes_ok(const void *p, const uint8_t *key)
{
	uint8_t *want = malloc(shard_bytes);
	CHECK(want, "out of memory");
	block_pattern(want, shard_bytes, 1, key);
	bool ok = !memcmp(p, want, shard_bytes);
	free(want);
	return ok;
}

static void acquire(const uint8_t *key, kvt_slot_ref *ret)
{
	CHECK(kvt_acquire(ns, 0, key, 1, ret) == 1, "acquire: %d", ret->status);
	CHECK(bytes_ok(ret->ptr, key), "a leased block has its bytes");
}

/* Whether the client maps exactly the extents a new client maps. */
static bool maps_like_new(void)
{
	int mine = pool_mappings();
	kvt_client *fresh = client_connect(&d, "fresh");
	int theirs = pool_mappings() - mine;
	kvt_client_free(fresh);
	return mine == theirs;
}

static void restarted_daemon(void)
{
	uint8_t k0[32], k1[32], k2[32];
	kvt_slot_ref lease, resv, ref;
	int32_t st;

	token_key(TAG, 0, k0);
	token_key(TAG, 1, k1);
	token_key(TAG, 2, k2);
	store(k0);
	acquire(k0, &lease);
	CHECK(kvt_reserve(ns, 0, k1, 1, &resv) == 1, "reserve: %d", resv.status);
	memset(resv.ptr, 0xa5, shard_bytes / 2);
	/* What a worker does with a handle another process took. */
	void *mapped;
	CHECK(kvt_client_map(c, lease.extent_id, lease.offset, lease.bytes, &mapped) == 0,
	      "map");

	daemon_kill(&d);
	daemon_restart(&d, NULL);
	WAIT_FOR(kvt_client_ping(c) == 0, "the client to reconnect");

	CHECK(bytes_ok(lease.ptr, k0), "a lease keeps its bytes across a restart");
	memset((uint8_t *)resv.ptr + shard_bytes / 2, 0x5a, shard_bytes / 2);
	volatile const uint8_t *m = mapped;
	for (uint64_t i = 0; i < lease.bytes; i += 512)
		(void)m[i];

	/* The new daemon hands out the values of the old one again (each
	 * entry of its handle table counts from 1): cycle through them.
	 * None that this client still holds may come out, and with this
	 * daemon's numbering the lease's value is met within a few. */
	store(k2);
	int bounced = 0;
	for (int i = 0; i < 64; i++) {
		int r = kvt_acquire(ns, 0, k2, 1, &ref);
		if (r == 0 && ref.status == -ENOBUFS) {
			bounced++;
			continue;
		}
		CHECK(r == 1, "acquire in the new daemon: %d", ref.status);
		CHECK(ref.handle != lease.handle && ref.handle != resv.handle,
		      "handed out %#llx, a value still held from the old daemon",
		      (unsigned long long)ref.handle);
		CHECK(kvt_release(c, &ref.handle, 1, &st) == 0 && st == 0, "release: %d", st);
	}
	CHECK(bounced > 0, "no value of the old daemon came out of the new one");
	CHECK(stat_get(c, "tenant", "handles") == 0, "a bounced handle was given back");

	/* The new daemon now holds a lease whose value may equal the old
	 * one's: giving back the old one must leave it alone. */
	acquire(k2, &ref);
	CHECK(kvt_release(c, &lease.handle, 1, &st) == 0 && st == 0,
	      "release of a lease of the dead daemon: %d", st);
	uint8_t ok = 1;
	CHECK(kvt_commit(c, &resv.handle, &ok, 1, &st) == 0 && st == -ESTALE,
	      "commit of a reservation of the dead daemon: status %d", st);
	CHECK(stat_get(c, "tenant", "handles") == 1, "the new daemon's lease is untouched");
	CHECK(kvt_lookup(ns, k1, 1, 0, NULL) == 0, "the stale commit stored nothing");
	CHECK(bytes_ok(ref.ptr, k2), "the new lease keeps its bytes");
	CHECK(kvt_release(c, &ref.handle, 1, &st) == 0 && st == 0, "release: %d", st);
	CHECK(stat_get(c, "tenant", "handles") == 0, "all handles back");

	/* The kvt_client_map pointer stays readable; nothing of the dead
	 * daemon stays mapped. */
	for (uint64_t i = 0; i < lease.bytes; i += 512)
		(void)m[i];
	CHECK(maps_like_new(), "an extent of the dead daemon is still mapped");
}

static void same_daemon(void)
{
	uint8_t k3[32], k4[32], k5[32];
	kvt_slot_ref lease, lease2, resv, again;
	int32_t st;

	token_key(TAG, 3, k3);
	token_key(TAG, 4, k4);
	token_key(TAG, 5, k5);
	store(k3);
	store(k5);
	acquire(k3, &lease);
	acquire(k5, &lease2);
	CHECK(kvt_reserve(ns, 0, k4, 1, &resv) == 1, "reserve: %d", resv.status);
	uint8_t *want = malloc(shard_bytes);
	CHECK(want, "out of memory");
	block_pattern(want, shard_bytes, 1, k4);
	memcpy(resv.ptr, want, shard_bytes / 2);

	/* The daemon stops answering: the call times out and the client
	 * drops the connection, though the daemon lives on. */
	CHECK(kill(d.pid, SIGSTOP) == 0, "SIGSTOP");
	CHECK(kvt_client_ping(c) == -ENOTCONN, "a stopped daemon does not answer");
	CHECK(!kvt_client_connected(c), "disconnected");
	CHECK(kvt_release(c, &lease2.handle, 1, &st) == 0 && st == 0,
	      "a release while the daemon does not answer: status %d", st);
	CHECK(kill(d.pid, SIGCONT) == 0, "SIGCONT");
	WAIT_FOR(kvt_client_ping(c) == 0, "the client to reconnect");

	CHECK(bytes_ok(lease.ptr, k3), "the lease keeps its bytes");
	acquire(k3, &again);
	CHECK(again.ptr == lease.ptr, "the same daemon: the same mapping");
	CHECK(kvt_release(c, &again.handle, 1, &st) == 0 && st == 0, "release: %d", st);
	memcpy((uint8_t *)resv.ptr + shard_bytes / 2, want + shard_bytes / 2,
	       shard_bytes - shard_bytes / 2);
	uint8_t ok = 1;
	CHECK(kvt_commit(c, &resv.handle, &ok, 1, &st) == 0 && st == 0,
	      "commit of a reservation held across the reconnect: status %d", st);
	CHECK(kvt_release(c, &lease.handle, 1, &st) == 0 && st == 0, "release: %d", st);
	/* Both leases reached the daemon, the one released while it was
	 * away included. */
	CHECK(stat_get(c, "tenant", "handles") == 0, "handles left: %llu",
	      (unsigned long long)stat_get(c, "tenant", "handles"));
	uint8_t *back = malloc(shard_bytes);
	void *dst[1] = {back};
	CHECK(back && kvt_load(ns, 0, k4, 1, dst, NULL) == 1, "load the committed block");
	CHECK(!memcmp(back, want, shard_bytes), "byte-exact");
	CHECK(maps_like_new(), "the client maps what a new client maps");
	free(back);
	free(want);
}

int main(void)
{
	/* A stopped daemon is noticed after this long (same_daemon). */
	setenv("KVTIER_TIMEOUT_MS", "1000", 1);
	int fds_before = count_fds(getpid());

	daemon_start(&d, NULL);
	c = client_connect(&d, "handles");
	ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
	shard_bytes = info.shard_bytes;

	restarted_daemon();
	same_daemon();

	kvt_ns_close(ns);
	kvt_client_free(c);
	CHECK(pool_mappings() == 0, "pool mappings left after kvt_client_free");
	CHECK(count_fds(getpid()) == fds_before, "descriptors: %d before, %d after",
	      fds_before, count_fds(getpid()));
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
