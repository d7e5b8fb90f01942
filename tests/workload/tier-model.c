/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A host tier in front of an NVMe tier, driven as kvt-policy-sim drives
 * one tier (the daemon's order for kvt-engine's requests), with the NVMe
 * steps where kvtierd has them: write-back when a block leaves host,
 * staging into host before a leading NVMe hit is loaded.
 *
 * With no NVMe capacity every call on the host policy is the one-tier
 * simulator's, in the same order, so the host figures are the same; the
 * workload check compares them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "evict-s3fifo.h"
#include "evict.h"
#include "keyhash.h"
#include "tier-model.h"

enum { ABSENT, RESERVED, RESIDENT };

struct model {
	const struct trace *t;
	const struct tier_model_params *p;
	struct evict ev;
	uint64_t host_used, nvme_used;
	uint8_t *host;   /* [n_blocks]: ABSENT, RESERVED, RESIDENT */
	uint8_t *nvme;   /* [n_blocks]: 1 when NVMe holds a copy */
	struct evict_entry *ent;
	/* NVMe's LRU, a list over block ids with a sentinel at n_blocks:
	 * next runs from the most recent to the oldest.  A block being staged
	 * is off the list (pinned) but still counted in nvme_used. */
	uint32_t *prev, *next;
	struct tier_model_result res;
};

static void nvme_unlink(struct model *m, uint32_t id)
{
	m->next[m->prev[id]] = m->next[id];
	m->prev[m->next[id]] = m->prev[id];
}

static void nvme_link_front(struct model *m, uint32_t id)
{
	uint32_t s = m->t->n_blocks;
	m->next[id] = m->next[s];
	m->prev[id] = s;
	m->prev[m->next[s]] = id;
	m->next[s] = id;
}

/* Write back a block that leaves host, unless NVMe has it already. */
static void nvme_write_back(struct model *m, uint32_t id)
{
	uint32_t s = m->t->n_blocks;

	if (m->nvme[id])
		return; /* clean: its copy is still there */
	if (m->nvme_used >= m->p->nvme_cap) {
		uint32_t old = m->prev[s];
		if (!m->p->nvme_cap || old == s) {
			m->res.dropped++; /* no NVMe, or all of it being staged */
			return;
		}
		nvme_unlink(m, old);
		m->nvme[old] = 0;
		m->nvme_used--;
		m->res.nvme_evictions++;
	}
	m->nvme[id] = 1;
	m->nvme_used++;
	nvme_link_front(m, id);
	m->res.written++;
}

static void fresh_entry(struct model *m, uint32_t id)
{
	memset(&m->ent[id], 0, sizeof(m->ent[id]));
	m->ent[id].fp = id;
}

/* A host slot for id, evicting the policy's victim when host is full.
 * \return 0 or -ENOSPC when every resident block is pinned */
static int host_reserve(struct model *m, uint32_t id)
{
	if (m->host_used >= m->p->host_cap) {
		struct evict_entry *v = evict_victim(&m->ev);
		if (!v) {
			m->res.rejected++;
			return -ENOSPC;
		}
		uint32_t vid = (uint32_t)(v - m->ent);
		evict_evicted(&m->ev, v);
		fresh_entry(m, vid); /* the daemon frees the host block */
		m->host[vid] = ABSENT;
		m->host_used--;
		m->res.host_evictions++;
		nvme_write_back(m, vid);
	}
	m->host[id] = RESERVED;
	m->host_used++;
	return 0;
}

/* Reserve in order, commit from the tail, as kvt_store does. */
static void host_store(struct model *m, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (m->host[ids[i]] == ABSENT)
			(void)host_reserve(m, ids[i]);
	for (uint32_t i = n; i-- > 0;)
		if (m->host[ids[i]] == RESERVED) {
			m->host[ids[i]] = RESIDENT;
			evict_insert(&m->ev, &m->ent[ids[i]]);
		}
}

/* Lease the leading run: host blocks off the policy's list, NVMe blocks
 * off NVMe's list and staged into a host slot, head first.
 * \return the leading run that could be served: shorter than lead when
 * host had no slot left to stage into */
static uint32_t lease_leading(struct model *m, const uint32_t *ids, uint32_t lead)
{
	uint32_t served = lead;

	/* Pin everything first, so that staging never evicts a block of
	 * this run from either tier. */
	for (uint32_t i = 0; i < lead; i++) {
		if (m->host[ids[i]] == RESIDENT)
			evict_remove(&m->ev, &m->ent[ids[i]]);
		else
			nvme_unlink(m, ids[i]);
	}
	for (uint32_t i = 0; i < served; i++) {
		if (m->host[ids[i]] == RESIDENT)
			m->res.host_hits++;
		else if (host_reserve(m, ids[i]) < 0)
			served = i; /* the engine recomputes from here */
		else {
			m->res.nvme_hits++;
			m->res.read++;
		}
	}
	/* Back on NVMe's list, the head of the chain the most recent. */
	for (uint32_t i = lead; i-- > 0;)
		if (m->host[ids[i]] != RESIDENT)
			nvme_link_front(m, ids[i]);
	return served;
}

static void model_request(struct model *m, const struct trace_req *r)
{
	const uint32_t *ids = m->t->ids + r->off;
	uint32_t n = r->n_lookup, lead = 0;

	/* The lookup gives the policy its keys, head first (the daemon's
	 * evict_lookup, in chunks of 64), then touches every key resident in
	 * host, tail first. */
	for (uint32_t i = 0; i < n; i += 64) {
		uint64_t fp[64];
		uint32_t k = n - i < 64 ? n - i : 64;
		for (uint32_t j = 0; j < k; j++)
			fp[j] = ids[i + j];
		evict_lookup(&m->ev, fp, k, i == 0);
	}
	for (uint32_t i = n; i-- > 0;)
		if (m->host[ids[i]] == RESIDENT)
			evict_touch(&m->ev, &m->ent[ids[i]]);
	while (lead < n && (m->host[ids[lead]] == RESIDENT || m->nvme[ids[lead]]))
		lead++;
	uint32_t served = lease_leading(m, ids, lead);
	m->res.hits += served;
	for (uint32_t i = served; i < n; i++)
		m->res.stray += m->host[ids[i]] == RESIDENT || m->nvme[ids[i]];

	/* Releases put the leased run back, staged blocks as new ones. */
	for (uint32_t k = 0; k < lead; k++) {
		uint32_t i = m->p->release_reverse ? lead - 1 - k : k;
		if (m->host[ids[i]] == ABSENT)
			continue; /* not staged: it stays on NVMe only */
		m->host[ids[i]] = RESIDENT;
		evict_insert(&m->ev, &m->ent[ids[i]]);
	}

	host_store(m, ids + served, n - served);
	host_store(m, ids + n, r->n_new);
}

int tier_model_run(const struct trace *t, const struct tier_model_params *p,
		   struct tier_model_result *ret)
{
	/* A fixed secret: runs repeat, as in the one-tier simulator. */
	static struct keyhash hash;
	struct model m = {.t = t, .p = p};
	size_t nb = t->n_blocks;
	int r = -ENOMEM;

	memset(ret, 0, sizeof(*ret));
	keyhash_init_seed(&hash, 0);
	r = evict_init(&m.ev, p->policy, &hash);
	if (r < 0)
		goto out;
	r = -ENOMEM;
	struct evict_s3fifo_state *s3 = evict_state(&m.ev, &evict_policy_s3fifo);
	if (s3 && p->small_percent)
		s3->small_percent = p->small_percent;
	m.host = calloc(nb, 1);
	m.nvme = calloc(nb, 1);
	m.ent = malloc(nb * sizeof(*m.ent));
	m.prev = malloc((nb + 1) * sizeof(uint32_t));
	m.next = malloc((nb + 1) * sizeof(uint32_t));
	if (!m.host || !m.nvme || !m.ent || !m.prev || !m.next)
		goto out;
	for (uint32_t i = 0; i < t->n_blocks; i++)
		fresh_entry(&m, i);
	m.prev[nb] = m.next[nb] = t->n_blocks;
	for (uint64_t q = 0; q < t->n_req; q++)
		model_request(&m, &t->r[q]);
	*ret = m.res;
	r = 0;
out:
	evict_done(&m.ev);
	free(m.host);
	free(m.nvme);
	free(m.ent);
	free(m.prev);
	free(m.next);
	return r;
}

double tier_cost_saved(const struct tier_cost *c, const struct trace *t,
		       const struct tier_model_result *r)
{
	double per_block = (double)t->block_tokens / c->recompute_tokens_per_s;
	double host_load = c->block_bytes / c->host_bytes_per_s;
	double nvme_load = c->block_bytes / c->nvme_bytes_per_s + host_load;
	double saved = (double)(r->host_hits + r->nvme_hits) * per_block -
		       (double)r->host_hits * host_load - (double)r->nvme_hits * nvme_load;

	return t->lookups ? saved / ((double)t->lookups * per_block) : 0;
}
