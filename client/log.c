/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The library's log: messages go to the handler the application installed,
 * for one client or for all, and nowhere otherwise.
 */
#include <stdarg.h>
#include <stdio.h>

#include "client-internal.h"

static kvt_log_fn default_log;
static void *default_log_ud;

KVT_EXPORT void kvt_set_default_log(kvt_log_fn fn, void *userdata)
{
	default_log = fn;
	default_log_ud = userdata;
}

KVT_EXPORT void kvt_client_set_log(kvt_client *c, kvt_log_fn fn, void *userdata)
{
	if (!c)
		return;
	c->log = fn;
	c->log_ud = userdata;
}

void client_log(kvt_client *c, int level, const char *fmt, ...)
{
	kvt_log_fn fn = c && c->log ? c->log : default_log;
	void *ud = c && c->log ? c->log_ud : default_log_ud;
	char msg[600];
	va_list ap;

	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(level, msg, ud);
}
