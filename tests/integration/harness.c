/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine-request.h"
#include "harness.h"

static struct daemon *current;

void harness_fail(void)
{
	if (current && current->pid > 0) {
		char cmd[256];
		fprintf(stderr, "--- kvtierd log (%s) ---\n", current->log);
		snprintf(cmd, sizeof(cmd), "tail -n 40 '%s' >&2", current->log);
		if (system(cmd) < 0)
			perror("system");
		kill(current->pid, SIGKILL);
		waitpid(current->pid, NULL, 0);
		daemon_cleanup(current);
	}
	exit(1);
}

static const char *bin(const char *env, const char *fallback)
{
	const char *p = getenv(env);
	return p && *p ? p : fallback;
}

void harness_in_child(void)
{
	current = NULL;
}

void put_file(const char *root, const char *rel, const char *text)
{
	char path[512], cmd[600];
	snprintf(path, sizeof(path), "%s%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	CHECK(system(cmd) == 0, "mkdir");
	FILE *f = fopen(path, "we");
	CHECK(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

int pool_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int n = 0;
	CHECK(f, "cannot read /proc/self/maps");
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "kvtier-pool") != NULL;
	fclose(f);
	return n;
}

int daemon_fd_count(const struct daemon *d)
{
	return count_fds(d->pid);
}

/* The test configuration; "@DIR@" in extra stands for the daemon's dir. */
static void write_config(struct daemon *d, const char *extra)
{
	FILE *f = fopen(d->config, "we");
	CHECK(f, "cannot write %s", d->config);
	fprintf(f, "[daemon]\nsocket = %s\nruntime_dir = %s\nquarantine_ms = 200\n"
		   "[pool]\ncapacity = 16M\nextent_size = 2M\n",
		d->socket, d->dir);
	for (const char *p = extra ? extra : ""; *p; p++) {
		if (!strncmp(p, "@DIR@", 5)) {
			fputs(d->dir, f);
			p += 4;
		} else {
			fputc(*p, f);
		}
	}
	fputc('\n', f);
	fclose(f);
}

void daemon_rewrite_config(struct daemon *d, const char *extra)
{
	write_config(d, extra);
}

int daemon_log_count(const struct daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "re");
	char line[4096];
	int n = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

bool daemon_log_contains(const struct daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "re");
	char line[4096];
	bool found = false;
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

static int try_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r;
}

static void spawn_daemon_with(struct daemon *d, const struct fdstore *store)
{
	pid_t parent = getpid();
	/* In a pid namespace of its own, the daemon is its pid 1, and its
	 * parent is outside (getppid() says 0).  clone() as fork() does it,
	 * without a stack of its own and without fork()'s handlers: the
	 * test's other thread, if any (the fd store's), holds no lock then
	 * (start_stored(), daemon_restart_stored()). */
	d->pid = d->own_pidns ? (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, NULL, NULL, 0)
			      : fork();
	CHECK(d->pid >= 0, "fork: %s", strerror(errno));
	if (d->pid == 0) {
		/* It dies with the test, however the test ends: a failed
		 * check, a crash, or the runner's timeout. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
		    getppid() != (d->own_pidns ? 0 : parent))
			_exit(127);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		dup2(fd, 2);
		dup2(fd, 1);
		/* The store's descriptors out of the way, then from 3 on, as
		 * systemd passes them. */
		int n = store ? store->n : 0;
		for (int i = 0; i < n; i++)
			if (fcntl(store->fds[i], F_DUPFD, 1000 + i) != 1000 + i)
				_exit(127);
		/* Only stdio: descriptors whoever ran the test left open are
		 * not the daemon's, and tests count and limit its own. */
		close_range(3, 999, 0);
		for (int i = 0; i < n; i++)
			if (dup2(1000 + i, 3 + i) != 3 + i)
				_exit(127);
		close_range(3 + n, ~0U, 0);
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		unsetenv("NOTIFY_SOCKET");
		if (store) {
			char num[16], pid[16], names[FDSTORE_MAX * 66] = "";
			for (int i = 0; i < n; i++)
				snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
					 i ? ":" : "", store->names[i]);
			snprintf(num, sizeof(num), "%d", n);
			snprintf(pid, sizeof(pid), "%d", (int)getpid());
			if (n) {
				setenv("LISTEN_FDS", num, 1);
				setenv("LISTEN_PID", pid, 1);
				setenv("LISTEN_FDNAMES", names, 1);
			}
			setenv("NOTIFY_SOCKET", store->path, 1);
		}
		execl(bin("KVTIERD", "kvtierd"), "kvtierd", "--config", d->config, "--verbose",
		      (char *)NULL);
		_exit(127);
	}
	current = d;
	/* One successful probe only: each is a connection the daemon counts
	 * until it has seen it close. */
	int up = -1;
	for (int i = 0; i < 1500 && up != 0; i++) {
		CHECK(waitpid(d->pid, NULL, WNOHANG) == 0, "kvtierd exited at start");
		up = try_connect(d->socket);
		if (up != 0)
			usleep(20000);
	}
	CHECK(up == 0, "kvtierd did not start listening");
}

static void spawn_daemon(struct daemon *d)
{
	spawn_daemon_with(d, NULL);
}

/* A private directory and its configuration. */
static void daemon_prepare(struct daemon *d, const char *extra_config, bool own_pidns)
{
	memset(d, 0, sizeof(*d));
	d->own_pidns = own_pidns;
	snprintf(d->dir, sizeof(d->dir), "/tmp/kvt-test-XXXXXX");
	CHECK(mkdtemp(d->dir), "mkdtemp");
	/* Tests connect as other uids too. */
	chmod(d->dir, 0755);
	snprintf(d->socket, sizeof(d->socket), "%s/kvtierd.sock", d->dir);
	snprintf(d->config, sizeof(d->config), "%s/kvtierd.conf", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvtierd.log", d->dir);
	write_config(d, extra_config);
}

void daemon_start(struct daemon *d, const char *extra_config)
{
	daemon_prepare(d, extra_config, false);
	spawn_daemon(d);
}

/* Whether this process may make a pid namespace, tried in a child; the
 * test is skipped where it may not. */
static void pidns_probe(void)
{
	pid_t probe = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, NULL, NULL, 0);
	if (probe == 0)
		_exit(getpid() == 1 ? 0 : 1);
	if (probe < 0 || wait_exit(probe) != 0) {
		printf("SKIP: cannot make a pid namespace here (%s): needs root\n",
		       probe < 0 ? strerror(errno) : "the child is not its pid 1");
		exit(77);
	}
}

void daemon_start_pidns(struct daemon *d, const char *extra_config)
{
	pidns_probe();
	daemon_prepare(d, extra_config, true);
	spawn_daemon(d);
}

void daemon_restart(struct daemon *d, const char *extra_config)
{
	write_config(d, extra_config);
	spawn_daemon(d);
}

static void *fdstore_main(void *arg);

void fdstore_open(struct fdstore *s, const struct daemon *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int one = 1;

	memset(s, 0, sizeof(*s));
	snprintf(s->path, sizeof(s->path), "%s/notify", d->dir);
	memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
	s->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	CHECK(s->sock >= 0 && bind(s->sock, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	      "notification socket");
	CHECK(setsockopt(s->sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0, "SO_PASSCRED");
	pthread_mutex_init(&s->lock, NULL);
	CHECK(pthread_create(&s->thread, NULL, fdstore_main, s) == 0, "fd store thread");
}

static void fdstore_remove(struct fdstore *s, const char *name)
{
	for (int i = 0; i < s->n;)
		if (!strcmp(s->names[i], name)) {
			close(s->fds[i]);
			s->n--;
			s->fds[i] = s->fds[s->n];
			memcpy(s->names[i], s->names[s->n], sizeof(s->names[i]));
		} else {
			i++;
		}
}

static void fdstore_take_in(struct fdstore *s)
{
	char buf[4096];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
	} ctl;

	for (;;) {
		struct iovec iov = {buf, sizeof(buf) - 1};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl,
				    .msg_controllen = sizeof(ctl)};
		ssize_t n = recvmsg(s->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EAGAIN)
			return;
		CHECK(n >= 0, "recvmsg: %s", strerror(errno));
		buf[n] = 0;
		int fds[16], k = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && k < 16;
				     i++)
					memcpy(&fds[k++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
		const char *name = strstr(buf, "FDNAME=");
		char nm[64] = "stored";
		if (name)
			snprintf(nm, sizeof(nm), "%.*s", (int)strcspn(name + 7, "\n"), name + 7);
		if (strstr(buf, "FDSTOREREMOVE=1")) {
			fdstore_remove(s, nm);
		} else if (strstr(buf, "FDSTORE=1")) {
			for (int i = 0; i < k; i++) {
				CHECK(s->n < FDSTORE_MAX, "the fd store is full");
				s->fds[s->n] = fds[i];
				snprintf(s->names[s->n], sizeof(s->names[0]), "%s", nm);
				s->n++;
			}
			k = 0;
		}
		for (int i = 0; i < k; i++)
			close(fds[i]);
	}
}

void fdstore_drain(struct fdstore *s)
{
	pthread_mutex_lock(&s->lock);
	fdstore_take_in(s);
	pthread_mutex_unlock(&s->lock);
}

static void *fdstore_main(void *arg)
{
	struct fdstore *s = arg;

	for (;;) {
		struct pollfd p = {s->sock, POLLIN, 0};
		poll(&p, 1, 50);
		pthread_mutex_lock(&s->lock);
		bool stop = s->stop;
		if (!stop)
			fdstore_take_in(s);
		pthread_mutex_unlock(&s->lock);
		if (stop)
			return NULL;
	}
}

void fdstore_close(struct fdstore *s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	for (int i = 0; i < s->n; i++)
		close(s->fds[i]);
	s->n = 0;
	if (s->sock >= 0)
		close(s->sock);
	unlink(s->path);
}

static void start_stored(struct daemon *d, const char *extra_config, struct fdstore *s,
			 bool own_pidns)
{
	daemon_prepare(d, extra_config, own_pidns);
	fdstore_open(s, d);
	/* The store's thread holds its lock whenever it runs: a clone()
	 * (spawn_daemon_with) then finds no lock taken in the child. */
	pthread_mutex_lock(&s->lock);
	spawn_daemon_with(d, s);
	pthread_mutex_unlock(&s->lock);
}

void daemon_start_stored(struct daemon *d, const char *extra_config, struct fdstore *s)
{
	start_stored(d, extra_config, s, false);
}

void daemon_start_stored_pidns(struct daemon *d, const char *extra_config, struct fdstore *s)
{
	pidns_probe();
	start_stored(d, extra_config, s, true);
}

void daemon_restart_stored(struct daemon *d, const char *extra_config, struct fdstore *s)
{
	write_config(d, extra_config);
	/* What the store holds now goes to the new daemon; the thread takes
	 * in what it sends from then on. */
	pthread_mutex_lock(&s->lock);
	fdstore_take_in(s);
	spawn_daemon_with(d, s);
	pthread_mutex_unlock(&s->lock);
}

void daemon_stop(struct daemon *d)
{
	int status;
	kill(d->pid, SIGTERM);
	CHECK(waitpid(d->pid, &status, 0) == d->pid, "waitpid");
	d->pid = 0;
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "kvtierd exited with status %d",
	      status);
}

void daemon_kill(struct daemon *d)
{
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
}

void daemon_cleanup(struct daemon *d)
{
	char path[256];
	if (getenv("KVT_KEEP"))
		return;
	unlink(d->socket);
	unlink(d->config);
	unlink(d->log);
	snprintf(path, sizeof(path), "%s/pins", d->dir);
	unlink(path);
	rmdir(d->dir);
	current = NULL;
}

static char **engine_argv(const struct daemon *d, va_list ap)
{
	static char *argv[64];
	int n = 0;
	argv[n++] = (char *)"kvt-engine";
	argv[n++] = (char *)"--socket";
	argv[n++] = (char *)d->socket;
	const char *a;
	while ((a = va_arg(ap, const char *)) && n < 63)
		argv[n++] = (char *)a;
	argv[n] = NULL;
	return argv;
}

int wait_exit(pid_t pid)
{
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int engine_run(const struct daemon *d, char *out, size_t out_size, ...)
{
	int p[2];
	va_list ap;
	CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
	va_start(ap, out_size);
	char **argv = engine_argv(d, ap);
	va_end(ap);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		execv(bin("KVT_ENGINE", "kvt-engine"), argv);
		_exit(127);
	}
	close(p[1]);
	size_t len = 0;
	ssize_t n;
	while ((n = read(p[0], out + len, out_size - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = 0;
	close(p[0]);
	int r = wait_exit(pid);
	fprintf(stderr, "%s", out);
	return r;
}

static pid_t engine_spawn_ap(const struct daemon *d, bool own_pidns, int *ret_stdin,
			     FILE **ret_stdout, va_list ap)
{
	int in[2], out[2];
	CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0, "pipe");
	char **argv = engine_argv(d, ap);
	/* As the daemon's own pid namespace (spawn_daemon_with). */
	pid_t pid = own_pidns ? (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, NULL, NULL, 0)
			      : fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		/* It dies with the test: one left behind by a failed check
		 * holds the runner's pipe open until its timeout. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
			_exit(127);
		dup2(in[0], 0);
		dup2(out[1], 1);
		execv(bin("KVT_ENGINE", "kvt-engine"), argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	*ret_stdin = in[1];
	*ret_stdout = fdopen(out[0], "r");
	return pid;
}

pid_t engine_spawn(const struct daemon *d, int *ret_stdin, FILE **ret_stdout, ...)
{
	va_list ap;
	va_start(ap, ret_stdout);
	pid_t pid = engine_spawn_ap(d, false, ret_stdin, ret_stdout, ap);
	va_end(ap);
	return pid;
}

pid_t engine_spawn_pidns(const struct daemon *d, int *ret_stdin, FILE **ret_stdout, ...)
{
	va_list ap;
	va_start(ap, ret_stdout);
	pid_t pid = engine_spawn_ap(d, true, ret_stdin, ret_stdout, ap);
	va_end(ap);
	return pid;
}

kvt_client *client_connect(const struct daemon *d, const char *name)
{
	kvt_client *c = NULL;
	int r = kvt_client_connect(d->socket, name, &c);
	CHECK(r == 0, "connect: %s", strerror(-r));
	return c;
}

kvt_ns *engine_ns(kvt_client *c, const char *model, uint32_t tp_size)
{
	const struct engine_model *m = engine_model_find(model);
	kvt_layer_group g;
	kvt_ns_desc desc;
	kvt_ns *ns = NULL;

	CHECK(m, "unknown model %s", model);
	engine_ns_desc(m, tp_size, NULL, &g, &desc);
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "ns open: %s %s", strerror(-r), kvt_client_error(c));
	return ns;
}

kvt_ns *small_ns(kvt_client *c, const char *model)
{
	kvt_layer_group g = {.n_layers = 1, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 1,
			     .head_bytes = 128, .dtype = 1};
	kvt_ns_desc desc = {.model = model, .weights = (const uint8_t *)model,
			    .weights_len = (uint32_t)strlen(model), .layer_end = 1, .tp_size = 1,
			    .cp_size = 1, .block_tokens = 16, .n_groups = 1, .groups = &g};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "ns open: %s %s", strerror(-r), kvt_client_error(c));
	return ns;
}

void load_staged(kvt_ns *ns, const uint8_t *keys, uint32_t n, void **dsts, int32_t *st)
{
	for (uint32_t i = 0; i < n; i++)
		st[i] = -ENOENT;
	for (uint32_t p = 0; p < n;) {
		int w = kvt_wait_resident(ns, keys + (size_t)p * KVT_KEY_BYTES, n - p, 600000);
		CHECK(w >= 0, "wait_resident: %s", strerror(-w));
		uint32_t run = w > 0 ? (uint32_t)w : 1; /* a miss: loaded alone */
		int r = kvt_load(ns, 0, keys + (size_t)p * KVT_KEY_BYTES, run, dsts + p, st + p);
		CHECK(r >= 0, "load: %s", strerror(-r));
		p += run;
	}
}

void token_key(uint32_t tag, uint32_t n, uint8_t *ret_key)
{
	uint32_t tok[2] = {tag, n};
	CHECK(kvt_hash_block(NULL, tok, 2, NULL, 0, ret_key) == 0, "hash");
}

uint32_t engine_keys(uint64_t prefix_seed, uint32_t prefix, uint64_t suffix_seed,
		     uint32_t suffix, uint8_t *ret_keys, uint32_t max)
{
	uint32_t n = prefix + suffix;
	uint32_t *tok = calloc(n + 1, sizeof(uint32_t));
	CHECK(tok, "out of memory");
	engine_tokens(tok, prefix_seed, prefix, suffix_seed, suffix);
	int r = kvt_hash_chain(NULL, tok, n, ENGINE_BLOCK_TOKENS, NULL, 0, ret_keys, max);
	free(tok);
	CHECK(r >= 0, "hash chain");
	return (uint32_t)r;
}

struct stat_query {
	const char *kind, *field;
	uint64_t value, sum;
	bool found;
	uint32_t count;
};

static int stat_cb(const kvt_record *r, void *userdata)
{
	struct stat_query *q = userdata;
	if (strcmp(kvt_record_kind(r), q->kind))
		return 0;
	q->count++;
	uint64_t v;
	if (q->field && kvt_record_get_u64(r, q->field, &v) == 0) {
		if (!q->found)
			q->value = v;
		q->found = true;
		q->sum += v;
	}
	return 0;
}

static struct stat_query stat_query(kvt_client *c, const char *kind, const char *field)
{
	struct stat_query q = {kind, field, 0, 0, false, 0};
	int r = kvt_stats(c, KVT_STATS_ALL, stat_cb, &q);
	CHECK(r == 0, "stats: %s", strerror(-r));
	return q;
}

uint64_t stat_get(kvt_client *c, const char *kind, const char *field)
{
	struct stat_query q = stat_query(c, kind, field);
	CHECK(q.found, "no field %s in a %s record", field, kind);
	return q.value;
}

int pool_descriptors(kvt_client *c)
{
	return (int)stat_get(c, "daemon", "extents") + (stat_get(c, "daemon", "ahead_bytes") > 0) +
	       (int)stat_get(c, "keep", "descriptors");
}

uint64_t stat_sum(kvt_client *c, const char *kind, const char *field)
{
	return stat_query(c, kind, field).sum;
}

uint32_t stat_count(kvt_client *c, const char *kind)
{
	return stat_query(c, kind, NULL).count;
}

void block_pattern(uint8_t *buf, size_t len, uint32_t tag, const uint8_t *key)
{
	uint64_t s = mix(0x6b76746965720000ull ^ tag);
	for (int i = 0; i < KVT_KEY_BYTES; i += 8) {
		uint64_t k;
		memcpy(&k, key + i, 8);
		s = mix(s ^ k);
	}
	for (size_t i = 0; i < len; i += 8) {
		s = mix(s);
		memcpy(buf + i, &s, len - i < 8 ? len - i : 8);
	}
}

int64_t daemon_rss_anon(const struct daemon *d)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	/* Plain read(2): samplers call this from a thread while the test
	 * forks, and stdio locks must not be held across a fork. */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *p = strstr(buf, "\nRssAnon:");
	if (!p)
		return -1;
	return (int64_t)strtoll(p + 9, NULL, 10) * 1024;
}
