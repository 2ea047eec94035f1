package gateway_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// cutProxy forwards TCP between clients and a broker. Once cut, what the
// client sends is read and kept (not forwarded), as a link that lost its
// upstream direction; drop then closes every forwarded connection.
type cutProxy struct {
	l    net.Listener
	to   string
	mu   sync.Mutex
	cut  bool
	kept bytes.Buffer // client bytes swallowed while cut
	open []net.Conn
	wg   sync.WaitGroup
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, to: to}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.open = append(p.open, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
		go func() {
			defer p.wg.Done()
			defer u.Close()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.mu.Lock()
					cut := p.cut
					if cut {
						p.kept.Write(buf[:n])
					}
					p.mu.Unlock()
					if !cut {
						if _, err := u.Write(buf[:n]); err != nil {
							return
						}
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *cutProxy) setCut(v bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = v
}

func (p *cutProxy) swallowed() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.kept.Bytes())
}

func (p *cutProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

// A receiver that got the QoS 2 PUBLISH before the reload, but whose
// PUBREC never reached the broker, holds the message; libmosquitto hands a
// QoS 2 message to the application on PUBREL, not on PUBLISH. The PUBREL the resumed session is sent instead of
// the resend (TestSecurityReloadReleasesStartedQoS2) therefore makes
// mosquitto_sub print the message the reload denied: the copy that left
// the broker while the topic was allowed cannot be taken back
// (docs/security.md). The flow still ends and the session goes on.
func TestSecurityReleasedQoS2HeldByClient(t *testing.T) {
	needMosquittoClients(t)
	b, files := secureBroker(t, false)
	px := startCutProxy(t, b.addr)
	pb := *b
	pb.addr = px.l.Addr().String()
	const id = "alice-held"
	sub := startMosqSub(t, &pb, args([]string{"-c", "-i", id, "-q", "2", "-t", "shared/#", "-v", "-C", "2"}, user("alice"))...)
	waitSubs(t, b, 1)
	px.setCut(true) // from here the broker hears nothing from mosquitto_sub
	bob, _ := rawConnect(t, b.addr, packet.V311, id+"-bob", true, login("bob"))
	publishFlow(t, bob, 2, "shared/public/x", "sent-before-reload")
	// mosquitto_sub got the PUBLISH: its PUBREC (0x50 0x02) was swallowed.
	testutil.Eventually(t, 10*time.Second, "the PUBREC swallowed", func() bool {
		return bytes.Contains(px.swallowed(), []byte{0x50, 0x02})
	})
	denyPublic(t, files)
	before := b.srv.Stats().Denied["delivery"]
	px.setCut(false)
	px.drop() // mosquitto_sub reconnects and resumes its session
	testutil.Eventually(t, 10*time.Second, "the released flow ended", func() bool {
		st := b.srv.Stats()
		return st.Inflight == 0 && st.Denied["delivery"] == before+1
	})
	bobPublisher(t, b, id+"-bob2")(2, "shared/end", "end")
	got := sub.wait(t)
	if len(got) != 2 || got[0] != "shared/public/x sent-before-reload" || got[1] != "shared/end end" {
		t.Fatalf("mosquitto_sub printed %q, want the message it held, then the marker", got)
	}
}
