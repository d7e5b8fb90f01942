/* SPDX-License-Identifier: Apache-2.0 */
/* Namespaces: opening one (its identity and geometry), closing it, its info. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client-internal.h"

KVT_EXPORT int kvt_ns_open(kvt_client *c, const kvt_ns_desc *d, kvt_ns **ret)
{
	struct kvt_identity id;
	struct kvt_buf b;
	int r;

	if (!c || !d || !ret || !d->model || (d->n_groups && !d->groups) ||
	    d->n_groups > KVT_MAX_GROUPS || d->weights_len > KVT_MAX_FINGERPRINT ||
	    d->salt_len > KVT_MAX_FINGERPRINT || (d->weights_len && !d->weights) ||
	    (d->salt_len && !d->salt) || strlen(d->model) > KVT_MAX_MODEL)
		return -EINVAL;

	memset(&id, 0, sizeof(id));
	id.key_scheme = KVT_KEY_SCHEME;
	strcpy(id.model, d->model);
	if (d->weights_len)
		memcpy(id.weights, d->weights, d->weights_len);
	id.weights_len = d->weights_len;
	id.layer_first = d->layer_first;
	id.layer_end = d->layer_end;
	id.tp_size = d->tp_size;
	id.cp_size = d->cp_size ? d->cp_size : 1;
	id.block_tokens = d->block_tokens;
	id.n_groups = d->n_groups;
	for (uint32_t i = 0; i < d->n_groups; i++) {
		const kvt_layer_group *g = &d->groups[i];
		id.groups[i] = (struct kvt_id_group){
			g->n_layers, g->attn,     g->window, g->planes,
			g->kv_heads, g->head_bytes, g->dtype, g->scale_layout,
		};
	}
	if (d->salt_len)
		memcpy(id.salt, d->salt, d->salt_len);
	id.salt_len = d->salt_len;
	id.codec = d->codec;

	kvt_buf_init(&b);
	r = kvt_identity_encode(&id, &b);
	if (r < 0) {
		kvt_buf_free(&b);
		return r;
	}
	kvt_ns *ns = calloc(1, sizeof(*ns));
	if (!ns) {
		kvt_buf_free(&b);
		return -ENOMEM;
	}
	ns->identity = b.data; /* keep the encoding for reconnects */
	ns->identity_len = (uint32_t)b.len;
	ns->c = c;
	ns->info.codec = id.codec;
	ns->n_groups = id.n_groups;
	for (uint32_t i = 0; i < id.n_groups; i++)
		ns->group_dtype[i] = id.groups[i].dtype;

	pthread_mutex_lock(&c->lock);
	r = client_ensure(c);
	if (r == 0)
		r = client_ns_reopen(c, ns);
	if (r == 0) {
		kvt_ns **nss = realloc(c->nss, sizeof(*nss) * (c->n_nss + 1));
		if (!nss)
			r = -ENOMEM;
		else {
			c->nss = nss;
			c->nss[c->n_nss++] = ns;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (r < 0) {
		free(ns->identity);
		free(ns);
		return r;
	}
	/* The namespace keeps the client's memory: it may outlive
	 * kvt_client_free (bindings free objects in any order). */
	client_ref(c);
	*ret = ns;
	return 0;
}

KVT_EXPORT void kvt_ns_close(kvt_ns *ns)
{
	if (!ns)
		return;
	kvt_client *c = ns->c;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < c->n_nss; i++)
		if (c->nss[i] == ns) {
			c->nss[i] = c->nss[--c->n_nss];
			break;
		}
	pthread_mutex_unlock(&c->lock);
	free(ns->identity);
	free(ns);
	client_unref(c);
}

KVT_EXPORT int kvt_ns_get_info(const kvt_ns *ns, kvt_ns_info *ret)
{
	if (!ns || !ret)
		return -EINVAL;
	*ret = ns->info;
	return 0;
}
