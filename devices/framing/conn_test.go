package framing

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// bufRWC is an in-memory port: reads from in, writes to out.
type bufRWC struct {
	in     io.Reader
	out    bytes.Buffer
	writes int
	closed bool
}

func (b *bufRWC) Read(p []byte) (int, error) { return b.in.Read(p) }
func (b *bufRWC) Write(p []byte) (int, error) {
	b.writes++
	return b.out.Write(p)
}
func (b *bufRWC) Close() error { b.closed = true; return nil }

// mqttPacket builds a packet of the given type with a body of n bytes.
func mqttPacket(first byte, n int) []byte {
	p := []byte{first}
	for rem := n; ; {
		d := byte(rem % 128)
		rem /= 128
		if rem > 0 {
			d |= 0x80
		}
		p = append(p, d)
		if rem == 0 {
			break
		}
	}
	for i := range n {
		p = append(p, byte(i*7))
	}
	return p
}

var _ net.Conn = (*Conn)(nil)

func TestConnWriteSplitsPackets(t *testing.T) {
	connect := mqttPacket(0x10, 14)
	pub := mqttPacket(0x30, 200) // two-byte remaining length
	big := mqttPacket(0x32, 20000)
	stream := bytes.Join([][]byte{connect, pingreq, pub, big, pingreq}, nil)
	want := [][]byte{connect, pingreq, pub, big, pingreq}

	tests := []struct {
		name   string
		chunks []int // chunk sizes; the rest in one piece
	}{
		{"one write", nil},
		{"byte by byte", func() []int {
			s := make([]int, len(stream))
			for i := range s {
				s[i] = 1
			}
			return s
		}()},
		{"split inside header", []int{len(connect) + 1, 1, 1, 2}},
		{"split inside remaining length", []int{len(connect) + len(pingreq) + 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := &bufRWC{in: bytes.NewReader(nil)}
			c := NewConn(port, Config{})
			rest := stream
			for _, n := range tt.chunks {
				mustWrite(t, c, rest[:n])
				rest = rest[n:]
			}
			mustWrite(t, c, rest)
			if port.writes != len(want) {
				t.Fatalf("%d port writes for %d packets", port.writes, len(want))
			}
			got := readAll(t, NewReader(&port.out, 0))
			if !equalPackets(got, want) {
				t.Fatalf("frames do not match packets")
			}
		})
	}
}

func mustWrite(t *testing.T, w io.Writer, p []byte) {
	t.Helper()
	n, err := w.Write(p)
	if err != nil || n != len(p) {
		t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
	}
}

func TestConnWriteErrors(t *testing.T) {
	t.Run("remaining length over 4 bytes", func(t *testing.T) {
		c := NewConn(&bufRWC{in: bytes.NewReader(nil)}, Config{})
		if _, err := c.Write([]byte{0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v, want ErrMalformed", err)
		}
	})
	t.Run("packet over max frame", func(t *testing.T) {
		port := &bufRWC{in: bytes.NewReader(nil)}
		c := NewConn(port, Config{MaxFrame: 64})
		mustWrite(t, c, mqttPacket(0x30, MaxPacketLen(64)-2))
		n, err := c.Write(mqttPacket(0x30, 100)[:10])
		if !errors.Is(err, ErrFrameTooLarge) || n != 0 {
			t.Fatalf("Write = %d, %v; want 0, ErrFrameTooLarge", n, err)
		}
		if port.writes != 1 {
			t.Fatalf("oversize packet reached the port")
		}
	})
}

func TestConnReadConcatenatesGoodFrames(t *testing.T) {
	connect := mqttPacket(0x10, 14)
	pub := mqttPacket(0x30, 300)
	bad := AppendFrame(nil, pub)
	bad[10] ^= 1
	in := bytes.Join([][]byte{frames(connect), bad, frames(pub, pingreq)}, nil)
	c := NewConn(&bufRWC{in: bytes.NewReader(in)}, Config{Name: "/dev/ttyTEST"})
	got, err := io.ReadAll(iotestSmallReads{c})
	if err != nil {
		t.Fatal(err)
	}
	if want := bytes.Join([][]byte{connect, pub, pingreq}, nil); !bytes.Equal(got, want) {
		t.Fatalf("read %x\nwant %x", got, want)
	}
	if s := c.Stats(); s.Good != 3 || s.BadCRC != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if c.RemoteAddr().String() != "/dev/ttyTEST" || c.LocalAddr().Network() != "serial" {
		t.Fatalf("addr = %v", c.RemoteAddr())
	}
}

// iotestSmallReads reads through a 7-byte buffer to exercise pending bytes.
type iotestSmallReads struct{ r io.Reader }

func (s iotestSmallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), 7)]) }

func TestConnSplitOnConnect(t *testing.T) {
	connect1 := mqttPacket(0x10, 14)
	connect2 := mqttPacket(0x10, 15)
	in := frames(connect1, pingreq, connect2, pingreq)
	c := NewConn(&bufRWC{in: bytes.NewReader(in)}, Config{SplitOnConnect: true})
	var first []byte
	buf := make([]byte, 5)
	var err error
	for {
		var n int
		n, err = c.Read(buf)
		first = append(first, buf[:n]...)
		if err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNewConnect) || !bytes.Equal(first, append(connect1, pingreq...)) {
		t.Fatalf("first logical connection: %x, %v", first, err)
	}
	second, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(second, append(connect2, pingreq...)) {
		t.Fatalf("second logical connection: %x, %v", second, err)
	}
}

func TestConnRawPassThrough(t *testing.T) {
	in := []byte{0x10, 0x02, 0xFF, 0x00, 0x00}
	port := &bufRWC{in: bytes.NewReader(in)}
	c := NewConn(port, Config{Mode: ModeRaw})
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, in) {
		t.Fatalf("raw read %x, %v", got, err)
	}
	mustWrite(t, c, []byte{1, 2, 3})
	if !bytes.Equal(port.out.Bytes(), []byte{1, 2, 3}) {
		t.Fatalf("raw write %x", port.out.Bytes())
	}
	if err := c.Close(); err != nil || !port.closed {
		t.Fatalf("close: %v", err)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"": ModeCOBSCRC16, "cobs-crc16": ModeCOBSCRC16, "raw": ModeRaw} {
		if m, err := ParseMode(s); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
		if s != "" && want.String() != s {
			t.Errorf("String() = %q, want %q", want.String(), s)
		}
	}
	if _, err := ParseMode("slip"); err == nil {
		t.Error("ParseMode(slip) succeeded")
	}
}

// Over a net.Pipe (which has deadlines) the Conn passes deadlines through,
// and a Read that timed out mid-frame loses nothing. The deadline is set
// only once the first part of the frame was read from the pipe (a pipe's
// Write returns when the reader took every byte), so it always falls
// mid-frame, however the machine schedules the two sides.
func TestConnDeadlines(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	c := NewConn(b, Config{})
	defer c.Close()

	f := frames(publishQ0)
	done := make(chan error, 1)
	go func() { // owned by this test; joined below
		_, err := a.Write(f[:4])
		done <- err
	}()
	buf := make([]byte, 64)
	read := make(chan error, 1)
	go func() { // owned by this test; joined below
		_, err := c.Read(buf)
		read <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now()); err != nil { // wakes the Read waiting for the rest
		t.Fatal(err)
	}
	if err := <-read; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read err = %v, want deadline exceeded", err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := a.Write(f[4:])
		done <- err
	}()
	n, err := io.ReadFull(c, buf[:len(publishQ0)])
	if err != nil || !bytes.Equal(buf[:n], publishQ0) {
		t.Fatalf("read after timeout: %x, %v", buf[:n], err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Any chunking of a valid packet stream yields exactly one frame per packet.
func TestConnWriteChunkingProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		types := []byte{0x10, 0x20, 0x30, 0x32, 0x3D, 0x40, 0x62, 0x82, 0x90, 0xC0, 0xD0, 0xE0}
		n := rapid.IntRange(0, 10).Draw(t, "n")
		var pkts [][]byte
		var stream []byte
		for range n {
			p := mqttPacket(rapid.SampledFrom(types).Draw(t, "type"), rapid.IntRange(0, 400).Draw(t, "len"))
			pkts = append(pkts, p)
			stream = append(stream, p...)
		}
		port := &bufRWC{in: bytes.NewReader(nil)}
		c := NewConn(port, Config{MaxFrame: 1024})
		for len(stream) > 0 {
			k := rapid.IntRange(1, len(stream)).Draw(t, "chunk")
			if m, err := c.Write(stream[:k]); err != nil || m != k {
				t.Fatalf("Write = %d, %v", m, err)
			}
			stream = stream[k:]
		}
		if port.writes != len(pkts) {
			t.Fatalf("%d frames for %d packets", port.writes, len(pkts))
		}
		if got := readAll(t, NewReader(&port.out, 1024)); !equalPackets(got, pkts) {
			t.Fatalf("frames differ from packets")
		}
	})
}
