/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one size grammar (proto/size.h): what the config, kvtierctl and the
 * logs read and write, and that an exact format reads back equal.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "../check.h"
#include "macro.h"
#include "size.h"

static const struct {
	const char *s;
	uint64_t v;
} good[] = {
	{ "0", 0 },
	{ "1", 1 },
	{ "4096", 4096 },
	{ "4096B", 4096 },
	{ "1K", 1024 },
	{ "1k", 1024 },
	{ "3KiB", 3072 },
	{ "3KB", 3072 },
	{ "3Ki", 3072 },
	{ "512M", UINT64_C(512) << 20 },
	{ "5MiB", UINT64_C(5) << 20 },
	{ "2m", UINT64_C(2) << 20 },
	{ "64G", UINT64_C(64) << 30 },
	{ "64g", UINT64_C(64) << 30 },
	{ "64GiB", UINT64_C(64) << 30 },
	{ "64GB", UINT64_C(64) << 30 },
	{ "4T", UINT64_C(4) << 40 },
	{ "2TiB", UINT64_C(2) << 40 },
	{ "2P", UINT64_C(2) << 50 },
	{ "1.5T", UINT64_C(3) << 39 },
	{ "3.5T", UINT64_C(7) << 39 },
	{ "0.25K", 256 },
	{ "1.5", 1 }, /* no fractional bytes */
	{ "1.0000000001G", UINT64_C(1) << 30 }, /* nine places count */
	{ "16777215T", UINT64_C(16777215) << 40 },
	{ "17179869183G", UINT64_C(17179869183) << 30 },
	{ "18446744073709551615", UINT64_MAX },
};

static const struct {
	const char *s;
	int err;
} bad[] = {
	{ "", -EINVAL },
	{ "G", -EINVAL },
	{ "K1", -EINVAL },
	{ "12Q", -EINVAL },
	{ "1X", -EINVAL },
	{ "-1", -EINVAL },
	{ "-0", -EINVAL },
	{ " -1", -EINVAL },
	{ "\t-5G", -EINVAL },
	{ " 1G", -EINVAL },
	{ "1G ", -EINVAL },
	{ "1 G", -EINVAL },
	{ "1.G", -EINVAL },
	{ ".5G", -EINVAL },
	{ "1GG", -EINVAL },
	{ "1GiBx", -EINVAL },
	{ "1KiBB", -EINVAL },
	{ "1BB", -EINVAL },
	{ "1iB", -EINVAL },
	{ "0x10", -EINVAL },
	{ "99999999999999999999G", -ERANGE },
	{ "18446744073709551616", -ERANGE },
	{ "17179869184G", -ERANGE },
	{ "16777216T", -ERANGE },
	{ "16384P", -ERANGE },
	{ "18014398509481984K", -ERANGE },
};

static void test_parse(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		uint64_t v = 0xdead;
		int r = kvt_size_parse(good[i].s, &v);
		CHECK(r == 0 && v == good[i].v, "\"%s\": %d, %" PRIu64, good[i].s, r, v);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		uint64_t v = 0xdead;
		int r = kvt_size_parse(bad[i].s, &v);
		CHECK(r == bad[i].err, "\"%s\": %d, wanted %d", bad[i].s, r, bad[i].err);
		CHECK(v == 0xdead, "\"%s\" wrote %" PRIu64, bad[i].s, v);
	}
	uint64_t v;
	CHECK(kvt_size_parse(NULL, &v) == -EINVAL);
}

static void test_format_exact(void)
{
	static const struct {
		uint64_t v;
		const char *s;
	} cases[] = {
		{ 0, "0" },
		{ 1, "1" },
		{ 4097, "4097" },
		{ 1024, "1K" },
		{ 1536 << 10, "1536K" },
		{ UINT64_C(64) << 30, "64G" },
		{ UINT64_C(3) << 50, "3P" },
		{ UINT64_C(1) << 60, "1024P" },
		{ UINT64_MAX, "18446744073709551615" },
	};
	char buf[KVT_SIZE_LEN];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		kvt_size_format_exact(cases[i].v, buf, sizeof(buf));
		CHECK(strcmp(buf, cases[i].s) == 0, "%" PRIu64 ": \"%s\"", cases[i].v, buf);
	}
	/* Every exact format reads back as the number it came from. */
	for (uint64_t v = 1; v; v = v * 3 + (v & 7)) {
		uint64_t back = 0;
		kvt_size_format_exact(v, buf, sizeof(buf));
		CHECK(kvt_size_parse(buf, &back) == 0 && back == v, "%" PRIu64 " -> %s", v, buf);
		if (v > UINT64_MAX / 4)
			break;
	}
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		uint64_t back = 0;
		kvt_size_format_exact(good[i].v, buf, sizeof(buf));
		CHECK(kvt_size_parse(buf, &back) == 0 && back == good[i].v, "%s", good[i].s);
	}
}

static void test_format(void)
{
	static const struct {
		uint64_t v;
		const char *s;
	} cases[] = {
		{ 0, "0 B" },
		{ 1023, "1023 B" },
		{ 1024, "1.0 KiB" },
		{ 1536, "1.5 KiB" },
		{ (UINT64_C(1) << 20) - 1, "1.0 MiB" }, /* not "1024.0 KiB" */
		{ UINT64_C(3) << 39, "1.5 TiB" },
		{ UINT64_MAX, "16384.0 PiB" },
	};
	char buf[KVT_SIZE_LEN];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		kvt_size_format(cases[i].v, buf, sizeof(buf));
		CHECK(strcmp(buf, cases[i].s) == 0, "%" PRIu64 ": \"%s\"", cases[i].v, buf);
	}
}

int main(void)
{
	test_parse();
	test_format_exact();
	test_format();
	return failures ? 1 : 0;
}
