/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logs: stderr, one line per event, logfmt ("ts=... level=... msg=..."
 * then key=value pairs the caller formats). Thread-safe: each line is one
 * write(2). Nothing is logged per request by default.
 */
#ifndef LOG_H
#define LOG_H

#include <stddef.h>

enum log_level {
	LOG_ERROR = 0,
	LOG_WARN,
	LOG_INFO,
	LOG_DEBUG,
};

extern _Atomic int log_level; /* written on reload, read by every worker */

/* log_msg(LOG_INFO, "reload", "rules=%d path=%s", n, path): <msg> is a
 * fixed event name; <fmt> gives the key=value pairs (may be NULL). */
void log_msg(int level, const char *msg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int log_level_from_name(const char *s); /* -1 if unknown */

/* The end of a line, or of a value, cut to fit: log_msg() appends it to
 * a line past its buffer, and a caller that cuts a value it logs (a key,
 * a path) appends it to the line, so that every cut is visible. */
#define LOG_CUT_MARK " truncated=1"

/* Appends <s,len> to <buf> at <*off> for a quoted logfmt value: bytes that
 * are a space, a quote, a backslash or not printable ASCII are written
 * \xHH, so a value from a client (a key, a header) can neither end the
 * quotes nor start a line of its own. Stops at a whole byte's escape,
 * leaving room for the NUL, when <size> is reached; does not write the
 * NUL. Returns the bytes of <s> written: less than <len> when the value
 * was cut (the caller's line then says so with LOG_CUT_MARK). Pure. */
size_t log_put_escaped(char *buf, size_t size, size_t *off, const char *s,
                       size_t len);

/* One logged value, escaped: the first <max> bytes at most of <s,len>
 * through log_put_escaped() into <buf,size>, NUL-terminated. Returns 1
 * when the value was cut (longer than <max>, or its escaped text past
 * <size>), 0 when it is whole; the caller ends its line with
 * LOG_CUT(cut). Pure. */
int log_escape_value(char *buf, size_t size, const char *s, size_t len,
                     size_t max);

/* A text that a server or peer chose (a Redis error reply), for a quoted
 * value: at most LOG_TEXT_MAX of its bytes, with quotes, backslashes and
 * bytes that are not printable ASCII written \xHH and spaces kept.
 * log_text() fills <t> and returns t->s; t->cut says it was cut, for
 * LOG_CUT(t->cut). Call it before the log line, not as an argument next
 * to LOG_CUT(t->cut): arguments have no order. */
#define LOG_TEXT_MAX 200
struct log_text {
	char s[LOG_TEXT_MAX * 4 + 1];
	int  cut;
};
const char *log_text(struct log_text *t, const char *s);

/* The end of a line that cut a value when <cut>, else "". */
#define LOG_CUT(cut) ((cut) ? LOG_CUT_MARK : "")

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)                                                          \
	do {                                                                   \
		if (log_level >= LOG_INFO)                                     \
			log_msg(LOG_INFO, __VA_ARGS__);                        \
	} while (0)
#define log_debug(...)                                                         \
	do {                                                                   \
		if (log_level >= LOG_DEBUG)                                    \
			log_msg(LOG_DEBUG, __VA_ARGS__);                       \
	} while (0)

#endif
