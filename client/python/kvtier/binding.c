/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the binding's types share (binding.h): kvtier.Error and how it is
 * raised, __enter__, and the count of calls in progress on a Client.  The
 * types and the module call into this file; it calls none of them.
 */
#include <errno.h>
#include <string.h>

#include "binding.h"

PyObject *kvt_error;

PyObject *binding_enter_self(PyObject *self, PyObject *unused)
{
	Py_INCREF(self);
	return self;
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
