package store

import (
	"reflect"
	"testing"
	"time"
)

// FuzzScan feeds arbitrary bytes to the reader: it must never panic, every
// record it accepts must re-encode to exactly the bytes it came from, and
// valid records behind garbage are found again.
func FuzzScan(f *testing.F) {
	var valid []byte
	for _, r := range []rec{
		{op: opRetainSet, msg: Msg{Topic: "a/b", Payload: []byte("x"), QoS: 1, Retain: true, Expiry: time.Unix(5, 0), Props: []byte{1}}},
		{op: opSessionPut, client: "c", meta: SessionMeta{Expiry: time.Hour, Will: &Msg{Topic: "w"}}},
		{op: opSubPut, client: "c", sub: Sub{Filter: "x/#", QoS: 2, NoLocal: true, RetainHandling: 1, SubID: 3}},
		{op: opQAdd, client: "c", seq: 9, qos: 2, pid: 4, released: true, subIDs: []uint32{1, 2}, msg: Msg{Topic: "t"}},
		{op: opQSent, client: "c", seq: 9, pid: 4},
		{op: opInQoS2, client: "c", pid: 7},
		{op: opSessionDel, client: "c"},
		{op: opGroup, origin: "$bridge/b", pid: 5, group: []rec{
			{op: opQAdd, client: "c", seq: 10, qos: 2, msg: Msg{Topic: "cmd", Payload: []byte("y")}},
			{op: opRetainSet, msg: Msg{Topic: "cmd", Payload: []byte("y"), Retain: true}, topic: "cmd"},
		}},
		{op: opGroup, origin: "$bridge/b", pid: 6},
		{op: opOriginDel, origin: "$bridge/b", pid: 5},
	} {
		valid = appendRec(valid, &r)
	}
	f.Add(valid)
	f.Add(append([]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3}, valid...))
	f.Add(valid[:len(valid)-3])
	f.Fuzz(func(t *testing.T, b []byte) {
		md := newModel()
		res := scan(b, func(r rec) {
			// What was read survives being written and read again. (Not
			// "re-encodes to the same bytes": an older record form, such
			// as a session without its owner, reads fine and is written
			// in the current one.)
			var again []rec
			scan(appendRec(nil, &r), func(r2 rec) { again = append(again, r2) })
			if len(again) != 1 || !reflect.DeepEqual(again[0], r) {
				t.Fatalf("record %+v reads back as %+v", r, again)
			}
			md.apply(&r)
		})
		if res.lastGoodEnd > int64(len(b)) || res.tail < 0 || res.skipped < 0 {
			t.Fatalf("result %+v for %d bytes", res, len(b))
		}
		md.snapshot()
		md.state()
		// Garbage in front of valid records costs nothing after it.
		n := 0
		scan(append(append([]byte(nil), b...), valid...), func(rec) { n++ })
		if n < 10 {
			t.Fatalf("only %d records found after %d bytes of input", n, len(b))
		}
	})
}
