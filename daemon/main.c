/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "fault.h"
#include "kvt-config.h"
#include "log.h"
#include "manager.h"
#include "nvme.h"
#include "remote.h"

static void help(void)
{
	printf("Usage: kvtierd [OPTIONS]\n"
	       "\n"
	       "The kvtier daemon: pinned host memory (and NVMe) behind the GPU for\n"
	       "the KV caches of inference engines on this node.  Engines connect\n"
	       "with libkvtier-client over a Unix socket; kvtierctl shows what is\n"
	       "stored.  Runs in the foreground and logs to stderr.\n"
	       "\n"
	       "Options:\n"
	       "  -c, --config FILE    read FILE (default %s if it exists,\n"
	       "                       else built-in defaults)\n"
	       "  -s, --socket PATH    listen on PATH (overrides [daemon] socket;\n"
	       "                       absolute, shorter than 108 bytes)\n"
	       "      --check-config   validate the configuration, print the\n"
	       "                       effective values and exit\n"
	       "  -v, --verbose        log at debug level\n"
	       "  -h, --help           show this help\n"
	       "  -V, --version        show the version\n"
	       "\n"
	       "Examples:\n"
	       "  kvtierd --socket /tmp/kvt.sock       a working daemon on defaults\n"
	       "  kvtierd --config /etc/kvtierd/kvtierd.conf --check-config\n"
	       "\n"
	       "Under systemd: systemctl start kvtierd (socket activation is used\n"
	       "when kvtierd.socket passes a listening socket).  See kvtierd(8).\n",
	       KVT_DEFAULT_CONFIG);
}

struct options {
	const char *config_path, *socket_path;
	bool check, verbose;
};

/* 0 to go on, else the exit status (after --help, --version or a mistake). */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"socket", required_argument, NULL, 's'},
		{"check-config", no_argument, NULL, 'C'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{},
	};
	int c;

	while ((c = getopt_long(argc, argv, "c:s:vhV", opts, NULL)) >= 0) {
		switch (c) {
		case 'c': o->config_path = optarg; break;
		case 's': o->socket_path = optarg; break;
		case 'C': o->check = true; break;
		case 'v': o->verbose = true; break;
		case 'h': help(); return -1;
		case 'V': printf("kvtierd %s\n", KVT_VERSION); return -1;
		default:
			fprintf(stderr, "Try 'kvtierd --help'.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvtierd: unexpected argument '%s'; try 'kvtierd --help'.\n", argv[optind]);
		return 2;
	}
	const char *sp = o->socket_path;
	/* As [daemon] socket, which it overrides also across reloads: absolute
	 * (the daemon's directory is not its clients'), and a name that fits
	 * sun_path whole rather than one cut short. */
	if (sp && sp[0] != '/') {
		fprintf(stderr, "kvtierd: --socket '%s': the path must be absolute\n", sp);
		return 2;
	}
	if (sp && strlen(sp) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
		fprintf(stderr, "kvtierd: --socket: the path is %zu bytes long; a Unix socket path must be shorter than %zu bytes\n",
			strlen(sp), sizeof(((struct sockaddr_un *)NULL)->sun_path));
		return 2;
	}
	return 0;
}

/* Start the manager and its tiers on cfg and run until told to stop. */
static int serve(struct config *cfg, const struct options *o, char *const *argv)
{
	struct manager *m = NULL;
	int r = fault_init();

	if (r < 0) {
		log_error("Refusing to start with fault injection that does not parse (see above)");
		goto out;
	}
	r = manager_new(cfg, &m);
	if (r < 0) {
		log_error_errno(r, "Failed to start: %m");
		goto out;
	}
	m->config_path = o->config_path;
	m->socket_override = o->socket_path;
	m->argv = argv;
	ssize_t n = readlink("/proc/self/exe", m->exe, sizeof(m->exe) - 1);
	m->exe[n > 0 ? n : 0] = 0;
	pool_probe(&m->pool);
	r = manager_keep(m);
	if (r < 0)
		goto out;
	if (cfg->n_spills) {
		r = nvme_start(&m->store, m->config, m->event, &m->nvme);
		if (r < 0) {
			log_error("The NVMe tier could not start (see above); fix the [spill.*] configuration or remove it");
			goto out;
		}
	}
	if (cfg->n_remotes) {
#if KVT_HAVE_RADOS
		r = remote_start(&m->store, m->config, m->event, &m->remote);
		if (r < 0) {
			log_error_errno(r, "The remote tier could not start: %m");
			goto out;
		}
#else
		log_warning("kvtierd was built without librados: [remote.%s] ignored, local tiers only",
			    cfg->remotes[0].name);
#endif
	}
	manager_block_signals();
	r = manager_listen(m);
	if (r < 0)
		goto out;
	log_info("kvtierd %s ready (pid %d)", KVT_VERSION, (int)getpid());
	r = manager_run(m);
	if (r < 0)
		log_error_errno(r, "Event loop failed: %m");
out:
	manager_free(m);
	fault_report();
	return r;
}

int main(int argc, char **argv)
{
	struct options o = {0};
	struct config cfg;
	int r = parse_options(argc, argv, &o);

	if (r != 0)
		return r < 0 ? 0 : r;
	if (config_defaults(&cfg) < 0)
		return 1;
	if (!o.config_path && access(KVT_DEFAULT_CONFIG, F_OK) == 0)
		o.config_path = KVT_DEFAULT_CONFIG;
	r = config_load(&cfg, o.config_path);
	if (r < 0) {
		config_free(&cfg);
		return 1;
	}
	if (o.socket_path) {
		free(cfg.socket_path);
		cfg.socket_path = strdup(o.socket_path);
	}
	log_set_max_level(o.verbose ? LOG_DEBUG : cfg.log_level);
	if (o.check) {
		printf("# kvtierd %s: configuration %s is valid\n", KVT_VERSION,
		       o.config_path ? o.config_path : "(built-in defaults)");
		config_dump(&cfg, stdout);
	} else {
		r = serve(&cfg, &o, argv);
	}
	config_free(&cfg);
	return r < 0 ? 1 : 0;
}
