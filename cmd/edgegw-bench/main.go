// Command edgegw-bench is the load generator of edgegw's benchmark: raw MQTT
// over TCP through the project's codec, light enough that the broker, not
// the generator, is what gets measured. See bench/README.md.
//
//	edgegw-bench <scenario> [flags]
//
// Scenarios: fanin, fanout, latency, idle, slowsub, bidir-qos2, drain, lanes, sensors.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Result is one scenario run; with --json it is printed as one JSON object.
type Result struct {
	Scenario string  `json:"scenario"`
	Addr     string  `json:"addr"`
	QoS      int     `json:"qos"`
	Size     int     `json:"size"`
	Version  int     `json:"version"`
	Pubs     int     `json:"pubs,omitempty"`
	Subs     int     `json:"subs,omitempty"`
	Conns    int     `json:"conns,omitempty"`
	Rate     int     `json:"rate,omitempty"`
	Duration float64 `json:"duration_s"`
	ElapsedS float64 `json:"elapsed_s"`

	Sent     int64   `json:"sent"`
	Acked    int64   `json:"acked"`    // PUBACK/PUBCOMP received by publishers
	Received int64   `json:"received"` // deliveries to subscribers (all of them)
	InWindow int64   `json:"received_in_window"`
	Lost     int64   `json:"lost"` // expected deliveries that never arrived
	Dups     int64   `json:"dups"` // duplicate or out-of-order deliveries
	MsgPerS  float64 `json:"msg_per_s"`
	SendPerS float64 `json:"send_per_s"`

	LatP50us  float64 `json:"lat_p50_us"`
	LatP99us  float64 `json:"lat_p99_us"`
	LatP999us float64 `json:"lat_p999_us"`
	LatMaxUs  float64 `json:"lat_max_us"`

	Established int64   `json:"established,omitempty"` // idle
	Failed      int64   `json:"failed,omitempty"`      // idle: connections that could not be set up
	Dropped     int64   `json:"dropped,omitempty"`     // idle: closed by the broker during the hold
	SetupS      float64 `json:"setup_s,omitempty"`     // idle
	Cycles      int     `json:"cycles,omitempty"`      // slowsub: subscriber connections

	// drain: the backlog and the link, and what came of them.
	Backlog    int     `json:"backlog,omitempty"`
	QoS2Every  int     `json:"qos2_every,omitempty"` // mixed: every n-th backlog message QoS 2
	RTTms      float64 `json:"rtt_ms,omitempty"`
	LinkRate   int     `json:"link_rate,omitempty"`   // bytes/s each way; 0 = unlimited
	ReconnectS float64 `json:"reconnect_s,omitempty"` // link up -> the bridge's first connection through it
	DrainS     float64 `json:"drain_s,omitempty"`     // that connection -> the last backlog message upstream
	LinkUse    float64 `json:"link_use,omitempty"`    // bytes sent upstream / link capacity over DrainS
	LiveSent   int64   `json:"live_sent,omitempty"`
	LiveLost   int64   `json:"live_lost,omitempty"`
	Dups2      int64   `json:"dups_qos2,omitempty"` // QoS 2 backlog duplicates

	// lanes: the live sensor's QoS, the backlog's build, the alarm, the
	// time series for the chart.
	LiveQoS           int           `json:"live_qos,omitempty"`
	LiveAcked         int64         `json:"live_acked,omitempty"`          // live messages the gateway acknowledged
	BuildS            float64       `json:"build_s,omitempty"`             // publishing the backlog until all acknowledged
	AlarmLatMs        float64       `json:"alarm_lat_ms,omitempty"`        // the alarm's publish to upstream receipt
	AlarmAfterS       float64       `json:"alarm_after_s,omitempty"`       // the alarm's publish, seconds after the link came up
	AlarmAtBacklog    int64         `json:"alarm_at_backlog,omitempty"`    // backlog upstream when the alarm was published
	AlarmBacklogAfter int64         `json:"alarm_backlog_after,omitempty"` // backlog arriving between the alarm's publish and its receipt
	LiveSlow          int64         `json:"live_slow,omitempty"`           // live messages later than 1 s
	LiveSlowSentS     [2]float64    `json:"live_slow_sent_s,omitempty"`    // their first and last send time, seconds after the bridge's connection
	LiveLeft          int64         `json:"live_left,omitempty"`           // live messages not upstream when --duration ran out
	LiveMissingSentS  [2]float64    `json:"live_missing_sent_s,omitempty"` // when the live messages not upstream were sent (about), seconds after the bridge's connection
	BacklogLeft       int64         `json:"backlog_left,omitempty"`        // not upstream when --duration ran out
	Series            []SeriesPoint `json:"series,omitempty"`

	IntervalS  float64 `json:"interval_s,omitempty"`    // sensors: seconds between two readings of one sensor
	Skipped    int64   `json:"skipped,omitempty"`       // sensors: readings not sent (window full)
	UpReceived int64   `json:"up_received,omitempty"`   // sensors: received through the bridge upstream
	UpLost     int64   `json:"up_lost,omitempty"`       // sensors
	UpLatP50us float64 `json:"up_lat_p50_us,omitempty"` // sensors: publish to upstream receipt
	UpLatP99us float64 `json:"up_lat_p99_us,omitempty"`

	ReaderErrors int64  `json:"reader_errors,omitempty"`
	Pass         *bool  `json:"pass,omitempty"` // bidir-qos2
	Error        string `json:"error,omitempty"`
}

var scenarios = map[string]func(context.Context, *config, *Result) error{
	"fanin":      runFanin,
	"fanout":     runFanout,
	"latency":    runLatency,
	"idle":       runIdle,
	"slowsub":    runSlowsub,
	"bidir-qos2": runBidirQoS2,
	"drain":      runDrain,
	"lanes":      runLanes,
	"sensors":    runSensors,
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: edgegw-bench <fanin|fanout|latency|idle|slowsub|bidir-qos2|drain|lanes|sensors> [flags]")
	if fs != nil {
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("edgegw-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var asJSON bool
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:1883", "broker address")
	fs.IntVar(&cfg.qos, "qos", -1, "QoS of publishes and subscriptions (default 0; slowsub: 1, bidir-qos2: 2, sensors: 1)")
	fs.IntVar(&cfg.size, "size", 0, "payload bytes, at least 16 (default 64; slowsub 4096)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "publishing time; idle: hold time; bidir-qos2: timeout")
	fs.IntVar(&cfg.count, "count", 0, "messages per publisher (0 = until --duration; bidir-qos2 default 1000)")
	fs.IntVar(&cfg.pubs, "pubs", 0, "publishers (fanin default 20)")
	fs.IntVar(&cfg.subs, "subs", 0, "subscribers (fanout default 50)")
	fs.IntVar(&cfg.rate, "rate", 0, "total msg/s, paced (latency default 2000; 0 = as fast as possible)")
	fs.IntVar(&cfg.conns, "conns", 0, "idle connections (default 5000); sensors (default 1000)")
	fs.IntVar(&cfg.version, "version", 0, "MQTT version 4 (3.1.1) or 5 (default 4; bidir-qos2 5)")
	fs.IntVar(&cfg.window, "window", 16, "in-flight QoS 1/2 publishes per publisher")
	fs.StringVar(&cfg.readyFile, "ready-file", "", "idle: write this file once all connections are up")
	fs.DurationVar(&cfg.interval, "interval", 0, "sensors: time between two readings of one sensor (default 2s)")
	fs.StringVar(&cfg.handshake, "handshake", "", "sensors: write PREFIX.ready / PREFIX.done around the measured part and wait for their removal")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of a summary")
	fs.StringVar(&cfg.upstream, "upstream", "", "drain, lanes, sensors: the upstream broker the gateway bridges to (sensors: a subscriber there measures the bridged latency)")
	fs.StringVar(&cfg.proxy, "proxy", "", "drain, lanes: listen address of the slow link (the gateway's bridge address)")
	fs.DurationVar(&cfg.rtt, "rtt", 50*time.Millisecond, "drain: the link's round trip")
	fs.IntVar(&cfg.linkRate, "link-rate", 0, "drain: the link's bytes/s each way (0 = unlimited)")
	fs.IntVar(&cfg.qos2Every, "qos2-every", 0, "drain, lanes: mixed backlog, every n-th message QoS 2 and the rest QoS 1")
	fs.IntVar(&cfg.liveQoS, "live-qos", 1, "lanes: QoS of the live sensor (1 or 2)")
	fs.StringVar(&cfg.liveLane, "live-lane", "normal", "lanes: the live sensor's topic: normal (.../lanes/live) or bulk (.../lanes/bulk/live, the backlog's lane)")
	fs.DurationVar(&cfg.alarmAfter, "alarm-after", 10*time.Second, "lanes: publish the alarm at half the backlog upstream or this long after the link came up, whichever is first")
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stderr, fs)
		return 2
	}
	name := args[0]
	fn, ok := scenarios[name]
	if !ok {
		fmt.Fprintf(stderr, "edgegw-bench: %v %q\n", errUnknown, name)
		usage(stderr, nil)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if cfg.qos < 0 {
		cfg.qos = 0
		if name == "sensors" {
			cfg.qos = 1
		}
	}
	if cfg.qos > 2 || (cfg.version != 0 && cfg.version != 4 && cfg.version != 5) || cfg.window < 1 ||
		(cfg.size != 0 && cfg.size < minPayload) || cfg.duration <= 0 {
		fmt.Fprintln(stderr, "edgegw-bench: bad flags: need --qos 0..2, --version 4|5, --window >= 1, --size >= 16, --duration > 0")
		return 2
	}
	if cfg.size == 0 && name == "sensors" {
		cfg.size = 100
	}
	if cfg.size == 0 && name != "slowsub" {
		cfg.size = 64
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// Everything is bounded: setup, the run, and the drain.
	ctx, cancelT := context.WithTimeout(ctx, cfg.duration+60*time.Second)
	defer cancelT()

	res := &Result{Scenario: name, Addr: cfg.addr, QoS: cfg.qos, Size: cfg.size, Version: int(cfg.ver()), Duration: cfg.duration.Seconds()}
	err := fn(ctx, &cfg, res)
	if err != nil {
		res.Error = err.Error()
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.Encode(res)
	} else {
		summary(stdout, res)
	}
	if err != nil || (res.Pass != nil && !*res.Pass) {
		return 1
	}
	return 0
}

func summary(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%s against %s (MQTT v%d, QoS %d, %d B payload)\n", r.Scenario, r.Addr, map[int]int{4: 3, 5: 5}[r.Version], r.QoS, r.Size)
	switch r.Scenario {
	case "idle":
		fmt.Fprintf(w, "  connections: %d established, %d failed, %d dropped during hold; setup %.2fs\n",
			r.Established, r.Failed, r.Dropped, r.SetupS)
	case "drain":
		fmt.Fprintf(w, "  backlog %d over rtt %.0fms (link %d B/s): lost %d, duplicates %d (QoS 2: %d); live sent %d, lost %d\n",
			r.Backlog, r.RTTms, r.LinkRate, r.Lost, r.Dups, r.Dups2, r.LiveSent, r.LiveLost)
		fmt.Fprintf(w, "  reconnect %.2fs, drained in %.2fs (%.0f msg/s), link use %.0f%%; live latency p50 %.0fms p99 %.0fms\n",
			r.ReconnectS, r.DrainS, r.MsgPerS, 100*r.LinkUse, r.LatP50us/1e3, r.LatP99us/1e3)

	case "lanes":
		fmt.Fprintf(w, "  backlog %d bulk over rtt %.0fms (link %d B/s), built in %.1fs: lost %d, left %d, duplicates %d (QoS 2: %d); live (QoS %d) sent %d, acked %d, lost %d\n",
			r.Backlog, r.RTTms, r.LinkRate, r.BuildS, r.Lost, r.BacklogLeft, r.Dups, r.Dups2, r.LiveQoS, r.LiveSent, r.LiveAcked, r.LiveLost)
		fmt.Fprintf(w, "  reconnect %.2fs, drained in %.2fs (%.0f msg/s), link use %.0f%%; live latency p50 %.0fms p99 %.0fms; alarm %.0fms (%d backlog messages arrived meanwhile)\n",
			r.ReconnectS, r.DrainS, r.MsgPerS, 100*r.LinkUse, r.LatP50us/1e3, r.LatP99us/1e3, r.AlarmLatMs, r.AlarmBacklogAfter)
		if r.LiveLeft+r.LiveLost > 0 {
			fmt.Fprintf(w, "  %d live messages not upstream at the end (%d still queued when the time ran out), sent about %.2fs to %.2fs after the bridge's connection\n",
				r.LiveLeft+r.LiveLost, r.LiveLeft, r.LiveMissingSentS[0], r.LiveMissingSentS[1])
		}
		if r.LiveSlow > 0 {
			fmt.Fprintf(w, "  %d live messages later than 1s, sent %.2fs to %.2fs after the bridge's connection\n", r.LiveSlow, r.LiveSlowSentS[0], r.LiveSlowSentS[1])
		}
	case "sensors":
		fmt.Fprintf(w, "  %d sensors, a reading every %gs (%d msg/s); sent %d, acked %d, skipped %d\n", r.Conns, r.IntervalS, r.Rate, r.Sent, r.Acked, r.Skipped)
		fmt.Fprintf(w, "  local subscriber: received %d, lost %d, dup/reordered %d; latency p50 %.0fµs p99 %.0fµs\n", r.Received, r.Lost, r.Dups, r.LatP50us, r.LatP99us)
		if r.UpReceived > 0 || r.UpLost > 0 {
			fmt.Fprintf(w, "  upstream (bridged): received %d, lost %d; latency p50 %.0fµs p99 %.0fµs\n", r.UpReceived, r.UpLost, r.UpLatP50us, r.UpLatP99us)
		}
	case "slowsub":
		fmt.Fprintf(w, "  publisher: sent %d (%.0f msg/s), acked %d; subscriber: %d connections, %d messages received, never acked\n",
			r.Sent, r.SendPerS, r.Acked, r.Cycles, r.Received)
	default:
		fmt.Fprintf(w, "  pubs %d, subs %d; sent %d, received %d, lost %d, dup/reordered %d\n",
			r.Pubs, r.Subs, r.Sent, r.Received, r.Lost, r.Dups)
		fmt.Fprintf(w, "  delivered %.0f msg/s (sent %.0f msg/s)\n", r.MsgPerS, r.SendPerS)
		fmt.Fprintf(w, "  latency p50 %.0fµs  p99 %.0fµs  p99.9 %.0fµs  max %.0fµs\n", r.LatP50us, r.LatP99us, r.LatP999us, r.LatMaxUs)
	}
	if r.Pass != nil {
		verdict := "FAIL"
		if *r.Pass {
			verdict = "PASS"
		}
		fmt.Fprintf(w, "  %s in %.2fs\n", verdict, r.ElapsedS)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", r.Error)
	}
}
