package bridge

// pubrecScanner follows the MQTT packet boundaries in the byte stream read
// from upstream and reports the packet id of every PUBREC, so that the
// uplinkStore turns the matching PUBLISH into its PUBREL before paho has
// even parsed it (see store.go). It keeps a few bytes of state and costs a
// subtraction per read of a large body. A malformed stream only makes it
// report nonsense ids, which match no stored publish; paho fails such a
// connection anyway.
type pubrecScanner struct {
	onPubrec func(pid uint16)

	state  scanState
	typ    byte // packet type of the packet being scanned
	remain int  // body bytes left (scanBody) or length read so far (scanLength)
	shift  uint // of the next remaining-length byte
	id     uint16
	idRead int // packet id bytes read (PUBREC only)
}

type scanState uint8

const (
	scanHeader scanState = iota
	scanLength
	scanBody
)

const pubrecType = 5

func (s *pubrecScanner) scan(p []byte) {
	for i := 0; i < len(p); {
		switch s.state {
		case scanHeader:
			s.typ = p[i] >> 4
			s.remain, s.shift = 0, 0
			s.state = scanLength
			i++
		case scanLength:
			b := p[i]
			i++
			s.remain |= int(b&0x7f) << s.shift
			s.shift += 7
			if b&0x80 != 0 && s.shift < 28 {
				continue
			}
			s.id, s.idRead = 0, 0
			s.state = scanBody
			if s.remain == 0 {
				s.state = scanHeader
			}
		case scanBody:
			if s.typ == pubrecType && s.idRead < 2 {
				s.id = s.id<<8 | uint16(p[i])
				s.idRead++
				s.remain--
				i++
				if s.idRead == 2 {
					s.onPubrec(s.id)
				}
			} else {
				n := min(s.remain, len(p)-i)
				s.remain -= n
				i += n
			}
			if s.remain == 0 {
				s.state = scanHeader
			}
		}
	}
}
