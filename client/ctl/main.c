/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl: what a running kvtierd holds, as tables for people, JSON for
 * programs and Prometheus text for monitoring; the one admin action there
 * is (dropping a namespace's blocks); and the capacity plan for a model.
 * Everything about the daemon comes from kvt_stats() records; the
 * commands only select, copy and format them.
 *
 * This file is the command line: the table of commands, which drives both
 * the dispatch and --help, and the options, which may come before or
 * after the command ("kvtierctl status --json").
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "kvt-config.h"
#include "macro.h"

static const struct ctl_command *const commands[] = {
	&ctl_cmd_status, &ctl_cmd_clients, &ctl_cmd_namespaces, &ctl_cmd_top,
	&ctl_cmd_metrics, &ctl_cmd_evict, &ctl_cmd_drop, &ctl_cmd_plan,
};

enum { OPT_JSON = 0x100, OPT_COMMAND = 0x200 };

static const struct option global_options[] = {
	{"socket", required_argument, NULL, 's'},
	{"json", no_argument, NULL, OPT_JSON},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
};
#define GLOBAL_SHORT "s:vhV"

/* getopt's view of the options: the global ones, then every command's,
 * each command option known by its getopt value.  Built from the table
 * of commands, so that a command's options are declared with it only. */
#define MAX_OPTIONS 64
struct cmdline {
	struct option longopts[MAX_OPTIONS + 1]; /* ends at a zeroed entry */
	char shortopts[2 * MAX_OPTIONS + 1];
	size_t n; /* longopts in use */
	struct {
		size_t command; /* in commands[] */
		const struct ctl_option *opt;
	} of[MAX_OPTIONS]; /* of longopts[i], past the global ones */
	/* Per command (as in commands[]): the first of its options given. */
	const char *given[ARRAY_SIZE(commands)];
};

static void cmdline_add(struct cmdline *c, size_t command, const struct ctl_option *o)
{
	size_t i = c->n++, len = strlen(c->shortopts);
	int val = o->short_name ? o->short_name : OPT_COMMAND + (int)i;

	c->of[i].command = command;
	c->of[i].opt = o;
	c->longopts[i] = (struct option){o->name, o->has_arg ? required_argument : no_argument,
					 NULL, val};
	if (o->short_name) {
		c->shortopts[len++] = o->short_name;
		if (o->has_arg)
			c->shortopts[len++] = ':';
		c->shortopts[len] = 0;
	}
}

static void cmdline_init(struct cmdline *c)
{
	memset(c, 0, sizeof(*c));
	memcpy(c->longopts, global_options, sizeof(global_options));
	c->n = ARRAY_SIZE(global_options);
	strcpy(c->shortopts, GLOBAL_SHORT);
	for (size_t k = 0; k < ARRAY_SIZE(commands); k++) {
		for (const struct ctl_option *o = commands[k]->options; o && o->name; o++) {
			/* The table is ours and small: outgrowing this is a bug. */
			if (c->n >= MAX_OPTIONS)
				abort();
			cmdline_add(c, k, o);
		}
	}
}

/* A command's option, as getopt returned it.  \return 0 or -EINVAL */
static int cmdline_option(struct cmdline *c, int val, const char *arg)
{
	for (size_t i = ARRAY_SIZE(global_options); i < c->n; i++) {
		size_t k = c->of[i].command;

		if (c->longopts[i].val != val)
			continue;
		if (!c->given[k])
			c->given[k] = c->of[i].opt->name;
		return commands[k]->parse(c->of[i].opt->id, arg);
	}
	/* getopt has said what was wrong. */
	fputs("Try 'kvtierctl --help'.\n", stderr);
	return -EINVAL;
}

static void help(void)
{
	printf("Usage: kvtierctl [OPTIONS] COMMAND [ARGS]\n"
	       "\n"
	       "Show what a running kvtierd holds (the host pool, NUMA nodes, tenants,\n"
	       "namespaces and clients), export it to Prometheus, drop a namespace's\n"
	       "blocks, and size the KV cache of a model.  Sizes in tables are\n"
	       "human-readable (KiB = 1024 B); --json prints raw numbers for programs.\n"
	       "\n"
	       "Commands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		char head[40];
		snprintf(head, sizeof(head), "%s %s", commands[i]->name, commands[i]->args);
		printf("  %-27s %s\n", head, commands[i]->summary);
	}
	printf("\n"
	       "Options:\n"
	       "  -s, --socket PATH     talk to the kvtierd listening on PATH\n"
	       "                        (default %s)\n"
	       "      --json            print JSON instead of tables (",
	       kvt_default_socket());
	/* The commands with a JSON form, as the table says. */
	for (size_t i = 0, n = 0; i < ARRAY_SIZE(commands); i++) {
		if (!commands[i]->json)
			continue;
		printf("%s%s", n == 0 ? "" : n == 2 ? ",\n                        " : ", ",
		       commands[i]->name);
		n++;
	}
	printf(")\n"
	       "  -v, --verbose         show the client library's warnings and errors\n"
	       "                        (twice: also its informational messages)\n"
	       "  -h, --help            show this help\n"
	       "  -V, --version         show the version\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		if (!commands[i]->help)
			continue;
		putchar('\n');
		commands[i]->help(stdout);
	}
	printf("\n"
	       "Examples:\n"
	       "  kvtierctl status\n"
	       "  kvtierctl --socket /tmp/kvt.sock clients\n"
	       "  kvtierctl --json namespaces | jq '.[] | {model, hit_rate}'\n"
	       "  kvtierctl top --interval 2\n"
	       "  sudo kvtierctl evict uid:1000 3\n"
	       "  kvtierctl plan --model llama3-70b --tokens 128K --tp 8 --host-capacity 512G\n"
	       "  kvtierctl plan --layers 80 --kv-heads 8 --head-dim 128 --tokens 131072 --json\n"
	       "  kvtierctl plan --model deepseek-v3 --tokens 32K --batch 16 --nvme-capacity 3.5T\n"
	       "\n"
	       "Environment:\n"
	       "  KVTIER_SOCKET         the socket when --socket is not given\n"
	       "\n"
	       "Exit status:\n"
	       "  0  success\n"
	       "  1  kvtierd could not be reached, refused the request (evict and drop\n"
	       "     need root or kvtierd's uid) or has no such tenant or namespace\n"
	       "  2  bad usage\n");
}

/* Every option, wherever it stands.  \return 0 to go on, 1 when --help or
 * --version answered, or -EINVAL after saying what was wrong */
static int parse_options(int argc, char **argv, struct ctx *x, struct cmdline *c)
{
	int opt;

	cmdline_init(c);
	while ((opt = getopt_long(argc, argv, c->shortopts, c->longopts, NULL)) >= 0) {
		switch (opt) {
		case 's':
			x->socket = optarg;
			break;
		case OPT_JSON:
			x->json = true;
			break;
		case 'v':
			x->verbose++;
			break;
		case 'h':
			help();
			return 1;
		case 'V':
			printf("kvtierctl %s (libkvtier-client %s, protocol %u)\n", KVT_VERSION,
			       kvt_version(), (unsigned)kvt_protocol_version());
			return 1;
		default:
			TRY(cmdline_option(c, opt, optarg));
			break;
		}
	}
	return 0;
}

static void say_commands(char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = 0;
	for (size_t i = 0; i < ARRAY_SIZE(commands) && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", commands[i]->name);
}

/* The command, and whether what was given fits it.
 * \return 0 or -EINVAL after saying what was wrong */
static int pick_command(int argc, char **argv, struct ctx *x, const struct cmdline *c,
			const struct ctl_command **ret)
{
	const struct ctl_command *cmd = NULL;
	char names[160];

	say_commands(names, sizeof(names));
	if (optind >= argc)
		return ctl_usage_error("kvtierctl", "no command given (one of: %s)", names);
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(argv[optind], commands[i]->name) == 0)
			cmd = commands[i];
	if (!cmd)
		return ctl_usage_error("kvtierctl", "unknown command '%s'", argv[optind]);
	x->args = argv + optind + 1;
	x->n_args = argc - optind - 1;
	if (x->n_args < cmd->n_args)
		return ctl_usage_error("kvtierctl", "%s needs %s", cmd->name, cmd->args);
	if (x->n_args > cmd->n_args)
		return ctl_usage_error("kvtierctl", "unexpected argument '%s'",
				       x->args[cmd->n_args]);
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (c->given[i] && commands[i] != cmd)
			return ctl_usage_error("kvtierctl", "--%s is an option of %s, not of %s",
					       c->given[i], commands[i]->name, cmd->name);
	if (x->json && !cmd->json && cmd->no_json)
		return ctl_usage_error("kvtierctl", "%s", cmd->no_json);
	if (x->json && !cmd->json)
		return ctl_usage_error("kvtierctl",
				       "%s has no JSON form; use 'kvtierctl --json status' for a snapshot",
				       cmd->name);
	if (!x->socket)
		x->socket = kvt_default_socket();
	if (!x->socket[0])
		return ctl_usage_error("kvtierctl", "--socket needs a non-empty PATH");
	*ret = cmd;
	return 0;
}

int main(int argc, char **argv)
{
	struct ctx x = {0};
	struct cmdline c;
	const struct ctl_command *cmd = NULL;
	int r, ret = EXIT_DAEMON;

	r = parse_options(argc, argv, &x, &c);
	if (r != 0)
		return r > 0 ? 0 : EXIT_USAGE;
	if (pick_command(argc, argv, &x, &c, &cmd) < 0)
		return EXIT_USAGE;

	ctl_log_setup(&x);
	if (cmd->needs != CTL_NEEDS_NONE) {
		if (ctl_connect(&x) < 0)
			return EXIT_DAEMON;
		if (cmd->needs == CTL_NEEDS_STATS && ctx_fetch(&x, cmd->what, false) < 0)
			goto out;
	}
	r = cmd->run(&x);
	if (r < 0) {
		fprintf(stderr, "kvtierctl: %s\n", strerror(-r));
		goto out;
	}
	ret = r;
	/* A full disk or a closed pipe must not look like success. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "kvtierctl: cannot write the output: %m\n");
		ret = EXIT_DAEMON;
	}
out:
	snapshot_clear(&x.snap);
	kvt_client_free(x.client);
	return ret;
}
