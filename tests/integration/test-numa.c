/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NUMA placement against a fake sysfs with two nodes: a client names its
 * GPU's PCI bus id, the daemon resolves the GPU's node and places that
 * client's extents there first; where the kernel cannot (node 1 does not
 * exist on this machine) it falls back and counts it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

static kvt_client *connect_gpu(const struct daemon *d, const char *bus)
{
	kvt_connect_opts o = {.size = sizeof(o), .socket_path = d->socket, .name = bus,
			      .pci_bus_id = bus};
	kvt_client *c = NULL;
	int r = kvt_client_connect_opts(&o, &c);
	CHECK(r == 0, "connect: %s", kvt_connect_error());
	return c;
}

#define BLOCK (32 * 1024)

/* Block i of a seed's request: bytes nobody else's block has. */
static void block_bytes(uint64_t seed, unsigned i, uint8_t *out)
{
	for (unsigned j = 0; j < BLOCK; j++)
		out[j] = (uint8_t)(seed * 131 + i * 31 + j * 7 + (j >> 8));
}

static void store_some(kvt_client *c, uint64_t seed)
{
	static uint8_t blk[4][BLOCK];
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	uint8_t keys[4 * 32];
	engine_keys(seed, 64, 0, 0, keys, 4);
	const void *srcs[4];
	for (unsigned i = 0; i < 4; i++) {
		block_bytes(seed, i, blk[i]);
		srcs[i] = blk[i];
	}
	CHECK(kvt_store(ns, 0, keys, 4, srcs, NULL) == 4, "store");
	kvt_ns_close(ns);
}

struct nodes {
	uint64_t extents[2];
};

static int node_cb(const kvt_record *r, void *userdata)
{
	struct nodes *n = userdata;
	uint64_t node, ext;
	if (strcmp(kvt_record_kind(r), "node") || kvt_record_get_u64(r, "node", &node) ||
	    kvt_record_get_u64(r, "extents", &ext) || node > 1)
		return 0;
	n->extents[node] = ext;
	return 0;
}

int main(void)
{
	struct daemon d;
	char fake[256];

	/* The fake tree lives in the daemon's directory, made first. */
	daemon_start(&d, NULL);
	daemon_stop(&d);
	snprintf(fake, sizeof(fake), "%s/fake", d.dir);
	put_file(fake, "/sys/devices/system/node/has_memory", "0-1\n");
	put_file(fake, "/sys/bus/pci/devices/0000:18:00.0/numa_node", "0\n");
	put_file(fake, "/sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
	daemon_restart(&d, "topology_root = @DIR@/fake\n");

	kvt_client *a = connect_gpu(&d, "0000:18:00.0");
	kvt_client *b = connect_gpu(&d, "3b:00.0"); /* short form, no domain */
	kvt_client *x = connect_gpu(&d, "0000:99:00.0");
	CHECK(kvt_client_numa_node(a) == 0, "GPU 18:00.0 is on node 0");
	CHECK(kvt_client_numa_node(b) == 1, "GPU 3b:00.0 is on node 1");
	CHECK(kvt_client_numa_node(x) == -1, "an unknown GPU has no node");
	CHECK(stat_get(a, "daemon", "numa_nodes") == 2, "two nodes from the fake tree");

	store_some(a, 1);
	CHECK(stat_get(a, "daemon", "numa_fallbacks") == 0, "node 0 exists: no fallback");
	struct nodes n = {{0, 0}};
	CHECK(kvt_stats(a, KVT_STATS_DAEMON, node_cb, &n) == 0, "stats");
	CHECK(n.extents[0] == 1, "one extent on node 0 (%llu)", (unsigned long long)n.extents[0]);

	/* B's slots must come from a node-1 extent first: the daemon asks for
	 * a new extent there (the kernel has no node 1, so it falls back and
	 * counts) rather than using A's free node-0 slots. */
	store_some(b, 2);
	CHECK(stat_get(a, "daemon", "extents") == 2, "a second extent for the node-1 client");
	CHECK(stat_get(a, "daemon", "numa_fallbacks") == 1, "the fallback is counted");

	/* A client without a known node takes any free slot: no new extent. */
	store_some(x, 3);
	CHECK(stat_get(a, "daemon", "extents") == 2, "no extent for a node-less client");

	/* Byte-exact reads regardless of placement. */
	kvt_ns *ns = engine_ns(x, "tiny", 1);
	uint8_t keys[4 * 32];
	engine_keys(2, 64, 0, 0, keys, 4);
	CHECK(kvt_lookup(ns, keys, 4, 0, NULL) == 4, "B's blocks are visible to X");
	static uint8_t got[4][BLOCK], want[BLOCK];
	void *dsts[4] = {got[0], got[1], got[2], got[3]};
	CHECK(kvt_load(ns, 0, keys, 4, dsts, NULL) == 4, "X loads B's blocks");
	for (unsigned i = 0; i < 4; i++) {
		block_bytes(2, i, want);
		CHECK(!memcmp(got[i], want, BLOCK), "block %u byte-exact through X", i);
	}

	kvt_client_free(a);
	kvt_client_free(b);
	kvt_ns_close(ns);
	kvt_client_free(x);
	daemon_stop(&d);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fake);
	CHECK(system(cmd) == 0, "cleanup");
	daemon_cleanup(&d);
	return 0;
}
