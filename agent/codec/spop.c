/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SPOP 2.0 codec (doc/SPOE.txt, shared/reference/SPOP.md): varints, typed
 * data, KV lists, NOTIFY messages, ACK actions and whole frames, both ways.
 *
 * What it does: turns bytes of a caller-owned buffer into structs whose
 * strings are slices of that buffer, and structs into bytes through
 * struct spop_writer. Every decoder is total: any input gives bytes
 * consumed, SPOP_INCOMPLETE or -1 plus an SPOP status, never a read past
 * <end> (tests/fuzz/fuzz_spop.c holds it to that).
 *
 * What it does not do: no I/O, no allocation, no logging, no global state,
 * so it is reentrant and may run on any thread. It checks the wire format
 * only; policy such as "max-frame-size <= ours" or the sid/fid an ACK must
 * echo belongs to conn.c. Fragmented frames are refused, never reassembled
 * (we do not announce "fragmentation").
 *
 * Keys are matched exactly, not by prefix as HAProxy and spoa-example do.
 */
#include <limits.h>
#include <string.h>

#include "spop.h"

/* ---- helpers ----------------------------------------------------------- */

static const char empty_buf[1];

static void
iter_init(struct spop_iter *it, const char *payload, size_t len)
{
	if (payload == NULL) {
		it->p = it->end = empty_buf;
		return;
	}
	it->p = payload;
	it->end = payload + len;
}

#define VARINT_MAX 10 /* bytes of the longest varint (a uint64) */

static size_t
avail(const char *p, const char *end)
{
	return p < end ? (size_t)(end - p) : 0;
}

static uint32_t
read_be32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;

	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
	       (uint32_t)u[2] << 8 | (uint32_t)u[3];
}

/* Compares slice <s> with the NUL-terminated <word>. */
static bool
str_eq(struct spop_str s, const char *word)
{
	size_t n = strlen(word);

	return s.len == n && (n == 0 || memcmp(s.ptr, word, n) == 0);
}

/* Decodes a bare name (varint length + bytes) into <*s>. Same returns as
 * spop_decode_varint(). */
static int
decode_name(const char **p, const char *end, struct spop_str *s)
{
	const char *q = *p;
	uint64_t    len;
	int         n;

	n = spop_decode_varint(&q, end, &len);
	if (n <= 0)
		return n;
	if (len > avail(q, end))
		return SPOP_INCOMPLETE;
	if (len > (uint64_t)(INT_MAX - n))
		return -1;
	s->ptr = q;
	s->len = (size_t)len;
	*p = q + len;
	return n + (int)len;
}

/* ---- decoding ---------------------------------------------------------- */

/*
 * The "peers" varint (HAProxy intops.h), 1 to 10 bytes:
 *
 *   0 <= X < 240        : [ XXXX XXXX ]
 *   240 <= X < 2288     : [ 1111 XXXX ] [ 0XXX XXXX ]
 *   2288 <= X < 264432  : [ 1111 XXXX ] [ 1XXX XXXX ] [ 0XXX XXXX ]
 *   ...
 *
 * Continuation bytes are added with their high bit included (the encoder
 * subtracted it), so every value has exactly one encoding.
 */
int
spop_decode_varint(const char **p, const char *end, uint64_t *v)
{
	const unsigned char *q = (const unsigned char *)*p;
	uint64_t             r, b, add;
	unsigned int         shift = 4;
	int                  n = 1;

	if (avail(*p, end) == 0)
		return SPOP_INCOMPLETE;
	r = *q++;
	if (r >= 240) {
		do {
			if (n == 10)
				return -1; /* an 11th byte would follow */
			if ((const char *)q >= end)
				return SPOP_INCOMPLETE;
			b = *q++;
			n++;
			if (b >> (64 - shift) != 0)
				return -1; /* bits above 2^64 */
			add = b << shift;
			if (r + add < r)
				return -1;
			r += add;
			shift += 7;
		} while (b >= 128);
	}
	*v = r;
	*p = (const char *)q;
	return n;
}

int
spop_decode_data(const char **p, const char *end, struct spop_data *d)
{
	const char   *q = *p;
	unsigned char tb;
	uint64_t      u;
	int           n;

	if (avail(q, end) == 0)
		return SPOP_INCOMPLETE;
	tb = (unsigned char)*q++;
	memset(d, 0, sizeof(*d));
	d->type = (enum spop_data_type)(tb & 0x0F);
	switch (tb & 0x0F) {
	case SPOP_DATA_NULL:
		break;
	case SPOP_DATA_BOOL:
		d->v.b = (tb & 0x10) != 0;
		break;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		n = spop_decode_varint(&q, end, &u);
		if (n <= 0)
			return n;
		if (d->type == SPOP_DATA_INT32 || d->type == SPOP_DATA_INT64)
			d->v.i = (int64_t)u; /* two's complement on the wire */
		else
			d->v.u = u;
		break;
	case SPOP_DATA_IPV4:
		if (avail(q, end) < 4)
			return SPOP_INCOMPLETE;
		memcpy(d->v.ipv4, q, 4);
		q += 4;
		break;
	case SPOP_DATA_IPV6:
		if (avail(q, end) < 16)
			return SPOP_INCOMPLETE;
		memcpy(d->v.ipv6, q, 16);
		q += 16;
		break;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		n = decode_name(&q, end, &d->v.str);
		if (n <= 0)
			return n;
		break;
	default:
		return -1; /* 10-15 are reserved */
	}
	n = (int)(q - *p);
	*p = q;
	return n;
}

int
spop_decode_frame(const char *buf, size_t len, uint32_t max_size,
                  struct spop_frame *f, int *status)
{
	const char *p, *end;
	uint32_t    flen;

	if (len < 4)
		return SPOP_INCOMPLETE;
	flen = read_be32(buf);
	if (max_size > INT_MAX - 4)
		max_size = INT_MAX - 4; /* the return value must fit */
	if (flen > max_size) {
		*status = SPOP_ST_TOO_BIG;
		return -1;
	}
	if (flen < 1 + 4 + 1 + 1) { /* type, flags, sid, fid */
		*status = SPOP_ST_INVALID;
		return -1;
	}
	if (len - 4 < flen)
		return SPOP_INCOMPLETE;

	p = buf + 4;
	end = p + flen;
	f->type = (uint8_t)*p++;
	switch (f->type) {
	case SPOP_FRM_UNSET:
	case SPOP_FRM_HAPROXY_HELLO:
	case SPOP_FRM_HAPROXY_DISCONNECT:
	case SPOP_FRM_NOTIFY:
	case SPOP_FRM_AGENT_HELLO:
	case SPOP_FRM_AGENT_DISCONNECT:
	case SPOP_FRM_ACK:
		break;
	default:
		*status = SPOP_ST_INVALID;
		return -1;
	}
	f->flags = read_be32(p);
	p += 4;
	if (!(f->flags & SPOP_FL_FIN)) {
		*status = SPOP_ST_FRAG_NOT_SUPPORTED;
		return -1;
	}
	if (spop_decode_varint(&p, end, &f->stream_id) <= 0 ||
	    spop_decode_varint(&p, end, &f->frame_id) <= 0) {
		*status = SPOP_ST_INVALID;
		return -1;
	}
	f->payload = p;
	f->len = (size_t)(end - p);
	return (int)(4 + flen);
}

int
spop_check_order(uint8_t type, bool hello_done, int *status)
{
	if (type == SPOP_FRM_UNSET) {
		*status = SPOP_ST_FRAG_NOT_SUPPORTED;
		return -1;
	}
	if (!hello_done && type == SPOP_FRM_HAPROXY_HELLO)
		return 0;
	if (hello_done &&
	    (type == SPOP_FRM_NOTIFY || type == SPOP_FRM_HAPROXY_DISCONNECT))
		return 0;
	*status = SPOP_ST_INVALID;
	return -1;
}

/* Reads a max-frame-size value sent as any integer type. */
static int
hello_frame_size(const struct spop_data *d, uint32_t *out, int *status)
{
	uint64_t v;

	switch (d->type) {
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		if (d->v.i < 0)
			goto bad;
		v = (uint64_t)d->v.i;
		break;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		v = d->v.u;
		break;
	default:
		*status = SPOP_ST_INVALID;
		return -1;
	}
	if (v < SPOP_MIN_FRAME_SIZE || v > UINT32_MAX)
		goto bad;
	*out = (uint32_t)v;
	return 0;
bad:
	*status = SPOP_ST_BAD_FRAME_SIZE;
	return -1;
}

/* Stores a STRING value into <*dst>, or fails with SPOP_ST_INVALID. */
static int
hello_string(const struct spop_data *d, struct spop_str *dst, bool *has,
             int *status)
{
	if (d->type != SPOP_DATA_STRING) {
		*status = SPOP_ST_INVALID;
		return -1;
	}
	*dst = d->v.str;
	if (has != NULL)
		*has = true;
	return 0;
}

int
spop_decode_hello(const char *payload, size_t len, struct spop_hello *h,
                  int *status)
{
	struct spop_iter it;
	struct spop_str  key;
	struct spop_data val;
	int              rc;

	memset(h, 0, sizeof(*h));
	iter_init(&it, payload, len);
	while ((rc = spop_next_kv(&it, &key, &val, status)) == 1) {
		if (str_eq(key, "supported-versions") || str_eq(key, "version"))
			rc = hello_string(&val, &h->versions, &h->has_versions,
			                  status);
		else if (str_eq(key, "max-frame-size")) {
			rc = hello_frame_size(&val, &h->max_frame_size, status);
			h->has_max_frame_size = rc == 0;
		} else if (str_eq(key, "capabilities"))
			rc = hello_string(&val, &h->capabilities,
			                  &h->has_capabilities, status);
		else if (str_eq(key, "engine-id"))
			rc = hello_string(&val, &h->engine_id, NULL, status);
		else if (str_eq(key, "healthcheck")) {
			if (val.type != SPOP_DATA_BOOL) {
				*status = SPOP_ST_INVALID;
				return -1;
			}
			h->healthcheck = val.v.b;
		}
		if (rc == -1)
			return -1;
	}
	if (rc == -1)
		return -1;
	if (!h->has_versions) {
		*status = SPOP_ST_NO_VSN;
		return -1;
	}
	if (!spop_list_has(h->versions, "2.0")) {
		*status = SPOP_ST_BAD_VSN;
		return -1;
	}
	if (!h->has_max_frame_size) {
		*status = SPOP_ST_NO_FRAME_SIZE;
		return -1;
	}
	return 0;
}

int
spop_decode_disconnect(const char *payload, size_t len, int *code,
                       struct spop_str *message, int *status)
{
	struct spop_iter it;
	struct spop_str  key;
	struct spop_data val;
	uint64_t         u;
	int              rc;

	*code = SPOP_ST_UNKNOWN;
	message->ptr = empty_buf;
	message->len = 0;
	iter_init(&it, payload, len);
	while ((rc = spop_next_kv(&it, &key, &val, status)) == 1) {
		if (str_eq(key, "status-code")) {
			switch (val.type) {
			case SPOP_DATA_INT32:
			case SPOP_DATA_INT64:
			case SPOP_DATA_UINT32:
			case SPOP_DATA_UINT64:
				u = val.v.u; /* i and u share their bits */
				*code = u <= INT_MAX ? (int)u : SPOP_ST_UNKNOWN;
				break;
			default:
				*status = SPOP_ST_INVALID;
				return -1;
			}
		} else if (str_eq(key, "message")) {
			if (val.type != SPOP_DATA_STRING) {
				*status = SPOP_ST_INVALID;
				return -1;
			}
			*message = val.v.str;
		}
	}
	return rc == -1 ? -1 : 0;
}

static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

bool
spop_list_has(struct spop_str list, const char *word)
{
	size_t      wlen = strlen(word);
	const char *p = list.ptr, *end, *item, *comma;

	if (p == NULL || wlen == 0)
		return false;
	end = p + list.len;
	while (p < end) {
		comma = memchr(p, ',', (size_t)(end - p));
		if (comma == NULL)
			comma = end;
		item = p;
		while (item < comma && is_space(*item))
			item++;
		p = comma;
		while (p > item && is_space(p[-1]))
			p--;
		if ((size_t)(p - item) == wlen && memcmp(item, word, wlen) == 0)
			return true;
		p = comma + (comma < end);
	}
	return false;
}

int
spop_next_kv(struct spop_iter *it, struct spop_str *key,
             struct spop_data *value, int *status)
{
	const char *p = it->p;

	if (avail(p, it->end) == 0)
		return 0;
	if (decode_name(&p, it->end, key) <= 0 ||
	    spop_decode_data(&p, it->end, value) <= 0) {
		*status = SPOP_ST_INVALID;
		return -1;
	}
	it->p = p;
	return 1;
}

int
spop_next_message(struct spop_iter *it, struct spop_message *m, int *status)
{
	struct spop_arg skipped, *a;
	const char     *p = it->p;
	int             i, nb;

	if (avail(p, it->end) == 0)
		return 0;
	if (decode_name(&p, it->end, &m->name) <= 0 || avail(p, it->end) == 0)
		goto invalid;
	nb = (unsigned char)*p++;
	m->nargs_total = nb;
	m->nargs = nb < SPOP_MAX_ARGS ? nb : SPOP_MAX_ARGS;
	for (i = 0; i < nb; i++) {
		a = i < SPOP_MAX_ARGS ? &m->args[i] : &skipped;
		if (decode_name(&p, it->end, &a->name) <= 0 ||
		    spop_decode_data(&p, it->end, &a->value) <= 0)
			goto invalid;
	}
	it->p = p;
	return 1;
invalid:
	*status = SPOP_ST_INVALID;
	return -1;
}

int
spop_next_action(struct spop_iter *it, int *action, int *scope,
                 struct spop_str *name, struct spop_data *value, int *status)
{
	const char *p = it->p;
	int         act, nb, sc;

	if (avail(p, it->end) == 0)
		return 0;
	if (avail(p, it->end) < 3)
		goto invalid;
	act = (unsigned char)p[0];
	nb = (unsigned char)p[1];
	sc = (unsigned char)p[2];
	p += 3;
	if (sc > SPOP_SCOPE_RES)
		goto invalid;
	if (!(act == SPOP_ACT_SET_VAR && nb == 3) &&
	    !(act == SPOP_ACT_UNSET_VAR && nb == 2))
		goto invalid;
	if (decode_name(&p, it->end, name) <= 0)
		goto invalid;
	if (act == SPOP_ACT_SET_VAR) {
		if (spop_decode_data(&p, it->end, value) <= 0)
			goto invalid;
	} else {
		memset(value, 0, sizeof(*value));
		value->type = SPOP_DATA_NULL;
	}
	*action = act;
	*scope = sc;
	it->p = p;
	return 1;
invalid:
	*status = SPOP_ST_INVALID;
	return -1;
}

const struct spop_arg *
spop_find_arg(const struct spop_message *m, const char *name, size_t len)
{
	for (int i = 0; i < m->nargs; i++) {
		const struct spop_arg *a = &m->args[i];

		if (a->name.len == len &&
		    (len == 0 || memcmp(a->name.ptr, name, len) == 0))
			return a;
	}
	return NULL;
}

/* ---- encoding ---------------------------------------------------------- */

/* Writes <v> as a varint at <p>, which has room for VARINT_MAX bytes;
 * returns the end. */
static inline char *
put_varint(char *p, uint64_t v)
{
	if (v < 240) {
		*p++ = (char)v;
		return p;
	}
	*p++ = (char)(v | 0xF0);
	v = (v - 240) >> 4;
	while (v >= 128) {
		*p++ = (char)(v | 0x80);
		v = (v - 128) >> 7;
	}
	*p++ = (char)v;
	return p;
}

int
spop_encode_varint(char **p, char *end, uint64_t v)
{
	char   tmp[VARINT_MAX];
	size_t n;

	if (*p == NULL)
		return -1;
	if (avail(*p, end) >= VARINT_MAX) {
		n = (size_t)(put_varint(*p, v) - *p);
	} else {
		n = (size_t)(put_varint(tmp, v) - tmp);
		if (avail(*p, end) < n)
			return -1;
		memcpy(*p, tmp, n);
	}
	*p += n;
	return (int)n;
}

/* Appends <n> bytes of <src> or sets the sticky error flag. */
static void
w_bytes(struct spop_writer *w, const void *src, size_t n)
{
	if (w->err)
		return;
	if (avail(w->p, w->end) < n) {
		w->err = true;
		return;
	}
	if (n > 0)
		memcpy(w->p, src, n);
	w->p += n;
}

static void
w_be32(struct spop_writer *w, uint32_t v)
{
	unsigned char b[4] = {
		(unsigned char)(v >> 24),
		(unsigned char)(v >> 16),
		(unsigned char)(v >> 8),
		(unsigned char)v,
	};

	w_bytes(w, b, sizeof(b));
}

void
spop_w_begin(struct spop_writer *w, char *buf, size_t size, uint8_t type,
             uint64_t stream_id, uint64_t frame_id)
{
	w->buf = w->p = w->end = buf;
	w->err = buf == NULL;
	if (w->err)
		return;
	w->end = buf + size;
	w_be32(w, 0); /* FRAME-LENGTH, patched by spop_w_end() */
	spop_w_u8(w, type);
	w_be32(w, SPOP_FL_FIN);
	spop_w_varint(w, stream_id);
	spop_w_varint(w, frame_id);
}

void
spop_w_u8(struct spop_writer *w, uint8_t v)
{
	w_bytes(w, &v, 1);
}

void
spop_w_varint(struct spop_writer *w, uint64_t v)
{
	if (!w->err && spop_encode_varint(&w->p, w->end, v) == -1)
		w->err = true;
}

void
spop_w_name(struct spop_writer *w, const char *s, size_t len)
{
	spop_w_varint(w, len);
	w_bytes(w, s, len);
}

void
spop_w_data(struct spop_writer *w, const struct spop_data *d)
{
	switch (d->type) {
	case SPOP_DATA_NULL:
		spop_w_u8(w, SPOP_DATA_NULL);
		break;
	case SPOP_DATA_BOOL:
		spop_w_u8(w, SPOP_DATA_BOOL | (d->v.b ? 0x10 : 0x00));
		break;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		spop_w_u8(w, (uint8_t)d->type);
		spop_w_varint(w, (uint64_t)d->v.i);
		break;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		spop_w_u8(w, (uint8_t)d->type);
		spop_w_varint(w, d->v.u);
		break;
	case SPOP_DATA_IPV4:
		spop_w_u8(w, SPOP_DATA_IPV4);
		w_bytes(w, d->v.ipv4, 4);
		break;
	case SPOP_DATA_IPV6:
		spop_w_u8(w, SPOP_DATA_IPV6);
		w_bytes(w, d->v.ipv6, 16);
		break;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		spop_w_u8(w, (uint8_t)d->type);
		spop_w_name(w, d->v.str.ptr, d->v.str.len);
		break;
	default:
		w->err = true; /* not a type we could decode again */
		break;
	}
}

void
spop_w_str(struct spop_writer *w, const char *s, size_t len)
{
	spop_w_u8(w, SPOP_DATA_STRING);
	spop_w_name(w, s, len);
}

void
spop_w_int(struct spop_writer *w, int64_t v)
{
	spop_w_u8(w, SPOP_DATA_INT64);
	spop_w_varint(w, (uint64_t)v);
}

void
spop_w_uint32(struct spop_writer *w, uint32_t v)
{
	spop_w_u8(w, SPOP_DATA_UINT32);
	spop_w_varint(w, v);
}

void
spop_w_bool(struct spop_writer *w, bool v)
{
	/* false is 0x01, not 0x00 (NULL) nor 0x10: negasus 56dca65. */
	spop_w_u8(w, SPOP_DATA_BOOL | (v ? 0x10 : 0x00));
}

void
spop_w_kv_str(struct spop_writer *w, const char *key, const char *s, size_t len)
{
	spop_w_name(w, key, strlen(key));
	spop_w_str(w, s, len);
}

void
spop_w_kv_uint32(struct spop_writer *w, const char *key, uint32_t v)
{
	spop_w_name(w, key, strlen(key));
	spop_w_uint32(w, v);
}

void
spop_w_kv_bool(struct spop_writer *w, const char *key, bool v)
{
	spop_w_name(w, key, strlen(key));
	spop_w_bool(w, v);
}

void
spop_w_set_var(struct spop_writer *w, int scope, const char *name, size_t len,
               const struct spop_data *v)
{
	if (scope < SPOP_SCOPE_PROC || scope > SPOP_SCOPE_RES)
		w->err = true;
	if (!w->err && len < 240 && avail(w->p, w->end) >= 4 + len) {
		/* the usual case: action, 3 args, scope and a short name's
		 * length are one byte each */
		w->p[0] = SPOP_ACT_SET_VAR;
		w->p[1] = 3;
		w->p[2] = (char)scope;
		w->p[3] = (char)len;
		memcpy(w->p + 4, name, len);
		w->p += 4 + len;
	} else {
		spop_w_u8(w, SPOP_ACT_SET_VAR);
		spop_w_u8(w, 3);
		spop_w_u8(w, (uint8_t)scope);
		spop_w_name(w, name, len);
	}
	spop_w_data(w, v);
}

/* The ACK's usual action in one go, when it surely fits: SET-VAR, 3
 * args, <scope>, a short <name> (one length byte), then <type>. Returns
 * the position of the value, or NULL to take the general path. */
static char *
set_var_head(struct spop_writer *w, int scope, const char *name, size_t len,
             uint8_t type, size_t value_max)
{
	char *p = w->p;

	if (w->err || scope < SPOP_SCOPE_PROC || scope > SPOP_SCOPE_RES ||
	    len >= 240 || avail(p, w->end) < 5 + len + value_max)
		return NULL;
	p[0] = SPOP_ACT_SET_VAR;
	p[1] = 3;
	p[2] = (char)scope;
	p[3] = (char)len;
	memcpy(p + 4, name, len);
	p[4 + len] = (char)type;
	return p + 5 + len;
}

void
spop_w_set_var_int_n(struct spop_writer *w, int scope, const char *name,
                     size_t namelen, int64_t v)
{
	struct spop_data d = { .type = SPOP_DATA_INT64, .v.i = v };
	char *p = set_var_head(w, scope, name, namelen, SPOP_DATA_INT64,
	                       VARINT_MAX);

	if (p != NULL)
		w->p = put_varint(p, (uint64_t)v);
	else
		spop_w_set_var(w, scope, name, namelen, &d);
}

void
spop_w_set_var_str_n(struct spop_writer *w, int scope, const char *name,
                     size_t namelen, const char *s, size_t len)
{
	struct spop_data d = { .type = SPOP_DATA_STRING };
	char *p = set_var_head(w, scope, name, namelen, SPOP_DATA_STRING,
	                       VARINT_MAX + len);

	if (p != NULL) {
		p = put_varint(p, len);
		memcpy(p, s, len);
		w->p = p + len;
		return;
	}
	d.v.str.ptr = s;
	d.v.str.len = len;
	spop_w_set_var(w, scope, name, namelen, &d);
}

void
spop_w_unset_var(struct spop_writer *w, int scope, const char *name)
{
	if (scope < SPOP_SCOPE_PROC || scope > SPOP_SCOPE_RES)
		w->err = true;
	spop_w_u8(w, SPOP_ACT_UNSET_VAR);
	spop_w_u8(w, 2);
	spop_w_u8(w, (uint8_t)scope);
	spop_w_name(w, name, strlen(name));
}

void
spop_w_message(struct spop_writer *w, const char *name, int nargs)
{
	if (nargs < 0 || nargs > 255)
		w->err = true;
	spop_w_name(w, name, strlen(name));
	spop_w_u8(w, (uint8_t)nargs);
}

int
spop_w_end(struct spop_writer *w)
{
	size_t   total;
	uint32_t flen;

	if (w->err || w->buf == NULL)
		return -1;
	total = (size_t)(w->p - w->buf);
	if (total < 4 || total > INT_MAX) {
		w->err = true;
		return -1;
	}
	flen = (uint32_t)(total - 4);
	w->buf[0] = (char)(flen >> 24);
	w->buf[1] = (char)(flen >> 16);
	w->buf[2] = (char)(flen >> 8);
	w->buf[3] = (char)flen;
	return (int)total;
}

int
spop_encode_agent_hello(char *buf, size_t size, uint32_t max_frame_size,
                        const char *capabilities)
{
	struct spop_writer w;

	if (capabilities == NULL)
		capabilities = "";
	spop_w_begin(&w, buf, size, SPOP_FRM_AGENT_HELLO, 0, 0);
	spop_w_kv_str(&w, "version", "2.0", 3);
	spop_w_kv_uint32(&w, "max-frame-size", max_frame_size);
	spop_w_kv_str(&w, "capabilities", capabilities, strlen(capabilities));
	return spop_w_end(&w);
}

int
spop_encode_disconnect(char *buf, size_t size, uint8_t type, int status_code,
                       const char *message)
{
	struct spop_writer w;
	size_t             len;

	if (type != SPOP_FRM_AGENT_DISCONNECT &&
	    type != SPOP_FRM_HAPROXY_DISCONNECT)
		return -1;
	if (message == NULL)
		message = spop_strstatus(status_code);
	len = strlen(message);
	if (len > 255)
		len = 255; /* HAProxy 2.6 refuses longer messages */
	spop_w_begin(&w, buf, size, type, 0, 0);
	spop_w_kv_uint32(&w, "status-code", (uint32_t)status_code);
	spop_w_kv_str(&w, "message", message, len);
	return spop_w_end(&w);
}

const char *
spop_strstatus(int status)
{
	/* The texts of HAProxy's spoe_frm_err_reasons[]. */
	static const char *const reasons[] = {
		[SPOP_ST_NORMAL] = "normal",
		[SPOP_ST_IO] = "I/O error",
		[SPOP_ST_TIMEOUT] = "a timeout occurred",
		[SPOP_ST_TOO_BIG] = "frame is too big",
		[SPOP_ST_INVALID] = "invalid frame received",
		[SPOP_ST_NO_VSN] = "version value not found",
		[SPOP_ST_NO_FRAME_SIZE] = "max-frame-size value not found",
		[SPOP_ST_NO_CAP] = "capabilities value not found",
		[SPOP_ST_BAD_VSN] = "unsupported version",
		[SPOP_ST_BAD_FRAME_SIZE] =
			"max-frame-size too big or too small",
		[SPOP_ST_FRAG_NOT_SUPPORTED] = "fragmentation not supported",
		[SPOP_ST_INTERLACED] = "invalid interlaced frames",
		[SPOP_ST_FRAMEID_NOTFOUND] = "frame-id not found",
		[SPOP_ST_RES] = "resource allocation error",
	};

	if (status >= 0 && status < (int)(sizeof(reasons) / sizeof(reasons[0])))
		return reasons[status];
	return "an unknown error occurred";
}
