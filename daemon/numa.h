/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NUMA topology as sysfs describes it: which memory nodes exist and which
 * node a PCI device (a client's GPU) sits on.  The root can be pointed at a
 * test directory holding the same files, so placement across several nodes
 * is tested on a machine that has one.
 */
#pragma once

#include <stdbool.h>

#define NUMA_MAX_NODES 64

struct numa_topology {
	char root[256];          /* "" for the real /sys */
	int n_nodes;
	int nodes[NUMA_MAX_NODES]; /* ids of nodes with memory */
};

/* Read <root>/sys/devices/system/node/has_memory (or online). */
int numa_topology_load(struct numa_topology *t, const char *root);
/* The node of a PCI device ("0000:3b:00.0"), or -1 when sysfs does not
 * say (no such device, or a machine without NUMA). */
int numa_node_of_device(const struct numa_topology *t, const char *bus_id);
bool numa_node_exists(const struct numa_topology *t, int node);
