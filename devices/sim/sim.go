// Package sim is a sensor simulator: an MQTT 3.1.1 client
// (github.com/eclipse/paho.mqtt.golang) that talks to the gateway over a
// serial device, through the framing package's stream adapter, and publishes
// readings at a fixed rate. `edgegw sensor` (cmd/edgegw) wraps it; tests use it as a
// real client on a pseudo-terminal.
package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/devices/serialport"
)

// Config configures a simulated sensor.
type Config struct {
	Device   string       // serial device path (a /dev/tty* or a pty slave)
	Baud     int          // 0 selects serialport.DefaultBaud
	Framing  framing.Mode // cobs-crc16 (default) or raw
	MaxFrame int          // 0 selects framing.DefaultMaxFrame

	ClientID       string        // MQTT client id; required
	Topic          string        // publish topic; "{id}" is replaced by ClientID
	Interval       time.Duration // time between readings; see ParseRate
	Count          int           // readings to publish; 0 means until ctx ends
	QoS            byte          // 0, 1 or 2
	Sub            string        // optional subscription filter; "{id}" replaced
	KeepAlive      time.Duration // MQTT keepalive; 0 selects 60s
	ConnectTimeout time.Duration // CONNECT to CONNACK; 0 selects 10s

	Out io.Writer    // messages that arrive on Sub, one line each; nil discards
	Log *slog.Logger // nil discards

	// Dial, if set, replaces opening Device (tests, or other transports).
	Dial func() (io.ReadWriteCloser, error)
}

// Reading is the JSON payload of a published reading.
type Reading struct {
	ID   string  `json:"id"`
	Seq  int     `json:"seq"`
	Temp float64 `json:"temp"`
	TS   int64   `json:"ts"` // Unix milliseconds
}

// ParseRate parses a publish rate such as "1/s", "10/s", "30/m" or "2/h",
// or an interval such as "250ms", and returns the interval between readings.
func ParseRate(s string) (time.Duration, error) {
	if n, unit, ok := strings.Cut(s, "/"); ok {
		k, err := strconv.ParseFloat(n, 64)
		if err != nil || k <= 0 {
			return 0, fmt.Errorf("rate %q: want a positive count before /", s)
		}
		per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
		if per == 0 {
			return 0, fmt.Errorf("rate %q: unit must be s, m or h", s)
		}
		return time.Duration(float64(per) / k), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("rate %q: want N/s, N/m, N/h or a positive interval like 500ms", s)
	}
	return d, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.Device == "" && c.Dial == nil {
		errs = append(errs, errors.New("device: required"))
	}
	if c.ClientID == "" {
		errs = append(errs, errors.New("client id: required"))
	}
	if c.Topic == "" || strings.ContainsAny(c.Topic, "+#") {
		errs = append(errs, fmt.Errorf("topic %q: required, no wildcards", c.Topic))
	}
	if c.Interval <= 0 {
		errs = append(errs, errors.New("interval: must be positive"))
	}
	if c.Count < 0 {
		errs = append(errs, errors.New("count: must not be negative"))
	}
	if c.QoS > 2 {
		errs = append(errs, fmt.Errorf("qos %d: must be 0, 1 or 2", c.QoS))
	}
	return errors.Join(errs...)
}

// Run connects, optionally subscribes, and publishes Count readings (or
// until ctx is cancelled), then disconnects cleanly. It returns nil when the
// readings were sent or ctx was cancelled, and an error if the connection
// could not be made or was lost.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 60 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	id := cfg.ClientID
	topic := strings.ReplaceAll(cfg.Topic, "{id}", id)
	log := cfg.Log.With("device", cfg.Device, "client", id)

	// The connection paho is using, so that cancellation can close it even
	// while paho waits for CONNACK.
	var connMu sync.Mutex
	var conn net.Conn
	closeConn := func() {
		connMu.Lock()
		defer connMu.Unlock()
		if conn != nil {
			_ = conn.Close()
		}
	}
	lost := make(chan error, 1)

	opts := mqtt.NewClientOptions().
		// paho needs a broker URL; its scheme is never dialled because
		// the custom open function below supplies the connection.
		AddBroker((&url.URL{Scheme: "serial", Path: cfg.Device}).String()).
		SetClientID(id).
		SetProtocolVersion(4). // MQTT 3.1.1
		SetCleanSession(true).
		SetKeepAlive(cfg.KeepAlive).
		SetConnectTimeout(cfg.ConnectTimeout).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetCustomOpenConnectionFn(func(*url.URL, mqtt.ClientOptions) (net.Conn, error) {
			rw, err := dial(cfg)
			if err != nil {
				return nil, err
			}
			c := framing.NewConn(rw, framing.Config{Mode: cfg.Framing, MaxFrame: cfg.MaxFrame, Name: cfg.Device})
			connMu.Lock()
			conn = c
			connMu.Unlock()
			return c, nil
		}).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			select {
			case lost <- err:
			default:
			}
		})
	client := mqtt.NewClient(opts)

	// Connect; cancellation closes the port, which ends paho's wait.
	if err := waitToken(ctx, client.Connect(), closeConn); err != nil {
		closeConn()
		return fmt.Errorf("sim: connect: %w", err)
	}
	log.Info("connected", "framing", cfg.Framing)
	defer func() {
		client.Disconnect(250)
		closeConn()
		log.Info("disconnected")
	}()

	if cfg.Sub != "" {
		filter := strings.ReplaceAll(cfg.Sub, "{id}", id)
		var outMu sync.Mutex // paho may call handlers concurrently
		handler := func(_ mqtt.Client, m mqtt.Message) {
			outMu.Lock()
			defer outMu.Unlock()
			fmt.Fprintf(cfg.Out, "%s %s\n", m.Topic(), m.Payload())
		}
		if err := waitToken(ctx, client.Subscribe(filter, cfg.QoS, handler), nil); err != nil {
			return fmt.Errorf("sim: subscribe %q: %w", filter, err)
		}
		log.Info("subscribed", "topic", filter)
	}

	ticker := time.NewTicker(cfg.Interval)
	defer ticker.Stop()
	temp := 20 + rand.Float64()*5
	for seq := 1; cfg.Count == 0 || seq <= cfg.Count; seq++ {
		temp += (rand.Float64() - 0.5) * 0.2
		payload, err := json.Marshal(Reading{ID: id, Seq: seq, Temp: float64(int(temp*100)) / 100, TS: time.Now().UnixMilli()})
		if err != nil {
			return fmt.Errorf("sim: encode reading: %w", err)
		}
		if err := waitToken(ctx, client.Publish(topic, cfg.QoS, false, payload), nil); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sim: publish %d: %w", seq, err)
		}
		log.Debug("published", "topic", topic, "seq", seq)
		if cfg.Count != 0 && seq == cfg.Count {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-lost:
			return fmt.Errorf("sim: connection lost: %w", err)
		case <-ticker.C:
		}
	}
	return nil
}

// dial opens the configured device.
func dial(cfg Config) (io.ReadWriteCloser, error) {
	if cfg.Dial != nil {
		return cfg.Dial()
	}
	return serialport.Open(serialport.Config{Path: cfg.Device, Baud: cfg.Baud})
}

// waitToken waits for a paho token or ctx. On cancellation it calls abort
// (if set) and still waits for the token, so no paho operation outlives the
// call.
func waitToken(ctx context.Context, tok mqtt.Token, abort func()) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		if abort != nil {
			abort()
			<-tok.Done()
		}
		return ctx.Err()
	}
}
