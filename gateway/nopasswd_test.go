package gateway_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgegw/edgegw/gateway"
	"github.com/edgegw/edgegw/gateway/auth"
	"github.com/edgegw/edgegw/gateway/packet"
)

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
