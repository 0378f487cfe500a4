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
 */
#ifndef REPLY_H
#define REPLY_H

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

extern redisReplyObjectFunctions reply_fns;

#endif
