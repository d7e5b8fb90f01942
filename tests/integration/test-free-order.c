/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A client and its namespaces freed in every order, as a garbage-collected
 * binding frees them: the namespace first, the client first, the client
 * first and then calls on its namespaces (every one answers -ENOTCONN),
 * and the two freed at once by two threads.  Under ASan/LSan no order
 * touches freed memory or leaks; in every build the connection and the
 * pool are gone as soon as the client is freed, whatever is still open.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define RACES 50

static struct daemon d;

/* A client with a namespace and a block stored, so that it maps the
 * pool. */
static kvt_client *client_with_ns(kvt_ns **ret_ns)
{
	static uint8_t blk[32768];
	kvt_client *c = client_connect(&d, "order");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	uint8_t key[32];
	uint32_t tok[1] = {7};

	CHECK(kvt_ns_get_info(ns, &info) == 0 && info.shard_bytes <= sizeof(blk), "ns info");
	CHECK(kvt_hash_block(NULL, tok, 1, NULL, 0, key) == 0, "hash");
	const void *src[1] = {blk};
	CHECK(kvt_store(ns, 0, key, 1, src, NULL) == 1, "store");
	CHECK(pool_mappings() > 0, "the pool is mapped");
	*ret_ns = ns;
	return c;
}

/* Every call on a namespace whose client is freed. */
static void calls_after_free(kvt_ns *ns)
{
	static uint8_t buf[32768];
	uint8_t key[32] = {1}, states[1];
	kvt_slot_ref ref;
	int32_t st;
	void *dst[1] = {buf};
	const void *src[1] = {buf};
	kvt_ns_info info;
	void *base[1] = {buf};
	kvt_layout layout = {
		.n_layers = 1, .planes = 1, .heads = 1, .head_bytes = 1,
		.page_tokens = 1, .index_kind = KVT_INDEX_PAGE, .layer_base = base,
	};
	int64_t idx[1] = {0};

	CHECK(kvt_ns_get_info(ns, &info) == 0, "the namespace still says what it was");
	CHECK(kvt_lookup(ns, key, 1, 0, states) == -ENOTCONN, "lookup");
	CHECK(kvt_reserve(ns, 0, key, 1, &ref) == -ENOTCONN && ref.status == -ENOTCONN,
	      "reserve");
	CHECK(kvt_acquire(ns, 0, key, 1, &ref) == -ENOTCONN && ref.status == -ENOTCONN,
	      "acquire");
	CHECK(kvt_store(ns, 0, key, 1, src, &st) == -ENOTCONN, "store");
	CHECK(kvt_load(ns, 0, key, 1, dst, &st) == -ENOTCONN, "load");
	CHECK(kvt_touch(ns, key, 1) == -ENOTCONN, "touch");
	CHECK(kvt_delete(ns, key, 1) == -ENOTCONN, "delete");
	CHECK(kvt_prefetch(ns, key, 1) == -ENOTCONN, "prefetch");
	CHECK(kvt_wait_resident(ns, key, 1, 0) == -ENOTCONN, "wait_resident");
	/* A layout that does not fit the namespace is refused before the
	 * client is looked at; one that fits reaches it. */
	int r = kvt_store_paged(ns, 0, &layout, key, 1, idx, &st);
	CHECK(r == -EINVAL || r == -ENOTCONN, "store_paged: %d", r);
	r = kvt_load_paged(ns, 0, &layout, key, 1, idx, &st);
	CHECK(r == -EINVAL || r == -ENOTCONN, "load_paged: %d", r);
}

struct race {
	kvt_client *c;
	kvt_ns *ns;
};

static void *close_ns(void *arg)
{
	struct race *rc = arg;
	kvt_ns_close(rc->ns);
	return NULL;
}

int main(void)
{
	kvt_client *c;
	kvt_ns *ns, *ns2;
	int fds_before = count_fds(getpid());

	daemon_start(&d, NULL);

	/* The namespace, then the client. */
	c = client_with_ns(&ns);
	kvt_ns_close(ns);
	kvt_client_free(c);
	CHECK(pool_mappings() == 0, "the pool is unmapped");

	/* The client, then the namespace. */
	c = client_with_ns(&ns);
	kvt_client_free(c);
	CHECK(pool_mappings() == 0, "the pool is unmapped with a namespace open");
	kvt_ns_close(ns);

	/* The client, calls on its namespaces, then the namespaces. */
	c = client_with_ns(&ns);
	ns2 = engine_ns(c, "llama3-8b", 1);
	kvt_client_free(c);
	calls_after_free(ns);
	calls_after_free(ns2);
	kvt_ns_close(ns2);
	calls_after_free(ns);
	kvt_ns_close(ns);

	/* A namespace closed, the client freed, the other closed. */
	c = client_with_ns(&ns);
	ns2 = engine_ns(c, "llama3-8b", 1);
	kvt_ns_close(ns);
	kvt_client_free(c);
	kvt_ns_close(ns2);

	/* Both at once, from two threads. */
	for (int i = 0; i < RACES; i++) {
		struct race rc;
		pthread_t th;
		rc.c = client_with_ns(&rc.ns);
		CHECK(pthread_create(&th, NULL, close_ns, &rc) == 0, "pthread_create");
		kvt_client_free(rc.c);
		pthread_join(th, NULL);
	}

	CHECK(pool_mappings() == 0, "pool mappings left");
	CHECK(count_fds(getpid()) == fds_before, "descriptors: %d before, %d after",
	      fds_before, count_fds(getpid()));
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
