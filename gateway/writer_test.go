package gateway_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestWriterDrainsBacklogPastOneBatch: a QoS 0 backlog larger than one
// write batch (64 KiB) is sent whole, though no ack will wake the writer.
func TestWriterDrainsBacklogPastOneBatch(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	payload := strings.Repeat("x", 2000)
	for i := 0; i < 100; i++ {
		if err := b.srv.Publish(&gateway.Message{Topic: fmt.Sprintf("r/%d", i), Payload: []byte(payload), Retain: true}); err != nil {
			t.Fatal(err)
		}
	}
	var got collector
	sub := pahoClient(t, b.addr, "sub", true, nil)
	waitTok(t, sub.Subscribe("r/#", 0, got.handle), "subscribe")
	testutil.Eventually(t, 10*time.Second, "all 100 retained messages", func() bool { return got.len() == 100 })
}

// TestPublishSizeCheckedWithAlias: the size check comes after the topic
// alias is in place. A PUBLISH that only the alias pushes over the client's
// maximum is dropped, and its alias is not recorded: the next PUBLISH on
// that topic still carries the topic name.
func TestPublishSizeCheckedWithAlias(t *testing.T) {
	const max = 23
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	sub, _ := rawConnect(t, b.addr, packet.V5, "small", true, func(cp *packet.Connect) {
		cp.Props.MaximumPacketSize = max
		cp.Props.Set(packet.PropMaximumPacketSize)
		cp.Props.TopicAliasMaximum = 10
		cp.Props.Set(packet.PropTopicAliasMaximum)
	})
	sub.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "abc/defg"})
	plain := &packet.Publish{Topic: "abc/defg", Payload: []byte("123456789")}
	if n := packet.Size(plain, packet.V5); n > max || n+3 <= max {
		t.Fatalf("fixture: %d bytes without the alias; it must fit only without it", n)
	}
	before := drops(b, "too_large")
	pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	pub.send(&packet.Publish{Topic: "abc/defg", Payload: plain.Payload})
	pub.send(&packet.Publish{Topic: "abc/defg", Payload: []byte("1")})
	p := sub.nextPublish(10 * time.Second)
	if n := packet.Size(p, packet.V5); n > max {
		t.Fatalf("received a %d-byte PUBLISH, maximum %d", n, max)
	}
	if string(p.Payload) != "1" || p.Topic != "abc/defg" {
		t.Fatalf("got topic %q payload %q, want the small message with its topic name (alias of the dropped one not recorded)", p.Topic, p.Payload)
	}
	if got := drops(b, "too_large") - before; got != 1 {
		t.Fatalf("too_large drops %d, want 1", got)
	}
}

// TestWriteTimeoutAborts: a subscriber that stopped reading is cut at the
// write deadline with a reset: the broker's socket is gone at once (ss
// shows nothing of it left with a send queue) and the peer reads a reset,
// not the rest of a backlog trickling in after the cut-off.
func TestWriteTimeoutAborts(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, WriteTimeout: 500 * time.Millisecond, MaxQueuedBytes: 64 << 20, MemoryBudget: 256 << 20})
	conn, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	for _, p := range []packet.Packet{
		&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "stuck", CleanStart: true},
		&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "flood"}}},
	} {
		pb, _ := packet.Append(nil, p, packet.V311)
		if _, err := conn.Write(pb); err != nil {
			t.Fatal(err)
		}
	}
	ack := make([]byte, 4+5) // CONNACK and SUBACK; then this client stops reading
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, ack); err != nil {
		t.Fatal(err)
	}
	before := closes(b, "write_timeout")
	pub, _ := rawConnect(t, b.addr, packet.V311, "", true, nil)
	payload := bytes.Repeat([]byte("x"), 16<<10)
	for i := 0; closes(b, "write_timeout") == before; i++ {
		if i > 20000 {
			t.Fatal("no write timeout after 320 MB")
		}
		pub.send(&packet.Publish{Topic: "flood", Payload: payload})
	}
	_, brokerPort, _ := net.SplitHostPort(b.addr)
	_, peerPort, _ := net.SplitHostPort(conn.LocalAddr().String())
	filter := fmt.Sprintf("( sport = :%s and dport = :%s )", brokerPort, peerPort)
	testutil.Eventually(t, 3*time.Second, "the broker's socket gone with its send queue", func() bool {
		out, err := exec.Command("ss", "-tnH", "state", "all", filter).CombinedOutput()
		if err != nil {
			t.Fatalf("ss: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out)) == ""
	})
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("stuck reader got %v after the cut-off, want a reset", err)
	}
}
