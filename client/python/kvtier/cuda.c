/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier.CudaContext and kvtier.CudaJob: the library's CUDA path. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

#if KVT_HAVE_CUDA
#include "kvtier-cuda.h"

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
	struct paged_args a;
	if (paged_args_get(ns, lo, keys_o, idx_o, &a) < 0)
		return NULL;
	PyObject *ret = NULL;
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
	r = load ? kvt_cuda_load_submit(self->ctx, ns->ns, shard, &lo->l, a.keys.ptr, a.n,
					a.indices.ptr, st, &job)
		 : kvt_cuda_store_submit(self->ctx, ns->ns, shard, &lo->l, a.keys.ptr, a.n,
					 a.indices.ptr, st, &job);
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
	paged_args_release(&a);
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
	{"__enter__", binding_enter_self, METH_NOARGS, NULL},
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

PyTypeObject CudaContextType = {
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
	{"__enter__", binding_enter_self, METH_NOARGS, NULL},
	{"__exit__", (PyCFunction)CudaJob_close, METH_VARARGS, NULL},
	{NULL}};

static PySequenceMethods CudaJob_seq = {.sq_length = (lenfunc)CudaJob_len};

PyTypeObject CudaJobType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvtier.CudaJob",
	.tp_basicsize = sizeof(CudaJobObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Copies queued by CudaContext.load or .store.",
	.tp_dealloc = (destructor)CudaJob_dealloc,
	.tp_methods = CudaJob_methods,
	.tp_as_sequence = &CudaJob_seq,
};
#endif
