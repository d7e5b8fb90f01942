/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier.Layout: where an engine keeps one rank's KV cache. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

static int Layout_init(LayoutObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"n_layers", "planes", "heads", "head_bytes", "page_tokens",
				 "layer_base", "stride_plane", "stride_page", "stride_token",
				 "stride_head", "index_kind", "keep", "n_pages", "flags", "elem_bytes",
				 NULL};
	unsigned int nl, planes, heads, hb, pt, kind = KVT_INDEX_PAGE, flags = 0, elem = 0;
	unsigned long long n_pages = 0;
	PyObject *bases_o, *keep = Py_None;
	long long sp, sg, st, sh;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "IIIIIOLLLL|IOKII:Layout", kwlist, &nl, &planes,
					 &heads, &hb, &pt, &bases_o, &sp, &sg, &st, &sh, &kind,
					 &keep, &n_pages, &flags, &elem))
		return -1;
	/* One base per layer, or per layer and plane. */
	size_t n_bases = (flags & KVT_LAYOUT_PLANE_BASES) ? (size_t)nl * planes : nl;
	PyObject *seq = binding_tuple(bases_o, "kvtier: layer_base is a sequence of addresses");
	if (!seq)
		return -1;
	if ((size_t)PyTuple_Size(seq) != n_bases) {
		PyErr_Format(PyExc_ValueError, "kvtier: %zu base addresses expected, %zd given",
			     n_bases, PyTuple_Size(seq));
		Py_DECREF(seq);
		return -1;
	}
	void **bases = calloc(n_bases ? n_bases : 1, sizeof(*bases));
	if (!bases) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < n_bases; i++) {
		bases[i] = PyLong_AsVoidPtr(PyTuple_GetItem(seq, (Py_ssize_t)i));
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
			       .stride_head = sh,
			       .n_pages = n_pages,
			       .flags = flags,
			       .elem_bytes = elem};
	PyObject *was = self->keep;
	self->keep = Py_NewRef(keep);
	Py_XDECREF(was);
	return 0;
}

static void Layout_dealloc(LayoutObject *self)
{
	free(self->bases);
	Py_CLEAR(self->keep);
	binding_free((PyObject *)self);
}

static PyObject *Layout_block_bytes(LayoutObject *self, PyObject *arg)
{
	unsigned long bt = PyLong_AsUnsignedLong(arg);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromUnsignedLongLong(kvt_layout_block_bytes(&self->l, (uint32_t)bt));
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

static PyType_Slot Layout_slots[] = {
	{Py_tp_doc, (void *)"Layout(n_layers, planes, heads, head_bytes, page_tokens, layer_base,\n"
			    "       stride_plane, stride_page, stride_token, stride_head,\n"
			    "       index_kind=INDEX_PAGE, keep=None, n_pages=0, flags=0)\n--\n\n"
			    "Where an engine keeps one rank's KV cache: element (layer l, plane p,\n"
			    "page g, token t, head h) starts at layer_base[l] + p*stride_plane +\n"
			    "g*stride_page + t*stride_token + h*stride_head (bytes) and is head_bytes\n"
			    "long.  With INDEX_SLOT, indices are token slots (-1: padding).  keep\n"
			    "holds the tensors the addresses point into."},
	{Py_tp_new, (void *)PyType_GenericNew},
	{Py_tp_init, (void *)Layout_init},
	{Py_tp_dealloc, (void *)Layout_dealloc},
	{Py_tp_methods, (void *)Layout_methods},
	{Py_tp_members, (void *)Layout_members},
	{0, NULL}};

PyType_Spec layout_spec = {
	.name = "kvtier.Layout",
	.basicsize = sizeof(LayoutObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = Layout_slots,
};
