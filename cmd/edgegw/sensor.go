package main

// edgegw sensor: the serial sensor simulator (devices/sim) as a subcommand
// of the one binary. The .deb ships a single static executable; the
// simulator costs it no new module (paho, the framing and the serial port
// are linked for the bridge and the serial listener already), and a Pi
// that runs the gateway can demo or test its serial listener without Go
// or a checkout.

import (
	"context"
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

const sensorHelp = `Simulates an MQTT 3.1.1 sensor on a serial line (a /dev/tty* or a
pseudo-terminal), to try or test a serial listener. Each reading is published
as JSON {"id":..,"seq":..,"temp":..,"ts":..}. With cobs-crc16 framing every
MQTT packet travels as COBS(packet || CRC-16/CCITT-FALSE) followed by 0x00
(docs/serial-framing.md). Stops after --count readings or on SIGINT/SIGTERM.
Example, with a pty pair made by socat:
  socat -d -d pty,raw,echo=0,link=/tmp/gw pty,raw,echo=0,link=/tmp/sensor &
  edgegw sensor --device /tmp/sensor --id s1 --rate 2/s --count 10 --sub 'cmd/{id}/#'`

func cmdSensor(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sensor", stdout, stderr)
	var (
		device   = fs.String("device", "", "serial device `PATH`, e.g. /dev/ttyUSB0 or a pty slave (required)")
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
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "edgegw sensor: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	if *device == "" {
		return usage("--device: required")
	}
	mode, err := framing.ParseMode(*framingS)
	if err != nil {
		return usage("--framing: %v", err)
	}
	interval, err := sim.ParseRate(*rate)
	if err != nil {
		return usage("--rate: %v", err)
	}
	if *qos > 2 {
		return usage("--qos %d: must be 0, 1 or 2", *qos)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return usage("--log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = sim.Run(ctx, sim.Config{
		Device: *device, Baud: *baud, Framing: mode, MaxFrame: *maxFrame,
		ClientID: *id, Topic: *topic, Interval: interval, Count: *count, QoS: byte(*qos),
		Sub: *sub, KeepAlive: *keep, Out: stdout, Log: log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "edgegw sensor: %v\n", err)
		return exitFailure
	}
	return exitOK
}
