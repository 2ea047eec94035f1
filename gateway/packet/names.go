package packet

import "strconv"

var typeNames = [16]string{
	"reserved", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
	"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
}

// String is the specification's name of the packet type, e.g. "PUBLISH".
func (t Type) String() string {
	if t < 16 {
		return typeNames[t]
	}
	return "type " + strconv.Itoa(int(t))
}

// String names the protocol level: "3.1", "3.1.1" or "5.0".
func (v Version) String() string {
	switch v {
	case V31:
		return "3.1"
	case V311:
		return "3.1.1"
	case V5:
		return "5.0"
	}
	return "level " + strconv.Itoa(int(v))
}
