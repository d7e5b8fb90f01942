/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kvtier wire protocol: message layouts, encoders and decoders; framing
 * and the connection are in conn.h, included at the end.
 *
 * Every message is a 24-byte header followed by `length` payload bytes.  All
 * integers are little-endian and written field by field through a cursor, so
 * no struct padding ever reaches the wire.  Decoders check every length and
 * count against the bytes actually present and against the limits below
 * before anything is used; a decoder that fails returns -EBADMSG and the
 * caller closes that one connection.
 *
 * This module holds no policy and no global state; docs/protocol.md is its
 * prose description.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KVT_MAGIC 0x3154564bu /* "KVT1" */

/* Versions this build speaks; the daemon serves the whole range. */
#define KVT_PROTO_VERSION_MIN 1
#define KVT_PROTO_VERSION_MAX 1

/* Feature bits negotiated by HELLO (the intersection wins). */
#define KVT_FEATURE_SHARDS (UINT64_C(1) << 0)  /* tensor-parallel shards */
#define KVT_FEATURE_RECORDS (UINT64_C(1) << 1) /* STATS as records */
#define KVT_FEATURE_POOL (UINT64_C(1) << 2)    /* send me the pool extents */
#define KVT_FEATURE_READY (UINT64_C(1) << 3)   /* tell me when staged blocks land */
#define KVT_FEATURE_RUNS (UINT64_C(1) << 4)    /* one RUN_READY per remote run */
#define KVT_FEATURE_SETTLED (UINT64_C(1) << 5) /* LOOKUP may ask for one SETTLED */
#define KVT_FEATURES_ALL \
	(KVT_FEATURE_SHARDS | KVT_FEATURE_RECORDS | KVT_FEATURE_POOL | KVT_FEATURE_READY | \
	 KVT_FEATURE_RUNS | KVT_FEATURE_SETTLED)

#define KVT_HEADER_SIZE 24
#define KVT_KEY_SIZE 32

/* Hard limits of the wire format; the daemon may configure lower ones. */
#define KVT_MAX_PAYLOAD (1u << 20)
#define KVT_MAX_KEYS 8192
#define KVT_MAX_FDS 4
#define KVT_MAX_NAME 64
#define KVT_MAX_REASON 512
#define KVT_MAX_IDENTITY 4096
#define KVT_MAX_STRING 1024

enum kvt_opcode {
	KVT_OP_HELLO = 1,
	KVT_OP_NS_OPEN = 2,
	KVT_OP_LOOKUP = 3,
	KVT_OP_RESERVE = 4,
	KVT_OP_COMMIT = 5,
	KVT_OP_ABORT = 6,
	KVT_OP_ACQUIRE = 7,
	KVT_OP_RELEASE = 8,
	KVT_OP_TOUCH = 9,
	KVT_OP_DELETE = 10,
	KVT_OP_STATS = 11,
	KVT_OP_PING = 12,
	KVT_OP_ADMIN_EVICT = 13,
	KVT_OP_PREFETCH = 14,
	KVT_OP_HINT = 15,

	/* Notifications, daemon to client, request id 0. */
	KVT_OP_EXTENT_ADDED = 64,
	KVT_OP_EXTENT_RETIRED = 65,
	KVT_OP_BLOCK_READY = 66, /* a block staged from NVMe is in host memory */
	KVT_OP_RUN_READY = 67,   /* a run fetched from the remote tier settled */
	KVT_OP_SETTLED = 68,     /* every key a LOOKUP answered DISK settled */
};

/* Header flags. */
#define KVT_FLAG_REPLY 0x0001  /* answers the request with the same id */
#define KVT_FLAG_ERROR 0x0002  /* payload is an error: errno + reason */
#define KVT_FLAG_MORE 0x0004   /* more replies to the same id follow */
#define KVT_FLAG_NOTIFY 0x0008 /* unsolicited, from the daemon */
#define KVT_FLAGS_KNOWN 0x000f

/* Per-key block states in a LOOKUP reply. */
enum kvt_state {
	KVT_STATE_MISS = 0,
	KVT_STATE_HOST = 1,    /* resident in host memory, ready to acquire */
	KVT_STATE_DISK = 2,    /* on NVMe only, or being fetched remotely; staging started */
	KVT_STATE_PENDING = 3, /* reserved, not yet committed; ask again later */
};

/* LOOKUP flags. */
#define KVT_LOOKUP_TOUCH 1   /* count hits as uses for eviction */
#define KVT_LOOKUP_SETTLED 2 /* one SETTLED once its DISK keys have settled
			      * (KVT_FEATURE_SETTLED negotiated) */

/*
 * HINT: what the engine knows of a namespace's blocks, for eviction.  The
 * keys request's arg packs the kind (bits 0-3), a priority (bits 4-10,
 * 0..100) and a duration in seconds (bits 11-31, 0: until changed).
 * RETAIN sets the blocks' priority, as TensorRT-LLM's retention does:
 * lower goes first, KVT_PRIORITY_DEFAULT is what a block has when nobody
 * says anything, and after the duration it returns to that.  END_REQUEST:
 * the request that used these blocks finished; those nobody has hit since
 * they were stored and nobody raised go first.  END_SESSION: its session
 * is over; every block named goes first (name only the session's own:
 * what it shares, retain).  END kinds carry priority and duration 0.
 */
#define KVT_HINT_RETAIN 1
#define KVT_HINT_END_REQUEST 2
#define KVT_HINT_END_SESSION 3
#define KVT_PRIORITY_DEFAULT 35
#define KVT_PRIORITY_MAX 100
#define KVT_HINT_MAX_DURATION ((1u << 21) - 1) /* seconds: 24 days */
#define KVT_HINT_ARG(kind, priority, duration_s) \
	((uint32_t)(kind) | (uint32_t)(priority) << 4 | (uint32_t)(duration_s) << 11)
#define KVT_HINT_KIND(arg) ((arg) & 0xfu)
#define KVT_HINT_PRIORITY(arg) (((arg) >> 4) & 0x7fu)
#define KVT_HINT_DURATION(arg) ((arg) >> 11)

/* STATS selector bits. */
#define KVT_STATS_DAEMON 0x1
#define KVT_STATS_TENANTS 0x2
#define KVT_STATS_NAMESPACES 0x4
#define KVT_STATS_CLIENTS 0x8
#define KVT_STATS_ALL 0xf

/* Attention kinds in a namespace identity (the same macros as kvtier.h). */
#define KVT_ATTN_MHA 0 /* MHA and GQA: K and V per KV head */
#define KVT_ATTN_MLA 1 /* one latent per token, identical on every rank */
#define KVT_ATTN_SWA 2 /* sliding window; window in tokens */

struct kvt_header {
	uint32_t magic;
	uint16_t version;
	uint16_t opcode;
	uint32_t length;
	uint16_t n_fds;
	uint16_t flags;
	uint64_t request_id;
};

/* ---- byte buffers ------------------------------------------------- */

/* A growable output buffer. */
struct kvt_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	int error; /* sticky: first allocation failure */
};

void kvt_buf_init(struct kvt_buf *b);
void kvt_buf_free(struct kvt_buf *b);
void kvt_buf_reset(struct kvt_buf *b);
uint8_t *kvt_buf_reserve(struct kvt_buf *b, size_t n);
void kvt_put_u8(struct kvt_buf *b, uint8_t v);
void kvt_put_u16(struct kvt_buf *b, uint16_t v);
void kvt_put_u32(struct kvt_buf *b, uint32_t v);
void kvt_put_u64(struct kvt_buf *b, uint64_t v);
void kvt_put_bytes(struct kvt_buf *b, const void *p, size_t n);
/* A u16 length and the bytes of a string, cut at KVT_MAX_STRING. */
void kvt_put_str(struct kvt_buf *b, const char *s);

/* A read cursor over received bytes; every get checks the bounds. */
struct kvt_cursor {
	const uint8_t *p;
	size_t left;
};

int kvt_get_u8(struct kvt_cursor *c, uint8_t *ret);
int kvt_get_u16(struct kvt_cursor *c, uint16_t *ret);
int kvt_get_u32(struct kvt_cursor *c, uint32_t *ret);
int kvt_get_u64(struct kvt_cursor *c, uint64_t *ret);
int kvt_get_bytes(struct kvt_cursor *c, size_t n, const uint8_t **ret);
/* A u16-prefixed string of at most max bytes, copied NUL-terminated. */
int kvt_get_str(struct kvt_cursor *c, size_t max, char *ret, size_t ret_size);
/* -EBADMSG unless every byte was consumed. */
int kvt_cursor_end(const struct kvt_cursor *c);

/* Framing, sendmsg/recvmsg with descriptors and the connection: conn.h,
 * included at the end. */

/* ---- messages ----------------------------------------------------- */

#define KVT_MAX_BUS_ID 32

struct kvt_hello_req {
	uint32_t min_version;
	uint32_t max_version;
	uint64_t features;
	char name[KVT_MAX_NAME + 1];
	char pci_bus_id[KVT_MAX_BUS_ID + 1]; /* the client's GPU, "" if none */
};

struct kvt_hello_rep {
	uint32_t version;
	uint64_t features;
	uint32_t tenant_id;
	uint32_t session_id;
	uint32_t max_keys;    /* per request */
	uint32_t max_handles; /* outstanding leases + reservations, tenant */
	uint64_t quota_bytes; /* tenant's host memory quota */
	int32_t numa_node;    /* where the client's slots come from, -1 any */
};

/* ADMIN_EVICT: drop a namespace's blocks (admin only). */
#define KVT_EVICT_DROP 0x1 /* from every tier, not only host memory */

struct kvt_evict_req {
	uint32_t tenant_id;
	uint32_t ns_id;
	uint32_t flags;
};

struct kvt_ns_open_req {
	const uint8_t *identity; /* canonical encoding, see kvt_identity_* */
	uint32_t identity_len;
};

struct kvt_ns_open_rep {
	uint32_t ns_id;
	uint32_t shards;       /* tensor-parallel shards per block */
	uint32_t block_tokens;
	uint64_t shard_bytes;  /* payload bytes of one shard */
	uint64_t shard_stride; /* distance between shards in a slot */
	uint64_t slot_bytes;   /* bytes of one slot in an extent */
};

/* LOOKUP, RESERVE, ACQUIRE, TOUCH, DELETE, PREFETCH, HINT: a namespace
 * and keys. */
struct kvt_keys_req {
	uint32_t ns_id;
	uint32_t arg; /* LOOKUP: flags; RESERVE/ACQUIRE: shard; HINT: KVT_HINT_ARG; else 0 */
	uint32_t n;
	const uint8_t *keys; /* [n][32], points into the message */
};

struct kvt_lookup_rep {
	uint32_t n;
	uint32_t leading; /* length of the leading run of host/disk hits */
	const uint8_t *states; /* [n] enum kvt_state */
};

/* One reserved or acquired shard. */
struct kvt_slot {
	int32_t status; /* 0 or a negative errno for this key */
	uint64_t handle;
	uint32_t extent_id;
	uint64_t offset; /* of the shard in the extent */
};

/* COMMIT (flag = success), ABORT, RELEASE: handles. */
struct kvt_handle_arg {
	uint64_t handle;
	uint8_t flag;
};

struct kvt_extent_note {
	uint32_t extent_id;
	uint32_t flags; /* KVT_EXTENT_* */
	uint64_t size;
	uint64_t slot_bytes;
	int32_t numa_node; /* -1 unknown */
};

#define KVT_EXTENT_HUGETLB 0x1
#define KVT_EXTENT_THP 0x2
#define KVT_EXTENT_LOCKED 0x4

struct kvt_error_rep {
	int32_t error; /* negative errno */
	char reason[KVT_MAX_REASON + 1];
};

void kvt_enc_hello_req(struct kvt_buf *b, uint64_t rid,
		       const struct kvt_hello_req *m);
int kvt_dec_hello_req(struct kvt_cursor *c, struct kvt_hello_req *ret);
void kvt_enc_hello_rep(struct kvt_buf *b, uint16_t version, uint64_t rid,
		       const struct kvt_hello_rep *m);
int kvt_dec_hello_rep(struct kvt_cursor *c, struct kvt_hello_rep *ret);

void kvt_enc_ns_open_req(struct kvt_buf *b, uint16_t version, uint64_t rid,
			 const struct kvt_ns_open_req *m);
int kvt_dec_ns_open_req(struct kvt_cursor *c, struct kvt_ns_open_req *ret);
void kvt_enc_ns_open_rep(struct kvt_buf *b, uint16_t version, uint64_t rid,
			 const struct kvt_ns_open_rep *m);
int kvt_dec_ns_open_rep(struct kvt_cursor *c, struct kvt_ns_open_rep *ret);

void kvt_enc_keys_req(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		      uint64_t rid, const struct kvt_keys_req *m);
int kvt_dec_keys_req(struct kvt_cursor *c, uint32_t max_keys,
		     struct kvt_keys_req *ret);

void kvt_enc_lookup_rep(struct kvt_buf *b, uint16_t version, uint64_t rid,
			const struct kvt_lookup_rep *m);
int kvt_dec_lookup_rep(struct kvt_cursor *c, struct kvt_lookup_rep *ret);

void kvt_enc_slots_rep(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		       uint64_t rid, const struct kvt_slot *slots, uint32_t n);
/* Decodes into ret[0..max), the count into *ret_n. */
int kvt_dec_slots_rep(struct kvt_cursor *c, struct kvt_slot *ret, uint32_t max,
		      uint32_t *ret_n);

void kvt_enc_handles_req(struct kvt_buf *b, uint16_t version, uint16_t opcode,
			 uint64_t rid, const struct kvt_handle_arg *h,
			 uint32_t n);
int kvt_dec_handles_req(struct kvt_cursor *c, uint32_t max,
			struct kvt_handle_arg *ret, uint32_t *ret_n);

void kvt_enc_status_rep(struct kvt_buf *b, uint16_t version, uint16_t opcode,
			uint64_t rid, const int32_t *status, uint32_t n);
int kvt_dec_status_rep(struct kvt_cursor *c, int32_t *ret, uint32_t max,
		       uint32_t *ret_n);

void kvt_enc_evict_req(struct kvt_buf *b, uint16_t version, uint64_t rid,
		       const struct kvt_evict_req *m);
int kvt_dec_evict_req(struct kvt_cursor *c, struct kvt_evict_req *ret);
/* A reply carrying one count (ADMIN_EVICT: blocks dropped). */
void kvt_enc_count_rep(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		       uint64_t rid, uint64_t count);
int kvt_dec_count_rep(struct kvt_cursor *c, uint64_t *ret);

void kvt_enc_stats_req(struct kvt_buf *b, uint16_t version, uint64_t rid,
		       uint32_t what);
int kvt_dec_stats_req(struct kvt_cursor *c, uint32_t *ret_what);

void kvt_enc_extent_note(struct kvt_buf *b, uint16_t version,
			 const struct kvt_extent_note *m);
int kvt_dec_extent_note(struct kvt_cursor *c, struct kvt_extent_note *ret);
void kvt_enc_extent_retired(struct kvt_buf *b, uint16_t version, uint32_t id);
int kvt_dec_extent_retired(struct kvt_cursor *c, uint32_t *ret_id);

/* BLOCK_READY: u32 ns_id, the key. */
void kvt_enc_block_ready(struct kvt_buf *b, uint16_t version, uint32_t ns_id,
			 const uint8_t *key);
int kvt_dec_block_ready(struct kvt_cursor *c, uint32_t *ret_ns, const uint8_t **ret_key);

/* RUN_READY: u32 ns_id, u32 keys in the run, u32 of them served, the
 * run's first key. */
struct kvt_run_ready {
	uint32_t ns_id;
	uint32_t n_keys;
	uint32_t n_served;
	const uint8_t *key;
};
void kvt_enc_run_ready(struct kvt_buf *b, uint16_t version, const struct kvt_run_ready *m);
int kvt_dec_run_ready(struct kvt_cursor *c, struct kvt_run_ready *ret);

/* SETTLED: the LOOKUP's request id, its ns_id, how many of its keys it
 * answered DISK, and how many of those were in host memory when the last
 * of them settled (the rest are gone). */
struct kvt_settled {
	uint64_t request_id;
	uint32_t ns_id;
	uint32_t n_keys; /* >= 1 */
	uint32_t n_host; /* <= n_keys */
};
void kvt_enc_settled(struct kvt_buf *b, uint16_t version, const struct kvt_settled *m);
int kvt_dec_settled(struct kvt_cursor *c, struct kvt_settled *ret);

void kvt_enc_error(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		   uint64_t rid, int error, const char *reason);
int kvt_dec_error(struct kvt_cursor *c, struct kvt_error_rep *ret);

/*
 * Records: the self-describing payload of STATS replies.  A reply carries
 * whole records; KVT_FLAG_MORE says another reply follows.  Each record is a
 * kind ("daemon", "tenant", "namespace", "client") and named fields, so new
 * counters need no new message.
 */
#define KVT_FIELD_U64 1
#define KVT_FIELD_I64 2
#define KVT_FIELD_STR 3

#define KVT_MAX_FIELDS 64
#define KVT_MAX_FIELD_NAME 48

struct kvt_field {
	uint8_t type;
	char name[KVT_MAX_FIELD_NAME + 1];
	uint64_t u; /* KVT_FIELD_U64, KVT_FIELD_I64 (as two's complement) */
	char s[KVT_MAX_STRING + 1];
};

struct kvt_record {
	char kind[KVT_MAX_FIELD_NAME + 1];
	uint16_t n_fields;
	struct kvt_field fields[KVT_MAX_FIELDS];
};

/* A STATS reply payload is whole records back to back, to its end.
 * Kinds: "daemon", "node" (admin), "tenant", "namespace", "client". */
void kvt_rec_begin(struct kvt_buf *b, const char *kind, uint16_t n_fields);
void kvt_rec_u64(struct kvt_buf *b, const char *name, uint64_t v);
void kvt_rec_i64(struct kvt_buf *b, const char *name, int64_t v);
void kvt_rec_str(struct kvt_buf *b, const char *name, const char *s);
int kvt_dec_record(struct kvt_cursor *c, struct kvt_record *ret);
/* Field lookup by name; NULL when absent. */
const struct kvt_field *kvt_record_get(const struct kvt_record *r,
				       const char *name);

/* ---- namespace identity ------------------------------------------- */

/*
 * The canonical encoding of a namespace: tagged, length-prefixed fields in
 * ascending tag order, each once except GROUP.  Every field the daemon
 * derives geometry from is part of the identity, so two namespaces that
 * differ in any field can never share a block.
 */
enum kvt_identity_tag {
	KVT_ID_KEY_SCHEME = 1,  /* u32 */
	KVT_ID_MODEL = 2,       /* bytes, 1..256 */
	KVT_ID_WEIGHTS = 3,     /* bytes, 0..64: weights fingerprint */
	KVT_ID_LAYERS = 4,      /* u32 first, u32 end (pipeline stage) */
	KVT_ID_PARALLEL = 5,    /* u32 tp_size, u32 cp_size */
	KVT_ID_BLOCK_TOKENS = 6, /* u32 */
	KVT_ID_GROUP = 7,       /* struct kvt_id_group, 8 x u32 */
	KVT_ID_SALT = 8,        /* bytes, 0..64, optional */
	KVT_ID_CODEC = 9,       /* u32 KVT_CODEC_* (codec.h); absent = none */
};

#define KVT_MAX_GROUPS 16
#define KVT_MAX_MODEL 256
#define KVT_MAX_FINGERPRINT 64
#define KVT_MAX_BLOCK_TOKENS 4096
#define KVT_MAX_TP 64

struct kvt_id_group {
	uint32_t n_layers;
	uint32_t attn;        /* KVT_ATTN_* */
	uint32_t window;      /* KVT_ATTN_SWA: tokens; else 0 */
	uint32_t planes;      /* 2 (K, V) or 1 (MLA latent) */
	uint32_t kv_heads;    /* total KV heads (all ranks) */
	uint32_t head_bytes;  /* bytes of one head of one token in one plane */
	uint32_t dtype;       /* engine's dtype code, part of the identity */
	uint32_t scale_layout; /* quantisation scale layout, 0 = none */
};

struct kvt_identity {
	uint32_t key_scheme;
	char model[KVT_MAX_MODEL + 1];
	uint8_t weights[KVT_MAX_FINGERPRINT];
	uint32_t weights_len;
	uint32_t layer_first, layer_end;
	uint32_t tp_size, cp_size;
	uint32_t block_tokens;
	uint32_t n_groups;
	struct kvt_id_group groups[KVT_MAX_GROUPS];
	uint8_t salt[KVT_MAX_FINGERPRINT];
	uint32_t salt_len;
	uint32_t codec;       /* KVT_CODEC_* (codec.h): how blocks are stored */
};

/* Geometry derived from an identity; identical on both sides. */
struct kvt_geometry {
	uint32_t shards;       /* 1 when every group is MLA, else tp_size */
	uint32_t block_tokens;
	uint32_t heads_per_shard[KVT_MAX_GROUPS];
	uint64_t shard_bytes;
	uint64_t shard_stride; /* shard_bytes rounded up to 4 KiB */
	uint64_t slot_bytes;   /* shards * shard_stride */
	uint64_t bytes_per_token; /* all shards */
};

int kvt_identity_encode(const struct kvt_identity *id, struct kvt_buf *b);
int kvt_identity_decode(const uint8_t *p, size_t len, struct kvt_identity *ret);
/* The geometry of a valid identity: -EINVAL for an invalid one (or KV
 * heads that do not divide among the ranks), -EFBIG when a size would not
 * fit the wire's u64 fields.  No other size limit: the daemon has its own. */
int kvt_identity_geometry(const struct kvt_identity *id,
			  struct kvt_geometry *ret);

/* Names for logs and tools. */
const char *kvt_opcode_name(uint16_t opcode);
const char *kvt_state_name(uint8_t state);

#include "conn.h"
