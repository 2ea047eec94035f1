package spool

import (
	"bytes"
	"testing"
)

// FuzzDecodeSessLog: any bytes decode without a panic, and the valid
// prefix re-encodes to exactly itself (nothing is made up, nothing of a
// whole entry lost).
func FuzzDecodeSessLog(f *testing.F) {
	log := appendSessHeader(nil)
	for _, e := range []sessEntry{
		{kind: sessSent, rec: 1, id: 1}, {kind: sessReleased, rec: 1}, {kind: sessResetFlows},
	} {
		log = appendSessEntry(log, e)
	}
	f.Add(log)
	f.Add(log[:len(log)-2])
	f.Add([]byte("EGSS\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, valid, err := decodeSessLog(b)
		if err != nil {
			return
		}
		again := appendSessHeader(nil)
		for _, e := range es {
			again = appendSessEntry(again, e)
		}
		if valid > len(b) || !bytes.Equal(again, b[:valid]) {
			t.Fatalf("valid prefix of %d bytes re-encodes to %x, was %x", valid, again, b[:valid])
		}
	})
}
