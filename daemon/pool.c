/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <numaif.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
	p->ahead_efd = -1;
}

void pool_probe(struct pool *p)
{
	struct pool_caps *caps = &p->caps;
	enum hugepage_mode mode = p->config->hugepages;
	char thp[128];

	p->watchdog = sd_watchdog_enabled(false, NULL) > 0;
	p->ahead_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->ahead_efd < 0)
		log_warning_errno(-errno, "Failed to create an eventfd, staging waits for new extents in the loop: %m");
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
			 "not locked: RLIMIT_MEMLOCK %llu KiB is below the pool capacity; raise LimitMEMLOCK= (a container's: --ulimit memlock=-1)",
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

static int memfd_sized(uint64_t size, unsigned flags)
{
	int fd = memfd_create("kvtier-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* The extent's descriptor: made in the loop, so that the daemon's
 * descriptors change only with its requests (a hugetlb one may become a
 * shmem one in backing_reserve, under the same number). */
static int backing_open(const struct pool *p, struct backing *b)
{
	int fd = -1;

	if (p->caps.hugetlb) {
		fd = memfd_sized(b->size, MFD_HUGETLB);
		if (fd >= 0)
			b->flags |= KVT_EXTENT_HUGETLB;
	}
	if (fd < 0)
		fd = memfd_sized(b->size, 0);
	if (fd < 0)
		return log_error_errno(fd, "Failed to create a %llu MiB memfd extent: %m",
				       (unsigned long long)(b->size >> 20));
	b->fd = fd;
	return 0;
}

/* Reserve hugetlb pages now: with hugetlb a later shortage would be a
 * SIGBUS, not an error.  Short of them, shmem where the configuration
 * allows it. */
static int backing_reserve(const struct pool *p, struct backing *b)
{
	if (!(b->flags & KVT_EXTENT_HUGETLB) || fallocate(b->fd, 0, 0, (off_t)b->size) == 0)
		return 0;
	b->flags &= ~KVT_EXTENT_HUGETLB;
	if (p->config->hugepages == HUGEPAGES_HUGETLB)
		return log_error_errno(-ENOMEM, "No hugetlb pages for a %llu MiB extent and hugepages=hugetlb allows nothing else; reserve more (vm.nr_hugepages)",
				       (unsigned long long)(b->size >> 20));
	log_warning_errno(-errno, "Failed to reserve %llu MiB of hugetlb pages, falling back to shmem: %m",
			  (unsigned long long)(b->size >> 20));
	int fd = memfd_sized(b->size, 0);
	if (fd < 0)
		return log_error_errno(fd, "Failed to create a %llu MiB memfd extent: %m",
				       (unsigned long long)(b->size >> 20));
	int r = dup2(fd, b->fd) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Why mbind() failed, and what to do about it. */
static void place_reason(int error, char *buf, size_t n)
{
	if (error == EPERM || error == ENOSYS)
		snprintf(buf, n, "mbind() refused (%s): a seccomp filter (container runtimes' default profiles allow it only with CAP_SYS_NICE); give kvtierd CAP_SYS_NICE or, in a pod, the seccomp profile deploy/kubernetes/seccomp-kvtierd.json",
			 strerror(error));
	else
		snprintf(buf, n, "mbind() failed: %s", strerror(error));
}

/* Ask for the extent's pages on a node before they exist: population then
 * allocates them there, or nearby when the node is short.  0, or the errno
 * of mbind(). */
static int place_on_node(const struct pool *p, uint32_t *warned, uint8_t *map, uint64_t size,
			 int node)
{
	unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
	char why[256];

	if (node < 0 || p->config->numa == NUMA_OFF)
		return 0;
	if (node >= 1024)
		return EINVAL;
	mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
	if (mbind(map, size, MPOL_PREFERRED, mask, 1024, 0) < 0) {
		int error = errno;
		if (!(*warned & 2)) {
			*warned |= 2;
			place_reason(error, why, sizeof(why));
			log_warning("Failed to place pool memory on NUMA node %d, using any node: %s",
				    node, why);
		}
		return error;
	}
	return 0;
}

static int actual_node(uint8_t *map)
{
	int node = -1;
	if (get_mempolicy(&node, NULL, 0, map, MPOL_F_NODE | MPOL_F_ADDR) < 0)
		return -1;
	return node;
}

static int backing_map(struct backing *b)
{
	b->map = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
	if (b->map == MAP_FAILED) {
		b->map = NULL;
		return log_error_errno(-errno, "Failed to map a new extent: %m");
	}
	return 0;
}

/* Populate now: allocation and zeroing happen here, once, and not in the
 * first copy a client makes into the slot.  In chunks, pinging the watchdog
 * between them when in the loop: a 1 GiB extent takes seconds on 4 KiB
 * pages and the loop must not look hung meanwhile. */
static int backing_populate(const struct pool *p, struct backing *b, bool in_loop)
{
	for (uint64_t off = 0; off < b->size; off += POPULATE_CHUNK) {
		uint64_t len = b->size - off < POPULATE_CHUNK ? b->size - off : POPULATE_CHUNK;
		if (madvise(b->map + off, len, MADV_POPULATE_WRITE) < 0) {
			if (errno != EINVAL)
				return log_error_errno(-errno, "Failed to populate a %llu MiB extent (out of memory?): %m",
						       (unsigned long long)(b->size >> 20));
			/* Kernels before 5.14: touch every page. */
			for (uint64_t o = off; o < off + len; o += 4096)
				b->map[o] = 0;
		}
		if (in_loop && p->watchdog)
			sd_notify(false, "WATCHDOG=1");
	}
	return 0;
}

/* Lock the extent where the limits allow; lock=yes refuses one that
 * cannot be locked. */
static int backing_lock(const struct pool *p, uint32_t *warned, struct backing *b)
{
	if (p->caps.lockable) {
		if (mlock(b->map, b->size) == 0)
			b->flags |= KVT_EXTENT_LOCKED;
		else if (p->config->lock == LOCK_YES)
			return log_error_errno(-errno, "Refusing an extent that cannot be locked (lock=yes): %m; raise LimitMEMLOCK=");
		else if (!(*warned & 1)) {
			*warned |= 1;
			log_warning_errno(-errno, "Failed to lock pool memory, continuing unlocked: %m");
		}
	} else if (p->config->lock == LOCK_YES) {
		return log_error_errno(-EPERM, "Refusing an unlocked extent (lock=yes): %s",
				       p->caps.lock_reason);
	}
	return 0;
}

static void backing_free(struct backing *b)
{
	if (b->map)
		munmap(b->map, b->size);
	if (b->fd >= 0)
		close(b->fd);
	b->map = NULL;
	b->fd = -1;
}

/* The memory of an extent opened by backing_open(), on b->node where it
 * can be: reserved, mapped, placed, populated and locked.  Reads only the
 * pool's settings and what it probed, so that a thread can do it (warned:
 * the warnings given once, its own copy there). */
static int backing_make(const struct pool *p, uint32_t *warned, struct backing *b, bool in_loop)
{
	uint64_t t0 = kvt_now_ns();
	int r = backing_reserve(p, b);

	if (r >= 0)
		r = backing_map(b);
	if (r >= 0) {
		b->place_error = place_on_node(p, warned, b->map, b->size, b->node);
		b->placed = !b->place_error;
		if (!(b->flags & KVT_EXTENT_HUGETLB) && p->caps.thp &&
		    madvise(b->map, b->size, MADV_HUGEPAGE) == 0)
			b->flags |= KVT_EXTENT_THP;
		r = backing_populate(p, b, in_loop);
	}
	if (r >= 0)
		r = backing_lock(p, warned, b);
	if (r < 0)
		backing_free(b);
	b->populate_ns = kvt_now_ns() - t0;
	return r;
}

static void *ahead_main(void *arg)
{
	struct pool_ahead *a = arg;
	uint64_t one = 1;

	a->r = backing_make(a->pool, &a->warned, &a->b, false);
	atomic_store(&a->done, true);
	if (a->pool->ahead_efd >= 0)
		(void)!write(a->pool->ahead_efd, &one, sizeof(one));
	return NULL;
}

/* Wait for the extent made ahead; its time and warnings become the pool's.
 * \return 0 when it was made */
static int ahead_join(struct pool *p)
{
	struct pool_ahead *a = &p->ahead;

	if (!a->running)
		return -ENOENT;
	pthread_join(a->thread, NULL);
	a->running = false;
	p->warned |= a->warned;
	p->populate_ns += a->b.populate_ns;
	return a->r;
}

/* Its memory back to the system, made or not. */
static void ahead_drop(struct pool *p)
{
	if (ahead_join(p) == 0)
		backing_free(&p->ahead.b);
}

/* \return whether a thread is making it now */
static bool ahead_start(struct pool *p, uint64_t size, int node)
{
	struct pool_ahead *a = &p->ahead;

	if (a->running || p->allocated + size > p->capacity)
		return false;
	*a = (struct pool_ahead){.pool = p, .warned = p->warned};
	a->b = (struct backing){.fd = -1, .size = size, .node = node};
	if (backing_open(p, &a->b) < 0)
		return false;
	int r = pthread_create(&a->thread, NULL, ahead_main, a);
	if (r != 0) {
		backing_free(&a->b);
		if (!(p->warned & 4)) {
			p->warned |= 4;
			log_warning_errno(-r, "Failed to start making an extent ahead, making each when needed: %m");
		}
		return false;
	}
	a->running = true;
	return true;
}

void pool_set_capacity(struct pool *p, uint64_t capacity)
{
	p->capacity = capacity;
	if (p->ahead.running && p->allocated + p->ahead.b.size > capacity)
		ahead_drop(p);
}

void pool_make_ahead(struct pool *p, uint64_t slot_bytes, int node)
{
	ahead_start(p, pool_extent_bytes(p, slot_bytes), node);
}

int pool_ahead_fd(const struct pool *p)
{
	return p->ahead_efd;
}

void pool_ahead_clear(struct pool *p)
{
	uint64_t v;

	(void)!read(p->ahead_efd, &v, sizeof(v));
}

void pool_done(struct pool *p)
{
	ahead_drop(p);
	if (p->ahead_efd >= 0)
		close(p->ahead_efd);
	p->ahead_efd = -1;
}

/* The memory for an extent of size bytes on node (-1: any): the one made
 * ahead when it is that, else made now (after giving back one made ahead
 * for another size or node, when the capacity has no room for both).
 * Without wait, -EAGAIN instead of waiting for memory: while the one made
 * ahead is not finished, or once a thread has started making it. */
static int extent_backing(struct pool *p, uint64_t size, int node, bool wait,
			  struct backing *ret)
{
	struct pool_ahead *a = &p->ahead;

	if (p->ahead_efd < 0)
		wait = true; /* nothing would say when to ask again */
	if (!wait && a->running && !atomic_load(&a->done))
		return -EAGAIN;
	if (a->running && a->b.size == size && (node < 0 || a->b.node == node)) {
		int r = ahead_join(p);
		if (r == 0) {
			*ret = a->b;
			p->extents_ahead++;
			return 0;
		}
		if (!wait)
			return r; /* as if made now: it would fail the same way */
	}
	if (a->running && (!wait || p->allocated + a->b.size + size > p->capacity))
		ahead_drop(p);
	if (!wait && ahead_start(p, size, node))
		return -EAGAIN;
	*ret = (struct backing){.fd = -1, .size = size, .node = node};
	int r = backing_open(p, ret);
	if (r < 0)
		return r;
	r = backing_make(p, &p->warned, ret, true);
	p->populate_ns += ret->populate_ns;
	return r;
}

static void extent_account(struct pool *p, struct extent *e)
{
	p->allocated += e->size;
	p->n_extents++;
	p->n_hugetlb += (e->flags & KVT_EXTENT_HUGETLB) != 0;
	p->n_thp += (e->flags & KVT_EXTENT_THP) != 0;
	p->n_locked += (e->flags & KVT_EXTENT_LOCKED) != 0;
}

int pool_extent_new(struct pool *p, uint32_t id, uint64_t slot_bytes, int node, bool wait,
		    struct extent **ret)
{
	uint64_t size = pool_extent_bytes(p, slot_bytes);
	struct backing b = {.fd = -1};
	int r;

	if (p->allocated + size > p->capacity)
		return -ENOSPC;
	if (fault_hit(FAULT_EXTENT))
		return log_error_errno(-ENOMEM, "Failed to map a new extent: %m");

	struct extent *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	r = extent_backing(p, size, node, wait, &b);
	if (r < 0)
		goto fail;
	e->fd = b.fd;
	e->map = b.map;
	e->node = actual_node(e->map);
	e->for_node = b.node;
	if (node >= 0 && (!b.placed || e->node != node))
		p->numa_fallbacks++;
	if (b.place_error && !p->numa_reason[0]) {
		place_reason(b.place_error, p->numa_reason, sizeof(p->numa_reason));
		p->numa_reason_node = node;
	}

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
	e->flags = b.flags;
	extent_account(p, e);
	log_debug("Extent %u: %llu MiB, %u slots of %llu KiB, %s%s, node %d (asked %d)", e->id,
		  (unsigned long long)(size >> 20), e->slots.n,
		  (unsigned long long)(slot_bytes >> 10), pool_page_mode(e),
		  (b.flags & KVT_EXTENT_LOCKED) ? ", locked" : "", e->node, node);
	*ret = e;
	return 0;

fail:
	backing_free(&b);
	free(e);
	return r;
}

int pool_extent_adopt(struct pool *p, int fd, uint32_t id, uint64_t slot_bytes, uint64_t size,
		      uint32_t flags, int for_node, struct extent **ret)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	/* What a client was sent must still be what it promised: sealed,
	 * of the size it was, and a whole number of slots. */
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != size || seals < 0 ||
	    (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    slot_bytes == 0 || size / slot_bytes == 0 || size / slot_bytes > UINT32_MAX)
		return -EBADMSG;
	if (p->allocated + size > p->capacity)
		return -ENOSPC;
	struct extent *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (e->map == MAP_FAILED) {
		int r = -errno;
		free(e);
		return r;
	}
	int r = slots_init(&e->slots, (uint32_t)(size / slot_bytes));
	if (r < 0) {
		munmap(e->map, size);
		free(e);
		return r;
	}
	e->fd = fd;
	e->id = id;
	e->size = size;
	e->slot_bytes = slot_bytes;
	/* Its pages are there; locked again where the limits allow. */
	e->flags = flags & (KVT_EXTENT_HUGETLB | KVT_EXTENT_THP);
	if (p->caps.lockable && mlock(e->map, size) == 0)
		e->flags |= KVT_EXTENT_LOCKED;
	e->node = actual_node(e->map);
	e->for_node = for_node;
	extent_account(p, e);
	*ret = e;
	return 0;
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
	/* Atomic: the NVMe tier's workers guard their checksums too, on
	 * threads of their own; two that install it at once install the
	 * same handler. */
	static bool installed;

	if (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE)) {
		struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, NULL) < 0)
			return -errno;
		__atomic_store_n(&installed, true, __ATOMIC_RELEASE);
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
