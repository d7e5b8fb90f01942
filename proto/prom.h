/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STATS records as Prometheus text (exposition format 0.0.4), for
 * `kvtierctl metrics` and kvtierd's scrape endpoint alike.
 */
#pragma once

#include <stdio.h>

#include "snapshot.h"

/* What a scrape asks STATS for (KVT_STATS_* of kvt-proto.h or kvtier.h):
 * the clients are left out, their pids and names are no series. */
#define KVT_PROM_STATS (KVT_STATS_DAEMON | KVT_STATS_TENANTS | KVT_STATS_NAMESPACES)

/* Every series the records of s carry: kvtier_info from the daemon
 * record, then each family with its HELP and TYPE once.
 * \return 0, or -EIO when f failed */
int kvt_prom_write(FILE *f, const struct snapshot *s);
