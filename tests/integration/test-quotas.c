/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One tenant cannot take another's blocks: tenant b stores a request
 * (written back to NVMe as well), then tenant a stores far more than both
 * its host quota and its NVMe quota.  a stays within its NVMe quota by
 * giving up its own NVMe copies; b loses nothing, in either tier, and
 * loads every block byte-exact.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct daemon d;

struct field {
	const char *tenant, *name;
	uint64_t value;
	bool found;
};

static int field_cb(const kvt_record *r, void *userdata)
{
	struct field *f = userdata;
	const char *kind = kvt_record_kind(r);
	const char *who = kvt_record_get_str(r, !strcmp(kind, "tenant") ? "name" : "tenant");
	if ((!strcmp(kind, "tenant") || !strcmp(kind, "namespace")) && who &&
	    !strcmp(who, f->tenant) && kvt_record_get_u64(r, f->name, &f->value) == 0)
		f->found = true;
	return 0;
}

/* A field of a tenant's record (or of its one namespace's), as the admin
 * sees it. */
static uint64_t tenant_stat(const char *tenant, unsigned what, const char *name)
{
	kvt_client *c = client_connect(&d, "checker");
	struct field f = {tenant, name, 0, false};
	CHECK(kvt_stats(c, what, field_cb, &f) == 0 && f.found, "%s of tenant %s", name, tenant);
	kvt_client_free(c);
	return f.value;
}

/* kvt-engine as uid, storing (or only loading) one request of 4096 tokens:
 * 256 tiny blocks. */
static void engine_as(uid_t uid, const char *seed, const char *expect, bool store)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		if (setgid(uid) < 0 || setuid(uid) < 0)
			_exit(3);
		char out[4096];
		int r = engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "4096",
				   "--prefix-seed", seed, "--suffix", "0", "--expect-hits", expect,
				   store ? NULL : "--no-store", NULL);
		CHECK(r == 0, "uid %u, request %s: engine exit %d:\n%s", (unsigned)uid, seed, r, out);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "engine as uid %u", (unsigned)uid);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("skipped: switching uids needs root\n");
		return KVT_TEST_SKIP;
	}
	/* Host: 8 MiB each (256 tiny blocks).  NVMe: a may hold 2 MiB of
	 * slots; b gets the default, half the spill file.  Everything is
	 * written back at once (watermarks 0%). */
	daemon_start(&d, "[pool]\ncapacity = 16M\nextent_size = 2M\n"
			 "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
			 "[spill.s]\npath = @DIR@/spill0\ncapacity = 256M\n"
			 "[tenant.a]\nuids = 1011\nquota = 8M\nnvme_quota = 2M\n"
			 "[tenant.b]\nuids = 1012\nquota = 8M\n");

	engine_as(1012, "7", "0", true);
	/* A spill slot: a 4 KiB header, then the 32 KiB block (docs/nvme.md). */
	const uint64_t b_nvme = 256 * (4096 + 32768);
	WAIT_FOR(tenant_stat("b", KVT_STATS_TENANTS, "nvme_used") == b_nvme,
		 "all of b's blocks to be written back");
	CHECK(tenant_stat("b", KVT_STATS_TENANTS, "nvme_quota") == 128u << 20,
	      "b's default NVMe quota is its host share of the spill file");

	/* a floods both tiers: four requests of 256 blocks, 32 MiB. */
	for (int i = 0; i < 4; i++) {
		char seed[16];
		snprintf(seed, sizeof(seed), "%d", 100 + i);
		engine_as(1011, seed, "0", true);
	}
	kvt_client *c = client_connect(&d, "checker");
	WAIT_FOR(stat_get(c, "daemon", "nvme_in_flight") == 0, "write-back to settle");
	CHECK(stat_get(c, "daemon", "nvme_quota_full") > 0, "a reached its NVMe quota");
	kvt_client_free(c);
	uint64_t a_used = tenant_stat("a", KVT_STATS_TENANTS, "nvme_used");
	CHECK(a_used > 0 && a_used <= 2u << 20, "a holds %llu bytes of NVMe, quota 2 MiB",
	      (unsigned long long)a_used);
	CHECK(tenant_stat("a", KVT_STATS_TENANTS, "used") <= 8u << 20, "a within its host quota");

	/* b lost nothing: not a host block, not an NVMe copy. */
	CHECK(tenant_stat("b", KVT_STATS_NAMESPACES, "evictions") == 0, "b had no evictions");
	CHECK(tenant_stat("b", KVT_STATS_TENANTS, "nvme_used") == b_nvme, "b's NVMe copies stay");
	engine_as(1012, "7", "256", false);
	/* And a's own latest request is still served, from its tiers. */
	CHECK(tenant_stat("a", KVT_STATS_TENANTS, "blocks") > 0, "a keeps blocks");

	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
