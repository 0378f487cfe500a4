/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spoa-ratelimit override set|list|del`: the operator's command line for
 * the runtime overrides (override.h), over one blocking hiredis
 * connection to the policy's Redis (redis.url, or -r URL; a single Redis
 * or a unix socket). The key is built by override.c's ov_rule_key(),
 * i.e. by keys.c, as the agent builds it. Not here: the agents' side
 * (ovcache.c) and the table's format (override.c).
 */
#ifndef OVCLI_H
#define OVCLI_H

/* Runs the subcommand in <argv> (argv[0] = "override"). Returns the exit
 * status: 0 done, 1 Redis failed or nothing to delete, 2 a usage error or
 * bad input (one line on stderr). */
int ovcli_main(int argc, char **argv);

#endif
