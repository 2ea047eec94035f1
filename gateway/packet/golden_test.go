package packet_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/packet/packettest"
)

// decodeLevel is the level to decode a fixture at: CONNECT is decoded as the
// first packet of a connection.
func decodeLevel(f packettest.Fixture) packet.Version {
	if f.Packet.Type() == packet.CONNECT {
		return 0
	}
	return f.Version
}

func decodeAll(t *testing.T, r io.Reader, v packet.Version) (packet.Packet, error) {
	t.Helper()
	return packet.Decode(bufio.NewReader(r), v, 0)
}

func TestGoldenDecode(t *testing.T) {
	for _, f := range packettest.Golden {
		t.Run(f.Name, func(t *testing.T) {
			readers := map[string]io.Reader{
				"whole":    bytes.NewReader(f.Bytes),
				"one_byte": iotest.OneByteReader(bytes.NewReader(f.Bytes)),
				"half":     iotest.HalfReader(bytes.NewReader(f.Bytes)),
			}
			for name, r := range readers {
				got, err := decodeAll(t, r, decodeLevel(f))
				if err != nil {
					t.Fatalf("%s: Decode: %v", name, err)
				}
				if !reflect.DeepEqual(got, f.Packet) {
					t.Fatalf("%s: Decode =\n%#v\nwant\n%#v", name, got, f.Packet)
				}
			}
			if f.Packet.Type() == packet.CONNECT {
				// A second CONNECT on a connection is decoded by its own level.
				got, err := decodeAll(t, bytes.NewReader(f.Bytes), packet.V311)
				if err != nil || !reflect.DeepEqual(got, f.Packet) {
					t.Fatalf("Decode at level 4 = %#v, %v", got, err)
				}
			}
			got, n, err := packet.DecodeBytes(f.Bytes, decodeLevel(f), 0)
			if err != nil || n != len(f.Bytes) || !reflect.DeepEqual(got, f.Packet) {
				t.Fatalf("DecodeBytes = %#v, %d, %v", got, n, err)
			}
			// Trailing data after the packet is the next packet's business.
			_, n, err = packet.DecodeBytes(append(bytes.Clone(f.Bytes), 0xC0, 0), decodeLevel(f), 0)
			if err != nil || n != len(f.Bytes) {
				t.Fatalf("DecodeBytes with a following packet = %d, %v", n, err)
			}
			// Every proper prefix is incomplete.
			for i := range f.Bytes {
				_, _, err := packet.DecodeBytes(f.Bytes[:i], decodeLevel(f), 0)
				if !errors.Is(err, packet.ErrIncomplete) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("DecodeBytes(prefix %d) error = %v, want ErrIncomplete", i, err)
				}
				_, err = decodeAll(t, bytes.NewReader(f.Bytes[:i]), decodeLevel(f))
				want := io.ErrUnexpectedEOF
				if i == 0 {
					want = io.EOF
				}
				if err != want {
					t.Fatalf("Decode(prefix %d) error = %v, want %v", i, err, want)
				}
			}
			// The exact size passes the limit, one byte less does not.
			if _, err := decodeAll(t, bytes.NewReader(f.Bytes), decodeLevel(f)); err != nil {
				t.Fatal(err)
			}
			if _, err := packet.Decode(bufio.NewReader(bytes.NewReader(f.Bytes)), decodeLevel(f), len(f.Bytes)); err != nil {
				t.Fatalf("Decode with maxSize = len: %v", err)
			}
			_, err = packet.Decode(bufio.NewReader(bytes.NewReader(f.Bytes)), decodeLevel(f), len(f.Bytes)-1)
			if !errors.Is(err, packet.PacketTooLarge) {
				t.Fatalf("Decode with maxSize = len-1: %v, want packet too large", err)
			}
		})
	}
}

func TestGoldenEncode(t *testing.T) {
	for _, f := range packettest.Golden {
		if f.NonCanonical {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			got, err := packet.Append(nil, f.Packet, f.Version)
			if err != nil {
				t.Fatalf("Append: %v", err)
			}
			if !bytes.Equal(got, f.Bytes) {
				t.Fatalf("Append =\n% x\nwant\n% x", got, f.Bytes)
			}
			if n := packet.Size(f.Packet, f.Version); n != len(f.Bytes) {
				t.Fatalf("Size = %d, want %d", n, len(f.Bytes))
			}
			prefix := []byte("prefix")
			got, err = packet.Append(prefix, f.Packet, f.Version)
			if err != nil || !bytes.Equal(got[:6], []byte("prefix")) || !bytes.Equal(got[6:], f.Bytes) {
				t.Fatalf("Append after a prefix = % x, %v", got, err)
			}
			var buf bytes.Buffer
			if err := packet.Encode(&buf, f.Packet, f.Version); err != nil || !bytes.Equal(buf.Bytes(), f.Bytes) {
				t.Fatalf("Encode = % x, %v", buf.Bytes(), err)
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	for _, f := range packettest.Invalid {
		t.Run(f.Name, func(t *testing.T) {
			for name, decode := range map[string]func() (packet.Packet, error){
				"Decode": func() (packet.Packet, error) {
					return packet.Decode(bufio.NewReader(bytes.NewReader(f.Bytes)), f.Version, 0)
				},
				"DecodeBytes": func() (packet.Packet, error) {
					p, _, err := packet.DecodeBytes(f.Bytes, f.Version, 0)
					return p, err
				},
			} {
				p, err := decode()
				var perr *packet.Error
				if !errors.As(err, &perr) {
					t.Fatalf("%s = %#v, %v; want an *Error with code %v", name, p, err, f.Code)
				}
				if perr.Code != f.Code {
					t.Fatalf("%s error = %v; want code %v", name, err, f.Code)
				}
				if !errors.Is(err, f.Code) {
					t.Fatalf("%s: errors.Is(%v, %v) = false", name, err, f.Code)
				}
				if p != nil && f.Code != packet.UnsupportedProtocolVersion {
					t.Fatalf("%s returned a packet with the error: %#v", name, p)
				}
			}
		})
	}
}

func TestUnsupportedProtocolVersionReturnsConnect(t *testing.T) {
	b := packettest.B(0x10, 12, packettest.S("MQTT"), 6, 2, 0, 60, packettest.S(""))
	p, err := packet.Decode(bufio.NewReader(bytes.NewReader(b)), 0, 0)
	if !errors.Is(err, packet.UnsupportedProtocolVersion) {
		t.Fatalf("err = %v", err)
	}
	c, ok := p.(*packet.Connect)
	if !ok || c.ProtocolName != "MQTT" || c.Version != 6 {
		t.Fatalf("packet = %#v, want a *Connect naming level 6", p)
	}
}

func TestDecodeStream(t *testing.T) {
	// Several packets back to back, then a clean end.
	var stream []byte
	var want []packet.Packet
	for _, f := range packettest.Golden {
		if f.Version == packet.V311 && f.Packet.Type() != packet.CONNECT {
			stream = append(stream, f.Bytes...)
			want = append(want, f.Packet)
		}
	}
	r := bufio.NewReaderSize(iotest.HalfReader(bytes.NewReader(stream)), 16)
	for i, w := range want {
		got, err := packet.Decode(r, packet.V311, 0)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Fatalf("packet %d = %#v, %v; want %#v", i, got, err, w)
		}
	}
	if _, err := packet.Decode(r, packet.V311, 0); err != io.EOF {
		t.Fatalf("after the last packet: %v, want io.EOF", err)
	}
	// DecodeBytes walks the same stream.
	for i, w := range want {
		got, n, err := packet.DecodeBytes(stream, packet.V311, 0)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Fatalf("DecodeBytes packet %d = %#v, %v", i, got, err)
		}
		stream = stream[n:]
	}
	if len(stream) != 0 {
		t.Fatalf("%d bytes left", len(stream))
	}
}

func TestDecodeReadError(t *testing.T) {
	boom := errors.New("boom")
	b := packettest.Golden[0].Bytes
	for _, n := range []int{0, 1, 2, 5} {
		r := io.MultiReader(bytes.NewReader(b[:n]), iotest.ErrReader(boom))
		if _, err := packet.Decode(bufio.NewReader(r), 0, 0); !errors.Is(err, boom) {
			t.Errorf("error after %d bytes = %v, want boom", n, err)
		}
	}
}

// TestTooLargeAllocatesNothing: a header claiming 200 MB under a 1 MiB limit
// fails before the body is allocated.
func TestTooLargeAllocatesNothing(t *testing.T) {
	const claim = 200 << 20
	var hdr []byte
	hdr = append(hdr, 0x30)
	for n := claim; ; n >>= 7 {
		if n < 0x80 {
			hdr = append(hdr, byte(n))
			break
		}
		hdr = append(hdr, byte(n)|0x80)
	}
	hdr = append(hdr, "and some more bytes"...)

	br := bytes.NewReader(hdr)
	r := bufio.NewReader(br)
	decode := func() {
		br.Reset(hdr)
		r.Reset(br)
		_, err := packet.Decode(r, packet.V311, 1<<20)
		if !errors.Is(err, packet.PacketTooLarge) {
			t.Fatalf("Decode: %v, want packet too large", err)
		}
		_, _, err = packet.DecodeBytes(hdr, packet.V5, 1<<20)
		if !errors.Is(err, packet.PacketTooLarge) {
			t.Fatalf("DecodeBytes: %v, want packet too large", err)
		}
	}
	allocs := testing.AllocsPerRun(100, decode)
	if allocs > 16 { // the two *Error values, their messages and boxed arguments
		t.Errorf("%v allocations per run", allocs)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		decode()
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / 100; perRun > 1024 {
		t.Errorf("%d bytes allocated per run", perRun)
	}
}

func TestRemainingLengthBoundaries(t *testing.T) {
	// Variable Byte Integer boundaries, 5.0 §1.5.5 table 1-1.
	for _, n := range []int{0, 127, 128, 16383, 16384, 2097151, 2097152} {
		payload := make([]byte, n)
		p := &packet.Publish{Topic: "t", Payload: payload}
		if n < 3 {
			continue
		}
		p.Payload = payload[:n-3] // remaining length = 2 + 1 + len(payload) = n
		b, err := packet.Append(nil, p, packet.V311)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != packet.Size(p, packet.V311) {
			t.Fatalf("Size mismatch at %d", n)
		}
		got, err := packet.Decode(bufio.NewReader(bytes.NewReader(b)), packet.V311, 0)
		if err != nil || !bytes.Equal(got.(*packet.Publish).Payload, p.Payload) {
			t.Fatalf("remaining length %d: %v", n, err)
		}
	}
	// The largest 4-byte claim is accepted by the header check (and then
	// found truncated); 268435456 cannot be expressed.
	_, _, err := packet.DecodeBytes([]byte{0x30, 0xFF, 0xFF, 0xFF, 0x7F}, packet.V311, 0)
	if !errors.Is(err, packet.ErrIncomplete) {
		t.Fatalf("max remaining length: %v", err)
	}
}

func TestValidTopicName(t *testing.T) {
	for _, tc := range []struct {
		name, topic string
		ok          bool
	}{
		{"simple", "a/b/c", true},
		{"single_level", "a", true},
		{"slash_only", "/", true},
		{"empty_levels", "a//b/", true},
		{"dollar", "$SYS/x", true},
		{"unicode", "センサー/温度", true},
		{"space", "a b", true},
		{"empty", "", false},
		{"plus", "a/+", false},
		{"hash", "#", false},
		{"plus_inside", "a+b", false},
		{"nul", "a\x00", false},
		{"bad_utf8", "a\xff", false},
		{"too_long", strings.Repeat("a", 65536), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := packet.ValidTopicName(tc.topic)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidTopicName(%q) = %v", tc.topic, err)
			}
			if err != nil && !errors.Is(err, packet.TopicNameInvalid) {
				t.Fatalf("error %v is not TopicNameInvalid", err)
			}
		})
	}
}

func TestValidTopicFilter(t *testing.T) {
	for _, tc := range []struct {
		name, filter string
		ok           bool
	}{
		{"plain", "a/b", true},
		{"hash", "#", true},
		{"plus", "+", true},
		{"trailing_hash", "a/#", true},
		{"plus_levels", "+/a/+", true},
		{"plus_empty_levels", "+//+", true},
		{"slash_hash", "/#", true},
		{"dollar", "$SYS/#", true},
		{"shared", "$share/g/a/+", true},
		{"shared_hash", "$share/g/#", true},
		{"shared_leading_slash", "$share/g//a", true},
		{"share_prefix_not_shared", "$sharex/a", true},
		{"empty", "", false},
		{"hash_middle", "a/#/b", false},
		{"hash_in_level", "a/b#", false},
		{"hash_first", "#a", false},
		{"plus_in_level", "a+", false},
		{"plus_suffix", "a/+b", false},
		{"hash_twice", "##", false},
		{"nul", "a/\x00", false},
		{"bad_utf8", "\xc3", false},
		{"too_long", strings.Repeat("a", 65536), false},
		{"shared_no_filter", "$share/g", false},
		{"shared_empty_filter", "$share/g/", false},
		{"shared_empty_group", "$share//a", false},
		{"shared_plus_group", "$share/+/a", false},
		{"shared_hash_group", "$share/g#/a", false},
		{"shared_bad_filter", "$share/g/a#", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := packet.ValidTopicFilter(tc.filter)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidTopicFilter(%q) = %v", tc.filter, err)
			}
			if err != nil && !errors.Is(err, packet.TopicFilterInvalid) {
				t.Fatalf("error %v is not TopicFilterInvalid", err)
			}
		})
	}
}

func TestSplitShared(t *testing.T) {
	for _, tc := range []struct {
		in, group, filter string
		ok                bool
	}{
		{"$share/g/a/b", "g", "a/b", true},
		{"$share/g/", "g", "", true},
		{"$share//a", "", "a", true},
		{"$share/g", "", "$share/g", false},
		{"a/b", "", "a/b", false},
		{"$SHARE/g/a", "", "$SHARE/g/a", false},
	} {
		g, f, ok := packet.SplitShared(tc.in)
		if g != tc.group || f != tc.filter || ok != tc.ok {
			t.Errorf("SplitShared(%q) = %q, %q, %v; want %q, %q, %v", tc.in, g, f, ok, tc.group, tc.filter, tc.ok)
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	long := strings.Repeat("a", 65536)
	for _, tc := range []struct {
		name string
		p    packet.Packet
		v    packet.Version
	}{
		{"unknown_level", &packet.Pingreq{}, 7},
		{"level_0_not_connect", &packet.Pingreq{}, 0},
		{"publish_qos3", &packet.Publish{Topic: "t", QoS: 3, PacketID: 1}, packet.V311},
		{"publish_qos1_no_id", &packet.Publish{Topic: "t", QoS: 1}, packet.V311},
		{"publish_dup_qos0", &packet.Publish{Topic: "t", Dup: true}, packet.V311},
		{"publish_long_topic", &packet.Publish{Topic: long}, packet.V311},
		{"publish_disallowed_prop", &packet.Publish{Topic: "t", Props: packet.Properties{
			Present: 1 << packet.PropSessionExpiry}}, packet.V5},
		{"publish_too_large", &packet.Publish{Topic: "t", Payload: make([]byte, 268435455)}, packet.V311},
		{"puback_no_id", &packet.Puback{}, packet.V311},
		{"subscribe_empty", &packet.Subscribe{PacketID: 1}, packet.V311},
		{"subscribe_no_id", &packet.Subscribe{Subscriptions: []packet.Subscription{{Filter: "a"}}}, packet.V311},
		{"subscribe_two_ids", &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "a"}},
			Props: packet.Properties{SubscriptionIDs: []uint32{1, 2}}}, packet.V5},
		{"subscribe_id_0", &packet.Publish{Topic: "t", Props: packet.Properties{SubscriptionIDs: []uint32{0}}}, packet.V5},
		{"subscribe_qos3", &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "a", QoS: 3}}}, packet.V311},
		{"unsubscribe_empty", &packet.Unsubscribe{PacketID: 1}, packet.V311},
		{"suback_empty", &packet.Suback{PacketID: 1}, packet.V311},
		{"unsuback_v5_empty", &packet.Unsuback{PacketID: 1}, packet.V5},
		{"auth_v4", &packet.Auth{}, packet.V311},
		{"connect_password_only_v4", &packet.Connect{Version: packet.V311, PasswordFlag: true}, 0},
		{"connect_will_qos3", &packet.Connect{Version: packet.V311, Will: &packet.Will{Topic: "t", QoS: 3}}, 0},
		{"connect_long_client_id", &packet.Connect{Version: packet.V311, ClientID: long}, 0},
		{"long_user_property", &packet.Disconnect{Props: packet.Properties{
			UserProperties: []packet.UserProperty{{Key: long}}}}, packet.V5},
		{"nil_publish", (*packet.Publish)(nil), packet.V311},
		{"nil", nil, packet.V311},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			got, err := packet.Append(dst, tc.p, tc.v)
			if err == nil {
				t.Fatalf("Append succeeded: % x", got)
			}
			if string(got) != "keep" {
				t.Fatalf("Append changed dst on error: %q", got)
			}
			if n := packet.Size(tc.p, tc.v); n != -1 {
				t.Fatalf("Size = %d, want -1", n)
			}
		})
	}
}

func TestEncodeV3IgnoresV5Fields(t *testing.T) {
	props := packet.Properties{Present: 1 << packet.PropReasonString, ReasonString: "x"}
	for _, tc := range []struct {
		name string
		p    packet.Packet
		want []byte
	}{
		{"puback", &packet.Puback{PacketID: 1, ReasonCode: packet.QuotaExceeded, Props: props}, []byte{0x40, 2, 0, 1}},
		{"disconnect", &packet.Disconnect{ReasonCode: packet.ServerBusy, Props: props}, []byte{0xE0, 0}},
		{"unsuback", &packet.Unsuback{PacketID: 1, ReasonCodes: []packet.ReasonCode{0}}, []byte{0xB0, 2, 0, 1}},
		{"subscribe_options", &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
			{Filter: "t", QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 2}}},
			[]byte{0x82, 6, 0, 1, 0, 1, 't', 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := packet.Append(nil, tc.p, packet.V311)
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("Append = % x, %v; want % x", got, err, tc.want)
			}
		})
	}
	// 3.1 has no session present flag.
	got, _ := packet.Append(nil, &packet.Connack{SessionPresent: true}, packet.V31)
	if !bytes.Equal(got, []byte{0x20, 2, 0, 0}) {
		t.Fatalf("3.1 CONNACK = % x", got)
	}
}

func TestPublishPayloadIsSubSliceOfBody(t *testing.T) {
	b := packettest.B(0x30, 10, packettest.S("a/b"), "hello")
	p, err := packet.Decode(bufio.NewReader(bytes.NewReader(b)), packet.V311, 0)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*packet.Publish).Payload
	if cap(pl) != len(pl) {
		t.Fatalf("payload cap %d > len %d: appending would write into shared memory", cap(pl), len(pl))
	}
	// DecodeBytes copies: the caller may reuse its buffer.
	p2, _, _ := packet.DecodeBytes(b, packet.V311, 0)
	b[len(b)-1] = '!'
	if string(p2.(*packet.Publish).Payload) != "hello" {
		t.Fatal("DecodeBytes result aliases the input")
	}
}

func TestDecodeAllocs(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		b, err := packet.Append(nil, &packet.Publish{QoS: 1, PacketID: 1, Topic: "sensors/room1/temp", Payload: make([]byte, 64)}, v)
		if err != nil {
			t.Fatal(err)
		}
		br := bytes.NewReader(b)
		r := bufio.NewReader(br)
		allocs := testing.AllocsPerRun(100, func() {
			br.Reset(b)
			r.Reset(br)
			if _, err := packet.Decode(r, v, 0); err != nil {
				t.Fatal(err)
			}
		})
		// The body, the topic string and the *Publish itself.
		if allocs != 3 {
			t.Errorf("v%d: %v allocations per decode, want 3", v, allocs)
		}
		dst := make([]byte, 0, 256)
		p := &packet.Publish{QoS: 1, PacketID: 1, Topic: "sensors/room1/temp", Payload: make([]byte, 64)}
		if allocs := testing.AllocsPerRun(100, func() {
			dst, _ = packet.Append(dst[:0], p, v)
		}); allocs != 0 {
			t.Errorf("v%d: %v allocations per encode, want 0", v, allocs)
		}
	}
}

func TestTypeAndVersionStrings(t *testing.T) {
	if packet.PUBLISH.String() != "PUBLISH" || packet.Type(16).String() != "type 16" {
		t.Error("Type.String")
	}
	if packet.V311.String() != "3.1.1" || packet.V5.String() != "5.0" || packet.V31.String() != "3.1" {
		t.Error("Version.String")
	}
	if !packet.AllowedProperty(packet.PUBLISH, packet.PropTopicAlias) || packet.AllowedProperty(packet.CONNECT, packet.PropTopicAlias) {
		t.Error("AllowedProperty")
	}
}
