/* SPDX-License-Identifier: Apache-2.0 */
/* The requests of a session: decoded, checked and handled by one table. */
#pragma once

#include <stdbool.h>

struct manager;
struct session;
struct turn;

/* Handle the whole requests buffered in the session's connection for one
 * turn (turns.h), until it is dead or paused; a malformed one closes the
 * session.  \return true when work is left: a request under way, or
 * another whole one buffered. */
bool requests_process(struct session *s, const struct turn *turn);
/* Host memory that requests waited for may be ready: their sessions are
 * served again. */
void requests_memory_ready(struct manager *m);
/* An erasure of NVMe copies ended: the sessions whose DELETE or drop
 * waited for erasures look again. */
void requests_erasures_ended(struct manager *m);
