/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: the built-in defaults, which are a valid configuration on
 * their own, and the paths they give root and an unprivileged user.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include "../check.h"
#include "config-util.h"

static void check_defaults(int line, const struct config *c)
{
	if (c->quarantine_ms != 500 || c->log_level != LOG_INFO ||
	    c->capacity != (UINT64_C(256) << 20) ||
	    c->extent_size != (UINT64_C(64) << 20) ||
	    c->hugepages != HUGEPAGES_AUTO || c->lock != LOCK_AUTO ||
	    c->default_quota != 0 || c->refuse_unknown ||
	    c->max_connections != 1024 || c->max_connections_per_uid != 256 ||
	    c->max_namespaces != 64 || c->max_keys != 4096 ||
	    c->max_handles != 65536 ||
	    c->max_output_bytes != (UINT64_C(8) << 20) ||
	    c->numa != NUMA_AUTO || c->sysfs_root != NULL ||
	    c->n_tenants != 0 || c->tenants != NULL ||
	    c->nvme_engine != NVME_ENGINE_AUTO || c->nvme_queue_depth != 64 ||
	    c->writeback_high != 80 || c->writeback_low != 60 ||
	    c->n_spills != 0 || c->spills != NULL ||
	    c->eviction != EVICT_LRFU_ADMIT) {
		fprintf(stderr, "%s:%d: not the built-in defaults\n", __FILE__,
			line);
		failures++;
	}
}

static void test_defaults(void)
{
	struct config c;

	CHECK(config_defaults(&c) == 0);
	check_defaults(__LINE__, &c);
	if (geteuid() == 0) {
		CHECK(c.runtime_dir && strcmp(c.runtime_dir, "/run/kvtierd") == 0);
		CHECK(c.socket_path &&
		      strcmp(c.socket_path, "/run/kvtierd/kvtierd.sock") == 0);
	}
	/* The defaults are a valid configuration on their own. */
	char *err = NULL;
	CHECK(load_captured(&c, NULL, &err) == 0);
	CHECK(err[0] == 0, "%s", err);
	free(err);
	config_free(&c);
	CHECK(c.socket_path == NULL && c.runtime_dir == NULL);
	config_free(&c);

	/* Paths for an unprivileged user, in a child that drops to one. */
	if (geteuid() != 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		int bad = 0;
		char want[64];
		if (setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(KVT_TEST_SKIP);
		setenv("XDG_RUNTIME_DIR", "/run/user/65534", 1);
		bad |= config_defaults(&c) != 0;
		bad |= strcmp(c.runtime_dir, "/run/user/65534/kvtierd") != 0;
		bad |= strcmp(c.socket_path, "/run/user/65534/kvtierd/kvtierd.sock") != 0;
		config_free(&c);
		/* Not absolute: not trusted. */
		setenv("XDG_RUNTIME_DIR", "run/user/65534", 1);
		snprintf(want, sizeof(want), "/tmp/kvtierd-%u", 65534u);
		bad |= config_defaults(&c) != 0 || strcmp(c.runtime_dir, want) != 0;
		config_free(&c);
		unsetenv("XDG_RUNTIME_DIR");
		bad |= config_defaults(&c) != 0 || strcmp(c.runtime_dir, want) != 0;
		strcat(want, "/kvtierd.sock");
		bad |= strcmp(c.socket_path, want) != 0;
		config_free(&c);
		_exit(bad ? 1 : 0);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) &&
	      (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == KVT_TEST_SKIP),
	      "unprivileged defaults wrong (status 0x%x)", status);
}

int main(void)
{
	config_test_begin();
	test_defaults();
	return config_test_end("test-config-defaults");
}
