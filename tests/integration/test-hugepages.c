/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pools on reserved hugetlb pages: the daemon uses them when they are
 * there, falls back to 4 KiB pages when they run out, and serves byte-exact
 * either way.  Reserves pages through vm.nr_hugepages (root) and puts the
 * old value back.
 */
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

static const char *knob = "/proc/sys/vm/nr_hugepages";
static long saved = -1;

static long read_knob(void)
{
	FILE *f = fopen(knob, "re");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static int write_knob(long v)
{
	FILE *f = fopen(knob, "we");
	if (!f)
		return -1;
	fprintf(f, "%ld\n", v);
	return fclose(f);
}

static void restore(void)
{
	if (saved >= 0)
		write_knob(saved);
}

int main(void)
{
	struct daemon d;
	char out[4096];

	saved = read_knob();
	if (geteuid() != 0 || saved < 0) {
		printf("skipped: reserving hugetlb pages needs root and %s\n", knob);
		return 77;
	}
	/* Two 2 MiB extents' worth on top of what is already reserved. */
	if (write_knob(saved + 2) < 0 || read_knob() < saved + 2) {
		restore();
		printf("skipped: the kernel would not reserve hugetlb pages\n");
		return 77;
	}
	atexit(restore);

	daemon_start(&d, "[pool]\ncapacity = 8M\nextent_size = 2M\nhugepages = auto\n");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "3200",
			 "--suffix", "0", NULL) == 0, "store 200 blocks (4 extents)");
	kvt_client *c = client_connect(&d, "checker");
	uint64_t huge = stat_get(c, "daemon", "extents_hugetlb");
	CHECK(huge >= 1 && huge <= 2, "1-2 hugetlb extents, got %llu", (unsigned long long)huge);
	CHECK(stat_get(c, "daemon", "extents") == 4, "the rest on 4 KiB pages");
	kvt_client_free(c);
	/* Every block that is still resident loads byte-exact, whatever backs it. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "3200",
			 "--suffix", "0", "--no-store", NULL) == 0, "reload");
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
