package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegw/edgegw/gateway/packet"
	"github.com/edgegw/edgegw/gateway/store"
	"github.com/edgegw/edgegw/gateway/topics"
)

// Options are the broker's limits and policies. The zero value of a field
// means its default (see withDefaults); cmd/edgegw maps the typed config onto
// this struct so the gateway never sees viper.
type Options struct {
	MaxConnections    int           // concurrent network connections; 0 = 1024
	MaxPacketSize     int           // bytes, inbound and advertised (v5); 0 = 1 MiB
	ConnectTimeout    time.Duration // socket open until CONNECT arrives; 0 = 10s
	WriteTimeout      time.Duration // deadline of every write; 0 = 10s
	FlowStall         time.Duration // a subscriber whose oldest unacked message is older no longer holds publishers (flow control); 0 = 250ms, at most WriteTimeout
	MaxInflight       int           // outgoing QoS 1/2 window per session; 0 = 32
	ReceiveMaximum    int           // v5 inbound window announced and enforced; 0 = MaxInflight
	MaxQueuedMessages int           // per session; 0 = 1000
	MaxQueuedBytes    int64         // per session; 0 = 4 MiB
	MemoryBudget      int64         // all queued payloads together; 0 = 64 MiB
	MaxSessionExpiry  time.Duration // cap on session expiry; also 3.1.1 persistent sessions; 0 = 24h
	ServerKeepAlive   time.Duration // v5 server keepalive override; 0 = accept the client's
	MaxKeepAlive      time.Duration // keepalive above this is lowered (v5) ; 0 = none
	TopicAliasMaximum uint16        // inbound aliases accepted from v5 clients; 0 = 64
	SysInterval       time.Duration // $SYS update period; 0 = 10s
	MaxTopicLevels    int           // levels of a topic name or filter; 0 = 64
	MaxTopicLength    int           // bytes of a topic name or filter; 0 = 65535 (MQTT's own maximum)
	MaxSubscriptions  int           // per session; 0 = 500
	ShutdownGrace     time.Duration // at a stop, how long a persistent session's client may take to acknowledge what it was sent (drain.go); 0 = 1s
	// The retained store's bound (retained.go): topics, and bytes (topic,
	// payload and 512 per message); a new topic beyond it is not
	// retained. 0 = 100,000 and 64 MiB.
	MaxRetainedMessages int
	MaxRetainedBytes    int64

	AllowAnonymous bool
	Authenticator  Authenticator // nil: anyone (subject to AllowAnonymous)
	Authorizer     Authorizer    // nil: everything allowed

	// Version is reported in $SYS/broker/version; "" = "edgegw".
	// cmd/edgegw sets it to "edgegw <build version>".
	Version string

	// Store keeps retained messages and persistent sessions across
	// restarts (persistence.dir); nil keeps everything in memory only.
	// Call Server.Restore with what store.Open loaded before serving.
	Store *store.Store
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxConnections, 1024)
	def(&o.MaxPacketSize, 1<<20)
	def(&o.MaxInflight, 32)
	def(&o.MaxQueuedMessages, 1000)
	def(&o.MaxTopicLevels, 64)
	def(&o.MaxTopicLength, 65535)
	def(&o.MaxSubscriptions, 500)
	def(&o.MaxRetainedMessages, 100_000)
	if o.MaxRetainedBytes <= 0 {
		o.MaxRetainedBytes = 64 << 20
	}
	if o.MaxInflight > 65535 {
		o.MaxInflight = 65535
	}
	def(&o.ReceiveMaximum, o.MaxInflight)
	o.ReceiveMaximum = min(o.ReceiveMaximum, 65535)
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = 4 << 20
	}
	if o.MemoryBudget <= 0 {
		o.MemoryBudget = 64 << 20
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = time.Second
	}
	if o.FlowStall <= 0 {
		o.FlowStall = 250 * time.Millisecond
	}
	if o.MaxSessionExpiry <= 0 {
		o.MaxSessionExpiry = 24 * time.Hour
	}
	if o.TopicAliasMaximum == 0 {
		o.TopicAliasMaximum = 64
	}
	if o.SysInterval <= 0 {
		o.SysInterval = 10 * time.Second
	}
	if o.Version == "" {
		o.Version = "edgegw"
	}
	return o
}

// Authenticator decides whether a CONNECT may proceed. Declared here, by its
// consumer; gateway/auth implements it over a bcrypt password file.
type Authenticator interface {
	// Authenticate returns nil to accept. certCN is the verified client
	// certificate's common name ("" without mTLS).
	Authenticate(clientID, username string, password []byte, hasPassword bool, certCN string) error
	// ChecksPasswords reports whether Authenticate has anything to check
	// a user name and password against. Without, and without
	// AllowAnonymous, only a client whose certificate names it is let in.
	ChecksPasswords() bool
}

// recentLogins is an Authenticator that remembers the credentials it
// verified lately (auth.Files): a login with one skips the tarpit.
type recentLogins interface {
	Recent(username string, password []byte) bool
}

// Authorizer decides per topic what an authenticated client may do.
type Authorizer interface {
	CanPublish(username, clientID, topic string) bool
	CanSubscribe(username, clientID, filter string) bool
	// CanRead is asked before a message is delivered to a subscriber
	// (live or retained): a filter allowed at subscribe time can still
	// match topics the subscriber may not read.
	CanRead(username, clientID, topic string) bool
	// Generation changes when the rules change (a reload); CanRead
	// verdicts cached under an older generation are dropped.
	Generation() uint64
}

// Server is the embedded MQTT broker. Listeners hand it connections through
// ServeConn; Run drives its background duties ($SYS). One Server per process
// is usual, but nothing in the package is global.
type Server struct {
	opts    Options
	log     *slog.Logger
	started time.Time

	subs     *topics.Tree[subscription]
	retained *topics.Retained[*Message]
	// retainedCount and retainedBytes are the retained store's size
	// against its bound; changed under the store's lock (retained.go).
	retainedCount, retainedBytes atomic.Int64
	reg                          registry
	sinks                        sinkSet
	tarpit                       tarpit       // slows password guessing per source address
	state                        *store.Store // nil: memory only (persist.go)
	origins                      originIDs    // bridges' inbound QoS 2 ids (exactlyonce.go)

	shareMu sync.Mutex
	shareRR map[string]uint32 // round-robin position per shared group+filter

	refusals refusalPace // 3.1.1 publishers closed not_stored: their next CONNACK waits (ack.go)

	queuedBytes atomic.Int64 // all queued payload bytes (memory budget)
	subBytes    atomic.Int64 // estimated topic tree memory of all subscriptions (memory budget; limits.go)
	conns       atomic.Int64 // open network connections
	sysSubs     atomic.Int64 // subscriptions whose filter starts with $SYS
	stats       counters

	// Connections by the context they were served under: one
	// context.AfterFunc per distinct context closes them all when it is
	// cancelled, instead of one per connection (~150 B each, which an
	// idle connection cannot afford).
	watchMu sync.Mutex
	watches map[<-chan struct{}]*ctxWatch
}

// New builds a Server. It does no I/O until connections arrive.
func New(opts Options, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:     opts.withDefaults(),
		log:      log,
		started:  time.Now(),
		subs:     topics.NewTree[subscription](),
		retained: topics.NewRetained[*Message](),
		shareRR:  make(map[string]uint32),
		state:    opts.Store,
	}
	s.reg.init(s)
	return s
}

// Options returns the effective options (defaults applied).
func (s *Server) Options() Options { return s.opts }

// ServeConn runs one client connection until it closes; the caller's
// goroutine becomes the connection's reader. listener names the listener in
// logs and metrics. certCN is the verified client certificate CN ("" if
// none). It returns when the connection is finished and every goroutine it
// started has stopped. Cancelling ctx closes the connection.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn, listener, certCN string) error {
	if n := s.conns.Add(1); n > int64(s.opts.MaxConnections) {
		s.conns.Add(-1)
		s.stats.refused.Add(1)
		conn.Close()
		return fmt.Errorf("connection from %s refused: max_connections (%d) reached", conn.RemoteAddr(), s.opts.MaxConnections)
	}
	defer s.conns.Add(-1)
	c := newClient(s, conn, listener, certCN)
	return c.serve(ctx)
}

// Run drives the broker's periodic duties ($SYS topics) until ctx is done.
// On return every session timer is stopped.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.SysInterval)
	defer t.Stop()
	s.publishSys()
	for {
		select {
		case <-ctx.Done():
			s.origins.stop() // before the sessions stop taking messages (exactlyonce.go)
			s.reg.shutdown()
			return nil
		case <-t.C:
			s.publishSys()
		}
	}
}

// Publish routes a message from inside the process (a bridge, $SYS). It never
// blocks on subscribers. The message must not be modified afterwards.
func (s *Server) Publish(m *Message) error {
	if err := packet.ValidTopicName(m.Topic); err != nil {
		return fmt.Errorf("publish %q: %w", m.Topic, err)
	}
	if m.QoS > 2 {
		return fmt.Errorf("publish %q: qos %d", m.Topic, m.QoS)
	}
	return s.route(m)
}

// retain applies a PUBLISH's retain flag to the retained store. It returns
// the position of the state record to wait for (0: none).
func (s *Server) retain(m *Message) uint64 {
	hd := m.held
	kept := false
	s.retained.Update(m.Topic, func(old *Message, had bool) (*Message, bool) {
		if len(m.Payload) == 0 {
			s.retainedChange(old, had, nil, false)
			kept = had
			return nil, false // deleted [MQTT-3.3.1-6], [MQTT-3.3.1-10](3.1.1)
		}
		if !had && !s.retainFits(m) {
			s.stats.retainedRefused.Add(1)
			return nil, false // the store is full: routed, not retained
		}
		if had {
			s.retainedChange(old, true, m, true)
		}
		if hd != nil { // put back if m is refused (hold.go)
			hd.retained, hd.prev, hd.hadPrev = true, old, had
		}
		kept = true
		return m, true
	})
	if !kept {
		return 0
	}
	return s.persistRetain(m)
}

// ctxWatch is the set of live connections served under one context.
type ctxWatch struct {
	clients map[*client]struct{}
	stop    func() bool
}

// watch arranges for c to be closed when ctx is cancelled.
func (s *Server) watch(ctx context.Context, c *client) {
	done := ctx.Done()
	if done == nil {
		return // never cancelled
	}
	s.watchMu.Lock()
	if s.watches == nil {
		s.watches = make(map[<-chan struct{}]*ctxWatch)
	}
	w := s.watches[done]
	if w == nil {
		w = &ctxWatch{clients: make(map[*client]struct{})}
		w.stop = context.AfterFunc(ctx, func() { s.closeWatched(done) })
		s.watches[done] = w
	}
	w.clients[c] = struct{}{}
	s.watchMu.Unlock()
	if ctx.Err() != nil { // cancelled before c was in the set
		c.closeWith(CloseShutdown, packet.ServerShuttingDown)
	}
}

// unwatch removes c; the last connection of a context stops its AfterFunc.
func (s *Server) unwatch(ctx context.Context, c *client) {
	done := ctx.Done()
	if done == nil {
		return
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	w := s.watches[done]
	if w == nil {
		return
	}
	delete(w.clients, c)
	if len(w.clients) == 0 {
		w.stop()
		delete(s.watches, done)
	}
}

// closeWatched closes every connection served under a cancelled context.
func (s *Server) closeWatched(done <-chan struct{}) {
	s.watchMu.Lock()
	var cs []*client
	if w := s.watches[done]; w != nil {
		cs = make([]*client, 0, len(w.clients))
		for c := range w.clients {
			cs = append(cs, c)
		}
	}
	s.watchMu.Unlock()
	s.drain(cs) // drain.go
	for _, c := range cs {
		c.closeWith(CloseShutdown, packet.ServerShuttingDown)
	}
}
