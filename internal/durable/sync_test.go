package durable

import "testing"

func TestParseSyncMode(t *testing.T) {
	for _, m := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		got, err := ParseSyncMode("spool", m.String())
		if err != nil || got != m {
			t.Errorf("ParseSyncMode(%q) = %v, %v", m.String(), got, err)
		}
		if !m.Valid() {
			t.Errorf("%v not valid", m)
		}
	}
	if SyncBatch != 0 {
		t.Error("batch is not the zero value")
	}
	_, err := ParseSyncMode("state store", "sometimes")
	if err == nil || err.Error() != `state store: unknown sync mode "sometimes" (want always, batch or none)` {
		t.Errorf("bad mode: %v", err)
	}
	if SyncMode(7).Valid() || SyncMode(7).String() != "SyncMode(7)" {
		t.Error("SyncMode(7)")
	}
}
