/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SIGHUP's rule (daemon/config-reload.c): live keys take their new values
 * and are named as changed; keys that need a restart keep the old value and
 * are named as such; tenants are taken whole.
 */
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "config-util.h"

static void reload(const char *before, const char *after, struct config *cur,
		   char *changed, char *restart)
{
	struct config fresh;
	char *err = NULL;

	CHECK(load_text(cur, before, &err) == 0, "before: %s", err);
	free(err);
	err = NULL;
	CHECK(load_text(&fresh, after, &err) == 0, "after: %s", err);
	free(err);
	config_reload(cur, &fresh, changed, 512, restart, 512);
	config_free(&fresh);
}

static void test_nothing(void)
{
	struct config c;
	char changed[512], restart[512];

	reload("[pool]\ncapacity = 1G\n", "[pool]\ncapacity = 1G\n", &c, changed, restart);
	CHECK(changed[0] == 0 && restart[0] == 0);
	config_free(&c);
}

static void test_live_and_restart(void)
{
	struct config c;
	char changed[512], restart[512];

	reload("[pool]\ncapacity = 1G\nextent_size = 64M\n[limits]\nconnections = 10\n"
	       "[nvme]\nwriteback_high = 80\n",
	       "[pool]\ncapacity = 2G\nextent_size = 128M\n[limits]\nconnections = 20\n"
	       "[nvme]\nwriteback_high = 90\n[tenant.a]\nuids = 1000\nquota = 1G\n",
	       &c, changed, restart);
	CHECK(!strcmp(changed, "[pool] capacity, [limits] connections, [nvme] writeback_high"),
	      "changed: %s", changed);
	CHECK(!strcmp(restart, "[pool] extent_size"), "restart: %s", restart);
	CHECK(c.capacity == UINT64_C(2) << 30);
	CHECK(c.max_connections == 20 && c.writeback_high == 90);
	CHECK(c.extent_size == UINT64_C(64) << 20); /* until a restart */
	CHECK(c.n_tenants == 1 && !strcmp(c.tenants[0].name, "a") &&
	      c.tenants[0].quota == UINT64_C(1) << 30);
	config_free(&c);
}

static void test_restart_only(void)
{
	struct config c;
	char changed[512], restart[512];

	reload("[spill.s]\npath = /srv/s\ncapacity = 64G\n[tenant.t]\nuids = 5\nsocket = /run/t.sock\n",
	       "[spill.s]\npath = /srv/s\ncapacity = 128G\n[tenant.t]\nuids = 5\nsocket = /run/u.sock\n",
	       &c, changed, restart);
	CHECK(changed[0] == 0, "changed: %s", changed);
	CHECK(!strcmp(restart, "[tenant.*] socket, [spill.*]"), "restart: %s", restart);
	CHECK(c.n_spills == 1 && c.spills[0].capacity == UINT64_C(64) << 30);
	config_free(&c);
}

/* A tenant socket's mode is set when it is bound. */
static void test_socket_mode(void)
{
	struct config c;
	char changed[512], restart[512];

	reload("[tenant.t]\nsocket_dir = /run/t/t\n",
	       "[tenant.t]\nsocket_dir = /run/t/t\nsocket_mode = 0666\n", &c, changed, restart);
	CHECK(changed[0] == 0, "changed: %s", changed);
	CHECK(!strcmp(restart, "[tenant.*] socket_mode"), "restart: %s", restart);
	config_free(&c);
}

/* The scrape endpoint's socket is bound at start: a new address waits for
 * a restart, the old one served meanwhile. */
static void test_metrics_listen(void)
{
	struct config c;
	char changed[512], restart[512];

	reload("[metrics]\nlisten = 127.0.0.1:9464\n", "[metrics]\nlisten = [::1]:9465\n", &c, changed,
	       restart);
	CHECK(changed[0] == 0, "changed: %s", changed);
	CHECK(!strcmp(restart, "[metrics] listen"), "restart: %s", restart);
	CHECK(c.metrics_listen && !strcmp(c.metrics_listen, "127.0.0.1:9464"), "%s", c.metrics_listen);
	config_free(&c);
	reload("[pool]\ncapacity = 1G\n", "[metrics]\nlisten = 0.0.0.0:0\n", &c, changed, restart);
	CHECK(!strcmp(restart, "[metrics] listen"), "restart: %s", restart);
	CHECK(c.metrics_listen == NULL);
	config_free(&c);
}

int main(void)
{
	config_test_begin();
	test_nothing();
	test_live_and_restart();
	test_restart_only();
	test_socket_mode();
	test_metrics_listen();
	return config_test_end("test-config-reload");
}
