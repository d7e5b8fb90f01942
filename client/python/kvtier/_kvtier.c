/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtier._kvtier: the CPython binding of libkvtier-client.
 *
 * A thin layer: every method is one library call.  Memory comes in through
 * the buffer protocol (bytes, numpy arrays) or, for torch tensors, through
 * data_ptr() on a contiguous CPU tensor; indices and tokens may also be
 * sequences of ints (converted in C).  The GIL is released around every
 * call that copies or waits.
 *
 * Lifetime: a Namespace holds a reference to its Client, and both count
 * the calls in progress on them, so that close() from one thread while
 * another thread is inside the library only marks the object: the last
 * call out frees it.  Objects may be closed in any order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt-config.h"
#include "kvtier.h"
#if KVT_HAVE_CUDA
#include "kvtier-cuda.h"
#endif

static PyObject *kvt_error; /* kvtier.Error, a subclass of OSError */

/* Raise kvtier.Error(errno, message). */
static PyObject *raise_errno(int r, const char *what, const char *detail)
{
	const char *msg = detail && *detail ? detail : strerror(r < 0 ? -r : r);
	PyObject *args = Py_BuildValue("(is)", r < 0 ? -r : r, msg);
	if (args) {
		PyObject *err = PyObject_Call(kvt_error, args, NULL);
		Py_DECREF(args);
		if (err) {
			PyObject *w = PyUnicode_FromString(what);
			if (w) {
				PyObject_SetAttrString(err, "call", w);
				Py_DECREF(w);
			}
			PyErr_SetObject(kvt_error, err);
			Py_DECREF(err);
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Memory arguments                                                   */
/* ------------------------------------------------------------------ */

/* One piece of caller memory, held for the length of a call. */
struct mem {
	void *ptr;
	size_t len;
	Py_buffer view; /* when view.obj is set */
};

static void mem_release(struct mem *m)
{
	if (m->view.obj)
		PyBuffer_Release(&m->view);
	m->view.obj = NULL;
}

/* A contiguous CPU torch tensor, or anything with the same four methods. */
static int mem_from_tensor(PyObject *o, struct mem *m)
{
	PyObject *dev = PyObject_GetAttrString(o, "device");
	if (!dev)
		return -1;
	PyObject *type = PyObject_GetAttrString(dev, "type");
	Py_DECREF(dev);
	if (!type)
		return -1;
	int cpu = PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "cpu") == 0;
	Py_DECREF(type);
	if (!cpu) {
		PyErr_SetString(PyExc_ValueError,
				"kvtier: a tensor on a GPU needs the CUDA path; this call copies with the CPU");
		return -1;
	}
	PyObject *contig = PyObject_CallMethod(o, "is_contiguous", NULL);
	if (!contig)
		return -1;
	int ok = PyObject_IsTrue(contig);
	Py_DECREF(contig);
	if (ok != 1) {
		if (ok == 0)
			PyErr_SetString(PyExc_ValueError,
					"kvtier: the tensor is not contiguous (call .contiguous() first)");
		return -1;
	}
	PyObject *ptr = PyObject_CallMethod(o, "data_ptr", NULL);
	PyObject *nbytes = ptr ? PyObject_GetAttrString(o, "nbytes") : NULL;
	if (!nbytes) {
		Py_XDECREF(ptr);
		return -1;
	}
	m->ptr = PyLong_AsVoidPtr(ptr);
	m->len = PyLong_AsSize_t(nbytes);
	Py_DECREF(ptr);
	Py_DECREF(nbytes);
	return PyErr_Occurred() ? -1 : 0;
}

/* Caller memory from a buffer or a tensor; writable for loads. */
static int mem_get(PyObject *o, int writable, struct mem *m)
{
	memset(m, 0, sizeof(*m));
	if (PyObject_CheckBuffer(o)) {
		int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
		if (PyObject_GetBuffer(o, &m->view, flags) < 0)
			return -1;
		m->ptr = m->view.buf;
		m->len = (size_t)m->view.len;
		return 0;
	}
	if (PyObject_HasAttrString(o, "data_ptr"))
		return mem_from_tensor(o, m);
	PyErr_Format(PyExc_TypeError,
		     "kvtier: expected a buffer (bytes, bytearray, numpy array) or a tensor, not %.100s",
		     Py_TYPE(o)->tp_name);
	return -1;
}

/* Keys: a bytes-like object of n * 32 bytes. */
static int keys_get(PyObject *o, struct mem *m, size_t *ret_n)
{
	memset(m, 0, sizeof(*m));
	if (PyObject_GetBuffer(o, &m->view, PyBUF_C_CONTIGUOUS) < 0)
		return -1;
	m->ptr = m->view.buf;
	m->len = (size_t)m->view.len;
	if (m->len % KVT_KEY_BYTES) {
		mem_release(m);
		PyErr_Format(PyExc_ValueError,
			     "kvtier: keys are 32 bytes each, back to back; got %zu bytes", m->len);
		return -1;
	}
	*ret_n = m->len / KVT_KEY_BYTES;
	return 0;
}

/*
 * An integer array of elem bytes per item (4: tokens, 8: indices): a buffer
 * whose items have that size, or a sequence of ints, converted into a
 * malloc'd array (*ret_owned, to free).
 */
static int ints_get(PyObject *o, size_t elem, int is_signed, struct mem *m, void **ret_owned,
		    size_t *ret_n)
{
	memset(m, 0, sizeof(*m));
	*ret_owned = NULL;
	if (PyObject_CheckBuffer(o)) {
		if (PyObject_GetBuffer(o, &m->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
			return -1;
		if ((size_t)m->view.itemsize != elem) {
			PyErr_Format(PyExc_ValueError,
				     "kvtier: expected %zu-byte integers, got items of %zd bytes",
				     elem, m->view.itemsize);
			mem_release(m);
			return -1;
		}
		m->ptr = m->view.buf;
		m->len = (size_t)m->view.len;
		*ret_n = m->len / elem;
		return 0;
	}
	if (PyObject_HasAttrString(o, "data_ptr")) {
		PyObject *esz = PyObject_CallMethod(o, "element_size", NULL);
		size_t sz = esz ? PyLong_AsSize_t(esz) : 0;
		Py_XDECREF(esz);
		if (PyErr_Occurred())
			return -1;
		if (sz != elem) {
			PyErr_Format(PyExc_ValueError, "kvtier: expected a tensor of %zu-byte integers",
				     elem);
			return -1;
		}
		if (mem_from_tensor(o, m) < 0)
			return -1;
		*ret_n = m->len / elem;
		return 0;
	}
	PyObject *seq = PySequence_Fast(o, "kvtier: expected a buffer or a sequence of ints");
	if (!seq)
		return -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	void *a = malloc(n ? (size_t)n * elem : 1);
	if (!a) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	PyObject **items = PySequence_Fast_ITEMS(seq);
	for (Py_ssize_t i = 0; i < n; i++) {
		long long v = PyLong_AsLongLong(items[i]);
		if (v == -1 && PyErr_Occurred())
			goto fail;
		if (elem == 4) {
			if (is_signed ? (v < INT32_MIN || v > INT32_MAX) : (v < 0 || v > UINT32_MAX)) {
				PyErr_Format(PyExc_OverflowError, "kvtier: %lld is out of range", v);
				goto fail;
			}
			((uint32_t *)a)[i] = (uint32_t)v;
		} else {
			((int64_t *)a)[i] = (int64_t)v;
		}
	}
	Py_DECREF(seq);
	m->ptr = a;
	m->len = (size_t)n * elem;
	*ret_owned = a;
	*ret_n = (size_t)n;
	return 0;
fail:
	Py_DECREF(seq);
	free(a);
	return -1;
}

static PyObject *status_list(const int32_t *st, size_t n)
{
	PyObject *l = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; l && i < n; i++) {
		PyObject *v = PyLong_FromLong(st[i]);
		if (!v) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, v);
	}
	return l;
}

/* ------------------------------------------------------------------ */
/* Client                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD
	kvt_client *c;
	int busy;    /* calls in progress with the GIL released */
	int closing; /* close() came while busy: the last call frees */
	PyObject *log; /* callable(level, message) or NULL */
} ClientObject;

static PyTypeObject ClientType;

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

/* Enter a call on the client: 0, or -1 with an exception set. */
static int client_enter(ClientObject *self)
{
	if (!self->c || self->closing) {
		raise_errno(-ENOTCONN, "kvtier", "the client is closed");
		return -1;
	}
	self->busy++;
	return 0;
}

static void client_leave(ClientObject *self)
{
	if (--self->busy == 0 && self->closing) {
		kvt_client_free(self->c);
		self->c = NULL;
		self->closing = 0;
	}
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
	Py_TYPE(self)->tp_free((PyObject *)self);
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

static PyObject *Client_enter_ctx(ClientObject *self, PyObject *unused)
{
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *Client_exit_ctx(ClientObject *self, PyObject *args)
{
	return Client_close(self, NULL);
}

static PyObject *client_error_for(ClientObject *self, int r, const char *what)
{
	return raise_errno(r, what, self->c ? kvt_client_error(self->c) : NULL);
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
	struct mem hm, sm = {0};
	void *hown = NULL, *sown = NULL;
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
		PyObject *seq = PySequence_Fast(success_o, "kvtier: success is a sequence of bools");
		if (!seq)
			goto out;
		ns = (size_t)PySequence_Fast_GET_SIZE(seq);
		success = malloc(ns ? ns : 1);
		for (size_t i = 0; success && i < ns; i++)
			success[i] = (uint8_t)(PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, i)) == 1);
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
	mem_release(&sm);
	free(hown);
	free(sown);
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

static PyObject *Client_open_namespace(ClientObject *self, PyObject *args, PyObject *kw);

static PyMethodDef Client_methods[] = {
	{"close", (PyCFunction)Client_close, METH_NOARGS,
	 "close()\n--\n\nDisconnect and unmap the pool.  Namespaces opened on this client stay\n"
	 "objects that raise ENOTCONN until closed.  Safe to call twice."},
	{"__enter__", (PyCFunction)Client_enter_ctx, METH_NOARGS, NULL},
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
	 "               weights=b'', salt=b'', scale_layout=0)\n--\n\n"
	 "Open (or join) the namespace of one model and KV geometry.  kv_heads is\n"
	 "the total over all tensor-parallel ranks; head_bytes is head_dim times\n"
	 "the element size (for MLA: the latent of one token); dtype is an integer\n"
	 "code (kvtier.DTYPES).  Every argument is part of the identity: change one\n"
	 "and no block is shared."},
	{NULL}};

static PyGetSetDef Client_getset[] = {
	{"connected", (getter)Client_get_connected, NULL, "True while the daemon answers.", NULL},
	{"closed", (getter)Client_get_closed, NULL, "True after close().", NULL},
	{"numa_node", (getter)Client_get_numa_node, NULL,
	 "The NUMA node of this client's pool slots, or -1.", NULL},
	{NULL}};

static PyTypeObject ClientType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvtier.Client",
	.tp_basicsize = sizeof(ClientObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Client(socket=None, name='python', pci_bus_id=None, observer=False, log=None)\n"
		  "--\n\n"
		  "A connection to kvtierd that maps the tenant's pool.  socket defaults to\n"
		  "$KVTIER_SOCKET or kvtierd's default; pci_bus_id names this process's GPU\n"
		  "so its slots come from that NUMA node; observer connects without a pool\n"
		  "(monitoring); log receives (level, message) from the library.  The\n"
		  "library reconnects by itself when the daemon restarts; meanwhile lookups\n"
		  "miss and stores raise ENOTCONN.  A context manager.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Client_init,
	.tp_dealloc = (destructor)Client_dealloc,
	.tp_methods = Client_methods,
	.tp_getset = Client_getset,
};

/* ------------------------------------------------------------------ */
/* Layout                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD
	kvt_layout l;
	void **bases;
	PyObject *keep; /* what owns the memory, kept alive with the layout */
} LayoutObject;

static PyTypeObject LayoutType;

static int Layout_init(LayoutObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"n_layers", "planes", "heads", "head_bytes", "page_tokens",
				 "layer_base", "stride_plane", "stride_page", "stride_token",
				 "stride_head", "index_kind", "keep", NULL};
	unsigned int nl, planes, heads, hb, pt, kind = KVT_INDEX_PAGE;
	PyObject *bases_o, *keep = Py_None;
	long long sp, sg, st, sh;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "IIIIIOLLLL|IO:Layout", kwlist, &nl, &planes,
					 &heads, &hb, &pt, &bases_o, &sp, &sg, &st, &sh, &kind,
					 &keep))
		return -1;
	PyObject *seq = PySequence_Fast(bases_o, "kvtier: layer_base is a sequence of addresses");
	if (!seq)
		return -1;
	if ((size_t)PySequence_Fast_GET_SIZE(seq) != nl) {
		PyErr_Format(PyExc_ValueError, "kvtier: %u layers but %zd base addresses", nl,
			     PySequence_Fast_GET_SIZE(seq));
		Py_DECREF(seq);
		return -1;
	}
	void **bases = calloc(nl ? nl : 1, sizeof(*bases));
	if (!bases) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (unsigned int i = 0; i < nl; i++) {
		bases[i] = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(seq, i));
		if (PyErr_Occurred()) {
			free(bases);
			Py_DECREF(seq);
			return -1;
		}
	}
	Py_DECREF(seq);
	free(self->bases);
	self->bases = bases;
	self->l = (kvt_layout){.n_layers = nl,
			       .planes = planes,
			       .heads = heads,
			       .head_bytes = hb,
			       .page_tokens = pt,
			       .index_kind = kind,
			       .layer_base = (void *const *)bases,
			       .stride_plane = sp,
			       .stride_page = sg,
			       .stride_token = st,
			       .stride_head = sh};
	Py_INCREF(keep);
	Py_XSETREF(self->keep, keep);
	return 0;
}

static void Layout_dealloc(LayoutObject *self)
{
	free(self->bases);
	Py_CLEAR(self->keep);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Layout_block_bytes(LayoutObject *self, PyObject *arg)
{
	unsigned long bt = PyLong_AsUnsignedLong(arg);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromUnsignedLongLong(kvt_layout_block_bytes(&self->l, (uint32_t)bt));
}

/* Buffers of a sequence, each at least `need` bytes. */
static int mems_get(PyObject *o, int writable, size_t need, struct mem **ret, size_t *ret_n)
{
	PyObject *seq = PySequence_Fast(o, "kvtier: expected a sequence of buffers");
	if (!seq)
		return -1;
	size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
	struct mem *m = calloc(n ? n : 1, sizeof(*m));
	if (!m) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	size_t i;
	for (i = 0; i < n; i++) {
		if (mem_get(PySequence_Fast_GET_ITEM(seq, i), writable, &m[i]) < 0)
			goto fail;
		if (m[i].len < need) {
			PyErr_Format(PyExc_ValueError,
				     "kvtier: buffer %zu holds %zu bytes; a block needs %zu", i,
				     m[i].len, need);
			i++;
			goto fail;
		}
	}
	Py_DECREF(seq);
	*ret = m;
	*ret_n = n;
	return 0;
fail:
	while (i-- > 0)
		mem_release(&m[i]);
	free(m);
	Py_DECREF(seq);
	return -1;
}

static void mems_release(struct mem *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++)
		mem_release(&m[i]);
	free(m);
}

static PyObject *Layout_copy(LayoutObject *self, PyObject *args, int gather)
{
	unsigned int bt;
	PyObject *idx_o, *blocks_o;
	if (!PyArg_ParseTuple(args, "IOO", &bt, &idx_o, &blocks_o))
		return NULL;
	struct mem im, *bm = NULL;
	void *iown;
	size_t ni, nb;
	if (ints_get(idx_o, 8, 1, &im, &iown, &ni) < 0)
		return NULL;
	PyObject *ret = NULL;
	size_t need = kvt_layout_block_bytes(&self->l, bt);
	if (mems_get(blocks_o, gather, need, &bm, &nb) < 0)
		goto out;
	size_t per = self->l.index_kind == KVT_INDEX_SLOT ? bt : 1;
	if (ni != nb * per) {
		PyErr_Format(PyExc_ValueError, "kvtier: %zu blocks need %zu indices, got %zu", nb,
			     nb * per, ni);
		goto out;
	}
	void **ptrs = calloc(nb ? nb : 1, sizeof(*ptrs));
	if (!ptrs) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < nb; i++)
		ptrs[i] = bm[i].ptr;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = gather ? kvt_layout_gather(&self->l, bt, im.ptr, nb, ptrs)
		   : kvt_layout_scatter(&self->l, bt, im.ptr, nb, (const void *const *)ptrs);
	Py_END_ALLOW_THREADS
	free(ptrs);
	if (r < 0)
		raise_errno(r, gather ? "gather" : "scatter", "bad layout descriptor or index");
	else
		ret = (Py_INCREF(Py_None), Py_None);
out:
	mems_release(bm, nb);
	mem_release(&im);
	free(iown);
	return ret;
}

static PyObject *Layout_gather(LayoutObject *self, PyObject *args)
{
	return Layout_copy(self, args, 1);
}

static PyObject *Layout_scatter(LayoutObject *self, PyObject *args)
{
	return Layout_copy(self, args, 0);
}

static PyMethodDef Layout_methods[] = {
	{"block_bytes", (PyCFunction)Layout_block_bytes, METH_O,
	 "block_bytes(block_tokens)\n--\n\nBytes of one kvtier block of this layout."},
	{"gather", (PyCFunction)Layout_gather, METH_VARARGS,
	 "gather(block_tokens, indices, blocks)\n--\n\nCopy engine pages (or token slots) into\n"
	 "block buffers, in kvtier's block layout [layer][plane][token][head][bytes]."},
	{"scatter", (PyCFunction)Layout_scatter, METH_VARARGS,
	 "scatter(block_tokens, indices, blocks)\n--\n\nThe inverse of gather."},
	{NULL}};

static PyMemberDef Layout_members[] = {
	{"keep", T_OBJECT, offsetof(LayoutObject, keep), READONLY,
	 "What owns the memory the layout points into (kept alive with it)."},
	{NULL}};

static PyTypeObject LayoutType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvtier.Layout",
	.tp_basicsize = sizeof(LayoutObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Layout(n_layers, planes, heads, head_bytes, page_tokens, layer_base,\n"
		  "       stride_plane, stride_page, stride_token, stride_head,\n"
		  "       index_kind=INDEX_PAGE, keep=None)\n--\n\n"
		  "Where an engine keeps one rank's KV cache: element (layer l, plane p,\n"
		  "page g, token t, head h) starts at layer_base[l] + p*stride_plane +\n"
		  "g*stride_page + t*stride_token + h*stride_head (bytes) and is head_bytes\n"
		  "long.  With INDEX_SLOT, indices are token slots (-1: padding).  keep\n"
		  "holds the tensors the addresses point into.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Layout_init,
	.tp_dealloc = (destructor)Layout_dealloc,
	.tp_methods = Layout_methods,
	.tp_members = Layout_members,
};

/* ------------------------------------------------------------------ */
/* Namespace                                                          */
/* ------------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD
	kvt_ns *ns;
	ClientObject *client;
	int busy;
	int closing;
	kvt_ns_info info;
} NamespaceObject;

static PyTypeObject NamespaceType;

static int ns_enter(NamespaceObject *self)
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

static void ns_leave(NamespaceObject *self)
{
	client_leave(self->client);
	if (--self->busy == 0 && self->closing) {
		kvt_ns_close(self->ns);
		self->ns = NULL;
		self->closing = 0;
	}
}

static PyObject *ns_error(NamespaceObject *self, int r, const char *what)
{
	return client_error_for(self->client, r, what);
}

static PyObject *Client_open_namespace(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"model",	"layers",   "kv_heads", "head_bytes",
				 "block_tokens", "dtype",    "tp_size",  "cp_size",
				 "layer_first", "mla",	    "window",	"weights",
				 "salt",	"scale_layout", NULL};
	const char *model;
	unsigned int layers, kv_heads, hb, bt, dtype, tp = 1, cp = 1, first = 0, window = 0,
							 scale = 0;
	int mla = 0;
	Py_buffer weights = {0}, salt = {0};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sIIIII|$IIIpIy*y*I:open_namespace", kwlist,
					 &model, &layers, &kv_heads, &hb, &bt, &dtype, &tp, &cp,
					 &first, &mla, &window, &weights, &salt, &scale))
		return NULL;
	PyObject *ret = NULL;
	kvt_layer_group g = {.n_layers = layers,
			     .attn = mla ? KVT_ATTN_MLA : window ? KVT_ATTN_SWA : KVT_ATTN_MHA,
			     .window = window,
			     .planes = mla ? 1 : 2,
			     .kv_heads = kv_heads,
			     .head_bytes = hb,
			     .dtype = dtype,
			     .scale_layout = scale};
	kvt_ns_desc d = {.model = model,
			 .weights = weights.buf,
			 .weights_len = (uint32_t)weights.len,
			 .layer_first = first,
			 .layer_end = first + layers,
			 .tp_size = tp,
			 .cp_size = cp,
			 .block_tokens = bt,
			 .n_groups = 1,
			 .groups = &g,
			 .salt = salt.buf,
			 .salt_len = (uint32_t)salt.len};
	NamespaceObject *nso = PyObject_New(NamespaceObject, &NamespaceType);
	if (!nso)
		goto out;
	nso->ns = NULL;
	nso->busy = nso->closing = 0;
	Py_INCREF(self);
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
	PyObject_Free(self);
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
	return Py_BuildValue("{sIsIsIsKsKsKsK}", "ns_id", self->info.ns_id, "shards",
			     self->info.shards, "block_tokens", self->info.block_tokens,
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
	uint8_t *sp = (uint8_t *)PyBytes_AS_STRING(states);
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

/* touch, delete, prefetch: keys in, a count out. */
static PyObject *Namespace_keys_op(NamespaceObject *self, PyObject *keys_o,
				   int (*fn)(kvt_ns *, const uint8_t *, size_t), const char *what)
{
	struct mem km;
	size_t n;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	if (ns_enter(self) == 0) {
		int r;
		Py_BEGIN_ALLOW_THREADS
		r = fn(self->ns, km.ptr, n);
		Py_END_ALLOW_THREADS
		ret = r < 0 ? ns_error(self, r, what) : PyLong_FromLong(r);
		ns_leave(self);
	}
	mem_release(&km);
	return ret;
}

static PyObject *Namespace_touch(NamespaceObject *self, PyObject *k)
{
	return Namespace_keys_op(self, k, kvt_touch, "touch");
}

static PyObject *Namespace_delete(NamespaceObject *self, PyObject *k)
{
	return Namespace_keys_op(self, k, kvt_delete, "delete");
}

static PyObject *Namespace_prefetch(NamespaceObject *self, PyObject *k)
{
	return Namespace_keys_op(self, k, kvt_prefetch, "prefetch");
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
			PyList_SET_ITEM(ret, (Py_ssize_t)i, d);
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
	if (r < 0) {
		ns_error(self, r, store ? "store" : "load");
	} else {
		PyObject *sl = status_list(st, n);
		ret = sl ? Py_BuildValue("(iN)", r, sl) : NULL;
	}
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

/* store_paged/load_paged through a Layout: (count, statuses). */
static PyObject *Namespace_paged_op(NamespaceObject *self, PyObject *args, int store)
{
	unsigned int shard;
	PyObject *keys_o, *idx_o;
	LayoutObject *lo;
	if (!PyArg_ParseTuple(args, "IO!OO", &shard, &LayoutType, &lo, &keys_o, &idx_o))
		return NULL;
	struct mem km, im = {0};
	void *iown = NULL;
	size_t n, ni;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	int32_t *st = NULL;
	if (ints_get(idx_o, 8, 1, &im, &iown, &ni) < 0)
		goto out;
	size_t per = lo->l.index_kind == KVT_INDEX_SLOT ? self->info.block_tokens : 1;
	if (ni != n * per) {
		PyErr_Format(PyExc_ValueError, "kvtier: %zu keys need %zu indices, got %zu", n,
			     n * per, ni);
		goto out;
	}
	st = calloc(n ? n : 1, sizeof(*st));
	if (!st) {
		PyErr_NoMemory();
		goto out;
	}
	if (ns_enter(self) < 0)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = store ? kvt_store_paged(self->ns, shard, &lo->l, km.ptr, n, im.ptr, st)
		  : kvt_load_paged(self->ns, shard, &lo->l, km.ptr, n, im.ptr, st);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		ns_error(self, r, store ? "store_paged" : "load_paged");
	} else {
		PyObject *sl = status_list(st, n);
		ret = sl ? Py_BuildValue("(iN)", r, sl) : NULL;
	}
	ns_leave(self);
out:
	free(st);
	mem_release(&im);
	free(iown);
	mem_release(&km);
	return ret;
}

static PyObject *Namespace_store_paged(NamespaceObject *self, PyObject *args)
{
	return Namespace_paged_op(self, args, 1);
}

static PyObject *Namespace_load_paged(NamespaceObject *self, PyObject *args)
{
	return Namespace_paged_op(self, args, 0);
}

static PyMethodDef Namespace_methods[] = {
	{"close", (PyCFunction)Namespace_close, METH_NOARGS,
	 "close()\n--\n\nForget the namespace (its blocks stay in the daemon)."},
	{"__enter__", (PyCFunction)Client_enter_ctx, METH_NOARGS, NULL},
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
	{"store_paged", (PyCFunction)Namespace_store_paged, METH_VARARGS,
	 "store_paged(shard, layout, keys, indices)\n--\n\nStore blocks from an engine's paged\n"
	 "cache described by a Layout.  Returns (stored, statuses)."},
	{"load_paged", (PyCFunction)Namespace_load_paged, METH_VARARGS,
	 "load_paged(shard, layout, keys, indices)\n--\n\nLoad blocks into an engine's paged\n"
	 "cache.  Returns (loaded, statuses)."},
	{NULL}};

static PyGetSetDef Namespace_getset[] = {
	{"info", (getter)Namespace_get_info, NULL,
	 "The geometry the daemon derived: ns_id, shards, block_tokens, shard_bytes,\n"
	 "shard_stride, block_bytes, bytes_per_token.",
	 NULL},
	{"closed", (getter)Namespace_get_closed, NULL, "True after close().", NULL},
	{NULL}};

static PyMemberDef Namespace_members[] = {
	{"client", T_OBJECT, offsetof(NamespaceObject, client), READONLY,
	 "The Client this namespace was opened on."},
	{NULL}};

static PyTypeObject NamespaceType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvtier.Namespace",
	.tp_basicsize = sizeof(NamespaceObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A namespace of one model and KV geometry, from Client.open_namespace().\n"
		  "Keys are bytes of 32 per block (hash_chain).  A context manager.",
	.tp_dealloc = (destructor)Namespace_dealloc,
	.tp_methods = Namespace_methods,
	.tp_getset = Namespace_getset,
	.tp_members = Namespace_members,
};

/* ------------------------------------------------------------------ */
/* The CUDA path (kvtier-cuda.h), when the library was built with it  */
/* ------------------------------------------------------------------ */

#if KVT_HAVE_CUDA
typedef struct {
	PyObject_HEAD
	kvt_cuda_ctx *ctx;
	ClientObject *client;
	int busy; /* a context is used by one thread at a time */
	int jobs; /* open CudaJobs: freed before the context */
} CudaContextObject;

typedef struct {
	PyObject_HEAD
	kvt_cuda_job *job;
	CudaContextObject *ctx;
	NamespaceObject *ns;
	LayoutObject *layout; /* keeps the engine memory alive */
} CudaJobObject;

static PyTypeObject CudaContextType, CudaJobType;

static int cuda_enter(CudaContextObject *self)
{
	if (!self->ctx) {
		raise_errno(-EBADF, "kvtier", "the CUDA context is closed");
		return -1;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError,
				"kvtier: a CUDA context is used by one thread at a time");
		return -1;
	}
	self->busy = 1;
	return 0;
}

static int CudaContext_init(CudaContextObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"client", "device", NULL};
	ClientObject *client;
	int device = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|i:CudaContext", kwlist, &ClientType, &client,
					 &device))
		return -1;
	if (self->ctx) {
		PyErr_SetString(PyExc_RuntimeError, "kvtier: CudaContext is already set up");
		return -1;
	}
	if (client_enter(client) < 0)
		return -1;
	int r;
	kvt_cuda_ctx *ctx = NULL;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_cuda_ctx_new(client->c, device, &ctx);
	Py_END_ALLOW_THREADS
	client_leave(client);
	if (r < 0) {
		raise_errno(r, "CudaContext", r == -ENODEV ? "no CUDA device or driver" : NULL);
		return -1;
	}
	self->ctx = ctx;
	Py_INCREF(client);
	self->client = client;
	return 0;
}

static PyObject *CudaContext_close(CudaContextObject *self, PyObject *unused)
{
	if (self->busy || self->jobs) {
		PyErr_SetString(PyExc_RuntimeError,
				"kvtier: the CUDA context is in use (close its jobs first)");
		return NULL;
	}
	kvt_cuda_ctx *ctx = self->ctx;
	self->ctx = NULL;
	if (ctx) {
		Py_BEGIN_ALLOW_THREADS
		kvt_cuda_ctx_free(ctx);
		Py_END_ALLOW_THREADS
	}
	Py_RETURN_NONE;
}

static void CudaContext_dealloc(CudaContextObject *self)
{
	kvt_cuda_ctx_free(self->ctx); /* every job holds a reference */
	Py_CLEAR(self->client);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *CudaContext_submit(CudaContextObject *self, PyObject *args, PyObject *kw,
				    int load)
{
	static char *kwlist[] = {"ns", "shard", "layout", "keys", "indices", "stream", NULL};
	NamespaceObject *ns;
	LayoutObject *lo;
	unsigned int shard;
	PyObject *keys_o, *idx_o;
	unsigned long long stream = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!IO!OO|K", kwlist, &NamespaceType, &ns, &shard,
					 &LayoutType, &lo, &keys_o, &idx_o, &stream))
		return NULL;
	struct mem km, im = {0};
	void *iown = NULL;
	size_t n, ni;
	if (keys_get(keys_o, &km, &n) < 0)
		return NULL;
	PyObject *ret = NULL;
	if (ints_get(idx_o, 8, 1, &im, &iown, &ni) < 0)
		goto out;
	size_t per = lo->l.index_kind == KVT_INDEX_SLOT ? ns->info.block_tokens : 1;
	if (ni != n * per) {
		PyErr_Format(PyExc_ValueError, "kvtier: %zu keys need %zu indices, got %zu", n,
			     n * per, ni);
		goto out;
	}
	CudaJobObject *jo = PyObject_New(CudaJobObject, &CudaJobType);
	if (!jo)
		goto out;
	jo->job = NULL;
	Py_INCREF(self);
	jo->ctx = self;
	Py_INCREF(ns);
	jo->ns = ns;
	Py_INCREF(lo);
	jo->layout = lo;
	if (cuda_enter(self) < 0) {
		Py_DECREF(jo);
		goto out;
	}
	if (ns_enter(ns) < 0) {
		self->busy = 0;
		Py_DECREF(jo);
		goto out;
	}
	int r;
	kvt_cuda_job *job = NULL;
	void *st = (void *)(uintptr_t)stream;
	Py_BEGIN_ALLOW_THREADS
	r = load ? kvt_cuda_load_submit(self->ctx, ns->ns, shard, &lo->l, km.ptr, n, im.ptr, st,
					&job)
		 : kvt_cuda_store_submit(self->ctx, ns->ns, shard, &lo->l, km.ptr, n, im.ptr, st,
					 &job);
	Py_END_ALLOW_THREADS
	ns_leave(ns);
	self->busy = 0;
	if (r < 0) {
		ns_error(ns, r, load ? "cuda load" : "cuda store");
		Py_DECREF(jo);
	} else {
		jo->job = job;
		self->jobs++;
		ret = (PyObject *)jo;
	}
out:
	mem_release(&im);
	free(iown);
	mem_release(&km);
	return ret;
}

static PyObject *CudaContext_load(CudaContextObject *self, PyObject *args, PyObject *kw)
{
	return CudaContext_submit(self, args, kw, 1);
}

static PyObject *CudaContext_store(CudaContextObject *self, PyObject *args, PyObject *kw)
{
	return CudaContext_submit(self, args, kw, 0);
}

static PyMethodDef CudaContext_methods[] = {
	{"close", (PyCFunction)CudaContext_close, METH_NOARGS,
	 "close()\n--\n\nWait for the streams and unregister the pool.  Close the jobs first."},
	{"__enter__", (PyCFunction)Client_enter_ctx, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)CudaContext_close, METH_VARARGS, NULL},
	{"load", (PyCFunction)(void (*)(void))CudaContext_load, METH_VARARGS | METH_KEYWORDS,
	 "load(ns, shard, layout, keys, indices, stream=0)\n--\n\nQueue loads into GPU pages\n"
	 "(layout's layer_base are device pointers), one copy per layer after the\n"
	 "work queued on stream (a cudaStream_t as an int, e.g.\n"
	 "torch.cuda.current_stream().cuda_stream).  Returns a CudaJob."},
	{"store", (PyCFunction)(void (*)(void))CudaContext_store, METH_VARARGS | METH_KEYWORDS,
	 "store(ns, shard, layout, keys, indices, stream=0)\n--\n\nQueue stores from GPU pages\n"
	 "after the work on stream; blocks are committed by the poll or wait that sees\n"
	 "their copy done.  Returns a CudaJob."},
	{NULL}};

static PyTypeObject CudaContextType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvtier.CudaContext",
	.tp_basicsize = sizeof(CudaContextObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "CudaContext(client, device=0)\n--\n\n"
		  "The library's CUDA path for one client and device: load and store\n"
		  "streams, the pool registered with the driver.  One thread at a time.",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)CudaContext_init,
	.tp_dealloc = (destructor)CudaContext_dealloc,
	.tp_methods = CudaContext_methods,
};

static int job_check(CudaJobObject *self)
{
	if (!self->job) {
		raise_errno(-EBADF, "kvtier", "the CUDA job is closed");
		return -1;
	}
	return 0;
}

static PyObject *CudaJob_finish(CudaJobObject *self, int wait)
{
	if (job_check(self) < 0)
		return NULL;
	size_t n = kvt_cuda_job_size(self->job);
	int32_t *st = calloc(n ? n : 1, sizeof(*st));
	if (!st)
		return PyErr_NoMemory();
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = wait ? kvt_cuda_job_wait(self->job, st) : kvt_cuda_job_poll(self->job, st);
	Py_END_ALLOW_THREADS
	PyObject *sl = status_list(st, n);
	free(st);
	if (!sl)
		return NULL;
	/* A negative return completes the job with per-key errors in st. */
	return Py_BuildValue("(ON)", r != 0 ? Py_True : Py_False, sl);
}

static PyObject *CudaJob_poll(CudaJobObject *self, PyObject *unused)
{
	return CudaJob_finish(self, 0);
}

static PyObject *CudaJob_wait(CudaJobObject *self, PyObject *unused)
{
	PyObject *t = CudaJob_finish(self, 1);
	if (!t)
		return NULL;
	PyObject *sl = PyTuple_GET_ITEM(t, 1);
	Py_INCREF(sl);
	Py_DECREF(t);
	return sl;
}

static PyObject *CudaJob_wait_layer(CudaJobObject *self, PyObject *args)
{
	unsigned int layer;
	unsigned long long stream = 0;
	if (!PyArg_ParseTuple(args, "I|K:wait_layer", &layer, &stream) || job_check(self) < 0)
		return NULL;
	int r = kvt_cuda_wait_layer(self->job, layer, (void *)(uintptr_t)stream);
	if (r < 0)
		return raise_errno(r, "wait_layer", NULL);
	Py_RETURN_NONE;
}

static PyObject *CudaJob_wait_stream(CudaJobObject *self, PyObject *args)
{
	unsigned long long stream;
	if (!PyArg_ParseTuple(args, "K:wait_stream", &stream) || job_check(self) < 0)
		return NULL;
	int r = kvt_cuda_job_wait_stream(self->job, (void *)(uintptr_t)stream);
	if (r < 0)
		return raise_errno(r, "wait_stream", NULL);
	Py_RETURN_NONE;
}

static PyObject *CudaJob_close(CudaJobObject *self, PyObject *unused)
{
	kvt_cuda_job *job = self->job;
	self->job = NULL;
	if (job) {
		Py_BEGIN_ALLOW_THREADS
		kvt_cuda_job_free(job);
		Py_END_ALLOW_THREADS
		self->ctx->jobs--;
	}
	Py_RETURN_NONE;
}

static Py_ssize_t CudaJob_len(CudaJobObject *self)
{
	return self->job ? (Py_ssize_t)kvt_cuda_job_size(self->job) : 0;
}

static void CudaJob_dealloc(CudaJobObject *self)
{
	if (self->job) {
		kvt_cuda_job_free(self->job);
		self->ctx->jobs--;
	}
	Py_CLEAR(self->ctx);
	Py_CLEAR(self->ns);
	Py_CLEAR(self->layout);
	PyObject_Free(self);
}

static PyMethodDef CudaJob_methods[] = {
	{"poll", (PyCFunction)CudaJob_poll, METH_NOARGS,
	 "poll()\n--\n\n(done, statuses) without blocking; the first poll that sees the job\n"
	 "done releases its leases or commits its blocks."},
	{"wait", (PyCFunction)CudaJob_wait, METH_NOARGS,
	 "wait()\n--\n\nBlock until the copies are done; returns the statuses."},
	{"wait_layer", (PyCFunction)CudaJob_wait_layer, METH_VARARGS,
	 "wait_layer(layer, stream=0)\n--\n\nMake stream wait on the GPU for one layer of a load."},
	{"wait_stream", (PyCFunction)CudaJob_wait_stream, METH_VARARGS,
	 "wait_stream(stream)\n--\n\nMake stream wait on the GPU for every copy of the job."},
	{"close", (PyCFunction)CudaJob_close, METH_NOARGS,
	 "close()\n--\n\nFree the job (waits for copies still in flight)."},
	{"__enter__", (PyCFunction)Client_enter_ctx, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)CudaJob_close, METH_VARARGS, NULL},
	{NULL}};

static PySequenceMethods CudaJob_seq = {.sq_length = (lenfunc)CudaJob_len};

static PyTypeObject CudaJobType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvtier.CudaJob",
	.tp_basicsize = sizeof(CudaJobObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Copies queued by CudaContext.load or .store.",
	.tp_dealloc = (destructor)CudaJob_dealloc,
	.tp_methods = CudaJob_methods,
	.tp_as_sequence = &CudaJob_seq,
};
#endif

/* ------------------------------------------------------------------ */
/* Module functions                                                   */
/* ------------------------------------------------------------------ */

static PyObject *mod_hash_chain(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"tokens", "block_tokens", "parent", "extra", NULL};
	PyObject *tok_o;
	unsigned int bt;
	Py_buffer parent = {0}, extra = {0};
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OI|z*z*:hash_chain", kwlist, &tok_o, &bt,
					 &parent, &extra))
		return NULL;
	PyObject *ret = NULL;
	struct mem tm = {0};
	void *town = NULL;
	size_t nt;
	if (parent.buf && parent.len != KVT_KEY_BYTES) {
		PyErr_SetString(PyExc_ValueError, "kvtier: parent is a 32-byte key");
		goto out;
	}
	if (bt == 0) {
		PyErr_SetString(PyExc_ValueError, "kvtier: block_tokens must be > 0");
		goto out;
	}
	if (ints_get(tok_o, 4, 0, &tm, &town, &nt) < 0)
		goto out;
	size_t nk = nt / bt;
	ret = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nk * KVT_KEY_BYTES));
	if (!ret)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_hash_chain(parent.buf, tm.ptr, nt, bt, extra.buf, (size_t)extra.len,
			   (uint8_t *)PyBytes_AS_STRING(ret), nk);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		Py_CLEAR(ret);
		raise_errno(r, "hash_chain", NULL);
	}
out:
	mem_release(&tm);
	free(town);
	if (parent.obj)
		PyBuffer_Release(&parent);
	if (extra.obj)
		PyBuffer_Release(&extra);
	return ret;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused)
{
	return PyUnicode_FromString(kvt_version());
}

static PyObject *mod_protocol_version(PyObject *mod, PyObject *unused)
{
	return PyLong_FromUnsignedLong(kvt_protocol_version());
}

static PyObject *mod_default_socket(PyObject *mod, PyObject *unused)
{
	return PyUnicode_FromString(kvt_default_socket());
}

static PyMethodDef module_methods[] = {
	{"hash_chain", (PyCFunction)(void (*)(void))mod_hash_chain, METH_VARARGS | METH_KEYWORDS,
	 "hash_chain(tokens, block_tokens, parent=None, extra=None)\n--\n\n"
	 "Keys of every full block of tokens (a uint32 buffer or a sequence of ints),\n"
	 "chained from parent: SHA-256(parent || tokens as u32le || extra), extra in\n"
	 "the first block only.  Returns 32 bytes per key, back to back."},
	{"version", mod_version, METH_NOARGS, "version()\n--\n\nThe library version."},
	{"protocol_version", mod_protocol_version, METH_NOARGS,
	 "protocol_version()\n--\n\nThe newest wire protocol version the library speaks."},
	{"default_socket", mod_default_socket, METH_NOARGS,
	 "default_socket()\n--\n\nThe socket a Client uses when none is given."},
	{NULL}};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvtier._kvtier",
	.m_doc = "The C binding of libkvtier-client; use the kvtier package.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__kvtier(void);
PyMODINIT_FUNC PyInit__kvtier(void)
{
	if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&LayoutType) < 0 ||
	    PyType_Ready(&NamespaceType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	kvt_error = PyErr_NewExceptionWithDoc(
		"kvtier.Error",
		"A call refused by kvtierd or the library: errno and strerror (the daemon's\n"
		"reason when it gave one); call names the call.",
		PyExc_OSError, NULL);
	if (!kvt_error || PyModule_AddObject(m, "Error", kvt_error) < 0)
		goto fail;
	Py_INCREF(kvt_error);
	Py_INCREF(&ClientType);
	Py_INCREF(&LayoutType);
	Py_INCREF(&NamespaceType);
#if KVT_HAVE_CUDA
	if (PyType_Ready(&CudaContextType) < 0 || PyType_Ready(&CudaJobType) < 0)
		goto fail;
	Py_INCREF(&CudaContextType);
	Py_INCREF(&CudaJobType);
	if (PyModule_AddObject(m, "CudaContext", (PyObject *)&CudaContextType) < 0 ||
	    PyModule_AddObject(m, "CudaJob", (PyObject *)&CudaJobType) < 0)
		goto fail;
#endif
	if (PyModule_AddIntConstant(m, "HAVE_CUDA", KVT_HAVE_CUDA) < 0)
		goto fail;
	if (PyModule_AddObject(m, "Client", (PyObject *)&ClientType) < 0 ||
	    PyModule_AddObject(m, "Layout", (PyObject *)&LayoutType) < 0 ||
	    PyModule_AddObject(m, "Namespace", (PyObject *)&NamespaceType) < 0)
		goto fail;
	struct {
		const char *name;
		long v;
	} consts[] = {
		{"KEY_BYTES", KVT_KEY_BYTES}, {"MISS", KVT_MISS},
		{"HOST", KVT_HOST},	      {"DISK", KVT_DISK},
		{"PENDING", KVT_PENDING},     {"INDEX_PAGE", KVT_INDEX_PAGE},
		{"INDEX_SLOT", KVT_INDEX_SLOT}, {"STATS_DAEMON", KVT_STATS_DAEMON},
		{"STATS_TENANTS", KVT_STATS_TENANTS}, {"STATS_NAMESPACES", KVT_STATS_NAMESPACES},
		{"STATS_CLIENTS", KVT_STATS_CLIENTS}, {"STATS_ALL", KVT_STATS_ALL},
	};
	for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
		if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0)
			goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
