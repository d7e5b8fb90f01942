/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant isolation as a property: two tenants (uids 1001 and 1002) open the
 * same namespace identity and draw keys from the same small universe, each
 * running a seeded random sequence of every block operation against a model
 * of its own tenant.  Every answer must be what the model predicts from the
 * tenant's own operations alone: per-key lookup states, store/load/acquire
 * statuses, delete/touch/prefetch counts, handle outcomes, the bytes of
 * every load and lease (a function of tenant and key), and statistics that
 * show only the tenant itself.
 *
 * Existence is not revealed: tenant b's sequence runs once while a is idle
 * with nothing stored, and once on a fresh daemon while a holds every key
 * of the universe (stored, leased, reserved) and keeps operating on them;
 * b's transcript of results must be identical, line for line.
 *
 * KVT_SEED=N replays a run; KVT_LONG=1 runs longer sequences.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define K 12          /* the key universe, shared by both tenants */
#define MAX_PICK 4    /* keys per operation */
#define MAX_LEASES 48
#define MAX_RESV 12
#define UID_A 1001
#define UID_B 1002

static struct daemon d;
static uint8_t keys[K * 32];
static size_t bytes; /* of one block */

enum { ABSENT, PENDING, RESIDENT };

struct lease {
	uint64_t h;
	int key;
	const uint8_t *ptr;
};

struct resv {
	uint64_t h;
	int key;
	bool cancelled; /* its key was deleted: the commit is -ECANCELED */
};

struct tenant_run {
	const char *name;
	uid_t uid;
	uint64_t rng;
	FILE *trace;
	kvt_client *c;
	kvt_ns *ns;
	int state[K];
	struct lease leases[MAX_LEASES];
	int n_leases;
	struct resv resvs[MAX_RESV];
	int n_resvs;
	uint8_t *want, *got, *sentinel;
	int op; /* number of the operation running, for messages */
};

/* splitmix64: mix() of a counter that steps by its constant. */
static uint64_t rnd(struct tenant_run *t)
{
	uint64_t x = mix(t->rng);

	t->rng += 0x9e3779b97f4a7c15ull;
	return x;
}

static int below(struct tenant_run *t, int n)
{
	return (int)(rnd(t) % (uint64_t)n);
}

/* What the tenant's own model and the transcript say; the transcript holds
 * results only, never addresses or anything global. */
static void tr(struct tenant_run *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tr(struct tenant_run *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(t->trace, fmt, ap);
	va_end(ap);
}

#define TCHECK(t, cond, ...)                                                   \
	do {                                                                   \
		if (!(cond))                                                   \
			fprintf(stderr, "tenant %s, operation %d:\n", (t)->name, (t)->op); \
		CHECK(cond, __VA_ARGS__);                                      \
	} while (0)

static void pattern(struct tenant_run *t, int key, uint8_t *buf)
{
	block_pattern(buf, bytes, (uint32_t)t->uid, keys + key * 32);
}

/* n distinct keys of the universe. */
static int pick(struct tenant_run *t, int *ret, uint8_t *ret_keys)
{
	int all[K], n = 1 + below(t, MAX_PICK);
	for (int i = 0; i < K; i++)
		all[i] = i;
	for (int i = 0; i < n; i++) {
		int j = i + below(t, K - i);
		int x = all[i];
		all[i] = all[j];
		all[j] = x;
		ret[i] = all[i];
		memcpy(ret_keys + i * 32, keys + all[i] * 32, 32);
	}
	return n;
}

static struct resv *resv_of(struct tenant_run *t, int key)
{
	for (int i = 0; i < t->n_resvs; i++)
		if (t->resvs[i].key == key && !t->resvs[i].cancelled)
			return &t->resvs[i];
	return NULL;
}

static void op_lookup(struct tenant_run *t)
{
	static const uint8_t expect[] = {[ABSENT] = KVT_MISS, [PENDING] = KVT_PENDING,
					 [RESIDENT] = KVT_HOST};
	uint8_t st[K];
	int leading = 0;
	while (leading < K && t->state[leading] == RESIDENT)
		leading++;
	int r = kvt_lookup(t->ns, keys, K, below(t, 2) ? KVT_LOOKUP_TOUCH : 0, st);
	tr(t, "lookup -> %d", r);
	TCHECK(t, r == leading, "lookup: %d leading hits, model %d", r, leading);
	for (int i = 0; i < K; i++) {
		tr(t, " %u", st[i]);
		TCHECK(t, st[i] == expect[t->state[i]], "lookup: key %d state %u, model %u", i,
		       st[i], expect[t->state[i]]);
	}
	tr(t, "\n");
}

static void op_store(struct tenant_run *t)
{
	int ks[MAX_PICK], n, want = 0;
	uint8_t kb[MAX_PICK * 32], *blk = malloc(bytes * MAX_PICK);
	const void *srcs[MAX_PICK];
	int32_t st[MAX_PICK];

	n = pick(t, ks, kb);
	for (int i = 0; i < n; i++) {
		pattern(t, ks[i], blk + i * bytes);
		srcs[i] = blk + i * bytes;
		want += t->state[ks[i]] != PENDING;
	}
	int r = kvt_store(t->ns, 0, kb, (size_t)n, srcs, st);
	tr(t, "store -> %d", r);
	TCHECK(t, r == want, "store: %d stored, model %d", r, want);
	for (int i = 0; i < n; i++) {
		int e = t->state[ks[i]] == ABSENT ? 0 : t->state[ks[i]] == PENDING ? -EBUSY : -EEXIST;
		tr(t, " k%d:%d", ks[i], st[i]);
		TCHECK(t, st[i] == e, "store: key %d status %d, model %d", ks[i], st[i], e);
		if (e == 0)
			t->state[ks[i]] = RESIDENT;
	}
	tr(t, "\n");
	free(blk);
}

static void op_load(struct tenant_run *t)
{
	int ks[MAX_PICK], n, want = 0;
	uint8_t kb[MAX_PICK * 32];
	void *dsts[MAX_PICK];
	int32_t st[MAX_PICK];

	n = pick(t, ks, kb);
	for (int i = 0; i < n; i++) {
		dsts[i] = t->got + i * bytes;
		memcpy(dsts[i], t->sentinel, bytes);
		want += t->state[ks[i]] == RESIDENT;
	}
	int r = kvt_load(t->ns, 0, kb, (size_t)n, dsts, st);
	tr(t, "load -> %d", r);
	TCHECK(t, r == want, "load: %d loaded, model %d", r, want);
	for (int i = 0; i < n; i++) {
		int s = t->state[ks[i]];
		int e = s == RESIDENT ? 0 : s == PENDING ? -EAGAIN : -ENOENT;
		tr(t, " k%d:%d", ks[i], st[i]);
		TCHECK(t, st[i] == e, "load: key %d status %d, model %d", ks[i], st[i], e);
		if (s == RESIDENT) {
			pattern(t, ks[i], t->want);
			TCHECK(t, !memcmp(dsts[i], t->want, bytes),
			       "load: key %d is not the tenant's own bytes", ks[i]);
		} else {
			TCHECK(t, !memcmp(dsts[i], t->sentinel, bytes),
			       "load: a miss (key %d) wrote into the buffer", ks[i]);
		}
	}
	tr(t, "\n");
}

static void op_acquire(struct tenant_run *t)
{
	int ks[MAX_PICK], n, want = 0;
	uint8_t kb[MAX_PICK * 32];
	kvt_slot_ref refs[MAX_PICK];

	n = pick(t, ks, kb);
	if (t->n_leases + n > MAX_LEASES)
		return;
	for (int i = 0; i < n; i++)
		want += t->state[ks[i]] == RESIDENT;
	int r = kvt_acquire(t->ns, 0, kb, (size_t)n, refs);
	tr(t, "acquire -> %d", r);
	TCHECK(t, r == want, "acquire: %d, model %d", r, want);
	for (int i = 0; i < n; i++) {
		int s = t->state[ks[i]];
		int e = s == RESIDENT ? 0 : s == PENDING ? -EAGAIN : -ENOENT;
		tr(t, " k%d:%d", ks[i], refs[i].status);
		TCHECK(t, refs[i].status == e, "acquire: key %d status %d, model %d", ks[i],
		       refs[i].status, e);
		if (e)
			continue;
		tr(t, "/h%llx@%llx", (unsigned long long)refs[i].handle,
		   (unsigned long long)refs[i].offset);
		pattern(t, ks[i], t->want);
		TCHECK(t, refs[i].ptr && refs[i].bytes == bytes &&
				  !memcmp(refs[i].ptr, t->want, bytes),
		       "acquire: key %d lease does not hold the tenant's own bytes", ks[i]);
		t->leases[t->n_leases++] = (struct lease){refs[i].handle, ks[i], refs[i].ptr};
	}
	tr(t, "\n");
}

/* Release some leases; a lease's bytes hold until then, even when its key
 * was deleted meanwhile. */
static void op_release(struct tenant_run *t)
{
	uint64_t hs[MAX_PICK];
	int32_t st[MAX_PICK];
	int n = 0;

	while (n < MAX_PICK && t->n_leases && (n == 0 || below(t, 2))) {
		int i = below(t, t->n_leases);
		struct lease *l = &t->leases[i];
		pattern(t, l->key, t->want);
		TCHECK(t, !memcmp(l->ptr, t->want, bytes),
		       "a lease on key %d changed before its release", l->key);
		hs[n++] = l->h;
		t->leases[i] = t->leases[--t->n_leases];
	}
	if (!n)
		return;
	int r = kvt_release(t->c, hs, (size_t)n, st);
	tr(t, "release -> %d", r);
	TCHECK(t, r == 0, "release: %d", r);
	for (int i = 0; i < n; i++) {
		tr(t, " %d", st[i]);
		TCHECK(t, st[i] == 0, "release: status %d", st[i]);
	}
	tr(t, "\n");
}

static void op_reserve(struct tenant_run *t)
{
	int ks[MAX_PICK], n, want = 0;
	uint8_t kb[MAX_PICK * 32];
	kvt_slot_ref refs[MAX_PICK];

	n = pick(t, ks, kb);
	if (t->n_resvs + n > MAX_RESV)
		return;
	for (int i = 0; i < n; i++)
		want += t->state[ks[i]] == ABSENT;
	int r = kvt_reserve(t->ns, 0, kb, (size_t)n, refs);
	tr(t, "reserve -> %d", r);
	TCHECK(t, r == want, "reserve: %d, model %d", r, want);
	for (int i = 0; i < n; i++) {
		int s = t->state[ks[i]];
		int e = s == ABSENT ? 0 : s == PENDING ? -EBUSY : -EEXIST;
		tr(t, " k%d:%d", ks[i], refs[i].status);
		TCHECK(t, refs[i].status == e, "reserve: key %d status %d, model %d", ks[i],
		       refs[i].status, e);
		if (e)
			continue;
		tr(t, "/h%llx@%llx", (unsigned long long)refs[i].handle,
		   (unsigned long long)refs[i].offset);
		TCHECK(t, refs[i].ptr && refs[i].bytes == bytes, "reserve: no slot memory");
		pattern(t, ks[i], refs[i].ptr);
		t->resvs[t->n_resvs++] = (struct resv){refs[i].handle, ks[i], false};
		t->state[ks[i]] = PENDING;
	}
	tr(t, "\n");
}

/* Commit (successfully or not) or abort some reservations. */
static void op_commit(struct tenant_run *t)
{
	uint64_t hs[MAX_PICK];
	uint8_t ok[MAX_PICK];
	struct resv rs[MAX_PICK];
	int32_t st[MAX_PICK];
	int n = 0, how = below(t, 4); /* 0,1: commit; 2: failed commit; 3: abort */

	while (n < MAX_PICK && t->n_resvs && (n == 0 || below(t, 2))) {
		int i = below(t, t->n_resvs);
		rs[n] = t->resvs[i];
		hs[n] = rs[n].h;
		ok[n++] = how < 2;
		t->resvs[i] = t->resvs[--t->n_resvs];
	}
	if (!n)
		return;
	int r = how == 3 ? kvt_abort(t->c, hs, (size_t)n, st)
			 : kvt_commit(t->c, hs, ok, (size_t)n, st);
	tr(t, "%s -> %d", how == 3 ? "abort" : ok[0] ? "commit" : "commit-failed", r);
	TCHECK(t, r == 0, "commit/abort: %d", r);
	for (int i = 0; i < n; i++) {
		int e = rs[i].cancelled ? -ECANCELED : 0;
		tr(t, " k%d:%d", rs[i].key, st[i]);
		TCHECK(t, st[i] == e, "commit/abort: key %d status %d, model %d", rs[i].key, st[i],
		       e);
		if (!rs[i].cancelled)
			t->state[rs[i].key] = how < 2 ? RESIDENT : ABSENT;
	}
	tr(t, "\n");
}

static void op_delete(struct tenant_run *t)
{
	int ks[MAX_PICK], n, want = 0;
	uint8_t kb[MAX_PICK * 32];

	n = pick(t, ks, kb);
	for (int i = 0; i < n; i++)
		want += t->state[ks[i]] != ABSENT;
	int r = kvt_delete(t->ns, kb, (size_t)n);
	tr(t, "delete -> %d\n", r);
	TCHECK(t, r == want, "delete: %d existed, model %d", r, want);
	for (int i = 0; i < n; i++) {
		struct resv *v = resv_of(t, ks[i]);
		if (v)
			v->cancelled = true;
		t->state[ks[i]] = ABSENT;
	}
}

static void op_touch_or_prefetch(struct tenant_run *t, bool prefetch)
{
	int ks[MAX_PICK], n, want = 0;
	uint8_t kb[MAX_PICK * 32];

	n = pick(t, ks, kb);
	for (int i = 0; i < n; i++)
		want += t->state[ks[i]] == RESIDENT;
	int r = prefetch ? kvt_prefetch(t->ns, kb, (size_t)n) : kvt_touch(t->ns, kb, (size_t)n);
	tr(t, "%s -> %d\n", prefetch ? "prefetch" : "touch", r);
	TCHECK(t, r == want, "%s: %d resident, model %d", prefetch ? "prefetch" : "touch", r,
	       want);
}

/* Handles that are not this tenant's live ones (the other tenant's are
 * numbered alike) end nothing; and a handle of the wrong kind is refused. */
static void op_foreign_handles(struct tenant_run *t)
{
	uint64_t hs[MAX_PICK];
	int32_t st[MAX_PICK];
	int n = 0;

	while (n < MAX_PICK) {
		uint64_t h = (uint64_t)(1 + below(t, 3)) << 32 | (uint64_t)(1 + below(t, 64));
		bool mine = false;
		for (int i = 0; i < t->n_leases; i++)
			mine |= t->leases[i].h == h;
		for (int i = 0; i < t->n_resvs; i++)
			mine |= t->resvs[i].h == h;
		if (!mine)
			hs[n++] = h;
	}
	int r = kvt_release(t->c, hs, (size_t)n, st);
	tr(t, "release-foreign -> %d", r);
	TCHECK(t, r == 0, "release: %d", r);
	for (int i = 0; i < n; i++) {
		tr(t, " %d", st[i]);
		TCHECK(t, st[i] == -ENOENT, "a handle not ours (%llx) released: %d",
		       (unsigned long long)hs[i], st[i]);
	}
	r = kvt_commit(t->c, hs, (const uint8_t *)"\1\1\1\1", (size_t)n, st);
	TCHECK(t, r == 0, "commit: %d", r);
	for (int i = 0; i < n; i++) {
		tr(t, " %d", st[i]);
		TCHECK(t, st[i] == -ENOENT, "a handle not ours (%llx) committed: %d",
		       (unsigned long long)hs[i], st[i]);
	}
	if (t->n_leases) {
		uint8_t one = 1;
		r = kvt_commit(t->c, &t->leases[0].h, &one, 1, st);
		tr(t, " lease-commit %d/%d", r, st[0]);
		TCHECK(t, r == 0 && st[0] == -EINVAL, "committing a lease: %d", st[0]);
	}
	if (t->n_resvs) {
		r = kvt_release(t->c, &t->resvs[0].h, 1, st);
		tr(t, " resv-release %d/%d", r, st[0]);
		TCHECK(t, r == 0 && st[0] == -EINVAL, "releasing a reservation: %d", st[0]);
	}
	tr(t, "\n");
}

struct seen {
	struct tenant_run *t;
	int tenants, nss, others;
	uint64_t blocks, reserved, handles;
};

/* Fields that depend on time or on process ids only. */
static bool volatile_field(const char *name)
{
	return !strcmp(name, "uptime_s") || !strcmp(name, "connected_s") || !strcmp(name, "pid");
}

static int stats_cb(const kvt_record *r, void *userdata)
{
	struct seen *s = userdata;
	struct tenant_run *t = s->t;
	const char *kind = kvt_record_kind(r);
	uint64_t v;

	tr(t, " [%s", kind);
	for (uint32_t i = 0; i < kvt_record_n_fields(r); i++) {
		const char *name = kvt_record_field_name(r, i);
		if (volatile_field(name))
			continue;
		if (kvt_record_field_type(r, i) == KVT_FIELD_STR)
			tr(t, " %s=%s", name, kvt_record_field_str(r, i));
		else
			tr(t, " %s=%llu", name, (unsigned long long)kvt_record_field_u64(r, i));
	}
	tr(t, "]");

	if (!strcmp(kind, "tenant")) {
		s->tenants++;
		const char *name = kvt_record_get_str(r, "name");
		TCHECK(t, name && !strcmp(name, t->name), "stats show tenant '%s'",
		       name ? name : "?");
		kvt_record_get_u64(r, "blocks", &s->blocks);
		kvt_record_get_u64(r, "handles", &s->handles);
	} else if (!strcmp(kind, "namespace")) {
		s->nss++;
		const char *name = kvt_record_get_str(r, "tenant");
		TCHECK(t, name && !strcmp(name, t->name), "stats show a namespace of '%s'",
		       name ? name : "?");
		kvt_record_get_u64(r, "reserved", &s->reserved);
	} else if (!strcmp(kind, "class")) {
		const char *name = kvt_record_get_str(r, "tenant");
		TCHECK(t, name && !strcmp(name, t->name), "stats show a slot class of '%s'",
		       name ? name : "?");
	} else if (!strcmp(kind, "client")) {
		const char *name = kvt_record_get_str(r, "tenant");
		TCHECK(t, name && !strcmp(name, t->name), "stats show a client of '%s'",
		       name ? name : "?");
		TCHECK(t, kvt_record_get_u64(r, "uid", &v) == 0 && v == t->uid,
		       "stats show a client of uid %llu", (unsigned long long)v);
	} else if (!strcmp(kind, "daemon")) {
		/* The pool-wide figures are for admins: they would show the
		 * other tenant's blocks. */
		TCHECK(t, kvt_record_get_u64(r, "blocks", &v) < 0 &&
				  kvt_record_get_u64(r, "used", &v) < 0 &&
				  kvt_record_get_u64(r, "tenants", &v) < 0,
		       "a tenant sees pool-wide figures");
	} else {
		s->others++;
	}
	return 0;
}

static void op_stats(struct tenant_run *t)
{
	struct seen s = {.t = t};
	uint64_t blocks = 0, reserved = 0;
	for (int i = 0; i < K; i++) {
		blocks += t->state[i] == RESIDENT;
		reserved += t->state[i] == PENDING;
	}
	tr(t, "stats");
	int r = kvt_stats(t->c, KVT_STATS_ALL, stats_cb, &s);
	tr(t, " -> %d\n", r);
	TCHECK(t, r == 0, "stats: %d", r);
	TCHECK(t, s.tenants == 1 && s.nss == 1 && s.others == 0,
	       "stats: %d tenants, %d namespaces, %d other records", s.tenants, s.nss, s.others);
	TCHECK(t, s.blocks == blocks && s.reserved == reserved,
	       "stats: %llu blocks and %llu reserved, model %llu and %llu",
	       (unsigned long long)s.blocks, (unsigned long long)s.reserved,
	       (unsigned long long)blocks, (unsigned long long)reserved);
	TCHECK(t, s.handles == (uint64_t)(t->n_leases + t->n_resvs),
	       "stats: %llu handles, model %d", (unsigned long long)s.handles,
	       t->n_leases + t->n_resvs);
}

static void one_op(struct tenant_run *t)
{
	int x = below(t, 100);
	if (x < 18)
		op_store(t);
	else if (x < 32)
		op_load(t);
	else if (x < 42)
		op_lookup(t);
	else if (x < 52)
		op_acquire(t);
	else if (x < 62)
		op_release(t);
	else if (x < 70)
		op_reserve(t);
	else if (x < 78)
		op_commit(t);
	else if (x < 84)
		op_delete(t);
	else if (x < 88)
		op_touch_or_prefetch(t, false);
	else if (x < 92)
		op_touch_or_prefetch(t, true);
	else if (x < 96)
		op_stats(t);
	else
		op_foreign_handles(t);
}

static void tenant_init(struct tenant_run *t, const char *name, uid_t uid, uint64_t seed,
			int trace_fd)
{
	memset(t, 0, sizeof(*t));
	t->name = name;
	t->uid = uid;
	t->rng = seed;
	if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0) {
		fprintf(stderr, "cannot become uid %u: %s\n", (unsigned)uid, strerror(errno));
		_exit(3);
	}
	t->trace = fdopen(trace_fd, "w");
	CHECK(t->trace, "trace");
	t->c = client_connect(&d, name);
	t->ns = engine_ns(t->c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(t->ns, &info) == 0 && info.shards == 1, "ns info");
	bytes = info.shard_bytes;
	t->want = malloc(bytes);
	t->got = malloc(bytes * MAX_PICK);
	t->sentinel = malloc(bytes);
	memset(t->sentinel, 0xa5, bytes);
}

/* Everything back: every lease checked and released, every reservation
 * aborted, and a last look at the model. */
static void tenant_finish(struct tenant_run *t)
{
	t->op = -1;
	op_lookup(t);
	while (t->n_leases)
		op_release(t);
	while (t->n_resvs) {
		int32_t st;
		struct resv v = t->resvs[--t->n_resvs];
		int r = kvt_abort(t->c, &v.h, 1, &st);
		tr(t, "abort -> %d %d\n", r, st);
		TCHECK(t, r == 0 && st == (v.cancelled ? -ECANCELED : 0), "abort: %d", st);
		if (!v.cancelled)
			t->state[v.key] = ABSENT;
	}
	op_stats(t);
	fclose(t->trace);
	kvt_client_free(t->c);
}

static uint64_t seed;
static int n_ops;

/* Tenant b: its sequence, start to end. */
static pid_t spawn_b(int trace_fd)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid)
		return pid;
	harness_in_child();
	struct tenant_run t;
	tenant_init(&t, "b", UID_B, seed ^ 0xb, trace_fd);
	for (t.op = 0; t.op < n_ops; t.op++)
		one_op(&t);
	tenant_finish(&t);
	_exit(0);
}

/* Tenant a.  active: first store every key of the universe, lease some and
 * reserve others, then operate until told to stop (and at least n_ops
 * times); idle: only open the namespace.  Writes one byte to ready when
 * set up; stops at end of file on stop. */
static pid_t spawn_a(bool active, const int ready_pipe[2], const int stop_pipe[2],
		     int trace_fd)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid)
		return pid;
	harness_in_child();
	int ready = ready_pipe[1], stop = stop_pipe[0];
	close(ready_pipe[0]);
	close(stop_pipe[1]);
	struct tenant_run t;
	tenant_init(&t, "a", UID_A, seed ^ 0xa, trace_fd);
	if (active) {
		uint8_t *blk = malloc(bytes * K);
		const void *srcs[K];
		kvt_slot_ref refs[K];
		for (int i = 0; i < K; i++) {
			pattern(&t, i, blk + i * bytes);
			srcs[i] = blk + i * bytes;
		}
		/* The last two keys only reserved: pending for a. */
		CHECK(kvt_store(t.ns, 0, keys, K - 2, srcs, NULL) == K - 2, "a stores");
		for (int i = 0; i < K - 2; i++)
			t.state[i] = RESIDENT;
		CHECK(kvt_reserve(t.ns, 0, keys + (K - 2) * 32, 2, refs) == 2, "a reserves");
		for (int i = 0; i < 2; i++) {
			pattern(&t, K - 2 + i, refs[i].ptr);
			t.resvs[t.n_resvs++] = (struct resv){refs[i].handle, K - 2 + i, false};
			t.state[K - 2 + i] = PENDING;
		}
		CHECK(kvt_acquire(t.ns, 0, keys, 4, refs) == 4, "a leases");
		for (int i = 0; i < 4; i++)
			t.leases[t.n_leases++] = (struct lease){refs[i].handle, i, refs[i].ptr};
		free(blk);
	}
	CHECK(write(ready, "r", 1) == 1, "ready");
	if (active) {
		for (t.op = 0;; t.op++) {
			struct pollfd p = {stop, POLLIN, 0};
			if (t.op >= n_ops && poll(&p, 1, 0) == 1)
				break;
			one_op(&t);
		}
		tenant_finish(&t);
	} else {
		char c;
		while (read(stop, &c, 1) > 0)
			;
		fclose(t.trace);
		kvt_client_free(t.c);
	}
	_exit(0);
}

static const char *conf = "[pool]\ncapacity = 32M\nextent_size = 2M\n"
			  "[tenant.a]\nuids = 1001\nquota = 8M\n"
			  "[tenant.b]\nuids = 1002\nquota = 8M\n";

/* One daemon: a (idle or active) and b's sequence; their transcripts into
 * b_trace and a_trace. */
static void run_phase(bool a_active, const char *b_trace, const char *a_trace)
{
	int ready[2], stop[2];
	char c;

	daemon_start(&d, conf);
	int bt = open(b_trace, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int at = open(a_trace, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(bt >= 0 && at >= 0, "transcripts");
	CHECK(pipe2(ready, O_CLOEXEC) == 0 && pipe2(stop, O_CLOEXEC) == 0, "pipe");

	pid_t a = spawn_a(a_active, ready, stop, at);
	close(ready[1]);
	close(stop[0]);
	close(at);
	CHECK(read(ready[0], &c, 1) == 1, "tenant a set up");
	close(ready[0]);

	pid_t b = spawn_b(bt);
	close(bt);
	CHECK(wait_exit(b) == 0, "tenant b's sequence (%s)", a_active ? "a active" : "a idle");
	close(stop[1]);
	CHECK(wait_exit(a) == 0, "tenant a (%s)", a_active ? "active" : "idle");

	/* The admin sees both, each with its own namespace. */
	kvt_client *admin = client_connect(&d, "admin");
	CHECK(stat_count(admin, "tenant") == 2, "two tenants");
	CHECK(stat_count(admin, "namespace") == 2, "one namespace each");
	kvt_client_free(admin);
	daemon_stop(&d);
	daemon_cleanup(&d);
}

/* Line by line; the first difference is the failure. */
static void compare(const char *p1, const char *p2)
{
	FILE *f1 = fopen(p1, "re"), *f2 = fopen(p2, "re");
	char l1[16384], l2[16384];
	int line = 0;
	CHECK(f1 && f2, "transcripts readable");
	for (;;) {
		char *r1 = fgets(l1, sizeof(l1), f1), *r2 = fgets(l2, sizeof(l2), f2);
		line++;
		if (!r1 && !r2)
			break;
		CHECK(r1 && r2 && !strcmp(l1, l2),
		      "b's results differ at line %d with a active:\n  a idle:   %s  a active: %s",
		      line, r1 ? l1 : "(end)\n", r2 ? l2 : "(end)\n");
	}
	printf("b's %d transcript lines are identical with a idle and a active\n", line - 1);
	fclose(f1);
	fclose(f2);
}

int main(void)
{
	char dir[] = "/tmp/kvt-isolation-XXXXXX";
	char b1[64], b2[64], a1[64], a2[64];

	if (geteuid() != 0) {
		printf("skipped: switching uids needs root\n");
		return KVT_TEST_SKIP;
	}
	const char *s = getenv("KVT_SEED");
	seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
	n_ops = getenv("KVT_LONG") ? 20000 : 400;
	printf("KVT_SEED=%llu, %d operations per tenant\n", (unsigned long long)seed, n_ops);
	fflush(stdout);

	engine_keys(seed, 16 * K, 0, 0, keys, K);

	CHECK(mkdtemp(dir), "mkdtemp");
	snprintf(b1, sizeof(b1), "%s/b-idle", dir);
	snprintf(b2, sizeof(b2), "%s/b-active", dir);
	snprintf(a1, sizeof(a1), "%s/a-idle", dir);
	snprintf(a2, sizeof(a2), "%s/a-active", dir);
	run_phase(false, b1, a1);
	run_phase(true, b2, a2);
	compare(b1, b2);
	if (!getenv("KVT_KEEP")) {
		unlink(b1), unlink(b2), unlink(a1), unlink(a2);
		rmdir(dir);
	} else {
		printf("transcripts in %s\n", dir);
	}
	return 0;
}
