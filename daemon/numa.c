/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "numa.h"

/* "0-1,4,6-7" → node ids. */
static int parse_list(const char *s, struct numa_topology *t)
{
	t->n_nodes = 0;
	while (*s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b = a;
		if (end == s || a < 0)
			return -EINVAL;
		s = end;
		if (*s == '-') {
			b = strtol(s + 1, &end, 10);
			if (end == s + 1 || b < a)
				return -EINVAL;
			s = end;
		}
		for (long n = a; n <= b; n++) {
			if (t->n_nodes >= NUMA_MAX_NODES || n >= 1024)
				return -E2BIG;
			t->nodes[t->n_nodes++] = (int)n;
		}
		if (*s == ',')
			s++;
	}
	return 0;
}

static int read_line(const char *root, const char *path, char *buf, size_t n)
{
	char full[512];
	snprintf(full, sizeof(full), "%s%s", root, path);
	FILE *f = fopen(full, "re");
	if (!f)
		return -errno;
	if (!fgets(buf, (int)n, f))
		buf[0] = 0;
	fclose(f);
	return 0;
}

int numa_topology_load(struct numa_topology *t, const char *root)
{
	char buf[512];
	int r;

	memset(t, 0, sizeof(*t));
	snprintf(t->root, sizeof(t->root), "%s", root ? root : "");
	r = read_line(t->root, "/sys/devices/system/node/has_memory", buf, sizeof(buf));
	if (r < 0)
		r = read_line(t->root, "/sys/devices/system/node/online", buf, sizeof(buf));
	if (r < 0) {
		/* No NUMA in this kernel: one node, 0. */
		t->n_nodes = 1;
		t->nodes[0] = 0;
		return 0;
	}
	r = parse_list(buf, t);
	if (r < 0 || t->n_nodes == 0)
		return log_error_errno(r < 0 ? r : -EINVAL,
				       "Cannot parse the NUMA node list '%s' under '%s'",
				       buf, t->root[0] ? t->root : "/");
	return 0;
}

bool numa_node_exists(const struct numa_topology *t, int node)
{
	for (int i = 0; i < t->n_nodes; i++)
		if (t->nodes[i] == node)
			return true;
	return false;
}

int numa_node_of_device(const struct numa_topology *t, const char *bus_id)
{
	char path[128], buf[32];

	if (!bus_id || !*bus_id || strchr(bus_id, '/'))
		return -1;
	/* Bus ids come as "3b:00.0" or "0000:3b:00.0"; sysfs names carry the
	 * domain, in lower case. */
	char id[40];
	snprintf(id, sizeof(id), "%s%s", strlen(bus_id) <= 7 ? "0000:" : "", bus_id);
	for (char *p = id; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", id);
	if (read_line(t->root, path, buf, sizeof(buf)) < 0)
		return -1;
	int node = atoi(buf);
	return node >= 0 && numa_node_exists(t, node) ? node : -1;
}
