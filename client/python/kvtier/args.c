/* SPDX-License-Identifier: Apache-2.0 */
/* Memory, keys and integers from Python objects. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

void mem_release(struct mem *m)
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
int mem_get(PyObject *o, int writable, struct mem *m)
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
	char tn[64];
	PyErr_Format(PyExc_TypeError,
		     "kvtier: expected a buffer (bytes, bytearray, numpy array) or a tensor, not %s",
		     binding_type_name(o, tn, sizeof(tn)));
	return -1;
}

/* Keys: a bytes-like object of n * 32 bytes. */
int keys_get(PyObject *o, struct mem *m, size_t *ret_n)
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
int ints_get(PyObject *o, size_t elem, int is_signed, struct mem *m, void **ret_owned,
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
	PyObject *seq = binding_tuple(o, "kvtier: expected a buffer or a sequence of ints");
	if (!seq)
		return -1;
	Py_ssize_t n = PyTuple_Size(seq);
	void *a = malloc(n ? (size_t)n * elem : 1);
	if (!a) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		long long v = PyLong_AsLongLong(PyTuple_GetItem(seq, i));
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

PyObject *status_list(const int32_t *st, size_t n)
{
	PyObject *l = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; l && i < n; i++) {
		PyObject *v = PyLong_FromLong(st[i]);
		if (!v) {
			Py_CLEAR(l);
			break;
		}
		PyList_SetItem(l, (Py_ssize_t)i, v);
	}
	return l;
}


/* Buffers of a sequence, each at least `need` bytes. */
int mems_get(PyObject *o, int writable, size_t need, struct mem **ret, size_t *ret_n)
{
	PyObject *seq = binding_tuple(o, "kvtier: expected a sequence of buffers");
	if (!seq)
		return -1;
	size_t n = (size_t)PyTuple_Size(seq);
	struct mem *m = calloc(n ? n : 1, sizeof(*m));
	if (!m) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	size_t i;
	for (i = 0; i < n; i++) {
		if (mem_get(PyTuple_GetItem(seq, (Py_ssize_t)i), writable, &m[i]) < 0)
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

void mems_release(struct mem *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++)
		mem_release(&m[i]);
	free(m);
}
