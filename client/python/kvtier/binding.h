/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtier._kvtier, the CPython binding of libkvtier-client: what its files
 * share.  module.c (the module and its functions), binding.c (kvtier.Error,
 * __enter__, the calls in progress on a Client), args.c (memory, keys and
 * integers from Python objects), cuda-args.c (the CUDA path's arguments,
 * checked without CUDA), paged-args.c (a paged copy's keys, layouts and
 * indices), client.c, namespace.c, layout.c and cuda.c (one
 * Python type each).  Calls run one way: module.c to the types, the types
 * to cuda-args.c, paged-args.c, args.c and binding.c.
 *
 * Lifetime: a Namespace holds a reference to its Client, and both count
 * the calls in progress on them, so that close() from one thread while
 * another thread is inside the library only marks the object: the last
 * call out frees it.  Objects may be closed in any order.
 *
 * The binding keeps to CPython's limited API of 3.11, the first with the
 * buffer protocol in it, so that one build (abi3) imports on every CPython
 * from 3.11 on: the types are heap types made from specs at import, and
 * nothing reaches into an object's layout.  A build with meson >= 1.3
 * says so itself (limited_api: client/python/kvtier/meson.build), which
 * also names the module *.abi3.so; the default here covers older ones.
 */
#pragma once

#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stddef.h>
#include <stdint.h>

#include "kvt-config.h"
#include "kvtier.h"

/* ---- binding.c ---- */

/* kvtier.Error, a subclass of OSError (made by module.c). */
extern PyObject *kvt_error;

/* Raise kvtier.Error(errno, detail or strerror); call names the call.
 * Returns NULL. */
PyObject *raise_errno(int r, const char *call, const char *detail);

/* __enter__ of every type: returns self. */
PyObject *binding_enter_self(PyObject *self, PyObject *unused);

/* The end of every type's tp_dealloc: frees self and lets go of its
 * (heap) type. */
void binding_free(PyObject *self);

/* The name of o's type, for a message: in buf, or "?". */
const char *binding_type_name(PyObject *o, char *buf, size_t len);

/* o's items as a tuple (a new reference), as PySequence_Fast gives a list
 * or tuple: NULL with TypeError(message) when o is not iterable. */
PyObject *binding_tuple(PyObject *o, const char *message);

/* ---- args.c ---- */

/* One piece of caller memory, held for the length of a call. */
struct mem {
	void *ptr;
	size_t len;
	Py_buffer view; /* when view.obj is set */
};

void mem_release(struct mem *m);
/* Caller memory from a buffer or a contiguous CPU tensor. */
int mem_get(PyObject *o, int writable, struct mem *m);
/* Keys: a bytes-like object of n * 32 bytes. */
int keys_get(PyObject *o, struct mem *m, size_t *ret_n);
/* Integers of elem bytes: a buffer, a tensor or a sequence of ints
 * (converted into *ret_owned, to free). */
int ints_get(PyObject *o, size_t elem, int is_signed, struct mem *m, void **ret_owned,
	     size_t *ret_n);
/* Buffers of a sequence, each at least need bytes. */
int mems_get(PyObject *o, int writable, size_t need, struct mem **ret, size_t *ret_n);
void mems_release(struct mem *m, size_t n);
/* A list of ints from per-key statuses. */
PyObject *status_list(const int32_t *st, size_t n);

/* ---- client.c ---- */

typedef struct {
	PyObject_HEAD
	kvt_client *c;
	int busy;    /* calls in progress with the GIL released */
	int closing; /* close() came while busy: the last call frees */
	PyObject *log; /* callable(level, message) or NULL */
} ClientObject;

/* The types: made by module.c from their specs. */
extern PyType_Spec client_spec;
extern PyTypeObject *ClientType;
/* In binding.c: enter a call on the client (0, or -1 with an exception
 * set) / leave it. */
int client_enter(ClientObject *self);
void client_leave(ClientObject *self);
/* Raise the library's reason for the last refused call on the client. */
PyObject *client_error_for(ClientObject *self, int r, const char *call);

/* ---- layout.c ---- */

typedef struct {
	PyObject_HEAD
	kvt_layout l;
	void **bases;
	PyObject *keep; /* what owns the memory, kept alive with the layout */
} LayoutObject;

extern PyType_Spec layout_spec;
extern PyTypeObject *LayoutType;

/* ---- namespace.c ---- */

typedef struct {
	PyObject_HEAD
	kvt_ns *ns;
	ClientObject *client;
	int busy;
	int closing;
	kvt_ns_info info;
	uint32_t dtype; /* of every layer group: a codec reads its elements */
} NamespaceObject;

extern PyType_Spec namespace_spec;
extern PyTypeObject *NamespaceType;
PyObject *Client_open_namespace(ClientObject *self, PyObject *args, PyObject *kw);
int ns_enter(NamespaceObject *self);
void ns_leave(NamespaceObject *self);
PyObject *ns_error(NamespaceObject *self, int r, const char *call);

/* ---- paged-args.c ---- */

#define KVT_PY_MAX_GROUPS 16 /* layer groups of a namespace (KVT_MAX_GROUPS) */

/* The keys, layouts and page or slot indices of one paged copy (the CPU
 * path's store_paged/load_paged, the CUDA path's load/store): a layout and
 * its indices, or with groups= a layout per layer group and either one set
 * of indices for all or group_indices, one per group; checked against
 * each other and the namespace (n keys need n, or n * block_tokens,
 * indices; the layouts' blocks add up to its shard). */
struct paged_args {
	struct mem keys;
	size_t n;
	int grouped; /* groups= was given */
	uint32_t n_layouts;
	const kvt_layout *layouts[KVT_PY_MAX_GROUPS]; /* [n_layouts] */
	const int64_t *group_idx[KVT_PY_MAX_GROUPS];  /* [n_layouts] */
	struct mem idx[KVT_PY_MAX_GROUPS];
	void *owned[KVT_PY_MAX_GROUPS];
	PyObject *keep; /* the Layout, or a tuple of the groups' */
};
/* need_n_pages: every layout must bound its indices (the CUDA path). */
int paged_args_get(NamespaceObject *ns, PyObject *layout, PyObject *keys, PyObject *indices,
		   PyObject *groups, PyObject *group_indices, int need_n_pages,
		   struct paged_args *ret);
void paged_args_release(struct paged_args *a);

/* ---- cuda-args.c ---- */

#if KVT_HAVE_CUDA
#include "kvtier-cuda.h"

#define KVT_PY_CUDA_MAX_CTAS 65535 /* kvt_cuda_opts.max_ctas */

/* CudaContext's keywords (copy_path NULL: "auto"); 0, or -1 with a
 * ValueError or TypeError set. */
int cuda_opts_get(PyObject *copy_path, long long max_ctas, int pin_background,
		  kvt_cuda_opts *ret);
/* A timeout in seconds (None or NULL: -1, for good) in milliseconds. */
int cuda_timeout_get(PyObject *o, int *ret_ms);

/* What CudaContext.load/store were given (NULL: not given). */
struct cuda_submit_in {
	PyObject *layout, *keys, *indices; /* layout and indices may be None */
	PyObject *event, *after, *groups, *group_indices;
	unsigned long long stream;
	unsigned int shard;
	int wait_pinned;
};

/* ... checked against the namespace, as the library takes them. */
struct cuda_submit_args {
	kvt_cuda_submit_opts o;
	struct paged_args p;
};

int cuda_submit_args_get(NamespaceObject *ns, const struct cuda_submit_in *in,
			 struct cuda_submit_args *ret);
void cuda_submit_args_release(struct cuda_submit_args *a);

/* ---- cuda.c ---- */

extern PyType_Spec cuda_context_spec, cuda_job_spec;
extern PyTypeObject *CudaContextType, *CudaJobType;
#endif
