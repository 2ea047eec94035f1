package status

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

//go:embed assets/style.css assets/refresh.js
var assets embed.FS

// The page's CSS and script, inlined into it: the page is one request and
// needs nothing from the internet.
var (
	styleCSS, _  = assets.ReadFile("assets/style.css")
	refreshJS, _ = assets.ReadFile("assets/refresh.js")
)

// Handler serves the status page (GET /), its data (GET /status.json) and
// its charts (GET /chart.svg?bridge=NAME&kind=rate|backlog). Everything
// is read-only. With auth set, every request needs HTTP basic auth that
// auth accepts.
type Handler struct {
	Sources *Sources
	History *History
	// Auth checks basic-auth credentials; nil serves without.
	Auth func(user, password string) bool
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read-only", http.StatusMethodNotAllowed)
		return
	}
	if h.Auth != nil {
		u, p, ok := r.BasicAuth()
		if !ok || !h.Auth(u, p) {
			w.Header().Set("WWW-Authenticate", `Basic realm="edgegw status", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch r.URL.Path {
	case "/":
		h.servePage(w, r)
	case "/status.json":
		h.serveJSON(w, r)
	case "/chart.svg":
		h.serveChart(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) snapshot() Snapshot { return h.Sources.snapshot(time.Now(), h.History) }

func (h *Handler) serveJSON(w http.ResponseWriter, r *http.Request) {
	b, err := json.MarshalIndent(h.snapshot(), "", "  ")
	if err != nil {
		http.Error(w, fmt.Sprintf("status: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodHead {
		return
	}
	w.Write(append(b, '\n'))
}

// pageData is what the template sees.
type pageData struct {
	Snapshot
	Now  time.Time
	Span string
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Snapshot: h.snapshot(), Now: time.Now(), Span: formatDuration(h.span())}
	body := renderPage(d, styleCSS, refreshJS)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Inline style and script only; data from this origin; no framing.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'")
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// chartSpan is the time a chart shows: what the history holds, at least
// 5 minutes (a fresh start is not squeezed into the right edge), at most
// the history's length.
func chartSpan(full time.Duration, ps []point, now time.Time) time.Duration {
	if len(ps) == 0 {
		return full
	}
	return min(full, max(now.Sub(ps[0].t), 5*time.Minute))
}

// span is the history's length: how far back the charts can go.
func (h *Handler) span() time.Duration {
	if h.History == nil {
		return time.Hour
	}
	n := h.History.Samples
	if n <= 0 {
		n = DefaultSamples
	}
	return time.Duration(n) * h.History.interval()
}

func (h *Handler) serveChart(w http.ResponseWriter, r *http.Request) {
	name, kind := r.URL.Query().Get("bridge"), r.URL.Query().Get("kind")
	known := false
	for _, b := range h.Sources.Bridges {
		known = known || b.Name() == name
	}
	if !known || h.History == nil || (kind != "rate" && kind != "backlog") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	if r.Method == http.MethodHead {
		return
	}
	lines, title := rateLines, "messages per second, bridge "+name
	if kind == "backlog" {
		lines, title = backlogLines, "backlog in messages, bridge "+name
	}
	ps, now := h.History.series(name), time.Now()
	writeChart(w, title, ps, now, chartSpan(h.span(), ps, now), lines)
}

// BasicAuth returns an Auth function that accepts exactly user and
// password (compared in constant time).
func BasicAuth(user, password string) func(string, string) bool {
	return func(u, p string) bool {
		a := subtle.ConstantTimeCompare([]byte(u), []byte(user))
		b := subtle.ConstantTimeCompare([]byte(p), []byte(password))
		return a&b == 1
	}
}
