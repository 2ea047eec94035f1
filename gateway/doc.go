// Package gateway is edgegw's embedded MQTT broker (3.1, 3.1.1 and 5.0).
// Listeners hand it connections (Server.ServeConn); it keeps the sessions,
// routes each message to the matching subscribers and to in-process sinks
// (a bridge's spool), and acknowledges a QoS 1/2 message only once
// everything that must keep it has (ack.go).
//
// # Connections
//
// A client is one network connection speaking MQTT. The goroutine that calls
// Server.ServeConn is its reader: it decodes and handles packets. The write
// side of the socket has one owner at a time, the writer (c.writing), never
// two at once; it drains the control lane first, then the session's
// sendable messages, so acks never wait behind a PUBLISH (field report 000;
// only new PUBLISH packets are gated by the in-flight window). Everything
// else only enqueues.
//
// The writer exists only while there is something to write, and at sensor
// rates it is usually not a goroutine at all (writer.go): work queued while
// a reader handles its input is flushed by that reader once the input is
// drained (or before it waits: for the rest of a split packet, in a
// synchronous sink, for SUBSCRIBE's state records), inline, with
// one non-blocking write when the socket takes all the bytes at once. Only
// what could wait (a full socket buffer, a batch that keeps growing, a
// closing DISCONNECT, TLS and WebSocket connections) goes to a writer
// goroutine, whose every write has a deadline.
//
// # Files
//
//	server.go         Server, Options, ServeConn, Run, Publish
//	defaults.go       DefaultOptions: what a zero Options runs with
//	client.go         one connection: state, serve, close
//	writer.go         the writer: control lane, encoding, inline flushes,
//	                  the writer goroutine, its pooled buffers
//	reader.go         the reader: read loop, idle wait, read errors, the
//	                  pooled read buffer; a plain socket's reads (and the
//	                  inline writes) go through internal/sockio (RawSyscall:
//	                  the runtime's sysmon stays asleep)
//	connect.go        CONNECT: authentication, limits, will, session, CONNACK
//	handle.go         every packet after CONNECT; acks, PINGREQ
//	publish.go        an incoming PUBLISH
//	subscribe.go      SUBSCRIBE and UNSUBSCRIBE
//	disconnect.go     DISCONNECT
//	takeover.go       draining a connection whose session is taken over
//	takeover_linux.go its ACK sent at once first (takeover_other.go: not
//	                  on other systems)
//	drain.go          a stop: a persistent session's flows settle before its
//	                  connection closes
//	route.go          routing a message to subscriptions; wills
//	share.go          a shared subscription's copies handed to another
//	                  member when a member's session ends
//	sink.go           sinks: in-process consumers (a bridge's spool)
//	ack.go            the deferred acknowledgement
//	hold.go           a message that can still be refused is withheld from
//	                  its subscribers until its verdict
//	inbound.go        a publisher's incoming flows: the v5 Receive Maximum
//	                  count, the inbound QoS 2 packet ids (a resent PUBLISH
//	                  is not delivered twice)
//	exactlyonce.go    a bridge's inbound QoS 2: its packet id kept with the
//	                  routing in one state record (PublishExactlyOnce, Release)
//	registry.go       the life of sessions: attach, detach, expiry, wills
//	session.go        one session: its queue (deliver), release
//	outbound.go       a session's in-flight window: what the writer takes
//	                  (takeSendable), PUBACK, PUBREC, PUBCOMP
//	flow.go           flow control: publishers' acks waiting for a congested
//	                  subscriber, the stall guard
//	subscriptions.go  a session's subscriptions and their topic tree entries
//	queue.go          a session's message queue
//	persist.go        writing the state store; restore.go reading it back
//	authz.go          authorization on delivery; refusal counters
//	limits.go         topic and subscription limits
//	retained.go       the retained store's bound; a SUBSCRIBE's retained
//	                  messages fed into the queue as it drains
//	tarpit.go         slowing down password guessing; checkgate.go the
//	                  order of password checks
//	stats.go          counters, Stats, $SYS; sys.go $SYS subscriptions
//	clients.go        the status page's list of clients
//	close.go          close reasons
//	message.go        Message
//
// # The route of an incoming PUBLISH
//
//	reader.go     readLoop decodes it
//	handle.go     handle dispatches it
//	publish.go    handlePublish checks it (Receive Maximum, topic limits,
//	              topic alias, $SYS, ACL); a QoS 2 id is recorded
//	              (inbound.go receiveQoS2)
//	route.go      routeKept: the retained store (server.go retain,
//	              persist.go), then
//	sink.go       the sinks; an asynchronous one makes the acknowledgement
//	              wait (ack.go keeper.get, deferAck), then
//	route.go      the matching subscriptions and shared groups, each
//	              delivered to
//	session.go    its session's queue (deliver; persist.go for a persistent
//	              session), which wakes that connection's writer (writer.go
//	              wake: the routing reader flushes it inline once its input
//	              is drained, or a writer goroutine); under flow control
//	              the acknowledgement waits for a congested subscriber
//	              (flow.go addWaiter)
//	persist.go    waitState: the acknowledgement waits for the state records
//	ack.go        the verdict: PUBACK/PUBREC now (ackID), or when the last
//	              sink, record or subscriber has kept it (keep.finish,
//	              slotDone), in PUBLISH order; notKept if it was not kept
//	writer.go     the writer sends the acknowledgement (control lane first)
//	              and each subscriber's writer its copy (outbound.go
//	              takeSendable)
//
// # Lock order
//
// Locks are taken top down, never bottom up. A lock with nothing indented
// below it is a leaf (nothing is taken while it is held), as is every lock
// not listed (keep.mu, hold.mu, shareMu, watchMu, the tarpit's, the check
// gate's, the sinks' tree).
//
//	registry.mu             the sessions by client id (registry.go)
//	  topics.Retained       read-locked while SUBSCRIBE collects retained
//	                        messages (subscribe.go); never taken under a
//	                        session.mu
//	    session.mu          one session at a time; no I/O under it
//	      topics.Tree, store.Store, session.reads.mu
//	client.amu              a publisher's ack slots (ack.go); never taken
//	                        under a session.mu or a tree's lock; under
//	                        registry.mu when attach or shutdown releases
//	                        flow-control waiters
//	  client.wmu            the control lane and the writer's state
//
// Releasing an acknowledgement (keep.finish, releaseWaiters, slotDone)
// takes the publisher's session.mu (qos2Verdict), then its amu, then its
// wmu: it is called with no session lock held, after unlocking (takeWaiters
// and release hand the waiters back for that).
//
// # Spec tags
//
// A line that enforces a normative statement of the MQTT specification
// carries its number: [MQTT-3.3.4-7] is a statement of MQTT 5.0; a
// statement of 3.1.1 (found only there, or numbered differently there) is
// marked [MQTT-3.1.2-24](3.1.1). A rule of a section that has no numbered
// statement is cited without brackets, by version and section: 5.0
// §3.14.2.2.2, 3.1.1 §3.1.2.4. No placeholders: a tag names the statement
// it enforces or is not written. internal/archtest's TestSpecTags checks
// the form of every tag in the module (CONTRIBUTING.md).
package gateway
