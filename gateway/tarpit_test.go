package gateway_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// aliceBroker starts a broker whose password file has one user, alice,
// with the password "right".
func aliceBroker(t *testing.T) *broker {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, []byte("alice:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{PasswordFile: path}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	return startBroker(t, gateway.Options{Authenticator: files, Authorizer: files})
}

// TestWrongPasswordsAnsweredAndSlowed: logins with a wrong password, in
// parallel, each get their CONNACK (bad user name or password) and are
// counted; the host's next attempt waits in the tarpit and, with the right
// password, succeeds and clears it.
func TestWrongPasswordsAnsweredAndSlowed(t *testing.T) {
	b := aliceBroker(t)
	login := func(v packet.Version, pw string) (packet.ReasonCode, error) {
		rc := rawDial(t, b.addr, v)
		defer rc.close()
		rc.send(&packet.Connect{ProtocolName: "MQTT", Version: v, ClientID: "", CleanStart: true, KeepAlive: 30,
			UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte(pw)})
		rc.start()
		p, err := rc.nextErr(20 * time.Second)
		if err != nil {
			return 0, err
		}
		ack, ok := p.(*packet.Connack)
		if !ok {
			return 0, fmt.Errorf("first packet %T", p)
		}
		return ack.ReasonCode, nil
	}
	var wg sync.WaitGroup
	codes := make(chan packet.ReasonCode, 4)
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := packet.V311
			if i%2 == 1 {
				v = packet.V5
			}
			code, err := login(v, "wrong")
			if err != nil {
				errs <- err
				return
			}
			if v == packet.V5 && code != packet.BadUsernameOrPassword || v == packet.V311 && code != packet.V3RefusedBadUsernameOrPassword {
				errs <- fmt.Errorf("%v: connack %v, want bad user name or password", v, code)
			}
			codes <- code
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := b.srv.Stats().AuthFailures; n != 4 {
		t.Fatalf("%d auth failures counted, want 4", n)
	}
	if code, err := login(packet.V311, "right"); err != nil || code != 0 {
		t.Fatalf("right password after the tarpit: %v %v", code, err)
	}
	if code, err := login(packet.V311, "right"); err != nil || code != 0 {
		t.Fatalf("right password again: %v %v", code, err)
	}
}

// TestLoginFloodAnsweredServerBusy holds docs/security.md's "while a flood
// from that address lasts, its logins wait in the same queue (up to 30 s,
// then "server busy", CONNACK 3 / 0x89), whatever its password", on the
// wire: after failed logins have raised the address's penalty to its 5 s
// cap, attempts queue up 5 s apart; once the queue is past 30 s, a new
// attempt is answered at once with server busy, v5 and 3.1.1 alike, even
// with the right password.
//
// It takes about 7 s: the seven failures that reach the cap wait 0.1 s,
// 0.2 s, ... 3.2 s in the tarpit, on the real clock.
func TestLoginFloodAnsweredServerBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the tarpit's schedule (about 7 s)")
	}
	b := aliceBroker(t)
	attempt := func(v packet.Version, pw string) *rawClient {
		rc := rawDial(t, b.addr, v)
		rc.send(&packet.Connect{ProtocolName: "MQTT", Version: v, ClientID: "", CleanStart: true, KeepAlive: 30,
			UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte(pw)})
		rc.start()
		return rc
	}
	connack := func(rc *rawClient, d time.Duration) (packet.ReasonCode, bool) {
		p, err := rc.nextErr(d)
		if err != nil {
			return 0, false
		}
		ack, ok := p.(*packet.Connack)
		if !ok {
			t.Fatalf("first packet %T, want CONNACK", p)
		}
		return ack.ReasonCode, true
	}

	// Seven failures, one after the other: the penalty doubles from 100 ms
	// to its 5 s cap.
	for i := range 7 {
		rc := attempt(packet.V311, "wrong")
		code, ok := connack(rc, 20*time.Second)
		rc.close()
		if !ok || code != packet.V3RefusedBadUsernameOrPassword {
			t.Fatalf("failure %d: CONNACK %v (answered %v), want bad user name or password", i+1, code, ok)
		}
	}

	// Attempts now queue 5 s apart. Open them until one is answered at
	// once: the queue holds six (30 s), so the seventh or so is busy. One
	// that is queued says nothing for its 5 s or more; this loop waits
	// 300 ms on each to tell the two apart, and keeps the queued ones open.
	var queued []*rawClient
	defer func() {
		for _, rc := range queued {
			rc.close()
		}
	}()
	busyAt := -1
	for i := 0; i < 20 && busyAt < 0; i++ {
		rc := attempt(packet.V5, "wrong")
		queued = append(queued, rc)
		if code, ok := connack(rc, 300*time.Millisecond); ok {
			if code != packet.ServerBusy {
				t.Fatalf("attempt %d in the flood: CONNACK %v, want 0x89 server busy or a wait", i+1, code)
			}
			busyAt = i
		}
	}
	if busyAt < 0 {
		t.Fatal("20 attempts queued and none was answered server busy")
	}
	if busyAt < 5 {
		t.Errorf("server busy after %d queued attempts, want the queue to hold 30 s (six 5 s slots)", busyAt)
	}

	// While the queue is full: busy at once, whatever the version or password.
	for _, tc := range []struct {
		v    packet.Version
		pw   string
		want packet.ReasonCode
	}{
		{packet.V311, "right", packet.V3RefusedServerUnavailable},
		{packet.V5, "right", packet.ServerBusy},
	} {
		rc := attempt(tc.v, tc.pw)
		code, ok := connack(rc, 2*time.Second)
		rc.close()
		if !ok || code != tc.want {
			t.Errorf("%v with the right password during the flood: CONNACK %v (answered %v), want %v", tc.v, code, ok, tc.want)
		}
	}
}

// usersBroker starts a broker whose password file holds each user with
// the password "<user>-pw".
func usersBroker(t *testing.T, users ...string) *broker {
	t.Helper()
	var lines []byte
	for _, u := range users {
		h, err := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, u+":"+string(h)+"\n"...)
	}
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{PasswordFile: path}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	return startBroker(t, gateway.Options{Authenticator: files, Authorizer: files})
}

// loginFrom connects from the local address from (127.0.0.x) as user with
// password and returns the CONNACK's code and how long it took; cancel
// (nil: never) abandons the wait.
func loginFrom(t *testing.T, addr, from, user, password string, cancel <-chan struct{}) (packet.ReasonCode, time.Duration, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	rc := newRawConn(t, conn, packet.V5)
	defer rc.close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-cancel:
			rc.conn.Close()
		case <-done:
		}
	}()
	start := time.Now()
	if err := rc.sendErr(&packet.Connect{ProtocolName: "MQTT", Version: packet.V5, CleanStart: true, KeepAlive: 30,
		UsernameFlag: true, Username: user, PasswordFlag: true, Password: []byte(password)}); err != nil {
		return 0, 0, err
	}
	rc.start()
	p, err := rc.nextErr(60 * time.Second)
	if err != nil {
		return 0, 0, err
	}
	ack, ok := p.(*packet.Connack)
	if !ok {
		return 0, 0, fmt.Errorf("first packet %T", p)
	}
	return ack.ReasonCode, time.Since(start), nil
}

// TestRightPasswordGetsInDuringFlood: while 32 connections from 127.0.0.1
// guess passwords for 5 s as fast as they are answered, a new connection
// per guess (16 at bob's, a user, 16 at mallory's, no user), the right
// password of another user from the same address gets in, whether it
// logged in before (recent) or not (fresh), and so does a login from
// 127.0.0.2; the flood's guesses stay slowed: each guessed user name gets
// at most its first parallel checks, then one per tarpitBase. How long
// the logins took is logged, not asserted (the machine is shared): make
// hostile's login-flood measures it against the shipped binary.
func TestRightPasswordGetsInDuringFlood(t *testing.T) {
	b := usersBroker(t, "alice", "bob", "carol")
	if code, _, err := loginFrom(t, b.addr, "127.0.0.1", "carol", "carol-pw", nil); err != nil || code != packet.Success {
		t.Fatalf("carol before the flood: %v %v", code, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered atomic.Int64
	failuresBefore := b.srv.Stats().AuthFailures
	start := time.Now()
	guessed := []string{"bob", "mallory"}
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := loginFrom(t, b.addr, "127.0.0.1", guessed[i%2], "guess", stop); err == nil {
					answered.Add(1)
				}
			}
		}()
	}
	// Into the flood: the guessed lanes' penalties are rising by now.
	testutil.Eventually(t, 10*time.Second, "the flood's failures", func() bool { return b.srv.Stats().AuthFailures-failuresBefore >= 7 })
	type result struct {
		who  string
		code packet.ReasonCode
		took time.Duration
		err  error
	}
	var results []result
	for _, l := range []struct{ who, from, user string }{
		{"fresh alice from the flooding address", "127.0.0.1", "alice"},
		{"recent carol from the flooding address", "127.0.0.1", "carol"},
		{"fresh alice from another address", "127.0.0.2", "alice"},
	} {
		code, took, err := loginFrom(t, b.addr, l.from, l.user, l.user+"-pw", nil)
		results = append(results, result{l.who, code, took, err})
	}
	<-time.After(5*time.Second - time.Since(start)) // the flood's length, not a wait for an event
	close(stop)
	wg.Wait()
	flood := time.Since(start) // every check of the flood started within it
	failures := b.srv.Stats().AuthFailures - failuresBefore
	for _, r := range results {
		if r.err != nil || r.code != packet.Success {
			t.Errorf("%s during the flood: CONNACK %v (%v) after %v, want success", r.who, r.code, r.err, r.took.Round(time.Millisecond))
		}
		t.Logf("%s: in after %v", r.who, r.took.Round(time.Millisecond))
	}
	t.Logf("flood of %v: %d attempts answered, %d passwords checked and refused (%.1f/s)",
		flood.Round(100*time.Millisecond), answered.Load(), failures, float64(failures)/flood.Seconds())
	// Per guessed lane, the tarpit's schedule at check time: no more
	// checks than a lane makes in the flood's length with checks taking
	// no time, whichever way it starts (tarpitFreeParallel at once, or one
	// after the other).
	bound := int64(len(guessed)) * int64(max(scheduleChecks(flood, gateway.TarpitFreeParallel), scheduleChecks(flood, 1)))
	if failures > bound {
		t.Errorf("the flood had %d passwords checked in %v, want at most %d (%d guessed users)", failures, flood, bound, len(guessed))
	}
}

// scheduleChecks is how many checks one lane makes within d when its
// checks take no time and all fail: first checks at once, then each one
// penalty after the last failure (docs/security.md).
func scheduleChecks(d time.Duration, first int) int {
	n, at := first, time.Duration(0)
	for {
		at += gateway.Penalty(n)
		if at > d {
			return n
		}
		n++
	}
}
