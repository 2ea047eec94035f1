package packet_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/packet/packettest"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzDecode seeds from the golden fixtures")

// fuzzLevels maps the fuzzer's level byte to a protocol level.
var fuzzLevels = [4]packet.Version{0, packet.V31, packet.V311, packet.V5}

// fuzzMax is the size limit used while fuzzing: big enough for any input the
// fuzzer makes, small enough that a large length claim must be refused.
const fuzzMax = 1 << 16

type seed struct {
	name  string
	level byte
	split uint16
	data  []byte
}

func fuzzSeeds() []seed {
	levelByte := func(v packet.Version) byte {
		for i, l := range fuzzLevels {
			if l == v {
				return byte(i)
			}
		}
		panic(v)
	}
	var seeds []seed
	for _, f := range packettest.Golden {
		v := f.Version
		if f.Packet.Type() == packet.CONNECT {
			v = 0
		}
		seeds = append(seeds, seed{"golden-" + f.Name, levelByte(v), uint16(len(f.Bytes) / 2), f.Bytes})
	}
	for _, f := range packettest.Invalid {
		seeds = append(seeds, seed{"invalid-" + f.Name, levelByte(f.Version), 1, f.Bytes})
	}
	return seeds
}

func seedFileName(name string) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(name)
}

// TestFuzzSeedCorpus keeps testdata/fuzz/FuzzDecode in step with the golden
// fixtures (go test -run TestFuzzSeedCorpus ./gateway/packet/ -args -update-corpus
// rewrites it).
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	for _, s := range fuzzSeeds() {
		content := fmt.Sprintf("go test fuzz v1\nbyte(%q)\nuint16(%d)\n[]byte(%q)\n", s.level, s.split, s.data)
		path := filepath.Join(dir, seedFileName(s.name))
		if *updateCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("%s is missing or stale; run go test -run TestFuzzSeedCorpus ./gateway/packet/ -args -update-corpus", path)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// FuzzDecode decodes arbitrary input at a protocol level chosen by the first
// argument, from one read, from two reads split at a chosen point (through a
// one-byte, half or data+EOF reader) and with DecodeBytes. It checks that the
// three agree, that nothing panics, and that an accepted packet re-encodes to
// bytes that decode to an equal packet.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.level, s.split, s.data)
	}
	f.Fuzz(func(t *testing.T, level byte, split uint16, data []byte) {
		v := fuzzLevels[level&3]

		p1, err1 := packet.Decode(bufio.NewReader(bytes.NewReader(data)), v, fuzzMax)
		if err1 != nil && p1 != nil && !errors.Is(err1, packet.UnsupportedProtocolVersion) {
			t.Fatalf("Decode returned a packet with error %v", err1)
		}
		var perr *packet.Error
		if err1 != nil && err1 != io.EOF && err1 != io.ErrUnexpectedEOF && !errors.As(err1, &perr) {
			t.Fatalf("Decode error %v is neither EOF nor *Error", err1)
		}

		// The same bytes in two reads, through a reader that returns less.
		k := int(split) % (len(data) + 1)
		var r io.Reader = io.MultiReader(bytes.NewReader(data[:k]), bytes.NewReader(data[k:]))
		switch level >> 2 & 3 {
		case 1:
			r = iotest.OneByteReader(r)
		case 2:
			r = iotest.HalfReader(r)
		case 3:
			r = iotest.DataErrReader(r)
		}
		p2, err2 := packet.Decode(bufio.NewReaderSize(r, 16), v, fuzzMax)
		if errText(err1) != errText(err2) || !reflect.DeepEqual(p1, p2) {
			t.Fatalf("split at %d: %#v, %v; whole: %#v, %v", k, p2, err2, p1, err1)
		}

		p3, n, err3 := packet.DecodeBytes(data, v, fuzzMax)
		switch {
		case err1 == io.EOF || err1 == io.ErrUnexpectedEOF:
			if !errors.Is(err3, packet.ErrIncomplete) {
				t.Fatalf("Decode: %v; DecodeBytes: %v", err1, err3)
			}
		case errText(err1) != errText(err3) || !reflect.DeepEqual(p1, p3):
			t.Fatalf("DecodeBytes: %#v, %v; Decode: %#v, %v", p3, err3, p1, err1)
		case err1 == nil && (n < 2 || n > len(data)):
			t.Fatalf("DecodeBytes consumed %d of %d bytes", n, len(data))
		}
		if err1 != nil {
			return
		}

		ev := v
		if c, ok := p1.(*packet.Connect); ok {
			ev = c.Version
		}
		enc, err := packet.Append(nil, p1, ev)
		if err != nil {
			t.Fatalf("Append(%#v) of a decoded packet: %v", p1, err)
		}
		if size := packet.Size(p1, ev); size != len(enc) {
			t.Fatalf("Size = %d, Append wrote %d", size, len(enc))
		}
		p4, err := packet.Decode(bufio.NewReader(bytes.NewReader(enc)), v, fuzzMax)
		if err != nil {
			t.Fatalf("Decode(Append(p)) = %v\np = %#v\nbytes % x", err, p1, enc)
		}
		if !reflect.DeepEqual(p1, p4) {
			t.Fatalf("re-encoded packet differs\nfirst  %#v\nsecond %#v", p1, p4)
		}
	})
}
