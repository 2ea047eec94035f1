package bridge

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgegw/edgegw/bridge/spool"
	"github.com/edgegw/edgegw/internal/testutil"
)

// TestTokenCompletedByResumeIsNotAnAck shows the hazard issue 12 names and
// that the bridge's acks do not depend on it. paho 1.5.1, when a client
// with a persistent session connects again, re-claims the ids of the
// stored publishes in resume() (claimID), and claimID completes the token
// already holding such an id with no error (messageids.go:97): a publish
// the broker never acknowledged looks delivered. The bridge makes a new
// paho client per connection, so its clients never resume over their own
// tokens; this test does reuse one client, to make the hazard happen, and
// checks that the spool is acked (the store's complete callback) only for
// the publishes whose PUBACK came off the wire.
func TestTokenCompletedByResumeIsNotAnAck(t *testing.T) {
	up := StartRawUpstream(t, map[string]Withhold{"m1": NoPuback, "m2": NoPuback})
	var (
		mu   sync.Mutex
		acks []spool.ID
	)
	acked := func() []spool.ID {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(acks))
	}
	st := newUplinkStore(func(rec spool.ID) { mu.Lock(); acks = append(acks, rec); mu.Unlock() })
	var lastRead atomic.Int64
	lost := make(chan struct{}, 1)
	o := mqtt.NewClientOptions().AddBroker(up.URL()).SetClientID("edge-resume").
		SetCleanSession(false).SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).
		SetStore(st).SetOrderMatters(true).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(mqtt.Client, error) { lost <- struct{}{} }).
		SetCustomOpenConnectionFn(func(u *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				return nil, err
			}
			return &deadlineConn{Conn: c, lastRead: &lastRead, store: st, acks: ackRewriter{st: st},
				w: newBatchWriter(c, rawSocket(c), 5*time.Second, func(error) {})}, nil
		})
	c := mqtt.NewClient(o)
	connect := func() {
		t.Helper()
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
	}
	connect()
	defer c.Disconnect(0)

	// Records 1..4; the upstream never acks 1 and 2.
	toks := make(map[spool.ID]mqtt.Token)
	for rec := spool.ID(1); rec <= 4; rec++ {
		e := st.announce(rec, wireID(rec))
		toks[rec] = c.Publish("t", 1, false, "m"+strconv.Itoa(int(rec)))
		if !st.taken(e) {
			t.Fatalf("paho did not store record %d: %v", rec, toks[rec].Error())
		}
	}
	testutil.Eventually(t, 10*time.Second, "records 3 and 4 acked", func() bool { return slices.Equal(acked(), []spool.ID{3, 4}) })
	if toks[1].WaitTimeout(100 * time.Millisecond) {
		t.Fatal("record 1's token completed before anything happened")
	}

	up.Drop()
	<-lost
	connect() // the same client: resume re-claims the ids of records 1 and 2
	for _, rec := range []spool.ID{1, 2} {
		if !toks[rec].WaitTimeout(5*time.Second) || toks[rec].Error() != nil {
			t.Fatalf("paho no longer completes a resumed message's token without error (record %d: %v); "+
				"the hazard this test guards against changed, re-read resume()", rec, toks[rec].Error())
		}
	}
	testutil.Eventually(t, 10*time.Second, "records 1 and 2 re-sent", func() bool { _, dups, _, _ := up.Stats(); return dups >= 2 })
	if got := acked(); !slices.Equal(got, []spool.ID{3, 4}) {
		t.Fatalf("acked %v after the tokens of 1 and 2 completed with no PUBACK; want [3 4]", got)
	}
	if st.len() != 2 {
		t.Fatalf("store holds %d flows; want records 1 and 2", st.len())
	}

	up.AnswerEverything()
	up.Drop()
	<-lost
	connect()
	testutil.Eventually(t, 10*time.Second, "records 1 and 2 acked once PUBACKed", func() bool { return slices.Equal(acked(), []spool.ID{1, 2, 3, 4}) })
}

// TestResumedQoS1KeepsItsAlternativeWireID: a QoS 1 publish that took a
// free wire id because its own was held by a record 65535 apart
// (pickWireID) is re-sent after a reconnect under that id, by the next
// paho client (one per connection, as the bridge makes them), and its
// PUBACK acks its record, not the other.
func TestResumedQoS1KeepsItsAlternativeWireID(t *testing.T) {
	up := StartRawUpstream(t, map[string]Withhold{"live": NoPuback, "m7": NoPuback})
	var (
		mu   sync.Mutex
		acks []spool.ID
	)
	acked := func() []spool.ID {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(acks))
	}
	st := newUplinkStore(func(rec spool.ID) { mu.Lock(); acks = append(acks, rec); mu.Unlock() })
	lost := make(chan struct{}, 1)
	connect := func() mqtt.Client {
		t.Helper()
		var lastRead atomic.Int64
		o := mqtt.NewClientOptions().AddBroker(up.URL()).SetClientID("edge-alt").
			SetCleanSession(false).SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).
			SetStore(st).SetOrderMatters(true).SetConnectTimeout(5 * time.Second).
			SetConnectionLostHandler(func(mqtt.Client, error) { lost <- struct{}{} }).
			SetCustomOpenConnectionFn(func(u *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
				c, err := net.Dial("tcp", u.Host)
				if err != nil {
					return nil, err
				}
				return &deadlineConn{Conn: c, lastRead: &lastRead, store: st, acks: ackRewriter{st: st},
					w: newBatchWriter(c, rawSocket(c), 5*time.Second, func(error) {})}, nil
			})
		c := mqtt.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("connect: %v", tok.Error())
		}
		return c
	}
	c := connect()
	publish := func(rec spool.ID, payload string) uint16 {
		t.Helper()
		w, wait := st.pickWire(rec, 1)
		if wait != nil {
			t.Fatalf("QoS 1 record %d waits for its wire id", rec)
		}
		e := st.announce(rec, w)
		c.Publish("t", 1, false, payload)
		if !st.taken(e) {
			t.Fatalf("paho did not store record %d", rec)
		}
		return w
	}
	// A live record holds wire id 7; backlog record 7 takes another.
	live := spool.ID(7 + 65535)
	if w := publish(live, "live"); w != wireID(7) {
		t.Fatalf("live record %d went out as %d, want its own id %d", live, w, wireID(7))
	}
	alt := publish(7, "m7")
	if alt == wireID(7) {
		t.Fatalf("record 7 took id %d, held by record %d", alt, live)
	}
	testutil.Eventually(t, 10*time.Second, "both on the wire", func() bool { return len(up.IDsOf("m7")) > 0 && len(up.IDsOf("live")) > 0 })

	up.AnswerEverything()
	up.Drop()
	<-lost
	c.Disconnect(0)
	c = connect() // a new client, as the bridge makes one per connection
	defer c.Disconnect(0)
	testutil.Eventually(t, 10*time.Second, "both records acked after the re-send", func() bool {
		return slices.Equal(acked(), []spool.ID{7, live})
	})
	if ids := up.IDsOf("m7"); !slices.Equal(ids, []uint16{alt}) {
		t.Fatalf("record 7 went out under ids %v, want only its alternative id %d", ids, alt)
	}
	if ids := up.IDsOf("live"); !slices.Equal(ids, []uint16{wireID(7)}) {
		t.Fatalf("the live record went out under ids %v, want only %d", ids, wireID(7))
	}
	if _, dups, _, _ := up.Stats(); dups < 2 {
		t.Fatalf("%d re-sends (DUP) on the new connection, want both records", dups)
	}
}
