// Package kafkaconn owns how Weir connects to Kafka: the client options
// every Kafka client of a replica or a CLI command is built from (seed
// brokers, TLS, SASL), the reloading of certificates and secrets from
// files, and the classification of connection failures that no retry can
// fix (a certificate the client or the broker refuses, a failed
// authentication) into one clear, permanent error.
//
// One Conn serves every client of a process: a failure any client meets
// is reported once, on Failed, with the broker, the mechanism and the user
// it concerns, never a secret.
package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
)

// Conn is the connection settings of one process's Kafka clients.
type Conn struct {
	cfg   config.Kafka
	opts  []kgo.Opt
	guard *guard
}

// New checks cfg's TLS files and secrets (reading each once) and returns
// the connection settings. Reloads of the TLS files are logged to logger.
func New(cfg config.Kafka, logger *slog.Logger) (*Conn, error) {
	c := &Conn{cfg: cfg}
	c.guard = &guard{failed: make(chan struct{}), mechanism: cfg.SASL.Mechanism, user: saslUser(cfg.SASL), eofs: map[string]*eofRun{}}
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.WithHooks(c.guard)}
	if cfg.TLS.Enabled {
		// insecure_skip_verify is warned about by config.Warnings, which
		// every command logs.
		t, err := newTLSFiles(cfg.TLS, logger)
		if err != nil {
			return nil, err
		}
		c.guard.tls, c.guard.files = true, t
		opts = append(opts, kgo.Dialer(t.dial))
	}
	if cfg.SASL.Mechanism != "" {
		m, err := newMechanism(cfg.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	c.opts = opts
	return c, nil
}

// Opts returns the options every Kafka client of the process starts from:
// seed brokers, TLS, SASL and the hook that reports permanent failures. The
// slice is the caller's.
func (c *Conn) Opts() []kgo.Opt { return append([]kgo.Opt(nil), c.opts...) }

// Failed is closed when a client met a connection failure that no retry
// fixes; Err then says which.
func (c *Conn) Failed() <-chan struct{} { return c.guard.failed }

// Err returns the permanent connection failure, or nil.
func (c *Conn) Err() error {
	c.guard.mu.Lock()
	defer c.guard.mu.Unlock()
	if c.guard.err == nil {
		return nil
	}
	return c.guard.err
}

// Explain returns err, or, when a client of c met a permanent connection
// failure, that failure (err is then most likely its consequence: a
// request that could not reach a broker). CLI commands report with it.
func (c *Conn) Explain(err error) error {
	if err == nil {
		return nil
	}
	if ce := c.Err(); ce != nil {
		return ce
	}
	if e := c.guard.classify("", err); e != nil {
		return e
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A command gives up before the window: say what the hang-ups
		// most likely mean.
		if addr, n := c.guard.hangUps(); n > 0 {
			return &Error{Kind: KindProtocol, Broker: addr, Mechanism: c.guard.mechanism, User: c.guard.user, Err: err,
				Problem: fmt.Sprintf("it closed %d connection(s) while they were being set up, before answering; %s", n, mismatchHint(c.guard.tls, c.guard.mechanism))}
		}
	}
	return err
}

// hangUps returns a broker that closed connections before answering, with
// no success since, and how many.
func (g *guard) hangUps() (string, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for addr, run := range g.eofs {
		return addr, run.n
	}
	return "", 0
}

// Describe says how c connects (Describe).
func (c *Conn) Describe() string { return Describe(c.cfg) }

// Describe says how cfg connects, for logs: "SASL_SSL (SCRAM-SHA-512, user
// weir)". No secret is in it.
func Describe(cfg config.Kafka) string {
	proto := "PLAINTEXT"
	switch {
	case cfg.TLS.Enabled && cfg.SASL.Mechanism != "":
		proto = "SASL_SSL"
	case cfg.TLS.Enabled:
		proto = "SSL"
	case cfg.SASL.Mechanism != "":
		proto = "SASL_PLAINTEXT"
	}
	var parts []string
	if cfg.SASL.Mechanism != "" {
		parts = append(parts, cfg.SASL.Mechanism)
		if u := saslUser(cfg.SASL); u != "" {
			parts = append(parts, "user "+u)
		}
	}
	if cfg.TLS.CertFile != "" {
		parts = append(parts, "client certificate "+cfg.TLS.CertFile)
	}
	if len(parts) == 0 {
		return proto
	}
	return proto + " (" + strings.Join(parts, ", ") + ")"
}

func saslUser(s config.SASL) string {
	switch s.Mechanism {
	case config.SASLOAuthBearer:
		return s.OAuth.ClientID
	default:
		return s.Username
	}
}

// Kind says what failed.
type Kind string

// The kinds of permanent connection failure.
const (
	// KindTLS is a TLS handshake the client or the broker refused.
	KindTLS Kind = "tls"
	// KindSASL is an authentication the broker refused.
	KindSASL Kind = "sasl"
	// KindProtocol is a client and a listener that do not speak the same
	// protocol (TLS or not, SASL or not).
	KindProtocol Kind = "protocol"
)

// Error is a connection failure that no retry fixes: a person must change
// the configuration, a certificate or a credential.
type Error struct {
	Kind Kind
	// Broker is the broker's address.
	Broker string
	// Mechanism and User of a SASL failure.
	Mechanism, User string
	// Problem says what is wrong, in the user's terms.
	Problem string
	// Err is the underlying error.
	Err error
}

func (e *Error) Error() string {
	at := ""
	if e.Broker != "" {
		at = " with broker " + e.Broker
	}
	switch e.Kind {
	case KindSASL:
		return fmt.Sprintf("kafka: authentication%s failed (mechanism %s, user %q): %s", at, e.Mechanism, e.User, e.Problem)
	case KindTLS:
		return fmt.Sprintf("kafka: TLS handshake%s failed: %s", at, e.Problem)
	default:
		who := ""
		if e.Mechanism != "" {
			who = fmt.Sprintf(" (mechanism %s, user %q)", e.Mechanism, e.User)
		}
		return fmt.Sprintf("kafka: cannot talk to broker%s%s: %s", strings.TrimPrefix(at, " with broker"), who, e.Problem)
	}
}

func (e *Error) Unwrap() error { return e.Err }

// guard is the hook on every client of a Conn: it turns the first
// permanent connection failure into Conn.Err.
type guard struct {
	mechanism, user string
	tls             bool
	files           *tlsFiles // nil without TLS

	mu     sync.Mutex
	err    *Error
	failed chan struct{}
	// eofs counts, per broker, connections closed by the broker before
	// its first answer, in a row: a plaintext client on a TLS listener
	// sees nothing else. A broker restarting does it too, briefly.
	eofs map[string]*eofRun
}

type eofRun struct {
	n     int
	since time.Time
}

// A broker that closes eofLimit connections in a row, over at least
// eofSpan, before answering anything, is not going to answer this client.
const (
	eofLimit = 5
	eofSpan  = 10 * time.Second
)

var _ kgo.HookBrokerConnect = (*guard)(nil)

// OnBrokerConnect implements kgo.HookBrokerConnect: it is called after
// every connection attempt, with the error of the dial, the TLS handshake
// or the SASL authentication.
func (g *guard) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	addr := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return
	}
	if err == nil {
		delete(g.eofs, addr)
		return
	}
	e := g.classify(addr, err)
	if e == nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		run := g.eofs[addr]
		if run == nil {
			run = &eofRun{since: time.Now()}
			g.eofs[addr] = run
		}
		run.n++
		if run.n < eofLimit || time.Since(run.since) < eofSpan {
			return
		}
		e = &Error{Kind: KindProtocol, Broker: addr, Mechanism: g.mechanism, User: g.user, Err: err, Problem: fmt.Sprintf(
			"it closed %d connections in a row over %v while they were being set up, before answering; %s",
			run.n, time.Since(run.since).Round(time.Second), mismatchHint(g.tls, g.mechanism))}
	}
	g.err = e
	close(g.failed)
}

// mismatchHint guesses what a listener that hangs up on this client wants.
func mismatchHint(tls bool, mechanism string) string {
	switch {
	case !tls && mechanism == "":
		return "does the listener need TLS (kafka.tls.enabled) or SASL (kafka.sasl.mechanism)?"
	case !tls:
		return "does the listener need TLS (kafka.tls.enabled), or is the password or token wrong (some brokers hang up on a refused credential)?"
	case mechanism == "":
		return "does the listener need SASL (kafka.sasl.mechanism), or is it not a TLS listener (kafka.brokers)?"
	default:
		return "is the password or token right (some brokers hang up on a refused credential), and is this the listener for SASL over TLS?"
	}
}

// classify returns the permanent failure err is, or nil for an error a
// retry may fix.
func (g *guard) classify(addr string, err error) *Error {
	var ke *Error
	if errors.As(err, &ke) {
		e := *ke
		if e.Broker == "" {
			e.Broker = addr
		}
		return &e
	}
	if e := classifyTLS(addr, err, g.files); e != nil {
		return e
	}
	return classifySASL(addr, err, g.mechanism, g.user)
}

// contextDone reports whether err is only the end of a context.
func contextDone(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
