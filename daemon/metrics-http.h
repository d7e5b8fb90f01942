/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Prometheus scrape endpoint ([metrics] listen): GET /metrics answers
 * with what `kvtierctl metrics` prints (proto/prom.c renders both).  HTTP
 * is libmicrohttpd's, driven from the daemon's event loop through its
 * epoll descriptor: sockets never block, and each scrape reads the
 * daemon's state as a STATS request does, in one dispatch.
 */
#pragma once

struct manager;
struct metrics_http;

/* The most scrapers connected at once, and how long one may stay idle. */
#define METRICS_HTTP_CONNECTIONS 16
#define METRICS_HTTP_TIMEOUT_S 10

/* Bind [metrics] listen and serve it from m's event loop.
 * \return 0, or a negative errno (logged) that stops the daemon */
int metrics_http_start(struct manager *m, struct metrics_http **ret);
void metrics_http_free(struct metrics_http *h);
