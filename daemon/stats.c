/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "fault.h"
#include "kvt-config.h"
#include "ledger.h"
#include "manager.h"
#include "nvme.h"
#include "process.h"
#include "remote.h"
#include "session.h"
#include "stats.h"

/* A reply is finished when it passes this size; a record is far smaller. */
#define STATS_CHUNK (256 * 1024)

struct emitter {
	const struct manager *m;
	const struct stats_query *q;
	struct kvt_buf b;
	struct stats_replies *out;
	int r;
};

static void emit_begin(struct emitter *e)
{
	kvt_msg_begin(&e->b, e->q->version, KVT_OP_STATS, KVT_FLAG_REPLY,
		      e->q->request_id);
}

/* The finished message in e->b joins the replies; e->b starts empty. */
static int emit_push(struct emitter *e)
{
	struct kvt_buf *v = realloc(e->out->v, (e->out->n + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	e->out->v = v;
	v[e->out->n++] = e->b;
	kvt_buf_init(&e->b);
	return 0;
}

/* A record that could not be built (its buffer could not grow) ends the
 * answer with an error: the client must neither take the records before it
 * for the whole list nor wait for a last reply that never comes. */
static void emit_fail(struct emitter *e)
{
	int error = e->b.error ? e->b.error : -ENOMEM;

	e->out->failed = true;
	kvt_enc_error(&e->b, e->q->version, KVT_OP_STATS, e->q->request_id, error,
		      "out of memory building the statistics");
	if (kvt_msg_finish(&e->b, 0) < 0 || emit_push(e) < 0)
		e->r = -ENOMEM;
}

static void emit_flush(struct emitter *e, bool last)
{
	if (e->out->failed)
		return;
	if (fault_hit(FAULT_STATS) && !e->b.error)
		e->b.error = -ENOMEM;
	if (e->b.error) {
		emit_fail(e);
		return;
	}
	if (!last && e->b.len < STATS_CHUNK)
		return;
	if (!last)
		kvt_msg_add_flags(&e->b, KVT_FLAG_MORE);
	if (kvt_msg_finish(&e->b, 0) == 0 && emit_push(e) < 0) {
		emit_fail(e);
		return;
	}
	if (!last)
		emit_begin(e);
}

void stats_replies_free(struct stats_replies *r)
{
	for (size_t i = 0; i < r->n; i++)
		kvt_buf_free(&r->v[i]);
	free(r->v);
	r->v = NULL;
	r->n = 0;
}

static uint64_t tenant_blocks(const struct tenant *t)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < t->n_ns; i++)
		n += t->nss[i]->blocks_resident;
	return n;
}

/* A tenant's fragmentation (fragmentation.h): its totals in ret and, if
 * ret_cls is not NULL, its classes' own ([t->n_classes], the caller's to
 * free).  \return 0, or -ENOMEM */
static int tenant_frag(const struct manager *m, const struct tenant *t, struct frag_tenant *ret,
		       struct frag_class **ret_in, struct frag_class_ratios **ret_cls)
{
	size_t n = t->n_classes ? t->n_classes : 1;
	struct frag_class *in = calloc(n, sizeof(*in));
	struct frag_class_ratios *out = calloc(n, sizeof(*out));
	uint64_t room;

	if (!in || !out) {
		free(in);
		free(out);
		return -ENOMEM;
	}
	store_frag_classes(&m->store, t, in, &room);
	frag_tenant_compute(in, t->n_classes, room, m->config->fragmentation_alert_ppm, out, ret);
	if (ret_in)
		*ret_in = in;
	else
		free(in);
	if (ret_cls)
		*ret_cls = out;
	else
		free(out);
	return 0;
}

static uint64_t tenant_starved(const struct tenant *t)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < t->n_classes; i++)
		n += t->classes[i]->starved;
	return n;
}

static uint64_t fragmented_tenants(const struct manager *m)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < m->store.n_tenants; i++) {
		struct frag_tenant f;
		if (tenant_frag(m, m->store.tenants[i], &f, NULL, NULL) == 0)
			n += f.fragmented;
	}
	return n;
}

static void emit_daemon(struct emitter *e, bool admin)
{
	const struct manager *m = e->m;
	uint64_t now = 0, used = 0, blocks = 0, nss = 0, handles = 0;

	sd_event_now(m->event, CLOCK_MONOTONIC, &now);
	for (uint32_t i = 0; i < m->store.n_tenants; i++) {
		struct tenant *t = m->store.tenants[i];
		used += store_tenant_used(t);
		blocks += tenant_blocks(t);
		nss += t->n_ns;
		handles += t->n_handles;
	}
	if (!admin) {
		kvt_rec_begin(&e->b, "daemon", 3);
		kvt_rec_str(&e->b, "version", KVT_VERSION);
		kvt_rec_u64(&e->b, "protocol", e->q->version);
		kvt_rec_u64(&e->b, "uptime_s", (now - m->started_usec) / 1000000);
		return;
	}
	struct nvme_stats ns;
	bool nvme = m->nvme != NULL;
	if (nvme)
		nvme_get_stats(m->nvme, &ns);
	kvt_rec_begin(&e->b, "daemon", nvme ? 42 + 22 : 42);
	kvt_rec_str(&e->b, "version", KVT_VERSION);
	kvt_rec_u64(&e->b, "protocol", e->q->version);
	kvt_rec_u64(&e->b, "pid", (uint64_t)getpid());
	kvt_rec_u64(&e->b, "uptime_s", (now - m->started_usec) / 1000000);
	kvt_rec_str(&e->b, "socket", m->config->socket_path);
	kvt_rec_u64(&e->b, "capacity", m->pool.capacity);
	kvt_rec_str(&e->b, "eviction", evict_policy_to_string(m->config->eviction));
	kvt_rec_u64(&e->b, "allocated", m->pool.allocated);
	kvt_rec_u64(&e->b, "used", used);
	kvt_rec_u64(&e->b, "free", m->pool.capacity > used ? m->pool.capacity - used : 0);
	kvt_rec_u64(&e->b, "extents", m->pool.n_extents);
	kvt_rec_u64(&e->b, "extents_hugetlb", m->pool.n_hugetlb);
	kvt_rec_u64(&e->b, "extents_thp", m->pool.n_thp);
	kvt_rec_u64(&e->b, "extents_locked", m->pool.n_locked);
	kvt_rec_u64(&e->b, "numa_nodes", (uint64_t)m->pool.topo.n_nodes);
	kvt_rec_u64(&e->b, "numa_fallbacks", m->pool.numa_fallbacks);
	kvt_rec_str(&e->b, "pages", m->pool.caps.page_reason);
	kvt_rec_str(&e->b, "lock", m->pool.caps.lock_reason);
	kvt_rec_u64(&e->b, "populate_ms", m->pool.populate_ns / 1000000);
	kvt_rec_u64(&e->b, "extents_ahead", m->pool.extents_ahead);
	kvt_rec_u64(&e->b, "ahead_bytes", m->pool.ahead.running ? m->pool.ahead.b.size : 0);
	kvt_rec_u64(&e->b, "tenants", m->store.n_tenants);
	kvt_rec_u64(&e->b, "namespaces", nss);
	kvt_rec_u64(&e->b, "blocks", blocks);
	kvt_rec_u64(&e->b, "handles", handles);
	kvt_rec_u64(&e->b, "clients", m->n_sessions);
	kvt_rec_u64(&e->b, "connections", m->c.accepted);
	kvt_rec_u64(&e->b, "refused", m->c.refused);
	kvt_rec_u64(&e->b, "malformed", m->c.malformed);
	kvt_rec_u64(&e->b, "handshake_timeouts", m->c.handshake_timeouts);
	kvt_rec_u64(&e->b, "quarantined", m->c.quarantined_handles);
	kvt_rec_u64(&e->b, "accept_failures", m->c.accept_failures);
	kvt_rec_u64(&e->b, "turns", m->turns.taken);
	kvt_rec_u64(&e->b, "turns_yielded", m->turns.yielded);
	kvt_rec_u64(&e->b, "turns_waiting", m->turns.n);
	kvt_rec_u64(&e->b, "dispatches", m->c.dispatches);
	kvt_rec_u64(&e->b, "dispatch_max_us", m->c.dispatch_max_ns / 1000);
	kvt_rec_u64(&e->b, "dispatches_slow", m->c.dispatches_slow);
	kvt_rec_u64(&e->b, "memory_waits", m->c.memory_waits);
	kvt_rec_u64(&e->b, "fragmentation_alert_ppm", m->config->fragmentation_alert_ppm);
	kvt_rec_u64(&e->b, "fragmented_tenants", fragmented_tenants(m));
	kvt_rec_u64(&e->b, "fragmentation_warnings", m->store.frag_warnings);
	if (!nvme)
		return;
	kvt_rec_str(&e->b, "nvme_engine", ns.engine);
	kvt_rec_str(&e->b, "nvme_engine_reason", ns.engine_reason);
	kvt_rec_u64(&e->b, "nvme_files", ns.files);
	kvt_rec_u64(&e->b, "nvme_files_failed", ns.files_failed);
	kvt_rec_u64(&e->b, "nvme_capacity", ns.capacity);
	kvt_rec_u64(&e->b, "nvme_used", ns.used);
	kvt_rec_u64(&e->b, "nvme_blocks", ns.blocks);
	kvt_rec_u64(&e->b, "nvme_writes", ns.writes);
	kvt_rec_u64(&e->b, "nvme_reads", ns.reads);
	kvt_rec_u64(&e->b, "nvme_write_bytes", ns.write_bytes);
	kvt_rec_u64(&e->b, "nvme_read_bytes", ns.read_bytes);
	kvt_rec_u64(&e->b, "nvme_in_flight", ns.in_flight);
	kvt_rec_u64(&e->b, "nvme_io_errors", ns.io_errors);
	kvt_rec_u64(&e->b, "nvme_checksum_errors", ns.checksum_errors);
	kvt_rec_u64(&e->b, "nvme_full", ns.disk_full);
	kvt_rec_u64(&e->b, "nvme_quota_full", ns.quota_full);
	kvt_rec_u64(&e->b, "nvme_refused", ns.refused);
	kvt_rec_u64(&e->b, "nvme_reclaims", ns.reclaims);
	kvt_rec_u64(&e->b, "nvme_recovered", ns.recovered);
	kvt_rec_u64(&e->b, "nvme_recovery_dropped", ns.recovery_dropped);
	kvt_rec_u64(&e->b, "nvme_recovery_ms", ns.recovery_ms);
	uint64_t drops = 0;
	for (uint32_t i = 0; i < m->store.n_tenants; i++)
		for (uint32_t j = 0; j < m->store.tenants[i]->n_ns; j++)
			drops += m->store.tenants[i]->nss[j]->c.dirty_drops;
	kvt_rec_u64(&e->b, "nvme_dirty_drops", drops);
}

/* Occupancy of one NUMA node: every extent whose memory is there. */
static void emit_node(struct emitter *e, int node)
{
	const struct manager *m = e->m;
	uint64_t extents = 0, allocated = 0, used = 0;

	for (uint32_t i = 0; i < m->store.n_tenants; i++) {
		struct tenant *t = m->store.tenants[i];
		for (uint32_t j = 0; j < t->n_classes; j++) {
			struct slot_class *c = t->classes[j];
			for (uint32_t k = 0; k < c->n_extents; k++) {
				struct extent *x = c->extents[k];
				if (x->node != node)
					continue;
				extents++;
				allocated += x->size;
				used += (uint64_t)(x->slots.n - x->slots.n_free) * x->slot_bytes;
			}
		}
	}
	kvt_rec_begin(&e->b, "node", 4);
	kvt_rec_i64(&e->b, "node", node);
	kvt_rec_u64(&e->b, "extents", extents);
	kvt_rec_u64(&e->b, "allocated", allocated);
	kvt_rec_u64(&e->b, "used", used);
}

/* The NVMe tier's recovery, also while it runs with clients served: the
 * daemon record has no room left (KVT_MAX_FIELDS). */
static void emit_recovery(struct emitter *e)
{
	struct nvme_stats ns;

	nvme_get_stats(e->m->nvme, &ns);
	kvt_rec_begin(&e->b, "recovery", 6);
	kvt_rec_u64(&e->b, "running", ns.recovering);
	kvt_rec_u64(&e->b, "regions", ns.recovering ? ns.recovery_regions : ns.recovery_regions_total);
	kvt_rec_u64(&e->b, "regions_total", ns.recovery_regions_total);
	kvt_rec_u64(&e->b, "blocks", ns.recovered);
	kvt_rec_u64(&e->b, "dropped", ns.recovery_dropped);
	kvt_rec_u64(&e->b, "ms", ns.recovery_ms);
}

/* What the host tier keeps for the next daemon, and what this one adopted
 * (keep.h, ledger.h, store-adopt.c). */
static void emit_keep(struct emitter *e)
{
	const struct manager *m = e->m;
	const struct store *s = &m->store;
	const struct store_adopted *a = &m->adopted;
	uint64_t fds = s->ledger != NULL;

	for (uint32_t i = 0; i < s->n_tenants; i++) {
		const struct tenant *t = s->tenants[i];
		fds += t->handle_ledger != NULL;
		for (uint32_t j = 0; j < t->n_classes; j++)
			for (uint32_t k = 0; k < t->classes[j]->n_extents; k++)
				fds += t->classes[j]->extents[k]->ledger != NULL;
	}
	kvt_rec_begin(&e->b, "keep", 13);
	kvt_rec_u64(&e->b, "kept", s->ledger != NULL);
	kvt_rec_u64(&e->b, "descriptors", fds);
	kvt_rec_u64(&e->b, "records", s->ledger ? s->ledger->writes : 0);
	kvt_rec_u64(&e->b, "stored", m->keep.stored);
	kvt_rec_u64(&e->b, "store_failures", m->keep.store_failures);
	kvt_rec_u64(&e->b, "adopted_extents", a->extents);
	kvt_rec_u64(&e->b, "adopted_bytes", a->bytes);
	kvt_rec_u64(&e->b, "adopted_blocks", a->blocks);
	kvt_rec_u64(&e->b, "adopted_leases", a->leases);
	kvt_rec_u64(&e->b, "adopted_reservations", a->reservations);
	kvt_rec_u64(&e->b, "adopted_bad", a->records_bad + a->extents_bad + a->handles_bad);
	kvt_rec_u64(&e->b, "adopted_lost_slots", a->slots_lost);
	kvt_rec_u64(&e->b, "adopt_ms", a->elapsed_ns / 1000000);
}

/* Erasures of NVMe copies given up (store-erasures.c), and the requests
 * that waited for them. */
static void emit_erasures(struct emitter *e)
{
	const struct store *s = &e->m->store;

	kvt_rec_begin(&e->b, "erasures", 4);
	kvt_rec_u64(&e->b, "erasing", s->erasing);
	kvt_rec_u64(&e->b, "erased", s->erased);
	kvt_rec_u64(&e->b, "failures", s->erase_failures);
	kvt_rec_u64(&e->b, "waits", e->m->c.erasure_waits);
}

#if KVT_HAVE_RADOS
/* One record per [remote.NAME]. */
static void emit_remote(struct emitter *e, unsigned i)
{
	struct remote_stats st;

	remote_get_stats(e->m->remote, i, &st);
	kvt_rec_begin(&e->b, "remote", 26);
	kvt_rec_str(&e->b, "name", st.name);
	kvt_rec_str(&e->b, "pool", st.pool);
	kvt_rec_str(&e->b, "state", remote_state_name(st.state));
	kvt_rec_str(&e->b, "reason", st.state_reason);
	kvt_rec_u64(&e->b, "capacity", st.capacity);
	kvt_rec_u64(&e->b, "used", st.used);
	kvt_rec_u64(&e->b, "objects", st.objects);
	kvt_rec_u64(&e->b, "writes", st.writes);
	kvt_rec_u64(&e->b, "write_bytes", st.write_bytes);
	kvt_rec_u64(&e->b, "reads", st.reads);
	kvt_rec_u64(&e->b, "read_bytes", st.read_bytes);
	kvt_rec_u64(&e->b, "reads_in_place", st.reads_in_place);
	kvt_rec_u64(&e->b, "misses", st.misses);
	kvt_rec_u64(&e->b, "rejected", st.rejected);
	kvt_rec_u64(&e->b, "errors", st.errors);
	kvt_rec_u64(&e->b, "timeouts", st.timeouts);
	kvt_rec_u64(&e->b, "degraded", st.degraded);
	kvt_rec_u64(&e->b, "skipped", st.skipped);
	kvt_rec_u64(&e->b, "in_flight", st.in_flight);
	kvt_rec_u64(&e->b, "lookup_rounds", st.lookup_rounds);
	kvt_rec_u64(&e->b, "read_usec", st.lookup_usec);
	kvt_rec_u64(&e->b, "trim_passes", st.trim_passes);
	kvt_rec_u64(&e->b, "trimmed", st.trimmed);
	kvt_rec_u64(&e->b, "trimmed_bytes", st.trimmed_bytes);
	kvt_rec_u64(&e->b, "up", st.state == REMOTE_UP);
	kvt_rec_u64(&e->b, "queue_depth", e->m->config->remotes[i].queue_depth);
}

/* The tenant's share of its remote tier, as fields of its record. */
static unsigned tenant_remote_fields(const struct emitter *e, const struct tenant *t,
				     struct remote_tenant_stats *ret)
{
	return e->m->remote && remote_tenant_stats(e->m->remote, t->name, ret) == 0 ? 6 : 0;
}

static void emit_tenant_remote(struct emitter *e, const struct remote_tenant_stats *r)
{
	kvt_rec_str(&e->b, "remote_tier", r->tier);
	kvt_rec_u64(&e->b, "remote_reads", r->reads);
	kvt_rec_u64(&e->b, "remote_read_bytes", r->read_bytes);
	kvt_rec_u64(&e->b, "remote_writes", r->writes);
	kvt_rec_u64(&e->b, "remote_write_bytes", r->write_bytes);
	kvt_rec_u64(&e->b, "remote_misses", r->misses);
}
#else
static unsigned tenant_remote_fields(const struct emitter *e, const struct tenant *t,
				     struct remote_tenant_stats *ret)
{
	return 0;
}
static void emit_tenant_remote(struct emitter *e, const struct remote_tenant_stats *r)
{
}
#endif

/* One record per slot class of the tenant: what its extents hold. */
static void emit_classes(struct emitter *e, const struct tenant *t)
{
	struct frag_class *in = NULL;
	struct frag_class_ratios *out = NULL;
	struct frag_tenant f;

	if (t->n_classes == 0)
		return;
	if (tenant_frag(e->m, t, &f, &in, &out) < 0) {
		e->b.error = -ENOMEM;
		emit_flush(e, false);
		return;
	}
	for (uint32_t i = 0; i < t->n_classes; i++) {
		const struct slot_class *c = t->classes[i];
		uint64_t empty = 0;
		for (uint32_t k = 0; k < c->n_extents; k++)
			empty += c->extents[k]->slots.n_free == c->extents[k]->slots.n;
		struct evict_report pr;
		evict_report(&c->policy, &pr);
		kvt_rec_begin(&e->b, "class", 20);
		kvt_rec_str(&e->b, "tenant", t->name);
		kvt_rec_u64(&e->b, "slot_bytes", c->slot_bytes);
		kvt_rec_u64(&e->b, "extents", c->n_extents);
		kvt_rec_u64(&e->b, "empty_extents", empty);
		kvt_rec_u64(&e->b, "extent_bytes", in[i].extent_bytes);
		kvt_rec_u64(&e->b, "slots", in[i].slots);
		kvt_rec_u64(&e->b, "free_slots", in[i].slots - in[i].used_slots);
		kvt_rec_u64(&e->b, "data_bytes", in[i].data_bytes);
		kvt_rec_u64(&e->b, "padding_bytes", out[i].padding_bytes);
		kvt_rec_u64(&e->b, "tail_bytes", out[i].tail_bytes);
		kvt_rec_u64(&e->b, "free_bytes", out[i].free_bytes);
		kvt_rec_u64(&e->b, "fill_ppm", out[i].fill_ppm);
		kvt_rec_u64(&e->b, "can_grow", out[i].can_grow);
		kvt_rec_u64(&e->b, "starved", c->starved);
		/* The engine's hints: evictable blocks above and below the
		 * default priority (evict.h's bands), across the class's
		 * namespaces. */
		kvt_rec_u64(&e->b, "retained", c->policy.band[EVICT_BAND_HIGH].n + c->policy.band[EVICT_BAND_TOP].n);
		kvt_rec_u64(&e->b, "demoted", c->policy.band[EVICT_BAND_LOW].n);
		/* What the policy measured of itself (lrfu-admit's shadows). */
		kvt_rec_u64(&e->b, "policy_lookups", pr.lookups);
		kvt_rec_u64(&e->b, "policy_switches", pr.switches);
		kvt_rec_u64(&e->b, "policy_filter", pr.filter);
		kvt_rec_u64(&e->b, "policy_weight", pr.weight);
		emit_flush(e, false);
	}
	free(in);
	free(out);
}

static void emit_tenant(struct emitter *e, const struct tenant *t)
{
	struct ns_counters sum;
	struct frag_tenant f = {.fill_ppm = FRAG_PPM};

	if (tenant_frag(e->m, t, &f, NULL, NULL) < 0)
		e->b.error = -ENOMEM;
	memset(&sum, 0, sizeof(sum));
	for (uint32_t i = 0; i < t->n_ns; i++) {
		const struct ns_counters *c = &t->nss[i]->c;
		sum.hits += c->hits;
		sum.misses += c->misses;
		sum.stores += c->stores;
		sum.loads += c->loads;
		sum.evictions += c->evictions;
	}
	struct remote_tenant_stats rs;
	unsigned remote = tenant_remote_fields(e, t, &rs);
	kvt_rec_begin(&e->b, "tenant", (t->store->nvme ? 22 : 18) + remote);
	kvt_rec_u64(&e->b, "id", t->id);
	kvt_rec_str(&e->b, "name", t->name);
	kvt_rec_u64(&e->b, "uid", t->uid);
	kvt_rec_u64(&e->b, "quota", t->quota);
	kvt_rec_u64(&e->b, "allocated", t->allocated);
	kvt_rec_u64(&e->b, "used", store_tenant_used(t));
	kvt_rec_u64(&e->b, "blocks", tenant_blocks(t));
	kvt_rec_u64(&e->b, "namespaces", t->n_ns);
	kvt_rec_u64(&e->b, "clients", t->n_sessions);
	kvt_rec_u64(&e->b, "handles", t->n_handles);
	kvt_rec_u64(&e->b, "hits", sum.hits);
	kvt_rec_u64(&e->b, "misses", sum.misses);
	kvt_rec_u64(&e->b, "stores", sum.stores);
	kvt_rec_u64(&e->b, "evictions", sum.evictions);
	kvt_rec_u64(&e->b, "fill_ppm", f.fill_ppm);
	kvt_rec_u64(&e->b, "stranded_bytes", f.stranded_bytes);
	kvt_rec_u64(&e->b, "starved", tenant_starved(t));
	kvt_rec_u64(&e->b, "fragmented", f.fragmented);
	if (t->store->nvme) {
		kvt_rec_u64(&e->b, "nvme_quota", t->nvme_quota);
		kvt_rec_u64(&e->b, "nvme_used", t->disk_bytes);
		kvt_rec_u64(&e->b, "nvme_regions", nvme_tenant_regions(t->store->nvme, t->name));
		kvt_rec_u64(&e->b, "nvme_refused", t->nvme_refused);
	}
	if (remote)
		emit_tenant_remote(e, &rs);
}

static void emit_ns(struct emitter *e, const struct ns *ns)
{
	const struct ns_counters *c = &ns->c;
	kvt_rec_begin(&e->b, "namespace", 38);
	kvt_rec_str(&e->b, "tenant", ns->tenant->name);
	kvt_rec_u64(&e->b, "id", ns->id);
	kvt_rec_str(&e->b, "model", ns->ident.model);
	kvt_rec_u64(&e->b, "layer_first", ns->ident.layer_first);
	kvt_rec_u64(&e->b, "layer_end", ns->ident.layer_end);
	kvt_rec_u64(&e->b, "tp", ns->ident.tp_size);
	kvt_rec_u64(&e->b, "block_tokens", ns->geo.block_tokens);
	kvt_rec_u64(&e->b, "block_bytes", ns->geo.slot_bytes);
	kvt_rec_str(&e->b, "codec", kvt_codec_name(ns->ident.codec));
	kvt_rec_u64(&e->b, "logical_block_bytes", ns->logical_slot_bytes);
	kvt_rec_u64(&e->b, "blocks", ns->blocks_resident);
	kvt_rec_u64(&e->b, "reserved", ns->blocks_reserved);
	kvt_rec_u64(&e->b, "bytes", ns->blocks_resident * ns->geo.slot_bytes);
	kvt_rec_u64(&e->b, "logical_bytes", ns->blocks_resident * ns->logical_slot_bytes);
	kvt_rec_u64(&e->b, "lookups", c->lookups);
	kvt_rec_u64(&e->b, "lookup_keys", c->lookup_keys);
	kvt_rec_u64(&e->b, "hits", c->hits);
	kvt_rec_u64(&e->b, "misses", c->misses);
	kvt_rec_u64(&e->b, "stores", c->stores);
	kvt_rec_u64(&e->b, "store_bytes", c->store_bytes);
	kvt_rec_u64(&e->b, "loads", c->loads);
	kvt_rec_u64(&e->b, "load_bytes", c->load_bytes);
	kvt_rec_u64(&e->b, "evictions", c->evictions);
	kvt_rec_u64(&e->b, "aborts", c->aborts);
	kvt_rec_u64(&e->b, "deletes", c->deletes);
	kvt_rec_u64(&e->b, "rejected", c->rejected);
	kvt_rec_u64(&e->b, "opens", ns->opens);
	kvt_rec_u64(&e->b, "spilled", ns->blocks_spilled);
	kvt_rec_u64(&e->b, "spills", c->spills);
	kvt_rec_u64(&e->b, "restores", c->restores);
	kvt_rec_u64(&e->b, "disk_hits", c->disk_hits);
	kvt_rec_u64(&e->b, "dirty_drops", c->dirty_drops);
	kvt_rec_u64(&e->b, "hints", c->hints);
	kvt_rec_u64(&e->b, "demotions", c->demotions);
	kvt_rec_u64(&e->b, "demoted_evictions", c->demoted_evictions);
	kvt_rec_u64(&e->b, "lapsed", c->lapsed);
	kvt_rec_u64(&e->b, "partial_drops", c->partial_drops);
	kvt_rec_u64(&e->b, "deferred", c->deferred);
}

static void emit_client(struct emitter *e, const struct session *c)
{
	uint64_t now = 0;
	sd_event_now(c->m->event, CLOCK_MONOTONIC, &now);
	kvt_rec_begin(&e->b, "client", 10);
	kvt_rec_u64(&e->b, "id", c->id);
	kvt_rec_u64(&e->b, "pid", (uint64_t)c->pid);
	kvt_rec_u64(&e->b, "uid", c->uid);
	kvt_rec_str(&e->b, "tenant", c->tenant ? c->tenant->name : "-");
	kvt_rec_str(&e->b, "name", c->name);
	kvt_rec_u64(&e->b, "protocol", c->version);
	kvt_rec_u64(&e->b, "requests", c->requests);
	kvt_rec_u64(&e->b, "queued_bytes", c->conn.out_bytes);
	kvt_rec_u64(&e->b, "handles", c->process ? c->process->n_handles : 0);
	kvt_rec_u64(&e->b, "connected_s", (now - c->connected_usec) / 1000000);
}

int stats_build(const struct manager *m, const struct stats_query *q,
		struct stats_replies *ret)
{
	const struct session *s = q->asker;
	const struct session *c;
	bool admin = q->admin;
	struct emitter e = {.m = m, .q = q, .out = ret};

	memset(ret, 0, sizeof(*ret));
	kvt_buf_init(&e.b);
	emit_begin(&e);
	if (q->what & KVT_STATS_DAEMON) {
		emit_daemon(&e, admin);
		emit_flush(&e, false);
		for (int i = 0; admin && i < m->pool.topo.n_nodes; i++) {
			emit_node(&e, m->pool.topo.nodes[i]);
			emit_flush(&e, false);
		}
		if (admin && m->pool.numa_reason[0]) {
			/* Its own record: the daemon's has as many fields as a
			 * record may. */
			kvt_rec_begin(&e.b, "numa", 2);
			kvt_rec_i64(&e.b, "node", m->pool.numa_reason_node);
			kvt_rec_str(&e.b, "reason", m->pool.numa_reason);
			emit_flush(&e, false);
		}
		if (admin) {
			emit_keep(&e);
			emit_flush(&e, false);
			/* The loop's turns beyond the daemon record's. */
			kvt_rec_begin(&e.b, "loop", 2);
			kvt_rec_u64(&e.b, "turns_cut", m->turns.cut);
			kvt_rec_u64(&e.b, "turns_cut_work_us", m->turns.cut_ns / 1000);
			emit_flush(&e, false);
		}
		if (admin && m->nvme) {
			emit_recovery(&e);
			emit_flush(&e, false);
			emit_erasures(&e);
			emit_flush(&e, false);
		}
#if KVT_HAVE_RADOS
		for (unsigned i = 0; admin && i < remote_count(m->remote); i++) {
			emit_remote(&e, i);
			emit_flush(&e, false);
		}
#endif
	}
	for (uint32_t i = 0; i < m->store.n_tenants; i++) {
		const struct tenant *t = m->store.tenants[i];
		if (!admin && t != s->tenant)
			continue;
		if (q->what & KVT_STATS_TENANTS) {
			emit_tenant(&e, t);
			emit_flush(&e, false);
			emit_classes(&e, t);
		}
		if (q->what & KVT_STATS_NAMESPACES)
			for (uint32_t j = 0; j < t->n_ns; j++) {
				emit_ns(&e, t->nss[j]);
				emit_flush(&e, false);
			}
	}
	if (q->what & KVT_STATS_CLIENTS)
		LIST_FOREACH(c, &m->sessions, link) {
			if (c->dead ||
			    (!admin && c != s && (!s->tenant || c->tenant != s->tenant)))
				continue;
			emit_client(&e, c);
			emit_flush(&e, false);
		}
	emit_flush(&e, true);
	kvt_buf_free(&e.b);
	return e.r;
}
