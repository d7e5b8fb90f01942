/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier.Client: one connection to kvtierd. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

static void client_log(int level, const char *message, void *userdata)
{
	PyGILState_STATE g = PyGILState_Ensure();
	ClientObject *self = userdata;
	if (self->log) {
		PyObject *r = PyObject_CallFunction(self->log, "is", level, message);
		if (r)
			Py_DECREF(r);
		else
			PyErr_WriteUnraisable(self->log);
	}
	PyGILState_Release(g);
}

static int Client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "name", "pci_bus_id", "observer", "log", NULL};
	const char *socket_path = NULL, *name = "python", *pci = NULL;
	int observer = 0;
	PyObject *log = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzzpO:Client", kwlist, &socket_path, &name,
					 &pci, &observer, &log))
		return -1;
	if (self->c) {
		PyErr_SetString(PyExc_RuntimeError, "kvtier: Client is already connected");
		return -1;
	}
	if (log != Py_None && !PyCallable_Check(log)) {
		PyErr_SetString(PyExc_TypeError, "kvtier: log must be callable(level, message)");
		return -1;
	}
	kvt_connect_opts o = {.size = sizeof(o),
			      .flags = observer ? KVT_CONNECT_OBSERVER : 0,
			      .socket_path = socket_path,
			      .name = name,
			      .pci_bus_id = pci};
	kvt_client *c = NULL;
	char reason[512];
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_client_connect_opts(&o, &c);
	snprintf(reason, sizeof(reason), "%s", kvt_connect_error());
	Py_END_ALLOW_THREADS
	if (r < 0) {
		raise_errno(r, "connect", reason);
		return -1;
	}
	self->c = c;
	if (log != Py_None) {
		Py_INCREF(log);
		self->log = log;
		kvt_client_set_log(c, client_log, self);
	}
	return 0;
}

static void Client_dealloc(ClientObject *self)
{
	/* No call can be in progress: each holds a reference. */
	kvt_client_free(self->c);
	Py_CLEAR(self->log);
	binding_free((PyObject *)self);
}

static PyObject *Client_close(ClientObject *self, PyObject *unused)
{
	if (!self->c)
		Py_RETURN_NONE;
	if (self->busy) {
		self->closing = 1;
		Py_RETURN_NONE;
	}
	kvt_client *c = self->c;
	self->c = NULL;
	Py_BEGIN_ALLOW_THREADS
	kvt_client_free(c);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *Client_exit_ctx(ClientObject *self, PyObject *args)
{
	return Client_close(self, NULL);
}

static PyObject *Client_ping(ClientObject *self, PyObject *unused)
{
	if (client_enter(self) < 0)
		return NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_client_ping(self->c);
	Py_END_ALLOW_THREADS
	PyObject *ret = r < 0 ? client_error_for(self, r, "ping") : (Py_INCREF(Py_None), Py_None);
	client_leave(self);
	return ret;
}

static PyObject *Client_get_connected(ClientObject *self, void *unused)
{
	return PyBool_FromLong(self->c && !self->closing && kvt_client_connected(self->c));
}

static PyObject *Client_get_closed(ClientObject *self, void *unused)
{
	return PyBool_FromLong(!self->c || self->closing);
}

static PyObject *Client_get_numa_node(ClientObject *self, void *unused)
{
	if (client_enter(self) < 0)
		return NULL;
	int n = kvt_client_numa_node(self->c);
	client_leave(self);
	return PyLong_FromLong(n);
}

/* Records of kvt_stats as dicts, gathered with the GIL taken back. */
struct stats_ctx {
	PyObject *list;
};

static int stats_cb(const kvt_record *r, void *userdata)
{
	struct stats_ctx *ctx = userdata;
	PyGILState_STATE g = PyGILState_Ensure();
	int stop = 1;
	PyObject *d = PyDict_New();
	if (!d || !ctx->list)
		goto out;
	PyObject *kind = PyUnicode_FromString(kvt_record_kind(r));
	if (!kind || PyDict_SetItemString(d, "kind", kind) < 0) {
		Py_XDECREF(kind);
		goto out;
	}
	Py_DECREF(kind);
	for (uint32_t i = 0; i < kvt_record_n_fields(r); i++) {
		PyObject *v;
		switch (kvt_record_field_type(r, i)) {
		case KVT_FIELD_U64:
			v = PyLong_FromUnsignedLongLong(kvt_record_field_u64(r, i));
			break;
		case KVT_FIELD_I64:
			v = PyLong_FromLongLong((long long)kvt_record_field_u64(r, i));
			break;
		default:
			v = PyUnicode_DecodeUTF8(kvt_record_field_str(r, i),
						 (Py_ssize_t)strlen(kvt_record_field_str(r, i)),
						 "replace");
		}
		if (!v || PyDict_SetItemString(d, kvt_record_field_name(r, i), v) < 0) {
			Py_XDECREF(v);
			goto out;
		}
		Py_DECREF(v);
	}
	stop = PyList_Append(ctx->list, d) < 0;
out:
	if (stop)
		Py_CLEAR(ctx->list);
	Py_XDECREF(d);
	PyGILState_Release(g);
	return stop;
}

static PyObject *Client_stats(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"what", NULL};
	unsigned int what = KVT_STATS_ALL;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|I:stats", kwlist, &what))
		return NULL;
	if (client_enter(self) < 0)
		return NULL;
	struct stats_ctx ctx = {PyList_New(0)};
	int r = -ENOMEM;
	if (ctx.list) {
		Py_BEGIN_ALLOW_THREADS
		r = kvt_stats(self->c, what, stats_cb, &ctx);
		Py_END_ALLOW_THREADS
	}
	PyObject *ret = ctx.list;
	if (!ret && !PyErr_Occurred())
		PyErr_NoMemory();
	if (ret && r < 0) {
		Py_CLEAR(ret);
		client_error_for(self, r, "stats");
	}
	client_leave(self);
	return ret;
}

/* commit/abort/release over a sequence of handles. */
static int handles_get(PyObject *o, struct mem *m, void **owned, size_t *n)
{
	return ints_get(o, 8, 0, m, owned, n);
}

static PyObject *Client_handles_op(ClientObject *self, PyObject *handles_o, PyObject *success_o,
				   const char *what)
{
	struct mem hm;
	void *hown = NULL;
	size_t n, ns = 0;
	if (handles_get(handles_o, &hm, &hown, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	uint8_t *success = NULL;
	int32_t *st = calloc(n ? n : 1, sizeof(*st));
	if (!st) {
		PyErr_NoMemory();
		goto out;
	}
	if (success_o && success_o != Py_None) {
		PyObject *seq = binding_tuple(success_o, "kvtier: success is a sequence of bools");
		if (!seq)
			goto out;
		ns = (size_t)PyTuple_Size(seq);
		success = malloc(ns ? ns : 1);
		for (size_t i = 0; success && i < ns; i++)
			success[i] = (uint8_t)(PyObject_IsTrue(PyTuple_GetItem(seq, (Py_ssize_t)i)) == 1);
		Py_DECREF(seq);
		if (!success) {
			PyErr_NoMemory();
			goto out;
		}
		if (ns != n) {
			PyErr_Format(PyExc_ValueError, "kvtier: %zu handles but %zu success flags", n, ns);
			goto out;
		}
	}
	if (client_enter(self) < 0)
		goto out;
	int r;
	const uint64_t *h = hm.ptr;
	Py_BEGIN_ALLOW_THREADS
	if (!strcmp(what, "commit")) {
		if (!success) {
			success = malloc(n ? n : 1);
			if (success)
				memset(success, 1, n);
		}
		r = success ? kvt_commit(self->c, h, success, n, st) : -ENOMEM;
	} else if (!strcmp(what, "abort")) {
		r = kvt_abort(self->c, h, n, st);
	} else {
		r = kvt_release(self->c, h, n, st);
	}
	Py_END_ALLOW_THREADS
	/* -ENOTCONN for the whole call still leaves per-handle statuses. */
	if (r < 0 && r != -ENOTCONN)
		client_error_for(self, r, what);
	else
		ret = status_list(st, n);
	client_leave(self);
out:
	mem_release(&hm);
	free(hown);
	free(success);
	free(st);
	return ret;
}

static PyObject *Client_commit(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"handles", "success", NULL};
	PyObject *h, *s = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:commit", kwlist, &h, &s))
		return NULL;
	return Client_handles_op(self, h, s, "commit");
}

static PyObject *Client_abort(ClientObject *self, PyObject *h)
{
	return Client_handles_op(self, h, NULL, "abort");
}

static PyObject *Client_release(ClientObject *self, PyObject *h)
{
	return Client_handles_op(self, h, NULL, "release");
}

static PyObject *Client_map(ClientObject *self, PyObject *args)
{
	unsigned int extent;
	unsigned long long offset, bytes;
	if (!PyArg_ParseTuple(args, "IKK:map", &extent, &offset, &bytes))
		return NULL;
	if (client_enter(self) < 0)
		return NULL;
	void *p = NULL;
	int r = kvt_client_map(self->c, extent, offset, bytes, &p);
	PyObject *ret = r < 0 ? client_error_for(self, r, "map")
			      : PyMemoryView_FromMemory(p, (Py_ssize_t)bytes, PyBUF_WRITE);
	client_leave(self);
	return ret;
}

static PyObject *Client_admin_evict(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"tenant_id", "ns_id", "drop", NULL};
	unsigned int tenant, ns;
	int drop = 1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "II|p:admin_evict", kwlist, &tenant, &ns, &drop))
		return NULL;
	if (client_enter(self) < 0)
		return NULL;
	int64_t r;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_admin_evict(self->c, tenant, ns, drop);
	Py_END_ALLOW_THREADS
	PyObject *ret = r < 0 ? client_error_for(self, (int)r, "admin_evict")
			      : PyLong_FromLongLong(r);
	client_leave(self);
	return ret;
}

PyObject *Client_open_namespace(ClientObject *self, PyObject *args, PyObject *kw);

static PyMethodDef Client_methods[] = {
	{"close", (PyCFunction)Client_close, METH_NOARGS,
	 "close()\n--\n\nDisconnect and unmap the pool.  Namespaces opened on this client stay\n"
	 "objects that raise ENOTCONN until closed.  Safe to call twice."},
	{"__enter__", binding_enter_self, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)Client_exit_ctx, METH_VARARGS, NULL},
	{"ping", (PyCFunction)Client_ping, METH_NOARGS,
	 "ping()\n--\n\nOne empty request and its reply."},
	{"stats", (PyCFunction)(void (*)(void))Client_stats, METH_VARARGS | METH_KEYWORDS,
	 "stats(what=STATS_ALL)\n--\n\nThe daemon's records ('daemon', 'tenant', 'namespace',\n"
	 "'client') as a list of dicts, each with its 'kind'."},
	{"commit", (PyCFunction)(void (*)(void))Client_commit, METH_VARARGS | METH_KEYWORDS,
	 "commit(handles, success=None)\n--\n\nCommit reservations (success: one flag per handle,\n"
	 "default all True).  Returns one status per handle: 0, or a negative errno\n"
	 "(-ESTALE: the daemon restarted and the block was not stored)."},
	{"abort", (PyCFunction)Client_abort, METH_O,
	 "abort(handles)\n--\n\nGive reservations back unwritten.  Returns the statuses."},
	{"release", (PyCFunction)Client_release, METH_O,
	 "release(handles)\n--\n\nEnd leases.  Returns the statuses."},
	{"map", (PyCFunction)Client_map, METH_VARARGS,
	 "map(extent_id, offset, nbytes)\n--\n\nA writable memoryview of a shard that another\n"
	 "process of the tenant reserved or acquired."},
	{"admin_evict", (PyCFunction)(void (*)(void))Client_admin_evict,
	 METH_VARARGS | METH_KEYWORDS,
	 "admin_evict(tenant_id, ns_id, drop=True)\n--\n\nDrop a namespace's blocks (root or\n"
	 "kvtierd's uid).  Returns how many were dropped."},
	{"open_namespace", (PyCFunction)(void (*)(void))Client_open_namespace,
	 METH_VARARGS | METH_KEYWORDS,
	 "open_namespace(model, layers, kv_heads, head_bytes, block_tokens, dtype, *,\n"
	 "               tp_size=1, cp_size=1, layer_first=0, mla=False, window=0,\n"
	 "               weights=b'', salt=b'', scale_layout=0, groups=None,\n"
	 "               codec='none')\n--\n\n"
	 "Open (or join) the namespace of one model and KV geometry.  kv_heads is\n"
	 "the total over all tensor-parallel ranks; head_bytes is head_dim times\n"
	 "the element size (for MLA: the latent of one token); dtype is an integer\n"
	 "code (kvtier.DTYPES).  groups: the layer groups of a hybrid model, in\n"
	 "block order, as (layers, window) pairs (window 0: full attention) that\n"
	 "add up to layers; a block then holds each group's layers after the\n"
	 "other's.  codec: how blocks are stored, a name of kvtier.CODECS or its\n"
	 "index; other than 'none', store_paged quantises and load_paged\n"
	 "dequantises in this process (float32, float16 and bfloat16 caches only;\n"
	 "ValueError otherwise), and info's sizes are the quantised ones.  Every\n"
	 "argument is part of the identity: change one and no block is shared."},
	{NULL}};

static PyGetSetDef Client_getset[] = {
	{"connected", (getter)Client_get_connected, NULL, "True while the daemon answers.", NULL},
	{"closed", (getter)Client_get_closed, NULL, "True after close().", NULL},
	{"numa_node", (getter)Client_get_numa_node, NULL,
	 "The NUMA node of this client's pool slots, or -1.", NULL},
	{NULL}};

static PyType_Slot Client_slots[] = {
	{Py_tp_doc, (void *)"Client(socket=None, name='python', pci_bus_id=None, observer=False, log=None)\n"
		    "--\n\n"
		    "A connection to kvtierd that maps the tenant's pool.  socket defaults to\n"
		    "$KVTIER_SOCKET or kvtierd's default; pci_bus_id names this process's GPU\n"
		    "so its slots come from that NUMA node; observer connects without a pool\n"
		    "(monitoring); log receives (level, message) from the library.  The\n"
		    "library reconnects by itself when the daemon restarts; meanwhile lookups\n"
		    "miss and stores raise ENOTCONN.  A context manager."},
	{Py_tp_new, (void *)PyType_GenericNew},
	{Py_tp_init, (void *)Client_init},
	{Py_tp_dealloc, (void *)Client_dealloc},
	{Py_tp_methods, (void *)Client_methods},
	{Py_tp_getset, (void *)Client_getset},
	{0, NULL}};

PyType_Spec client_spec = {
	.name = "kvtier.Client",
	.basicsize = sizeof(ClientObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Client_slots,
};
