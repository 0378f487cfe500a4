/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hiredis reply objects with fewer allocations: an array reply is one
 * block holding its redisReply, its element vector and a redisReply slot
 * per element, so an element that is an integer or nil costs no
 * allocation (the script's results come packed in one string:
 * results.h); strings still own a copy of their bytes, nested arrays are
 * their own block. The objects have the layout of hiredis' own, so callbacks
 * read them as usual; they must be freed with these functions only, which
 * hiredis does when the reader carries them:
 *
 *     ac->c.reader->fn = &reply_fns;
 *     ac->c.reader->privdata = ac;
 *
 * (set right after redisAsyncConnect, before anything is read). With the
 * context as the reader's privdata, what hiredis 0.14 would assert on is
 * refused too: a reply no callback waits for (more replies than
 * commands), a pub/sub message it cannot route.
 *
 * reply_time_us() reads TIME's reply (the operator's keyop.c, and each
 * link's set-up); reply_redirect() a Cluster's MOVED or ASK for the two
 * that follow them (the workers' store_cluster.c, the operator's
 * keyop.c).
 *
 * The peer chooses every size, so these never exit on it: an array of
 * more than REPLY_ARRAY_MAX elements, or a failed allocation, is refused
 * (NULL), and hiredis then fails the link with an out-of-memory error.
 */
#ifndef REPLY_H
#define REPLY_H

#include <stdint.h>

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

/* The longest array accepted. The arrays this agent asks for (TIME,
 * ROLE, CLUSTER SLOTS, SENTINEL replies) are far shorter; a peer's
 * longer one is refused before its block is allocated. One such array
 * costs at most 56 MiB. */
#define REPLY_ARRAY_MAX (1 << 20)

extern redisReplyObjectFunctions reply_fns;

/* What to log for a link that failed with hiredis' <err> and <errstr>:
 * refusing an object (above) makes hiredis report "Out of memory", which
 * would send an operator after the wrong cause. */
const char *reply_why(int err, const char *errstr);

/* Redis TIME's reply <r> (seconds, then microseconds, both decimal
 * strings) in µs since the epoch, into <*us>. Returns 0, or -1 when <r>
 * is anything else or out of range: a broken or hostile server's. */
int reply_time_us(const redisReply *r, int64_t *us);

/* What a Cluster's error reply redirects to. */
enum reply_redirect {
	REPLY_REDIRECT_NONE = 0, /* not a redirect, or its address is bad */
	REPLY_REDIRECT_MOVED,    /* the slot is the node's now */
	REPLY_REDIRECT_ASK,      /* this key, after ASKING: mid-migration */
};

/* The error text <err> read as "MOVED <slot> <host>:<port>" or "ASK
 * <slot> <host>:<port>": the node named is <*host> (<*hlen> bytes inside
 * <err>, not terminated) and <*port> (1-65535). Any other text, or an
 * address without a host or with a bad port, is REPLY_REDIRECT_NONE, the
 * outputs untouched. */
enum reply_redirect reply_redirect(const char *err, const char **host,
                                   size_t *hlen, int *port);

#endif
