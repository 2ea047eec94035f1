package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
)

// TestConnackAboveClientMaximumIsNotSent: a v5 client with Maximum Packet
// Size 2 cannot take any CONNACK: the connection is closed with nothing
// sent [MQTT-3.1.2-24].
func TestConnackAboveClientMaximumIsNotSent(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true})
	rc := rawDial(t, b.addr, packet.V5)
	cp := &packet.Connect{ProtocolName: "MQTT", Version: packet.V5, ClientID: "tiny", CleanStart: true, KeepAlive: 60}
	cp.Props.MaximumPacketSize = 2
	cp.Props.Set(packet.PropMaximumPacketSize)
	rc.send(cp)
	rc.start()
	if got := rc.expectClose(10 * time.Second); len(got) != 0 {
		t.Fatalf("sent %v to a client whose maximum packet size is 2", types(got))
	}
}

// TestKeepaliveMax: with limits.keepalive_max, a 3.1.1 client asking for
// more, or for 0, is refused with 0x02 (as mosquitto's max_keepalive); a v5
// client gets Server Keep Alive in CONNACK.
func TestKeepaliveMax(t *testing.T) {
	b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxKeepAlive: 60 * time.Second})
	for _, tc := range []struct {
		ka     uint16
		refuse bool
	}{{30, false}, {60, false}, {61, true}, {0, true}} {
		t.Run(fmt.Sprintf("v311_%d", tc.ka), func(t *testing.T) {
			rc := rawDial(t, b.addr, packet.V311)
			rc.send(&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "ka", CleanStart: true, KeepAlive: tc.ka})
			rc.start()
			ack := expect[*packet.Connack](t, rc, 10*time.Second)
			if tc.refuse != (ack.ReasonCode == packet.V3RefusedIdentifierRejected) || (!tc.refuse && ack.ReasonCode != 0) {
				t.Fatalf("keepalive %d: connack %v", tc.ka, ack.ReasonCode)
			}
		})
		t.Run(fmt.Sprintf("v5_%d", tc.ka), func(t *testing.T) {
			_, ack := rawConnect(t, b.addr, packet.V5, "ka5", true, func(cp *packet.Connect) { cp.KeepAlive = tc.ka })
			has := ack.Props.Has(packet.PropServerKeepAlive)
			if has != tc.refuse || (has && ack.Props.ServerKeepAlive != 60) {
				t.Fatalf("keepalive %d: server keepalive set %v = %d", tc.ka, has, ack.Props.ServerKeepAlive)
			}
		})
	}
}

func TestConnectRefused(t *testing.T) {
	t.Run("anonymous_not_allowed", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: false})
		for _, tc := range []struct {
			v    packet.Version
			want packet.ReasonCode
		}{
			{packet.V31, packet.V3RefusedNotAuthorized},
			{packet.V311, packet.V3RefusedNotAuthorized},
			{packet.V5, packet.NotAuthorized},
		} {
			t.Run(tc.v.String(), func(t *testing.T) {
				rc := rawDial(t, b.addr, tc.v)
				rc.send(&packet.Connect{ProtocolName: map[bool]string{true: "MQIsdp", false: "MQTT"}[tc.v == packet.V31],
					Version: tc.v, ClientID: "anon", CleanStart: true})
				rc.start()
				got := rc.expectClose(10 * time.Second)
				if len(got) != 1 {
					t.Fatalf("got %v, want CONNACK", types(got))
				}
				if a, ok := got[0].(*packet.Connack); !ok || a.ReasonCode != tc.want {
					t.Fatalf("got %+v, want CONNACK %v", got[0], tc.want)
				}
			})
		}
		if st := b.srv.Stats(); st.SessionsConnected+st.SessionsDisconnected != 0 {
			t.Fatalf("sessions left by refused connects: %+v", st)
		}
	})
	t.Run("client_ids", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: true})
		for _, tc := range []struct {
			name  string
			v     packet.Version
			clean bool
			want  packet.ReasonCode
		}{
			{"v31_empty", packet.V31, true, packet.V3RefusedIdentifierRejected},
			{"v311_empty_persistent", packet.V311, false, packet.V3RefusedIdentifierRejected},
			{"v311_empty_clean", packet.V311, true, 0},
			{"v5_empty", packet.V5, false, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rc := rawDial(t, b.addr, tc.v)
				rc.send(&packet.Connect{ProtocolName: map[bool]string{true: "MQIsdp", false: "MQTT"}[tc.v == packet.V31],
					Version: tc.v, CleanStart: tc.clean})
				rc.start()
				a := expect[*packet.Connack](t, rc, 10*time.Second)
				if a.ReasonCode != tc.want {
					t.Fatalf("connack %v, want %v", a.ReasonCode, tc.want)
				}
				if tc.want != 0 {
					rc.expectClose(10 * time.Second)
					return
				}
				if tc.v == packet.V5 && (!a.Props.Has(packet.PropAssignedClientID) || a.Props.AssignedClientID == "") {
					t.Fatal("no assigned client identifier")
				}
				rc.disconnect()
			})
		}
	})
	t.Run("max_connections", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: true, MaxConnections: 2})
		rawConnect(t, b.addr, packet.V311, "mc1", true, nil)
		rawConnect(t, b.addr, packet.V311, "mc2", true, nil)
		rc := rawDial(t, b.addr, packet.V311)
		rc.sendErr(&packet.Connect{ProtocolName: "MQTT", Version: packet.V311, ClientID: "mc3", CleanStart: true})
		rc.start()
		if got := rc.expectClose(10 * time.Second); len(got) != 0 {
			t.Fatalf("got %v", types(got))
		}
		if st := b.srv.Stats(); st.Refused != 1 || st.Connections != 2 {
			t.Fatalf("refused %d connections %d, want 1 and 2", st.Refused, st.Connections)
		}
	})
}

// TestSecurityNoPasswordFile: docs/security.md's row "a user name (any
// password or none), allow_anonymous: false and no password file:
// refused, 4 / 0x86", over 3.1, 3.1.1 and 5, with no auth files and with
// an ACL file only; no user name stays 5 / 0x87. Each 4 / 0x86 is an
// authentication failure (edgegw_auth_failures_total). With
// allow_anonymous true nothing changes: a user name gets in unchecked.
func TestSecurityNoPasswordFile(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(acl, []byte("user alice\ntopic readwrite alice/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := &auth.Files{ACLFile: acl}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts gateway.Options
	}{
		{"no auth files", gateway.Options{AllowAnonymous: false}},
		{"acl file", gateway.Options{AllowAnonymous: false, Authenticator: files, Authorizer: files}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, tc.opts)
			bad := 0
			for _, v := range []packet.Version{packet.V31, packet.V311, packet.V5} {
				wantBad, wantNotAuth := packet.V3RefusedBadUsernameOrPassword, packet.V3RefusedNotAuthorized
				proto := "MQTT"
				switch v {
				case packet.V5:
					wantBad, wantNotAuth = packet.BadUsernameOrPassword, packet.NotAuthorized
				case packet.V31:
					proto = "MQIsdp"
				}
				for name, cp := range map[string]*packet.Connect{
					"user name":              {UsernameFlag: true, Username: "alice"},
					"user name and password": {UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("x")},
					"empty user name":        {UsernameFlag: true},
				} {
					cp.Version, cp.ProtocolName, cp.ClientID, cp.CleanStart = v, proto, "c1", true
					t.Run(v.String()+"/"+name, func(t *testing.T) { refusedWith(t, b, cp, wantBad) })
					bad++
				}
				t.Run(v.String()+"/no user name", func(t *testing.T) {
					refusedWith(t, b, &packet.Connect{Version: v, ProtocolName: proto, ClientID: "c1", CleanStart: true}, wantNotAuth)
				})
			}
			if n := b.srv.Stats().AuthFailures; n != int64(bad) {
				t.Fatalf("auth failures %d, want %d", n, bad)
			}
		})
	}
	t.Run("allow_anonymous true", func(t *testing.T) {
		b := startBroker(t, gateway.Options{AllowAnonymous: true, Authenticator: files, Authorizer: files})
		for _, v := range []packet.Version{packet.V31, packet.V311, packet.V5} {
			_, ack := rawConnect(t, b.addr, v, "c-"+v.String(), true, func(cp *packet.Connect) { cp.UsernameFlag, cp.Username = true, "alice" })
			if ack.ReasonCode != 0 {
				t.Fatalf("%v: CONNACK %v", v, ack.ReasonCode)
			}
		}
	})
}
