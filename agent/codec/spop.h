/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SPOP 2.0 codec: bytes in, structs out, and structs to bytes.
 *
 * Wire format from HAProxy's doc/SPOE.txt (see shared/reference/SPOP.md):
 *
 *   <FRAME-LENGTH:u32 BE> <TYPE:u8> <FLAGS:u32 BE> <STREAM-ID:varint>
 *   <FRAME-ID:varint> <PAYLOAD>
 *
 * No I/O and no allocation: decoded strings are slices (struct spop_str)
 * pointing into the caller's buffer, valid as long as that buffer is.
 * Decoders return the number of bytes consumed (> 0), SPOP_INCOMPLETE (0)
 * when more bytes are needed, or -1 with an SPOP status code (enum
 * spop_status, the numbers of doc/SPOE.txt) in <*status>.
 * Encoders go through struct spop_writer, whose error flag is sticky: call
 * the writer functions freely and check once at spop_w_end().
 */
#ifndef SPOP_H
#define SPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SPOP_INCOMPLETE     0
#define SPOP_MIN_FRAME_SIZE 256
#define SPOP_MAX_FRAME_SIZE 16380 /* HAProxy's default tune.bufsize - 4 */
#define SPOP_FRAME_HDR_MAX  (4 + 1 + 4 + 10 + 10)
/* Args kept per message: all of them. NB-ARGS is one byte, and an arg past
 * a smaller cap would look missing to a rule keyed on it (denied). */
#define SPOP_MAX_ARGS       255

#define SPOP_FL_FIN   0x00000001u
#define SPOP_FL_ABORT 0x00000002u

/* DISCONNECT status codes, numbered as in doc/SPOE.txt section 3.5. */
enum spop_status {
	SPOP_ST_NORMAL = 0,
	SPOP_ST_IO = 1,
	SPOP_ST_TIMEOUT = 2,
	SPOP_ST_TOO_BIG = 3,
	SPOP_ST_INVALID = 4,
	SPOP_ST_NO_VSN = 5,
	SPOP_ST_NO_FRAME_SIZE = 6,
	SPOP_ST_NO_CAP = 7,
	SPOP_ST_BAD_VSN = 8,
	SPOP_ST_BAD_FRAME_SIZE = 9,
	SPOP_ST_FRAG_NOT_SUPPORTED = 10,
	SPOP_ST_INTERLACED = 11,
	SPOP_ST_FRAMEID_NOTFOUND = 12,
	SPOP_ST_RES = 13,
	SPOP_ST_UNKNOWN = 99,
};

enum spop_frame_type {
	SPOP_FRM_UNSET = 0,
	SPOP_FRM_HAPROXY_HELLO = 1,
	SPOP_FRM_HAPROXY_DISCONNECT = 2,
	SPOP_FRM_NOTIFY = 3,
	SPOP_FRM_AGENT_HELLO = 101,
	SPOP_FRM_AGENT_DISCONNECT = 102,
	SPOP_FRM_ACK = 103,
};

/* Typed data: the type is the low nibble of the type byte, flags the high. */
enum spop_data_type {
	SPOP_DATA_NULL = 0,
	SPOP_DATA_BOOL = 1,
	SPOP_DATA_INT32 = 2,
	SPOP_DATA_UINT32 = 3,
	SPOP_DATA_INT64 = 4,
	SPOP_DATA_UINT64 = 5,
	SPOP_DATA_IPV4 = 6,
	SPOP_DATA_IPV6 = 7,
	SPOP_DATA_STRING = 8,
	SPOP_DATA_BINARY = 9,
};

enum spop_scope {
	SPOP_SCOPE_PROC = 0,
	SPOP_SCOPE_SESS = 1,
	SPOP_SCOPE_TXN = 2,
	SPOP_SCOPE_REQ = 3,
	SPOP_SCOPE_RES = 4,
};

enum spop_action {
	SPOP_ACT_SET_VAR = 1,
	SPOP_ACT_UNSET_VAR = 2,
};

struct spop_str {
	const char *ptr; /* not NUL-terminated; borrowed */
	size_t      len;
};

struct spop_data {
	enum spop_data_type type;
	union {
		bool            b;
		int64_t         i;       /* INT32, INT64 */
		uint64_t        u;       /* UINT32, UINT64 */
		uint8_t         ipv4[4]; /* network order */
		uint8_t         ipv6[16];
		struct spop_str str; /* STRING, BINARY */
	} v;
};

struct spop_frame {
	uint8_t     type;  /* enum spop_frame_type */
	uint32_t    flags; /* SPOP_FL_* */
	uint64_t    stream_id;
	uint64_t    frame_id;
	const char *payload; /* borrowed from the input buffer */
	size_t      len;
};

struct spop_hello {
	struct spop_str versions; /* supported-versions */
	uint32_t        max_frame_size;
	struct spop_str capabilities;
	struct spop_str engine_id;
	bool            has_versions;
	bool            has_max_frame_size;
	bool            has_capabilities;
	bool            healthcheck;
};

struct spop_arg {
	struct spop_str  name; /* may be empty */
	struct spop_data value;
};

struct spop_message {
	struct spop_str name;
	int             nargs;       /* args stored in <args> */
	int             nargs_total; /* args present in the frame */
	struct spop_arg args[SPOP_MAX_ARGS];
};

/* Cursor over a payload (NOTIFY messages, ACK actions, KV lists). */
struct spop_iter {
	const char *p;
	const char *end;
};

/* ---- decoding ---------------------------------------------------------- */

/* Decodes one varint at <*p> (not past <end>) into <*v> and advances <*p>.
 * Returns bytes consumed, SPOP_INCOMPLETE, or -1 when it runs over 10
 * bytes or 64 bits. <*p> and <*v> are untouched unless it returns > 0. */
int spop_decode_varint(const char **p, const char *end, uint64_t *v);

/* Decodes one typed value at <*p>; strings are slices of the input.
 * INT32/INT64 land in <v.i>, UINT32/UINT64 in <v.u>; BOOL is true when
 * flag 0x10 is set. Returns bytes consumed, SPOP_INCOMPLETE (truncated),
 * or -1 (reserved type 10-15, bad varint); the callers that take a
 * <*status> report both as SPOP_ST_INVALID. */
int spop_decode_data(const char **p, const char *end, struct spop_data *d);

/* Decodes one whole frame from <buf,len> (length prefix included) whose
 * FRAME-LENGTH must be in [1, <max_size>]. Checks framing only: lengths,
 * known type, FIN set, header fits. Returns 4 + FRAME-LENGTH on success,
 * SPOP_INCOMPLETE until the whole frame is there, -1 with <*status>:
 * SPOP_ST_TOO_BIG (length > max_size), SPOP_ST_INVALID (length 0 or too
 * short for a header, unknown type, sid/fid varints not fitting in the
 * frame), SPOP_ST_FRAG_NOT_SUPPORTED (FIN clear). The length checks happen
 * as soon as the 4 length bytes are in, so an oversized frame is refused
 * before it is buffered. UNSET (0) frames pass here; spop_check_order()
 * refuses them. <max_size> above INT_MAX - 4 is treated as INT_MAX - 4. */
int spop_decode_frame(const char *buf, size_t len, uint32_t max_size,
                      struct spop_frame *f, int *status);

/* Says whether a frame of <type> may arrive from HAProxy now. Before the
 * HELLO only HAPROXY-HELLO is legal; after it only NOTIFY and
 * HAPROXY-DISCONNECT. Returns 0, or -1 with <*status> = SPOP_ST_INVALID,
 * or SPOP_ST_FRAG_NOT_SUPPORTED for an UNSET (continuation) frame. */
int spop_check_order(uint8_t type, bool hello_done, int *status);

/* Decodes a HAPROXY-HELLO payload and validates it: supported-versions must
 * list "2.0" (status 5 when absent, 8 when 2.0 is not there), max-frame-size
 * must be present (6), as any integer type, within [256, UINT32_MAX] (9).
 * A known key with a value of the wrong type gives 4. Unknown keys are
 * skipped; keys match exactly. Also reads an AGENT-HELLO (tests, client):
 * its "version" key fills <versions>. Slices borrow <payload>. Returns 0
 * or -1 with <*status>. */
int spop_decode_hello(const char *payload, size_t len, struct spop_hello *h,
                      int *status);

/* Decodes a DISCONNECT payload (either direction): status-code (any
 * integer type; SPOP_ST_UNKNOWN when absent or above INT_MAX) and message
 * (empty when absent; borrows <payload>). Returns 0 or -1 with <*status>
 * (SPOP_ST_INVALID). */
int spop_decode_disconnect(const char *payload, size_t len, int *code,
                           struct spop_str *message, int *status);

/* Returns true if the comma-separated <list> has <word>; white space around
 * each item is ignored, matching is exact ("pipelining" is not
 * "pipelining2"). An empty <word> is never found. */
bool spop_list_has(struct spop_str list, const char *word);

/* Decodes one KV item (bare name, typed value). Returns 1 when an item was
 * read, 0 at the end of the payload, -1 with <*status> on bad input. */
int spop_next_kv(struct spop_iter *it, struct spop_str *key,
                 struct spop_data *value, int *status);

/* Decodes the next message of a NOTIFY payload into <*m>, every arg
 * (NB-ARGS is one byte: at most SPOP_MAX_ARGS). Returns 1 when a message was
 * read, 0 at the end of the payload, -1 with <*status> on bad input. */
int spop_next_message(struct spop_iter *it, struct spop_message *m,
                      int *status);

/* Decodes the next action of an ACK payload. For UNSET-VAR <*value> has
 * type NULL. Unknown actions, a wrong NB-ARGS or a scope above 4 are
 * SPOP_ST_INVALID (HAProxy silently stops there; we are stricter because
 * only our own tests and tools read ACKs). Returns 1, 0 at the end, or -1
 * with <*status>. */
int spop_next_action(struct spop_iter *it, int *action, int *scope,
                     struct spop_str *name, struct spop_data *value,
                     int *status);

/* Returns the first arg of <m> named <name>, or NULL. */
const struct spop_arg *spop_find_arg(const struct spop_message *m,
                                     const char *name, size_t len);

/* ---- encoding ---------------------------------------------------------- */

struct spop_writer {
	char *buf; /* frame start (the length prefix) */
	char *p;   /* write position */
	char *end;
	bool  err; /* sticky: out of room */
};

/* Writes <v> as a varint at <*p>. Returns bytes written or -1 (no room,
 * nothing written). */
int spop_encode_varint(char **p, char *end, uint64_t v);

/* Starts a frame of <type> with FIN set in <buf,size>: reserves the 4
 * length bytes, then writes type, flags, <stream_id> and <frame_id>. A
 * NULL <buf> or any later overflow sets the sticky <err>. Out-of-range
 * arguments (scope, nargs > 255, unknown data type) set it too. */
void spop_w_begin(struct spop_writer *w, char *buf, size_t size, uint8_t type,
                  uint64_t stream_id, uint64_t frame_id);
void spop_w_u8(struct spop_writer *w, uint8_t v);
void spop_w_varint(struct spop_writer *w, uint64_t v);
/* A bare name: varint length + bytes, no type byte (MESSAGE/KV/VAR names). */
void spop_w_name(struct spop_writer *w, const char *s, size_t len);
void spop_w_data(struct spop_writer *w, const struct spop_data *d);
void spop_w_str(struct spop_writer *w, const char *s, size_t len);
void spop_w_int(struct spop_writer *w, int64_t v); /* INT64 */
void spop_w_uint32(struct spop_writer *w, uint32_t v);
void spop_w_bool(struct spop_writer *w, bool v);
/* A KV item: bare name then typed value. */
void spop_w_kv_str(struct spop_writer *w, const char *key, const char *s,
                   size_t len);
void spop_w_kv_uint32(struct spop_writer *w, const char *key, uint32_t v);
void spop_w_kv_bool(struct spop_writer *w, const char *key, bool v);
/* ACK actions. */
void spop_w_set_var(struct spop_writer *w, int scope, const char *name,
                    size_t len, const struct spop_data *v);
void spop_w_set_var_int_n(struct spop_writer *w, int scope, const char *name,
                          size_t namelen, int64_t v);
void spop_w_set_var_str_n(struct spop_writer *w, int scope, const char *name,
                          size_t namelen, const char *s, size_t len);
/* The two above with a NUL-terminated name (its strlen folds away when
 * the name is a literal: the ACK's variables are). */
static inline void
spop_w_set_var_int(struct spop_writer *w, int scope, const char *name,
                   int64_t v)
{
	spop_w_set_var_int_n(w, scope, name, strlen(name), v);
}

static inline void
spop_w_set_var_str(struct spop_writer *w, int scope, const char *name,
                   const char *s, size_t len)
{
	spop_w_set_var_str_n(w, scope, name, strlen(name), s, len);
}
void spop_w_unset_var(struct spop_writer *w, int scope, const char *name);
/* NOTIFY messages (used by tests and the load generator). */
void spop_w_message(struct spop_writer *w, const char *name, int nargs);

/* Patches the frame length. Returns the frame's total size (length prefix
 * included) or -1 if anything did not fit. */
int spop_w_end(struct spop_writer *w);

/* Whole frames in one call; each returns the size written or -1.
 * AGENT-HELLO: version "2.0", max-frame-size UINT32, capabilities STRING
 * (NULL means ""). DISCONNECT: <type> must be one of the two DISCONNECT
 * types; status-code UINT32 and message STRING, cut to 255 bytes (HAProxy
 * 2.6 refuses longer); a NULL <message> sends spop_strstatus(). */
int spop_encode_agent_hello(char *buf, size_t size, uint32_t max_frame_size,
                            const char *capabilities);
int spop_encode_disconnect(char *buf, size_t size, uint8_t type,
                           int status_code, const char *message);

/* Returns the reason text for an SPOP status code (never NULL). */
const char *spop_strstatus(int status);

#endif
