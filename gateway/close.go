package gateway

// CloseReason says why a client connection ended. Every close is logged
// and counted with one of these.
type CloseReason int

// Close reasons.
const (
	CloseUnknown          CloseReason = iota
	CloseClientDisconnect             // the client sent DISCONNECT
	ClosePeerClosed                   // EOF or reset from the client
	CloseReadError                    // other read error
	CloseKeepAlive                    // nothing received within 1.5 x keepalive
	CloseConnectTimeout               // no CONNECT within connect_timeout
	CloseProtocolError                // malformed packet or protocol violation
	CloseWriteTimeout                 // a write missed its deadline (slow or stuck consumer)
	CloseWriteError                   // other write error
	CloseTakenOver                    // another connection took the session over
	CloseNotAuthorized                // CONNECT refused
	CloseShutdown                     // the server is stopping
	CloseNotStored                    // a 3.1.1 message a bridge spool could not keep: no ack, closed so it is resent
	CloseTopicLimit                   // a PUBLISH topic over limits.max_topic_length or max_topic_levels (3.1.1, or v5 QoS 0)
	numCloseReasons
)

var closeReasonNames = [...]string{
	CloseUnknown:          "unknown",
	CloseClientDisconnect: "client_disconnect",
	ClosePeerClosed:       "peer_closed",
	CloseReadError:        "read_error",
	CloseKeepAlive:        "keepalive_timeout",
	CloseConnectTimeout:   "connect_timeout",
	CloseProtocolError:    "protocol_error",
	CloseWriteTimeout:     "write_timeout",
	CloseWriteError:       "write_error",
	CloseTakenOver:        "session_taken_over",
	CloseNotAuthorized:    "not_authorized",
	CloseShutdown:         "shutdown",
	CloseNotStored:        "not_stored",
	CloseTopicLimit:       "topic_limit",
}

func (r CloseReason) String() string {
	if r >= 0 && int(r) < len(closeReasonNames) {
		return closeReasonNames[r]
	}
	return "unknown"
}
