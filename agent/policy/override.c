/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime overrides (override.h): the stored value's text, the agent's
 * table of them (open addressing on the check key, built once per fetch,
 * read-only after), and the effect of one on a check. No I/O, no clock.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "override.h"
#include "util.h"

struct ov_entry {
	const char     *key; /* into the table's text */
	size_t          keylen;
	uint64_t        hash;
	struct ov_value v;
};

struct ov_table {
	struct ov_entry *e;
	size_t           n;
	uint32_t        *slot; /* entry index + 1; 0 empty */
	size_t           mask;
	char            *text; /* the keys */
};

static const char *const kind_names[] = {
	[OV_NONE] = "none",
	[OV_LIMIT] = "limit",
	[OV_ALLOW] = "allow",
	[OV_DENY] = "deny",
};

void
ov_format(const struct ov_value *v, char *buf, size_t size)
{
	assert(v->kind > OV_NONE && v->kind <= OV_DENY);
	if (v->kind != OV_LIMIT) {
		snprintf(buf, size, "%s %" PRId64, kind_names[v->kind],
		         v->expires_us);
		return;
	}
	snprintf(buf, size,
	         "limit %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %d",
	         v->expires_us, v->rate, v->period_us, v->burst,
	         (int)v->calendar);
}

/* A non-negative decimal at *<p> (before <end>), no leading zero, then
 * a space and more, or the end. */
static int
num(const char **p, const char *end, int64_t *out)
{
	const char *s = *p;
	int64_t     n = 0;

	if (s >= end || *s < '0' || *s > '9' ||
	    (*s == '0' && s + 1 < end && s[1] >= '0' && s[1] <= '9'))
		return -1; /* one spelling per number */
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		if (n > (INT64_MAX - 9) / 10)
			return -1;
		n = n * 10 + (*s - '0');
	}
	if (s < end && (*s++ != ' ' || s == end)) /* no trailing space */
		return -1;
	*p = s;
	*out = n;
	return 0;
}

/* The kind word at *<p> and the space after it. */
static enum ov_kind
kind_of(const char **p, const char *end)
{
	for (int k = OV_LIMIT; k <= OV_DENY; k++) {
		size_t n = strlen(kind_names[k]);

		if ((size_t)(end - *p) > n &&
		    memcmp(*p, kind_names[k], n) == 0 && (*p)[n] == ' ') {
			*p += n + 1;
			return (enum ov_kind)k;
		}
	}
	return OV_NONE;
}

int
ov_parse(const char *s, size_t len, struct ov_value *v)
{
	const char *p = s, *end = s + len;
	int64_t     cal = 0;

	memset(v, 0, sizeof(*v));
	if ((v->kind = kind_of(&p, end)) == OV_NONE ||
	    num(&p, end, &v->expires_us) == -1)
		return -1;
	if (v->kind != OV_LIMIT)
		return p == end ? 0 : -1;
	if (num(&p, end, &v->rate) == -1 || num(&p, end, &v->period_us) == -1 ||
	    num(&p, end, &v->burst) == -1 || num(&p, end, &cal) == -1 ||
	    p != end || cal > LIM_CAL_MONTH || v->rate == 0)
		return -1;
	v->calendar = (enum lim_calendar)cal;
	return 0;
}

int
ov_limit(const struct lim_params *lim, const struct ov_value *v,
         struct lim_params *out, const char **err)
{
	assert(v->kind == OV_LIMIT);
	*out = *lim;
	out->rate = v->rate;
	if (v->period_us > 0) {
		out->period_us = v->period_us;
		out->calendar = v->calendar;
	}
	if (v->burst > 0)
		out->burst = v->burst;
	return lim_params_init(out, err);
}

/* ---- the table ---------------------------------------------------------- */

static uint64_t
hash_key(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 */

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
	return h;
}

/* Reads one "<keylen> <key> <value>\n" at *<p>; -1 when it does not. */
static int
parse_entry(const char **p, const char *end, struct ov_entry *e)
{
	const char *s = *p, *nl;
	int64_t     klen;

	if (num(&s, end, &klen) == -1 || klen == 0 || klen > POLICY_KEY_MAX ||
	    end - s < klen + 1 || s[klen] != ' ')
		return -1;
	e->key = s;
	e->keylen = (size_t)klen;
	s += klen + 1;
	if (!(nl = memchr(s, '\n', (size_t)(end - s))))
		return -1;
	*p = nl + 1;
	return ov_parse(s, (size_t)(nl - s), &e->v);
}

/* Skips to the line after *<p> (the key may hold a '\n': by length). */
static void
skip_entry(const char **p, const char *end)
{
	const char *s = *p;
	int64_t     klen;

	if (num(&s, end, &klen) == 0 && klen < end - s)
		s += klen;
	s = memchr(s, '\n', (size_t)(end - s));
	*p = s ? s + 1 : end;
}

static void
insert(struct ov_table *t, size_t i)
{
	size_t at = t->e[i].hash & t->mask;

	while (t->slot[at] != 0)
		at = (at + 1) & t->mask;
	t->slot[at] = (uint32_t)i + 1;
}

/* Entries <s> can hold: one per '\n', at most OV_MAX. */
static size_t
max_entries(const char *s, size_t len)
{
	size_t n = 0;

	for (const char *p = s;
	     n < OV_MAX && (p = memchr(p, '\n', len - (size_t)(p - s))); p++)
		n++;
	return n;
}

struct ov_table *
ov_table_parse(const char *s, size_t len, int *bad)
{
	struct ov_table *t = xcalloc(1, sizeof(*t));
	const char      *p, *end;
	size_t           cap = 2, room;

	*bad = 0;
	if (len > OV_ALL_MAX) {
		*bad = 1;
		len = 0;
	}
	t->text = xmalloc(len + 1);
	memcpy(t->text, s, len);
	p = t->text;
	end = t->text + len;
	room = max_entries(t->text, len);
	t->e = xcalloc(room + 1, sizeof(*t->e));
	while (p < end) {
		const char *at = p;

		if (t->n == room || parse_entry(&p, end, &t->e[t->n]) == -1) {
			++*bad;
			p = at;
			skip_entry(&p, end);
			continue;
		}
		t->e[t->n].hash = hash_key(t->e[t->n].key, t->e[t->n].keylen);
		t->n++;
	}
	while (cap < 2 * t->n)
		cap *= 2;
	t->mask = cap - 1;
	t->slot = xcalloc(cap, sizeof(*t->slot));
	for (size_t i = 0; i < t->n; i++)
		insert(t, i);
	return t;
}

void
ov_table_free(struct ov_table *t)
{
	if (!t)
		return;
	free(t->e);
	free(t->slot);
	free(t->text);
	free(t);
}

size_t
ov_table_count(const struct ov_table *t)
{
	return t ? t->n : 0;
}

static const struct ov_entry *
lookup(const struct ov_table *t, const char *key, size_t len)
{
	uint64_t h = hash_key(key, len);

	for (size_t at = h & t->mask; t->slot[at] != 0;
	     at = (at + 1) & t->mask) {
		const struct ov_entry *e = &t->e[t->slot[at] - 1];

		if (e->hash == h && e->keylen == len &&
		    memcmp(e->key, key, len) == 0)
			return e;
	}
	return NULL;
}

/* The refusal of a deny override: until its expiry, or, without one, at
 * least OV_DENY_RETRY (the rule's window when longer). */
static void
deny_result(const struct ov_value *v, const struct lim_params *lim,
            int64_t now_us, struct lim_result *res)
{
	int64_t retry = v->expires_us - now_us;

	if (v->expires_us == 0) {
		retry = lim_window_s(lim) * LIM_USEC_PER_SEC;
		if (retry < OV_DENY_RETRY)
			retry = OV_DENY_RETRY;
	}
	*res = (struct lim_result){ .allowed = 0,
		                    .remaining = 0,
		                    .retry_after_us = retry,
		                    .next_us = retry,
		                    .full_us = retry };
}

enum ov_kind
ov_apply(const struct ov_table *t, struct check *c, int64_t now_us,
         struct lim_result *res)
{
	const struct ov_entry *e;
	struct lim_params      lim;
	const char            *err;

	if (!t || t->n == 0 || c->kind != CHECK_EVAL || c->op == LIM_OP_RELEASE)
		return OV_NONE;
	if (!(e = lookup(t, c->key, c->keylen)) ||
	    (e->v.expires_us != 0 && e->v.expires_us <= now_us))
		return OV_NONE;
	switch (e->v.kind) {
	case OV_LIMIT:
		if (ov_limit(&c->lim, &e->v, &lim, &err) == -1)
			return OV_NONE;
		c->lim = lim;
		return OV_LIMIT;
	case OV_DENY:
		if (c->op != LIM_OP_CHECK && c->op != LIM_OP_PEEK)
			return OV_NONE;
		deny_result(&e->v, &c->lim, now_us, res);
		return OV_DENY;
	case OV_ALLOW:
		/* a settle (a reserving rule's FORCE with the request id) is
		 * applied whatever its request says (limiter.h): dropped, its
		 * reservation stayed charged past the override */
		if (c->op == LIM_OP_FORCE && c->memberlen > 0 &&
		    c->lim.reserve_lease_us > 0)
			return OV_NONE;
		return OV_ALLOW;
	default:
		return OV_NONE;
	}
}

/* ---- making one --------------------------------------------------------- */

/* Fills <m> with the string args of <pairs>; -1 and <err> on a bad one. */
static int
pairs_message(struct spop_message *m, const char *const *pairs, int n,
              char *err, size_t errsize)
{
	memset(m, 0, sizeof(*m));
	if (n > SPOP_MAX_ARGS) {
		snprintf(err, errsize, "too many args (at most %d)",
		         SPOP_MAX_ARGS);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		const char      *eq = strchr(pairs[i], '=');
		struct spop_arg *a = &m->args[i];

		if (!eq || eq == pairs[i] || eq[1] == '\0') {
			snprintf(err, errsize, "\"%.64s\": want ARG=VALUE",
			         pairs[i]);
			return -1;
		}
		a->name.ptr = pairs[i];
		a->name.len = (size_t)(eq - pairs[i]);
		for (int j = 0; j < i; j++)
			if (m->args[j].name.len == a->name.len &&
			    memcmp(m->args[j].name.ptr, a->name.ptr,
			           a->name.len) == 0) {
				snprintf(err, errsize, "%.*s given twice",
				         (int)a->name.len > 64 ? 64
				                               : (int)a->name.len,
				         a->name.ptr);
				return -1;
			}
		a->value.type = SPOP_DATA_STRING;
		a->value.v.str.ptr = eq + 1;
		a->value.v.str.len = strlen(eq + 1);
		m->nargs = m->nargs_total = i + 1;
	}
	return 0;
}

/* 1 if template <t> names the arg <a>. */
static int
names_arg(const struct tmpl *t, const struct spop_arg *a)
{
	for (int i = 0; i < keys_nvars(t); i++)
		if (strlen(keys_var(t, i)) == a->name.len &&
		    memcmp(keys_var(t, i), a->name.ptr, a->name.len) == 0)
			return 1;
	return 0;
}

const struct rule *
ov_rule_key(const struct policy *p, const char *name, const char *const *pairs,
            int n, char *key, size_t *keylen, char *err, size_t errsize)
{
	const struct rule  *r = NULL;
	struct spop_message m;

	for (int i = 0; i < p->nrules && !r; i++)
		if (strcmp(p->rules[i].name, name) == 0)
			r = &p->rules[i];
	if (!r) {
		snprintf(err, errsize, "unknown rule \"%.64s\"", name);
		return NULL;
	}
	if (pairs_message(&m, pairs, n, err, errsize) == -1)
		return NULL;
	for (int i = 0; i < m.nargs; i++)
		if (!names_arg(r->key, &m.args[i]) &&
		    !(r->fallback && names_arg(r->fallback, &m.args[i]))) {
			snprintf(err, errsize,
			         "rule %s's key \"%s\" has no {%.*s}", r->name,
			         keys_source(r->key), (int)m.args[i].name.len,
			         m.args[i].name.ptr);
			return NULL;
		}
	/* as policy.c's build_key: the key, else its fallback (missing:) */
	if (keys_expand(r->key, &m, r->key_prefix, "}", key, POLICY_KEY_MAX,
	                keylen) != 0 &&
	    (r->missing != MISSING_FALLBACK || r->fallback == NULL ||
	     keys_expand(r->fallback, &m, r->key_prefix, "}", key,
	                 POLICY_KEY_MAX, keylen) != 0)) {
		snprintf(err, errsize,
		         "rule %s's key \"%s\" needs every one of "
		         "its {args}",
		         r->name, keys_source(r->key));
		return NULL;
	}
	return r;
}

/* 1 for the algorithms limited by a rate (and burst). */
static int
rate_family(enum lim_algo a)
{
	return a == LIM_GCRA || a == LIM_TOKEN_BUCKET || a == LIM_LEAKY_BUCKET;
}

static int
make_limit(const struct rule *r, const struct ov_request *q, struct ov_value *v,
           const char **err)
{
	enum lim_algo a = r->lim.algo;

	if (rate_family(a)) {
		if (!q->rate || q->limit || q->window) {
			*err = "this rule's algorithm takes --rate N/period "
			       "[--burst N]";
			return -1;
		}
		if (lim_parse_rate(q->rate, &v->rate, &v->period_us,
		                   &v->calendar) == -1) {
			*err = "--rate: want N/period (100/s, 600/min, 5/15m)";
			return -1;
		}
		v->burst = q->burst;
		return 0;
	}
	if (q->rate || q->burst || q->limit <= 0 ||
	    (q->window && a == LIM_CONCURRENCY)) {
		*err = a == LIM_CONCURRENCY
		               ? "a concurrency rule takes --limit N"
		               : "this rule's algorithm takes --limit N [--window D]";
		return -1;
	}
	v->rate = q->limit;
	if (q->window && (lim_parse_duration(q->window, &v->period_us) == -1 ||
	                  v->period_us <= 0)) {
		*err = "--window: want a positive duration (30s, 15m, 1h, 1d)";
		return -1;
	}
	return 0;
}

int
ov_make(const struct rule *r, const struct ov_request *q, struct ov_value *v,
        const char **err)
{
	struct lim_params lim;

	memset(v, 0, sizeof(*v));
	v->kind = q->kind;
	if (q->ttl_us < 0) {
		*err = "--ttl must be a positive duration";
		return -1;
	}
	if (q->kind != OV_LIMIT) {
		if (q->rate || q->burst || q->limit || q->window) {
			*err = "--allow and --deny take no --rate, --burst, "
			       "--limit or --window";
			return -1;
		}
		return 0;
	}
	if (make_limit(r, q, v, err) == -1)
		return -1;
	return ov_limit(&r->lim, v, &lim, err);
}

#define XSTR(x) STR(x)
#define STR(x)  #x

/* Expired entries go first, so that they never count against OV_MAX; the
 * cap counts "o:" fields only ("all", "gen", "resets" are no overrides);
 * the entry being set or deleted is left to its op (a "del" of an expired
 * one still finds it). The generation moves to Redis' now in µs (one more
 * when that is not past it), not one more only: a hash lost with a
 * restart or a failover would count again from 1, and an agent that held
 * the old table at that gen would keep it. */
const char ov_script[] =
	"local h, op, k = KEYS[1], ARGV[1], ARGV[2]\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	"local r, live, kv = 1, {}, redis.call('HGETALL', h)\n"
	"for i = 1, #kv, 2 do\n"
	"  local f = kv[i]\n"
	"  if string.sub(f, 1, 2) == 'o:' and f ~= 'o:' .. k then\n"
	"    local e = tonumber(string.match(kv[i + 1], '^%a+ (%d+)'))\n"
	"    if e and e ~= 0 and e <= now then\n"
	"      redis.call('HDEL', h, f)\n"
	"    else\n"
	"      live[#live + 1] = { string.sub(f, 3), kv[i + 1] }\n"
	"    end\n"
	"  end\n"
	"end\n"
	"if op == 'set' then\n"
	"  local v, ttl = ARGV[3], tonumber(ARGV[4])\n"
	"  if #live >= " XSTR(OV_MAX) " then\n"
	"    return redis.error_reply('too many overrides')\n"
	"  end\n"
	"  if ttl > 0 then\n"
	"    v = string.gsub(v, '^(%a+) 0', '%1 ' ..\n"
	"        string.format('%d', now + ttl), 1)\n"
	"  end\n"
	"  redis.call('HSET', h, 'o:' .. k, v)\n"
	"  live[#live + 1] = { k, v }\n"
	"else\n"
	"  r = redis.call('HDEL', h, 'o:' .. k)\n"
	"end\n"
	"local all = {}\n"
	"for _, e in ipairs(live) do\n"
	"  all[#all + 1] = #e[1] .. ' ' .. e[1] .. ' ' .. e[2] .. '\\n'\n"
	"end\n"
	"redis.call('HSET', h, 'all', table.concat(all))\n"
	"local g = tonumber(redis.call('HGET', h, 'gen')) or 0\n"
	"redis.call('HSET', h, 'gen',\n"
	"    string.format('%d', math.max(g + 1, now)))\n"
	"return r\n";
