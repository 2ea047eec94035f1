// Command edgegw-sensor simulates a small MQTT sensor on a serial line.
//
// It opens a serial device (a real /dev/tty* or a pseudo-terminal slave),
// speaks MQTT 3.1.1 over it with cobs-crc16 framing (or raw), publishes a
// JSON temperature reading at a fixed rate and optionally prints the messages
// that arrive on a subscription. It stops after --count readings or on
// SIGINT/SIGTERM.
//
//	edgegw-sensor --device /dev/pts/3 --id s1 --rate 1/s --count 10 --sub 'cmd/{id}/#'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/devices/sim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "edgegw-sensor:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("edgegw-sensor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		device   = fs.String("device", "", "serial device path, e.g. /dev/ttyUSB0 or a pty slave (required)")
		baud     = fs.Int("baud", 115200, "baud rate")
		framingS = fs.String("framing", "cobs-crc16", "link framing: cobs-crc16 or raw")
		maxFrame = fs.Int("max-frame", framing.DefaultMaxFrame, "maximum encoded frame size in bytes (cobs-crc16)")
		id       = fs.String("id", "s1", "MQTT client id")
		topic    = fs.String("topic", "sensors/{id}/temp", "publish topic; {id} is replaced by the client id")
		rate     = fs.String("rate", "1/s", "publish rate: N/s, N/m, N/h, or an interval such as 500ms")
		count    = fs.Int("count", 0, "number of readings to publish, then exit; 0 runs until SIGINT")
		qos      = fs.Uint("qos", 0, "publish and subscribe QoS: 0, 1 or 2")
		sub      = fs.String("sub", "", "optional subscription filter, e.g. cmd/{id}/#; arriving messages are printed as 'topic payload'")
		keep     = fs.Duration("keepalive", 60*time.Second, "MQTT keepalive")
		level    = fs.String("log-level", "info", "log level: debug, info, warn, error")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: edgegw-sensor --device PATH [flags]

Simulates an MQTT 3.1.1 sensor on a serial line. Each reading is published as
JSON {"id":..,"seq":..,"temp":..,"ts":..}. With cobs-crc16 framing every MQTT
packet travels as COBS(packet || CRC-16/CCITT-FALSE) followed by 0x00, see
docs/serial-framing.md. Stops after --count readings or on SIGINT/SIGTERM.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	mode, err := framing.ParseMode(*framingS)
	if err != nil {
		return err
	}
	interval, err := sim.ParseRate(*rate)
	if err != nil {
		return err
	}
	if *qos > 2 {
		return fmt.Errorf("--qos %d: must be 0, 1 or 2", *qos)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return sim.Run(ctx, sim.Config{
		Device:    *device,
		Baud:      *baud,
		Framing:   mode,
		MaxFrame:  *maxFrame,
		ClientID:  *id,
		Topic:     *topic,
		Interval:  interval,
		Count:     *count,
		QoS:       byte(*qos),
		Sub:       *sub,
		KeepAlive: *keep,
		Out:       stdout,
		Log:       log,
	})
}
