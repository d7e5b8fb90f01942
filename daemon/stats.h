/* SPDX-License-Identifier: Apache-2.0 */
/* STATS replies: the daemon, tenants, namespaces and clients as records. */
#pragma once

#include <stdint.h>

struct session;

/* An admin (root or the daemon's own uid) sees every tenant; anyone else
 * sees only its own tenant, and nothing that reveals another's activity. */
void stats_reply(struct session *s, uint64_t request_id, uint32_t what);
