/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Spill space follows the NVMe quotas, whatever the region binding does.
 * A 256 MiB spill file is four regions; tenants a and b each have half of
 * it as their NVMe quota (two regions).  a stores one block in each of
 * five namespaces: a region is bound to one namespace, so its first four
 * blocks take every region of the file.  b then stores more than its host
 * quota holds and must still get every block written back (a region of
 * a's, above its quota, is taken back for b), reload them all byte-exact,
 * several from NVMe, and never be refused.  a's write-backs past its quota
 * are refused, and that shows: a counter in the daemon and tenant records,
 * kvtierctl status --json and metrics, and a line in the log.  A restart
 * recovers b's blocks from the region that changed hands.
 *
 * Tenants come from their own sockets, so no uid switching is needed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* A spill slot of a tiny block: a 4 KiB header and the 32 KiB payload. */
#define STRIDE (4096 + 32768)

static struct daemon d, da, db;

static const char *config =
	"[pool]\ncapacity = 16M\nextent_size = 2M\n"
	"[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
	"[spill.s]\npath = @DIR@/spill0\ncapacity = 256M\n"
	"[tenant.a]\nsocket = @DIR@/a.sock\nquota = 8M\n"
	"[tenant.b]\nsocket = @DIR@/b.sock\nquota = 8M\n";

struct field {
	const char *kind, *tenant, *name;
	uint64_t value;
	bool found;
};

static int field_cb(const kvt_record *r, void *userdata)
{
	struct field *f = userdata;
	const char *kind = kvt_record_kind(r);
	const char *who = kvt_record_get_str(r, !strcmp(kind, "tenant") ? "name" : "tenant");
	if (!f->found && !strcmp(kind, f->kind) && who && !strcmp(who, f->tenant) &&
	    kvt_record_get_u64(r, f->name, &f->value) == 0)
		f->found = true;
	return 0;
}

/* A field of a tenant's record, or of its first namespace's, as the
 * operator sees it. */
static uint64_t tstat(const char *kind, const char *tenant, const char *name)
{
	kvt_client *c = client_connect(&d, "checker");
	struct field f = {kind, tenant, name, 0, false};
	CHECK(kvt_stats(c, KVT_STATS_ALL, field_cb, &f) == 0 && f.found, "%s %s of tenant %s",
	      kind, name, tenant);
	kvt_client_free(c);
	return f.value;
}

static uint64_t dstat(const char *name)
{
	kvt_client *c = client_connect(&d, "checker");
	uint64_t v = stat_get(c, "daemon", name);
	kvt_client_free(c);
	return v;
}

/* kvt-engine through a tenant's socket: one request of prefix tokens
 * (16 a block), checked byte by byte; expect: leading hits, or NULL. */
static int engine(const struct daemon *via, const char *seed, const char *prefix,
		  const char *salt, const char *expect, bool store)
{
	char out[4096];
	const char *args[16];
	int n = 0;

	args[n++] = "--model", args[n++] = "tiny";
	args[n++] = "--prefix", args[n++] = prefix;
	args[n++] = "--prefix-seed", args[n++] = seed;
	args[n++] = "--suffix", args[n++] = "0";
	if (salt)
		args[n++] = "--salt", args[n++] = salt;
	if (expect)
		args[n++] = "--expect-hits", args[n++] = expect;
	if (!store)
		args[n++] = "--no-store";
	while (n < 16)
		args[n++] = NULL;
	return engine_run(via, out, sizeof(out), args[0], args[1], args[2], args[3], args[4],
			  args[5], args[6], args[7], args[8], args[9], args[10], args[11],
			  args[12], args[13], args[14], args[15]);
}

/* kvtierctl's output for args (appended after --socket). */
static void ctl(const char *args, char *out, size_t size)
{
	char cmd[512];
	const char *p = getenv("KVTIERCTL");
	snprintf(cmd, sizeof(cmd), "'%s' --socket '%s' %s", p && *p ? p : "kvtierctl", d.socket,
		 args);
	FILE *f = popen(cmd, "r");
	CHECK(f, "popen %s", cmd);
	size_t len = fread(out, 1, size - 1, f);
	out[len] = 0;
	CHECK(pclose(f) == 0, "%s failed:\n%s", cmd, out);
}

static void tenant_socket(struct daemon *t, const char *name)
{
	*t = d;
	snprintf(t->socket, sizeof(t->socket), "%s/%s.sock", d.dir, name);
}

int main(void)
{
	static char out[256 * 1024];
	char salt[16];

	daemon_start(&d, config);
	tenant_socket(&da, "a");
	tenant_socket(&db, "b");

	/* 1. a binds every region: one block in each of four namespaces. */
	for (int i = 0; i < 4; i++) {
		snprintf(salt, sizeof(salt), "ns%d", i);
		CHECK(engine(&da, "1", "16", salt, "0", true) == 0, "a stores in namespace %d", i);
		WAIT_FOR(tstat("tenant", "a", "nvme_used") == (uint64_t)(i + 1) * STRIDE,
			 "a's block to be written back");
	}
	CHECK(dstat("nvme_blocks") == 4, "four blocks on NVMe");
	/* A fifth namespace: a is above its quota in regions, and none is
	 * free; its write-back is refused. */
	CHECK(engine(&da, "1", "16", "ns4", "0", true) == 0, "a stores in namespace 4");

	/* 2. b, within its NVMe quota, gets space: 200 blocks, all written
	 * back, then 200 more than its host quota (256 blocks) holds. */
	CHECK(engine(&db, "7", "3200", NULL, "0", true) == 0, "b stores 200 blocks");
	WAIT_FOR(tstat("tenant", "b", "nvme_used") == 200u * STRIDE,
		 "all of b's blocks to be written back");
	CHECK(engine(&db, "8", "3200", NULL, "0", true) == 0, "b stores 200 more");
	WAIT_FOR(tstat("tenant", "b", "nvme_used") == 400u * STRIDE,
		 "b's second batch to be written back");
	CHECK(tstat("namespace", "b", "spills") >= 144, "host eviction moved b's blocks to NVMe");
	CHECK(engine(&db, "7", "3200", NULL, "200", false) == 0, "b's first 200 come back exact");
	CHECK(engine(&db, "8", "3200", NULL, "200", false) == 0, "and the next 200");
	CHECK(tstat("namespace", "b", "restores") >= 144, "b's blocks came back from NVMe (%llu)",
	      (unsigned long long)tstat("namespace", "b", "restores"));
	CHECK(tstat("namespace", "b", "dirty_drops") == 0, "b lost no block");
	CHECK(tstat("namespace", "b", "evictions") == 0, "b lost no block");

	/* 3. The refusals are a's alone, and they show. */
	CHECK(tstat("tenant", "b", "nvme_refused") == 0, "b was never refused");
	CHECK(tstat("tenant", "a", "nvme_refused") > 0, "a's refusals are counted");
	CHECK(dstat("nvme_refused") >= tstat("tenant", "a", "nvme_refused"), "and in the daemon's");
	CHECK(dstat("nvme_reclaims") >= 1, "a region was taken back for b");
	CHECK(daemon_log_contains(&d, "write-back refused for tenant a"), "a refusal is logged");
	CHECK(!daemon_log_contains(&d, "write-back refused for tenant b"), "none of b's");
	/* Regions follow the quotas: b holds one, a what is left. */
	uint64_t ra = tstat("tenant", "a", "nvme_regions"), rb = tstat("tenant", "b", "nvme_regions");
	CHECK(rb == 1 && ra + rb <= 4, "regions: a %llu, b %llu", (unsigned long long)ra,
	      (unsigned long long)rb);
	ctl("status --json", out, sizeof(out));
	CHECK(strstr(out, "\"nvme_refused\": ") && strstr(out, "\"nvme_regions\": "),
	      "status --json shows refusals and regions:\n%s", out);
	ctl("metrics", out, sizeof(out));
	CHECK(strstr(out, "\nkvtier_nvme_writeback_refused_total ") &&
	      strstr(out, "\nkvtier_tenant_nvme_writeback_refused_total{"),
	      "metrics show refusals:\n%s", out);

	/* Whatever of a's is still cached is exact. */
	for (int i = 0; i < 5; i++) {
		snprintf(salt, sizeof(salt), "ns%d", i);
		CHECK(engine(&da, "1", "16", salt, NULL, false) == 0, "a's namespace %d", i);
	}

	/* 4. A restart finds b's blocks in the region that changed hands. */
	WAIT_FOR(dstat("nvme_in_flight") == 0, "I/O to settle");
	daemon_stop(&d);
	daemon_restart(&d, config);
	CHECK(dstat("nvme_recovered") >= 400, "b's blocks recovered (%llu)",
	      (unsigned long long)dstat("nvme_recovered"));
	CHECK(engine(&db, "7", "3200", NULL, "200", false) == 0, "b's blocks after restart");
	CHECK(engine(&db, "8", "3200", NULL, "200", false) == 0, "all of them");
	for (int i = 0; i < 5; i++) {
		snprintf(salt, sizeof(salt), "ns%d", i);
		CHECK(engine(&da, "1", "16", salt, NULL, false) == 0, "a's namespace %d", i);
	}

	daemon_stop(&d);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/a.sock", d.dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/b.sock", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	return 0;
}
