/* SPDX-License-Identifier: Apache-2.0 */
/* The requests of a session: decoded, checked and handled by one table. */
#pragma once

struct session;

/* Handle every whole request buffered in the session's connection, until
 * it is dead or paused; a malformed one closes the session. */
void requests_process(struct session *s);
