/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf's NVMe tier: the [nvme] and [spill.NAME] sections.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "config-util.h"

/*
 * [nvme] and [spill.NAME]: every value of every key, the ranges, the rules
 * between spill files, and what is left to the start (the files themselves).
 *
 * Files config_load refuses, and what it must say:
 */
static const struct bad_case nvme_errors[] = {
	/* [nvme] values, reported at their line. */
	{ "bad engine", "[nvme]\nengine = uring\n", 2, "[nvme] engine = 'uring'" },
	{ "bad engine case", "[nvme]\n\nengine = IO_URING\n", 3, "engine" },
	{ "engine empty", "[nvme]\nengine =\n", 2, "engine" },
	{ "queue_depth not a number", "[nvme]\nqueue_depth = 64k\n", 2, "queue_depth" },
	{ "queue_depth negative", "[nvme]\n# c\nqueue_depth = -1\n", 3, "queue_depth" },
	{ "queue_depth over u32", "[nvme]\nqueue_depth = 4294967296\n", 2, "queue_depth" },
	{ "writeback_high 101", "[nvme]\nwriteback_high = 101\n", 2,
	  "[nvme] writeback_high = '101'" },
	{ "writeback_high 101%", "[nvme]\n\nwriteback_high = 101%\n", 3, "writeback_high" },
	{ "writeback_low 101", "[nvme]\nwriteback_low = 101\n", 2, "writeback_low" },
	{ "writeback_high -1", "[nvme]\nwriteback_high = -1\n", 2, "writeback_high" },
	{ "writeback_low -1", "[nvme]\nwriteback_low = -1\n", 2,
	  "expected a percentage from 0% to 100%" },
	{ "writeback_high 80%%x", "[nvme]\nwriteback_high = 80%%x\n", 2, "'80%%x'" },
	{ "writeback_high 80%x", "[nvme]\nwriteback_high = 80%x\n", 2, "'80%x'" },
	{ "writeback_low 80%%", "[nvme]\nwriteback_low = 80%%\n", 2, "writeback_low" },
	{ "writeback_high with a blank before %", "[nvme]\nwriteback_high = 80 %\n", 2,
	  "writeback_high" },
	{ "writeback_high as a fraction", "[nvme]\nwriteback_high = 0.8\n", 2,
	  "writeback_high" },
	{ "writeback_low with a sign", "[nvme]\nwriteback_low = +60\n", 2, "writeback_low" },
	{ "writeback_low only %", "[nvme]\nwriteback_low = %\n", 2, "writeback_low" },
	{ "writeback_high empty", "[nvme]\nwriteback_high =\n", 2, "writeback_high" },
	{ "writeback_high past unsigned long",
	  "[nvme]\nwriteback_high = 99999999999999999999999\n", 2, "writeback_high" },
	{ "unknown key in [nvme]", "[nvme]\nengine = auto\nqueue = 8\n", 3,
	  "unknown key 'queue' in [nvme]" },
	{ "spill key in [nvme]", "[nvme]\npath = /srv/spill0\n", 2,
	  "unknown key 'path' in [nvme]" },
	{ "[nvme] key in a spill section",
	  "[spill.a]\npath = /srv/a\ncapacity = 64G\nengine = threads\n", 4,
	  "unknown key 'engine' in [spill.a]" },
	/* [spill.NAME]: names, keys and values, reported at their line. */
	{ "bad spill name", "[spill.a b]\npath = /srv/s\ncapacity = 64G\n", 2,
	  "spill file name 'a b'" },
	{ "spill name with a dot", "# s\n[spill.nvme.0]\npath = /srv/s\n", 3, "nvme.0" },
	{ "spill name with a slash", "[spill.nvme/0]\ncapacity = 64G\n", 2, "nvme/0" },
	{ "spill name not ASCII", "[spill.caf\xc3\xa9]\ncapacity = 64G\n", 2,
	  "spill file name" },
	{ "empty spill name", "[spill.]\npath = /srv/s\n", 2, "spill file name ''" },
	{ "spill name of 32 characters",
	  "[spill.abcdefghijklmnopqrstuvwxyz012345]\n\npath = /srv/s\n", 3,
	  "abcdefghijklmnopqrstuvwxyz012345" },
	{ "[spill] without a name", "[spill]\npath = /srv/s\n", 2, "unknown section [spill]" },
	{ "unknown key in [spill.X]", "[spill.x]\npath = /srv/s\nsize = 64G\n", 3,
	  "unknown key 'size' in [spill.x] (known: path, capacity)" },
	{ "tenant key in [spill.X]", "[spill.x]\n\n\nquota = 1G\n", 4,
	  "unknown key 'quota' in [spill.x]" },
	{ "relative spill path", "[spill.x]\npath = spill0\ncapacity = 64G\n", 2,
	  "[spill.x] path = 'spill0'" },
	{ "spill path too long",
	  "[spill.x]\ncapacity = 64G\npath = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	  3, "[spill.x] path" },
	{ "empty spill path", "[spill.x]\npath =\ncapacity = 64G\n", 2, "path" },
	{ "spill capacity with a blank", "[spill.x]\npath = /srv/s\ncapacity = 64 G\n", 3,
	  "[spill.x] capacity = '64 G'" },
	{ "spill capacity negative", "[spill.x]\npath = /srv/s\ncapacity = -1\n", 3,
	  "capacity" },
	{ "spill capacity 1.5Q", "[spill.x]\ncapacity = 1.5Q\npath = /srv/s\n", 2,
	  "capacity" },
	{ "spill capacity over 2^64", "[spill.x]\npath = /srv/s\ncapacity = 16777216T\n", 3,
	  "capacity" },
	{ "error in the second of two spill files",
	  "[spill.a]\npath = /srv/a\ncapacity = 64G\n[spill.b]\npath = /srv/b\n"
	  "capacity = 64Q\n",
	  6, "[spill.b] capacity" },
	/* Rules checked once the file has parsed: the file, no line. */
	{ "queue_depth 0", "[nvme]\nqueue_depth = 0\n", 0,
	  "[nvme] queue_depth must be 1..4096" },
	{ "queue_depth 5000", "[nvme]\nqueue_depth = 5000\n", 0,
	  "[nvme] queue_depth must be 1..4096" },
	{ "queue_depth 4097", "[nvme]\nqueue_depth = 4097\n", 0, "queue_depth" },
	{ "writeback_low above writeback_high",
	  "[nvme]\nwriteback_high = 60%\nwriteback_low = 70%\n", 0,
	  "[nvme] writeback_low (70%) must not exceed writeback_high (60%)" },
	{ "writeback_low above the default writeback_high", "[nvme]\nwriteback_low = 81\n",
	  0, "writeback_low (81%) must not exceed writeback_high (80%)" },
	{ "writeback_high below the default writeback_low", "[nvme]\nwriteback_high = 59\n",
	  0, "writeback_low (60%) must not exceed writeback_high (59%)" },
	{ "writeback_high 0 with the default low", "[nvme]\nwriteback_high = 0%\n", 0,
	  "writeback_low" },
	{ "spill without a path", "[spill.a]\ncapacity = 64G\n", 0,
	  "[spill.a] needs both path and capacity" },
	{ "spill without a capacity", "[spill.b]\npath = /srv/b\n", 0,
	  "[spill.b] needs both path and capacity" },
	{ "spill of capacity 0", "[spill.c]\npath = /srv/c\ncapacity = 0\n", 0,
	  "[spill.c] needs both path and capacity" },
	{ "spill without a capacity, among others",
	  "[spill.a]\npath = /srv/a\ncapacity = 1T\n[spill.b]\npath = /srv/b\n"
	  "[spill.c]\npath = /srv/c\ncapacity = 1T\n",
	  0, "[spill.b] needs both" },
	{ "two spills with the same path",
	  "[spill.a]\npath = /srv/s\ncapacity = 64G\n[spill.b]\npath = /srv/s\n"
	  "capacity = 1T\n",
	  0, "[spill.a] and [spill.b] name the same file /srv/s" },
	{ "the same path, first and third of three",
	  "[spill.a]\npath = /srv/s\ncapacity = 64G\n[spill.b]\npath = /srv/t\n"
	  "capacity = 64G\n[spill.c]\ncapacity = 64G\npath = /srv/s\n",
	  0, "[spill.a] and [spill.c] name the same file" },
	{ "the same path, set by a later line",
	  "[spill.a]\npath = /srv/a\ncapacity = 64G\n[spill.b]\npath = /srv/b\n"
	  "capacity = 64G\n[spill.a]\npath = /srv/b\n",
	  0, "same file /srv/b" },
};

/* Files config_load accepts. */
static const char *nvme_good[] = {
	"[nvme]\n",
	"[nvme]\nqueue_depth = 1\n",
	"[nvme]\nqueue_depth = 4096\n",
	"[nvme]\nwriteback_low = 80\n", /* equal to the default high */
	"[nvme]\nwriteback_high = 60%\n", /* equal to the default low */
	/* The 64M minimum is the start's to check, against the file. */
	"[spill.a]\npath = /srv/a\ncapacity = 1\n",
	/* Two spellings of one file: refused at start (device and
	 * inode), not by the parser. */
	"[spill.a]\npath = /srv/a\ncapacity = 64M\n[spill.b]\npath = /srv//a\n"
	"capacity = 64M\n",
	/* A spill file may share a tenant's name. */
	"[tenant.a]\nuids = 5\n[spill.a]\npath = /srv/a\ncapacity = 64M\n",
	"[spill.abcdefghijklmnopqrstuvwxyz01234]\npath = /srv/a\ncapacity = 64M\n",
	"[spill.A-Z_a-z_0-9]\npath = /srv/a\ncapacity = 64M\n",
	"[spill.-]\npath = /srv/a\ncapacity = 64M\n",
};

/* Values as they land; -1: the default. */
static const struct nvme_value {
	const char *text;
	int engine, queue_depth, high, low;
} nvme_values[] = {
	{ "[nvme]\nengine = auto\n", NVME_ENGINE_AUTO, -1, -1, -1 },
	{ "[nvme]\nengine = io_uring\n", NVME_ENGINE_URING, -1, -1, -1 },
	{ "[nvme]\nengine = threads\n", NVME_ENGINE_THREADS, -1, -1, -1 },
	{ "[nvme]\nqueue_depth = 1\n", -1, 1, -1, -1 },
	{ "[nvme]\nqueue_depth = 4096\n", -1, 4096, -1, -1 },
	{ "[nvme]\nqueue_depth = 0064\n", -1, 64, -1, -1 },
	{ "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n", -1, -1, 0, 0 },
	{ "[nvme]\nwriteback_high = 100%\nwriteback_low = 100%\n", -1, -1, 100, 100 },
	{ "[nvme]\nwriteback_high = 100\nwriteback_low = 99%\n", -1, -1, 100, 99 },
	{ "[nvme]\nwriteback_high = 70\nwriteback_low = 70\n", -1, -1, 70, 70 },
	{ "[nvme]\nwriteback_high = 95%\n", -1, -1, 95, -1 },
	{ "[nvme]\nwriteback_low = 5\n", -1, -1, -1, 5 },
	/* The last value of a key counts. */
	{ "[nvme]\nqueue_depth = 8\nqueue_depth = 16\nengine = threads\n[nvme]\n"
	  "engine = io_uring\n",
	  NVME_ENGINE_URING, 16, -1, -1 },
};

static void test_nvme_tables(void)
{
	struct config c;
	char *err;
	int r;

	RUN_BAD_CASES(nvme_errors);
	RUN_GOOD_CASES(nvme_good);
	for (size_t i = 0; i < sizeof(nvme_values) / sizeof(nvme_values[0]); i++) {
		const struct nvme_value *ok = &nvme_values[i];

		CHECK(config_defaults(&c) == 0);
		r = load_captured(&c, write_conf("good.conf", ok->text), &err);
		CHECK(r == 0 && err[0] == 0, "%s returned %d: %s", ok->text, r, err);
		free(err);
		CHECK((int)c.nvme_engine == (ok->engine < 0 ? NVME_ENGINE_AUTO : ok->engine),
		      "%s: engine %d", ok->text, (int)c.nvme_engine);
		CHECK(c.nvme_queue_depth ==
			      (uint32_t)(ok->queue_depth < 0 ? 64 : ok->queue_depth),
		      "%s: queue_depth %u", ok->text, c.nvme_queue_depth);
		CHECK(c.writeback_high == (uint32_t)(ok->high < 0 ? 80 : ok->high),
		      "%s: writeback_high %u", ok->text, c.writeback_high);
		CHECK(c.writeback_low == (uint32_t)(ok->low < 0 ? 60 : ok->low),
		      "%s: writeback_low %u", ok->text, c.writeback_low);
		CHECK(c.n_spills == 0 && c.spills == NULL);
		config_free(&c);
	}
}

/* A section given twice is one spill file, in the place of its first
 * appearance; keys come in any order and the last value counts. */
static void test_spill_twice(void)
{
	struct config c;
	char *err;
	int r;

	r = load_text(&c,
		      "[spill.b]\ncapacity = 1G\n[spill.a]\npath = /srv/a\ncapacity = 2G\n"
		      "[nvme]\nengine = threads\n[spill.b]\npath = /srv/b1\npath = /srv/b2\n"
		      "capacity = 3G\n",
		      &err);
	CHECK(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		CHECK(c.n_spills == 2);
		CHECK(c.n_spills == 2 && !strcmp(c.spills[0].name, "b") &&
		      c.spills[0].path && !strcmp(c.spills[0].path, "/srv/b2") &&
		      c.spills[0].capacity == (UINT64_C(3) << 30));
		CHECK(c.n_spills == 2 && !strcmp(c.spills[1].name, "a") &&
		      c.spills[1].path && !strcmp(c.spills[1].path, "/srv/a") &&
		      c.spills[1].capacity == (UINT64_C(2) << 30));
		CHECK(c.nvme_engine == NVME_ENGINE_THREADS);
		config_free(&c);
		CHECK(c.spills == NULL && c.n_spills == 0);
	}
}

/* Up to 64 spill files; the 65th is refused at its first key. */
static void test_spill_limit(void)
{
	struct config c;
	char *err;
	int r;

	for (int count = 64; count <= 65; count++) {
		static char big[8192];
		int n = 0;
		for (int i = 0; i < count; i++)
			n += snprintf(big + n, sizeof(big) - (size_t)n,
				      "[spill.s%d]\npath = /srv/spill%d\ncapacity = 64M\n", i, i);
		CHECK(config_defaults(&c) == 0);
		r = load_captured(&c, write_conf("nvme.conf", big), &err);
		if (count == 64) {
			CHECK(r == 0, "64 spill files: %s", err);
			CHECK(r < 0 || (c.n_spills == 64 && !strcmp(c.spills[63].name, "s63") &&
					!strcmp(c.spills[63].path, "/srv/spill63")));
		} else {
			/* [spill.s64] is line 193, its first key line 194. */
			CHECK(r < 0 && strstr(err, "nvme.conf:194:") &&
				      strstr(err, "more than 64 spill files"),
			      "65 spill files: load %d: %s", r, err);
		}
		free(err);
		config_free(&c);
	}
}

/* Sizes follow the one grammar (tests/unit/test-size.c has it whole). */
static void test_spill_sizes(void)
{
	struct config sc;
	char *serr = NULL;
	int sr = load_text(&sc, "[spill.x]\npath = /srv/s\ncapacity = 1.5T\n[pool]\ncapacity = 4096MiB\n",
			  &serr);
	CHECK(sr == 0, "fractional sizes: %s", serr);
	CHECK(sr < 0 || (sc.spills[0].capacity == UINT64_C(3) << 39 &&
			sc.capacity == UINT64_C(4) << 30));
	free(serr);
	if (sr == 0)
		config_free(&sc);
}

int main(void)
{
	config_test_begin();
	test_nvme_tables();
	test_spill_twice();
	test_spill_limit();
	test_spill_sizes();
	return config_test_end("test-config-nvme");
}
