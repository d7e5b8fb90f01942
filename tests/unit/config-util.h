/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the kvtierd.conf tests (test-config-*.c) share: a private
 * directory for their files, config_load with stderr captured, the table
 * runners for files that must be refused or accepted, and the file that
 * sets every key.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* The test's directory, made by config_test_begin. */
extern char conf_dir[64];

/* A file that sets every key (test-config-full.c says how it lands). */
extern const char full_conf[];

/* Makes the directory; plain "kvtierd: error: ..." lines, whatever runs
 * the test.  Exits 1 when it cannot. */
void config_test_begin(void);
/* Removes the directory and reports; returns the test's exit status. */
int config_test_end(const char *name);

/* Write content to DIR/name; the path is returned in a static buffer. */
const char *write_conf(const char *name, const char *content);
/* config_load with stderr captured into *ret_err (malloc'd). */
int load_captured(struct config *c, const char *path, char **ret_err);
/* Load text over the defaults; 0 and the config in *c, or the error (c
 * freed). */
int load_text(struct config *c, const char *text, char **ret_err);

bool has_ids(const uint32_t *ids, uint32_t n, const uint32_t *want,
	     uint32_t n_want);

/* A file config_load must refuse, and what the refusal must say. */
struct bad_case {
	const char *what;
	const char *text;
	int line;          /* where the error must be reported; 0: no line */
	const char *names; /* and a word the message must contain */
};

/* src_file:src_line, in the report of a file that loaded, is the
 * caller's. */
void run_bad(const char *src_file, int src_line, const struct bad_case *b);
/* A file config_load must accept. */
void run_good(const char *text);

#define RUN_BAD_CASES(cases)                                               \
	do {                                                               \
		for (size_t _i = 0; _i < sizeof(cases) / sizeof(cases[0]); \
		     _i++)                                                 \
			run_bad(__FILE__, __LINE__, &(cases)[_i]);         \
	} while (0)

#define RUN_GOOD_CASES(texts)                                              \
	do {                                                               \
		for (size_t _i = 0; _i < sizeof(texts) / sizeof(texts[0]); \
		     _i++)                                                 \
			run_good((texts)[_i]);                             \
	} while (0)
