/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "tenancy.h"

bool tenancy_is_admin(uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

static bool has_id(const uint32_t *ids, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

uint64_t tenancy_quota(const struct config *c, const struct tenant_choice *t)
{
	uint64_t q;
	const struct tenant_conf *tc = t->configured ? config_tenant(c, t->name) : NULL;

	if (tc && tc->quota)
		q = tc->quota;
	else if (!t->configured && tenancy_is_admin(t->uid))
		q = c->capacity; /* the operator's own uid */
	else if (c->default_quota)
		q = c->default_quota;
	else
		q = c->capacity / 4;
	return q < c->capacity ? q : c->capacity;
}

uint64_t tenancy_nvme_quota(const struct config *c, const struct tenant_choice *t)
{
	const struct tenant_conf *tc = t->configured ? config_tenant(c, t->name) : NULL;
	uint64_t spill = 0, q;

	for (uint32_t i = 0; i < c->n_spills; i++)
		spill += c->spills[i].capacity;
	if (tc && tc->nvme_quota)
		q = tc->nvme_quota;
	else if (!t->configured && tenancy_is_admin(t->uid))
		q = spill;
	else if (c->default_nvme_quota)
		q = c->default_nvme_quota;
	else /* capacity is validated non-zero */
		q = (uint64_t)((unsigned __int128)spill * tenancy_quota(c, t) / c->capacity);
	return q < spill ? q : spill;
}

uint32_t tenancy_codecs(const struct config *c, const struct tenant_choice *t)
{
	const struct tenant_conf *tc = t->configured ? config_tenant(c, t->name) : NULL;

	return tc && tc->codecs ? tc->codecs : (1u << KVT_CODEC_COUNT) - 1;
}

bool tenancy_peer_is_admin(const struct config *c, const struct peer *p)
{
	if (p->via_tenant)
		return false;
	if (tenancy_is_admin(p->uid) || has_id(c->admin_gids, c->n_admin_gids, p->gid))
		return true;
	for (uint32_t g = 0; g < p->n_groups; g++)
		if (has_id(c->admin_gids, c->n_admin_gids, p->groups[g]))
			return true;
	return false;
}

int tenancy_resolve(const struct config *c, const struct peer *p, struct tenant_choice *ret)
{
	const struct tenant_conf *found = NULL;

	memset(ret, 0, sizeof(*ret));
	if (p->via_tenant)
		found = config_tenant(c, p->via_tenant);
	for (uint32_t i = 0; !found && i < c->n_tenants; i++)
		if (has_id(c->tenants[i].uids, c->tenants[i].n_uids, p->uid))
			found = &c->tenants[i];
	for (uint32_t i = 0; !found && i < c->n_tenants; i++) {
		const struct tenant_conf *t = &c->tenants[i];
		if (has_id(t->gids, t->n_gids, p->gid))
			found = t;
		for (uint32_t g = 0; !found && g < p->n_groups; g++)
			if (has_id(t->gids, t->n_gids, p->groups[g]))
				found = t;
	}
	if (found) {
		snprintf(ret->name, sizeof(ret->name), "%s", found->name);
		ret->configured = true;
		ret->uid = p->uid;
	} else {
		/* Root and the daemon's own uid are the operator: never refused. */
		if (c->refuse_unknown && !tenancy_is_admin(p->uid))
			return -EACCES;
		snprintf(ret->name, sizeof(ret->name), "uid:%u", (unsigned)p->uid);
		ret->uid = p->uid;
	}
	ret->quota = tenancy_quota(c, ret);
	ret->nvme_quota = tenancy_nvme_quota(c, ret);
	return 0;
}
