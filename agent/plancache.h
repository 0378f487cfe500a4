/*
 * Plan cache: the tenant -> plan answers of the Redis hash named by
 * plan_lookup.redis_hash, kept per worker for plan_lookup.cache.
 *
 * It is the resolver policy_tenant_plan() calls (policy_plan_resolver):
 * it answers from memory and never waits. A missing or stale entry starts
 * one HGET in the background (at most one in flight per tenant) and is
 * answered with what is known meanwhile: the stale plan, or -1 (the
 * policy's default). So a plan changed in Redis applies within the cache
 * time plus one round trip, with no reload.
 *
 * Bounded: at most PLANCACHE_MAX entries; when full the table is emptied
 * (it refills from Redis). Tenants longer than PLANCACHE_TENANT_MAX are
 * not cached and get the default. One per worker: not thread-safe.
 */
#ifndef PLANCACHE_H
#define PLANCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define PLANCACHE_MAX        65536
#define PLANCACHE_TENANT_MAX 127
#define PLANCACHE_PLAN_MAX   63

struct plancache;
struct store;

struct plancache *plancache_new(struct store *st);
void plancache_free(struct plancache *pc);

/* The policy_plan_resolver: <ctx> is the plancache. */
int plancache_resolve(void *ctx, const struct policy *p, const char *tenant,
                      size_t len);

/* Entries held now. */
size_t plancache_count(const struct plancache *pc);

#endif
