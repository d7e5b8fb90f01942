/* SPDX-License-Identifier: Apache-2.0 */
/* Fragmentation of a tenant's host memory (fragmentation.h). */
#include "fragmentation.h"

uint32_t frag_ratio_ppm(uint64_t part, uint64_t whole)
{
	if (whole == 0 || part >= whole)
		return FRAG_PPM;
	/* 128 bits: part × 10^6 overflows 64 bits from 18 TB. */
	return (uint32_t)((unsigned __int128)part * FRAG_PPM / whole);
}

static uint64_t sub_or_zero(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

void frag_class_compute(const struct frag_class *c, uint64_t room,
			struct frag_class_ratios *ret)
{
	uint64_t slot_total = c->slots * c->slot_bytes;
	uint64_t used = c->used_slots * c->slot_bytes;

	ret->free_bytes = sub_or_zero(slot_total, used);
	/* Slots being staged into count as used before their block is
	 * resident: padding is never negative. */
	ret->padding_bytes = sub_or_zero(used, c->data_bytes);
	ret->tail_bytes = sub_or_zero(c->extent_bytes, slot_total);
	ret->fill_ppm = frag_ratio_ppm(c->data_bytes, c->extent_bytes);
	ret->can_grow = c->next_extent_bytes <= room;
}

void frag_tenant_compute(const struct frag_class *c, size_t n, uint64_t room,
			 uint32_t alert_ppm, struct frag_class_ratios *ret_classes,
			 struct frag_tenant *ret)
{
	size_t stuck = 0, stuck_at = 0;

	*ret = (struct frag_tenant){0};
	for (size_t i = 0; i < n; i++) {
		struct frag_class_ratios r;
		frag_class_compute(&c[i], room, &r);
		if (ret_classes)
			ret_classes[i] = r;
		ret->extent_bytes += c[i].extent_bytes;
		ret->data_bytes += c[i].data_bytes;
		ret->free_bytes += r.free_bytes;
		if (!r.can_grow) {
			stuck++;
			stuck_at = i;
		}
	}
	/* A class's free slots are stranded when some other class cannot
	 * grow: with two classes stuck every class has another that is. */
	for (size_t i = 0; i < n && stuck; i++)
		if (stuck > 1 || i != stuck_at) {
			struct frag_class_ratios r;
			frag_class_compute(&c[i], room, &r);
			ret->stranded_bytes += r.free_bytes;
		}
	ret->fill_ppm = frag_ratio_ppm(ret->data_bytes, ret->extent_bytes);
	/* Low fill alone is no alarm: a pool that has just started, or one
	 * class whose free slots it will fill itself, wastes nothing. */
	ret->fragmented = alert_ppm > 0 && ret->stranded_bytes > 0 && ret->fill_ppm < alert_ppm;
}

bool frag_starved(const struct frag_class *c, size_t n, size_t i)
{
	for (size_t j = 0; j < n; j++)
		if (j != i && c[j].slots > c[j].used_slots)
			return true;
	return false;
}
