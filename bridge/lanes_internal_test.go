package bridge

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/edgegw/edgegw/bridge/spool"
)

// pickerSpool opens a spool in a temporary directory and appends one
// message per (payload, lane, qos) in order; it returns the spool and the
// ids by payload.
func pickerSpool(t *testing.T, msgs ...spool.Message) (*spool.Spool, map[string]spool.ID) {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), Sync: spool.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	ids := make(map[string]spool.ID)
	for _, m := range msgs {
		id, err := sp.Append(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		ids[string(m.Payload)] = id
	}
	return sp, ids
}

func msg(payload string, lane spool.Lane, qos byte) spool.Message {
	return spool.Message{Topic: "t", Payload: []byte(payload), QoS: qos, Lane: lane}
}

// pickNow returns the payload the picker hands out now, or "" if none may
// go.
func pickNow(t *testing.T, p *picker) string {
	t.Helper()
	_, m, ok, _, err := p.pick()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return ""
	}
	return string(m.Payload)
}

// TestPickerRefusedFirstInLane: a record the MQTT 5 broker refused for now
// is sent again before the newer records of its lane, after the higher
// lanes, and not before the refusal's backoff has passed.
func TestPickerRefusedFirstInLane(t *testing.T) {
	sp, ids := pickerSpool(t,
		msg("b0", spool.LaneBulk, 1), msg("b1", spool.LaneBulk, 1), msg("b2", spool.LaneBulk, 1))
	win := newSendWindow(16, 16, false, time.Now())
	p := newPicker(sp, DrainFIFO, DefaultBacklogShare, win, quotaQoS)
	for _, want := range []string{"b0", "b1"} {
		if got := pickNow(t, p); got != want {
			t.Fatalf("picked %q, want %q", got, want)
		}
	}
	// b0 refused (0x97), an alarm arrives meanwhile.
	p.done(ids["b0"])
	hold := time.Now().Add(50 * time.Millisecond)
	p.again(ids["b0"], spool.LaneBulk, hold)
	if _, err := sp.Append(context.Background(), msg("a0", spool.LaneHigh, 1)); err != nil {
		t.Fatal(err)
	}
	if d := p.held(); d <= 0 {
		t.Fatalf("no backoff after a refusal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for range 3 {
		_, m, err := p.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if early := hold.Sub(time.Now()); early > 0 {
			t.Errorf("a pick %s before the refusal's backoff ended", early)
		}
		got = append(got, string(m.Payload))
	}
	if want := []string{"a0", "b0", "b2"}; !slices.Equal(got, want) {
		t.Fatalf("picked %v, want %v (high first, then the refused bulk one, then the rest of bulk)", got, want)
	}
	if s := pickNow(t, p); s != "" {
		t.Fatalf("picked %q after everything", s)
	}
}

// TestPickerBacklogShareOfQuota: with live-first the backlog in flight is
// held to backlog_share of the QoS 2 window too: over MQTT 5 (every QoS
// 1/2 publish takes the broker's receive quota) 25 % of a Receive Maximum
// of 20 is 5 backlog records, whatever the count and byte windows allow,
// and a live record still goes; over 3.1.1 QoS 1 takes no place of it.
func TestPickerBacklogShareOfQuota(t *testing.T) {
	for _, tc := range []struct {
		name     string
		quotaQoS func(byte) byte
		backlog  int // records handed out before the share is used
	}{
		{"mqtt5", quotaQoS, 5},
		{"mqtt311", sameQoS, 25}, // 25 % of a count window of 100
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []spool.Message
			for range 40 {
				msgs = append(msgs, msg("b", spool.LaneNormal, 1))
			}
			sp, _ := pickerSpool(t, msgs...)
			win := newSendWindow(100, 20, false, time.Now())
			p := newPicker(sp, DrainLiveFirst, 0.25, win, tc.quotaQoS)
			var taken []spool.ID
			for {
				id, _, ok, _, err := p.pick()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				taken = append(taken, id)
			}
			if len(taken) != tc.backlog {
				t.Fatalf("%d backlog records handed out, want %d", len(taken), tc.backlog)
			}
			if _, err := sp.Append(context.Background(), msg("live", spool.LaneNormal, 1)); err != nil {
				t.Fatal(err)
			}
			if got := pickNow(t, p); got != "live" {
				t.Fatalf("picked %q with the backlog's share used; want the live record", got)
			}
			p.done(taken[0])
			if got := pickNow(t, p); got != "b" {
				t.Fatalf("picked %q after a backlog record completed; want the next backlog record", got)
			}
		})
	}
}

// TestPickerRefusedGoneKeepsNextInFlight: a record refused for now (MQTT
// 5) that left the spool before it was sent again is forgotten, and the
// look-up for it does not touch the record after it: that one is in
// flight, and its expiry passing meanwhile must not drop it (it was sent
// before it expired; its PUBACK is on the way and is what removes it).
func TestPickerRefusedGoneKeepsNextInFlight(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), Sync: spool.SyncNone, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	refused, err := sp.Append(context.Background(), msg("refused", spool.LaneNormal, 1))
	if err != nil {
		t.Fatal(err)
	}
	expiring := msg("in flight", spool.LaneNormal, 1)
	expiring.Expiry = now.Add(time.Second)
	inFlight, err := sp.Append(context.Background(), expiring)
	if err != nil {
		t.Fatal(err)
	}
	win := newSendWindow(16, 16, false, now)
	p := newPicker(sp, DrainFIFO, DefaultBacklogShare, win, quotaQoS)
	for _, want := range []string{"refused", "in flight"} {
		if got := pickNow(t, p); got != want {
			t.Fatalf("picked %q, want %q", got, want)
		}
	}
	p.done(refused)
	p.again(refused, spool.LaneNormal, now)                       // refused for now, sent again at once
	if err := sp.Drop(refused, spool.DropSpoolFull); err != nil { // it leaves the spool meanwhile
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second) // the in-flight record's expiry passes

	if got := pickNow(t, p); got != "" {
		t.Fatalf("picked %q, want nothing", got)
	}
	st := sp.Stats()
	if st.Dropped[spool.DropExpired] != 0 || st.Messages != 1 {
		t.Fatalf("record %d in flight: %d dropped as expired, %d messages left; want 0 and 1", inFlight, st.Dropped[spool.DropExpired], st.Messages)
	}
}

// TestPickerPassesOverResumed: a flow re-sent on connect is in flight; the
// picker passes over its record without the spool reading it, so its
// expiry passing meanwhile does not drop it (it was sent in time; its ack
// removes it), and the record after it is picked.
func TestPickerPassesOverResumed(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), Sync: spool.SyncNone, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	expiring := msg("resumed", spool.LaneNormal, 1)
	expiring.Expiry = now.Add(time.Second)
	resumed, err := sp.Append(context.Background(), expiring)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Append(context.Background(), msg("next", spool.LaneNormal, 1)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second) // the resumed flow's expiry passes
	for _, drain := range []string{DrainFIFO, DrainLiveFirst} {
		win := newSendWindow(16, 16, false, now)
		p := newPicker(sp, drain, DefaultBacklogShare, win, quotaQoS)
		p.resume(resumed, win.add(publishSize("t", 7), 2, now))
		if got := pickNow(t, p); got != "next" {
			t.Fatalf("%s: picked %q, want %q", drain, got, "next")
		}
		st := sp.Stats()
		if st.Dropped[spool.DropExpired] != 0 || st.Messages != 2 {
			t.Fatalf("%s: record %d in flight: %d dropped as expired, %d messages left; want 0 and 2", drain, resumed, st.Dropped[spool.DropExpired], st.Messages)
		}
	}
}
