/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier.CudaContext and kvtier.CudaJob: the library's CUDA path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "macro.h"

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
	PyObject *layouts; /* a Layout or a tuple of them: the engine memory */
} CudaJobObject;

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
	static char *kwlist[] = {"client", "device", "copy_path", "max_ctas", "pin_background",
				 NULL};
	ClientObject *client;
	int device = 0, pin_background = 0;
	PyObject *copy_path = NULL;
	long long max_ctas = 0;
	kvt_cuda_opts opts;
	/* Every option is checked before the driver is asked for anything. */
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|i$OLp:CudaContext", kwlist, ClientType,
					 &client, &device, &copy_path, &max_ctas, &pin_background) ||
	    cuda_opts_get(copy_path, max_ctas, pin_background, &opts) < 0)
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
	r = kvt_cuda_ctx_new_opts(client->c, device, &opts, &ctx);
	Py_END_ALLOW_THREADS
	/* ENODEV with the library's reason: no driver, a driver too old for
	 * the runtime linked in, no device. */
	if (r == -ENODEV)
		client_error_for(client, r, "CudaContext");
	else if (r < 0)
		raise_errno(r, "CudaContext", NULL);
	client_leave(client);
	if (r < 0)
		return -1;
	self->ctx = ctx;
	Py_INCREF((PyObject *)client);
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
	binding_free((PyObject *)self);
}

static PyObject *CudaContext_submit(CudaContextObject *self, PyObject *args, PyObject *kw,
				    int load)
{
	static char *kwlist[] = {"ns", "shard", "layout", "keys", "indices", "stream", "event",
				 "after", "groups", "group_indices", "wait_pinned", NULL};
	NamespaceObject *ns;
	struct cuda_submit_in in = {.indices = Py_None,
				    .groups = Py_None,
				    .group_indices = Py_None,
				    .wait_pinned = 1};
	struct cuda_submit_args a;
	/* Checked before the context is: mistakes show without a GPU. */
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!IOO|OK$OOOOp", kwlist, NamespaceType, &ns,
					 &in.shard, &in.layout, &in.keys, &in.indices, &in.stream,
					 &in.event, &in.after, &in.groups, &in.group_indices,
					 &in.wait_pinned) ||
	    cuda_submit_args_get(ns, &in, &a) < 0)
		return NULL;
	PyObject *ret = NULL;
	CudaJobObject *jo = PyObject_New(CudaJobObject, CudaJobType);
	if (!jo)
		goto out;
	jo->job = NULL;
	jo->ctx = (CudaContextObject *)Py_NewRef((PyObject *)self);
	jo->ns = (NamespaceObject *)Py_NewRef((PyObject *)ns);
	jo->layouts = Py_NewRef(a.p.keep);
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
	const kvt_layout *layout = a.o.n_groups ? NULL : a.p.layouts[0];
	const int64_t *indices = a.o.group_indices ? NULL : a.p.group_idx[0];
	Py_BEGIN_ALLOW_THREADS
	r = load ? kvt_cuda_load_submit_opts(self->ctx, ns->ns, in.shard, layout, a.p.keys.ptr,
					     a.p.n, indices, &a.o, &job)
		 : kvt_cuda_store_submit_opts(self->ctx, ns->ns, in.shard, layout, a.p.keys.ptr,
					      a.p.n, indices, &a.o, &job);
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
	cuda_submit_args_release(&a);
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

static PyObject *CudaContext_wait_pinned(CudaContextObject *self, PyObject *args,
					 PyObject *kw)
{
	static char *kwlist[] = {"timeout", NULL};
	PyObject *timeout = Py_None;
	int ms;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait_pinned", kwlist, &timeout) ||
	    cuda_timeout_get(timeout, &ms) < 0 || cuda_enter(self) < 0)
		return NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_cuda_ctx_wait_pinned(self->ctx, ms);
	Py_END_ALLOW_THREADS
	self->busy = 0;
	if (r == -ETIMEDOUT)
		Py_RETURN_FALSE;
	if (r < 0)
		return raise_errno(r, "wait_pinned", NULL);
	Py_RETURN_TRUE;
}

#define STAT(f) {#f, offsetof(kvt_cuda_stats, f), sizeof(((kvt_cuda_stats *)0)->f)}
static const struct {
	const char *name;
	size_t offset, size;
} cuda_stats_fields[] = {
	STAT(ranges),        STAT(ranges_pinned), STAT(ranges_pending), STAT(ranges_failed),
	STAT(ranges_stale),  STAT(bytes_pinned),  STAT(bytes_pending),  STAT(bytes_failed),
	STAT(pin_calls),     STAT(pin_failures),  STAT(pin_ns),         STAT(pin_max_ns),
	STAT(copies_kernel), STAT(copies_engine), STAT(blocks_unpinned),
};
#undef STAT

static PyObject *CudaContext_stats(CudaContextObject *self, PyObject *unused)
{
	kvt_cuda_stats st = {.size = sizeof(st)};
	if (cuda_enter(self) < 0)
		return NULL;
	int r = kvt_cuda_ctx_stats(self->ctx, &st);
	self->busy = 0;
	if (r < 0)
		return raise_errno(r, "stats", NULL);
	PyObject *d = PyDict_New();
	for (size_t i = 0; d && i < ARRAY_SIZE(cuda_stats_fields); i++) {
		const char *p = (const char *)&st + cuda_stats_fields[i].offset;
		uint64_t v = 0;
		if (cuda_stats_fields[i].size == sizeof(uint32_t))
			v = *(const uint32_t *)p;
		else
			v = *(const uint64_t *)p;
		PyObject *o = PyLong_FromUnsignedLongLong(v);
		if (!o || PyDict_SetItemString(d, cuda_stats_fields[i].name, o) < 0)
			Py_CLEAR(d);
		Py_XDECREF(o);
	}
	return d;
}

#define SUBMIT_SIG                                                                         \
	"(ns, shard, layout, keys, indices=None, stream=0, *, event=None,\n"                     \
	"      after='stream', groups=None, group_indices=None, wait_pinned=True)\n--\n\n"
#define SUBMIT_OPTS                                                                        \
	"after='stream' starts after the work queued on stream so far (a\n"                     \
	"cudaStream_t as an int, e.g. torch.cuda.current_stream().cuda_stream);\n"              \
	"after='event' after event (a cudaEvent_t as an int, e.g.\n"                            \
	"torch.cuda.Event().cuda_event); after='none' at once.  groups: one Layout\n"           \
	"per layer group (1 to 16, in layer order) for a namespace whose groups\n"              \
	"differ in geometry, with layout=None; group_indices: one set of indices\n"             \
	"per group, with indices=None.  wait_pinned=False refuses blocks in pool\n"             \
	"memory not pinned yet (-EAGAIN) instead of waiting for it.  Every layout\n"            \
	"needs n_pages.  Arguments are checked before any CUDA call (ValueError,\n"             \
	"TypeError).  Returns a CudaJob."

static PyMethodDef CudaContext_methods[] = {
	{"close", (PyCFunction)CudaContext_close, METH_NOARGS,
	 "close()\n--\n\nWait for the streams and unregister the pool.  Close the jobs first."},
	{"__enter__", binding_enter_self, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)CudaContext_close, METH_VARARGS, NULL},
	{"load", (PyCFunction)(void (*)(void))CudaContext_load, METH_VARARGS | METH_KEYWORDS,
	 "load" SUBMIT_SIG "Queue loads into GPU pages (layer_base are device pointers), one copy\n"
	 "per layer followed by an event (CudaJob.wait_layer).\n" SUBMIT_OPTS},
	{"store", (PyCFunction)(void (*)(void))CudaContext_store, METH_VARARGS | METH_KEYWORDS,
	 "store" SUBMIT_SIG "Queue stores from GPU pages; blocks are committed by the poll or wait\n"
	 "that sees their copy done.  The event, or the stream, marks when the pages\n"
	 "were written.\n" SUBMIT_OPTS},
	{"wait_pinned", (PyCFunction)(void (*)(void))CudaContext_wait_pinned,
	 METH_VARARGS | METH_KEYWORDS,
	 "wait_pinned(timeout=None)\n--\n\nWait until the pool as mapped now is registered with\n"
	 "the driver (pinned, or failed to pin): True, or False after timeout\n"
	 "seconds (None: for good)."},
	{"stats", (PyCFunction)CudaContext_stats, METH_NOARGS,
	 "stats()\n--\n\nWhat the context registered and how its copies went: a dict of\n"
	 "kvt_cuda_stats' fields (ranges, ranges_pinned, ..., copies_kernel,\n"
	 "copies_engine, blocks_unpinned)."},
	{NULL}};
#undef SUBMIT_SIG
#undef SUBMIT_OPTS

static PyType_Slot CudaContext_slots[] = {
	{Py_tp_doc,
	 (void *)"CudaContext(client, device=0, *, copy_path='auto', max_ctas=0,\n"
		 "            pin_background=False)\n--\n\n"
		 "The library's CUDA path for one client and device: load and store\n"
		 "streams, the pool registered with the driver.  copy_path: 'auto' (the\n"
		 "cost model picks per copy), 'kernel' or 'engine' (the copy engines\n"
		 "wherever they can); max_ctas: CTAs one copy kernel may occupy (0: 8, at\n"
		 "most 65535); pin_background: return at once and pin the pool in the\n"
		 "background (wait_pinned).  Options are checked before any CUDA call.\n"
		 "Without a device or a driver that serves its CUDA runtime:\n"
		 "kvtier.Error(ENODEV) saying which (kvtier.cuda_unavailable()).  One\n"
		 "thread at a time."},
	{Py_tp_new, (void *)PyType_GenericNew},
	{Py_tp_init, (void *)CudaContext_init},
	{Py_tp_dealloc, (void *)CudaContext_dealloc},
	{Py_tp_methods, (void *)CudaContext_methods},
	{0, NULL}};

PyType_Spec cuda_context_spec = {
	.name = "kvtier.CudaContext",
	.basicsize = sizeof(CudaContextObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = CudaContext_slots,
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
	PyObject *sl = Py_NewRef(PyTuple_GetItem(t, 1));
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
	Py_CLEAR(self->layouts);
	binding_free((PyObject *)self);
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
	{"__enter__", binding_enter_self, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)CudaJob_close, METH_VARARGS, NULL},
	{NULL}};

static PyType_Slot CudaJob_slots[] = {
	{Py_tp_doc, (void *)"Copies queued by CudaContext.load or .store."},
	{Py_tp_dealloc, (void *)CudaJob_dealloc},
	{Py_tp_methods, (void *)CudaJob_methods},
	{Py_sq_length, (void *)CudaJob_len},
	{0, NULL}};

/* Made by CudaContext.load and .store only. */
PyType_Spec cuda_job_spec = {
	.name = "kvtier.CudaJob",
	.basicsize = sizeof(CudaJobObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = CudaJob_slots,
};
#endif
