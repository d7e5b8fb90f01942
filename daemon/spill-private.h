/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the spill module's files share and no one else uses.  They call one
 * another in one direction only: spill-recover.c calls spill-regions.c and
 * spill-format.c, spill-regions.c calls spill-format.c, and spill-files.c
 * calls neither (it opens and closes the files and frees what the others
 * made).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "byteorder.h"
#include "macro.h"
#include "spill.h"

/* The magic of a slot header: recovery tells a torn header (magic intact)
 * from bytes an earlier binding left behind (no magic). */
#define SPILL_SLOT_MAGIC "KVTSPSL1"

#define SPILL_BINDING_BUCKETS 1024u
#define SPILL_OWNER_BUCKETS 256u

/* spill-format.c: 1..SPILL_TENANT_MAX bytes, no NUL among them. */
bool spill_tenant_valid(const char *tenant, uint32_t len);

/* spill-regions.c */
/* Put r on exactly the lists its state calls for, and count it for the
 * tenant that holds it. */
void spill_region_relink(struct spill_region *r);
/* The binding of that triple; made (with no region) when create is set.
 * NULL: none, or no memory. */
struct spill_binding *spill_binding_get(struct spill *s, const char *tenant,
					uint32_t tenant_len, const uint8_t *identity,
					uint32_t identity_len, uint64_t slot_bytes,
					bool create);
/* Free a binding that holds no region. */
void spill_binding_drop(struct spill *s, struct spill_binding *b);
/* Bind r to b.  With write_header, r->header gets the encoded header.
 * \return 0, -ENOMEM, or the encoder's -EINVAL */
int spill_region_bind(struct spill_region *r, struct spill_binding *b,
		      uint64_t generation, bool write_header);
/* spill_slot_free() without recovery's count of replaced copies. */
int spill_region_slot_release(struct spill_region *r, uint32_t slot);
