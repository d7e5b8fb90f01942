/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU copy path: store and load of whole blocks, from and into plain
 * buffers or an engine's paged cache (the layout descriptor), over the
 * block operations of blocks.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "client-internal.h"
#include "macro.h"

/*
 * How one block's bytes move between the caller and its slot: a plain
 * buffer, or an engine's paged cache through layout descriptors, one per
 * layer group, whose blocks follow each other in the slot.
 */
struct copier {
	const void *const *srcs; /* kvt_store */
	void *const *dsts;       /* kvt_load */
	uint32_t n_parts;        /* *_paged: layer groups */
	const kvt_layout *const *layouts; /* [n_parts]: the engine's, or */
	kvt_layout coded[KVT_MAX_GROUPS];  /* with the namespace's codec */
	const kvt_layout *coded_ptrs[KVT_MAX_GROUPS];
	const int64_t *const *indices;    /* [n_parts] */
	uint64_t offset[KVT_MAX_GROUPS];  /* of each group's block in the slot */
	uint32_t block_tokens;
	bool stream; /* plain buffers: copied with non-temporal stores */
};

/* The last-level cache as the kernel describes it, or a guess at one.
 * Not sysconf(_SC_LEVEL3_CACHE_SIZE): glibc asks CPUID, which a virtual
 * machine may fill in for the host (320 MiB on one whose sysfs and lscpu
 * say 32 MiB). */
static uint64_t cache_bytes(void)
{
	static uint64_t cached;
	unsigned long long v = 0;
	char unit = 0;

	if (cached)
		return cached;
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "re");
	if (f) {
		if (fscanf(f, "%llu%c", &v, &unit) < 1)
			v = 0;
		fclose(f);
	}
	v = unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
	cached = v ? v : UINT64_C(32) << 20;
	return cached;
}

/*
 * A batch larger than the last-level cache is copied with non-temporal
 * stores.  An ordinary store first reads the line it writes (three
 * transfers a line: the source, the destination's old bytes, the new
 * ones), and on a batch that does not fit the cache the line is gone
 * again before anyone reads it; a streaming store skips the read and the
 * cache (two transfers).  Where memory is the bound that is up to a third
 * of the copy.  glibc's memcpy decides per call, and each block of a
 * batch is below its threshold.  The fence orders the stores before the
 * COMMIT or RELEASE that follows.
 */
static void copy_stream(void *dst, const void *src, size_t n)
{
#ifdef __SSE2__
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head = (64 - ((uintptr_t)d & 63)) & 63;

	if (n < head + 256) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	_mm_sfence();
#else
	memcpy(dst, src, n);
#endif
}

/* Whether a batch of n blocks of bytes each streams (copy_stream). */
static bool batch_streams(size_t n, uint64_t bytes)
{
	return bytes && n > cache_bytes() / bytes;
}

/* The indices of block i in part k. */
static const int64_t *part_indices(const struct copier *cp, uint32_t k, size_t i)
{
	size_t per = cp->layouts[k]->index_kind == KVT_INDEX_SLOT ? cp->block_tokens : 1;
	return cp->indices[k] + i * per;
}

static int copy_in(const struct copier *cp, size_t i, void *slot, uint64_t bytes)
{
	if (!cp->n_parts) {
		if (cp->stream)
			copy_stream(slot, cp->srcs[i], bytes);
		else
			memcpy(slot, cp->srcs[i], bytes);
		return 0;
	}
	for (uint32_t k = 0; k < cp->n_parts; k++) {
		void *blocks[1] = {(uint8_t *)slot + cp->offset[k]};
		int r = kvt_layout_gather(cp->layouts[k], cp->block_tokens,
					  part_indices(cp, k, i), 1, blocks);
		if (r < 0)
			return r;
	}
	return 0;
}

static int copy_out(const struct copier *cp, size_t i, const void *slot, uint64_t bytes)
{
	if (!cp->n_parts) {
		if (cp->stream)
			copy_stream(cp->dsts[i], slot, bytes);
		else
			memcpy(cp->dsts[i], slot, bytes);
		return 0;
	}
	for (uint32_t k = 0; k < cp->n_parts; k++) {
		const void *blocks[1] = {(const uint8_t *)slot + cp->offset[k]};
		int r = kvt_layout_scatter(cp->layouts[k], cp->block_tokens,
					   part_indices(cp, k, i), 1, blocks);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Reserve or acquire a batch's slots; when that fails, each key's status
 * says why. */
static int take_slots(kvt_ns *ns, bool reserve, uint32_t shard, const uint8_t *keys,
		      size_t n, kvt_slot_ref *refs, int32_t *ret_status)
{
	int r = reserve ? kvt_reserve(ns, shard, keys, n, refs)
			: kvt_acquire(ns, shard, keys, n, refs);
	for (size_t i = 0; r < 0 && ret_status && i < n; i++)
		ret_status[i] = refs[i].status;
	return r;
}

/* Commit the k copies made (success[j] tells how each went), set the
 * statuses of the keys which[] names and count the blocks stored in
 * *stored.  \return kvt_commit's answer */
static int commit_copies(kvt_ns *ns, uint64_t *handles, const uint8_t *success,
			 const size_t *which, size_t k, int32_t *cst, int32_t *ret_status,
			 int *stored)
{
	size_t unsent = 0;

	int r = kvt_commit(ns->c, handles, success, k, cst);
	for (size_t j = 0; j < k; j++) {
		int32_t st = cst[j];
		/* Not committed for want of the daemon: still ours, and given
		 * back below (unsent <= j). */
		if (st == -ENOTCONN)
			handles[unsent++] = handles[j];
		if (st == 0 && !success[j])
			st = -EIO;
		if (ret_status)
			ret_status[which[j]] = st;
		*stored += st == 0;
	}
	if (unsent)
		kvt_abort(ns->c, handles, unsent, NULL);
	return r;
}

static int store_batch(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
		       const struct copier *cp, int32_t *ret_status)
{
	size_t m = n ? n : 1;
	_cleanup_free_ kvt_slot_ref *refs = calloc(m, sizeof(*refs));
	_cleanup_free_ uint64_t *handles = calloc(m, sizeof(*handles));
	_cleanup_free_ uint8_t *success = calloc(m, 1);
	_cleanup_free_ int32_t *cst = calloc(m, sizeof(*cst));
	_cleanup_free_ size_t *which = calloc(m, sizeof(*which));
	int stored = 0;

	if (!refs || !handles || !success || !cst || !which)
		return -ENOMEM;
	int r = take_slots(ns, true, shard, keys, n, refs, ret_status);
	if (r < 0)
		return r;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (ret_status)
			ret_status[i] = refs[i].status;
		if (refs[i].status == -EEXIST)
			stored++;
		if (refs[i].status < 0)
			continue;
		/* A copy that fails is committed as failed, never as done. */
		success[k] = copy_in(cp, i, refs[i].ptr, refs[i].bytes) == 0;
		handles[k] = refs[i].handle;
		which[k++] = i;
	}
	r = k ? commit_copies(ns, handles, success, which, k, cst, ret_status, &stored) : 0;
	return r < 0 && !stored ? r : stored;
}

static int load_batch(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
		      const struct copier *cp, int32_t *ret_status)
{
	_cleanup_free_ kvt_slot_ref *refs = calloc(n ? n : 1, sizeof(*refs));
	_cleanup_free_ uint64_t *handles = calloc(n ? n : 1, sizeof(*handles));
	int loaded = 0;

	if (!refs || !handles)
		return -ENOMEM;
	int r = take_slots(ns, false, shard, keys, n, refs, ret_status);
	if (r < 0)
		return r;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t st = refs[i].status;
		if (st == 0) {
			st = copy_out(cp, i, refs[i].ptr, refs[i].bytes);
			handles[k++] = refs[i].handle;
			loaded += st == 0;
		}
		if (ret_status)
			ret_status[i] = st;
	}
	r = k ? client_release_async(ns->c, handles, k) : 0;
	if (r == -ENOTCONN)
		r = 0;
	return r < 0 && !loaded ? r : loaded;
}

KVT_EXPORT int kvt_store(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
			 const void *const *srcs, int32_t *ret_status)
{
	if (!ns || (n && (!keys || !srcs)))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!srcs[i])
			return -EINVAL;
	struct copier cp = {.srcs = srcs, .stream = batch_streams(n, ns->info.shard_bytes)};
	return store_batch(ns, shard, keys, n, &cp, ret_status);
}

KVT_EXPORT int kvt_load(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
			void *const *dsts, int32_t *ret_status)
{
	if (!ns || (n && (!keys || !dsts)))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!dsts[i])
			return -EINVAL;
	struct copier cp = {.dsts = dsts, .stream = batch_streams(n, ns->info.shard_bytes)};
	return load_batch(ns, shard, keys, n, &cp, ret_status);
}

int ns_coded_layout(const kvt_ns *ns, uint32_t n_groups, uint32_t k, const kvt_layout *layout,
		    kvt_layout *ret)
{
	uint32_t dtype = ns->group_dtype[k < ns->n_groups ? k : 0];

	if (n_groups == 1)
		for (uint32_t g = 1; g < ns->n_groups; g++)
			if (ns->group_dtype[g] != dtype)
				return -EINVAL;
	if (!layout)
		return -EINVAL;
	*ret = *layout;
	ret->codec = ns->info.codec;
	ret->dtype = dtype;
	return 0;
}

/* A namespace with a codec: the layouts as the copies use them
 * (ns_coded_layout). */
static int coded_layouts(kvt_ns *ns, uint32_t n_groups, const kvt_layout *const *layouts,
			 struct copier *cp)
{
	for (uint32_t k = 0; k < n_groups; k++) {
		int r = ns_coded_layout(ns, n_groups, k, layouts[k], &cp->coded[k]);
		if (r < 0)
			return r;
		cp->coded_ptrs[k] = &cp->coded[k];
	}
	cp->layouts = cp->coded_ptrs;
	return 0;
}

/* The copier of a paged call, once its layouts are checked against the
 * namespace's geometry: their blocks, one after the other, are its shard. */
static int paged_copier(kvt_ns *ns, uint32_t n_groups, const kvt_layout *const *layouts,
			const int64_t *const *indices, size_t n, struct copier *ret)
{
	uint64_t bytes = 0;

	if (!ns || !layouts || !indices || n_groups == 0 || n_groups > KVT_MAX_GROUPS)
		return -EINVAL;
	*ret = (struct copier){.n_parts = n_groups, .layouts = layouts, .indices = indices,
			       .block_tokens = ns->info.block_tokens};
	if (ns->info.codec != KVT_CODEC_NONE) {
		int r = coded_layouts(ns, n_groups, layouts, ret);
		if (r < 0)
			return r;
		layouts = ret->layouts;
	}
	for (uint32_t k = 0; k < n_groups; k++) {
		uint64_t b = layouts[k] ? kvt_layout_block_bytes(layouts[k], ns->info.block_tokens)
					: 0;
		if (b == 0 || (n && !indices[k]))
			return -EINVAL;
		ret->offset[k] = bytes;
		bytes += b;
	}
	if (bytes != ns->info.shard_bytes) {
		if (ns->c)
			snprintf(ns->c->error, sizeof(ns->c->error),
				 "the layout%s hold%s %llu bytes per block but the namespace's shard is %llu bytes",
				 n_groups > 1 ? "s" : "", n_groups > 1 ? "" : "s",
				 (unsigned long long)bytes,
				 (unsigned long long)ns->info.shard_bytes);
		return -EINVAL;
	}
	return 0;
}

KVT_EXPORT int kvt_store_paged(kvt_ns *ns, uint32_t shard, const kvt_layout *layout,
			       const uint8_t *keys, size_t n, const int64_t *indices,
			       int32_t *ret_status)
{
	return kvt_store_paged_groups(ns, shard, 1, &layout, keys, n, &indices, ret_status);
}

KVT_EXPORT int kvt_load_paged(kvt_ns *ns, uint32_t shard, const kvt_layout *layout,
			      const uint8_t *keys, size_t n, const int64_t *indices,
			      int32_t *ret_status)
{
	return kvt_load_paged_groups(ns, shard, 1, &layout, keys, n, &indices, ret_status);
}

KVT_EXPORT int kvt_store_paged_groups(kvt_ns *ns, uint32_t shard, uint32_t n_groups,
				      const kvt_layout *const *layouts, const uint8_t *keys,
				      size_t n, const int64_t *const *group_indices,
				      int32_t *ret_status)
{
	struct copier cp;
	int r = paged_copier(ns, n_groups, layouts, group_indices, n, &cp);
	return r < 0 ? r : store_batch(ns, shard, keys, n, &cp, ret_status);
}

KVT_EXPORT int kvt_load_paged_groups(kvt_ns *ns, uint32_t shard, uint32_t n_groups,
				     const kvt_layout *const *layouts, const uint8_t *keys,
				     size_t n, const int64_t *const *group_indices,
				     int32_t *ret_status)
{
	struct copier cp;
	int r = paged_copier(ns, n_groups, layouts, group_indices, n, &cp);
	return r < 0 ? r : load_batch(ns, shard, keys, n, &cp, ret_status);
}
