/*
 * metrics.h - the Prometheus endpoint: `GET /metrics` over HTTP (libevent
 * evhttp on the daemon's event base), TCP or a Unix socket.
 *
 * The page is generated from the GR_STATS table in stats.h, so a counter
 * added there appears here with nothing else to change: counters as
 * granary_<name>_total, gauges as granary_<name>, each with # HELP (the
 * table's description) and # TYPE.  Beside them: per-tier series
 * (granary_tier_*{tier="dram"|"nvme"}) derived from the tier fields, and
 * the request latency histograms of stats.h as
 * granary_request_duration_seconds{op=...}; then what metrics_set_extra
 * adds (granary_job_*{job=...}, see server.h).  Text format 0.0.4.
 *
 * Threads: the loop thread only (the snapshot callback runs there too).
 */
#ifndef GR_METRICS_H
#define GR_METRICS_H

#include <stddef.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "stats.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct metrics metrics;

/* Fill *out with the current counters and gauges (server_snapshot). */
typedef void (*metrics_snapshot_fn)(void *arg, gr_stats *out);

/*
 * Parse spec ("HOST:PORT", "[V6ADDR]:PORT", ":PORT" for every address,
 * or "unix:/ABSOLUTE/PATH"), bind and listen, and serve on base.  Port 0
 * picks a free port (see metrics_address).  A Unix socket path that is a
 * stale socket is replaced; a live one, or any other file, is refused.
 * snap(arg, ...) is called for each scrape; arg is borrowed and must
 * outlive the endpoint.  Returns 0 and *out, or -errno (-EINVAL for a
 * malformed spec, -EADDRINUSE, -EACCES, ... from bind) with a one-line
 * reason in err.  An empty spec is -EINVAL: the caller decides "off".
 */
int metrics_start(struct event_base *base, const char *spec, metrics_snapshot_fn snap,
                  void *arg, metrics **out, char *err, size_t errlen);

/* More of the page after the table's families: fn(arg, out) appends its
 * own (the per-job analysis series); 0, or -1 (the scrape then fails with
 * 500).  arg is borrowed and must outlive the endpoint.  fn NULL: none. */
typedef int (*metrics_extra_fn)(void *arg, struct evbuffer *out);
void metrics_set_extra(metrics *m, metrics_extra_fn fn, void *arg);

/* The bound address: "127.0.0.1:9464", "[::1]:9464" or "unix:/path".
 * Owned by m, valid until metrics_stop. */
const char *metrics_address(const metrics *m);

/* Close the listener and any scrape in progress, remove a Unix socket
 * file we created, free m and NULL *mp.  Call before the event base is
 * freed.  NULL-safe. */
void metrics_stop(metrics **mp);

/* Append the whole page for st to out.  0, or -ENOMEM (out then holds a
 * partial page). */
int metrics_render(const gr_stats *st, struct evbuffer *out);

#endif
