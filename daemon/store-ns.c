/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Namespaces: opened by their canonical identity (the same bytes in the
 * same tenant are the same namespace, which is how engine processes share
 * blocks), each with the slot class of its block size.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "fault.h"
#include "log.h"
#include "ledger.h"
#include "macro.h"
#include "store-private.h"
#include "store.h"

void store_ns_free(struct store *s, struct ns *ns)
{
	for (size_t i = 0; i < ns->index.cap; i++) {
		struct block *b = index_slot(&ns->index, i);
		if (b) {
			if (block_disk(b))
				slab_free(&s->disk_copies, b->disk_copy);
			slab_free(&s->blocks, b);
		}
	}
	index_free(&ns->index);
	free(ns->identity);
	free(ns);
}

struct ns *store_ns_get(struct tenant *t, uint32_t ns_id)
{
	if (ns_id == 0 || ns_id > t->n_ns)
		return NULL;
	return t->nss[ns_id - 1];
}

struct slot_class *store_class_get(struct store *s, struct tenant *t, uint64_t slot_bytes)
{
	for (uint32_t i = 0; i < t->n_classes; i++)
		if (t->classes[i]->slot_bytes == slot_bytes)
			return t->classes[i];
	struct slot_class *c = calloc(1, sizeof(*c));
	if (!c || !ARRAY_GROW(t->classes, t->n_classes, struct slot_class *)) {
		free(c);
		return NULL;
	}
	c->slot_bytes = slot_bytes;
	for (int b = 0; b < _EVICT_BANDS; b++)
		evict_lru_init(&c->dirty[b]);
	if (evict_init(&c->policy, s->config->eviction, &s->keyhash) < 0) {
		free(c);
		return NULL;
	}
	t->classes[t->n_classes++] = c;
	return c;
}

/* A namespace not yet in its tenant's table, on an error path. */
static void ns_discard(struct ns *ns)
{
	index_free(&ns->index);
	free(ns->identity);
	free(ns);
}
KVT_DEFINE_CLEANUP(struct ns, ns_discard)

/* \return 0 and the identity's fields and geometry, or a negative errno
 * with a sentence for the client in reason. */
static int identity_check(const uint8_t *identity, uint32_t len, struct kvt_identity *ret_id,
			  struct kvt_geometry *ret_geo, char *reason, size_t reason_size)
{
	int r = kvt_identity_decode(identity, len, ret_id);
	if (r < 0) {
		snprintf(reason, reason_size,
			 "namespace identity is not in canonical form (fields out of order, missing or out of range)");
		return -EINVAL;
	}
	r = kvt_identity_geometry(ret_id, ret_geo);
	if (r < 0) {
		snprintf(reason, reason_size,
			 r == -EFBIG ? "a block of this geometry exceeds 1 GiB; use fewer tokens per block"
				     : "KV heads must divide evenly among tensor-parallel ranks");
		return r;
	}
	return 0;
}

/* A block's size in the engine's own dtype: its size without the codec. */
static uint64_t logical_slot_bytes(const struct kvt_identity *id, const struct kvt_geometry *geo)
{
	struct kvt_identity plain = *id;
	struct kvt_geometry g;

	plain.codec = KVT_CODEC_NONE;
	return kvt_identity_geometry(&plain, &g) == 0 ? g.slot_bytes : geo->slot_bytes;
}

/* Whether the operator lets the tenant store blocks in this codec. */
static int codec_check(struct store *s, struct tenant *t, uint32_t codec, char *reason,
		       size_t reason_size)
{
	uint32_t allowed = tenancy_codecs(s->config, &t->choice);
	char names[64] = "";

	if (allowed & (1u << codec))
		return 0;
	for (uint32_t k = 0; k < KVT_CODEC_COUNT; k++)
		if (allowed & (1u << k))
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
				 names[0] ? ", " : "", kvt_codec_name(k));
	snprintf(reason, reason_size,
		 "tenant %s may store blocks only as %s ([tenant.%s] codecs), not %s: open the namespace with one of those codecs",
		 t->name, names, t->name, kvt_codec_name(codec));
	return -EPERM;
}

/* Whether the tenant may open one more namespace of this geometry. */
static int ns_limits_check(struct store *s, struct tenant *t, const struct kvt_geometry *geo,
			   char *reason, size_t reason_size)
{
	if (t->n_ns >= s->config->max_namespaces) {
		snprintf(reason, reason_size,
			 "tenant %s already has %u namespaces ([limits] namespaces_per_tenant)",
			 t->name, t->n_ns);
		return -EMFILE;
	}
	uint64_t ext = pool_extent_bytes(s->pool, geo->slot_bytes);
	if (ext > t->quota || ext > s->pool->capacity) {
		snprintf(reason, reason_size,
			 "one block of %llu KiB needs an extent of %llu MiB, more than the tenant quota (%llu MiB) or pool capacity allows",
			 (unsigned long long)(geo->slot_bytes >> 10),
			 (unsigned long long)(ext >> 20),
			 (unsigned long long)(t->quota >> 20));
		return -EFBIG;
	}
	return 0;
}

int store_ns_open(struct store *s, struct tenant *t, const uint8_t *identity,
		  uint32_t len, struct ns **ret, char *reason, size_t reason_size)
{
	struct kvt_identity id;
	struct kvt_geometry geo;

	TRY(identity_check(identity, len, &id, &geo, reason, reason_size));
	TRY(codec_check(s, t, id.codec, reason, reason_size));
	/* The daemon's own limit, not the wire's: a slot lies inside one
	 * io_uring fixed buffer. */
	if (geo.slot_bytes > CONFIG_SLOT_BYTES_MAX) {
		log_info("Tenant %s: namespace of model '%s' refused: one block is %llu MiB, more than the %llu MiB a slot can be (one io_uring buffer)",
			 t->name, id.model, (unsigned long long)(geo.slot_bytes >> 20),
			 (unsigned long long)(CONFIG_SLOT_BYTES_MAX >> 20));
		snprintf(reason, reason_size,
			 "a block of this geometry exceeds 1 GiB; use fewer tokens per block");
		return -EFBIG;
	}

	/* The same identity in the same tenant is the same namespace: that is
	 * how separate engine processes share blocks.  The decoder accepts
	 * only the canonical encoding, so equal identities are equal bytes. */
	for (uint32_t i = 0; i < t->n_ns; i++) {
		struct ns *o = t->nss[i];
		if (o->identity_len == len && !memcmp(o->identity, identity, len)) {
			o->opens++;
			*ret = o;
			return 0;
		}
	}

	TRY(ns_limits_check(s, t, &geo, reason, reason_size));
	_cleanup_(ns_discardp) struct ns *ns = fault_hit(FAULT_NS) ? NULL : calloc(1, sizeof(*ns));
	if (!ns || index_init(&ns->index, 1024, &s->keyhash) < 0 ||
	    !ARRAY_GROW(t->nss, t->n_ns, struct ns *))
		return -ENOMEM;
	/* A lookup reads the block's state after its key: up to its
	 * eviction entry, which only a touch reaches. */
	ns->index.entry_bytes = offsetof(struct block, evict);
	evict_lru_init(&ns->disk_lru);
	ns->cls = store_class_get(s, t, geo.slot_bytes);
	if (!ns->cls)
		return -ENOMEM;
	ns->identity = malloc(len);
	if (!ns->identity)
		return -ENOMEM;
	memcpy(ns->identity, identity, len);
	ns->identity_len = len;
	ns->scope = store_scope(s, t->name, identity, len);
	ns->tenant = t;
	ns->ident = id;
	ns->logical_slot_bytes = logical_slot_bytes(&id, &geo);
	ns->geo = geo;
	ns->opens = 1;
	ns->id = t->n_ns + 1;
	ns->ledger_no = LEDGER_NO_NS;
	if (s->ledger && ledger_ns_add(s->ledger, t->name, identity, len, &ns->ledger_no) < 0)
		log_warning("Namespace %s/%u: no memory for its record in the ledger: its blocks are not kept across a restart",
			    t->name, ns->id);
	log_info("Namespace %s/%u: model '%s', layers %u-%u, tp %u, %u tokens per block, %llu KiB per block%s%s",
		 t->name, ns->id, id.model, id.layer_first, id.layer_end, id.tp_size,
		 id.block_tokens, (unsigned long long)(geo.slot_bytes >> 10),
		 id.codec ? " stored as " : "", id.codec ? kvt_codec_name(id.codec) : "");
	t->nss[t->n_ns++] = ns;
	*ret = TAKE_PTR(ns);
	return 0;
}
