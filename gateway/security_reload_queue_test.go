package gateway_test

// Issue 13's "authorization for every message delivered" across a change
// of the rules: a message routed into a session's queue under the old
// rules is checked again as it leaves the queue, so new rules that deny
// its topic withhold it (found in review: it was checked only when routed).

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/internal/testutil"
)

// A reload that denies a topic applies to the messages already queued for
// an offline session: "authorization holds for every message delivered"
// (docs/security.md), and a message queued under the old rules is
// delivered after the reload, under the new ones.
func TestSecurityReloadDeniesQueuedMessages(t *testing.T) {
	b, files := secureBroker(t, false)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-rq", false, login("alice"))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: 1})
	alice.disconnect()
	testutil.Eventually(t, 10*time.Second, "alice-rq offline", func() bool { _, d := sessions(b); return d == 1 })
	pub := bobPublisher(t, b, "bob-rq")
	pub(1, "shared/public/x", "queued-before-reload")
	acl := strings.Replace(issue13ACL, "topic deny shared/secret/#", "topic deny shared/secret/#\ntopic deny shared/public/#", 1)
	if err := os.WriteFile(files.ACLFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	pub(2, "shared/end", "end")
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-rq", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("after a reload denying shared/public/#, alice's resumed session received %q", got)
	}
}

// The same after a restart with the changed ACL: the queue restored from
// the state store is delivered under the rules in force.
func TestSecurityRestartDeniesRestoredQueue(t *testing.T) {
	dir := t.TempDir()
	b, _ := secureBrokerState(t, false, nil, dir, nil)
	alice, _ := rawConnect(t, b.addr, packet.V311, "alice-rs", false, login("alice"))
	alice.subscribe(1, packet.Properties{}, packet.Subscription{Filter: "shared/#", QoS: 1})
	alice.disconnect()
	testutil.Eventually(t, 10*time.Second, "alice-rs offline", func() bool { _, d := sessions(b); return d == 1 })
	pub := bobPublisher(t, b, "bob-rs")
	pub(1, "shared/public/x", "queued-before-restart")
	pub(2, "shared/end", "end")
	b.stop()

	b, files := secureBrokerState(t, false, nil, dir, nil)
	acl := strings.Replace(issue13ACL, "topic deny shared/secret/#", "topic deny shared/secret/#\ntopic deny shared/public/#", 1)
	if err := os.WriteFile(files.ACLFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Load(); err != nil {
		t.Fatal(err)
	}
	alice, _ = rawConnect(t, b.addr, packet.V311, "alice-rs", false, login("alice"))
	if got := untilMarker(t, alice, "shared/end"); len(got) != 0 {
		t.Fatalf("after a restart with shared/public/# denied, alice's restored session received %q", got)
	}
}
