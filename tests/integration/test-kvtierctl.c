/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl against a real kvtierd holding what kvt-engine stored: the
 * tables, the JSON, the Prometheus text, top, plan, evict (as root and as
 * nobody) and a missing socket, each judged by the binary's exit code and
 * output.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

struct run {
	int code;
	char out[256 * 1024];
	char err[16 * 1024];
};

static struct run R;
static struct daemon D;

/* Drain both pipes together: a child blocked on a full stderr pipe while
 * the parent waits for the end of its stdout would never finish. */
static void drain(int out_fd, int err_fd, struct run *r)
{
	struct pollfd p[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = err_fd, .events = POLLIN}};
	size_t len[2] = {0, 0};

	while (p[0].fd >= 0 || p[1].fd >= 0) {
		if (poll(p, 2, -1) < 0) {
			CHECK(errno == EINTR, "poll: %s", strerror(errno));
			continue;
		}
		for (int i = 0; i < 2; i++) {
			char *buf = i ? r->err : r->out;
			size_t cap = (i ? sizeof(r->err) : sizeof(r->out)) - 1;
			char scratch[4096];
			ssize_t n;

			if (p[i].fd < 0 || !p[i].revents)
				continue;
			/* Past the buffer, keep reading and drop the rest. */
			if (len[i] < cap)
				n = read(p[i].fd, buf + len[i], cap - len[i]);
			else
				n = read(p[i].fd, scratch, sizeof(scratch));
			if (n > 0 && len[i] < cap) {
				len[i] += (size_t)n;
			} else if (n == 0 || (n < 0 && errno != EINTR)) {
				close(p[i].fd);
				p[i].fd = -1;
			}
		}
	}
	r->out[len[0]] = 0;
	r->err[len[1]] = 0;
}

/* Run prog (found on PATH unless it has a slash) with argv, as uid unless
 * it is -1, stdin from in (NULL: empty).  \return the exit code; 127 when
 * prog could not be started. */
static int run(const char *prog, const char *const *argv, uid_t uid, const char *in)
{
	int o[2], e[2], i[2];
	pid_t pid;

	CHECK(pipe2(o, O_CLOEXEC) == 0 && pipe2(e, O_CLOEXEC) == 0 && pipe2(i, O_CLOEXEC) == 0,
	      "pipe: %s", strerror(errno));
	pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(i[0], 0);
		dup2(o[1], 1);
		dup2(e[1], 2);
		if (uid != (uid_t)-1 &&
		    (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0))
			_exit(126);
		execvp(prog, (char *const *)argv);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	close(i[0]);
	/* Small inputs only: they fit the pipe before the child reads. */
	if (in && write(i[1], in, strlen(in)) != (ssize_t)strlen(in))
		CHECK(0, "write to the child's stdin: %s", strerror(errno));
	close(i[1]);
	drain(o[0], e[0], &R);
	R.code = wait_exit(pid);

	fprintf(stderr, "$");
	for (const char *const *a = argv; *a; a++)
		fprintf(stderr, " %s", *a);
	fprintf(stderr, "  -> exit %d\n%s", R.code, R.err);
	return R.code;
}

static int run_ctl(uid_t uid, const char *const *argv)
{
	const char *p = getenv("KVTIERCTL");
	return run(p && *p ? p : "kvtierctl", argv, uid, NULL);
}

/* kvtierctl --socket <the test daemon> ARGS... */
#define CTL(...) run_ctl((uid_t)-1, (const char *const[]){"kvtierctl", "--socket", D.socket, __VA_ARGS__, NULL})
#define CTL_AS(uid, ...) run_ctl(uid, (const char *const[]){"kvtierctl", "--socket", D.socket, __VA_ARGS__, NULL})

static bool has(const char *text, const char *what)
{
	return strstr(text, what) != NULL;
}

/* The number after the n-th (from 0) "key": in JSON text, or -1. */
static int64_t json_num(const char *text, const char *key, int nth)
{
	char pat[80];
	const char *p = text;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	for (int i = 0; p && i <= nth; i++) {
		p = strstr(p, pat);
		if (p && i < nth)
			p += strlen(pat);
	}
	if (!p || !isdigit((unsigned char)p[strlen(pat)]))
		return -1;
	return strtoll(p + strlen(pat), NULL, 10);
}

static int json_count(const char *text, const char *key)
{
	char pat[80];
	int n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	for (const char *p = strstr(text, pat); p; p = strstr(p + 1, pat))
		n++;
	return n;
}

/* Whether python3 accepts R.out as JSON; skipped (true) without python3. */
static bool json_valid(void)
{
	static const char *const argv[] = {
		"python3", "-c", "import json,sys; json.load(sys.stdin)", NULL};
	static int have_python = -1;
	static struct run saved;
	int code;

	if (have_python == 0)
		return true;
	saved = R;
	code = run("python3", argv, (uid_t)-1, saved.out);
	R = saved;
	if (code == 127) {
		fprintf(stderr, "no python3: JSON syntax not checked\n");
		have_python = 0;
		return true;
	}
	have_python = 1;
	return code == 0;
}

/* Prometheus text format 0.0.4, as strictly as node_exporter reads it:
 * every line a comment (# HELP / # TYPE, once per family, TYPE before the
 * samples) or "name{label="value",...} number". */
static bool valid_name_char(char c, bool first)
{
	return isalpha((unsigned char)c) || c == '_' || c == ':' || (!first && isdigit((unsigned char)c));
}

static const char *skip_name(const char *p)
{
	if (!valid_name_char(*p, true))
		return NULL;
	while (valid_name_char(*p, false))
		p++;
	return p;
}

static bool metrics_line_ok(const char *line)
{
	const char *p = skip_name(line);
	char *end;

	if (!p)
		return false;
	if (*p == '{') {
		p++;
		while (*p != '}') {
			p = skip_name(p);
			if (!p || *p++ != '=' || *p++ != '"')
				return false;
			while (*p != '"') {
				if (!*p || *p == '\n')
					return false;
				if (*p == '\\') {
					p++;
					if (*p != '\\' && *p != '"' && *p != 'n')
						return false;
				}
				p++;
			}
			p++;
			if (*p == ',')
				p++;
			else if (*p != '}')
				return false;
		}
		p++;
	}
	if (*p++ != ' ')
		return false;
	errno = 0;
	strtod(p, &end);
	return end != p && *end == 0 && errno == 0;
}

static void check_metrics(const char *text)
{
	char *copy = strdup(text), *save = NULL, *line;
	char typed[256][128];
	unsigned n_typed = 0, samples = 0;

	CHECK(copy, "strdup");
	CHECK(text[0] && text[strlen(text) - 1] == '\n', "metrics end with a newline");
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#') {
			char name[128], type[32];
			if (strncmp(line, "# HELP ", 7) == 0) {
				CHECK(skip_name(line + 7), "HELP names a metric: %s", line);
				continue;
			}
			CHECK(sscanf(line, "# TYPE %127s %31s", name, type) == 2, "comment: %s", line);
			CHECK(!strcmp(type, "gauge") || !strcmp(type, "counter") ||
				      !strcmp(type, "untyped"),
			      "type: %s", line);
			for (unsigned i = 0; i < n_typed; i++)
				CHECK(strcmp(typed[i], name) != 0, "family %s typed twice", name);
			CHECK(n_typed < 256, "too many families");
			snprintf(typed[n_typed++], sizeof(typed[0]), "%s", name);
			if (strlen(name) > 6 && !strcmp(name + strlen(name) - 6, "_total"))
				CHECK(!strcmp(type, "counter"), "%s ends in _total but is a %s", name, type);
			continue;
		}
		CHECK(metrics_line_ok(line), "malformed metrics line: '%s'", line);
		/* Its family was typed, and was the last one typed: samples
		 * of one family stay together. */
		const char *end = skip_name(line);
		CHECK(n_typed && (size_t)(end - line) == strlen(typed[n_typed - 1]) &&
			      !strncmp(line, typed[n_typed - 1], (size_t)(end - line)),
		      "sample outside its family: %s", line);
		samples++;
	}
	CHECK(samples > 20, "only %u samples", samples);
	free(copy);
}

/* The count kvt-engine printed as "N stored". */
static int engine_stored(const char *out)
{
	const char *p = strstr(out, " stored;");
	CHECK(p, "no 'stored' in kvt-engine's output");
	while (p > out && isdigit((unsigned char)p[-1]))
		p--;
	return atoi(p);
}

int main(void)
{
	char out[4096];
	char missing[200];
	int stored;

	daemon_start(&D, NULL);
	/* Nothing stored yet: the header still says what would be there. */
	CHECK(CTL("namespaces") == 0 && has(R.out, "TENANT  ID  MODEL") && has(R.out, "\n(none)\n"),
	      "an empty table");
	CHECK(engine_run(&D, out, sizeof(out), "--model", "tiny", "--prefix", "1024", "--suffix",
			 "256", "--prefix-seed", "7", "--suffix-seed", "7", "--name", "engine-a",
			 NULL) == 0,
	      "kvt-engine stores");
	stored = engine_stored(out);
	CHECK(stored == 80, "1280 tokens are 80 blocks of 16, stored %d", stored);

	/* status: the table names the tenant, the model and the NUMA nodes. */
	CHECK(CTL("status") == 0, "status");
	CHECK(has(R.out, "uid:0"), "status shows tenant uid:0");
	CHECK(has(R.out, "tiny"), "status shows model tiny");
	CHECK(has(R.out, "Host pool:"), "status shows the pool");
	CHECK(has(R.out, "NUMA:") && has(R.out, "fallback"), "status shows the NUMA counter");
	CHECK(has(R.out, "NUMA nodes:") && has(R.out, "ALLOCATED"), "status shows the node table");

	CHECK(CTL("--json", "status") == 0, "status --json");
	CHECK(json_valid(), "status --json is JSON");
	/* daemon, tenant and namespace records each count the blocks. */
	CHECK(json_count(R.out, "blocks") == 3, "three block counts");
	for (int i = 0; i < 3; i++)
		CHECK(json_num(R.out, "blocks", i) == stored, "blocks %d is %" PRId64, i,
		      json_num(R.out, "blocks", i));
	CHECK(has(R.out, "\"nodes\": [") && json_num(R.out, "numa_fallbacks", 0) >= 0,
	      "status --json has nodes and the fallback counter");
	/* Options after the command work too. */
	CHECK(CTL("status", "--json") == 0 && json_valid(), "status --json, other order");

	CHECK(CTL("--json", "namespaces") == 0, "namespaces --json");
	CHECK(json_valid(), "namespaces --json is JSON");
	CHECK(R.out[0] == '[', "an array");
	CHECK(json_num(R.out, "blocks", 0) == stored, "namespace blocks");
	CHECK(has(R.out, "\"model\": \"tiny\""), "namespace model");
	CHECK(CTL("namespaces") == 0 && has(R.out, "tiny") && has(R.out, "LOOKUPS"),
	      "namespaces table");

	CHECK(CTL("clients") == 0, "clients");
	CHECK(has(R.out, "PID") && has(R.out, "kvtierctl"), "clients lists this connection");
	CHECK(CTL("--json", "clients") == 0 && json_valid(), "clients --json");

	/* A model name that needs escaping: a quote, a backslash, a newline
	 * and a byte that is not UTF-8. */
	{
		static const char weird[] = "we\"ird\\mo\ndel\xff";
		kvt_client *c = client_connect(&D, "escaper");
		kvt_layer_group g = {.n_layers = 2, .attn = KVT_ATTN_MHA, .planes = 2,
				     .kv_heads = 1, .head_bytes = 64, .dtype = 1};
		kvt_ns_desc desc = {.model = weird, .layer_end = 2, .tp_size = 1, .cp_size = 1,
				    .block_tokens = 16, .n_groups = 1, .groups = &g};
		kvt_ns *ns = NULL;
		int r = kvt_ns_open(c, &desc, &ns);
		CHECK(r == 0, "open a namespace with an odd model name: %s", strerror(-r));
		kvt_ns_close(ns);
		kvt_client_free(c);
	}
	CHECK(CTL("--json", "namespaces") == 0 && json_valid(), "odd names in JSON");
	CHECK(CTL("namespaces") == 0 && has(R.out, "we\"ird\\mo?del\xef\xbf\xbd"),
	      "control characters do not reach the terminal, nor bytes that are not UTF-8");

	/* Names beyond ASCII, printed in the C locale as cron or a unit file
	 * would run kvtierctl: the table still comes out, whole. */
	{
		static const char wide[] = "m\xc3\xb6" "del-\xe6\xa8\xa1\xe5\x9e\x8b";
		kvt_client *c = client_connect(&D, "");
		kvt_layer_group g = {.n_layers = 2, .attn = KVT_ATTN_MHA, .planes = 2,
				     .kv_heads = 1, .head_bytes = 64, .dtype = 1};
		kvt_ns_desc desc = {.model = wide, .layer_end = 2, .tp_size = 1, .cp_size = 1,
				    .block_tokens = 16, .n_groups = 1, .groups = &g};
		kvt_ns *ns = NULL;
		int r = kvt_ns_open(c, &desc, &ns);
		CHECK(r == 0, "open a namespace with a non-ASCII model name: %s", strerror(-r));
		kvt_ns_close(ns);
		setenv("LC_ALL", "C", 1);
		CHECK(CTL("namespaces") == 0 && has(R.out, wide), "UTF-8 names in the C locale:\n%s", R.out);
		CHECK(CTL("status") == 0 && has(R.out, wide), "status in the C locale");
		/* A client without a name: "" in JSON, as a string, "-" in the table. */
		CHECK(CTL("--json", "clients") == 0 && json_valid() && has(R.out, "\"name\": \"\""),
		      "an empty name stays an empty string");
		CHECK(CTL("clients") == 0 && has(R.out, "  -  "), "an empty name in the table");
		unsetenv("LC_ALL");
		kvt_client_free(c);
	}

	/* metrics: the Prometheus text format, line by line. */
	CHECK(CTL("metrics") == 0, "metrics");
	CHECK(has(R.out, "model=\"we\\\"ird\\\\mo\\ndel\xef\xbf\xbd\"}"),
	      "label values escaped");
	CHECK(has(R.out, "\nkvtier_pool_capacity_bytes 16777216\n"), "pool capacity");
	CHECK(has(R.out, "# TYPE kvtier_pool_used_bytes gauge\n"), "pool used typed");
	CHECK(has(R.out, "kvtier_node_used_bytes{node=\"0\"} "), "node used");
	CHECK(has(R.out, "kvtier_tenant_used_bytes{tenant=\"uid:0\"} "), "tenant used");
	CHECK(has(R.out, "kvtier_namespace_blocks{tenant=\"uid:0\",namespace=\"1\",model=\"tiny\"} 80\n"),
	      "namespace blocks");
	CHECK(has(R.out, "# TYPE kvtier_namespace_hits_total counter\n"), "hits counter");
	check_metrics(R.out);
	CHECK(CTL("--json", "metrics") == 2, "metrics has no JSON form");

	/* top: plain frames into a pipe, no escape codes. */
	CHECK(CTL("top", "--iterations", "2", "--interval", "0.2") == 0, "top");
	CHECK(!strchr(R.out, '\033'), "no escape codes into a pipe");
	{
		const char *first = strstr(R.out, "kvtierctl top");
		CHECK(first && strstr(first + 1, "kvtierctl top"), "two frames");
		CHECK(has(R.out, "LOOKUPS/S") && has(R.out, "LOAD MiB/S"), "rate columns");
		CHECK(has(R.out, "rates over the last"), "the second frame has rates");
	}
	CHECK(CTL("top", "--json") == 2, "top has no JSON form");
	CHECK(CTL("status", "--interval", "1") == 2 &&
		      has(R.err, "--interval is an option of top, not of status"),
	      "--interval is top's");
	CHECK(CTL("clients", "-n", "1") == 2 && has(R.err, "--iterations is an option of top"),
	      "-n is top's");

	/* plan: the figures of DESIGN.md, with and without a daemon. */
	CHECK(CTL("plan", "--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--dtype",
		  "fp16", "--tokens", "131072", "--json") == 0,
	      "plan 70B");
	CHECK(json_valid(), "plan --json is JSON");
	CHECK(json_num(R.out, "bytes_per_token", 0) == 327680, "70B: 320 KiB per token");
	CHECK(json_num(R.out, "bytes", 0) == INT64_C(42949672960), "70B: 40 GiB per 128K");
	/* No capacity given: the reachable daemon's pool is the host tier. */
	CHECK(has(R.out, "\"tier\": \"host\"") && json_num(R.out, "capacity", 0) == 16777216,
	      "host tier from kvtierd");
	CHECK(CTL("plan", "--model", "deepseek-v3", "--json") == 0, "plan deepseek-v3");
	CHECK(json_num(R.out, "bytes_per_token", 0) == 70272, "DeepSeek-V3: 70,272 B per token");
	CHECK(CTL("plan", "--model", "llama3-70b", "--tokens", "128K", "--tp", "8",
		  "--host-capacity", "64G", "--nvme-capacity", "1T") == 0,
	      "plan table");
	CHECK(has(R.out, "327,680") && has(R.out, "host") && has(R.out, "nvme"), "plan table rows");
	CHECK(CTL("plan", "--model", "llama3-70b", "--tp", "3") == 2, "8 heads over 3 ranks");
	CHECK(CTL("--tokens", "5", "status") == 2 &&
		      has(R.err, "--tokens is an option of plan, not of status"),
	      "plan's options are plan's");
	CHECK(CTL("plan", "--model", "llama3-8b", "--tokens", "0") == 2 &&
		      has(R.err, "--tokens needs a whole number of at least 1, not '0'"),
	      "a count option is checked");
	CHECK(CTL("plan", "--model", "nope") == 2 && has(R.err, "llama3-70b"),
	      "unknown preset lists the presets");
	CHECK(CTL("plan", "--layers", "4294967296", "--kv-heads", "4294967296", "--head-dim",
		  "4294967296") == 2,
	      "overflow is refused");
	snprintf(missing, sizeof(missing), "%s/missing.sock", D.dir);
	CHECK(run_ctl((uid_t)-1, (const char *const[]){"kvtierctl", "--socket", missing, "plan",
						       "--model", "llama3-8b", "--json", NULL}) == 0,
	      "plan without a daemon");
	CHECK(has(R.out, "\"tiers\": []") && json_num(R.out, "bytes_per_token", 0) == 131072,
	      "no tiers without a daemon");

	/* evict: nobody may not; root may, and the blocks are gone. */
	CHECK(CTL("--json", "status") == 0, "status");
	const char *tenants = strstr(R.out, "\"tenants\": [");
	CHECK(tenants && json_num(tenants, "id", 0) >= 0, "tenant id");
	char tenant_id[24];
	snprintf(tenant_id, sizeof(tenant_id), "%" PRId64, json_num(tenants, "id", 0));
	if (geteuid() == 0) {
		CHECK(CTL_AS(NOBODY, "evict", "uid:0", "1") != 0, "nobody cannot evict");
		CHECK(has(R.err, "root"), "the refusal says root is needed");
		/* By id the request reaches the daemon, which refuses it. */
		CHECK(CTL_AS(NOBODY, "evict", tenant_id, "1") == 1, "nobody cannot evict by id");
		CHECK(has(R.err, "Operation not permitted") && has(R.err, "root"),
		      "the daemon's refusal says root is needed");
	} else {
		fprintf(stderr, "not root: the refusal as another uid is not checked\n");
	}
	CHECK(CTL("evict", "uid:4242", "1") == 1 && has(R.err, "uid:0"),
	      "unknown tenant, and the known ones listed");
	CHECK(CTL("evict", "uid:0", "99") == 1 && has(R.err, "no namespace 99"),
	      "unknown namespace");
	CHECK(CTL("evict", "uid:0", "one") == 2, "a namespace is a number");
	CHECK(CTL("evict", "uid:0") == 2, "evict needs two arguments");
	CHECK(CTL("--json", "evict", "uid:0", "1") == 0, "evict");
	CHECK(json_valid(), "evict --json is JSON");
	CHECK(json_num(R.out, "blocks", 0) == stored, "every block went");
	CHECK(engine_run(&D, out, sizeof(out), "--model", "tiny", "--prefix", "1024", "--suffix",
			 "256", "--prefix-seed", "7", "--suffix-seed", "7", "--expect-hits", "0",
			 "--no-store", NULL) == 0,
	      "the engine misses after the eviction");
	CHECK(CTL("--json", "namespaces") == 0 && json_num(R.out, "blocks", 0) == 0,
	      "the namespace is empty");
	/* drop by numeric tenant id: nothing left to drop. */
	CHECK(CTL("drop", tenant_id, "1") == 0 && has(R.out, "Dropped 0 blocks"), "drop by id");

	/* No daemon: exit 1 and the hint. */
	CHECK(run_ctl((uid_t)-1, (const char *const[]){"kvtierctl", "--socket", missing, "status",
						       NULL}) == 1,
	      "missing socket");
	CHECK(has(R.err, "is kvtierd running?"), "the hint");
	CHECK(CTL("frobnicate") == 2 && has(R.err, "unknown command 'frobnicate'"),
	      "unknown command");
	CHECK(run_ctl((uid_t)-1, (const char *const[]){"kvtierctl", NULL}) == 2 &&
		      has(R.err, "one of: status, clients, namespaces, top, metrics, evict, drop, plan"),
	      "no command");
	CHECK(CTL("status", "--frobnicate") == 2 && has(R.err, "Try 'kvtierctl --help'"),
	      "unknown option");
	CHECK(run_ctl((uid_t)-1, (const char *const[]){"kvtierctl", "--help", NULL}) == 0 &&
		      has(R.out, "textfile") && has(R.out, "plan") && has(R.out, "Exit status"),
	      "help");
	/* From the table of commands: each one's line, and its section. */
	CHECK(has(R.out, "  evict TENANT NAMESPACE      evict a namespace") &&
		      has(R.out, "\ntop:\n  -i, --interval SEC") && has(R.out, "\nevict, drop:\n") &&
		      has(R.out, "\nplan (needs no daemon):\n") &&
		      has(R.out, "    deepseek-v3    DeepSeek-V3 and R1") &&
		      has(R.out, "(status, clients,\n                        namespaces, evict, drop, plan)"),
	      "help from the table of commands");
	CHECK(CTL("plan", "--help") == 0 && has(R.out, "Commands:"), "a command's --help");

	daemon_stop(&D);
	daemon_cleanup(&D);
	return 0;
}
