/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arguments of kvtier.CudaContext and of its load/store, checked and
 * turned into kvt_cuda_opts and kvt_cuda_submit_opts without CUDA: every
 * mistake a caller can make is a ValueError or TypeError that says what
 * is allowed, raised before the driver is asked for anything.
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
	const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
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

/* The layouts of a submission: layout, or groups (then layout is None). */
static int layouts_get(struct cuda_submit_args *a, PyObject *layout, PyObject *groups)
{
	if (groups == Py_None) {
		if (!PyObject_TypeCheck(layout, &LayoutType)) {
			PyErr_Format(PyExc_TypeError,
				     "kvtier: layout must be a kvtier.Layout (or None with groups=), "
				     "not %.80s",
				     Py_TYPE(layout)->tp_name);
			return -1;
		}
		a->n_layouts = 1;
		a->layouts[0] = &((LayoutObject *)layout)->l;
		a->keep = Py_NewRef(layout);
		return 0;
	}
	if (layout != Py_None) {
		PyErr_SetString(PyExc_ValueError,
				"kvtier: layout and groups are exclusive: pass layout=None with groups=");
		return -1;
	}
	a->keep = PySequence_Tuple(groups);
	if (!a->keep) {
		PyErr_SetString(PyExc_TypeError, "kvtier: groups must be a sequence of kvtier.Layout");
		return -1;
	}
	Py_ssize_t n = PyTuple_GET_SIZE(a->keep);
	if (n < 1 || n > KVT_PY_CUDA_MAX_GROUPS) {
		PyErr_Format(PyExc_ValueError, "kvtier: groups takes 1 to %d layouts, got %zd",
			     KVT_PY_CUDA_MAX_GROUPS, n);
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *g = PyTuple_GET_ITEM(a->keep, i);
		if (!PyObject_TypeCheck(g, &LayoutType)) {
			PyErr_Format(PyExc_TypeError,
				     "kvtier: groups[%zd] must be a kvtier.Layout, not %.80s", i,
				     Py_TYPE(g)->tp_name);
			return -1;
		}
		a->layouts[i] = &((LayoutObject *)g)->l;
	}
	a->n_layouts = (uint32_t)n;
	return 0;
}

/* The layouts' geometry against the namespace: each bounded by n_pages,
 * their blocks together the namespace's shard. */
static int layouts_check(const struct cuda_submit_args *a, const kvt_ns_info *info)
{
	uint64_t sum = 0;
	for (uint32_t k = 0; k < a->n_layouts; k++) {
		if (!a->layouts[k]->n_pages) {
			char where[32] = "the layout";
			if (a->o.n_groups)
				snprintf(where, sizeof(where), "groups[%u]", k);
			PyErr_Format(PyExc_ValueError,
				     "kvtier: the CUDA path needs n_pages= (the pages of the cache) "
				     "in %s: every index is checked against it",
				     where);
			return -1;
		}
		sum += kvt_layout_block_bytes(a->layouts[k], info->block_tokens);
	}
	if (sum == info->shard_bytes)
		return 0;
	PyErr_Format(PyExc_ValueError,
		     "kvtier: the layout%s make%s blocks of %llu bytes; the namespace's shard has %llu",
		     a->o.n_groups ? "s of groups" : "", a->o.n_groups ? "" : "s",
		     (unsigned long long)sum, (unsigned long long)info->shard_bytes);
	return -1;
}

/* n keys need n page indices, or n * block_tokens slot indices. */
static int count_check(const kvt_layout *l, const kvt_ns_info *info, size_t keys, size_t got,
		       const char *what)
{
	size_t need = keys * (l->index_kind == KVT_INDEX_SLOT ? info->block_tokens : 1);
	if (got == need)
		return 0;
	PyErr_Format(PyExc_ValueError, "kvtier: %zu keys need %zu %s, got %zu", keys, need, what,
		     got);
	return -1;
}

/* The indices: one set for every layout, or group_indices, one per group. */
static int indices_get(struct cuda_submit_args *a, const kvt_ns_info *info, PyObject *indices,
		       PyObject *group_indices)
{
	size_t got;
	if (group_indices == Py_None) {
		if (indices == Py_None) {
			PyErr_SetString(PyExc_TypeError,
					"kvtier: indices are needed (or group_indices= with groups=)");
			return -1;
		}
		if (ints_get(indices, 8, 1, &a->idx[0], &a->owned[0], &got) < 0)
			return -1;
		for (uint32_t k = 0; k < a->n_layouts; k++) {
			if (count_check(a->layouts[k], info, a->n, got, "indices") < 0)
				return -1;
			a->group_idx[k] = a->idx[0].ptr;
		}
		return 0;
	}
	if (a->o.n_groups == 0 || indices != Py_None) {
		PyErr_SetString(PyExc_ValueError,
				a->o.n_groups ? "kvtier: indices and group_indices are exclusive: "
						"pass indices=None with group_indices="
					      : "kvtier: group_indices needs groups=");
		return -1;
	}
	PyObject *seq = PySequence_Fast(group_indices,
					"kvtier: group_indices must be a sequence, one per group");
	if (!seq)
		return -1;
	int r = -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	if (n != (Py_ssize_t)a->n_layouts) {
		PyErr_Format(PyExc_ValueError, "kvtier: %u groups need %u group_indices, got %zd",
			     a->n_layouts, a->n_layouts, n);
		goto out;
	}
	for (uint32_t k = 0; k < a->n_layouts; k++) {
		char what[48];
		if (ints_get(PySequence_Fast_GET_ITEM(seq, k), 8, 1, &a->idx[k], &a->owned[k],
			     &got) < 0)
			goto out;
		snprintf(what, sizeof(what), "indices in group_indices[%u]", k);
		if (count_check(a->layouts[k], info, a->n, got, what) < 0)
			goto out;
		a->group_idx[k] = a->idx[k].ptr;
	}
	a->o.group_indices = a->group_idx;
	r = 0;
out:
	Py_DECREF(seq);
	return r;
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
			PyErr_Format(PyExc_TypeError,
				     "kvtier: event is a cudaEvent_t as an int "
				     "(torch.cuda.Event().cuda_event), not %.80s",
				     Py_TYPE(in->event)->tp_name);
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
	if (after_get(ret, in) < 0 || layouts_get(ret, in->layout, in->groups) < 0)
		goto fail;
	if (in->groups != Py_None) {
		ret->o.n_groups = ret->n_layouts;
		ret->o.layouts = ret->layouts;
	}
	if (layouts_check(ret, &ns->info) < 0 || keys_get(in->keys, &ret->keys, &ret->n) < 0 ||
	    indices_get(ret, &ns->info, in->indices, in->group_indices) < 0)
		goto fail;
	return 0;
fail:
	cuda_submit_args_release(ret);
	return -1;
}

void cuda_submit_args_release(struct cuda_submit_args *a)
{
	for (size_t k = 0; k < ARRAY_SIZE(a->idx); k++) {
		mem_release(&a->idx[k]);
		free(a->owned[k]);
		a->owned[k] = NULL;
	}
	mem_release(&a->keys);
	Py_CLEAR(a->keep);
}
#endif
