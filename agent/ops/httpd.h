/* SPDX-License-Identifier: Apache-2.0 */
/*
 * httpd: the metrics and health endpoint. A tiny HTTP/1.0-1.1 responder
 * on a libev loop that answers exactly
 *
 *   GET /metrics   200, Prometheus text (metrics_render_alloc())
 *   GET /healthz   200 "ok\n" when <healthy>(<arg>) returns non-zero,
 *                  503 "unhealthy\n" otherwise
 *
 * (HEAD too), 404 for other paths, 405 for other methods, 400 for a
 * request head that is malformed or over HTTPD_MAX_HEAD bytes, one request
 * per connection (Connection: close). A handler may take every request
 * under one path prefix (httpd_set_handler(): the admin API, admin.h),
 * any method, with the request head to read its headers; authentication
 * is the handler's. It is not a general HTTP server: no keep-alive, no
 * bodies, no chunking, no TLS. Bind it to loopback or a management
 * network.
 *
 * Bounded: at most HTTPD_MAX_CONNS connections, each of which must
 * complete its exchange within the timeout (HTTPD_TIMEOUT seconds by
 * default) or is closed. When full, a new connection takes the slot of the
 * oldest one still reading its request, so idle sockets (a slowloris)
 * cannot keep a health check out; the listener pauses only while every
 * slot is writing a response. Run it on the main loop, not a worker loop, so
 * that a scrape never delays an ACK.
 */
#ifndef HTTPD_H
#define HTTPD_H

#include <ev.h>

#define HTTPD_MAX_HEAD  4096 /* bytes of request line + headers */
#define HTTPD_MAX_CONNS 64
#define HTTPD_TIMEOUT   5.0 /* seconds for a whole exchange */

struct httpd;

/* Listens on <addr>, "host:port" (a numeric IPv4 address or name),
 * "[v6]:port" or ":port" (all IPv4 interfaces), with port 0 for any
 * free port (see httpd_port()), and starts serving on <loop>. <healthy>
 * is called on <loop>'s thread for each GET /healthz; a NULL <healthy>
 * means always healthy. Returns a new httpd (free with httpd_free()) or
 * NULL with <*err> set to a malloc'ed message. */
struct httpd *httpd_new(struct ev_loop *loop, const char *addr,
                        int (*healthy)(void *), void *arg, char **err);

/* Stops the watchers, closes the listener and every open connection, and
 * frees <h>. Must run on <loop>'s thread (or after the loop stopped).
 * httpd_free(NULL) is a no-op. */
void httpd_free(struct httpd *h);

/* The bound TCP port (useful after asking for port 0). */
int httpd_port(const struct httpd *h);

/* Replaces the per-connection timeout (seconds, > 0) for connections
 * accepted from now on. For tests and tuning. */
void httpd_set_timeout(struct httpd *h, double seconds);

/* A request handed to a handler (httpd_set_handler()): slices of the
 * connection's buffer, valid during the call. */
struct httpd_req {
	const char *meth, *target, *head; /* target: path and query */
	size_t      mlen, tlen, hlen;     /* head: the header lines */
};

/* Answers <rq>: returns the status and sets <*body> (malloc'ed, taken
 * over by httpd) and <*ctype>. Runs on the loop's thread. */
typedef int httpd_handler(void *arg, const struct httpd_req *rq, char **body,
                          size_t *blen, const char **ctype);

/* Routes every request whose path starts with <prefix> (static text) to
 * <fn>, any method. One handler per httpd; NULL <fn> removes it. */
void httpd_set_handler(struct httpd *h, const char *prefix, httpd_handler *fn,
                       void *arg);

/* The value of header <name> (case-insensitive) in <head,len>, without
 * surrounding blanks, or NULL; <*vlen> gets its length. */
const char *httpd_header(const char *head, size_t len, const char *name,
                         size_t *vlen);

/* Checks "METHOD SP /target SP HTTP/1.x" in <line,len> (no line end):
 * an upper-case method of at most 16 bytes, an origin-form target with no
 * control bytes, HTTP/1.0 or 1.1. Sets the method and path (the target
 * without its query) as slices of <line>. Returns 0, or -1 when malformed.
 * Pure: exposed for the fuzz target. */
int httpd_parse_request_line(const char *line, size_t len, const char **meth,
                             size_t *mlen, const char **path, size_t *plen);

#endif
