/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl top: the status summary, refreshed every interval, with
 * per-namespace rates from the deltas of the daemon's counters between two
 * refreshes.  On a terminal each frame is drawn over the last one; into a
 * pipe or file the frames follow each other as plain text.
 */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "macro.h"

struct top_opts {
	double interval_s; /* > 0 */
	uint64_t iterations; /* 0: until interrupted */
};

static struct top_opts opts = {.interval_s = 1.0};

static volatile sig_atomic_t stop;
static struct termios saved_tio;
static volatile sig_atomic_t tio_saved;

static void on_stop(int sig)
{
	stop = 1;
}

/* Also runs from the reply-timeout signal handler: tcsetattr() is
 * async-signal-safe. */
static void restore_terminal(void)
{
	if (tio_saved) {
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
		tio_saved = 0;
	}
}

/* Single keys without Enter and without echo; Ctrl-C still interrupts. */
static bool keys_setup(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tio) < 0)
		return false;
	t = saved_tio;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	tio_saved = 1;
	timeout_on_expire(restore_terminal);
	if (tcsetattr(STDIN_FILENO, TCSANOW, &t) < 0) {
		tio_saved = 0;
		return false;
	}
	return true;
}

/* Sleep until deadline (CLOCK_MONOTONIC ns); false when the user asked
 * to stop (q, Ctrl-C, SIGTERM). */
static bool wait_until(uint64_t deadline, bool keys)
{
	for (;;) {
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		uint64_t now = kvt_now_ns();
		int ms, r;

		if (stop)
			return false;
		if (now >= deadline)
			return true;
		ms = (int)((deadline - now + 999999) / 1000000);
		r = poll(&p, keys ? 1 : 0, ms);
		if (r > 0) {
			char buf[64];
			ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
			if (n == 0)
				keys = false; /* the terminal went away */
			for (ssize_t i = 0; i < n; i++)
				if (buf[i] == 'q' || buf[i] == 'Q')
					return false;
		} else if (r < 0 && errno != EINTR) {
			keys = false;
		}
	}
}

static const struct rec *find_ns(const struct snapshot *s, const struct rec *like)
{
	const char *tenant = rec_str(like, "tenant");
	uint64_t id = rec_u64(like, "id");

	for (size_t i = 0; s && i < s->n; i++) {
		const struct rec *r = &s->recs[i];
		if (rec_is(r, "namespace") && rec_u64(r, "id") == id &&
		    strcmp(rec_str(r, "tenant"), tenant) == 0)
			return r;
	}
	return NULL;
}

/* Counter growth, false when there is no earlier value or the counter went
 * back (the daemon restarted, the namespace is a new one). */
static bool delta(const struct rec *cur, const struct rec *prev, const char *field,
		  uint64_t *ret)
{
	uint64_t a, b;

	if (!prev || !rec_has(prev, field) || !rec_has(cur, field))
		return false;
	a = rec_u64(cur, field);
	b = rec_u64(prev, field);
	if (a < b)
		return false;
	*ret = a - b;
	return true;
}

static void add_rate(struct table *t, const struct rec *cur, const struct rec *prev,
		     const char *field, double secs, double scale)
{
	uint64_t d;

	if (!delta(cur, prev, field, &d) || secs <= 0)
		table_add(t, "-");
	else
		table_add(t, "%.1f", (double)d / scale / secs);
}

static int print_rates(FILE *f, const struct snapshot *cur, const struct snapshot *prev,
		       double secs)
{
	static const struct column cols[] = {
		{"TENANT", false}, {"ID", true}, {"MODEL", false}, {"BLOCKS", true},
		{"BYTES", true}, {"LOOKUPS/S", true}, {"HIT RATE", true},
		{"STORES/S", true}, {"LOADS/S", true}, {"LOAD MiB/S", true},
		{"EVICTIONS/S", true},
	};
	struct table t = TABLE_INIT(cols, ARRAY_SIZE(cols));
	char a[32];
	int r;

	for (size_t i = 0; i < cur->n; i++) {
		const struct rec *x = &cur->recs[i], *p;
		uint64_t hits, misses;

		if (!rec_is(x, "namespace"))
			continue;
		p = find_ns(prev, x);
		table_add(&t, "%s", rec_str(x, "tenant"));
		table_add(&t, "%" PRIu64, rec_u64(x, "id"));
		table_add(&t, "%s", rec_str(x, "model"));
		table_add(&t, "%" PRIu64, rec_u64(x, "blocks"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "bytes"), a, sizeof(a)));
		add_rate(&t, x, p, "lookups", secs, 1.0);
		/* Over this interval only: the lifetime rate hides a change. */
		if (delta(x, p, "hits", &hits) && delta(x, p, "misses", &misses))
			table_add(&t, "%s", fmt_pct(a, sizeof(a), ratio_of(hits, hits + misses)));
		else
			table_add(&t, "-");
		add_rate(&t, x, p, "stores", secs, 1.0);
		add_rate(&t, x, p, "loads", secs, 1.0);
		add_rate(&t, x, p, "load_bytes", secs, 1024.0 * 1024.0);
		add_rate(&t, x, p, "evictions", secs, 1.0);
	}
	r = table_print(&t, f);
	table_free(&t);
	return r;
}

static void print_summary(FILE *f, const struct ctx *x, const struct rec *d)
{
	char a[32], b[32], c[32], e[32], g[32];

	if (!d)
		return;
	if (rec_has(d, "capacity"))
		fprintf(f, "%-13s%s; allocated %s, used %s (%s), free %s; %" PRIu64 " extents\n",
			"Host pool:", kvt_size_format(rec_u64(d, "capacity"), a, sizeof(a)),
			kvt_size_format(rec_u64(d, "allocated"), b, sizeof(b)),
			kvt_size_format(rec_u64(d, "used"), c, sizeof(c)),
			fmt_pct(e, sizeof(e), ratio_of(rec_u64(d, "used"), rec_u64(d, "capacity"))),
			kvt_size_format(rec_u64(d, "free"), g, sizeof(g)), rec_u64(d, "extents"));
	print_numa_line(f, d);
	if (snapshot_find(&x->snap, "node")) {
		const char *sep = "";
		fprintf(f, "%-13s", "  by node:");
		for (size_t i = 0; i < x->snap.n; i++) {
			const struct rec *n = &x->snap.recs[i];
			if (!rec_is(n, "node"))
				continue;
			fprintf(f, "%s%" PRId64 ": %s of %s", sep, (int64_t)rec_u64(n, "node"),
				kvt_size_format(rec_u64(n, "used"), a, sizeof(a)),
				kvt_size_format(rec_u64(n, "allocated"), b, sizeof(b)));
			sep = "; ";
		}
		putc('\n', f);
	}
	if (rec_has(d, "tenants"))
		fprintf(f, "%-13stenants %" PRIu64 ", namespaces %" PRIu64 ", blocks %" PRIu64
			", handles %" PRIu64 ", clients %" PRIu64 "\n", "Contents:",
			rec_u64(d, "tenants"), rec_u64(d, "namespaces"), rec_u64(d, "blocks"),
			rec_u64(d, "handles"), rec_u64(d, "clients"));
	else
		fputs("(Only your own tenant is shown; run as root or as kvtierd's user for the whole daemon.)\n",
		      f);
}

static int render(FILE *f, const struct ctx *x, const struct snapshot *prev, double secs,
		  int fetch_error, bool keys)
{
	const struct rec *d = snapshot_find(&x->snap, "daemon");
	char when[16], up[32];
	time_t now = time(NULL);
	struct tm tm;
	int r;

	localtime_r(&now, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	fprintf(f, "kvtierctl top  %s  every %gs%s\n", when, opts.interval_s,
		keys ? "  (q quits)" : "");
	if (fetch_error < 0) {
		fprintf(f, "kvtierd at %s: %s; trying again\n", x->socket, strerror(-fetch_error));
		return 0;
	}
	if (d) {
		fprintf(f, "%-13skvtierd %s", "Daemon:", rec_str(d, "version"));
		if (rec_has(d, "pid"))
			fprintf(f, ", pid %" PRIu64, rec_u64(d, "pid"));
		fprintf(f, ", up %s, %s\n", fmt_duration(up, sizeof(up), rec_u64(d, "uptime_s")),
			rec_has(d, "socket") ? rec_str(d, "socket") : x->socket);
	}
	print_summary(f, x, d);
	fputs("\nTenants:\n", f);
	r = print_tenants(f, &x->snap);
	if (r < 0)
		return r;
	if (prev)
		fprintf(f, "\nNamespaces (rates over the last %.1f s):\n", secs);
	else
		fputs("\nNamespaces (rates from the next refresh on):\n", f);
	return print_rates(f, &x->snap, prev, secs);
}

/* Draw over the previous frame: home, each line cleared to its end, the
 * rest of the screen cleared.  Lines past the window's width or height
 * are cut, or the terminal would scroll and tear the frame. */
static void draw_tty(const char *frame)
{
	struct winsize ws = {0};
	unsigned rows = 24, cols = 80, row = 0;
	const char *p = frame;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		rows = ws.ws_row;
		cols = ws.ws_col;
	}
	fputs("\033[H", stdout);
	while (*p && row + 1 < rows) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p), width = 0, i;

		for (i = 0; i < len; i++) {
			/* Count columns at the start of each UTF-8 sequence. */
			if (((unsigned char)p[i] & 0xc0) != 0x80 && ++width > cols)
				break;
		}
		fwrite(p, 1, i, stdout);
		fputs("\033[K\n", stdout);
		row++;
		p += len + (end ? 1 : 0);
	}
	if (*p)
		fputs("(more below; enlarge the window)\033[K", stdout);
	fputs("\033[J", stdout);
}

static int top_run(struct ctx *x)
{
	struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
	struct snapshot prev = {0};
	bool have_prev = false, tty = isatty(STDOUT_FILENO), keys = false;
	uint64_t t_prev = 0;
	int fetch_error = 0, r = 0;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (tty) {
		keys = keys_setup();
		fputs("\033[H\033[2J", stdout);
	}

	for (uint64_t i = 0; !stop; i++) {
		uint64_t start = kvt_now_ns(), t;
		char *frame = NULL;
		size_t len = 0;
		FILE *f;

		fetch_error = ctx_fetch(x, STATS_STATUS, true);
		t = kvt_now_ns();
		if (fetch_error < 0) {
			/* The library reconnects by itself; rates restart
			 * from the next good refresh. */
			snapshot_clear(&prev);
			have_prev = false;
		}
		f = open_memstream(&frame, &len);
		if (!f) {
			r = -ENOMEM;
			break;
		}
		r = render(f, x, have_prev ? &prev : NULL, (double)(t - t_prev) / 1e9, fetch_error,
			   keys);
		if (fclose(f) != 0 && r >= 0)
			r = -ENOMEM;
		if (r < 0) {
			free(frame);
			break;
		}
		if (tty) {
			draw_tty(frame);
		} else {
			if (i)
				putchar('\n');
			fputs(frame, stdout);
		}
		free(frame);
		if (fflush(stdout) != 0) {
			r = -errno;
			break;
		}
		if (fetch_error >= 0) {
			/* These counters are the base of the next rates. */
			snapshot_clear(&prev);
			prev = x->snap;
			memset(&x->snap, 0, sizeof(x->snap));
			have_prev = true;
			t_prev = t;
		}
		if (opts.iterations && i + 1 >= opts.iterations)
			break;
		if (!wait_until(start + (uint64_t)(opts.interval_s * 1e9), keys))
			break;
	}

	restore_terminal();
	if (tty)
		putchar('\n');
	snapshot_clear(&prev);
	if (r < 0)
		return r;
	return fetch_error < 0 ? EXIT_DAEMON : 0;
}

enum { OPT_INTERVAL, OPT_ITERATIONS };

static int top_parse(int id, const char *arg)
{
	char *end;
	double v;

	if (id == OPT_ITERATIONS)
		return ctl_opt_count("--iterations", arg, 1, &opts.iterations);
	errno = 0;
	v = strtod(arg, &end);
	/* Below 10 ms the tool would be most of the daemon's load. */
	if (errno || end == arg || *end || !isfinite(v) || v < 0.01 || v > 86400)
		return ctl_usage_error("kvtierctl",
				       "--interval needs seconds between 0.01 and 86400, not '%s'",
				       arg);
	opts.interval_s = v;
	return 0;
}

static void top_help(FILE *f)
{
	fputs("top:\n"
	      "  -i, --interval SEC    refresh every SEC seconds (default 1; fractions work)\n"
	      "  -n, --iterations N    stop after N refreshes (default: until q or Ctrl-C)\n"
	      "  Rates are counter deltas between refreshes; the first refresh has none.\n"
	      "  On a terminal the screen is redrawn in place; otherwise each refresh is\n"
	      "  printed after the last, without escape codes.\n",
	      f);
}

static const struct ctl_option top_options[] = {
	{"interval", true, 'i', OPT_INTERVAL},
	{"iterations", true, 'n', OPT_ITERATIONS},
	{},
};

const struct ctl_command ctl_cmd_top = {
	.name = "top",
	.args = "",
	.needs = CTL_NEEDS_CLIENT,
	.what = STATS_STATUS,
	.summary = "live status with per-namespace rates (lookups/s, hit rate, MiB/s)",
	.help = top_help,
	.options = top_options,
	.parse = top_parse,
	.run = top_run,
};
