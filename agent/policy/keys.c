/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Key templates: compile at load time, expand per request.
 *
 * A template is a list of parts, each a literal slice of the source or a
 * placeholder {arg} / {arg/N}. Expansion streams bytes through a sink that
 * stores what fits in the caller's buffer; once a byte does not fit, it
 * hashes the whole text (FNV-1a 64 and a multiply-xorshift mix with another
 * seed), so a key too long for Redis keeps a readable prefix and ends with
 * a 128-bit digest of the full text without a scratch buffer. A key that
 * fits is never hashed. Values are never
 * escaped beyond '{', '}', '%' and '~' (percent-encoded so values cannot
 * break the "rl:{...}" hash tag, distinct values stay distinct, and no
 * value spells out the "~<digest>" tail of a hashed key: the digest has
 * no secret, so such a value would share the key of a long one).
 *
 * Deliberately not here: rule matching and missing: modes (policy.c).
 * Compiled templates are immutable; expansion is reentrant and touches
 * only its arguments, so any number of worker threads may share one.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "util.h"

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME  0x100000001b3ULL
#define MIX_SEED   0x9e3779b97f4a7c15ULL
#define MIX_MUL    0x9fb21c651e98df25ULL

struct tmpl_part {
	const char *lit; /* literal slice of <src>, or NULL */
	size_t      litlen;
	char       *var; /* placeholder arg name, or NULL */
	size_t      varlen;
	int         prefix;     /* IPv6 mask length */
	bool        has_prefix; /* written as {arg/N} */
};

struct tmpl {
	char            *src;
	int              nparts;
	int              nvars;
	struct tmpl_part parts[];
};

struct sink {
	char    *out;
	size_t   cap; /* bytes that may be stored */
	size_t   len; /* bytes written, stored or not */
	uint64_t h1;  /* FNV-1a 64 */
	uint64_t h2;  /* multiply-xorshift, other seed */
};

/* ---- compile ------------------------------------------------------------ */

static bool
is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

/* Parses the placeholder body <s,n> (between the braces) into <pt>.
 * Returns 0, or -1 with <*err> and <*pos> (offset within the body). */
static int
parse_var(const char *s, size_t n, int default_prefix, struct tmpl_part *pt,
          const char **err, size_t *pos)
{
	const char *slash = memchr(s, '/', n);
	size_t      namelen = slash ? (size_t)(slash - s) : n;
	size_t      i;

	if (namelen == 0) {
		*err = n == 0 ? "empty placeholder {}"
		              : "placeholder has no arg name";
		*pos = 0;
		return -1;
	}
	if (namelen > KEYS_NAME_MAX) {
		*err = "arg name too long";
		*pos = 0;
		return -1;
	}
	for (i = 0; i < namelen; i++) {
		if (!is_name_char(s[i])) {
			*err = "bad character in arg name (use letters, digits, '_', '-', '.')";
			*pos = i;
			return -1;
		}
	}
	pt->prefix = default_prefix;
	pt->has_prefix = false;
	if (slash) {
		size_t k = namelen + 1;
		int    v = 0;

		if (k == n) {
			*err = "missing prefix length after '/'";
			*pos = k;
			return -1;
		}
		for (; k < n; k++) {
			if (s[k] < '0' || s[k] > '9' || v > 128) {
				*err = "prefix length must be a number from 0 to 128";
				*pos = k;
				return -1;
			}
			v = v * 10 + (s[k] - '0');
		}
		if (v > 128) {
			*err = "prefix length must be a number from 0 to 128";
			*pos = namelen + 1;
			return -1;
		}
		pt->prefix = v;
		pt->has_prefix = true;
	}
	pt->var = xstrndup(s, namelen); /* last: nothing to undo on error */
	pt->varlen = namelen;
	return 0;
}

struct tmpl *
keys_compile(const char *src, int default_prefix, const char **err,
             size_t *errpos)
{
	size_t       n = strlen(src), i, maxparts = 1;
	struct tmpl *t;
	const char  *p, *close;

	for (i = 0; i < n; i++)
		maxparts += src[i] == '{' ? 2 : 0;
	t = xcalloc(1, sizeof(*t) + maxparts * sizeof(t->parts[0]));
	t->src = xstrdup(src);
	p = t->src;
	while (*p) {
		struct tmpl_part *pt = &t->parts[t->nparts];
		size_t            lit = strcspn(p, "{}");

		if (lit) {
			pt->lit = p;
			pt->litlen = lit;
			t->nparts++;
			p += lit;
			continue;
		}
		if (*p == '}') {
			*err = "unmatched '}'";
			*errpos = (size_t)(p - t->src);
			goto fail;
		}
		close = p + 1 + strcspn(p + 1, "{}");
		if (*close != '}') {
			*err = *close == '{' ? "nested '{' in placeholder"
			                     : "unterminated '{'";
			*errpos = (size_t)((*close ? close : p) - t->src);
			goto fail;
		}
		if (parse_var(p + 1, (size_t)(close - p - 1), default_prefix,
		              pt, err, errpos) == -1) {
			*errpos += (size_t)(p + 1 - t->src);
			goto fail;
		}
		t->nparts++;
		t->nvars++;
		p = close + 1;
	}
	return t;
fail:
	keys_free(t);
	return NULL;
}

void
keys_free(struct tmpl *t)
{
	int i;

	if (!t)
		return;
	for (i = 0; i < t->nparts; i++)
		free(t->parts[i].var);
	free(t->src);
	free(t);
}

const char *
keys_source(const struct tmpl *t)
{
	return t->src;
}

int
keys_nvars(const struct tmpl *t)
{
	return t->nvars;
}

const char *
keys_var(const struct tmpl *t, int i)
{
	int k;

	for (k = 0; k < t->nparts; k++)
		if (t->parts[k].var && i-- == 0)
			return t->parts[k].var;
	return NULL;
}

int
keys_is_single_var(const struct tmpl *t)
{
	return t->nparts == 1 && t->parts[0].var && !t->parts[0].has_prefix;
}

/* ---- the sink ----------------------------------------------------------- */

/* Folds byte <c> into both hashes. */
static inline void
sink_hash(struct sink *s, unsigned char c)
{
	s->h1 = (s->h1 ^ c) * FNV_PRIME;
	s->h2 = (s->h2 ^ c) * MIX_MUL;
	s->h2 ^= s->h2 >> 29;
}

/* Bytes that fit are only stored. The hashes are needed only for a key
 * that does not fit: the first byte past <cap> hashes the stored prefix,
 * and every later byte is hashed as it comes (the digest is the same as
 * hashing every byte from the start). */
static void
sink_overflow(struct sink *s, unsigned char c)
{
	if (s->len == s->cap)
		for (size_t i = 0; i < s->cap; i++)
			sink_hash(s, (unsigned char)s->out[i]);
	sink_hash(s, c);
	s->len++;
}

static inline void
sink_putc(struct sink *s, unsigned char c)
{
	if (s->len < s->cap)
		s->out[s->len++] = (char)c;
	else
		sink_overflow(s, c);
}

static void
sink_put(struct sink *s, const char *p, size_t n)
{
	size_t fit = s->len < s->cap ? s->cap - s->len : 0;

	if (fit > n)
		fit = n;
	memcpy(s->out + s->len, p, fit);
	s->len += fit;
	for (size_t i = fit; i < n; i++)
		sink_overflow(s, (unsigned char)p[i]);
}

static void
sink_puts(struct sink *s, const char *p)
{
	sink_put(s, p, strlen(p));
}

static void
sink_u64(struct sink *s, uint64_t v)
{
	char buf[20];
	int  n = 0;

	do {
		buf[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		sink_putc(s, (unsigned char)buf[--n]);
}

static void
sink_i64(struct sink *s, int64_t v)
{
	if (v < 0) {
		sink_putc(s, '-');
		sink_u64(s, (uint64_t)0 - (uint64_t)v);
	} else {
		sink_u64(s, (uint64_t)v);
	}
}

static uint64_t
fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

static void
hex64(char *dst, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	int               i;

	for (i = 15; i >= 0; i--) {
		dst[i] = hex[v & 0xf];
		v >>= 4;
	}
}

/* ---- values ------------------------------------------------------------- */

static void
put_ipv4(struct sink *s, const uint8_t *b)
{
	int i;

	for (i = 0; i < 4; i++) {
		if (i)
			sink_putc(s, '.');
		sink_u64(s, b[i]);
	}
}

static void
put_ipv6(struct sink *s, const uint8_t *in, int prefix)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0,    0,
		                            0, 0, 0, 0, 0xff, 0xff };
	char                 text[INET6_ADDRSTRLEN];
	uint8_t              b[16];
	int                  i;

	if (memcmp(in, mapped, sizeof(mapped)) == 0) {
		put_ipv4(s, in + 12);
		return;
	}
	for (i = 0; i < 16; i++) {
		int bits = prefix - i * 8;

		if (bits >= 8)
			b[i] = in[i];
		else if (bits <= 0)
			b[i] = 0;
		else
			b[i] = in[i] & (uint8_t)(0xff << (8 - bits));
	}
	if (!inet_ntop(AF_INET6, b, text, sizeof(text)))
		text[0] = '\0'; /* cannot happen with a 16-byte input */
	sink_puts(s, text);
	if (prefix < 128) {
		sink_putc(s, '/');
		sink_u64(s, (uint64_t)prefix);
	}
}

static void
put_string(struct sink *s, const struct spop_str *v, int prefix)
{
	char    ip[INET6_ADDRSTRLEN];
	uint8_t b[16];
	size_t  i;

	/* An address read from a header is keyed like one from src. */
	if (v->len >= 2 && v->len < sizeof(ip) &&
	    (memchr(v->ptr, ':', v->len) || memchr(v->ptr, '.', v->len))) {
		memcpy(ip, v->ptr, v->len);
		ip[v->len] = '\0';
		if (inet_pton(AF_INET, ip, b) == 1) {
			put_ipv4(s, b);
			return;
		}
		if (inet_pton(AF_INET6, ip, b) == 1) {
			put_ipv6(s, b, prefix);
			return;
		}
	}
	for (i = 0; i < v->len; i++) {
		unsigned char c = (unsigned char)v->ptr[i];

		if (c == '{')
			sink_put(s, "%7B", 3);
		else if (c == '}')
			sink_put(s, "%7D", 3);
		else if (c == '%')
			sink_put(s, "%25", 3);
		else if (c == '~') /* only a hashed key's tail has one */
			sink_put(s, "%7E", 3);
		else
			sink_putc(s, c);
	}
}

static void
put_binary(struct sink *s, const struct spop_str *v)
{
	static const char hex[] = "0123456789abcdef";
	size_t            i;

	for (i = 0; i < v->len; i++) {
		unsigned char c = (unsigned char)v->ptr[i];

		sink_putc(s, (unsigned char)hex[c >> 4]);
		sink_putc(s, (unsigned char)hex[c & 0xf]);
	}
}

/* Writes the value of <a> for placeholder <pt>. Returns 0 or KEYS_MISSING. */
static int
put_value(struct sink *s, const struct spop_arg *a, const struct tmpl_part *pt)
{
	const struct spop_data *d = &a->value;

	switch (d->type) {
	case SPOP_DATA_BOOL:
		sink_puts(s, d->v.b ? "true" : "false");
		return 0;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		sink_i64(s, d->v.i);
		return 0;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		sink_u64(s, d->v.u);
		return 0;
	case SPOP_DATA_IPV4:
		put_ipv4(s, d->v.ipv4);
		return 0;
	case SPOP_DATA_IPV6:
		put_ipv6(s, d->v.ipv6, pt->prefix);
		return 0;
	case SPOP_DATA_STRING:
		if (d->v.str.len == 0)
			return KEYS_MISSING;
		put_string(s, &d->v.str, pt->prefix);
		return 0;
	case SPOP_DATA_BINARY:
		if (d->v.str.len == 0)
			return KEYS_MISSING;
		put_binary(s, &d->v.str);
		return 0;
	case SPOP_DATA_NULL:
	default:
		return KEYS_MISSING;
	}
}

/* ---- expand ------------------------------------------------------------- */

const struct spop_arg *
keys_find_arg(const struct spop_message *m, const char *name, size_t len)
{
	int i;

	for (i = 0; i < m->nargs; i++) {
		const struct spop_arg *a = &m->args[i];

		if (a->name.len == len && memcmp(a->name.ptr, name, len) == 0)
			return a;
	}
	return NULL;
}

int
keys_expand(const struct tmpl *t, const struct spop_message *m, const char *pre,
            const char *suf, char *out, size_t max, size_t *len)
{
	size_t      suflen = strlen(suf), cut;
	struct sink s;
	int         i;

	assert(max >= suflen + KEYS_HASH_LEN + strlen(pre));
	s.out = out;
	s.cap = max - suflen;
	s.len = 0;
	s.h1 = FNV_OFFSET;
	s.h2 = MIX_SEED;
	sink_puts(&s, pre);
	for (i = 0; t && i < t->nparts; i++) {
		const struct tmpl_part *pt = &t->parts[i];
		const struct spop_arg  *a;

		if (!pt->var) {
			sink_put(&s, pt->lit, pt->litlen);
			continue;
		}
		a = keys_find_arg(m, pt->var, pt->varlen);
		if (!a || put_value(&s, a, pt) == KEYS_MISSING)
			return KEYS_MISSING;
	}
	if (s.len <= s.cap) {
		memcpy(out + s.len, suf, suflen + 1);
		*len = s.len + suflen;
		return 0;
	}
	cut = max - suflen - KEYS_HASH_LEN;
	out[cut] = '~';
	hex64(out + cut + 1, s.h1);
	hex64(out + cut + 17, fmix64(s.h2 ^ s.len));
	memcpy(out + cut + KEYS_HASH_LEN, suf, suflen + 1);
	*len = max;
	return 0;
}

/* 1 if <s> (<len> bytes) is one or more decimal digits. */
static bool
all_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return len > 0;
}

int
keys_arg_int(const struct spop_message *m, const char *name, int64_t *v)
{
	const struct spop_arg  *a = keys_find_arg(m, name, strlen(name));
	const struct spop_data *d;
	uint64_t                acc = 0;
	bool                    neg = false;
	size_t                  i = 0;

	if (!a)
		return -1;
	d = &a->value;
	switch (d->type) {
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		*v = d->v.i;
		return 0;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		if (d->v.u > INT64_MAX)
			return KEYS_INT_RANGE;
		*v = (int64_t)d->v.u;
		return 0;
	case SPOP_DATA_STRING:
		break;
	default:
		return -1;
	}
	if (d->v.str.len && d->v.str.ptr[0] == '-') {
		neg = true;
		i = 1;
	}
	if (!all_digits(d->v.str.ptr + i, d->v.str.len - i))
		return -1;
	while (i + 1 < d->v.str.len && d->v.str.ptr[i] == '0')
		i++;
	if (d->v.str.len - i > 18) /* beyond what 18 digits hold */
		return neg ? -1 : KEYS_INT_RANGE;
	for (; i < d->v.str.len; i++)
		acc = acc * 10 + (uint64_t)(d->v.str.ptr[i] - '0');
	*v = neg ? -(int64_t)acc : (int64_t)acc;
	return 0;
}
