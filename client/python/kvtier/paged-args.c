/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arguments of a paged copy, on the CPU path (Namespace.store_paged
 * and load_paged) and on the CUDA path (CudaContext.load and store) alike:
 * keys, a layout or one per layer group, and their indices.  Every mistake
 * is a ValueError or TypeError that says what is allowed, raised before
 * the library is called.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "macro.h"

/* The layouts: layout, or groups (then layout is None). */
static int layouts_get(struct paged_args *a, PyObject *layout, PyObject *groups)
{
	char tn[64];
	if (groups == Py_None) {
		if (!PyObject_TypeCheck(layout, LayoutType)) {
			PyErr_Format(PyExc_TypeError,
				     "kvtier: layout must be a kvtier.Layout (or None with groups=), "
				     "not %s",
				     binding_type_name(layout, tn, sizeof(tn)));
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
	Py_ssize_t n = PyTuple_Size(a->keep);
	if (n < 1 || n > KVT_PY_MAX_GROUPS) {
		PyErr_Format(PyExc_ValueError, "kvtier: groups takes 1 to %d layouts, got %zd",
			     KVT_PY_MAX_GROUPS, n);
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *g = PyTuple_GetItem(a->keep, i);
		if (!PyObject_TypeCheck(g, LayoutType)) {
			PyErr_Format(PyExc_TypeError,
				     "kvtier: groups[%zd] must be a kvtier.Layout, not %s", i,
				     binding_type_name(g, tn, sizeof(tn)));
			return -1;
		}
		a->layouts[i] = &((LayoutObject *)g)->l;
	}
	a->n_layouts = (uint32_t)n;
	a->grouped = 1;
	return 0;
}

/* The layouts' geometry against the namespace: each bounded by n_pages
 * where that is needed, their blocks together the namespace's shard (with
 * its codec, as the library copies them: the engine's layout carries
 * none). */
static int layouts_check(const struct paged_args *a, const NamespaceObject *ns, int need_n_pages)
{
	const kvt_ns_info *info = &ns->info;
	uint64_t sum = 0;
	for (uint32_t k = 0; k < a->n_layouts; k++) {
		if (need_n_pages && !a->layouts[k]->n_pages) {
			char where[32] = "the layout";
			if (a->grouped)
				snprintf(where, sizeof(where), "groups[%u]", k);
			PyErr_Format(PyExc_ValueError,
				     "kvtier: the CUDA path needs n_pages= (the pages of the cache) "
				     "in %s: every index is checked against it",
				     where);
			return -1;
		}
		kvt_layout coded = *a->layouts[k];
		if (info->codec != KVT_CODEC_NONE) {
			coded.codec = info->codec;
			coded.dtype = ns->dtype;
		}
		sum += kvt_layout_block_bytes(&coded, info->block_tokens);
	}
	if (sum == info->shard_bytes)
		return 0;
	PyErr_Format(PyExc_ValueError,
		     "kvtier: the layout%s make%s blocks of %llu bytes; the namespace's shard has %llu",
		     a->grouped ? "s of groups" : "", a->grouped ? "" : "s",
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
static int indices_get(struct paged_args *a, const kvt_ns_info *info, PyObject *indices,
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
	if (!a->grouped || indices != Py_None) {
		PyErr_SetString(PyExc_ValueError,
				a->grouped ? "kvtier: indices and group_indices are exclusive: "
					     "pass indices=None with group_indices="
					   : "kvtier: group_indices needs groups=");
		return -1;
	}
	PyObject *seq = binding_tuple(group_indices,
				      "kvtier: group_indices must be a sequence, one per group");
	if (!seq)
		return -1;
	int r = -1;
	Py_ssize_t n = PyTuple_Size(seq);
	if (n != (Py_ssize_t)a->n_layouts) {
		PyErr_Format(PyExc_ValueError, "kvtier: %u groups need %u group_indices, got %zd",
			     a->n_layouts, a->n_layouts, n);
		goto out;
	}
	for (uint32_t k = 0; k < a->n_layouts; k++) {
		char what[48];
		if (ints_get(PyTuple_GetItem(seq, k), 8, 1, &a->idx[k], &a->owned[k],
			     &got) < 0)
			goto out;
		snprintf(what, sizeof(what), "indices in group_indices[%u]", k);
		if (count_check(a->layouts[k], info, a->n, got, what) < 0)
			goto out;
		a->group_idx[k] = a->idx[k].ptr;
	}
	r = 0;
out:
	Py_DECREF(seq);
	return r;
}

int paged_args_get(NamespaceObject *ns, PyObject *layout, PyObject *keys, PyObject *indices,
		   PyObject *groups, PyObject *group_indices, int need_n_pages,
		   struct paged_args *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (layouts_get(ret, layout, groups) < 0 ||
	    layouts_check(ret, ns, need_n_pages) < 0 ||
	    keys_get(keys, &ret->keys, &ret->n) < 0 ||
	    indices_get(ret, &ns->info, indices, group_indices) < 0) {
		paged_args_release(ret);
		return -1;
	}
	return 0;
}

void paged_args_release(struct paged_args *a)
{
	for (size_t k = 0; k < ARRAY_SIZE(a->idx); k++) {
		mem_release(&a->idx[k]);
		free(a->owned[k]);
		a->owned[k] = NULL;
	}
	mem_release(&a->keys);
	Py_CLEAR(a->keep);
}
