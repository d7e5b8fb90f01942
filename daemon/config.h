/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "evict.h"

enum hugepage_mode {
	HUGEPAGES_AUTO,    /* hugetlb if reserved, else shmem THP, else 4 KiB */
	HUGEPAGES_HUGETLB, /* reserved hugetlb pages only */
	HUGEPAGES_THP,     /* shmem THP only (needs shmem_enabled=advise) */
	HUGEPAGES_OFF,
};

enum numa_mode {
	NUMA_AUTO, /* place extents near the client's GPU */
	NUMA_OFF,
};

enum lock_mode {
	LOCK_AUTO, /* mlock where the limits allow, else say why not */
	LOCK_YES,  /* refuse to create an extent that cannot be locked */
	LOCK_NO,
};

#define CONFIG_MAX_TENANTS 256
#define CONFIG_MAX_IDS 64
#define CONFIG_MAX_TENANT_NAME 31

#define CONFIG_MAX_SPILL_FILES 64

/* [pool] extent_size.  The upper bound is one io_uring fixed buffer: every
 * slot lies inside one, so it is also the largest block (slot) the daemon
 * holds; NS_OPEN refuses a larger geometry with -EFBIG. */
#define CONFIG_EXTENT_SIZE_MIN (UINT64_C(2) << 20)
#define CONFIG_EXTENT_SIZE_MAX (UINT64_C(1) << 30)
#define CONFIG_SLOT_BYTES_MAX CONFIG_EXTENT_SIZE_MAX

/* [limits] output_bytes */
#define CONFIG_OUTPUT_BYTES_MIN (UINT64_C(2) << 20)
#define CONFIG_OUTPUT_BYTES_MAX (UINT64_C(1) << 30)

/* [nvme] recovery: whether clients are served before the spill files are
 * recovered. */
enum nvme_recovery {
	NVME_RECOVERY_FOREGROUND, /* "foreground": listen once recovered */
	NVME_RECOVERY_BACKGROUND, /* "background": listen first */
};

enum nvme_engine {
	NVME_ENGINE_AUTO,    /* io_uring where the kernel allows, else threads */
	NVME_ENGINE_URING,
	NVME_ENGINE_THREADS, /* pread/pwrite on worker threads */
};

/* [spill.NAME]: one spill file of the NVMe tier. */
struct spill_conf {
	char name[CONFIG_MAX_TENANT_NAME + 1];
	char *path;
	uint64_t capacity;
};

#define CONFIG_MAX_REMOTES 8

/* [remote.NAME]: a RADOS pool the remote tier shares with other nodes
 * (config-remote.c; docs/remote.md). */
struct remote_conf {
	char name[CONFIG_MAX_TENANT_NAME + 1];
	char *ceph_conf;   /* ceph.conf: monitors, and the keyring unless below */
	char *user;        /* cephx id without "client." */
	char *keyring;     /* NULL: ceph.conf's */
	char *pool;
	uint64_t capacity; /* bytes its tenants keep in the pool, all nodes together */
	uint32_t timeout_ms;  /* every cluster operation's */
	uint32_t queue_depth; /* operations in flight */
	uint32_t min_reuse;   /* write back blocks loaded at least this often */
	uint32_t trim_interval_ms;
	uint32_t n_tenants;   /* 0: every configured tenant no other section names */
	char tenants[CONFIG_MAX_REMOTES * 4][CONFIG_MAX_TENANT_NAME + 1];
};

/* [tenant.NAME]: who belongs to a tenant and what it may hold. */
struct tenant_conf {
	char name[CONFIG_MAX_TENANT_NAME + 1];
	uint32_t n_uids, n_gids;
	uint32_t uids[CONFIG_MAX_IDS];
	uint32_t gids[CONFIG_MAX_IDS]; /* primary or supplementary groups */
	uint64_t quota;                /* 0: [tenants] default_quota */
	uint64_t nvme_quota;           /* 0: [tenants] default_nvme_quota */
	uint32_t codecs;               /* 1 << KVT_CODEC_* it may open; 0: any */
	char *socket;                  /* its own listening socket, or NULL */
	bool socket_dir;               /* socket is DIR/kvtierd.sock of socket_dir = DIR,
					* a directory of its own that pods mount */
	uint32_t socket_mode;          /* 0660 (default), or 0666 with socket_dir: who
					* mounts DIR decides, not the peer's ids */
};

/* The name of a tenant's socket in its socket_dir: the main socket's, so that
 * a pod that mounts the directory where the main socket would be needs no
 * path of its own. */
#define CONFIG_TENANT_SOCKET_NAME "kvtierd.sock"

struct config {
	/* [daemon] */
	char *socket_path;
	char *runtime_dir;
	uint32_t quarantine_ms;
	int log_level;
	uint32_t n_admin_gids; /* groups whose members may administer */
	uint32_t admin_gids[CONFIG_MAX_IDS];
	uint32_t handshake_timeout_ms;

	/* [pool] */
	uint64_t capacity;
	uint64_t extent_size;
	enum hugepage_mode hugepages;
	enum lock_mode lock;
	enum numa_mode numa;
	bool keep; /* the host tier outlives the daemon (keep.h, ledger.h) */
	enum evict_policy eviction;
	char *sysfs_root; /* topology source; NULL for the real /sys */
	/* Warn when a tenant's fill falls below this while memory is stranded
	 * (fragmentation.h); parts per million, 0: off. */
	uint32_t fragmentation_alert_ppm;

	/* [tenants] */
	uint64_t default_quota;
	uint64_t default_nvme_quota;
	bool refuse_unknown;

	struct tenant_conf *tenants;
	uint32_t n_tenants;

	/* [nvme] and [spill.NAME] */
	enum nvme_engine nvme_engine;
	uint32_t nvme_queue_depth;
	uint32_t writeback_high; /* percent of a tenant's quota */
	uint32_t writeback_low;
	enum nvme_recovery nvme_recovery;
	struct spill_conf *spills;
	uint32_t n_spills;

	/* [remote.NAME] */
	struct remote_conf *remotes;
	uint32_t n_remotes;

	/* [metrics] */
	char *metrics_listen; /* the scrape endpoint's address; NULL: none */

	/* [limits] */
	uint32_t max_connections;
	uint32_t max_connections_per_uid;
	uint32_t max_namespaces;
	uint32_t max_keys;
	uint32_t max_handles;
	uint32_t partial_block_ms; /* a block's shards all committed within this */
	uint64_t max_output_bytes;
};

/* Built-in defaults; socket and runtime paths depend on who runs us. */
int config_defaults(struct config *c);
/* Parse FILE over the current values; errors name file:line and the key. */
int config_load(struct config *c, const char *path);
void config_free(struct config *c);
/* Take the keys of a reloaded configuration that apply live into cur (and
 * its tenants; fresh gets cur's old ones, to free); name them in changed,
 * and the keys that differ but need a restart in restart (comma-separated,
 * cut to their sizes). */
void config_reload(struct config *cur, struct config *fresh, char *changed, size_t changed_size,
		   char *restart, size_t restart_size);
/* Write the effective configuration in the file's own syntax. */
void config_dump(const struct config *c, FILE *f);

/* config-remote.c: one key of [remote.NAME] (errors logged, file:line);
 * the sections' checks once the file is read; their dump; freeing them. */
int config_remote_item(struct config *c, const char *path, int line, const char *name,
		       const char *key, const char *value);
int config_remote_validate(const struct config *c, const char *path);
void config_remote_dump(const struct config *c, FILE *f);
void config_remote_free(struct config *c);
/* The section that serves a configured tenant, or NULL: uid tenants stay
 * local (uids differ between nodes). */
const struct remote_conf *config_remote_for(const struct config *c, const char *tenant);
bool config_name_ok(const char *s);

/* The configured tenant of that name, or NULL. */
const struct tenant_conf *config_tenant(const struct config *c, const char *name);

