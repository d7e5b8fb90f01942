/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the binding's types share (binding.h): kvtier.Error and how it is
 * raised, the type objects, __enter__ and the end of a dealloc, the
 * limited API's stand-ins for what it lacks, and the count of calls in
 * progress on a Client.  The types and the module call into this file; it
 * calls none of them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

PyObject *kvt_error;
PyTypeObject *ClientType, *LayoutType, *NamespaceType;
#if KVT_HAVE_CUDA
PyTypeObject *CudaContextType, *CudaJobType;
#endif

PyObject *binding_enter_self(PyObject *self, PyObject *unused)
{
	Py_INCREF(self);
	return self;
}

void binding_free(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
	f(self);
	Py_DECREF(tp);
}

const char *binding_type_name(PyObject *o, char *buf, size_t len)
{
	PyObject *name = PyType_GetName(Py_TYPE(o));
	const char *s = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
	if (!s)
		PyErr_Clear();
	snprintf(buf, len, "%s", s ? s : "?");
	Py_XDECREF(name);
	return buf;
}

PyObject *binding_tuple(PyObject *o, const char *message)
{
	if (PyTuple_Check(o))
		return Py_NewRef(o);
	PyObject *t = PySequence_Tuple(o);
	if (!t && PyErr_ExceptionMatches(PyExc_TypeError))
		PyErr_SetString(PyExc_TypeError, message);
	return t;
}

/* Raise kvtier.Error(errno, message). */
PyObject *raise_errno(int r, const char *call, const char *detail)
{
	const char *msg = detail && *detail ? detail : strerror(r < 0 ? -r : r);
	PyObject *args = Py_BuildValue("(is)", r < 0 ? -r : r, msg);
	if (args) {
		PyObject *err = PyObject_Call(kvt_error, args, NULL);
		Py_DECREF(args);
		if (err) {
			PyObject *w = PyUnicode_FromString(call);
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

/* Enter a call on the client: 0, or -1 with an exception set. */
int client_enter(ClientObject *self)
{
	if (!self->c || self->closing) {
		raise_errno(-ENOTCONN, "kvtier", "the client is closed");
		return -1;
	}
	self->busy++;
	return 0;
}

void client_leave(ClientObject *self)
{
	if (--self->busy == 0 && self->closing) {
		kvt_client_free(self->c);
		self->c = NULL;
		self->closing = 0;
	}
}

PyObject *client_error_for(ClientObject *self, int r, const char *what)
{
	return raise_errno(r, what, self->c ? kvt_client_error(self->c) : NULL);
}
