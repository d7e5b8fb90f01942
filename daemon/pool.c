/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "kvt-proto.h"
#include "log.h"
#include "macro.h"
#include "pool.h"

#define HUGE_PAGE (2ULL << 20)
#define POPULATE_CHUNK (64ULL << 20)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static long hugetlb_free_pages(void)
{
	return read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
}

static void read_shmem_thp(char *buf, size_t n)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");
	buf[0] = 0;
	if (f) {
		if (!fgets(buf, (int)n, f))
			buf[0] = 0;
		fclose(f);
	}
}

void pool_init(struct pool *p, const struct config *c)
{
	memset(p, 0, sizeof(*p));
	p->config = c;
	p->capacity = c->capacity;
}

void pool_probe(struct pool *p)
{
	struct pool_caps *caps = &p->caps;
	enum hugepage_mode mode = p->config->hugepages;
	char thp[128];

	p->watchdog = sd_watchdog_enabled(false, NULL) > 0;
	long free_pages = hugetlb_free_pages();
	if (mode == HUGEPAGES_OFF) {
		snprintf(caps->page_reason, sizeof(caps->page_reason),
			 "huge pages off by configuration");
	} else if ((mode == HUGEPAGES_AUTO || mode == HUGEPAGES_HUGETLB) &&
		   free_pages > 0 &&
		   (uint64_t)free_pages * HUGE_PAGE >= p->config->extent_size) {
		caps->hugetlb = true;
		snprintf(caps->page_reason, sizeof(caps->page_reason),
			 "hugetlb: %ld free 2 MiB pages", free_pages);
	} else {
		read_shmem_thp(thp, sizeof(thp));
		bool advise = strstr(thp, "[advise]") || strstr(thp, "[always]") ||
			      strstr(thp, "[within_size]");
		if (mode != HUGEPAGES_HUGETLB && advise) {
			caps->thp = true;
			snprintf(caps->page_reason, sizeof(caps->page_reason),
				 "shmem THP (no reserved hugetlb pages)");
		} else if (mode == HUGEPAGES_HUGETLB) {
			snprintf(caps->page_reason, sizeof(caps->page_reason),
				 "hugetlb required but %ld free 2 MiB pages (vm.nr_hugepages): extents will be refused",
				 free_pages < 0 ? 0 : free_pages);
		} else {
			char *nl = strchr(thp, '\n');
			if (nl)
				*nl = 0;
			snprintf(caps->page_reason, sizeof(caps->page_reason),
				 "4 KiB pages: no free hugetlb pages (vm.nr_hugepages) and shmem THP not in advise mode (shmem_enabled: %s)",
				 thp[0] ? thp : "unknown");
		}
	}

	struct rlimit rl;
	if (p->config->lock == LOCK_NO) {
		snprintf(caps->lock_reason, sizeof(caps->lock_reason),
			 "not locked: lock=no in configuration");
	} else if (geteuid() == 0 ||
		   (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
		    (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= p->capacity))) {
		caps->lockable = true;
		snprintf(caps->lock_reason, sizeof(caps->lock_reason), "locked");
	} else {
		snprintf(caps->lock_reason, sizeof(caps->lock_reason),
			 "not locked: RLIMIT_MEMLOCK %llu KiB is below the pool capacity; raise LimitMEMLOCK=",
			 (unsigned long long)rl.rlim_cur / 1024);
	}
	if (numa_topology_load(&p->topo, p->config->sysfs_root) < 0) {
		p->topo.n_nodes = 1;
		p->topo.nodes[0] = 0;
	}
	if (p->topo.n_nodes > 1 || p->config->sysfs_root)
		log_info("NUMA: %d node(s)%s%s; extents go near each client's GPU%s", p->topo.n_nodes,
			 p->config->sysfs_root ? " from " : "",
			 p->config->sysfs_root ? p->config->sysfs_root : "",
			 p->config->numa == NUMA_OFF ? " (off by configuration)" : "");
	log_info("Host pool: capacity %llu MiB in extents of %llu MiB; pages: %s; %s",
		 (unsigned long long)(p->capacity >> 20),
		 (unsigned long long)(p->config->extent_size >> 20),
		 caps->page_reason, caps->lock_reason);
}

uint64_t pool_extent_bytes(const struct pool *p, uint64_t slot_bytes)
{
	uint64_t want = p->config->extent_size;
	uint64_t n = want / slot_bytes;
	if (n == 0)
		n = 1;
	uint64_t bytes = n * slot_bytes;
	/* Whole huge pages, so hugetlb and THP can back every byte. */
	return (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

static int extent_make_fd(struct pool *p, uint64_t size, uint32_t *flags)
{
	int fd;

	if (p->caps.hugetlb) {
		fd = memfd_create("kvtier-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
		if (fd >= 0) {
			/* Reserve the pages now: with hugetlb a later shortage
			 * would be a SIGBUS, not an error. */
			if (ftruncate(fd, (off_t)size) == 0 &&
			    fallocate(fd, 0, 0, (off_t)size) == 0) {
				*flags |= KVT_EXTENT_HUGETLB;
				return fd;
			}
			log_warning_errno(-errno, "Failed to reserve %llu MiB of hugetlb pages, falling back to shmem: %m",
					  (unsigned long long)(size >> 20));
			close(fd);
		}
	}
	if (p->config->hugepages == HUGEPAGES_HUGETLB)
		return log_error_errno(-ENOMEM, "No hugetlb pages for a %llu MiB extent and hugepages=hugetlb allows nothing else; reserve more (vm.nr_hugepages)",
				       (unsigned long long)(size >> 20));
	fd = memfd_create("kvtier-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* Ask for the extent's pages on a node before they exist: population then
 * allocates them there, or nearby when the node is short. */
static bool place_on_node(struct pool *p, uint8_t *map, uint64_t size, int node)
{
	unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};

	if (node < 0 || p->config->numa == NUMA_OFF)
		return true;
	if (node >= 1024)
		return false;
	mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
	if (mbind(map, size, MPOL_PREFERRED, mask, 1024, 0) < 0) {
		if (!(p->warned & 2)) {
			p->warned |= 2;
			log_warning_errno(-errno, "Failed to place pool memory on NUMA node %d, using any node: %m",
					  node);
		}
		return false;
	}
	return true;
}

static int actual_node(uint8_t *map)
{
	int node = -1;
	if (get_mempolicy(&node, NULL, 0, map, MPOL_F_NODE | MPOL_F_ADDR) < 0)
		return -1;
	return node;
}

static int extent_map(struct extent *e, uint64_t size)
{
	if (fault_hit(FAULT_EXTENT)) {
		e->map = MAP_FAILED;
		errno = ENOMEM;
	} else {
		e->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
	}
	if (e->map == MAP_FAILED) {
		e->map = NULL;
		return log_error_errno(-errno, "Failed to map a new extent: %m");
	}
	return 0;
}

/* Populate now: allocation and zeroing happen here, once, and not in the
 * first copy a client makes into the slot.  In chunks, pinging the watchdog
 * between them: a 1 GiB extent takes seconds on 4 KiB pages and the loop
 * must not look hung meanwhile. */
static int extent_populate(struct pool *p, struct extent *e, uint64_t size)
{
	for (uint64_t off = 0; off < size; off += POPULATE_CHUNK) {
		uint64_t len = size - off < POPULATE_CHUNK ? size - off : POPULATE_CHUNK;
		if (madvise(e->map + off, len, MADV_POPULATE_WRITE) < 0) {
			if (errno != EINVAL)
				return log_error_errno(-errno, "Failed to populate a %llu MiB extent (out of memory?): %m",
						       (unsigned long long)(size >> 20));
			/* Kernels before 5.14: touch every page. */
			for (uint64_t o = off; o < off + len; o += 4096)
				e->map[o] = 0;
		}
		if (p->watchdog)
			sd_notify(false, "WATCHDOG=1");
	}
	return 0;
}

/* Lock the extent where the limits allow; lock=yes refuses one that
 * cannot be locked. */
static int extent_lock(struct pool *p, struct extent *e, uint64_t size, uint32_t *flags)
{
	if (p->caps.lockable) {
		if (mlock(e->map, size) == 0)
			*flags |= KVT_EXTENT_LOCKED;
		else if (p->config->lock == LOCK_YES)
			return log_error_errno(-errno, "Refusing an extent that cannot be locked (lock=yes): %m; raise LimitMEMLOCK=");
		else if (!(p->warned & 1)) {
			p->warned |= 1;
			log_warning_errno(-errno, "Failed to lock pool memory, continuing unlocked: %m");
		}
	} else if (p->config->lock == LOCK_YES) {
		return log_error_errno(-EPERM, "Refusing an unlocked extent (lock=yes): %s",
				       p->caps.lock_reason);
	}
	return 0;
}

static void extent_account(struct pool *p, struct extent *e)
{
	p->allocated += e->size;
	p->n_extents++;
	p->n_hugetlb += (e->flags & KVT_EXTENT_HUGETLB) != 0;
	p->n_thp += (e->flags & KVT_EXTENT_THP) != 0;
	p->n_locked += (e->flags & KVT_EXTENT_LOCKED) != 0;
}

int pool_extent_new(struct pool *p, uint32_t id, uint64_t slot_bytes, int node,
		    struct extent **ret)
{
	uint64_t size = pool_extent_bytes(p, slot_bytes);
	uint32_t flags = 0;
	int r;

	if (p->allocated + size > p->capacity)
		return -ENOSPC;

	struct extent *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->fd = -1;
	e->node = -1;

	uint64_t t0 = kvt_now_ns();
	r = extent_make_fd(p, size, &flags);
	if (r < 0) {
		log_error_errno(r, "Failed to create a %llu MiB memfd extent: %m",
				(unsigned long long)(size >> 20));
		goto fail;
	}
	e->fd = r;
	r = extent_map(e, size);
	if (r < 0)
		goto fail;
	bool placed = place_on_node(p, e->map, size, node);
	if (!(flags & KVT_EXTENT_HUGETLB) && p->caps.thp &&
	    madvise(e->map, size, MADV_HUGEPAGE) == 0)
		flags |= KVT_EXTENT_THP;
	r = extent_populate(p, e, size);
	if (r < 0)
		goto fail;
	r = extent_lock(p, e, size, &flags);
	if (r < 0)
		goto fail;
	p->populate_ns += kvt_now_ns() - t0;
	e->node = actual_node(e->map);
	e->for_node = node;
	if (node >= 0 && (!placed || e->node != node))
		p->numa_fallbacks++;

	if (fcntl(e->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = log_error_errno(-errno, "Failed to seal a pool extent: %m");
		goto fail;
	}

	r = slots_init(&e->slots, (uint32_t)(size / slot_bytes));
	if (r < 0)
		goto fail;
	e->id = id;
	e->size = size;
	e->slot_bytes = slot_bytes;
	e->flags = flags;
	extent_account(p, e);
	log_debug("Extent %u: %llu MiB, %u slots of %llu KiB, %s%s, node %d (asked %d)", e->id,
		  (unsigned long long)(size >> 20), e->slots.n,
		  (unsigned long long)(slot_bytes >> 10), pool_page_mode(e),
		  (flags & KVT_EXTENT_LOCKED) ? ", locked" : "", e->node, node);
	*ret = e;
	return 0;

fail:
	if (e->map)
		munmap(e->map, size);
	if (e->fd >= 0)
		close(e->fd);
	free(e);
	return r;
}

void pool_extent_free(struct pool *p, struct extent *e)
{
	if (!e)
		return;
	p->allocated -= e->size;
	p->n_extents--;
	p->n_hugetlb -= (e->flags & KVT_EXTENT_HUGETLB) != 0;
	p->n_thp -= (e->flags & KVT_EXTENT_THP) != 0;
	p->n_locked -= (e->flags & KVT_EXTENT_LOCKED) != 0;
	slots_free(&e->slots);
	munmap(e->map, e->size);
	close(e->fd);
	free(e);
}

static _Thread_local sigjmp_buf *guard_jump;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	if (guard_jump)
		siglongjmp(*guard_jump, 1);
	/* Not inside a guarded access: a real fault. */
	signal(SIGBUS, SIG_DFL);
	raise(SIGBUS);
}

static int guard_install(void)
{
	static bool installed;

	if (!installed) {
		struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, NULL) < 0)
			return -errno;
		installed = true;
	}
	return 0;
}

/* What a guarded access does, and its arguments. */
struct guarded {
	const void *src;
	void *dst;
	size_t len;
	uint64_t (*sum)(const void *, size_t);
	uint64_t result;
};

/* Run the access with SIGBUS (a page the client punched out of its
 * memfd) turned into -EFAULT.  One place, so that the jump buffer stays in
 * the frame that reads the memory. */
static int guarded_access(struct guarded *g)
{
	sigjmp_buf jump;
	int r = guard_install();

	if (r < 0)
		return r;
	if (sigsetjmp(jump, 1)) {
		guard_jump = NULL;
		return -EFAULT;
	}
	guard_jump = &jump;
	if (g->sum)
		g->result = g->sum(g->src, g->len);
	else
		memcpy(g->dst, g->src, g->len);
	guard_jump = NULL;
	return 0;
}

int pool_guarded_sum(const void *p, size_t len, uint64_t (*sum)(const void *, size_t),
		     uint64_t *ret)
{
	struct guarded g = {.src = p, .len = len, .sum = sum};
	int r = guarded_access(&g);

	if (r == 0)
		*ret = g.result;
	return r;
}

int pool_guarded_copy(void *dst, const void *src, size_t len)
{
	struct guarded g = {.src = src, .dst = dst, .len = len};
	return guarded_access(&g);
}

const char *pool_page_mode(const struct extent *e)
{
	if (e->flags & KVT_EXTENT_HUGETLB)
		return "hugetlb";
	if (e->flags & KVT_EXTENT_THP)
		return "thp";
	return "4k";
}
