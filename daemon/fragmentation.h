/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fragmentation of a tenant's host memory: pure arithmetic over its slot
 * classes, so that it is unit-tested and the stats and the alert agree.
 *
 * A tenant's memory is extents, each cut into slots of one size (a class
 * per block size), and an extent is never returned before shutdown: a
 * client may be mapping it.  So memory a class holds and does not fill is
 * lost to every other class.  Three things measure that:
 *
 *   fill       bytes of block payload over bytes of extents (per class and
 *              per tenant): what the rest is, is padding (each shard rounded
 *              up to 4 KiB), the tail of an extent no slot fits in, and free
 *              slots.
 *   stranded   bytes of free slots in one class while another class of the
 *              tenant cannot get an extent (the quota or the pool is spent):
 *              memory that is free and yet of no use to the class that needs
 *              it.
 *   starved    allocations that had to evict (or were refused) while
 *              another class of the tenant held free slots.
 *
 * Ratios are in parts per million, and 1 (FRAG_PPM) when there is nothing
 * to divide by: memory not held is memory not wasted.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FRAG_PPM 1000000u

/* One slot class of a tenant, as fragmentation sees it. */
struct frag_class {
	uint64_t slot_bytes;
	uint64_t extent_bytes;      /* of its extents */
	uint64_t slots, used_slots; /* in its extents */
	uint64_t data_bytes;        /* payload of the blocks in its used slots */
	uint64_t next_extent_bytes; /* what one more extent of it takes */
};

struct frag_class_ratios {
	uint64_t free_bytes;    /* free slots × slot_bytes */
	uint64_t padding_bytes; /* used slots × slot_bytes − data_bytes */
	uint64_t tail_bytes;    /* extent_bytes − slots × slot_bytes */
	uint32_t fill_ppm;      /* data_bytes / extent_bytes */
	bool can_grow;          /* one more extent fits the room left */
};

struct frag_tenant {
	uint64_t extent_bytes, data_bytes, free_bytes;
	uint64_t stranded_bytes;
	uint32_t fill_ppm;
	bool fragmented; /* below the alert level with memory stranded */
};

/* part / whole in parts per million (at most FRAG_PPM), FRAG_PPM when
 * whole is 0. */
uint32_t frag_ratio_ppm(uint64_t part, uint64_t whole);

/* room: bytes the tenant may still allocate in extents (the smaller of
 * what its quota and the pool's capacity leave). */
void frag_class_compute(const struct frag_class *c, uint64_t room,
			struct frag_class_ratios *ret);

/* The tenant's totals over its n classes; ret_classes ([n], or NULL)
 * receives each class's own.  alert_ppm: [pool] fragmentation_alert, 0 for
 * off. */
void frag_tenant_compute(const struct frag_class *c, size_t n, uint64_t room,
			 uint32_t alert_ppm, struct frag_class_ratios *ret_classes,
			 struct frag_tenant *ret);

/* Class i needs a slot and has neither a free one nor room for an extent:
 * whether it is starved, that is whether another class holds free slots
 * it cannot use. */
bool frag_starved(const struct frag_class *c, size_t n, size_t i);
