/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier's tests: a real single-machine Ceph cluster
 * (tests/ceph/cluster.sh) in a private directory, shared by two kvtierd
 * instances that stand for two nodes.
 */
#pragma once

#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

struct ceph {
	char dir[128];
	char conf[192];
};

/* Start a cluster, or exit 77 saying why when the ceph packages are not
 * installed. */
void ceph_start(struct ceph *c);
void ceph_stop(struct ceph *c);
/* Run a shell command with CEPH_CONF set to the cluster's; its stdout
 * (up to size - 1 bytes) in out when out is not NULL.  \return its exit
 * status */
int ceph_sh(const struct ceph *c, char *out, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The pid of the cluster's OSD, or -1. */
int ceph_osd_pid(const struct ceph *c);
/* A [remote.NAME] section on pool kvtier (extra: more of its keys). */
void ceph_remote_section(const struct ceph *c, char *buf, size_t size, const char *name,
			 const char *extra);
/* daemon_start(), and the daemon is killed at exit if a check fails: d
 * must outlive main() (static). */
void node_start(struct daemon *d, const char *config);
/* Two nodes on the cluster, tenant alice (uid 0) with the remote section
 * "shared" (extra: more of its keys), both connected to it; a checker
 * client of each in *ret_ca and *ret_cb.  a and b: static, as node_start. */
void two_nodes(const struct ceph *c, const char *extra, struct daemon *a, struct daemon *b,
	       kvt_client **ret_ca, kvt_client **ret_cb);
/* The same, with config (a [pool] or [tenants] section) ahead of the
 * tenant's in each node's file. */
void two_nodes_with(const struct ceph *c, const char *config, const char *extra,
		    struct daemon *a, struct daemon *b, kvt_client **ret_ca, kvt_client **ret_cb);
/* Free the clients, stop both nodes (checking they exit 0) and the cluster. */
void two_nodes_stop(struct ceph *c, struct daemon *a, struct daemon *b, kvt_client *ca,
		    kvt_client *cb);
/* The daemon with its socket replaced by a tenant's own (for engine_run). */
struct daemon node_tenant_socket(const struct daemon *d, const char *tenant);
/* A numeric field of the record of kind whose string name_field is name
 * ("remote", "name", "a", "writes"); fails the test if absent. */
uint64_t stat_named(kvt_client *c, const char *kind, const char *name_field, const char *name,
		    const char *field);
/* key as 64 hex digits and a NUL, as object names and rados(8) spell it. */
void key_hex(const uint8_t *key, char *out);
