/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-util.h"

void bench_vsay(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", bench_name);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
}

void progress(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bench_vsay(fmt, ap);
	va_end(ap);
}

void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double median(const double *v, unsigned n)
{
	double s[BENCH_MAX_PAIRS];
	memcpy(s, v, n * sizeof(double));
	qsort(s, n, sizeof(double), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

double vmin(const double *v, unsigned n)
{
	double m = v[0];
	for (unsigned i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

double vmax(const double *v, unsigned n)
{
	double m = v[0];
	for (unsigned i = 1; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

const char *ratio_range(const double *v, unsigned n, char *buf, size_t size)
{
	snprintf(buf, size, "%.3fx [%.3f..%.3f]", median(v, n), vmin(v, n), vmax(v, n));
	return buf;
}

double gbs(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0;
}

const char *verdict(bool met)
{
	return met ? "met" : "NOT met";
}

uint8_t *alloc_populated(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("cannot map %llu MiB: %s", (unsigned long long)(bytes >> 20), strerror(errno));
	memset(p, 0x5a, bytes);
	return p;
}

void fill_random(uint8_t *p, uint64_t bytes, uint64_t seed)
{
	for (uint64_t off = 0; off + 8 <= bytes; off += 8) {
		uint64_t v = mix(seed ^ off);
		memcpy(p + off, &v, 8);
	}
}

void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			putchar(*s);
	putchar('"');
}

int try_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

void bench_print(bool json, void (*print_table)(FILE *out), void (*print_json)(void))
{
	if (json) {
		print_table(stderr);
		print_json();
	} else {
		print_table(stdout);
	}
}

uint64_t parse_u64(const char *s, uint64_t lo, uint64_t hi, const char *what)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < lo || v > hi) {
		fprintf(stderr, "%s: %s must be a whole number in %llu..%llu, not '%s'\n",
			bench_name, what, (unsigned long long)lo, (unsigned long long)hi, s);
		exit(2);
	}
	return v;
}

int bench_try_help(void)
{
	fprintf(stderr, "Try '%s --help'.\n", bench_name);
	return 2;
}

const char *bench_kvtierd(int argc, char **argv)
{
	if (argc - optind > 1) {
		fprintf(stderr, "%s: one daemon path at most; try '%s --help'.\n", bench_name,
			bench_name);
		exit(2);
	}
	const char *kvtierd = optind < argc ? argv[optind] : getenv("KVTIERD");
	if (!kvtierd || !*kvtierd)
		kvtierd = "kvtierd";
	if (strchr(kvtierd, '/') && access(kvtierd, X_OK) < 0) {
		printf("%s: skipped: cannot execute %s: %s\n", bench_name, kvtierd,
		       strerror(errno));
		exit(KVT_TEST_SKIP);
	}
	return kvtierd;
}

void bench_catch_signals(void (*handler)(int))
{
	struct sigaction sa = {.sa_handler = handler};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* ---- the daemon ------------------------------------------------------ */

int bench_daemon_mkdir(struct bench_daemon *d, const char *parent, const char *prefix)
{
	snprintf(d->dir, sizeof(d->dir), "%.60s/%s-XXXXXX", parent, prefix);
	if (!mkdtemp(d->dir)) {
		int r = -errno;
		d->dir[0] = 0;
		return r;
	}
	snprintf(d->socket, sizeof(d->socket), "%.90s/kvtierd.sock", d->dir);
	bench_daemon_path(d, "kvtierd.conf", d->config, sizeof(d->config));
	bench_daemon_path(d, "kvtierd.log", d->log, sizeof(d->log));
	return 0;
}

void bench_daemon_path(const struct bench_daemon *d, const char *name, char *out, size_t size)
{
	snprintf(out, size, "%s/%s", d->dir, name);
}

void bench_daemon_config(const struct bench_daemon *d, const char *fmt, ...)
{
	va_list ap;
	FILE *f = fopen(d->config, "we");
	if (!f)
		die("cannot write %s: %s", d->config, strerror(errno));
	fprintf(f, "[daemon]\nsocket = %s\nruntime_dir = %s\n", d->socket, d->dir);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fclose(f);
}

static void log_tail(const struct bench_daemon *d)
{
	char line[512];
	FILE *f = fopen(d->log, "re");
	if (!f)
		return;
	fprintf(stderr, "--- kvtierd log (%s) ---\n", d->log);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

uint64_t bench_daemon_start(struct bench_daemon *d, uint64_t limit_ns)
{
	unlink(d->log);
	uint64_t t0 = kvt_now_ns();
	d->pid = fork();
	if (d->pid < 0)
		die("fork: %s", strerror(errno));
	if (d->pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(d->kvtierd, "kvtierd", "--config", d->config, (char *)NULL);
		fprintf(stderr, "cannot execute %s: %s\n", d->kvtierd, strerror(errno));
		_exit(127);
	}
	bench_daemon_wait_socket(d, d->socket, t0, limit_ns);
	return kvt_now_ns() - t0;
}

void bench_daemon_wait_socket(struct bench_daemon *d, const char *path, uint64_t t0,
			      uint64_t limit_ns)
{
	/* Polled every millisecond: the time to listening is a figure of
	 * bench-scale's. */
	for (;;) {
		if (try_connect(path) == 0)
			return;
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			d->pid = 0;
			log_tail(d);
			die("kvtierd (%s) exited before listening on %s", d->kvtierd, path);
		}
		if (kvt_now_ns() - t0 > limit_ns)
			die("kvtierd did not listen on %s within %llu s", path,
			    (unsigned long long)(limit_ns / 1000000000ull));
		usleep(1000);
	}
}

void bench_daemon_stop(struct bench_daemon *d)
{
	int status;

	if (d->pid <= 0)
		return;
	kill(d->pid, SIGTERM);
	if (waitpid(d->pid, &status, 0) != d->pid)
		die("waitpid kvtierd: %s", strerror(errno));
	d->pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr, "%s: kvtierd exited with status %d\n", bench_name, status);
}

bool bench_daemon_log_find(const struct bench_daemon *d, const char *marker, const char *also,
			   char *out, size_t size)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(d->log, "re");

	snprintf(out, size, "(not reported)");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, marker);
		if (!p || (also && !strstr(p, also)))
			continue;
		p += strlen(marker);
		p[strcspn(p, "\n")] = 0;
		snprintf(out, size, "%s", p);
		found = true;
	}
	fclose(f);
	return found;
}

kvt_client *bench_daemon_connect(const struct bench_daemon *d)
{
	kvt_client *c = NULL;
	int r = kvt_client_connect(d->socket, bench_name, &c);
	if (r < 0)
		die("kvt_client_connect %s: %s (%s)", d->socket, strerror(-r), kvt_connect_error());
	return c;
}

void bench_daemon_abort(struct bench_daemon *d)
{
	if (d->pid > 0)
		log_tail(d);
	bench_daemon_kill(d);
	bench_daemon_remove(d);
}

void bench_daemon_remove(struct bench_daemon *d)
{
	char path[512];

	if (!d->dir[0])
		return;
	DIR *dir = opendir(d->dir);
	if (dir) {
		struct dirent *e;
		while ((e = readdir(dir)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
				snprintf(path, sizeof(path), "%s/%s", d->dir, e->d_name);
				unlink(path);
			}
		closedir(dir);
	}
	rmdir(d->dir);
	d->dir[0] = 0;
}

void bench_daemon_kill(struct bench_daemon *d)
{
	if (d->pid <= 0)
		return;
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
}

void bench_daemon_unlink(const struct bench_daemon *d)
{
	if (!d->dir[0])
		return;
	unlink(d->socket);
	unlink(d->config);
	unlink(d->log);
	rmdir(d->dir);
}

/* ---- the client ------------------------------------------------------ */

kvt_ns *bench_ns_open(kvt_client *c, const char *model, uint32_t n_layers, uint32_t kv_heads,
		      uint32_t head_bytes, uint64_t want_bytes)
{
	kvt_layer_group g = {
		.n_layers = n_layers,
		.attn = KVT_ATTN_MHA,
		.planes = 2,
		.kv_heads = kv_heads,
		.head_bytes = head_bytes,
		.dtype = 1,
	};
	static const uint8_t weights[16] = "bench-weights";
	kvt_ns_desc desc = {
		.model = model,
		.weights = weights,
		.weights_len = sizeof(weights),
		.layer_end = n_layers,
		.tp_size = 1,
		.cp_size = 1,
		.block_tokens = 16,
		.n_groups = 1,
		.groups = &g,
	};
	kvt_ns *ns = NULL;
	kvt_ns_info info;
	int r = kvt_ns_open(c, &desc, &ns);
	if (r < 0)
		die("kvt_ns_open %s: %s (%s)", model, strerror(-r), kvt_client_error(c));
	r = kvt_ns_get_info(ns, &info);
	if (r < 0)
		die("kvt_ns_get_info: %s", strerror(-r));
	if (info.shard_bytes != want_bytes || info.shards != 1)
		die("namespace %s: %llu bytes in %u shard(s), expected %llu in 1", model,
		    (unsigned long long)info.shard_bytes, info.shards,
		    (unsigned long long)want_bytes);
	return ns;
}

uint64_t bench_pings(kvt_client *c, unsigned iters)
{
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		int r = kvt_client_ping(c);
		if (r < 0)
			die("kvt_client_ping: %s", strerror(-r));
	}
	return kvt_now_ns() - t0;
}
