/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl plan: what a model's KV cache costs per token, block and
 * context, and how much of it fits in each tier.  The arithmetic is in
 * plan-math.c; this is the command line and the printing.  It needs no
 * daemon, but asks a reachable one for its pool size when no tier size
 * was given.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "ctl.h"
#include "macro.h"
#include "plan-math.h"

struct plan_opts {
	const char *model;
	uint64_t layers, kv_heads, head_dim, latent_dim, bytes_per_token;
	bool mla;
	const char *dtype;
	const char *codec; /* NULL: none */
	uint64_t tokens, batch, block_tokens, tp;
	uint64_t host_capacity, nvme_capacity, remote_capacity;
	bool host_given, nvme_given, remote_given;
};

static struct plan_opts opts = {.batch = 1, .block_tokens = 16, .tp = 1};

struct tier {
	const char *name, *source;
	uint64_t capacity;
	struct plan_fit fit;
};

/* Everything plan prints. */
struct planned {
	const struct plan_preset *preset; /* NULL: no --model */
	bool custom_bpt;                  /* --bytes-per-token */
	const char *dtype;                /* NULL with --bytes-per-token */
	struct plan_geometry g;
	struct plan p;
	uint64_t bytes, rank_bytes, per_context; /* 0 without --tokens */
	struct tier tiers[2 + 8]; /* host, NVMe, the remote tiers */
	size_t n_tiers;
};

#define PLAN_USAGE(...) ctl_usage_error("kvtierctl plan", __VA_ARGS__)

static void list_presets(FILE *f, const char *indent)
{
	size_t n;
	const struct plan_preset *p = plan_presets(&n);

	for (size_t i = 0; i < n; i++) {
		if (p[i].mla)
			fprintf(f, "%s%-14s %-34s MLA, %u layers, latent %u, %s\n", indent,
				p[i].name, p[i].description, p[i].layers, p[i].latent_dim,
				p[i].dtype);
		else
			fprintf(f, "%s%-14s %-34s %u layers, %u KV heads, head dim %u, %s\n",
				indent, p[i].name, p[i].description, p[i].layers, p[i].kv_heads,
				p[i].head_dim, p[i].dtype);
	}
}

/* The options that contradict each other or the preset. */
static int plan_check_options(const struct plan_opts *o, struct planned *ret)
{
	if (o->model) {
		ret->preset = plan_preset_find(o->model);
		if (!ret->preset) {
			fprintf(stderr, "kvtierctl plan: no preset '%s'; the presets are:\n", o->model);
			list_presets(stderr, "  ");
			fprintf(stderr, "or describe the model with --layers, --kv-heads and --head-dim (MLA: --mla --layers --latent-dim).\n");
			return -EINVAL;
		}
	}
	ret->custom_bpt = o->bytes_per_token != 0;
	if (ret->custom_bpt &&
	    (o->model || o->layers || o->kv_heads || o->head_dim || o->latent_dim))
		return PLAN_USAGE("--bytes-per-token replaces the model geometry; drop --model, --layers, --kv-heads, --head-dim and --latent-dim");
	if (ret->custom_bpt && o->dtype)
		return PLAN_USAGE("--dtype has no effect with --bytes-per-token, which already counts the element size");
	ret->g.mla = ret->preset ? ret->preset->mla : o->mla;
	if (ret->preset && o->mla && !ret->preset->mla)
		return PLAN_USAGE("--mla: %s is not an MLA model", ret->preset->name);
	if (ret->g.mla && (o->kv_heads || o->head_dim))
		return PLAN_USAGE("an MLA cache has no KV heads: give --latent-dim (kv_lora_rank + rope head dim) instead of --kv-heads/--head-dim");
	if (!ret->g.mla && o->latent_dim)
		return PLAN_USAGE("--latent-dim is for MLA models: add --mla");
	return 0;
}

/* --codec: how kvtierd would store the blocks. */
static int plan_codec(const struct plan_opts *o, struct planned *ret)
{
	if (!o->codec)
		return 0;
	for (uint32_t c = 0; c < KVT_CODEC_COUNT; c++)
		if (!strcmp(o->codec, kvt_codec_name(c)))
			ret->g.codec = c;
	if (ret->g.codec == KVT_CODEC_NONE && strcmp(o->codec, "none"))
		return PLAN_USAGE("unknown --codec '%s'; one of: none, fp8-e4m3, int4", o->codec);
	if (ret->g.codec == KVT_CODEC_NONE)
		return 0;
	if (ret->custom_bpt)
		return PLAN_USAGE("--codec needs the model geometry (its head dimension), not --bytes-per-token");
	if (ret->g.dtype_bytes != 2 && ret->g.dtype_bytes != 4)
		return PLAN_USAGE("--codec quantises fp16, bf16 and fp32 caches; a %s cache is stored as it is", ret->dtype);
	return 0;
}

static int plan_dtype(const struct plan_opts *o, struct planned *ret)
{
	const struct plan_preset *preset = ret->preset;
	int dtype_bytes;

	ret->dtype = o->dtype ? o->dtype : preset ? preset->dtype : "fp16";
	dtype_bytes = plan_dtype_bytes(ret->dtype);
	if (dtype_bytes < 0) {
		size_t n;
		const struct plan_dtype *dt = plan_dtypes(&n);
		fprintf(stderr, "kvtierctl plan: unknown --dtype '%s'; one of:", ret->dtype);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, " %s", dt[i].name);
		fputs("\n", stderr);
		return -EINVAL;
	}
	ret->g.dtype_bytes = (uint64_t)dtype_bytes;
	return plan_codec(o, ret);
}

/* The model's geometry: the preset's, with explicit numbers over it (a
 * pipeline stage holds only some of the model's layers). */
static int plan_geometry(const struct plan_opts *o, struct planned *ret)
{
	const struct plan_preset *preset;
	struct plan_geometry *g = &ret->g;

	TRY(plan_check_options(o, ret));
	preset = ret->preset;
	g->tp = o->tp;
	g->block_tokens = o->block_tokens;
	if (ret->custom_bpt) {
		g->bytes_per_token = o->bytes_per_token;
		return 0;
	}
	g->layers = o->layers ? o->layers : preset ? preset->layers : 0;
	g->kv_heads = o->kv_heads ? o->kv_heads : preset ? preset->kv_heads : 0;
	g->head_dim = o->head_dim ? o->head_dim : preset ? preset->head_dim : 0;
	g->latent_dim = o->latent_dim ? o->latent_dim : preset ? preset->latent_dim : 0;
	if (!g->layers && !g->kv_heads && !g->head_dim && !g->latent_dim && !g->mla)
		return PLAN_USAGE("which model? Give --model NAME, --layers/--kv-heads/--head-dim, --mla --layers --latent-dim, or --bytes-per-token");
	if (!g->layers)
		return PLAN_USAGE("missing --layers");
	if (g->mla && !g->latent_dim)
		return PLAN_USAGE("missing --latent-dim (kv_lora_rank + rope head dim, 576 for DeepSeek-V3)");
	if (!g->mla && !g->kv_heads)
		return PLAN_USAGE("missing --kv-heads");
	if (!g->mla && !g->head_dim)
		return PLAN_USAGE("missing --head-dim");
	return plan_dtype(o, ret);
}

/* Bytes per token, block and context, and the notes on what kvtierd
 * would not accept. */
static int plan_figures(const struct plan_opts *o, struct planned *ret)
{
	const struct plan_geometry *g = &ret->g;
	struct plan *p = &ret->p;
	char a[KVT_SIZE_LEN];
	int r;

	r = plan_compute(g, p);
	if (r == -EOVERFLOW)
		return PLAN_USAGE("the figures pass 2^64 bytes; check the inputs");
	if (r == -EINVAL && ret->custom_bpt)
		return PLAN_USAGE("--bytes-per-token %" PRIu64 " does not split evenly over --tp %" PRIu64,
				  g->bytes_per_token, g->tp);
	if (r == -EINVAL)
		return PLAN_USAGE("--tp %" PRIu64 " and %" PRIu64 " KV heads: the ranks must split the heads evenly, or each hold a replica of one",
				  g->tp, g->kv_heads);
	if (r < 0)
		return PLAN_USAGE("%s", strerror(-r));
	if (o->tokens) {
		r = plan_context_bytes(p, o->tokens, o->batch, &ret->bytes, &ret->rank_bytes);
		if (r < 0)
			return PLAN_USAGE("--tokens %" PRIu64 " x --batch %" PRIu64 " passes 2^64 bytes",
					  o->tokens, o->batch);
		ret->per_context = o->tokens / p->block_tokens + (o->tokens % p->block_tokens != 0);
	}

	/* Not refusals: the plan is arithmetic, but the operator should know
	 * kvtierd would not open such a namespace. */
	if (g->tp > PLAN_MAX_TP)
		fprintf(stderr, "kvtierctl plan: note: kvtierd accepts at most %u tensor-parallel ranks\n",
			PLAN_MAX_TP);
	if (p->block_tokens > PLAN_MAX_BLOCK_TOKENS)
		fprintf(stderr, "kvtierctl plan: note: kvtierd accepts at most %u tokens per block\n",
			PLAN_MAX_BLOCK_TOKENS);
	if (p->slot_bytes > PLAN_MAX_SLOT_BYTES)
		fprintf(stderr, "kvtierctl plan: note: a block of %s is past kvtierd's 1 GiB limit; use fewer --block-tokens\n",
			kvt_size_format(p->slot_bytes, a, sizeof(a)));
	return 0;
}

/* The host tier from a reachable daemon's pool; silence when there is
 * none, because plan is as useful on a laptop as on a serving node. */
static void plan_daemon_capacity(struct ctx *x, struct planned *ret)
{
	const struct rec *d;
	int r;

	/* The library's own deadline, not the alarm: the alarm ends the
	 * program, and a silent daemon must not cost plan its answer. */
	setenv("KVTIER_TIMEOUT_MS", "3000", 0);
	r = ctl_client_connect(x);
	if (r < 0) {
		if (x->verbose)
			fprintf(stderr, "kvtierctl plan: no kvtierd at %s (%s); no tier from it\n",
				x->socket, strerror(-r));
		return;
	}
	r = kvt_stats(x->client, KVT_STATS_DAEMON, snapshot_add, &x->snap);
	d = r >= 0 && x->snap.error >= 0 ? snapshot_find(&x->snap, "daemon") : NULL;
	if (!d || !rec_has(d, "capacity")) {
		if (x->verbose)
			fprintf(stderr, "kvtierctl plan: kvtierd at %s did not say its capacity%s\n",
				x->socket, d ? " (that needs root or kvtierd's uid)" : "");
		return;
	}
	ret->tiers[ret->n_tiers++] = (struct tier){.name = "host", .source = "kvtierd",
						   .capacity = rec_u64(d, "capacity")};
	for (size_t i = 0; i < x->snap.n && ret->n_tiers < ARRAY_SIZE(ret->tiers); i++)
		if (rec_is(&x->snap.recs[i], "remote"))
			ret->tiers[ret->n_tiers++] = (struct tier){
				.name = "remote", .source = "kvtierd",
				.capacity = rec_u64(&x->snap.recs[i], "capacity")};
}

/* A remote object is the block and a 4 KiB header (docs/remote.md): the
 * capacity that holds slots. */
static uint64_t remote_slot_capacity(const struct plan *p, uint64_t capacity)
{
	uint64_t per = p->slot_bytes * p->tp;
	return per ? (uint64_t)((double)capacity * (double)per / (double)(per + 4096)) : capacity;
}

static int plan_tiers(struct ctx *x, const struct plan_opts *o, struct planned *ret)
{
	if (o->host_given)
		ret->tiers[ret->n_tiers++] =
			(struct tier){"host", "--host-capacity", o->host_capacity, {0}};
	if (o->nvme_given)
		ret->tiers[ret->n_tiers++] =
			(struct tier){"nvme", "--nvme-capacity", o->nvme_capacity, {0}};
	if (o->remote_given)
		ret->tiers[ret->n_tiers++] =
			(struct tier){"remote", "--remote-capacity", o->remote_capacity, {0}};
	if (!o->host_given && !o->nvme_given && !o->remote_given)
		plan_daemon_capacity(x, ret);
	for (size_t i = 0; i < ret->n_tiers; i++) {
		struct tier *t = &ret->tiers[i];
		uint64_t cap = strcmp(t->name, "remote") ? t->capacity
							  : remote_slot_capacity(&ret->p, t->capacity);
		if (plan_fit(&ret->p, cap, o->tokens, o->batch, &t->fit) < 0)
			return PLAN_USAGE("the %s tier's token count passes 2^64", t->name);
	}
	return 0;
}

static void plan_print_json(const struct plan_opts *o, const struct planned *pl)
{
	const struct plan_geometry *g = &pl->g;
	const struct plan *p = &pl->p;
	bool geometry = !pl->custom_bpt, tokens = o->tokens != 0;
	struct json j = {.f = stdout};

	json_open(&j, '{');
	json_str_or_null(&j, "model", pl->preset ? pl->preset->name : NULL);
	json_str_or_null(&j, "attention",
			 pl->custom_bpt && !g->mla ? NULL : g->mla ? "mla" : "gqa");
	json_u64_or_null(&j, "layers", g->layers, geometry);
	json_u64_or_null(&j, "kv_heads", g->kv_heads, geometry && !g->mla);
	json_u64_or_null(&j, "head_dim", g->head_dim, geometry && !g->mla);
	json_u64_or_null(&j, "latent_dim", g->latent_dim, geometry && g->mla);
	json_str_or_null(&j, "dtype", pl->dtype);
	json_str_or_null(&j, "codec", kvt_codec_name(g->codec));
	json_u64_or_null(&j, "dtype_bytes", g->dtype_bytes, geometry);
	json_u64_or_null(&j, "tp", p->tp, true);
	json_u64_or_null(&j, "block_tokens", p->block_tokens, true);
	json_u64_or_null(&j, "tokens", o->tokens, tokens);
	json_u64_or_null(&j, "batch", o->batch, true);
	json_u64_or_null(&j, "bytes_per_token", p->bytes_per_token, true);
	json_u64_or_null(&j, "bytes_per_token_per_rank", p->bytes_per_token_rank, true);
	json_u64_or_null(&j, "shards", p->shards, true);
	json_u64_or_null(&j, "bytes_per_block", p->block_bytes, true);
	json_u64_or_null(&j, "slot_bytes", p->slot_bytes, true);
	json_u64_or_null(&j, "plain_slot_bytes", p->plain_slot_bytes, true);
	json_u64_or_null(&j, "blocks_per_context", pl->per_context, tokens);
	json_u64_or_null(&j, "bytes", pl->bytes, tokens);
	json_u64_or_null(&j, "bytes_per_rank", pl->rank_bytes, tokens);
	json_key(&j, "tiers");
	json_open(&j, '[');
	for (size_t i = 0; i < pl->n_tiers; i++) {
		const struct tier *t = &pl->tiers[i];
		json_open(&j, '{');
		json_str_or_null(&j, "tier", t->name);
		json_str_or_null(&j, "source", t->source);
		json_u64_or_null(&j, "capacity", t->capacity, true);
		json_u64_or_null(&j, "blocks", t->fit.blocks, true);
		json_u64_or_null(&j, "tokens", t->fit.tokens, true);
		json_u64_or_null(&j, "contexts", t->fit.contexts, tokens);
		json_u64_or_null(&j, "batches", t->fit.batches, tokens);
		json_close(&j, '}');
	}
	json_close(&j, ']');
	json_close(&j, '}');
}

static void plan_print_model(const struct planned *pl)
{
	const struct plan_preset *preset = pl->preset;
	const struct plan_geometry *g = &pl->g;
	char a[32];

	if (pl->custom_bpt)
		printf("%-18sgiven as %s bytes per token%s\n", "Model:",
		       fmt_count(a, sizeof(a), pl->p.bytes_per_token),
		       g->mla ? " (MLA: stored once)" : "");
	else if (g->mla)
		printf("%-18s%s%s%s%sMLA, %" PRIu64 " layers, latent %" PRIu64 ", %s (%" PRIu64 " B)\n",
		       "Model:", preset ? preset->name : "", preset ? " (" : "",
		       preset ? preset->description : "", preset ? "): " : "", g->layers,
		       g->latent_dim, pl->dtype, g->dtype_bytes);
	else
		printf("%-18s%s%s%s%sGQA, %" PRIu64 " layers, %" PRIu64 " KV heads, head dim %" PRIu64
		       ", %s (%" PRIu64 " B)\n",
		       "Model:", preset ? preset->name : "", preset ? " (" : "",
		       preset ? preset->description : "", preset ? "): " : "", g->layers,
		       g->kv_heads, g->head_dim, pl->dtype, g->dtype_bytes);
}

static void plan_print_figures(const struct plan_opts *o, const struct planned *pl)
{
	const struct plan_geometry *g = &pl->g;
	const struct plan *p = &pl->p;
	char a[32], b[32], c[32], d[32];

	printf("%-18s%s (%s)\n", "Bytes per token:", fmt_count(a, sizeof(a), p->bytes_per_token),
	       kvt_size_format(p->bytes_per_token, b, sizeof(b)));
	if (p->tp > 1 && g->mla)
		printf("%-18s%" PRIu64 " ranks; the latent is the same on each, stored once\n",
		       "Tensor parallel:", p->tp);
	else if (p->tp > 1)
		printf("%-18s%" PRIu64 " ranks, %s (%s) per token on each%s\n", "Tensor parallel:",
		       p->tp, fmt_count(a, sizeof(a), p->bytes_per_token_rank),
		       kvt_size_format(p->bytes_per_token_rank, b, sizeof(b)),
		       !pl->custom_bpt && g->kv_heads < g->tp ? " (KV heads replicated)" : "");
	printf("%-18s%s (%s) of %" PRIu64 " tokens; kvtierd slot %s (%s)\n", "Bytes per block:",
	       fmt_count(a, sizeof(a), p->block_bytes), kvt_size_format(p->block_bytes, b, sizeof(b)),
	       p->block_tokens, fmt_count(c, sizeof(c), p->slot_bytes),
	       kvt_size_format(p->slot_bytes, d, sizeof(d)));
	if (g->codec != KVT_CODEC_NONE)
		printf("%-18s%s, scales included: %s would need a slot of %s; %.2fx the blocks in each tier\n",
		       "Codec:", kvt_codec_name(g->codec), pl->dtype,
		       kvt_size_format(p->plain_slot_bytes, c, sizeof(c)),
		       (double)p->plain_slot_bytes / (double)p->slot_bytes);
	if (o->tokens) {
		printf("%-18s%s tokens x %" PRIu64 " = %s B (%s)", "Context:",
		       fmt_count(a, sizeof(a), o->tokens), o->batch,
		       fmt_count(b, sizeof(b), pl->bytes), kvt_size_format(pl->bytes, c, sizeof(c)));
		if (p->tp > 1 && !g->mla)
			printf("; %s per rank", kvt_size_format(pl->rank_bytes, d, sizeof(d)));
		printf("\n%-18s%s per context\n", "Blocks:", fmt_count(a, sizeof(a), pl->per_context));
	}
	putchar('\n');
}

/* The contexts and batches columns only when --tokens and --batch make
 * them mean something. */
static int plan_print_tiers(const struct plan_opts *o, const struct planned *pl)
{
	static const struct column cols[] = {
		{"TIER", false}, {"CAPACITY", true}, {"FROM", false}, {"BLOCKS", true},
		{"TOKENS", true}, {"CONTEXTS", true}, {"BATCHES", true},
	};
	struct table t = TABLE_INIT(cols, !o->tokens ? 5 : o->batch > 1 ? 7 : 6);
	char a[32];
	int r;

	if (pl->n_tiers == 0) {
		printf("No tiers: give --host-capacity/--nvme-capacity, or run this where kvtierd\n"
		       "is reachable (as root or its user) to size its host pool.\n");
		return 0;
	}
	for (size_t i = 0; i < pl->n_tiers; i++) {
		const struct tier *tr = &pl->tiers[i];
		table_add(&t, "%s", tr->name);
		table_add(&t, "%s", kvt_size_format(tr->capacity, a, sizeof(a)));
		table_add(&t, "%s", tr->source);
		table_add(&t, "%s", fmt_count(a, sizeof(a), tr->fit.blocks));
		table_add(&t, "%s", fmt_count(a, sizeof(a), tr->fit.tokens));
		if (t.n_cols > 5)
			table_add(&t, "%s", fmt_count(a, sizeof(a), tr->fit.contexts));
		if (t.n_cols > 6)
			table_add(&t, "%s", fmt_count(a, sizeof(a), tr->fit.batches));
	}
	r = table_print(&t, stdout);
	table_free(&t);
	return r;
}

static int plan_run(struct ctx *x)
{
	struct planned pl = {0};

	if (plan_geometry(&opts, &pl) < 0 || plan_figures(&opts, &pl) < 0 ||
	    plan_tiers(x, &opts, &pl) < 0)
		return EXIT_USAGE;
	if (x->json) {
		plan_print_json(&opts, &pl);
		return 0;
	}
	plan_print_model(&pl);
	plan_print_figures(&opts, &pl);
	return plan_print_tiers(&opts, &pl);
}

/* The indexes of plan_options. */
enum {
	OPT_MODEL, OPT_LAYERS, OPT_KV_HEADS, OPT_HEAD_DIM, OPT_MLA, OPT_LATENT_DIM,
	OPT_BPT, OPT_DTYPE, OPT_CODEC, OPT_TOKENS, OPT_BATCH, OPT_BLOCK_TOKENS, OPT_TP,
	OPT_HOST_CAP, OPT_NVME_CAP, OPT_REMOTE_CAP,
};

static const struct ctl_option plan_options[] = {
	{"model", true, 0, OPT_MODEL},
	{"layers", true, 0, OPT_LAYERS},
	{"kv-heads", true, 0, OPT_KV_HEADS},
	{"head-dim", true, 0, OPT_HEAD_DIM},
	{"mla", false, 0, OPT_MLA},
	{"latent-dim", true, 0, OPT_LATENT_DIM},
	{"bytes-per-token", true, 0, OPT_BPT},
	{"dtype", true, 0, OPT_DTYPE},
	{"codec", true, 0, OPT_CODEC},
	{"tokens", true, 0, OPT_TOKENS},
	{"batch", true, 0, OPT_BATCH},
	{"block-tokens", true, 0, OPT_BLOCK_TOKENS},
	{"tp", true, 0, OPT_TP},
	{"host-capacity", true, 0, OPT_HOST_CAP},
	{"nvme-capacity", true, 0, OPT_NVME_CAP},
	{"remote-capacity", true, 0, OPT_REMOTE_CAP},
	{},
};

/* Where each whole-number option lands. */
static uint64_t *count_opt(int id)
{
	switch (id) {
	case OPT_LAYERS: return &opts.layers;
	case OPT_KV_HEADS: return &opts.kv_heads;
	case OPT_HEAD_DIM: return &opts.head_dim;
	case OPT_LATENT_DIM: return &opts.latent_dim;
	case OPT_BPT: return &opts.bytes_per_token;
	case OPT_TOKENS: return &opts.tokens;
	case OPT_BATCH: return &opts.batch;
	case OPT_BLOCK_TOKENS: return &opts.block_tokens;
	case OPT_TP: return &opts.tp;
	default: return NULL;
	}
}

static int plan_parse(int id, const char *arg)
{
	char name[32];

	switch (id) {
	case OPT_MODEL:
		opts.model = arg;
		return 0;
	case OPT_MLA:
		opts.mla = true;
		return 0;
	case OPT_DTYPE:
		opts.dtype = arg;
		return 0;
	case OPT_CODEC:
		opts.codec = arg;
		return 0;
	case OPT_HOST_CAP:
		opts.host_given = true;
		return ctl_opt_size("--host-capacity", arg, &opts.host_capacity);
	case OPT_NVME_CAP:
		opts.nvme_given = true;
		return ctl_opt_size("--nvme-capacity", arg, &opts.nvme_capacity);
	case OPT_REMOTE_CAP:
		opts.remote_given = true;
		return ctl_opt_size("--remote-capacity", arg, &opts.remote_capacity);
	default:
		snprintf(name, sizeof(name), "--%s", plan_options[id].name);
		return ctl_opt_count(name, arg, 1, count_opt(id));
	}
}

static void plan_help(FILE *f)
{
	fputs("plan (needs no daemon):\n"
	      "      --model NAME      a preset (below); explicit options override its numbers\n"
	      "      --layers N --kv-heads N --head-dim N    an MHA/GQA model\n"
	      "      --mla --layers N --latent-dim N         an MLA model (latent = kv_lora_rank\n"
	      "                        + rope head dim; stored once, not per head or rank)\n"
	      "      --bytes-per-token N   skip the geometry: N bytes per token, all ranks\n"
	      "      --dtype T         fp16, bf16, fp8 (fp8_e4m3, fp8_e5m2), fp32 or int8\n"
	      "                        (default: the preset's, else fp16)\n"
	      "      --codec C         none, fp8-e4m3 or int4: blocks stored quantised (a\n"
	      "                        namespace's codec; fp16, bf16 and fp32 caches only),\n"
	      "                        with their scales; slots and what fits shrink to match\n"
	      "      --tokens N        context length (128K = 131072); adds per-context figures\n"
	      "      --batch N         contexts of that length at once (default 1)\n"
	      "      --block-tokens N  tokens per kvtier block (default 16)\n"
	      "      --tp N            tensor-parallel ranks: per-rank bytes too (default 1)\n"
	      "      --host-capacity SIZE, --nvme-capacity SIZE, --remote-capacity SIZE\n"
	      "                        tier sizes such as 64G, 1.5T or 512MiB (binary units).\n"
	      "                        Without any, a reachable kvtierd's pool capacity is\n"
	      "                        the host tier and each [remote.NAME] capacity a remote\n"
	      "                        tier (shared by every node; its objects carry a 4 KiB\n"
	      "                        header each); without that, no tier rows.\n"
	      "  Bytes per token: MHA/GQA 2 x layers x kv_heads x head_dim x dtype bytes;\n"
	      "  MLA layers x latent_dim x dtype bytes.  A tier holds whole kvtierd slots\n"
	      "  (each rank's share of a block rounded up to 4 KiB); tokens and contexts\n"
	      "  that fit round down, and a context counts its last partial block whole.\n"
	      "  Presets:\n",
	      f);
	list_presets(f, "    ");
	fputs("  plan --json prints one object: model, attention (\"gqa\", \"mla\"), layers,\n"
	      "  kv_heads, head_dim, latent_dim, dtype, dtype_bytes, codec, tp, block_tokens,\n"
	      "  tokens, batch, bytes_per_token, bytes_per_token_per_rank, shards,\n"
	      "  bytes_per_block, slot_bytes, plain_slot_bytes (the slot without the codec),\n"
	      "  blocks_per_context, bytes (tokens x batch x\n"
	      "  bytes_per_token), bytes_per_rank, and tiers: [{tier, source, capacity,\n"
	      "  blocks, tokens, contexts, batches}].  Every size is a number of bytes;\n"
	      "  what does not apply is null.\n",
	      f);
}

const struct ctl_command ctl_cmd_plan = {
	.name = "plan",
	.args = "",
	.needs = CTL_NEEDS_NONE,
	.json = true,
	.summary = "KV-cache bytes per token and block, and what fits in each tier",
	.help = plan_help,
	.options = plan_options,
	.parse = plan_parse,
	.run = plan_run,
};
