/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which tenant a connecting process belongs to.  Pure policy over the
 * configuration and what the kernel says about the peer: the listening
 * socket it came through (a tenant's own socket, for containers where
 * every client is uid 0), its uid, then its groups.  A uid no tenant names
 * is a tenant of its own with the default quota, or refused.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"

struct peer {
	uid_t uid;
	gid_t gid;
	const gid_t *groups; /* supplementary (SO_PEERGROUPS) */
	uint32_t n_groups;
	const char *via_tenant; /* tenant of the listening socket, or NULL */
};

struct tenant_choice {
	char name[CONFIG_MAX_TENANT_NAME + 1];
	uint64_t quota;
	uint64_t nvme_quota; /* bytes of spill slots */
	bool configured;
	uid_t uid; /* for uid tenants */
};

/* -EACCES when the peer belongs to no tenant and unknown uids are refused. */
int tenancy_resolve(const struct config *c, const struct peer *p,
		    struct tenant_choice *ret);
/* Quota of a tenant under configuration c (after a reload, too). */
uint64_t tenancy_quota(const struct config *c, const struct tenant_choice *t);
/* Its share of the spill files: configured, else the same fraction of them
 * as its host quota is of the pool. */
uint64_t tenancy_nvme_quota(const struct config *c, const struct tenant_choice *t);
/* The operator's own uids: root and the daemon's. */
/* The codecs (1 << KVT_CODEC_*) the tenant's namespaces may use:
 * [tenant.NAME] codecs, every codec by default. */
uint32_t tenancy_codecs(const struct config *c, const struct tenant_choice *t);

bool tenancy_is_admin(uid_t uid);
/* Who may see every tenant and evict: the operator's uids and members of
 * [daemon] admin_groups, never through a tenant's own socket. */
bool tenancy_peer_is_admin(const struct config *c, const struct peer *p);
