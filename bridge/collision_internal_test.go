package bridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/session"
)

// TestCollisionWatch: two connections in a row ended by the upstream
// within healthyUplink of coming up name a collision (logged once per
// streak); one that lasted, or that the bridge ended itself, ends the
// streak; MQTT 5's 0x8E names it at once.
func TestCollisionWatch(t *testing.T) {
	var w collisionWatch
	short := time.Second
	steps := []struct {
		up                   time.Duration
		byPeer, takenOver    bool
		wantNamed, wantFirst bool
	}{
		{short, true, false, false, false},
		{0, true, false, true, true}, // lost in its setup, after the CONNACK
		{short, true, false, true, false},
		{healthyUplink, true, false, false, false}, // a connection that lasted ends the streak
		{short, true, false, false, false},
		{short, false, false, false, false}, // the bridge ended it (watchdog, write timeout)
		{short, true, true, true, true},     // 0x8E session taken over
		{time.Hour, true, true, true, false},
	}
	for i, s := range steps {
		if i == 5 {
			// A failed attempt (no CONNACK) ends a streak too.
			w.ended(short, true, false)
			w.reset()
			if named, _ := w.ended(short, true, false); named {
				t.Errorf("named across a failed attempt")
			}
			w.reset()
		}
		named, first := w.ended(s.up, s.byPeer, s.takenOver)
		if named != s.wantNamed || first != s.wantFirst {
			t.Errorf("step %d (%+v): named %v first %v", i, s, named, first)
		}
	}
}

// TestQoS2QuotaEndIsNoCollision: connections the upstream closed with
// the signature of a QoS 2 quota below what was in flight
// (session/quota.go) are not named a client id collision, however many
// in a row; the same ends without it are (the control).
func TestQoS2QuotaEndIsNoCollision(t *testing.T) {
	b := &Bridge{log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	for i := range 3 {
		if _, named := b.noteCollision(ctx, time.Second, &qos2QuotaEnd{err: io.EOF, learned: i}, 0, 0); named {
			t.Fatalf("end %d, a QoS 2 quota close, named a collision", i)
		}
	}
	b.noteCollision(ctx, time.Second, io.EOF, 0, 0)
	if _, named := b.noteCollision(ctx, time.Second, io.EOF, 0, 0); !named {
		t.Fatal("two quick ends without the signature named no collision")
	}
}

// TestKeepaliveEndIsNoCollision: connections the bridge ended itself
// because nothing came from upstream for 1.5 keepalives (a blackholed
// link) are not named a client id collision, however many in a row.
func TestKeepaliveEndIsNoCollision(t *testing.T) {
	b := &Bridge{log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	for i := range 3 {
		if _, named := b.noteCollision(ctx, time.Second, fmt.Errorf("keepalive: %w", session.ErrKeepalive), 0, 0); named {
			t.Fatalf("end %d, the bridge's own keepalive, named a collision", i)
		}
	}
}
