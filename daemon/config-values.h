/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The value parsers of kvtierd.conf's table (config.c): each reads one
 * value into its field, or returns -EINVAL (or -ERANGE) and sets *expect to
 * what would have been accepted, for the file:line error.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef int (*conf_parser)(const char *value, void *field, const char **ret_expect);

int conf_size(const char *v, void *field, const char **expect);      /* uint64_t, size.h */
int conf_u32(const char *v, void *field, const char **expect);       /* uint32_t */
int conf_string(const char *v, void *field, const char **expect);    /* char *, owned */
int conf_path(const char *v, void *field, const char **expect);      /* absolute path */
int conf_hugepages(const char *v, void *field, const char **expect); /* enum */
int conf_lock(const char *v, void *field, const char **expect);      /* enum */
int conf_numa(const char *v, void *field, const char **expect);      /* enum */
int conf_eviction(const char *v, void *field, const char **expect);  /* enum */
int conf_engine(const char *v, void *field, const char **expect);    /* enum */
int conf_recovery(const char *v, void *field, const char **expect);  /* enum */
int conf_percent(const char *v, void *field, const char **expect);   /* 0..100 */
int conf_ratio(const char *v, void *field, const char **expect);     /* 0..1: ppm */
int conf_unknown(const char *v, void *field, const char **expect);   /* bool */
int conf_bool(const char *v, void *field, const char **expect);      /* yes or no */
/* "127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464": a numeric address and a
 * port (0: any free one), as a string the caller parses again with
 * conf_listen_parse. */
int conf_listen(const char *v, void *field, const char **expect);    /* char *, owned */
struct sockaddr_storage;
/* \return 0 and the socket address, or -EINVAL */
int conf_listen_parse(const char *v, struct sockaddr_storage *ret, unsigned *ret_len);
int conf_log_level(const char *v, void *field, const char **expect); /* LOG_* */
/* "none fp8-e4m3" (blanks or commas between): a mask of 1 << KVT_CODEC_*. */
int conf_codecs(const char *v, void *field, const char **expect);    /* uint32_t */
/* "1000, alice 1002": numeric ids or names, for uids (or gids when
 * groups), appended to ids[*n]. */
int conf_ids(const char *v, bool groups, uint32_t *ids, uint32_t *n, const char **expect);
