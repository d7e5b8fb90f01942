/* SPDX-License-Identifier: Apache-2.0 */
/* Encoders and validating decoders of every message payload. */
#include <string.h>

#include "kvt-proto.h"
#include "macro.h"


void kvt_enc_hello_req(struct kvt_buf *b, uint64_t rid,
		       const struct kvt_hello_req *m)
{
	/* HELLO always travels in the oldest framing version, so any daemon
	 * can read it and answer with the version it picked. */
	kvt_msg_begin(b, KVT_PROTO_VERSION_MIN, KVT_OP_HELLO, 0, rid);
	kvt_put_u32(b, m->min_version);
	kvt_put_u32(b, m->max_version);
	kvt_put_u64(b, m->features);
	kvt_put_str(b, m->name);
	kvt_put_str(b, m->pci_bus_id);
}

int kvt_dec_hello_req(struct kvt_cursor *c, struct kvt_hello_req *ret)
{
	TRY(kvt_get_u32(c, &ret->min_version));
	TRY(kvt_get_u32(c, &ret->max_version));
	TRY(kvt_get_u64(c, &ret->features));
	TRY(kvt_get_str(c, KVT_MAX_NAME, ret->name, sizeof(ret->name)));
	TRY(kvt_get_str(c, KVT_MAX_BUS_ID, ret->pci_bus_id, sizeof(ret->pci_bus_id)));
	/* A bus id names a sysfs directory: keep it to its alphabet. */
	for (const char *p = ret->pci_bus_id; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
		      (*p >= 'A' && *p <= 'F') || *p == ':' || *p == '.'))
			return -EBADMSG;
	if (ret->min_version > ret->max_version)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_hello_rep(struct kvt_buf *b, uint16_t version, uint64_t rid,
		       const struct kvt_hello_rep *m)
{
	kvt_msg_begin(b, version, KVT_OP_HELLO, KVT_FLAG_REPLY, rid);
	kvt_put_u32(b, m->version);
	kvt_put_u64(b, m->features);
	kvt_put_u32(b, m->tenant_id);
	kvt_put_u32(b, m->session_id);
	kvt_put_u32(b, m->max_keys);
	kvt_put_u32(b, m->max_handles);
	kvt_put_u64(b, m->quota_bytes);
	kvt_put_u32(b, (uint32_t)m->numa_node);
}

int kvt_dec_hello_rep(struct kvt_cursor *c, struct kvt_hello_rep *ret)
{
	TRY(kvt_get_u32(c, &ret->version));
	TRY(kvt_get_u64(c, &ret->features));
	TRY(kvt_get_u32(c, &ret->tenant_id));
	TRY(kvt_get_u32(c, &ret->session_id));
	TRY(kvt_get_u32(c, &ret->max_keys));
	TRY(kvt_get_u32(c, &ret->max_handles));
	TRY(kvt_get_u64(c, &ret->quota_bytes));
	uint32_t node;
	TRY(kvt_get_u32(c, &node));
	ret->numa_node = (int32_t)node;
	if (ret->numa_node < -1 || ret->numa_node > 1023)
		return -EBADMSG;
	if (ret->max_keys == 0 || ret->max_keys > KVT_MAX_KEYS)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_ns_open_req(struct kvt_buf *b, uint16_t version, uint64_t rid,
			 const struct kvt_ns_open_req *m)
{
	kvt_msg_begin(b, version, KVT_OP_NS_OPEN, 0, rid);
	kvt_put_u32(b, m->identity_len);
	kvt_put_bytes(b, m->identity, m->identity_len);
}

int kvt_dec_ns_open_req(struct kvt_cursor *c, struct kvt_ns_open_req *ret)
{
	TRY(kvt_get_u32(c, &ret->identity_len));
	if (ret->identity_len == 0 || ret->identity_len > KVT_MAX_IDENTITY)
		return -EBADMSG;
	TRY(kvt_get_bytes(c, ret->identity_len, &ret->identity));
	return kvt_cursor_end(c);
}

void kvt_enc_ns_open_rep(struct kvt_buf *b, uint16_t version, uint64_t rid,
			 const struct kvt_ns_open_rep *m)
{
	kvt_msg_begin(b, version, KVT_OP_NS_OPEN, KVT_FLAG_REPLY, rid);
	kvt_put_u32(b, m->ns_id);
	kvt_put_u32(b, m->shards);
	kvt_put_u32(b, m->block_tokens);
	kvt_put_u64(b, m->shard_bytes);
	kvt_put_u64(b, m->shard_stride);
	kvt_put_u64(b, m->slot_bytes);
}

int kvt_dec_ns_open_rep(struct kvt_cursor *c, struct kvt_ns_open_rep *ret)
{
	TRY(kvt_get_u32(c, &ret->ns_id));
	TRY(kvt_get_u32(c, &ret->shards));
	TRY(kvt_get_u32(c, &ret->block_tokens));
	TRY(kvt_get_u64(c, &ret->shard_bytes));
	TRY(kvt_get_u64(c, &ret->shard_stride));
	TRY(kvt_get_u64(c, &ret->slot_bytes));
	if (ret->shards == 0 || ret->shards > KVT_MAX_TP ||
	    ret->shard_bytes == 0 || ret->shard_stride < ret->shard_bytes ||
	    ret->slot_bytes / ret->shards < ret->shard_stride)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_keys_req(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		      uint64_t rid, const struct kvt_keys_req *m)
{
	kvt_msg_begin(b, version, opcode, 0, rid);
	kvt_put_u32(b, m->ns_id);
	kvt_put_u32(b, m->arg);
	kvt_put_u32(b, m->n);
	kvt_put_bytes(b, m->keys, (size_t)m->n * KVT_KEY_SIZE);
}

int kvt_dec_keys_req(struct kvt_cursor *c, uint32_t max_keys,
		     struct kvt_keys_req *ret)
{
	TRY(kvt_get_u32(c, &ret->ns_id));
	TRY(kvt_get_u32(c, &ret->arg));
	TRY(kvt_get_u32(c, &ret->n));
	if (ret->n > max_keys || ret->n > KVT_MAX_KEYS)
		return -E2BIG;
	TRY(kvt_get_bytes(c, (size_t)ret->n * KVT_KEY_SIZE, &ret->keys));
	return kvt_cursor_end(c);
}

void kvt_enc_lookup_rep(struct kvt_buf *b, uint16_t version, uint64_t rid,
			const struct kvt_lookup_rep *m)
{
	kvt_msg_begin(b, version, KVT_OP_LOOKUP, KVT_FLAG_REPLY, rid);
	kvt_put_u32(b, m->n);
	kvt_put_u32(b, m->leading);
	kvt_put_bytes(b, m->states, m->n);
}

int kvt_dec_lookup_rep(struct kvt_cursor *c, struct kvt_lookup_rep *ret)
{
	TRY(kvt_get_u32(c, &ret->n));
	TRY(kvt_get_u32(c, &ret->leading));
	if (ret->n > KVT_MAX_KEYS || ret->leading > ret->n)
		return -EBADMSG;
	TRY(kvt_get_bytes(c, ret->n, &ret->states));
	for (uint32_t i = 0; i < ret->n; i++)
		if (ret->states[i] > KVT_STATE_PENDING)
			return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_slots_rep(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		       uint64_t rid, const struct kvt_slot *slots, uint32_t n)
{
	kvt_msg_begin(b, version, opcode, KVT_FLAG_REPLY, rid);
	kvt_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		kvt_put_u32(b, (uint32_t)slots[i].status);
		kvt_put_u64(b, slots[i].handle);
		kvt_put_u32(b, slots[i].extent_id);
		kvt_put_u64(b, slots[i].offset);
	}
}

int kvt_dec_slots_rep(struct kvt_cursor *c, struct kvt_slot *ret, uint32_t max,
		      uint32_t *ret_n)
{
	uint32_t n;
	TRY(kvt_get_u32(c, &n));
	if (n > max)
		return -EBADMSG;
	if ((size_t)n * 24 != c->left)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t st;
		TRY(kvt_get_u32(c, &st));
		ret[i].status = (int32_t)st;
		TRY(kvt_get_u64(c, &ret[i].handle));
		TRY(kvt_get_u32(c, &ret[i].extent_id));
		TRY(kvt_get_u64(c, &ret[i].offset));
		if (ret[i].status > 0 || ret[i].status < -4095)
			return -EBADMSG;
	}
	*ret_n = n;
	return kvt_cursor_end(c);
}

void kvt_enc_handles_req(struct kvt_buf *b, uint16_t version, uint16_t opcode,
			 uint64_t rid, const struct kvt_handle_arg *h,
			 uint32_t n)
{
	kvt_msg_begin(b, version, opcode, 0, rid);
	kvt_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		kvt_put_u64(b, h[i].handle);
		kvt_put_u8(b, h[i].flag);
	}
}

int kvt_dec_handles_req(struct kvt_cursor *c, uint32_t max,
			struct kvt_handle_arg *ret, uint32_t *ret_n)
{
	uint32_t n;
	TRY(kvt_get_u32(c, &n));
	if (n > max || n > KVT_MAX_KEYS)
		return -E2BIG;
	if ((size_t)n * 9 != c->left)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		TRY(kvt_get_u64(c, &ret[i].handle));
		TRY(kvt_get_u8(c, &ret[i].flag));
		if (ret[i].flag > 1)
			return -EBADMSG;
	}
	*ret_n = n;
	return kvt_cursor_end(c);
}

void kvt_enc_status_rep(struct kvt_buf *b, uint16_t version, uint16_t opcode,
			uint64_t rid, const int32_t *status, uint32_t n)
{
	kvt_msg_begin(b, version, opcode, KVT_FLAG_REPLY, rid);
	kvt_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++)
		kvt_put_u32(b, (uint32_t)status[i]);
}

int kvt_dec_status_rep(struct kvt_cursor *c, int32_t *ret, uint32_t max,
		       uint32_t *ret_n)
{
	uint32_t n;
	TRY(kvt_get_u32(c, &n));
	if (n > max || (size_t)n * 4 != c->left)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t v;
		TRY(kvt_get_u32(c, &v));
		ret[i] = (int32_t)v;
		if (ret[i] < -4095)
			return -EBADMSG;
	}
	*ret_n = n;
	return kvt_cursor_end(c);
}

void kvt_enc_evict_req(struct kvt_buf *b, uint16_t version, uint64_t rid,
		       const struct kvt_evict_req *m)
{
	kvt_msg_begin(b, version, KVT_OP_ADMIN_EVICT, 0, rid);
	kvt_put_u32(b, m->tenant_id);
	kvt_put_u32(b, m->ns_id);
	kvt_put_u32(b, m->flags);
}

int kvt_dec_evict_req(struct kvt_cursor *c, struct kvt_evict_req *ret)
{
	TRY(kvt_get_u32(c, &ret->tenant_id));
	TRY(kvt_get_u32(c, &ret->ns_id));
	TRY(kvt_get_u32(c, &ret->flags));
	if (ret->flags & ~(uint32_t)KVT_EVICT_DROP)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_count_rep(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		       uint64_t rid, uint64_t count)
{
	kvt_msg_begin(b, version, opcode, KVT_FLAG_REPLY, rid);
	kvt_put_u64(b, count);
}

int kvt_dec_count_rep(struct kvt_cursor *c, uint64_t *ret)
{
	TRY(kvt_get_u64(c, ret));
	return kvt_cursor_end(c);
}

void kvt_enc_stats_req(struct kvt_buf *b, uint16_t version, uint64_t rid,
		       uint32_t what)
{
	kvt_msg_begin(b, version, KVT_OP_STATS, 0, rid);
	kvt_put_u32(b, what);
}

int kvt_dec_stats_req(struct kvt_cursor *c, uint32_t *ret_what)
{
	TRY(kvt_get_u32(c, ret_what));
	if (*ret_what & ~(uint32_t)KVT_STATS_ALL)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_extent_note(struct kvt_buf *b, uint16_t version,
			 const struct kvt_extent_note *m)
{
	kvt_msg_begin(b, version, KVT_OP_EXTENT_ADDED, KVT_FLAG_NOTIFY, 0);
	kvt_put_u32(b, m->extent_id);
	kvt_put_u32(b, m->flags);
	kvt_put_u64(b, m->size);
	kvt_put_u64(b, m->slot_bytes);
	kvt_put_u32(b, (uint32_t)m->numa_node);
}

int kvt_dec_extent_note(struct kvt_cursor *c, struct kvt_extent_note *ret)
{
	uint32_t node;
	TRY(kvt_get_u32(c, &ret->extent_id));
	TRY(kvt_get_u32(c, &ret->flags));
	TRY(kvt_get_u64(c, &ret->size));
	TRY(kvt_get_u64(c, &ret->slot_bytes));
	TRY(kvt_get_u32(c, &node));
	ret->numa_node = (int32_t)node;
	if (ret->numa_node < -1 || ret->numa_node > 1023 || ret->size == 0 ||
	    ret->slot_bytes == 0 ||
	    ret->slot_bytes > ret->size || (ret->size & 4095))
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_extent_retired(struct kvt_buf *b, uint16_t version, uint32_t id)
{
	kvt_msg_begin(b, version, KVT_OP_EXTENT_RETIRED, KVT_FLAG_NOTIFY, 0);
	kvt_put_u32(b, id);
}

int kvt_dec_extent_retired(struct kvt_cursor *c, uint32_t *ret_id)
{
	TRY(kvt_get_u32(c, ret_id));
	return kvt_cursor_end(c);
}

void kvt_enc_block_ready(struct kvt_buf *b, uint16_t version, uint32_t ns_id,
			 const uint8_t *key)
{
	kvt_msg_begin(b, version, KVT_OP_BLOCK_READY, KVT_FLAG_NOTIFY, 0);
	kvt_put_u32(b, ns_id);
	kvt_put_bytes(b, key, KVT_KEY_SIZE);
}

int kvt_dec_block_ready(struct kvt_cursor *c, uint32_t *ret_ns, const uint8_t **ret_key)
{
	TRY(kvt_get_u32(c, ret_ns));
	TRY(kvt_get_bytes(c, KVT_KEY_SIZE, ret_key));
	return kvt_cursor_end(c);
}

void kvt_enc_run_ready(struct kvt_buf *b, uint16_t version, const struct kvt_run_ready *m)
{
	kvt_msg_begin(b, version, KVT_OP_RUN_READY, KVT_FLAG_NOTIFY, 0);
	kvt_put_u32(b, m->ns_id);
	kvt_put_u32(b, m->n_keys);
	kvt_put_u32(b, m->n_served);
	kvt_put_bytes(b, m->key, KVT_KEY_SIZE);
}

int kvt_dec_run_ready(struct kvt_cursor *c, struct kvt_run_ready *ret)
{
	TRY(kvt_get_u32(c, &ret->ns_id));
	TRY(kvt_get_u32(c, &ret->n_keys));
	TRY(kvt_get_u32(c, &ret->n_served));
	TRY(kvt_get_bytes(c, KVT_KEY_SIZE, &ret->key));
	if (ret->n_served > ret->n_keys)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_settled(struct kvt_buf *b, uint16_t version, const struct kvt_settled *m)
{
	kvt_msg_begin(b, version, KVT_OP_SETTLED, KVT_FLAG_NOTIFY, 0);
	kvt_put_u64(b, m->request_id);
	kvt_put_u32(b, m->ns_id);
	kvt_put_u32(b, m->n_keys);
	kvt_put_u32(b, m->n_host);
}

int kvt_dec_settled(struct kvt_cursor *c, struct kvt_settled *ret)
{
	TRY(kvt_get_u64(c, &ret->request_id));
	TRY(kvt_get_u32(c, &ret->ns_id));
	TRY(kvt_get_u32(c, &ret->n_keys));
	TRY(kvt_get_u32(c, &ret->n_host));
	if (ret->n_keys == 0 || ret->n_keys > KVT_MAX_KEYS || ret->n_host > ret->n_keys)
		return -EBADMSG;
	return kvt_cursor_end(c);
}

void kvt_enc_error(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		   uint64_t rid, int error, const char *reason)
{
	kvt_msg_begin(b, version, opcode, KVT_FLAG_REPLY | KVT_FLAG_ERROR, rid);
	kvt_put_u32(b, (uint32_t)(error < 0 ? error : -error));
	size_t n = reason ? strnlen(reason, KVT_MAX_REASON) : 0;
	kvt_put_u16(b, (uint16_t)n);
	kvt_put_bytes(b, reason, n);
}

int kvt_dec_error(struct kvt_cursor *c, struct kvt_error_rep *ret)
{
	uint32_t e;
	TRY(kvt_get_u32(c, &e));
	ret->error = (int32_t)e;
	if (ret->error >= 0 || ret->error < -4095)
		return -EBADMSG;
	TRY(kvt_get_str(c, KVT_MAX_REASON, ret->reason, sizeof(ret->reason)));
	return kvt_cursor_end(c);
}

/* ---- records ------------------------------------------------------ */

static void put_name(struct kvt_buf *b, const char *name)
{
	size_t n = strnlen(name, KVT_MAX_FIELD_NAME);
	kvt_put_u8(b, (uint8_t)n);
	kvt_put_bytes(b, name, n);
}

void kvt_rec_begin(struct kvt_buf *b, const char *kind, uint16_t n_fields)
{
	put_name(b, kind);
	kvt_put_u16(b, n_fields);
}

void kvt_rec_u64(struct kvt_buf *b, const char *name, uint64_t v)
{
	kvt_put_u8(b, KVT_FIELD_U64);
	put_name(b, name);
	kvt_put_u64(b, v);
}

void kvt_rec_i64(struct kvt_buf *b, const char *name, int64_t v)
{
	kvt_put_u8(b, KVT_FIELD_I64);
	put_name(b, name);
	kvt_put_u64(b, (uint64_t)v);
}

void kvt_rec_str(struct kvt_buf *b, const char *name, const char *s)
{
	kvt_put_u8(b, KVT_FIELD_STR);
	put_name(b, name);
	kvt_put_str(b, s);
}

static int get_name(struct kvt_cursor *c, char *ret)
{
	uint8_t n;
	const uint8_t *p;
	TRY(kvt_get_u8(c, &n));
	if (n == 0 || n > KVT_MAX_FIELD_NAME)
		return -EBADMSG;
	TRY(kvt_get_bytes(c, n, &p));
	for (unsigned i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
		      p[i] == '_'))
			return -EBADMSG;
	memcpy(ret, p, n);
	ret[n] = 0;
	return 0;
}

int kvt_dec_record(struct kvt_cursor *c, struct kvt_record *ret)
{
	TRY(get_name(c, ret->kind));
	TRY(kvt_get_u16(c, &ret->n_fields));
	if (ret->n_fields > KVT_MAX_FIELDS)
		return -EBADMSG;
	for (unsigned i = 0; i < ret->n_fields; i++) {
		struct kvt_field *f = &ret->fields[i];
		TRY(kvt_get_u8(c, &f->type));
		TRY(get_name(c, f->name));
		switch (f->type) {
		case KVT_FIELD_U64:
		case KVT_FIELD_I64:
			f->s[0] = 0;
			TRY(kvt_get_u64(c, &f->u));
			break;
		case KVT_FIELD_STR:
			f->u = 0;
			TRY(kvt_get_str(c, KVT_MAX_STRING, f->s, sizeof(f->s)));
			break;
		default:
			return -EBADMSG;
		}
	}
	return 0;
}

const struct kvt_field *kvt_record_get(const struct kvt_record *r,
				       const char *name)
{
	for (unsigned i = 0; i < r->n_fields; i++)
		if (strcmp(r->fields[i].name, name) == 0)
			return &r->fields[i];
	return NULL;
}

/* ---- names -------------------------------------------------------- */

/* Indexed by opcode; the names are the enum's own, so they cannot drift.
 * What each request means to the daemon, and its limits, is the daemon's
 * table (daemon/requests.c, docs/protocol.md §2.2). */
#define NAME(op) [KVT_OP_##op] = #op
static const char *const opcode_names[] = {
	NAME(HELLO),	    NAME(NS_OPEN),	  NAME(LOOKUP),	      NAME(RESERVE),
	NAME(COMMIT),	    NAME(ABORT),	  NAME(ACQUIRE),      NAME(RELEASE),
	NAME(TOUCH),	    NAME(DELETE),	  NAME(STATS),	      NAME(PING),
	NAME(ADMIN_EVICT),  NAME(PREFETCH),	  NAME(EXTENT_ADDED), NAME(EXTENT_RETIRED),
	NAME(HINT),	    NAME(BLOCK_READY),	  NAME(RUN_READY),    NAME(SETTLED),
};
#undef NAME

const char *kvt_opcode_name(uint16_t opcode)
{
	if (opcode < ARRAY_SIZE(opcode_names) && opcode_names[opcode])
		return opcode_names[opcode];
	return "UNKNOWN";
}

const char *kvt_state_name(uint8_t state)
{
	switch (state) {
	case KVT_STATE_MISS: return "miss";
	case KVT_STATE_HOST: return "host";
	case KVT_STATE_DISK: return "disk";
	case KVT_STATE_PENDING: return "pending";
	default: return "invalid";
	}
}
