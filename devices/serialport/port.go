// Package serialport opens serial devices and keeps them open across
// unplug and replug.
//
// Open configures the device with github.com/tarm/serial (baud rate, 8N1, raw
// mode) and then performs its I/O through a second, non-blocking descriptor
// on the same device, which Go's network poller serves. That is why a Port
// has real read and write deadlines, why Close unblocks a pending Read at
// once, and why an idle port costs no CPU: tarm/serial's own descriptor is
// blocking with a VTIME poll, which offers none of the three.
//
// Link owns one device path: it opens the device, hands it to a HandleFunc
// while it stays open, and reopens it with capped, jittered exponential
// backoff when it vanishes or does not exist yet.
package serialport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tarm/serial"
)

// DefaultBaud is the baud rate used when Config.Baud is zero.
const DefaultBaud = 115200

// Config describes a serial device.
type Config struct {
	Path string // device path, e.g. /dev/ttyUSB0 or a pty slave
	Baud int    // baud rate; 0 selects DefaultBaud

	// ReadTimeout, if positive, bounds each Read made while no read
	// deadline is set: the Read then fails with an error wrapping
	// os.ErrDeadlineExceeded. Zero blocks until data arrives.
	ReadTimeout time.Duration
}

// Port is an open serial device. It implements io.ReadWriteCloser and the
// deadline methods of net.Conn. Read and Write may be called concurrently.
// A Read returns io.EOF when the device hung up (e.g. a USB adapter was
// unplugged) and an error such as EIO when the other side of a
// pseudo-terminal closed.
type Port struct {
	f           *os.File
	path        string
	readTimeout time.Duration

	mu       sync.Mutex // guards userRead
	userRead time.Time  // read deadline set by the caller; zero if none

	closeOnce sync.Once
	closeErr  error
}

// Open opens and configures the device at cfg.Path.
func Open(cfg Config) (*Port, error) {
	if cfg.Path == "" {
		return nil, errors.New("serialport: empty device path")
	}
	baud := cfg.Baud
	if baud == 0 {
		baud = DefaultBaud
	}
	// tarm/serial sets the termios: raw, 8N1, baud, no flow control, no
	// echo. The settings belong to the device, not to the descriptor, so
	// they stay in force for the descriptor opened below.
	sp, err := serial.OpenPort(&serial.Config{Name: cfg.Path, Baud: baud})
	if err != nil {
		if _, ok := errors.AsType[*fs.PathError](err); ok {
			return nil, fmt.Errorf("serialport: %w", err) // names the path already
		}
		return nil, fmt.Errorf("serialport: configure %s: %w", cfg.Path, err)
	}
	// O_NONBLOCK makes os.File register the descriptor with the poller.
	// O_NOCTTY: the device must never become our controlling terminal.
	f, err := os.OpenFile(cfg.Path, os.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0)
	cerr := sp.Close() // we hold f now (or failed), so no hangup on close
	if err != nil {
		return nil, fmt.Errorf("serialport: %w", err)
	}
	if cerr != nil {
		f.Close()
		return nil, fmt.Errorf("serialport: open %s: close config handle: %w", cfg.Path, cerr)
	}
	// A device the poller cannot serve would silently lose deadlines.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("serialport: open %s: not pollable: %w", cfg.Path, err)
	}
	return &Port{f: f, path: cfg.Path, readTimeout: cfg.ReadTimeout}, nil
}

// Name returns the device path.
func (p *Port) Name() string { return p.path }

// Read reads from the device.
func (p *Port) Read(b []byte) (int, error) {
	if p.readTimeout > 0 {
		p.mu.Lock()
		if p.userRead.IsZero() {
			// Set under mu so a concurrent SetReadDeadline wins.
			if err := p.f.SetReadDeadline(time.Now().Add(p.readTimeout)); err != nil {
				p.mu.Unlock()
				return 0, err
			}
		}
		p.mu.Unlock()
	}
	return p.f.Read(b)
}

// Write writes to the device.
func (p *Port) Write(b []byte) (int, error) { return p.f.Write(b) }

// Close closes the device, unblocking pending Read and Write calls. It is
// safe to call more than once and from any goroutine.
func (p *Port) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.f.Close() })
	return p.closeErr
}

// SetDeadline sets the read and write deadlines.
func (p *Port) SetDeadline(t time.Time) error {
	if err := p.SetReadDeadline(t); err != nil {
		return err
	}
	return p.f.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline; the zero time restores the
// ReadTimeout behaviour.
func (p *Port) SetReadDeadline(t time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.userRead = t
	return p.f.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline.
func (p *Port) SetWriteDeadline(t time.Time) error { return p.f.SetWriteDeadline(t) }
