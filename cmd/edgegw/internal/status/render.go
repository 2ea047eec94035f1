package status

import (
	"bytes"
	"fmt"
	"html"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The page is written by hand rather than with html/template: the
// template engine's reflection keeps every exported method of the binary
// alive, and the page made with it cost 1,638,400 bytes of the stripped
// linux/arm64 binary (9,371,810 to 11,010,210); written by hand, the whole
// status page costs 131,072 (to 9,502,882). Every value from the gateway
// goes through esc; the markup around it is constant.

var esc = html.EscapeString

// page is a page being written.
type page struct{ bytes.Buffer }

// s writes constant markup.
func (p *page) s(parts ...string) {
	for _, x := range parts {
		p.WriteString(x)
	}
}

// t writes text, escaped.
func (p *page) t(x string) { p.WriteString(esc(x)) }

// live writes an element whose text the refresh script keeps up to date
// from status.json: key is the path into it, f its format ("" = as is).
func (p *page) live(tag, key, f, text string) { p.livec(tag, "", key, f, text) }

// livec is live with a class.
func (p *page) livec(tag, class, key, f, text string) {
	p.s("<", tag)
	if class != "" {
		p.s(` class="`, class, `"`)
	}
	p.s(` data-k="`, esc(key), `"`)
	if f != "" {
		p.s(` data-f="`, f, `"`)
	}
	p.s(">", esc(text), "</", tag, ">")
}

// noun writes singular or its plural (with an s) for the count at key,
// kept in step with the number by the refresh script.
func (p *page) noun(key string, one bool, singular string) {
	word := singular + "s"
	if one {
		word = singular
	}
	p.s(`<span data-k="`, esc(key), `" data-f="noun" data-n="`, esc(singular), `">`, esc(word), "</span>")
}

func itoa[T int | int64 | uint64](v T) string {
	if u, ok := any(v).(uint64); ok {
		return strconv.FormatUint(u, 10)
	}
	return strconv.FormatInt(int64(v), 10)
}

// renderPage writes the whole page for d.
func renderPage(d pageData, css, js []byte) []byte {
	p := &page{}
	p.s(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>edgegw status</title>
<style>`)
	p.Write(css)
	p.s("</style>\n</head>\n<body>\n<header>\n<h1>edgegw status</h1>\n<p class=\"meta\">")
	p.t(d.Version)
	p.s(" · up ")
	p.live("span", "uptime_seconds", "secs", formatDuration(time.Duration(d.UptimeSeconds)*time.Second))
	p.s(` · page data <span id="fresh">`, esc(clock(d.GeneratedAt)), "</span></p>\n</header>\n<main>\n")
	renderSummary(p, d)
	for i, b := range d.Bridges {
		renderBridge(p, d, i, b)
	}
	renderListeners(p, d)
	renderSerial(p, d)
	renderDrops(p, d)
	p.s(`</main>
<footer>Read-only. Data for scripts: <a href="status.json">status.json</a> · <a href="metrics">metrics</a> · <a href="healthz">healthz</a></footer>
<script>`)
	p.Write(js)
	p.s("</script>\n</body>\n</html>\n")
	return p.Bytes()
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func renderSummary(p *page, d pageData) {
	p.s(`<section id="summary">`, "\n")
	for i, b := range d.Bridges {
		p.s(`<p class="banner `, esc(b.State), `" data-k="bridges.`, strconv.Itoa(i), `.state" data-f="banner">Uplink `, esc(b.Name), ": ")
		if b.State == "connected" {
			p.s("connected")
		} else {
			p.s("DISCONNECTED for ", esc(formatDuration(d.Now.Sub(b.Since))))
		}
		p.s("</p>\n")
	}
	m := d.Memory
	p.s(`<table class="kv">`, "\n<tr><th>Memory (Go runtime)</th><td>")
	p.live("span", "memory.go_total_bytes", "bytes", formatBytes(m.GoTotalBytes))
	if m.GoLimitBytes > 0 {
		p.s(" of ")
		p.live("span", "memory.go_limit_bytes", "bytes", formatBytes(m.GoLimitBytes))
		p.s(" limit")
	}
	p.s(" · resident ")
	p.live("span", "memory.resident_bytes", "bytes", formatBytes(m.ResidentBytes))
	p.s("</td></tr>\n<tr><th>Queued for local clients</th><td>")
	p.live("span", "memory.queued_bytes", "bytes", formatBytes(m.QueuedBytes))
	p.s(" of ")
	p.live("span", "memory.memory_budget_bytes", "bytes", formatBytes(m.BudgetBytes))
	p.s(" budget (", esc(formatPct(m.QueuedBytes, m.BudgetBytes)), ") · ")
	p.live("span", "broker.queued_messages", "", itoa(d.Broker.QueuedMessages))
	p.s(" ")
	p.noun("broker.queued_messages", d.Broker.QueuedMessages == 1, "message")
	p.s("</td></tr>\n<tr><th>Clients</th><td>")
	p.live("span", "broker.sessions_connected", "", itoa(d.Broker.SessionsConnected))
	p.s(" connected, ")
	p.live("span", "broker.sessions_disconnected", "", itoa(d.Broker.SessionsDisconnected))
	p.s(" offline ")
	p.noun("broker.sessions_disconnected", d.Broker.SessionsDisconnected == 1, "session")
	p.s("</td></tr>\n<tr><th>Messages</th><td>")
	p.live("span", "broker.messages_received", "", itoa(d.Broker.MessagesReceived))
	p.s(" received, ")
	p.live("span", "broker.messages_sent", "", itoa(d.Broker.MessagesSent))
	p.s(" sent, ")
	p.live("span", "broker.retained", "", itoa(d.Broker.Retained))
	p.s(" retained</td></tr>\n</table>\n</section>\n")
}

func renderBridge(p *page, d pageData, i int, b Bridge) {
	k := func(field string) string { return "bridges." + strconv.Itoa(i) + "." + field }
	p.s(`<section class="bridge">`, "\n<h2>Bridge ", esc(b.Name), ` <span class="state `, esc(b.State), `" data-k="`, k("state"), `">`, esc(b.State), "</span></h2>\n")
	p.s(`<table class="kv">`, "\n<tr><th>Since</th><td>")
	p.live("span", k("since"), "clock", clock(b.Since))
	p.s(" (")
	p.live("span", k("since"), "ago", formatDuration(d.Now.Sub(b.Since)))
	p.s(" ago)</td></tr>\n<tr><th>Last error</th><td>")
	if b.State == "connected" && b.LastError != "" {
		p.s("<i>before this connection:</i> ")
	}
	text := b.LastErrorText
	if text == "" {
		text = "none"
	}
	p.live("span", k("last_error_text"), "", text)
	p.s("<br>")
	p.live("code", k("last_error"), "", b.LastError)
	p.s("</td></tr>\n<tr><th>Address</th><td>")
	p.live("span", k("address"), "", b.Address)
	p.s(" (configured: ")
	for j, a := range b.Addresses {
		if j > 0 {
			p.s(", ")
		}
		p.t(a)
	}
	p.s(")</td></tr>\n<tr><th>Upstream</th><td>")
	up := b.UpstreamText
	if up == "" {
		up = "not connected yet"
	}
	p.live("span", k("upstream_text"), "", up)
	p.s(" · above the granted QoS: ")
	p.live("span", k("qos_not_granted"), "", b.QoSNotGranted)
	p.s(", ")
	p.live("span", k("qos_downgraded"), "", itoa(b.QoSDowngraded))
	p.s(" downgraded</td></tr>\n<tr><th>Backlog</th><td>")
	p.live("b", k("backlog_messages"), "", itoa(b.BacklogMessages))
	p.s(" ")
	p.noun(k("backlog_messages"), b.BacklogMessages == 1, "message")
	p.s(", ")
	p.live("span", k("backlog_bytes"), "bytes", formatBytes(b.BacklogBytes))
	p.s(" · in flight ")
	p.live("span", k("inflight"), "", itoa(b.Inflight))
	p.s("</td></tr>\n<tr><th>Rates (last minute)</th><td>in ")
	p.live("span", k("in_per_second"), "rate", formatRate(b.InRate))
	p.s(", drained ")
	p.live("span", k("drain_per_second"), "rate", formatRate(b.DrainRate))
	p.s("</td></tr>\n<tr><th>Time to empty</th><td>")
	eta, class := etaOf(b)
	p.livec("span", class, k("time_to_empty_seconds"), "eta", eta)
	p.s("</td></tr>\n<tr><th>Delivery <small>since this process started</small></th><td>")
	// counters writes (field, value, words) triples; a "%s" in words ends the
	// noun before it, pluralized ("connect%s": 1 connect, 2 connects).
	counters := func(cs ...any) {
		for n := 0; n+2 < len(cs); n += 3 {
			if n > 0 {
				p.s(", ")
			}
			field, v, words := cs[n].(string), cs[n+1].(uint64), cs[n+2].(string)
			p.live("span", k(field), "", itoa(v))
			p.s(" ")
			if i := strings.Index(words, "%s"); i >= 0 {
				j := strings.LastIndexByte(words[:i], ' ') + 1
				p.s(esc(words[:j]))
				p.noun(k(field), v == 1, words[j:i])
				p.s(esc(words[i+2:]))
			} else {
				p.s(esc(words))
			}
		}
	}
	counters("sent", b.Sent, "sent", "acked", b.Acked, "acked", "resumed", b.Resumed, "resumed",
		"received", b.Received, "received from the cloud", "spool_dropped", b.SpoolDropped, "dropped (spool full)",
		"accept_failed", b.AcceptFailed, "refused locally", "inbound_failed", b.InboundFailed, "inbound refused")
	p.s("</td></tr>\n<tr><th>Connections <small>since this process started</small></th><td>")
	counters("connects", b.Connects, "connect%s", "disconnects", b.Disconnects, "disconnect%s",
		"connect_failures", b.ConnectFailures, "failed attempt%s", "watchdog_trips", b.WatchdogTrips, "watchdog trip%s",
		"write_timeouts", b.WriteTimeouts, "write timeout%s")
	p.s("</td></tr>\n</table>\n")
	q := url.QueryEscape(b.Name)
	p.s(`<figure><img class="chart" alt="messages per second, bridge `, esc(b.Name), `" src="chart.svg?bridge=`, esc(q),
		`&amp;kind=rate"><figcaption>Messages into the spool and acked upstream per second (up to the last `, esc(d.Span), ")</figcaption></figure>\n")
	p.s(`<figure><img class="chart" alt="backlog, bridge `, esc(b.Name), `" src="chart.svg?bridge=`, esc(q),
		`&amp;kind=backlog"><figcaption>Backlog in messages (up to the last `, esc(d.Span), ")</figcaption></figure>\n</section>\n")
}

func renderListeners(p *page, d pageData) {
	p.s("<section>\n<h2>Listeners and clients</h2>\n")
	for i, l := range d.Listeners {
		typ := l.Type
		if l.TLS {
			typ += "+tls"
		}
		plural := "s"
		if len(l.Clients) == 1 {
			plural = ""
		}
		p.s("<h3>", esc(l.Name), " <small>", esc(typ), " ", esc(l.Address), " · ", itoa(len(l.Clients)), " client", plural, "</small></h3>\n")
		if len(l.Clients) == 0 {
			continue
		}
		p.s(`<div class="scroll"><table class="grid">`, "\n",
			`<tr class="head"><th>Client id</th><th>User</th><th>Address</th><th>MQTT</th><th>Connected</th><th>Queued</th><th>In flight</th><th>Slow</th></tr>`, "\n")
		for j, c := range l.Clients {
			k := func(field string) string { return fmt.Sprintf("listeners.%d.clients.%d.%s", i, j, field) }
			if c.Slow {
				p.s(`<tr class="slow">`)
			} else {
				p.s("<tr>")
			}
			slow := "no"
			if c.Slow {
				slow = "yes"
			}
			p.s(`<td data-l="Client id"><b>`, esc(c.ClientID), `</b></td><td data-l="User">`, esc(c.Username),
				`</td><td data-l="Address">`, esc(c.Remote), `</td><td data-l="MQTT">`, esc(c.Protocol),
				`</td><td data-l="Connected" title="`, esc(clock(c.Since)), `">`, esc(formatDuration(d.Now.Sub(c.Since))), " ago</td>")
			p.s(`<td data-l="Queued" data-k="`, k("queued_messages"), `">`, itoa(c.Queued), "</td>")
			p.s(`<td data-l="In flight" data-k="`, k("inflight"), `">`, itoa(c.Inflight), "</td>")
			p.s(`<td data-l="Slow" data-k="`, k("slow_consumer"), `" data-f="yesno">`, slow, "</td></tr>\n")
		}
		p.s("</table></div>\n")
	}
	p.s("</section>\n")
}

func renderSerial(p *page, d pageData) {
	if len(d.SerialLinks) == 0 {
		return
	}
	p.s("<section>\n<h2>Serial links</h2>\n", `<div class="scroll"><table class="grid">`, "\n",
		`<tr class="head"><th>Listener</th><th>Port</th><th>Framing</th><th>State</th><th>Good frames</th><th>Corrupt frames</th><th>Opens / failures</th><th>Last (re)connect</th></tr>`, "\n")
	for i, s := range d.SerialLinks {
		k := func(field string) string { return "serial_links." + strconv.Itoa(i) + "." + field }
		p.s(`<tr><td data-l="Listener"><b>`, esc(s.Listener), `</b></td><td data-l="Port">`, esc(s.Device), " @ ", itoa(s.Baud),
			`</td><td data-l="Framing">`, esc(s.Framing), `</td><td data-l="State"><span class="state `, esc(s.State),
			`" data-k="`, k("state"), `">`, esc(s.State), "</span></td>")
		p.s(`<td data-l="Good frames" data-k="`, k("frames_good"), `">`, itoa(s.FramesGood), `</td><td data-l="Corrupt frames">`)
		for _, kind := range sortedKeys(s.FramesBad) {
			p.s(esc(kind), " ")
			p.live("span", k("frames_corrupt."+kind), "", itoa(s.FramesBad[kind]))
			p.s(" ")
		}
		p.s(`</td><td data-l="Opens / failures">`)
		p.live("span", k("opens"), "", itoa(s.Opens))
		p.s(" / ")
		p.live("span", k("open_failures"), "", itoa(s.OpenFailures))
		p.s(`</td><td data-l="Last (re)connect">`)
		if s.LastOpen != nil {
			p.live("span", k("last_open"), "clock", clock(*s.LastOpen))
		} else {
			p.s("never")
		}
		p.s("</td></tr>\n")
	}
	p.s("</table></div>\n</section>\n")
}

func renderDrops(p *page, d pageData) {
	p.s("<section>\n<h2>Dropped messages</h2>\n", `<table class="kv">`, "\n")
	for i, dr := range d.Drops {
		if dr.Count > 0 {
			p.s(`<tr class="warn">`)
		} else {
			p.s("<tr>")
		}
		p.s("<th>", esc(dr.Reason), `</th><td data-k="drops.`, strconv.Itoa(i), `.count">`, itoa(dr.Count), "</td></tr>\n")
	}
	p.s(`<tr><th>slow consumers (total)</th><td data-k="broker.slow_consumers">`, itoa(d.Broker.SlowConsumers), "</td></tr>\n")
	p.s(`<tr><th>failed logins</th><td data-k="broker.auth_failures">`, itoa(d.Broker.AuthFailures), "</td></tr>\n</table>\n</section>\n")
}
