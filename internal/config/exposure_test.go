package config

import (
	"slices"
	"testing"
)

func TestLoopbackAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1883":      true,
		"127.0.0.53:1883":     true,
		"[::1]:1883":          true,
		"localhost:1883":      true,
		"LocalHost:0":         true,
		"0.0.0.0:1883":        false,
		":1883":               false,
		"[::]:1883":           false,
		"192.168.1.10:1883":   false,
		"[fe80::1%eth0]:1883": false,
		"gateway.local:1883":  false, // a name other than localhost may resolve anywhere
		"garbage":             false,
	} {
		if got := LoopbackAddress(addr); got != want {
			t.Errorf("LoopbackAddress(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestAnonymousNetworkListeners(t *testing.T) {
	lst := func(name, typ, addr string) Listener {
		l := DefaultListener(typ)
		l.Name, l.Address = name, addr
		return l
	}
	c := Default()
	mtls := lst("mtls", ListenerTCP, "0.0.0.0:8883")
	mtls.TLS = ListenerTLS{Cert: "c", Key: "k", ClientCA: "ca"}
	tlsOnly := lst("tls", ListenerTCP, "0.0.0.0:8884")
	tlsOnly.TLS = ListenerTLS{Cert: "c", Key: "k"}
	ser := DefaultListener(ListenerSerial)
	ser.Name, ser.Device = "uart", "/dev/ttyUSB0"
	c.Listeners = []Listener{
		lst("local", ListenerTCP, "127.0.0.1:1883"),
		lst("lan", ListenerTCP, "0.0.0.0:1883"),
		lst("web", ListenerWebSocket, ":8083"),
		mtls, tlsOnly, ser,
	}
	var names []string
	for _, l := range c.AnonymousNetworkListeners() {
		names = append(names, l.Name)
	}
	if want := []string{"lan", "web", "tls"}; !slices.Equal(names, want) {
		t.Errorf("anonymous on the network: %v, want %v", names, want)
	}
	c.Auth.AllowAnonymous = false
	if got := c.AnonymousNetworkListeners(); len(got) != 0 {
		t.Errorf("allow_anonymous false: %v", got)
	}
}
