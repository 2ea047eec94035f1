package listeners_test

import (
	"errors"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgegw/edgegw/gateway"
)

// TestCNListenerOtherUserAllowAnonymous: docs/listeners.md says a client
// on a use_cn_as_username listener that sends another user name "needs
// that user's password", and security.md that it "is checked like any
// other". With allow_anonymous true (the default) and no password file
// nothing could check it: a certificate issued to sensor-17 that sent the
// user name alice got in as alice and took alice's ACL rules. It is
// refused (4 / 0x86).
func TestCNListenerOtherUserAllowAnonymous(t *testing.T) {
	p, cfg, client, files := cnAuthRig(t)
	h := newHarness(t, gateway.Options{AllowAnonymous: true, Authenticator: files, Authorizer: files})
	mtls := "tls://" + h.tcp(cfg, true)
	c, err := pahoConnect(t, mtls, "intruder", func(o *mqtt.ClientOptions) {
		o.SetTLSConfig(p.clientTLS(client)).SetUsername("alice")
	})
	if err != nil {
		if !errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword) {
			t.Fatalf("refused with %v, want 4 (bad user name or password)", err)
		}
		// Its own CN, or no user name, still gets in.
		mustPaho(t, mtls, "cert-named", func(o *mqtt.ClientOptions) {
			o.SetTLSConfig(p.clientTLS(client)).SetUsername("sensor-17")
		})
		mustPaho(t, mtls, "cert-only", func(o *mqtt.ClientOptions) { o.SetTLSConfig(p.clientTLS(client)) })
		return
	}
	tok := c.Subscribe("alice/#", 1, nil)
	waitTok(t, tok, "subscribe")
	if codes := tok.(*mqtt.SubscribeToken).Result(); codes["alice/#"] != 0x80 {
		t.Fatalf("sensor-17's certificate got in as alice without alice's password and may subscribe to alice/# (granted QoS %d)", codes["alice/#"])
	}
}
