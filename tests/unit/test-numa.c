/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NUMA topology from a fake sysfs tree: node lists as the kernel writes
 * them, malformed ones refused, has_memory before online, no node directory
 * at all as one node 0; and the node of a PCI device by its bus id in the
 * long, short and upper-case forms, with -1 for everything sysfs does not
 * vouch for (no device, node -1, a node without memory, a path in the id).
 */
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "log.h"
#include "numa.h"
#include "../check.h"

static char base[64];

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define NODE_DIR "/sys/devices/system/node"
#define PCI_DIR "/sys/bus/pci/devices"

/* A fresh, empty root for one case: BASE/rN. */
static const char *new_root(void)
{
	static char root[128];
	static unsigned n;

	snprintf(root, sizeof(root), "%s/r%u", base, n++);
	if (mkdir(root, 0700) < 0) {
		fprintf(stderr, "mkdir %s: %m\n", root);
		exit(1);
	}
	return root;
}

/* Write root/rel, creating its directories. */
static void put(const char *root, const char *rel, const char *text)
{
	char path[512];

	snprintf(path, sizeof(path), "%s%s", root, rel);
	for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = 0;
		if (mkdir(path, 0700) < 0 && errno != EEXIST) {
			fprintf(stderr, "mkdir %s: %m\n", path);
			exit(1);
		}
		*p = '/';
	}
	FILE *f = fopen(path, "we");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %m\n", path);
		exit(1);
	}
}

static void put_device(const char *root, const char *bus_id, const char *node)
{
	char rel[256];

	snprintf(rel, sizeof(rel), PCI_DIR "/%s/numa_node", bus_id);
	put(root, rel, node);
}

static bool same_nodes(const struct numa_topology *t, const int *want, int n)
{
	if (t->n_nodes != n)
		return false;
	for (int i = 0; i < n; i++)
		if (t->nodes[i] != want[i])
			return false;
	return true;
}

static void print_nodes(const struct numa_topology *t)
{
	fprintf(stderr, "  got %d node(s):", t->n_nodes);
	for (int i = 0; i < t->n_nodes && i < NUMA_MAX_NODES; i++)
		fprintf(stderr, " %d", t->nodes[i]);
	fputc('\n', stderr);
}

static void test_lists(void)
{
	static const struct {
		const char *text;
		int n;
		int nodes[8];
	} ok[] = {
		{ "0\n", 1, { 0 } },
		{ "0", 1, { 0 } },
		{ "0-1\n", 2, { 0, 1 } },
		{ "0,2-3\n", 3, { 0, 2, 3 } },
		{ "0-1,4\n", 3, { 0, 1, 4 } },
		{ "0-1,4", 3, { 0, 1, 4 } },
		{ "1\n", 1, { 1 } },
		{ "2-2\n", 1, { 2 } },
		{ "0,1,2,3\n", 4, { 0, 1, 2, 3 } },
		{ "1,3,5-7\n", 5, { 1, 3, 5, 6, 7 } },
		{ "1023\n", 1, { 1023 } },
	};
	static const char *const bad[] = {
		"", "\n", "a", "a\n", "3-1\n", "0-", "0-\n", "-1\n", "0,,1\n",
		",0\n", "0-1-2\n", "0x1\n", "1024\n", "0-64\n", "1023-1024\n",
		"0,3-1\n", "5-2,7\n",
	};
	struct numa_topology t;

	for (unsigned i = 0; i < ARRAY_SIZE(ok); i++) {
		const char *root = new_root();
		put(root, NODE_DIR "/has_memory", ok[i].text);
		memset(&t, 0x5c, sizeof(t));
		int r = numa_topology_load(&t, root);
		CHECK(r == 0 && same_nodes(&t, ok[i].nodes, ok[i].n),
		      "has_memory \"%s\": load %d", ok[i].text, r);
		if (r == 0 && !same_nodes(&t, ok[i].nodes, ok[i].n))
			print_nodes(&t);
		CHECK(strcmp(t.root, root) == 0);
		for (int k = 0; r == 0 && k < ok[i].n; k++)
			CHECK(numa_node_exists(&t, ok[i].nodes[k]));
	}

	/* The most nodes the table holds. */
	const char *root = new_root();
	put(root, NODE_DIR "/has_memory", "0-63\n");
	CHECK(numa_topology_load(&t, root) == 0 && t.n_nodes == NUMA_MAX_NODES &&
	      t.nodes[0] == 0 && t.nodes[63] == 63);

	/* The errors below are expected: keep them out of the test log. */
	int level = log_get_max_level();
	log_set_max_level(LOG_CRIT);
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		root = new_root();
		put(root, NODE_DIR "/has_memory", bad[i]);
		int r = numa_topology_load(&t, root);
		CHECK(r < 0, "has_memory \"%s\" loads (%d node(s))", bad[i],
		      t.n_nodes);
	}
	log_set_max_level(level);
}

static void test_sources(void)
{
	struct numa_topology t;
	const char *root;

	/* No has_memory: the online nodes. */
	root = new_root();
	put(root, NODE_DIR "/online", "0-1,3\n");
	CHECK(numa_topology_load(&t, root) == 0);
	CHECK(same_nodes(&t, (const int[]){ 0, 1, 3 }, 3));

	/* has_memory is preferred: a node may be online without memory. */
	root = new_root();
	put(root, NODE_DIR "/online", "0-3\n");
	put(root, NODE_DIR "/has_memory", "1\n");
	CHECK(numa_topology_load(&t, root) == 0);
	CHECK(same_nodes(&t, (const int[]){ 1 }, 1));
	CHECK(!numa_node_exists(&t, 0) && numa_node_exists(&t, 1));

	/* A malformed online list is an error too. */
	root = new_root();
	put(root, NODE_DIR "/online", "x\n");
	int level = log_get_max_level();
	log_set_max_level(LOG_CRIT);
	CHECK(numa_topology_load(&t, root) < 0);
	log_set_max_level(level);

	/* A node directory without either file: one node 0. */
	root = new_root();
	put(root, NODE_DIR "/node0/meminfo", "");
	memset(&t, 0x5c, sizeof(t));
	CHECK(numa_topology_load(&t, root) == 0);
	CHECK(same_nodes(&t, (const int[]){ 0 }, 1));

	/* No node directory at all (a kernel without NUMA): one node 0. */
	root = new_root();
	memset(&t, 0x5c, sizeof(t));
	CHECK(numa_topology_load(&t, root) == 0);
	CHECK(same_nodes(&t, (const int[]){ 0 }, 1));
	CHECK(numa_node_exists(&t, 0) && !numa_node_exists(&t, 1) &&
	      !numa_node_exists(&t, -1));
	CHECK(strcmp(t.root, root) == 0);

	/* A root that does not exist is the same. */
	char missing[160];
	snprintf(missing, sizeof(missing), "%s/does-not-exist", base);
	CHECK(numa_topology_load(&t, missing) == 0);
	CHECK(same_nodes(&t, (const int[]){ 0 }, 1));
}

static void test_devices(void)
{
	struct numa_topology t;
	const char *root = new_root();

	put(root, NODE_DIR "/has_memory", "0-1,4\n");
	put_device(root, "0000:3b:00.0", "1\n");
	put_device(root, "0000:00:02.0", "0\n");
	put_device(root, "0000:18:00.0", "4\n");
	put_device(root, "0000:af:00.0", "-1\n");
	put_device(root, "0000:5e:00.0", "2\n");
	put_device(root, "0001:3b:00.0", "0\n");
	put_device(root, "0000:d8:00.1", "4");
	CHECK(numa_topology_load(&t, root) == 0);
	CHECK(same_nodes(&t, (const int[]){ 0, 1, 4 }, 3));

	static const struct {
		const char *bus_id;
		int node;
	} cases[] = {
		/* the file's node, however the id is written */
		{ "0000:3b:00.0", 1 },
		{ "3b:00.0", 1 },
		{ "0000:3B:00.0", 1 },
		{ "3B:00.0", 1 },
		{ "0000:00:02.0", 0 },
		{ "00:02.0", 0 },
		{ "0000:18:00.0", 4 },
		{ "0000:D8:00.1", 4 },
		/* another PCI domain is another device */
		{ "0001:3b:00.0", 0 },
		/* sysfs does not know the node */
		{ "0000:af:00.0", -1 },
		{ "af:00.0", -1 },
		/* a node that has no memory here */
		{ "0000:5e:00.0", -1 },
		/* no such device */
		{ "0000:99:00.0", -1 },
		{ "99:00.0", -1 },
		{ "0000:3b:00.1", -1 },
		{ "0002:3b:00.0", -1 },
		/* a path, even one that leads to a real file */
		{ "0000:3b:00.0/../0000:3b:00.0", -1 },
		{ "../devices/0000:3b:00.0", -1 },
		{ "/0000:3b:00.0", -1 },
		{ "3b:00.0/", -1 },
		{ "..", -1 },
		{ "", -1 },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		int node = numa_node_of_device(&t, cases[i].bus_id);
		CHECK(node == cases[i].node, "bus id \"%s\": node %d, expected %d",
		      cases[i].bus_id, node, cases[i].node);
	}
	CHECK(numa_node_of_device(&t, NULL) == -1);

	/* The traversal above would find the file without the check. */
	char path[512];
	snprintf(path, sizeof(path), "%s" PCI_DIR "/0000:3b:00.0/../0000:3b:00.0/numa_node",
		 root);
	CHECK(access(path, R_OK) == 0);

	/* On a machine with one node, only node 0 counts. */
	root = new_root();
	put_device(root, "0000:3b:00.0", "1\n");
	put_device(root, "0000:00:02.0", "0\n");
	CHECK(numa_topology_load(&t, root) == 0);
	CHECK(numa_node_of_device(&t, "0000:3b:00.0") == -1);
	CHECK(numa_node_of_device(&t, "0000:00:02.0") == 0);
	CHECK(numa_node_of_device(&t, "00:02.0") == 0);
}

static int remove_one(const char *path, const struct stat *st, int type,
		      struct FTW *ftw)
{
	if (remove(path) < 0)
		fprintf(stderr, "cannot remove %s: %m\n", path);
	return 0;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	unsetenv("JOURNAL_STREAM");
	snprintf(base, sizeof(base), "%s/kvt-numa-XXXXXX",
		 tmp && tmp[0] == '/' && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(base)) {
		fprintf(stderr, "mkdtemp: %m\n");
		return 1;
	}

	test_lists();
	test_sources();
	test_devices();

	nftw(base, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	if (failures) {
		fprintf(stderr, "test-numa: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-numa: ok\n");
	return 0;
}
