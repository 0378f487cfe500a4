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
 * pipelining, no bodies, no chunking, no TLS. A request that declares a
 * body or frames it unclearly is refused before any route sees it
 * (httpd_check_head()); whatever follows the head is never read as a
 * request. Bind it to loopback or a management network.
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

/* The end of the header section of <buf,len>, whose first line is the
 * request line: a pointer to the empty line that ends it, the first one
 * after the request line, ended by CRLF or by a bare LF (RFC 9112 2.2
 * lets a recipient take LF alone as a line end). NULL while there is
 * none. Pure. */
const char *httpd_head_end(const char *buf, size_t len);

/* Checks the header lines <head,len> (from after the request line to the
 * empty line, excluded) of a request in HTTP/1.0 when <http10>, else
 * HTTP/1.1: their syntax and the message framing (RFC 9112 5 and 6). This
 * responder reads no bodies, so a request is served only when it declares
 * none. Returns 0, or the status to refuse it with, <*why> then a static
 * one-line reason:
 *   400  a line that is not "token:value" (a blank before the colon, an
 *        obs-fold line), a CR not ending a line, a NUL; Content-Length not
 *        1*DIGIT or past 2^64, or given twice (even equal); a
 *        Transfer-Encoding with a Content-Length (smuggling) or in
 *        HTTP/1.0 (faulty framing, 6.1);
 *   501  a Transfer-Encoding, whatever its codings (chunked included);
 *   413  a Content-Length above 0.
 * Pure: exposed for tests and the fuzz target. */
int httpd_check_head(const char *head, size_t len, int http10,
                     const char **why);

#endif
