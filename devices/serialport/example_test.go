package serialport_test

import (
	"context"
	"io"
	"log/slog"

	"github.com/edgegw/edgegw/devices/framing"
	"github.com/edgegw/edgegw/devices/serialport"
)

// A serial listener in a few lines: the Link keeps the device open across
// unplug and replug, framing.Conn turns each open port into an MQTT byte
// stream (a net.Conn with deadlines) for the broker's connection handler.
func ExampleLink() {
	serve := func(ctx context.Context, c *framing.Conn) error {
		// Hand c to the broker; with SplitOnConnect, a Read error
		// framing.ErrNewConnect ends the current logical connection
		// abnormally and the same c is served again for the next one.
		_, err := io.Copy(io.Discard, c)
		return err
	}

	link := serialport.NewLink(serialport.LinkConfig{
		Port: serialport.Config{Path: "/dev/ttyUSB0", Baud: 115200},
	}, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a real caller cancels on shutdown
	_ = link.Run(ctx, func(ctx context.Context, port io.ReadWriteCloser) error {
		c := framing.NewConn(port, framing.Config{
			Mode:           framing.ModeCOBSCRC16,
			MaxFrame:       framing.DefaultMaxFrame,
			SplitOnConnect: true,
		})
		return serve(ctx, c)
	})
}
