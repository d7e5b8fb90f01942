/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "records.h"

int snapshot_add(const kvt_record *src, void *userdata)
{
	struct snapshot *s = userdata;
	uint32_t n = kvt_record_n_fields(src);
	struct rec *r;

	s->error = snapshot_push(s, kvt_record_kind(src), n, &r);
	for (uint32_t i = 0; s->error == 0 && i < n; i++)
		s->error = rec_set(r, i, kvt_record_field_name(src, i), kvt_record_field_type(src, i),
				   kvt_record_field_u64(src, i), kvt_record_field_str(src, i));
	return s->error < 0;
}

double hit_rate(const struct rec *r)
{
	uint64_t hits = rec_u64(r, "hits"), misses = rec_u64(r, "misses");
	if (hits + misses == 0)
		return -1.0;
	return (double)hits / (double)(hits + misses);
}

double ratio_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : -1.0;
}
