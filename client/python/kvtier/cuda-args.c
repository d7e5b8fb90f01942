/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arguments of kvtier.CudaContext and of its load/store, checked and
 * turned into kvt_cuda_opts and kvt_cuda_submit_opts without CUDA (the
 * paged copy's own in paged-args.c): every mistake a caller can make is a
 * ValueError or TypeError that says what is allowed, raised before the
 * driver is asked for anything.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"
#include "macro.h"

#if KVT_HAVE_CUDA
struct name {
	const char *name;
	uint32_t value;
};

static const struct name copy_paths[] = {
	{"auto", KVT_CUDA_PATH_AUTO},
	{"kernel", KVT_CUDA_PATH_KERNEL},
	{"engine", KVT_CUDA_PATH_ENGINE},
};

static const struct name afters[] = {
	{"stream", KVT_CUDA_AFTER_STREAM},
	{"event", KVT_CUDA_AFTER_EVENT},
	{"none", KVT_CUDA_AFTER_NONE},
};

/* The value of a keyword that names one of a few choices. */
static int name_get(PyObject *o, const struct name *t, size_t n, const char *what,
		    uint32_t *ret)
{
	const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, NULL) : NULL;
	if (!s && PyErr_Occurred())
		return -1;
	for (size_t i = 0; s && i < n; i++)
		if (!strcmp(s, t[i].name)) {
			*ret = t[i].value;
			return 0;
		}
	/* Every table here has three names. */
	PyErr_Format(s ? PyExc_ValueError : PyExc_TypeError,
		     "kvtier: %s must be '%s', '%s' or '%s', not %R", what, t[0].name, t[1].name,
		     t[2].name, o);
	return -1;
}

int cuda_opts_get(PyObject *copy_path, long long max_ctas, int pin_background,
		  kvt_cuda_opts *ret)
{
	*ret = (kvt_cuda_opts){.size = sizeof(*ret),
			       .flags = pin_background ? KVT_CUDA_PIN_BACKGROUND : 0};
	if (copy_path &&
	    name_get(copy_path, copy_paths, ARRAY_SIZE(copy_paths), "copy_path", &ret->copy_path) < 0)
		return -1;
	if (max_ctas < 0 || max_ctas > KVT_PY_CUDA_MAX_CTAS) {
		PyErr_Format(PyExc_ValueError,
			     "kvtier: max_ctas must be 0 (the default, 8) to %d, not %lld",
			     KVT_PY_CUDA_MAX_CTAS, max_ctas);
		return -1;
	}
	ret->max_ctas = (uint32_t)max_ctas;
	return 0;
}

int cuda_timeout_get(PyObject *o, int *ret_ms)
{
	if (!o || o == Py_None) {
		*ret_ms = -1;
		return 0;
	}
	double s = PyFloat_AsDouble(o);
	if (s == -1.0 && PyErr_Occurred()) {
		PyErr_SetString(PyExc_TypeError, "kvtier: timeout is a number of seconds, or None");
		return -1;
	}
	if (!(s >= 0.0 && s * 1000.0 <= (double)INT_MAX)) {
		PyErr_Format(PyExc_ValueError,
			     "kvtier: timeout must be 0 to %d seconds, or None to wait for good",
			     INT_MAX / 1000);
		return -1;
	}
	*ret_ms = (int)ceil(s * 1000.0);
	return 0;
}

/* When the copies start: after the stream (default), an event, or at once. */
static int after_get(struct cuda_submit_args *a, const struct cuda_submit_in *in)
{
	a->o.after = KVT_CUDA_AFTER_STREAM;
	if (in->after && name_get(in->after, afters, ARRAY_SIZE(afters), "after", &a->o.after) < 0)
		return -1;
	a->o.stream = (void *)(uintptr_t)in->stream;
	if (in->event && in->event != Py_None) {
		if (!PyLong_Check(in->event)) {
			char tn[64];
			PyErr_Format(PyExc_TypeError,
				     "kvtier: event is a cudaEvent_t as an int "
				     "(torch.cuda.Event().cuda_event), not %s",
				     binding_type_name(in->event, tn, sizeof(tn)));
			return -1;
		}
		a->o.event = PyLong_AsVoidPtr(in->event);
		if (PyErr_Occurred())
			return -1;
	}
	const char *bad = NULL;
	if (a->o.event && a->o.after != KVT_CUDA_AFTER_EVENT)
		bad = "event= needs after='event'";
	else if (!a->o.event && a->o.after == KVT_CUDA_AFTER_EVENT)
		bad = "after='event' needs event= (a non-zero cudaEvent_t)";
	else if (in->stream && a->o.after != KVT_CUDA_AFTER_STREAM)
		bad = "stream only applies with after='stream'";
	if (bad)
		PyErr_Format(PyExc_ValueError, "kvtier: %s", bad);
	return bad ? -1 : 0;
}

int cuda_submit_args_get(NamespaceObject *ns, const struct cuda_submit_in *in,
			 struct cuda_submit_args *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->o.size = sizeof(ret->o);
	ret->o.flags = in->wait_pinned ? KVT_CUDA_SUBMIT_WAIT_PINNED : 0;
	if (in->shard >= ns->info.shards) {
		PyErr_Format(PyExc_ValueError, "kvtier: shard %u is past the namespace's %u shards",
			     in->shard, ns->info.shards);
		return -1;
	}
	if (after_get(ret, in) < 0 ||
	    paged_args_get(ns, in->layout, in->keys, in->indices, in->groups, in->group_indices, 1,
			   &ret->p) < 0)
		return -1;
	if (ret->p.grouped) {
		ret->o.n_groups = ret->p.n_layouts;
		ret->o.layouts = ret->p.layouts;
		ret->o.group_indices = ret->p.group_idx;
	}
	return 0;
}

void cuda_submit_args_release(struct cuda_submit_args *a)
{
	paged_args_release(&a->p);
}
#endif
