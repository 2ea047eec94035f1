package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
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
