/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a store backend implements and is given: the caller's request
 * (store_req), its callback, the table of operations (store_ops) that
 * store.c dispatches to, and the parsed addresses of a Redis URL.
 *
 * store.h is the callers' view (req.c, server.c, plancache.c); this header
 * sits below it so that the backends (store_single.c, store_cluster.c) and
 * the pieces they share (reqq, link, sentinel) need not include store.h:
 * the include graph among them has no cycle. Nothing here does anything.
 */
#ifndef STORE_OPS_H
#define STORE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "limiter.h"
#include "policy.h"

#define STORE_BATCH_MAX 128 /* requests per script call */

enum store_err {
	STORE_OK = 0,
	STORE_EDOWN,  /* not connected, the breaker is open, or the call
	               * could not be written: Redis never saw it */
	STORE_EIO,    /* connection lost with the request in flight */
	STORE_EREPLY, /* Redis answered an error or a bad reply */
};

struct store_req;
typedef void store_cb(struct store_req *sr, int err);

/* Embedded in the caller's request. <checks> and <results> belong to the
 * caller and must stay valid until <cb> runs or <gen> changes. */
struct store_req {
	const struct check *checks;
	int                *index;   /* which checks go to Redis */
	int                 n;       /* how many of them */
	struct lim_result  *results; /* filled at index[i], on STORE_OK */
	store_cb           *cb;
	uint32_t            gen;         /* bumped by the caller to cancel */
	struct store_req   *next, *prev; /* queue links (reqq.c) */
	uint32_t            sent_gen;    /* gen when queued (reqq.c) */
	int                 queued;      /* linked in a queue (reqq.c) */
};

/* HGET's answer: the value (NULL when the field does not exist) and err 0,
 * or err -1 when Redis failed. */
typedef void store_value_cb(void *arg, const char *val, size_t len, int err);

/* A backend: <be> is its own state. The contract of each is that of the
 * store.h function of the same name; store.c has already handled a NULL
 * store and bumped the gen of a cancelled request. */
struct store_ops {
	int (*submit)(void *be, struct store_req *sr);
	void (*flush)(void *be);
	int (*hget)(void *be, const char *hash, const char *field,
	            size_t fieldlen, store_value_cb *cb, void *arg);
	void (*cancel)(void *be, struct store_req *sr);
	int (*up)(const void *be);
	void (*note_timeout)(void *be);
	void (*free)(void *be);
};

/* A plain redis:// or unix: URL, parsed (store_parse_url). */
struct store_addr {
	char host[256];
	int  port;
	char path[256]; /* unix socket when non-empty */
	int  db;
	char user[128];
	char pass[256];
};

/* A redis+sentinel:// or redis+cluster:// URL, parsed
 * (store_parse_topo_url). */
#define STORE_MAX_SEEDS 16

enum store_topo_kind {
	STORE_TOPO_SINGLE = 0,
	STORE_TOPO_SENTINEL,
	STORE_TOPO_CLUSTER,
};

struct store_seed {
	char host[256];
	int  port;
};

struct store_topo {
	enum store_topo_kind kind;
	int                  nseeds;
	struct store_seed    seeds[STORE_MAX_SEEDS];
	char                 master[128]; /* sentinel: the master's name */
	int                  db;          /* sentinel only; cluster is db 0 */
	char                 user[128];
	char                 pass[256];
};

#endif
