package gateway_test

// Access control against hostile clients on the LAN, with three users and
// an ACL (securityACL), stock mosquitto_pub/sub where the point is about
// what a client can do, and raw clients where the exact packet matters.
// docs/security.md points here for each behaviour it states.

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
	"github.com/edgegw/edgegw/internal/testutil"
)

// securityACL is an installation's ACL for alice, bob and ops, plus what
// the tests' other publishers need: bob may also write shared/# (he
// publishes the secret), and ops may write into every client's subtree
// (the marker after an attempted leak).
const securityACL = `# anonymous clients: only the broker's own topics
topic read $SYS/#

user alice
topic readwrite shared/#
topic deny shared/secret/#
topic readwrite alice/#

user bob
topic readwrite bob/#
topic readwrite shared/#

user ops
topic readwrite clients/#

pattern readwrite clients/%c/#
`

var securityUsers = map[string]string{"alice": "alicepw", "bob": "bobpw", "ops": "opspw"}

// secureBroker runs a broker with securityUsers' password file and securityACL;
// anonymous clients are allowed only when anon is set.
func secureBroker(t *testing.T, anon bool) (*broker, *auth.Files) {
	t.Helper()
	return secureBrokerLog(t, anon, nil)
}

// secureBrokerLog is secureBroker logging into logs (at info level and
// above) when it is not nil.
func secureBrokerLog(t *testing.T, anon bool, logs *testutil.LogBuffer) (*broker, *auth.Files) {
	t.Helper()
	return secureBrokerState(t, anon, logs, "", nil)
}

// secureBrokerState is secureBroker with a state store in stateDir (when
// not ""), restored, then given restore (when not nil) as if read from an
// older store.
func secureBrokerState(t *testing.T, anon bool, logs *testutil.LogBuffer, stateDir string, restore *store.State) (*broker, *auth.Files) {
	t.Helper()
	dir := t.TempDir()
	var pw strings.Builder
	for u, p := range securityUsers {
		// The lowest bcrypt cost keeps the test fast; the file format and
		// the check are the ones `edgegw passwd` writes and the broker runs.
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		pw.WriteString(u + ":" + string(h) + "\n")
	}
	files := &auth.Files{PasswordFile: filepath.Join(dir, "passwd"), ACLFile: filepath.Join(dir, "acl")}
	if err := os.WriteFile(files.PasswordFile, []byte(pw.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.ACLFile, []byte(securityACL), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	opts := gateway.Options{AllowAnonymous: anon, Authenticator: files, Authorizer: files}
	if stateDir != "" {
		st, loaded, err := store.Open(store.Options{Dir: stateDir, Sync: store.SyncAlways})
		if err != nil {
			t.Fatal(err)
		}
		opts.Store = st
		b := startBroker(t, opts)
		b.srv.Restore(loaded)
		if restore != nil {
			b.srv.Restore(restore)
		}
		var once sync.Once
		stop := b.stop
		b.stop = func() { once.Do(func() { stop(); st.Close() }) } // the store's lock is free after stop
		t.Cleanup(b.stop)
		return b, files
	}
	if logs != nil {
		return startBrokerLog(t, opts, slog.New(slog.NewTextHandler(logs, nil))), files
	}
	return startBroker(t, opts), files
}

// user returns mosquitto client arguments for a user of securityUsers.
func user(name string) []string { return []string{"-u", name, "-P", securityUsers[name]} }

// login sets a raw CONNECT's credentials.
func login(name string) func(*packet.Connect) {
	return func(cp *packet.Connect) {
		cp.UsernameFlag, cp.Username = true, name
		cp.PasswordFlag, cp.Password = true, []byte(securityUsers[name])
	}
}

func args(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Point 1: a subscription allowed as a whole does not carry the messages of
// a denied subtree it overlaps.
func TestSecurityWildcardDoesNotLeakDeniedTopic(t *testing.T) {
	needMosquittoClients(t)
	for _, tc := range []struct{ v, filter string }{
		{"mqttv311", "shared/+/x"}, {"mqttv5", "shared/+/x"},
		// A filter covering the whole denied subtree is granted too, as
		// mosquitto grants it: the check per message is what holds.
		{"mqttv311", "shared/#"}, {"mqttv5", "shared/#"},
	} {
		v := tc.v
		t.Run(v+" "+tc.filter, func(t *testing.T) {
			b, _ := secureBroker(t, false)
			sub := startMosqSub(t, b, args(user("alice"), []string{"-V", v, "-q", "1", "-t", tc.filter, "-C", "1", "-v"})...)
			waitSubs(t, b, 1)
			// QoS 1 from one publisher, one at a time: each is routed
			// before its PUBACK, so the secret, if it leaked, would be
			// queued for alice before the public message.
			mosqPub(t, b, "", args(user("bob"), []string{"-V", v, "-q", "1", "-t", "shared/secret/x", "-m", "leak"})...)
			mosqPub(t, b, "", args(user("bob"), []string{"-V", v, "-q", "1", "-t", "shared/public/x", "-m", "ok"})...)
			got := sub.wait(t)
			if len(got) != 1 || got[0] != "shared/public/x ok" {
				t.Fatalf("alice received %q, want only \"shared/public/x ok\"", got)
			}
			if n := b.srv.Stats().Denied["delivery"]; n != 1 {
				t.Fatalf("denied deliveries = %d, want 1", n)
			}
		})
	}
}

// Point 1, retained: the retained messages sent on subscribe are checked one
// by one, as live ones are.
func TestSecurityRetainedCheckedPerMessage(t *testing.T) {
	needMosquittoClients(t)
	b, _ := secureBroker(t, false)
	mosqPub(t, b, "", args(user("bob"), []string{"-q", "1", "-r", "-t", "shared/secret/x", "-m", "rleak"})...)
	mosqPub(t, b, "", args(user("bob"), []string{"-q", "1", "-r", "-t", "shared/public/x", "-m", "rok"})...)

	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-r", true, login("alice"))
	// A second SUBSCRIBE is handled after the first one's retained
	// messages were queued: its SUBACK comes after them, and the marker
	// published after that SUBACK comes last.
	alice.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "shared/+/x", QoS: 1}}})
	alice.send(&packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: "alice/end", QoS: 1}}})
	var got []string
	for marker := false; ; {
		switch p := alice.next(10 * time.Second).(type) {
		case *packet.Suback:
			if p.PacketID == 2 {
				mosqPub(t, b, "", args(user("alice"), []string{"-i", "alice-p", "-q", "1", "-t", "alice/end", "-m", "end"})...)
			}
		case *packet.Publish:
			alice.ackPublish(p)
			got = append(got, p.Topic+" "+string(p.Payload))
			marker = p.Topic == "alice/end"
		}
		if marker {
			break
		}
	}
	if len(got) != 2 || got[0] != "shared/public/x rok" {
		t.Fatalf("alice received %q, want the public retained message, then the marker", got)
	}
	if n := b.srv.Stats().Denied["delivery"]; n != 1 {
		t.Fatalf("denied deliveries = %d, want 1", n)
	}
}

// Point 1: a new ACL applies to existing subscriptions from the next message
// on (the verdict cache is dropped on reload).
func TestSecurityReloadAppliesToExistingSubscriptions(t *testing.T) {
	b, files := secureBroker(t, false)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-r", true, login("alice"))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/+/x", QoS: 1})
	bob, _ := rawConnect(t, b.addr, packet.V311, "bob-r", true, login("bob"))
	publish := func(topic, body string, id uint16) {
		bob.send(&packet.Publish{QoS: 1, PacketID: id, Topic: topic, Payload: []byte(body)})
		expect[*packet.Puback](t, bob, 10*time.Second)
	}
	publish("shared/public/x", "before", 1)
	if p := alice.nextPublish(10 * time.Second); string(p.Payload) != "before" {
		t.Fatalf("got %q", p.Payload)
	}
	// The verdict for shared/public/x is cached now; deny it and reload.
	acl := strings.Replace(securityACL, "topic deny shared/secret/#", "topic deny shared/secret/#\ntopic deny shared/public/#", 1)
	if err := os.WriteFile(files.ACLFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	publish("shared/public/x", "after", 2)
	publish("shared/other/x", "marker", 3)
	if p := alice.nextPublish(10 * time.Second); string(p.Payload) != "marker" {
		t.Fatalf("got %q on %s after the reload, want the marker", p.Payload, p.Topic)
	}
}

// Point 1: a denied PUBLISH gets PUBACK/PUBREC 0x87 under v5; under 3.1.1,
// which has no negative ack, it is acknowledged, dropped and counted. A
// denied SUBSCRIBE gets SUBACK 0x87 (v5) / 0x80 (3.1.1).
func TestSecurityDeniedPublishAndSubscribe(t *testing.T) {
	b, _ := secureBroker(t, false)
	watcher, _ := rawConnect(t, b.addr, packet.V311, "bob-w", true, login("bob"))
	watcher.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "bob/#", QoS: 1})
	for _, tc := range []struct {
		v        packet.Version
		qos      byte
		wantAck  packet.ReasonCode
		wantSub  packet.ReasonCode
		clientID string
	}{
		{packet.V311, 1, 0, packet.V3SubackFailure, "alice-311"},
		{packet.V311, 2, 0, packet.V3SubackFailure, "alice-311q2"},
		{packet.V5, 1, packet.NotAuthorized, packet.NotAuthorized, "alice-5"},
		{packet.V5, 2, packet.NotAuthorized, packet.NotAuthorized, "alice-5q2"},
	} {
		t.Run(tc.clientID, func(t *testing.T) {
			before := b.srv.Stats().Denied
			alice, _ := rawConnect(t, b.addr, tc.v, tc.clientID, true, login("alice"))
			alice.send(&packet.Publish{QoS: tc.qos, PacketID: 7, Topic: "bob/x", Payload: []byte("forged")})
			var code packet.ReasonCode
			if tc.qos == 1 {
				code = expect[*packet.Puback](t, alice, 10*time.Second).ReasonCode
			} else {
				code = expect[*packet.Pubrec](t, alice, 10*time.Second).ReasonCode
			}
			if code != tc.wantAck {
				t.Fatalf("ack code %v, want %v", code, tc.wantAck)
			}
			alice.send(&packet.Subscribe{PacketID: 8, Subscriptions: []packet.Subscription{{Filter: "bob/#", QoS: 1}, {Filter: "alice/#", QoS: 1}}})
			sa := expect[*packet.Suback](t, alice, 10*time.Second)
			if len(sa.ReasonCodes) != 2 || sa.ReasonCodes[0] != tc.wantSub || sa.ReasonCodes[1] != 1 {
				t.Fatalf("suback %v, want [%v 1]", sa.ReasonCodes, tc.wantSub)
			}
			after := b.srv.Stats().Denied
			if after["publish"] != before["publish"]+1 || after["subscribe"] != before["subscribe"]+1 {
				t.Fatalf("denied counters %v -> %v, want publish and subscribe +1", before, after)
			}
		})
	}
	watcher.noPacket(200 * time.Millisecond) // the forged messages never reached bob
}

// Point 2: another user presenting the client id of bob's persistent session
// is refused and gets nothing; the session and its queue stay bob's.
func TestSecuritySessionOwnership(t *testing.T) {
	needMosquittoClients(t)
	var logs testutil.LogBuffer
	b, _ := secureBrokerLog(t, false, &logs)
	// bob's persistent session with a subscription, then he goes away.
	startMosqSub(t, b, args(user("bob"), []string{"-i", "bob-device", "-c", "-q", "1", "-t", "bob/#", "-E"})...).wait(t)
	mosqPub(t, b, "", args(user("bob"), []string{"-i", "bob-pub", "-q", "1", "-t", "bob/x", "-m", "for-bob"})...)

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"v311_resume", []string{"-c"}},
		{"v311_clean", nil},
		{"v5_resume", []string{"-V", "mqttv5", "-c", "-x", "60"}},
		{"v5_clean", []string{"-V", "mqttv5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.srv.Stats().Denied["session_owner"]
			h, p := hostPort(t, b.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "mosquitto_sub", args([]string{"-h", h, "-p", p, "-i", "bob-device", "-q", "1",
				"-t", "alice/#", "-W", "5"}, user("alice"), tc.args)...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(strings.ToLower(string(out)), "not authori") {
				t.Fatalf("alice with bob's client id: err %v, output %q; want a refused connection", err, out)
			}
			if strings.Contains(string(out), "for-bob") {
				t.Fatalf("alice received bob's message: %q", out)
			}
			if n := b.srv.Stats().Denied["session_owner"]; n != before+1 {
				t.Fatalf("session_owner refusals %d, want %d", n, before+1)
			}
			if n := strings.Count(logs.String(), `level=WARN msg="connect refused: client id belongs to another user's session"`); n != int(before)+1 {
				t.Fatalf("%d warnings logged, want %d; log:\n%s", n, before+1, logs.String())
			}
			if !strings.Contains(logs.String(), "client=bob-device user=alice") {
				t.Fatalf("the warning does not name the client id and the user:\n%s", logs.String())
			}
		})
	}
	// Exact codes: CONNACK 5 (3.1.1) and 0x87 (v5).
	for _, tc := range []struct {
		v    packet.Version
		want packet.ReasonCode
	}{{packet.V311, packet.V3RefusedNotAuthorized}, {packet.V5, packet.NotAuthorized}} {
		rc := rawDial(t, b.addr, tc.v)
		cp := &packet.Connect{ProtocolName: "MQTT", Version: tc.v, ClientID: "bob-device", KeepAlive: 60}
		login("alice")(cp)
		rc.send(cp)
		rc.start()
		got := rc.expectClose(10 * time.Second)
		if a, ok := got[0].(*packet.Connack); len(got) != 1 || !ok || a.ReasonCode != tc.want {
			t.Fatalf("%v: got %v, want CONNACK %v", tc.v, types(got), tc.want)
		}
	}
	// bob takes his session back: it is present and still holds his message.
	bob := startMosqSub(t, b, args(user("bob"), []string{"-i", "bob-device", "-c", "-q", "1", "-t", "bob/#", "-C", "1", "-v"})...)
	if got := bob.wait(t); len(got) != 1 || got[0] != "bob/x for-bob" {
		t.Fatalf("bob got %q from his session, want the queued message", got)
	}
}

// Point 2: the same user taking over his own connected session works as
// before (the old connection is closed, the session carries on).
func TestSecuritySameUserTakesOver(t *testing.T) {
	b, _ := secureBroker(t, false)
	old, _ := rawConnect(t, b.addr, packet.V5, "bob-device", false, func(cp *packet.Connect) {
		login("bob")(cp)
		cp.Props.SessionExpiry = 60
		cp.Props.Set(packet.PropSessionExpiry)
	})
	old.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "bob/#", QoS: 1})
	_, ack := rawConnect(t, b.addr, packet.V5, "bob-device", false, login("bob"))
	if !ack.SessionPresent {
		t.Fatal("bob's takeover did not resume his session")
	}
	got := old.expectClose(10 * time.Second)
	if d, ok := got[len(got)-1].(*packet.Disconnect); !ok || d.ReasonCode != packet.SessionTakenOver {
		t.Fatalf("old connection got %v, want DISCONNECT 0x8E", types(got))
	}
	if n := b.srv.Stats().Denied["session_owner"]; n != 0 {
		t.Fatalf("session_owner refusals %d, want 0", n)
	}
}

// Point 2, anonymous clients: an anonymous session's owner is "" (nobody).
// Another anonymous client can take it over (there is nothing to tell two
// anonymous clients apart), a named user cannot; and an anonymous client
// cannot take a named user's session.
func TestSecurityAnonymousSessionOwnership(t *testing.T) {
	b, _ := secureBroker(t, true)
	anon, _ := rawConnect(t, b.addr, packet.V311, "anon-dev", false, nil)
	refused := func(id string, mod func(*packet.Connect)) {
		t.Helper()
		rc := rawDial(t, b.addr, packet.V311)
		cp := &packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: id, KeepAlive: 60}
		if mod != nil {
			mod(cp)
		}
		rc.send(cp)
		rc.start()
		got := rc.expectClose(10 * time.Second)
		if a, ok := got[0].(*packet.Connack); len(got) != 1 || !ok || a.ReasonCode != packet.V3RefusedNotAuthorized {
			t.Fatalf("%s: got %v, want CONNACK 5", id, types(got))
		}
	}
	refused("anon-dev", login("alice"))
	_, ack := rawConnect(t, b.addr, packet.V311, "anon-dev", false, nil)
	if !ack.SessionPresent {
		t.Fatal("an anonymous client did not resume the anonymous session")
	}
	anon.expectClose(10 * time.Second)
	rawConnect(t, b.addr, packet.V311, "alice-dev", false, login("alice"))
	refused("alice-dev", nil)
}

// Point 3: a client id of "+" or "#" does not widen "pattern ... clients/%c/#".
func TestSecurityPatternSubstitutionIsLiteral(t *testing.T) {
	needMosquittoClients(t)
	b, _ := secureBroker(t, false)
	bobdev := startMosqSub(t, b, args(user("bob"), []string{"-i", "bobdev", "-q", "1", "-t", "clients/bobdev/#", "-C", "1", "-v"})...)
	waitSubs(t, b, 1)

	// alice as client "+": her subscription to bob's subtree is refused.
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		want := packet.V3SubackFailure
		if v == packet.V5 {
			want = packet.NotAuthorized
		}
		for _, f := range []string{"clients/bobdev/secret", "clients/+/secret", "clients/#"} {
			rc, _ := rawConnect(t, b.addr, v, "+", true, login("alice"))
			rc.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: f, QoS: 1}}})
			if sa := expect[*packet.Suback](t, rc, 10*time.Second); sa.ReasonCodes[0] != want {
				t.Fatalf("%v: alice as client \"+\" subscribing %s: %v, want %v", v, f, sa.ReasonCodes, want)
			}
			rc.disconnect()
		}
	}
	// alice as client "#" publishes into bob's command topic, then ops
	// publishes a marker: bob's device must see only the marker.
	mosqPub(t, b, "", args(user("alice"), []string{"-i", "#", "-q", "1", "-t", "clients/bobdev/cmd", "-m", "evil"})...)
	mosqPub(t, b, "", args(user("alice"), []string{"-i", "+", "-q", "1", "-t", "clients/bobdev/cmd", "-m", "evil"})...)
	mosqPub(t, b, "", args(user("ops"), []string{"-i", "ops-1", "-q", "1", "-t", "clients/bobdev/cmd", "-m", "marker"})...)
	if got := bobdev.wait(t); len(got) != 1 || got[0] != "clients/bobdev/cmd marker" {
		t.Fatalf("bob's device got %q, want only the marker", got)
	}
	// and alice under her own client id keeps her own subtree.
	own, _ := rawConnect(t, b.addr, packet.V311, "alicedev", true, login("alice"))
	own.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "clients/alicedev/#", QoS: 1})
}

// refusedWith connects with cp and expects a refusing CONNACK with code
// want, then the close.
func refusedWith(t *testing.T, b *broker, cp *packet.Connect, want packet.ReasonCode) {
	t.Helper()
	if cp.ProtocolName == "" {
		cp.ProtocolName = "MQTT"
	}
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 60
	}
	rc := rawDial(t, b.addr, cp.Version)
	rc.send(cp)
	rc.start()
	// A long deadline: after each failed login from 127.0.0.1 the next
	// attempt waits in the tarpit (100 ms doubling up to 5 s), and bcrypt
	// is slow under -race on a busy machine.
	got := rc.expectClose(60 * time.Second)
	if a, ok := got[0].(*packet.Connack); len(got) != 1 || !ok || a.ReasonCode != want {
		t.Fatalf("got %v, want CONNACK %v", types(got), want)
	}
}

// Authentication as docs/security.md states it: an unknown user, a wrong
// password and a missing password are refused alike with CONNACK 4 (3.1.1)
// / 0x86 (v5); an anonymous client with allow_anonymous off gets 5 / 0x87;
// a will on a topic the user may not publish to refuses the CONNECT with
// 5 / 0x87.
func TestSecurityAuthenticationRefusals(t *testing.T) {
	b, _ := secureBroker(t, false)
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		bad, notAuth := packet.V3RefusedBadUsernameOrPassword, packet.V3RefusedNotAuthorized
		if v == packet.V5 {
			bad, notAuth = packet.BadUsernameOrPassword, packet.NotAuthorized
		}
		t.Run(v.String(), func(t *testing.T) {
			for name, cp := range map[string]*packet.Connect{
				"wrong password": {UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("bobpw")},
				"unknown user":   {UsernameFlag: true, Username: "mallory", PasswordFlag: true, Password: []byte("x")},
				"no password":    {UsernameFlag: true, Username: "alice"},
			} {
				cp.Version, cp.ClientID, cp.CleanStart = v, "c1", true
				t.Run(name, func(t *testing.T) { refusedWith(t, b, cp, bad) })
			}
			t.Run("anonymous", func(t *testing.T) {
				refusedWith(t, b, &packet.Connect{Version: v, ClientID: "c1", CleanStart: true}, notAuth)
			})
			t.Run("will topic not allowed", func(t *testing.T) {
				cp := &packet.Connect{Version: v, ClientID: "c1", CleanStart: true,
					Will: &packet.Will{Topic: "bob/x", Payload: []byte("forged will")}}
				login("alice")(cp)
				refusedWith(t, b, cp, notAuth)
			})
			rawConnect(t, b.addr, v, "c1", true, login("alice")) // and the right password works
		})
	}
}

// Shared subscriptions: the ACL is asked about the filter without its
// $share/<group>/ prefix, and a member that may not read a message's topic
// is passed over, so the group's other members get it instead.
func TestSecuritySharedSubscription(t *testing.T) {
	b, _ := secureBroker(t, false)
	alice, _ := rawConnect(t, b.addr, packet.V5, "alice-s", true, login("alice"))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/shared/+/x", QoS: 1},
		packet.Subscription{Filter: "alice/end", QoS: 1})
	bob, _ := rawConnect(t, b.addr, packet.V5, "bob-s", true, login("bob"))
	bob.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "$share/g/shared/+/x", QoS: 1},
		packet.Subscription{Filter: "bob/end", QoS: 1})
	pub, _ := rawConnect(t, b.addr, packet.V5, "bob-p", true, login("bob"))
	publish := func(id uint16, topic string) {
		pub.send(&packet.Publish{QoS: 1, PacketID: id, Topic: topic, Payload: []byte(topic)})
		if a := expect[*packet.Puback](t, pub, 10*time.Second); a.ReasonCode != 0 {
			t.Fatalf("puback %v", a.ReasonCode)
		}
	}
	for i := range 4 {
		publish(uint16(1+i), "shared/secret/x")
	}
	publish(5, "bob/end")
	// alice/end is written by alice's own user.
	ap, _ := rawConnect(t, b.addr, packet.V5, "alice-p", true, login("alice"))
	ap.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "alice/end", Payload: []byte("end")})
	expect[*packet.Puback](t, ap, 10*time.Second)

	until := func(rc *rawClient, marker string) (topics []string) {
		for {
			p := rc.nextPublish(10 * time.Second)
			rc.ackPublish(p)
			if p.Topic == marker {
				return topics
			}
			topics = append(topics, p.Topic)
		}
	}
	if got := until(bob, "bob/end"); len(got) != 4 {
		t.Fatalf("bob got %q, want the 4 secret messages: alice's turns passed to him", got)
	}
	if got := until(alice, "alice/end"); len(got) != 0 {
		t.Fatalf("alice got %q through the shared subscription", got)
	}
}

// Point 2 with persistence: a session's owner is kept in the state store,
// so after a restart bob's session still refuses alice and resumes for
// bob with his queued message.
func TestSecuritySessionOwnerSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b, _ := secureBrokerState(t, false, nil, dir, nil)
	bob, _ := rawConnect(t, b.addr, packet.V311, "bob-device", false, login("bob"))
	bob.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "bob/#", QoS: 1})
	bob.disconnect()
	pub, _ := rawConnect(t, b.addr, packet.V311, "bob-pub", true, login("bob"))
	pub.send(&packet.Publish{QoS: 1, PacketID: 1, Topic: "bob/x", Payload: []byte("for-bob")})
	expect[*packet.Puback](t, pub, 10*time.Second)
	pub.disconnect()
	b.stop()

	b, _ = secureBrokerState(t, false, nil, dir, nil)
	cp := &packet.Connect{Version: packet.V311, ClientID: "bob-device"}
	login("alice")(cp)
	refusedWith(t, b, cp, packet.V3RefusedNotAuthorized)
	bob, ack := rawConnect(t, b.addr, packet.V311, "bob-device", false, login("bob"))
	if !ack.SessionPresent {
		t.Fatal("bob's session not present after the restart")
	}
	if p := bob.nextPublish(10 * time.Second); string(p.Payload) != "for-bob" {
		t.Fatalf("bob got %q", p.Payload)
	}
}

// A session restored from a record written before owners were kept
// (OwnerKnown false) belongs to the first user that resumes it; from then
// on other users are refused.
func TestSecuritySessionWithoutRecordedOwnerAdopted(t *testing.T) {
	old := &store.State{Sessions: []store.Session{{ID: "old-device", HasMeta: true,
		Meta: store.SessionMeta{Expiry: time.Hour}, Subs: []store.Sub{{Filter: "bob/#", QoS: 1}}}}}
	b, _ := secureBrokerState(t, false, nil, t.TempDir(), old)
	pub, _ := rawConnect(t, b.addr, packet.V311, "bob-pub", true, login("bob"))
	publish := func(id uint16, topic string) {
		pub.send(&packet.Publish{QoS: 1, PacketID: id, Topic: topic, Payload: []byte(topic)})
		expect[*packet.Puback](t, pub, 10*time.Second)
	}
	publish(1, "bob/x") // checked as for an anonymous client: not delivered
	dev, ack := rawConnect(t, b.addr, packet.V311, "old-device", false, login("bob"))
	if !ack.SessionPresent {
		t.Fatal("the restored session was not resumed")
	}
	publish(2, "bob/y") // bob's now
	if p := dev.nextPublish(10 * time.Second); p.Topic != "bob/y" {
		t.Fatalf("got %s first, want bob/y", p.Topic)
	}
	cp := &packet.Connect{Version: packet.V311, ClientID: "old-device"}
	login("alice")(cp)
	refusedWith(t, b, cp, packet.V3RefusedNotAuthorized)
}
