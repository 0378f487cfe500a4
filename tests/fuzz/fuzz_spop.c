/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the SPOP codec (agent/codec/spop.c).
 *
 * Drives the decoder the way conn.c does: cut frames out of the input with
 * spop_decode_frame() (once with HAProxy's 16380 and once with a small
 * max-frame-size taken from the first byte), check their order, then feed
 * every payload to every payload decoder (HELLO, KV items, NOTIFY
 * messages, ACK actions, DISCONNECT), whatever the frame type says, to
 * reach more code. ASan/UBSan catch overreads; the properties below abort:
 *   - a frame's slices stay inside the input and the frame;
 *   - one byte short of a decoded frame is SPOP_INCOMPLETE;
 *   - a decoded varint re-encodes to the same bytes (the encoding is
 *     bijective);
 *   - every NOTIFY message and ACK action re-encoded with the writer
 *     decodes back to the same values.
 * It does not test semantics (see tests/unit/test_spop.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

static char out[65536];

static bool
str_same(struct spop_str a, struct spop_str b)
{
	return a.len == b.len &&
	       (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void
check_data_eq(const struct spop_data *a, const struct spop_data *b)
{
	CHECK(a->type == b->type);
	switch (a->type) {
	case SPOP_DATA_NULL:
		break;
	case SPOP_DATA_BOOL:
		CHECK(a->v.b == b->v.b);
		break;
	case SPOP_DATA_INT32:
	case SPOP_DATA_INT64:
		CHECK(a->v.i == b->v.i);
		break;
	case SPOP_DATA_UINT32:
	case SPOP_DATA_UINT64:
		CHECK(a->v.u == b->v.u);
		break;
	case SPOP_DATA_IPV4:
		CHECK(memcmp(a->v.ipv4, b->v.ipv4, 4) == 0);
		break;
	case SPOP_DATA_IPV6:
		CHECK(memcmp(a->v.ipv6, b->v.ipv6, 16) == 0);
		break;
	case SPOP_DATA_STRING:
	case SPOP_DATA_BINARY:
		CHECK(str_same(a->v.str, b->v.str));
		break;
	default:
		abort(); /* the decoder must not hand out reserved types */
	}
}

static void
check_within(struct spop_str s, const struct spop_iter *it)
{
	CHECK(s.len == 0 || (s.ptr >= it->p && s.ptr + s.len <= it->end));
}

/* Re-encodes <m> alone in a NOTIFY and decodes it again. Names go through
 * spop_w_name() since they may hold NUL bytes. */
static void
round_trip_message(const struct spop_message *m, const struct spop_frame *f)
{
	struct spop_writer  w;
	struct spop_frame   g;
	struct spop_iter    it;
	struct spop_message m2;
	int                 n, st;

	spop_w_begin(&w, out, sizeof(out), SPOP_FRM_NOTIFY, f->stream_id,
	             f->frame_id);
	spop_w_name(&w, m->name.ptr, m->name.len);
	spop_w_u8(&w, (uint8_t)m->nargs);
	for (int i = 0; i < m->nargs; i++) {
		spop_w_name(&w, m->args[i].name.ptr, m->args[i].name.len);
		spop_w_data(&w, &m->args[i].value);
	}
	n = spop_w_end(&w);
	CHECK(n > 0);
	CHECK(spop_decode_frame(out, (size_t)n, sizeof(out), &g, &st) == n);
	CHECK(g.type == SPOP_FRM_NOTIFY);
	CHECK(g.stream_id == f->stream_id && g.frame_id == f->frame_id);
	it.p = g.payload;
	it.end = g.payload + g.len;
	CHECK(spop_next_message(&it, &m2, &st) == 1);
	CHECK(str_same(m->name, m2.name));
	CHECK(m2.nargs == m->nargs && m2.nargs_total == m->nargs);
	for (int i = 0; i < m->nargs; i++) {
		CHECK(str_same(m->args[i].name, m2.args[i].name));
		check_data_eq(&m->args[i].value, &m2.args[i].value);
	}
	CHECK(spop_next_message(&it, &m2, &st) == 0);
}

static void
walk_messages(const struct spop_frame *f)
{
	struct spop_iter    it = { f->payload, f->payload + f->len };
	struct spop_message m;
	int                 rc, st = -1;

	while ((rc = spop_next_message(&it, &m, &st)) == 1) {
		CHECK(m.nargs >= 0 && m.nargs <= SPOP_MAX_ARGS);
		CHECK(m.nargs == (m.nargs_total < SPOP_MAX_ARGS
		                          ? m.nargs_total
		                          : SPOP_MAX_ARGS));
		for (int i = 0; i < m.nargs; i++)
			CHECK(spop_find_arg(&m, m.args[i].name.ptr,
			                    m.args[i].name.len) != NULL);
		round_trip_message(&m, f);
	}
	CHECK(rc == 0 || (rc == -1 && st == SPOP_ST_INVALID));
}

/* Re-encodes one ACK action and decodes it again. */
static void
round_trip_action(int act, int scope, struct spop_str name,
                  const struct spop_data *v)
{
	struct spop_writer w;
	struct spop_frame  g;
	struct spop_iter   it;
	struct spop_str    name2;
	struct spop_data   v2;
	int                n, st, act2, scope2;

	spop_w_begin(&w, out, sizeof(out), SPOP_FRM_ACK, 1, 1);
	if (act == SPOP_ACT_SET_VAR) {
		spop_w_set_var(&w, scope, name.ptr, name.len, v);
	} else {
		spop_w_u8(&w, SPOP_ACT_UNSET_VAR);
		spop_w_u8(&w, 2);
		spop_w_u8(&w, (uint8_t)scope);
		spop_w_name(&w, name.ptr, name.len);
	}
	n = spop_w_end(&w);
	CHECK(n > 0);
	CHECK(spop_decode_frame(out, (size_t)n, sizeof(out), &g, &st) == n);
	it.p = g.payload;
	it.end = g.payload + g.len;
	CHECK(spop_next_action(&it, &act2, &scope2, &name2, &v2, &st) == 1);
	CHECK(act2 == act && scope2 == scope);
	CHECK(str_same(name, name2));
	check_data_eq(v, &v2);
	CHECK(spop_next_action(&it, &act2, &scope2, &name2, &v2, &st) == 0);
}

static void
walk_actions(const struct spop_frame *f)
{
	struct spop_iter it = { f->payload, f->payload + f->len };
	struct spop_str  name;
	struct spop_data v;
	int              rc, st = -1, act, scope;

	while ((rc = spop_next_action(&it, &act, &scope, &name, &v, &st)) ==
	       1) {
		CHECK(act == SPOP_ACT_SET_VAR || act == SPOP_ACT_UNSET_VAR);
		CHECK(scope >= SPOP_SCOPE_PROC && scope <= SPOP_SCOPE_RES);
		CHECK(act == SPOP_ACT_SET_VAR || v.type == SPOP_DATA_NULL);
		round_trip_action(act, scope, name, &v);
	}
	CHECK(rc == 0 || (rc == -1 && st == SPOP_ST_INVALID));
}

static void
walk_kv(const struct spop_frame *f)
{
	struct spop_iter it = { f->payload, f->payload + f->len };
	struct spop_iter all = it;
	struct spop_str  key;
	struct spop_data v;
	int              rc, st = -1;

	while ((rc = spop_next_kv(&it, &key, &v, &st)) == 1) {
		check_within(key, &all);
		if (v.type == SPOP_DATA_STRING || v.type == SPOP_DATA_BINARY)
			check_within(v.v.str, &all);
		CHECK(v.type <= SPOP_DATA_BINARY);
	}
	CHECK(rc == 0 || (rc == -1 && st == SPOP_ST_INVALID));
}

static void
walk_hello(const struct spop_frame *f)
{
	struct spop_iter  all = { f->payload, f->payload + f->len };
	struct spop_hello h;
	int               st = -1;

	if (spop_decode_hello(f->payload, f->len, &h, &st) == 0) {
		CHECK(h.has_versions && h.has_max_frame_size);
		CHECK(h.max_frame_size >= SPOP_MIN_FRAME_SIZE);
		CHECK(spop_list_has(h.versions, "2.0"));
		check_within(h.versions, &all);
		check_within(h.capabilities, &all);
		check_within(h.engine_id, &all);
		(void)spop_list_has(h.capabilities, "pipelining");
		(void)spop_list_has(h.capabilities, "async");
	} else {
		CHECK(st == SPOP_ST_INVALID || st == SPOP_ST_NO_VSN ||
		      st == SPOP_ST_BAD_VSN || st == SPOP_ST_NO_FRAME_SIZE ||
		      st == SPOP_ST_BAD_FRAME_SIZE);
	}
}

static void
walk_disconnect(const struct spop_frame *f)
{
	struct spop_iter all = { f->payload, f->payload + f->len };
	struct spop_str  msg;
	int              st = -1, code;

	if (spop_decode_disconnect(f->payload, f->len, &code, &msg, &st) == 0) {
		CHECK(code >= 0);
		CHECK(spop_strstatus(code) != NULL);
		check_within(msg, &all);
	} else {
		CHECK(st == SPOP_ST_INVALID);
	}
}

static void
walk_frames(const char *buf, size_t len, uint32_t max_size)
{
	struct spop_frame f;
	size_t            off = 0;
	bool              first = true;
	int               n, st;

	while (off < len) {
		st = -1;
		n = spop_decode_frame(buf + off, len - off, max_size, &f, &st);
		if (n <= 0) {
			CHECK(n == 0 || st == SPOP_ST_INVALID ||
			      st == SPOP_ST_TOO_BIG ||
			      st == SPOP_ST_FRAG_NOT_SUPPORTED);
			break;
		}
		CHECK((size_t)n <= len - off && (uint32_t)n - 4 <= max_size);
		CHECK(f.payload >= buf + off + 11 && /* 4 + 7-byte header min */
		      f.payload + f.len == buf + off + n);
		CHECK(f.flags & SPOP_FL_FIN);
		if (first) {
			struct spop_frame g;

			CHECK(spop_decode_frame(buf + off, (size_t)n - 1,
			                        max_size, &g,
			                        &st) == SPOP_INCOMPLETE);
			first = false;
		}
		st = -1;
		if (spop_check_order(f.type, false, &st) == -1)
			CHECK(st == SPOP_ST_INVALID ||
			      st == SPOP_ST_FRAG_NOT_SUPPORTED);
		st = -1;
		if (spop_check_order(f.type, true, &st) == -1)
			CHECK(st == SPOP_ST_INVALID ||
			      st == SPOP_ST_FRAG_NOT_SUPPORTED);
		walk_hello(&f);
		walk_kv(&f);
		walk_messages(&f);
		walk_actions(&f);
		walk_disconnect(&f);
		off += (size_t)n;
	}
}

/* A decoded varint must re-encode to exactly the bytes it came from. */
static void
varint_property(const char *buf, size_t len)
{
	const char *p = buf;
	char        tmp[10], *w = tmp;
	uint64_t    v, v2;
	int         n, m;

	n = spop_decode_varint(&p, buf + len, &v);
	CHECK(n >= -1 && n <= 10);
	if (n > 0) {
		m = spop_encode_varint(&w, tmp + sizeof(tmp), v);
		CHECK(m == n && memcmp(tmp, buf, (size_t)n) == 0);
	}
	if (len >= 8) {
		memcpy(&v, buf, 8);
		w = tmp;
		m = spop_encode_varint(&w, tmp + sizeof(tmp), v);
		p = tmp;
		CHECK(m > 0 && spop_decode_varint(&p, tmp + m, &v2) == m);
		CHECK(v2 == v);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;

	if (size == 0)
		return 0;
	varint_property(buf, size);
	walk_frames(buf, size, SPOP_MAX_FRAME_SIZE);
	walk_frames(buf + 1, size - 1, (uint32_t)data[0] * 4);
	return 0;
}
