/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Opening the spill files: O_DIRECT, an exclusive flock (a killed
 * predecessor's writes may still be landing), preallocated to their
 * capacity, cut into regions; and closing them.  Every refusal says what
 * to do about it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "size.h"
#include "spill-private.h"
#include "spill.h"

static int open_error(const char *path, int r)
{
	char *copy = strdup(path);
	const char *dir = copy ? dirname(copy) : "its directory";

	switch (-r) {
	case ENOENT:
	case ENOTDIR:
		r = log_error_errno(r, "Directory '%s' of spill file '%s' does not exist: %m; create it (owned by kvtierd's user, mode 0700) or choose another path",
				    dir, path);
		break;
	case EROFS:
		r = log_error_errno(r, "Spill file '%s' is on a read-only file system: %m. Under systemd, ProtectSystem=strict leaves only listed paths writable: add a drop-in (systemctl edit kvtierd) with ReadWritePaths=%s, or keep spill files in the default CacheDirectory /var/cache/kvtierd",
				    path, dir);
		break;
	case EACCES:
	case EPERM:
		r = log_error_errno(r, "Cannot open spill file '%s': %m; kvtierd's user needs write access to '%s' and the file",
				    path, dir);
		break;
	case EISDIR:
		r = log_error_errno(r, "Spill file '%s' is a directory; give the path of a file (it is created)",
				    path);
		break;
	case EINVAL:
		r = log_error_errno(r, "The file system of spill file '%s' does not support O_DIRECT: %m. Spill I/O bypasses the page cache; put the file on a local file system that supports it, such as ext4 or XFS",
				    path);
		break;
	default:
		r = log_error_errno(r, "Failed to open spill file '%s': %m", path);
		break;
	}
	free(copy);
	return r;
}

static int open_direct(const char *path)
{
	const char *no_direct = getenv(SPILL_NO_DIRECT_ENV);
	int fd;

	if (no_direct && strcmp(no_direct, "1") == 0)
		return -EINVAL;
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	int r = -errno;
	if (r == -EINVAL) {
		/* EINVAL from open() means O_DIRECT unless the plain open fails
		 * too, for its own reason. */
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return errno == EINVAL ? -EIO : -errno;
		close(fd);
	}
	return r;
}

/* A killed predecessor's I/O can still be landing in the file and holds its
 * lock until it does: wait for it a little before calling it a conflict. */
static int lock_file(const char *path, int fd)
{
	uint64_t start = kvt_now_ns();
	bool said = false;

	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			if (said)
				log_info("Locked spill file '%s' after %" PRIu64 " ms", path,
					 (kvt_now_ns() - start) / 1000000);
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK)
			return log_error_errno(-errno, "Failed to lock spill file '%s': %m", path);
		if (kvt_now_ns() - start >= (uint64_t)SPILL_LOCK_WAIT_MS * 1000000)
			return log_error_errno(-EBUSY, "Another kvtierd holds spill file '%s' (flock): stop it first, or give this instance other spill paths",
					       path);
		if (!said) {
			log_info("Spill file '%s' is locked; waiting up to %d ms for a previous instance's I/O to finish",
				 path, SPILL_LOCK_WAIT_MS);
			said = true;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000000 }, NULL);
	}
}

static int check_dio_alignment(const char *path, int fd)
{
#ifdef STATX_DIOALIGN
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > SPILL_ALIGN)
		return log_error_errno(-EINVAL, "Spill file '%s' needs O_DIRECT I/O aligned to %" PRIu32 " bytes; kvtier aligns to %u. Use a device or file system with 4 KiB (or 512-byte) logical blocks",
				       path, stx.stx_dio_offset_align, SPILL_ALIGN);
#endif
	return 0;
}

static int preallocate(struct spill_file *f, const struct stat *st)
{
	char want[32], have[32];
	struct statvfs sv;
	uint64_t allocated = (uint64_t)st->st_blocks * 512;
	uint64_t need = f->capacity > allocated ? f->capacity - allocated : 0;

	/* Ask first: ext4 would fill the file system block by block before
	 * giving up with ENOSPC. */
	if (need > 0 && fstatvfs(f->fd, &sv) == 0 &&
	    (uint64_t)sv.f_bavail * sv.f_frsize < need)
		return log_error_errno(-ENOSPC, "Not enough space on the file system for spill file '%s': %s requested, %s free (statvfs); lower its capacity or free space",
				       f->path, kvt_size_format_exact(f->capacity, want, sizeof(want)),
				       kvt_size_format_exact((uint64_t)sv.f_bavail * sv.f_frsize, have, sizeof(have)));

	/* Mode 0 extends a shorter file and never shrinks a longer one; blocks
	 * already allocated, and their data, stay. */
	if (fallocate(f->fd, 0, 0, (off_t)f->capacity) == 0)
		return 0;
	int r = -errno;
	struct stat now;
	if (fstat(f->fd, &now) == 0 && now.st_size > st->st_size &&
	    ftruncate(f->fd, st->st_size) < 0)
		log_warning_errno(-errno, "Failed to give the space of spill file '%s' back after a failed preallocation, ignoring: %m",
				  f->path);
	switch (-r) {
	case ENOSPC:
	case EDQUOT:
		if (fstatvfs(f->fd, &sv) < 0)
			memset(&sv, 0, sizeof(sv));
		return log_error_errno(r, "Not enough space on the file system for spill file '%s': %s requested, %s free (statvfs); lower its capacity or free space",
				       f->path, kvt_size_format_exact(f->capacity, want, sizeof(want)),
				       kvt_size_format_exact((uint64_t)sv.f_bavail * sv.f_frsize, have, sizeof(have)));
	case EOPNOTSUPP:
		return log_error_errno(r, "The file system of spill file '%s' cannot preallocate (fallocate: %m); O_DIRECT writes into unallocated space are serialised, so use ext4 or XFS",
				       f->path);
	case EFBIG:
		return log_error_errno(r, "Capacity %s of spill file '%s' exceeds the largest file its file system allows: %m",
				       kvt_size_format_exact(f->capacity, want, sizeof(want)), f->path);
	default:
		return log_error_errno(r, "Failed to preallocate spill file '%s' to %s: %m",
				       f->path, kvt_size_format_exact(f->capacity, want, sizeof(want)));
	}
}

static int file_open(struct spill *s, struct spill_file *f, const struct spill_file_conf *c)
{
	char buf[32], buf2[32];
	struct stat st;
	int r;

	f->capacity = c->capacity;
	if (c->capacity < SPILL_REGION_BYTES)
		return log_error_errno(-EINVAL, "Spill file '%s': capacity %s is too small: at least 64M (one region)",
				       c->path, kvt_size_format_exact(c->capacity, buf, sizeof(buf)));
	if (c->capacity / SPILL_REGION_BYTES > UINT32_MAX)
		return log_error_errno(-EFBIG, "Spill file '%s': capacity %s is too large",
				       c->path, kvt_size_format_exact(c->capacity, buf, sizeof(buf)));
	f->path = strdup(c->path);
	if (!f->path)
		return -ENOMEM;

	f->fd = open_direct(c->path);
	if (f->fd < 0) {
		r = f->fd;
		f->fd = -1;
		return open_error(c->path, r);
	}
	if (fstat(f->fd, &st) < 0)
		return log_error_errno(-errno, "Failed to stat spill file '%s': %m", c->path);
	if (!S_ISREG(st.st_mode))
		return log_error_errno(-EINVAL, "Spill file '%s' is not a regular file", c->path);
	/* Before locking: our own lock on the first path would otherwise read
	 * as another daemon's. */
	for (struct spill_file *o = s->files; o < f; o++) {
		struct stat ost;
		if (fstat(o->fd, &ost) == 0 && ost.st_dev == st.st_dev && ost.st_ino == st.st_ino)
			return log_error_errno(-EINVAL, "Spill files '%s' and '%s' are the same file; list each file once",
					       o->path, c->path);
	}
	r = lock_file(c->path, f->fd);
	if (r < 0)
		return r;
	r = check_dio_alignment(c->path, f->fd);
	if (r < 0)
		return r;
	/* Again: it may have changed while we waited for the lock. */
	if (fstat(f->fd, &st) < 0)
		return log_error_errno(-errno, "Failed to stat spill file '%s': %m", c->path);
	r = preallocate(f, &st);
	if (r < 0)
		return r;
	if ((uint64_t)st.st_size > c->capacity)
		log_notice("Spill file '%s' is %s, larger than its capacity %s: only the first %s are used and the rest is left as it is (truncate the file to reclaim it)",
			   c->path, kvt_size_format_exact((uint64_t)st.st_size, buf, sizeof(buf)),
			   kvt_size_format_exact(c->capacity, buf2, sizeof(buf2)), buf2);
	else if ((uint64_t)st.st_size < c->capacity && st.st_size > 0)
		log_info("Spill file '%s' extended from %s to its capacity %s", c->path,
			 kvt_size_format_exact((uint64_t)st.st_size, buf, sizeof(buf)),
			 kvt_size_format_exact(c->capacity, buf2, sizeof(buf2)));

	f->n_regions = (uint32_t)(c->capacity / SPILL_REGION_BYTES);
	f->regions = calloc(f->n_regions, sizeof(*f->regions));
	if (!f->regions)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->n_regions; i++) {
		f->regions[i].file = f;
		f->regions[i].index = i;
		f->regions[i].offset = (uint64_t)i * SPILL_REGION_BYTES;
	}
	if (c->capacity % SPILL_REGION_BYTES)
		log_info("Spill file '%s': the last %s of its capacity are less than a region (64M) and stay unused",
			 c->path, kvt_size_format_exact(c->capacity % SPILL_REGION_BYTES, buf, sizeof(buf)));
	return 0;
}

int spill_open(const struct spill_file_conf *conf, unsigned n, struct spill **ret)
{
	struct spill *s;
	int r;

	if (n == 0 || !conf)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->next_seq = 1;
	TAILQ_INIT(&s->empty);
	TAILQ_INIT(&s->kept);
	s->n_buckets = SPILL_BINDING_BUCKETS;
	s->buckets = calloc(s->n_buckets, sizeof(*s->buckets));
	s->owners = calloc(SPILL_OWNER_BUCKETS, sizeof(*s->owners));
	s->files = calloc(n, sizeof(*s->files));
	if (!s->buckets || !s->owners || !s->files) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < n; i++) {
		s->files[i].fd = -1;
		s->files[i].spill = s;
		s->files[i].number = i;
		TAILQ_INIT(&s->files[i].unbound);
	}
	s->n_files = n;
	for (unsigned i = 0; i < n; i++) {
		if (!conf[i].path || !conf[i].path[0]) {
			r = log_error_errno(-EINVAL, "Spill file %u has no path", i + 1);
			goto fail;
		}
		r = file_open(s, &s->files[i], &conf[i]);
		if (r < 0)
			goto fail;
	}
	*ret = s;
	return 0;
fail:
	spill_free(s);
	return r;
}

void spill_free(struct spill *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->n_files; i++) {
		struct spill_file *f = &s->files[i];
		for (uint32_t j = 0; f->regions && j < f->n_regions; j++) {
			slots_free(&f->regions[j].slots);
			free(f->regions[j].header);
		}
		free(f->regions);
		if (f->fd >= 0)
			close(f->fd);
		free(f->path);
	}
	for (uint32_t i = 0; s->buckets && i < s->n_buckets; i++)
		while (s->buckets[i]) {
			struct spill_binding *b = s->buckets[i];
			s->buckets[i] = b->hash_next;
			free(b->identity);
			free(b);
		}
	for (uint32_t i = 0; s->owners && i < SPILL_OWNER_BUCKETS; i++)
		while (s->owners[i]) {
			struct spill_owner *o = s->owners[i];
			s->owners[i] = o->hash_next;
			free(o);
		}
	free(s->buckets);
	free(s->owners);
	free(s->files);
	free(s);
}
