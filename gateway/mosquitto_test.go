package gateway_test

// Round trips with Debian's mosquitto_pub / mosquitto_sub against the broker.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/internal/testutil"
)

func needMosquittoClients(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (Debian package mosquitto-clients)", bin)
		}
	}
}

func hostPort(t testing.TB, addr string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

// mosqSub is a running mosquitto_sub.
type mosqSub struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	errb   bytes.Buffer
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// startMosqSub runs mosquitto_sub with args against b and returns at once;
// the caller waits until it is subscribed (see waitSubs).
func startMosqSub(t *testing.T, b *broker, args ...string) *mosqSub {
	t.Helper()
	h, p := hostPort(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s := &mosqSub{done: make(chan struct{}), cancel: cancel}
	s.cmd = exec.CommandContext(ctx, "mosquitto_sub", append([]string{"-h", h, "-p", p}, args...)...)
	s.cmd.Stdout = &s.out
	s.cmd.Stderr = &s.errb
	if err := s.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// wait waits for mosquitto_sub to exit and returns its output lines.
func (s *mosqSub) wait(t *testing.T) []string {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.cancel()
		<-s.done
		t.Fatalf("mosquitto_sub did not exit; output %q stderr %q", s.out.String(), s.errb.String())
	}
	if s.err != nil {
		t.Fatalf("mosquitto_sub: %v; output %q stderr %q", s.err, s.out.String(), s.errb.String())
	}
	return lines(s.out.String())
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// mosqPub runs mosquitto_pub to completion; stdin feeds -l.
func mosqPub(t *testing.T, b *broker, stdin string, args ...string) {
	t.Helper()
	h, p := hostPort(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mosquitto_pub", append([]string{"-h", h, "-p", p}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub %v: %v: %s", args, err, out)
	}
}

// waitSubs waits until the broker holds n subscriptions.
func waitSubs(t testing.TB, b *broker, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d subscriptions", n), func() bool {
		return b.srv.Stats().Subscriptions == n
	})
}

func TestMosquittoRoundTrip(t *testing.T) {
	needMosquittoClients(t)
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, v := range []string{"mqttv31", "mqttv311", "mqttv5"} {
		for _, qos := range []int{0, 1, 2} {
			for _, mode := range []string{"m", "l"} {
				t.Run(fmt.Sprintf("%s/qos%d/-%s", v, qos, mode), func(t *testing.T) {
					topic := fmt.Sprintf("rt/%s/%d/%s", v, qos, mode)
					n := 1
					if mode == "l" {
						n = 20
					}
					base := b.srv.Stats().Subscriptions
					sub := startMosqSub(t, b, "-V", v, "-q", fmt.Sprint(qos), "-t", topic,
						"-C", fmt.Sprint(n), "-W", "20", "-v")
					waitSubs(t, b, base+1)
					var want []string
					if mode == "m" {
						mosqPub(t, b, "", "-V", v, "-q", fmt.Sprint(qos), "-t", topic, "-m", "hello world")
						want = []string{topic + " hello world"}
					} else {
						var in strings.Builder
						for i := range n {
							fmt.Fprintf(&in, "line %d\n", i)
							want = append(want, fmt.Sprintf("%s line %d", topic, i))
						}
						mosqPub(t, b, in.String(), "-V", v, "-q", fmt.Sprint(qos), "-t", topic, "-l")
					}
					got := sub.wait(t)
					if strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Fatalf("got %q, want %q", got, want)
					}
					waitSubs(t, b, base)
				})
			}
		}
	}
}

func TestMosquittoRetained(t *testing.T) {
	needMosquittoClients(t)
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	for _, v := range []string{"mqttv31", "mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			topic := "ret/" + v
			// firstSeen subscribes and returns the first message it gets,
			// as "retainflag topic payload". live is published (not
			// retained) once it is subscribed, so a missing retained
			// message shows as the live one instead of a wait.
			firstSeen := func(live string) string {
				t.Helper()
				base := b.srv.Stats().Subscriptions
				sub := startMosqSub(t, b, "-V", v, "-q", "1", "-t", topic, "-C", "1", "-W", "20", "-F", "%r %t %p")
				// With a retained message it may be done before we look.
				testutil.Eventually(t, 10*time.Second, "subscribed or done", func() bool {
					select {
					case <-sub.done:
						return true
					default:
						return b.srv.Stats().Subscriptions == base+1
					}
				})
				mosqPub(t, b, "", "-V", v, "-q", "1", "-t", topic, "-m", live)
				got := sub.wait(t)
				waitSubs(t, b, base)
				if len(got) != 1 {
					t.Fatalf("got %q", got)
				}
				return got[0]
			}
			mosqPub(t, b, "", "-V", v, "-q", "1", "-r", "-t", topic, "-m", "v1")
			if got, want := firstSeen("live1"), "1 "+topic+" v1"; got != want {
				t.Fatalf("after set: got %q, want %q", got, want)
			}
			mosqPub(t, b, "", "-V", v, "-q", "1", "-r", "-t", topic, "-m", "v2")
			if got, want := firstSeen("live2"), "1 "+topic+" v2"; got != want {
				t.Fatalf("after replace: got %q, want %q", got, want)
			}
			before := b.srv.Stats().Retained
			mosqPub(t, b, "", "-V", v, "-q", "1", "-r", "-t", topic, "-n")
			if got := b.srv.Stats().Retained; got != before-1 {
				t.Errorf("retained count %d after clear, want %d", got, before-1)
			}
			if got, want := firstSeen("live3"), "0 "+topic+" live3"; got != want {
				t.Fatalf("after clear: got %q, want %q (the retained message was not cleared)", got, want)
			}
		})
	}
}

func TestMosquittoWildcards(t *testing.T) {
	needMosquittoClients(t)
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	published := []string{"w/a/x", "w/b/x", "w/a/y", "w", "w/a/x/z", "other/a/x"}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"w/+/x", []string{"w/a/x", "w/b/x"}},
		{"w/#", []string{"w/a/x", "w/b/x", "w/a/y", "w", "w/a/x/z"}},
		{"+/a/x", []string{"w/a/x", "other/a/x"}},
		{"w/+", nil},
		{"+/+/+", []string{"w/a/x", "w/b/x", "w/a/y", "other/a/x"}},
		{"#", published},
	} {
		t.Run(strings.ReplaceAll(tc.filter, "#", "hash"), func(t *testing.T) {
			want := append(append([]string(nil), tc.want...), "end")
			base := b.srv.Stats().Subscriptions
			sub := startMosqSub(t, b, "-V", "mqttv311", "-q", "1", "-t", tc.filter, "-t", "end",
				"-C", fmt.Sprint(len(want)), "-W", "20", "-F", "%t")
			waitSubs(t, b, base+2)
			for _, topic := range published {
				mosqPub(t, b, "", "-q", "1", "-t", topic, "-m", "x")
			}
			mosqPub(t, b, "", "-q", "1", "-t", "end", "-m", "x") // marker: nothing more is coming
			got := sub.wait(t)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("filter %q got %q, want %q", tc.filter, got, want)
			}
			waitSubs(t, b, base)
		})
	}
}

func TestMosquittoSysTopics(t *testing.T) {
	needMosquittoClients(t)
	b := startBroker(t, gateway.Options{AllowAnonymous: true, SysInterval: 50 * time.Millisecond})
	hash := startMosqSub(t, b, "-t", "#", "-C", "1", "-W", "20", "-F", "%t")
	plus := startMosqSub(t, b, "-t", "+/broker/#", "-C", "1", "-W", "20", "-F", "%t")
	waitSubs(t, b, 2)
	// Let a few $SYS rounds go by while "#" and "+/broker/#" are
	// subscribed: the $SYS/# subscriber, started after them (it may take
	// its 30 and leave before a later one subscribes), ends after 30.
	sys := startMosqSub(t, b, "-t", "$SYS/#", "-C", "30", "-W", "20", "-F", "%t")
	got := sys.wait(t)
	mosqPub(t, b, "", "-t", "plain/marker", "-m", "x")
	mosqPub(t, b, "", "-t", "x/broker/marker", "-m", "x")
	if got := hash.wait(t); len(got) != 1 || got[0] != "plain/marker" {
		t.Errorf(`"#" got %q, want only plain/marker ($SYS must not match a leading wildcard)`, got)
	}
	if got := plus.wait(t); len(got) != 1 || got[0] != "x/broker/marker" {
		t.Errorf(`"+/broker/#" got %q, want only x/broker/marker`, got)
	}
	seen := map[string]bool{}
	for _, l := range got {
		if !strings.HasPrefix(l, "$SYS/broker/") {
			t.Errorf("$SYS/# got %q", l)
		}
		seen[l] = true
	}
	for _, want := range []string{"$SYS/broker/version", "$SYS/broker/uptime", "$SYS/broker/clients/connected"} {
		if !seen[want] {
			t.Errorf("$SYS/# did not get %s (got %q)", want, got)
		}
	}
}
