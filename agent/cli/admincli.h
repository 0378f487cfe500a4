/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admincli: the operator's subcommands, `spoa-ratelimit key show|reset`
 * and `spoa-ratelimit top`, run instead of the agent when argv[1] names
 * one. They load the policy, talk to Redis once (keyop.h, topk.h), print
 * text or --json, and exit: 0 done, 1 Redis failed, 2 bad usage or input.
 */
#ifndef ADMINCLI_H
#define ADMINCLI_H

/* 1 when <cmd> is a subcommand of this module. */
int admincli_is(const char *cmd);

/* Runs the subcommand argv[1] (argv[0] is the program). Returns the exit
 * status. */
int admincli_main(int argc, char **argv);

#endif
