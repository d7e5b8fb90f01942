/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier.Namespace: the blocks of one model and KV geometry. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "codec.h"

int ns_enter(NamespaceObject *self)
{
	if (!self->ns || self->closing) {
		raise_errno(-EBADF, "kvtier", "the namespace is closed");
		return -1;
	}
	if (client_enter(self->client) < 0)
		return -1;
	self->busy++;
	return 0;
}

void ns_leave(NamespaceObject *self)
{
	client_leave(self->client);
	if (--self->busy == 0 && self->closing) {
		kvt_ns_close(self->ns);
		self->ns = NULL;
		self->closing = 0;
	}
}

PyObject *ns_error(NamespaceObject *self, int r, const char *what)
{
	return client_error_for(self->client, r, what);
}

/* The layer groups of open_namespace: one of every layer (window), or
 * groups= as (layers, window) pairs, window 0 for full attention, whose
 * layers add up to layers.  0, or -1 with a ValueError or TypeError. */
static int groups_get(PyObject *groups, unsigned int layers, unsigned int window,
		      const kvt_layer_group *proto, kvt_layer_group *ret, uint32_t *ret_n)
{
	if (groups == Py_None) {
		ret[0] = *proto;
		ret[0].n_layers = layers;
		ret[0].window = window;
		*ret_n = 1;
		return 0;
	}
	if (window) {
		PyErr_SetString(PyExc_ValueError,
				"kvtier: window and groups are exclusive: give each group its window");
		return -1;
	}
	PyObject *seq = binding_tuple(groups, "kvtier: groups must be a sequence of "
					      "(layers, window) pairs");
	if (!seq)
		return -1;
	Py_ssize_t n = PyTuple_Size(seq);
	uint64_t total = 0;
	int r = -1;
	if (n < 1 || n > KVT_PY_MAX_GROUPS) {
		PyErr_Format(PyExc_ValueError, "kvtier: groups takes 1 to %d (layers, window) pairs, "
			     "got %zd", KVT_PY_MAX_GROUPS, n);
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		unsigned int gl, gw;
		PyObject *item = PyTuple_GetItem(seq, i);
		if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "II", &gl, &gw)) {
			PyErr_Format(PyExc_TypeError, "kvtier: groups[%zd] must be a (layers, window) "
				     "pair of ints", i);
			goto out;
		}
		ret[i] = *proto;
		ret[i].n_layers = gl;
		ret[i].window = gw;
		ret[i].attn = proto->attn == KVT_ATTN_MLA ? KVT_ATTN_MLA
			      : gw		     ? KVT_ATTN_SWA
						     : KVT_ATTN_MHA;
		total += gl;
	}
	if (total != layers) {
		PyErr_Format(PyExc_ValueError, "kvtier: the groups hold %llu layers; layers is %u",
			     (unsigned long long)total, layers);
		goto out;
	}
	*ret_n = (uint32_t)n;
	r = 0;
out:
	Py_DECREF(seq);
	return r;
}

/* codec= of open_namespace: a name of kvtier.CODECS or its index.  0, or
 * -1 with a ValueError or TypeError naming the valid ones. */
static int codec_get(PyObject *o, uint32_t *ret)
{
	if (PyLong_Check(o) && !PyBool_Check(o)) {
		long v = PyLong_AsLong(o);
		if (v == -1 && PyErr_Occurred())
			return -1;
		if (v >= 0 && v < KVT_CODEC_COUNT) {
			*ret = (uint32_t)v;
			return 0;
		}
	} else if (PyUnicode_Check(o)) {
		const char *name = PyUnicode_AsUTF8AndSize(o, NULL);
		if (!name)
			return -1;
		for (uint32_t c = 0; c < KVT_CODEC_COUNT; c++)
			if (!strcmp(name, kvt_codec_name(c))) {
				*ret = c;
				return 0;
			}
	} else {
		char tn[64];
		PyErr_Format(PyExc_TypeError, "kvtier: codec must be a name or an int, not %s",
			     binding_type_name(o, tn, sizeof(tn)));
		return -1;
	}
	char names[128] = "";
	for (uint32_t c = 0; c < KVT_CODEC_COUNT; c++) {
		strncat(names, c ? ", " : "", sizeof(names) - strlen(names) - 1);
		strncat(names, kvt_codec_name(c), sizeof(names) - strlen(names) - 1);
	}
	PyErr_Format(PyExc_ValueError, "kvtier: unknown codec %R; one of: %s (or 0 to %d)", o,
		     names, KVT_CODEC_COUNT - 1);
	return -1;
}

/* A codec reads float elements, whole ones in every head: say so here,
 * where the caller can still choose, rather than as the daemon's EINVAL. */
static int codec_check(uint32_t codec, const kvt_layer_group *groups, uint32_t n)
{
	if (codec == KVT_CODEC_NONE)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t eb = kvt_codec_dtype_bytes(groups[i].dtype);
		if (eb == 0) {
			PyErr_Format(PyExc_ValueError,
				     "kvtier: codec %s quantises float32, float16 and bfloat16 "
				     "caches; dtype code %u is stored as it is: open it with "
				     "codec 'none'",
				     kvt_codec_name(codec), groups[i].dtype);
			return -1;
		}
		if (groups[i].head_bytes % eb) {
			PyErr_Format(PyExc_ValueError,
				     "kvtier: codec %s needs whole elements in a head; head_bytes "
				     "%u is not a multiple of %u",
				     kvt_codec_name(codec), groups[i].head_bytes, eb);
			return -1;
		}
	}
	return 0;
}

PyObject *Client_open_namespace(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"model",	"layers",   "kv_heads", "head_bytes",
				 "block_tokens", "dtype",    "tp_size",  "cp_size",
				 "layer_first", "mla",	    "window",	"weights",
				 "salt",	"scale_layout", "groups", "codec", NULL};
	const char *model;
	unsigned int layers, kv_heads, hb, bt, dtype, tp = 1, cp = 1, first = 0, window = 0,
							 scale = 0;
	int mla = 0;
	Py_buffer weights = {0}, salt = {0};
	PyObject *groups_o = Py_None, *codec_o = NULL;
	uint32_t codec = KVT_CODEC_NONE;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sIIIII|$IIIpIy*y*IOO:open_namespace", kwlist,
					 &model, &layers, &kv_heads, &hb, &bt, &dtype, &tp, &cp,
					 &first, &mla, &window, &weights, &salt, &scale, &groups_o,
					 &codec_o))
		return NULL;
	PyObject *ret = NULL;
	const kvt_layer_group proto = {.attn = mla ? KVT_ATTN_MLA : window ? KVT_ATTN_SWA
									: KVT_ATTN_MHA,
				       .planes = mla ? 1 : 2,
				       .kv_heads = kv_heads,
				       .head_bytes = hb,
				       .dtype = dtype,
				       .scale_layout = scale};
	kvt_layer_group groups[KVT_PY_MAX_GROUPS];
	uint32_t n_groups;
	if (groups_get(groups_o, layers, window, &proto, groups, &n_groups) < 0)
		goto out;
	if (codec_o && (codec_get(codec_o, &codec) < 0 || codec_check(codec, groups, n_groups) < 0))
		goto out;
	kvt_ns_desc d = {.model = model,
			 .weights = weights.buf,
			 .weights_len = (uint32_t)weights.len,
			 .layer_first = first,
			 .layer_end = first + layers,
			 .tp_size = tp,
			 .cp_size = cp,
			 .block_tokens = bt,
			 .n_groups = n_groups,
			 .groups = groups,
			 .salt = salt.buf,
			 .salt_len = (uint32_t)salt.len,
			 .codec = codec};
	NamespaceObject *nso = PyObject_New(NamespaceObject, NamespaceType);
	if (!nso)
		goto out;
	nso->ns = NULL;
	nso->busy = nso->closing = 0;
	Py_INCREF((PyObject *)self);
	nso->client = self;
	if (client_enter(self) < 0) {
		Py_DECREF(nso);
		goto out;
	}
	int r;
	kvt_ns *ns = NULL;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_ns_open(self->c, &d, &ns);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		client_error_for(self, r, "open_namespace");
		Py_DECREF(nso);
	} else {
		nso->ns = ns;
		nso->dtype = dtype;
		kvt_ns_get_info(ns, &nso->info);
		ret = (PyObject *)nso;
	}
	client_leave(self);
out:
	if (weights.obj)
		PyBuffer_Release(&weights);
	if (salt.obj)
		PyBuffer_Release(&salt);
	return ret;
}

static void Namespace_dealloc(NamespaceObject *self)
{
	kvt_ns_close(self->ns);
	Py_CLEAR(self->client);
	binding_free((PyObject *)self);
}

static PyObject *Namespace_close(NamespaceObject *self, PyObject *unused)
{
	if (!self->ns)
		Py_RETURN_NONE;
	if (self->busy) {
		self->closing = 1;
		Py_RETURN_NONE;
	}
	kvt_ns_close(self->ns);
	self->ns = NULL;
	Py_RETURN_NONE;
}

static PyObject *Namespace_exit_ctx(NamespaceObject *self, PyObject *args)
{
	return Namespace_close(self, NULL);
}

static PyObject *Namespace_get_info(NamespaceObject *self, void *unused)
{
	const char *codec = kvt_codec_name(self->info.codec);
	return Py_BuildValue("{sIsIsIsssKsKsKsK}", "ns_id", self->info.ns_id, "shards",
			     self->info.shards, "block_tokens", self->info.block_tokens, "codec",
			     codec ? codec : "unknown",
			     "shard_bytes", (unsigned long long)self->info.shard_bytes,
			     "shard_stride", (unsigned long long)self->info.shard_stride,
			     "block_bytes", (unsigned long long)self->info.block_bytes,
			     "bytes_per_token", (unsigned long long)self->info.bytes_per_token);
}

static PyObject *Namespace_get_closed(NamespaceObject *self, void *unused)
{
	return PyBool_FromLong(!self->ns || self->closing);
}

static PyObject *Namespace_lookup(NamespaceObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"keys", "touch", NULL};
	PyObject *keys_o;
	int touch = 1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:lookup", kwlist, &keys_o, &touch))
		return NULL;
	struct mem km;
	size_t n;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL, *states = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (!states || ns_enter(self) < 0)
		goto out;
	int r;
	uint8_t *sp = (uint8_t *)PyBytes_AsString(states);
	Py_BEGIN_ALLOW_THREADS
	r = kvt_lookup(self->ns, km.ptr, n, touch ? KVT_LOOKUP_TOUCH : 0, sp);
	Py_END_ALLOW_THREADS
	if (r < 0)
		ns_error(self, r, "lookup");
	else
		ret = Py_BuildValue("(iO)", r, states);
	ns_leave(self);
out:
	Py_XDECREF(states);
	mem_release(&km);
	return ret;
}

/* touch, delete, prefetch, retain and end: keys in, a count out. */
enum keys_op { OP_TOUCH, OP_DELETE, OP_PREFETCH, OP_RETAIN, OP_END };

static int keys_op_call(kvt_ns *ns, enum keys_op op, const uint8_t *keys, size_t n, unsigned a,
			unsigned b)
{
	switch (op) {
	case OP_TOUCH: return kvt_touch(ns, keys, n);
	case OP_DELETE: return kvt_delete(ns, keys, n);
	case OP_PREFETCH: return kvt_prefetch(ns, keys, n);
	case OP_RETAIN: return kvt_retain(ns, keys, n, a, b);
	default: return kvt_end(ns, keys, n, a);
	}
}

static PyObject *Namespace_keys_op(NamespaceObject *self, PyObject *keys_o, enum keys_op op,
				   unsigned a, unsigned b, const char *what)
{
	struct mem km;
	size_t n;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	if (ns_enter(self) == 0) {
		int r;
		Py_BEGIN_ALLOW_THREADS
		r = keys_op_call(self->ns, op, km.ptr, n, a, b);
		Py_END_ALLOW_THREADS
		ret = r < 0 ? ns_error(self, r, what) : PyLong_FromLong(r);
		ns_leave(self);
	}
	mem_release(&km);
	return ret;
}

static PyObject *Namespace_touch(NamespaceObject *self, PyObject *k)
{
	return Namespace_keys_op(self, k, OP_TOUCH, 0, 0, "touch");
}

static PyObject *Namespace_delete(NamespaceObject *self, PyObject *k)
{
	return Namespace_keys_op(self, k, OP_DELETE, 0, 0, "delete");
}

static PyObject *Namespace_prefetch(NamespaceObject *self, PyObject *k)
{
	return Namespace_keys_op(self, k, OP_PREFETCH, 0, 0, "prefetch");
}

static PyObject *Namespace_retain(NamespaceObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"keys", "priority", "duration_s", NULL};
	PyObject *keys_o;
	unsigned int priority, duration = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OI|I:retain", kwlist, &keys_o, &priority,
					 &duration))
		return NULL;
	return Namespace_keys_op(self, keys_o, OP_RETAIN, priority, duration, "retain");
}

static PyObject *Namespace_end(NamespaceObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"keys", "session", NULL};
	PyObject *keys_o;
	int session = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:end", kwlist, &keys_o, &session))
		return NULL;
	return Namespace_keys_op(self, keys_o, OP_END, session ? KVT_END_SESSION : 0, 0, "end");
}

static PyObject *Namespace_wait_resident(NamespaceObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"keys", "timeout_ms", NULL};
	PyObject *keys_o;
	unsigned int timeout = 30000;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|I:wait_resident", kwlist, &keys_o, &timeout))
		return NULL;
	struct mem km;
	size_t n;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	if (ns_enter(self) == 0) {
		int r;
		Py_BEGIN_ALLOW_THREADS
		r = kvt_wait_resident(self->ns, km.ptr, n, timeout);
		Py_END_ALLOW_THREADS
		ret = r < 0 ? ns_error(self, r, "wait_resident") : PyLong_FromLong(r);
		ns_leave(self);
	}
	mem_release(&km);
	return ret;
}

/* reserve/acquire: a list of dicts, one per key, with a memoryview when mapped. */
static PyObject *Namespace_slots_op(NamespaceObject *self, PyObject *args, int reserve)
{
	unsigned int shard;
	PyObject *keys_o;
	if (!PyArg_ParseTuple(args, "IO", &shard, &keys_o))
		return NULL;
	struct mem km;
	size_t n;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	kvt_slot_ref *refs = calloc(n ? n : 1, sizeof(*refs));
	if (!refs) {
		PyErr_NoMemory();
		goto out;
	}
	if (ns_enter(self) < 0)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = reserve ? kvt_reserve(self->ns, shard, km.ptr, n, refs)
		    : kvt_acquire(self->ns, shard, km.ptr, n, refs);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		ns_error(self, r, reserve ? "reserve" : "acquire");
	} else if ((ret = PyList_New((Py_ssize_t)n))) {
		for (size_t i = 0; i < n; i++) {
			PyObject *mv = Py_None;
			if (refs[i].status == 0 && refs[i].ptr)
				mv = PyMemoryView_FromMemory(refs[i].ptr, (Py_ssize_t)refs[i].bytes,
							     reserve ? PyBUF_WRITE : PyBUF_READ);
			else
				Py_INCREF(mv);
			PyObject *d = mv ? Py_BuildValue("{sisIsKsKsKsN}", "status", refs[i].status,
							 "extent_id", refs[i].extent_id, "handle",
							 (unsigned long long)refs[i].handle, "offset",
							 (unsigned long long)refs[i].offset, "bytes",
							 (unsigned long long)refs[i].bytes, "memory", mv)
					 : NULL;
			if (!d) {
				Py_CLEAR(ret);
				break;
			}
			PyList_SetItem(ret, (Py_ssize_t)i, d);
		}
	}
	ns_leave(self);
out:
	free(refs);
	mem_release(&km);
	return ret;
}

static PyObject *Namespace_reserve(NamespaceObject *self, PyObject *args)
{
	return Namespace_slots_op(self, args, 1);
}

static PyObject *Namespace_acquire(NamespaceObject *self, PyObject *args)
{
	return Namespace_slots_op(self, args, 0);
}

/* (count, statuses) of a call that returned r, or its error. */
static PyObject *count_result(NamespaceObject *self, int r, const int32_t *st, size_t n,
			      const char *call)
{
	if (r < 0)
		return ns_error(self, r, call);
	PyObject *sl = status_list(st, n);
	return sl ? Py_BuildValue("(iN)", r, sl) : NULL;
}

/* store/load whole shards from/to caller buffers: (count, statuses). */
static PyObject *Namespace_copy_op(NamespaceObject *self, PyObject *args, int store)
{
	unsigned int shard;
	PyObject *keys_o, *bufs_o;
	if (!PyArg_ParseTuple(args, "IOO", &shard, &keys_o, &bufs_o))
		return NULL;
	struct mem km, *bm = NULL;
	size_t n, nb = 0;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	void **ptrs = NULL;
	int32_t *st = NULL;
	if (mems_get(bufs_o, !store, self->info.shard_bytes, &bm, &nb) < 0)
		goto out;
	if (nb != n) {
		PyErr_Format(PyExc_ValueError, "kvtier: %zu keys but %zu buffers", n, nb);
		goto out;
	}
	ptrs = calloc(n ? n : 1, sizeof(*ptrs));
	st = calloc(n ? n : 1, sizeof(*st));
	if (!ptrs || !st) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		ptrs[i] = bm[i].ptr;
	if (ns_enter(self) < 0)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = store ? kvt_store(self->ns, shard, km.ptr, n, (const void *const *)ptrs, st)
		  : kvt_load(self->ns, shard, km.ptr, n, ptrs, st);
	Py_END_ALLOW_THREADS
	ret = count_result(self, r, st, n, store ? "store" : "load");
	ns_leave(self);
out:
	free(ptrs);
	free(st);
	mems_release(bm, nb);
	mem_release(&km);
	return ret;
}

static PyObject *Namespace_store(NamespaceObject *self, PyObject *args)
{
	return Namespace_copy_op(self, args, 1);
}

static PyObject *Namespace_load(NamespaceObject *self, PyObject *args)
{
	return Namespace_copy_op(self, args, 0);
}

/* store_paged/load_paged through a Layout, or one per layer group:
 * (count, statuses). */
static PyObject *Namespace_paged_op(NamespaceObject *self, PyObject *args, PyObject *kw,
				    int store)
{
	static char *kwlist[] = {"shard", "layout", "keys", "indices", "groups", "group_indices",
				 NULL};
	unsigned int shard;
	PyObject *layout, *keys_o, *idx_o = Py_None, *groups = Py_None, *gidx = Py_None;
	struct paged_args a;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "IOO|O$OO", kwlist, &shard, &layout, &keys_o,
					 &idx_o, &groups, &gidx) ||
	    paged_args_get(self, layout, keys_o, idx_o, groups, gidx, 0, &a) < 0)
		return NULL;
	PyObject *ret = NULL;
	int32_t *st = calloc(a.n ? a.n : 1, sizeof(*st));
	if (!st) {
		PyErr_NoMemory();
		goto out;
	}
	if (ns_enter(self) < 0)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = store ? kvt_store_paged_groups(self->ns, shard, a.n_layouts, a.layouts, a.keys.ptr,
					   a.n, a.group_idx, st)
		  : kvt_load_paged_groups(self->ns, shard, a.n_layouts, a.layouts, a.keys.ptr,
					  a.n, a.group_idx, st);
	Py_END_ALLOW_THREADS
	ret = count_result(self, r, st, a.n, store ? "store_paged" : "load_paged");
	ns_leave(self);
out:
	free(st);
	paged_args_release(&a);
	return ret;
}

static PyObject *Namespace_store_paged(NamespaceObject *self, PyObject *args, PyObject *kw)
{
	return Namespace_paged_op(self, args, kw, 1);
}

static PyObject *Namespace_load_paged(NamespaceObject *self, PyObject *args, PyObject *kw)
{
	return Namespace_paged_op(self, args, kw, 0);
}

static PyMethodDef Namespace_methods[] = {
	{"close", (PyCFunction)Namespace_close, METH_NOARGS,
	 "close()\n--\n\nForget the namespace (its blocks stay in the daemon)."},
	{"__enter__", binding_enter_self, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)Namespace_exit_ctx, METH_VARARGS, NULL},
	{"lookup", (PyCFunction)(void (*)(void))Namespace_lookup, METH_VARARGS | METH_KEYWORDS,
	 "lookup(keys, touch=True)\n--\n\nReturns (leading_hits, states): states holds one byte per\n"
	 "key, MISS, HOST, DISK (staging has begun) or PENDING.  While the daemon is\n"
	 "away: (0, all misses)."},
	{"touch", (PyCFunction)Namespace_touch, METH_O,
	 "touch(keys)\n--\n\nMark blocks used; returns how many were resident."},
	{"delete", (PyCFunction)Namespace_delete, METH_O,
	 "delete(keys)\n--\n\nDelete blocks; returns how many existed."},
	{"prefetch", (PyCFunction)Namespace_prefetch, METH_O,
	 "prefetch(keys)\n--\n\nStage blocks on NVMe into host memory; returns how many are there."},
	{"retain", (PyCFunction)(void (*)(void))Namespace_retain, METH_VARARGS | METH_KEYWORDS,
	 "retain(keys, priority, duration_s=0)\n--\n\nRetain stored blocks at a priority, 0 to\n"
	 "100 (PRIORITY_DEFAULT is a block nobody said anything about; lower goes\n"
	 "first, higher last), for duration_s seconds (0: until changed).  Returns\n"
	 "how many were stored."},
	{"end", (PyCFunction)(void (*)(void))Namespace_end, METH_VARARGS | METH_KEYWORDS,
	 "end(keys, session=False)\n--\n\nThe request (or, with session=True, the session)\n"
	 "that used these blocks ended: the request's own blocks (nobody hit them\n"
	 "since they were stored), or every block named for a session, go first.\n"
	 "Returns how many were stored."},
	{"wait_resident", (PyCFunction)(void (*)(void))Namespace_wait_resident,
	 METH_VARARGS | METH_KEYWORDS,
	 "wait_resident(keys, timeout_ms=30000)\n--\n\nWait until the leading hits are in host\n"
	 "memory; returns their number (0 while the daemon is away)."},
	{"reserve", (PyCFunction)Namespace_reserve, METH_VARARGS,
	 "reserve(shard, keys)\n--\n\nReserve this rank's shard of each key.  Returns one dict per\n"
	 "key: status, extent_id, handle, offset, bytes and memory (a writable\n"
	 "memoryview, valid until commit or abort)."},
	{"acquire", (PyCFunction)Namespace_acquire, METH_VARARGS,
	 "acquire(shard, keys)\n--\n\nLease resident blocks: one dict per key as reserve returns,\n"
	 "memory read-only and valid until release."},
	{"store", (PyCFunction)Namespace_store, METH_VARARGS,
	 "store(shard, keys, buffers)\n--\n\nStore whole shards (shard_bytes each).  Returns\n"
	 "(stored, statuses); -EEXIST counts as stored."},
	{"load", (PyCFunction)Namespace_load, METH_VARARGS,
	 "load(shard, keys, buffers)\n--\n\nLoad whole shards into writable buffers.  Returns\n"
	 "(loaded, statuses); a miss leaves its buffer untouched."},
	{"store_paged", (PyCFunction)(void (*)(void))Namespace_store_paged,
	 METH_VARARGS | METH_KEYWORDS,
	 "store_paged(shard, layout, keys, indices=None, *, groups=None, group_indices=None)\n--\n\n"
	 "Store blocks from an engine's paged cache described by a Layout, or,\n"
	 "for a namespace of several layer groups, by one Layout per group\n"
	 "(layout None, groups=) with their indices (group_indices=, one per\n"
	 "group, or indices for all).  Store only blocks whose every group\n"
	 "holds its pages.  Returns (stored, statuses)."},
	{"load_paged", (PyCFunction)(void (*)(void))Namespace_load_paged,
	 METH_VARARGS | METH_KEYWORDS,
	 "load_paged(shard, layout, keys, indices=None, *, groups=None, group_indices=None)\n--\n\n"
	 "Load blocks into an engine's paged cache (as store_paged); a group's\n"
	 "padding slots (-1) are left alone.  Returns (loaded, statuses)."},
	{NULL}};

static PyObject *Namespace_get_codec(NamespaceObject *self, void *unused)
{
	const char *codec = kvt_codec_name(self->info.codec);
	return PyUnicode_FromString(codec ? codec : "unknown");
}

static PyGetSetDef Namespace_getset[] = {
	{"codec", (getter)Namespace_get_codec, NULL,
	 "How the blocks are stored: \"none\" (the cache's own bytes), \"fp8-e4m3\"\n"
	 "or \"int4\" (quantised in this process's copies; kvtier.CODECS).",
	 NULL},
	{"info", (getter)Namespace_get_info, NULL,
	 "The geometry the daemon derived: ns_id, shards, block_tokens, codec (its\n"
	 "name), shard_bytes, shard_stride, block_bytes, bytes_per_token.  With a\n"
	 "codec the sizes are those of the stored (quantised) blocks.",
	 NULL},
	{"closed", (getter)Namespace_get_closed, NULL, "True after close().", NULL},
	{NULL}};

static PyMemberDef Namespace_members[] = {
	{"client", T_OBJECT, offsetof(NamespaceObject, client), READONLY,
	 "The Client this namespace was opened on."},
	{NULL}};

static PyType_Slot Namespace_slots[] = {
	{Py_tp_doc, (void *)"A namespace of one model and KV geometry, from Client.open_namespace().\n"
			    "Keys are bytes of 32 per block (hash_chain).  A context manager."},
	{Py_tp_dealloc, (void *)Namespace_dealloc},
	{Py_tp_methods, (void *)Namespace_methods},
	{Py_tp_getset, (void *)Namespace_getset},
	{Py_tp_members, (void *)Namespace_members},
	{0, NULL}};

/* Made by Client.open_namespace only. */
PyType_Spec namespace_spec = {
	.name = "kvtier.Namespace",
	.basicsize = sizeof(NamespaceObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = Namespace_slots,
};
