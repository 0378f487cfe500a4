/*
 * hiredis reply objects with fewer allocations: an array reply is one
 * block holding its redisReply, its element vector and a redisReply slot
 * per element, so an element that is an integer or nil (the script's
 * results: LIM_SCRIPT_RESULT integers per check) costs no allocation;
 * strings still own a copy of their bytes, nested arrays are their own
 * block. The objects have the layout of hiredis' own, so callbacks read
 * them as usual; they must be freed with these functions only, which
 * hiredis does when the reader carries them:
 *
 *     ac->c.reader->fn = &reply_fns;
 *
 * (set right after redisAsyncConnect, before anything is read).
 *
 * The peer chooses every size, so these never exit on it: an array of
 * more than REPLY_ARRAY_MAX elements, or a failed allocation, is refused
 * (NULL), and hiredis then fails the link with an out-of-memory error.
 */
#ifndef REPLY_H
#define REPLY_H

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

/* The longest array accepted. The largest this agent asks for is a full
 * batch's script reply: STORE_BATCH_MAX x POLICY_MAX_CHECKS x
 * LIM_SCRIPT_RESULT = 10,240 integers; CLUSTER SLOTS and SENTINEL replies
 * are far shorter. One such array costs at most 56 MiB. */
#define REPLY_ARRAY_MAX (1 << 20)

extern redisReplyObjectFunctions reply_fns;

#endif
