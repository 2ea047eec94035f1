// Package status is the gateway's status page: one read-only,
// server-rendered HTML page (GET /) for the person at the cabinet with a
// phone, its data as a stable JSON document for scripts (GET
// /status.json, versioned by Schema) and small SVG charts of the last hour
// per bridge (GET /chart.svg), drawn from a bounded in-memory History that
// one goroutine samples. The assets are embedded (go:embed) and inlined:
// the page needs no internet and no JavaScript library. It is served on
// the metrics address (cmd/edgegw/internal/metrics), so it has the same
// address restriction (loopback by default). docs/status-page.md
// documents it.
//
// Nothing here is on the message path: every read is a snapshot taken at
// request or sampling time under the parts' own locks and atomics.
package status
