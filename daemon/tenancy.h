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
	bool configured;
	uid_t uid; /* for uid tenants */
};

/* -EACCES when the peer belongs to no tenant and unknown uids are refused. */
int tenancy_resolve(const struct config *c, const struct peer *p,
		    struct tenant_choice *ret);
/* Quota of a tenant under configuration c (after a reload, too). */
uint64_t tenancy_quota(const struct config *c, const struct tenant_choice *t);
bool tenancy_is_admin(uid_t uid);
