/* SPDX-License-Identifier: Apache-2.0 */
/* The module kvtier._kvtier: kvtier.Error, hash_chain, versions, the CUDA
 * path's availability, the types. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"
#include "codec.h"

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
			   (uint8_t *)PyBytes_AsString(ret), nk);
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

static PyObject *mod_cuda_unavailable(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"device", NULL};
	int device = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:cuda_unavailable", kwlist, &device))
		return NULL;
	if (device < 0) {
		PyErr_SetString(PyExc_ValueError, "kvtier: device must be >= 0");
		return NULL;
	}
#if KVT_HAVE_CUDA
	char why[512];
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = kvt_cuda_device_check(device, why, sizeof(why));
	Py_END_ALLOW_THREADS
	if (r == 0)
		Py_RETURN_NONE;
	return PyUnicode_FromString(why);
#else
	return PyUnicode_FromString("this kvtier was built without CUDA (no nvcc where it was "
				    "built): build it where nvcc is installed");
#endif
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
	{"cuda_unavailable", (PyCFunction)(void (*)(void))mod_cuda_unavailable,
	 METH_VARARGS | METH_KEYWORDS,
	 "cuda_unavailable(device=0)\n--\n\n"
	 "None when the CUDA path (CudaContext) can run on CUDA device `device` in\n"
	 "this process; else why not, in words: built without CUDA, no NVIDIA\n"
	 "driver, a driver older than the CUDA runtime linked in (and the driver\n"
	 "it needs), no such device.  Asks the driver, not the daemon."},
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

/* A type from its spec, added to the module as name; 0 or -1. */
static int add_type(PyObject *m, const char *name, PyType_Spec *spec, PyTypeObject **ret)
{
	PyObject *t = PyType_FromSpec(spec);
	if (!t)
		return -1;
	/* The binding's pointer keeps a reference of its own, for good. */
	*ret = (PyTypeObject *)Py_NewRef(t);
	if (PyModule_AddObject(m, name, t) < 0) {
		Py_DECREF(t);
		return -1;
	}
	return 0;
}

PyMODINIT_FUNC PyInit__kvtier(void);
PyMODINIT_FUNC PyInit__kvtier(void)
{
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
#if KVT_HAVE_CUDA
	if (add_type(m, "CudaContext", &cuda_context_spec, &CudaContextType) < 0 ||
	    add_type(m, "CudaJob", &cuda_job_spec, &CudaJobType) < 0)
		goto fail;
#endif
	if (PyModule_AddIntConstant(m, "HAVE_CUDA", KVT_HAVE_CUDA) < 0)
		goto fail;
	if (add_type(m, "Client", &client_spec, &ClientType) < 0 ||
	    add_type(m, "Layout", &layout_spec, &LayoutType) < 0 ||
	    add_type(m, "Namespace", &namespace_spec, &NamespaceType) < 0)
		goto fail;
	/* Codec names by code, as open_namespace takes them (proto/codec.h). */
	PyObject *codecs = PyTuple_New(KVT_CODEC_COUNT);
	if (!codecs)
		goto fail;
	for (uint32_t c = 0; c < KVT_CODEC_COUNT; c++) {
		PyObject *name = PyUnicode_FromString(kvt_codec_name(c));
		if (!name) {
			Py_DECREF(codecs);
			goto fail;
		}
		PyTuple_SetItem(codecs, c, name);
	}
	if (PyModule_AddObject(m, "CODECS", codecs) < 0) {
		Py_DECREF(codecs);
		goto fail;
	}
	struct {
		const char *name;
		long v;
	} consts[] = {
		{"KEY_BYTES", KVT_KEY_BYTES}, {"MISS", KVT_MISS},
		{"HOST", KVT_HOST},	      {"DISK", KVT_DISK},
		{"PENDING", KVT_PENDING},     {"INDEX_PAGE", KVT_INDEX_PAGE},
		{"INDEX_SLOT", KVT_INDEX_SLOT}, {"STATS_DAEMON", KVT_STATS_DAEMON},
		{"LAYOUT_PLANE_BASES", KVT_LAYOUT_PLANE_BASES},
		{"LAYOUT_K_COLUMNS", KVT_LAYOUT_K_COLUMNS},
		{"STATS_TENANTS", KVT_STATS_TENANTS}, {"STATS_NAMESPACES", KVT_STATS_NAMESPACES},
		{"STATS_CLIENTS", KVT_STATS_CLIENTS}, {"STATS_ALL", KVT_STATS_ALL},
		{"PRIORITY_DEFAULT", KVT_PRIORITY_DEFAULT}, {"PRIORITY_MAX", KVT_PRIORITY_MAX},
	};
	for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
		if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0)
			goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
