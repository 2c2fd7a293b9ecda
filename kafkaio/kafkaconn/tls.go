package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/weir-stream/weir/config"
)

// tlsFiles is the TLS configuration of a Conn, read from its files again
// whenever one of them changed (size, modification time or, through a
// symlink swap as Kubernetes does, the file itself), checked at each new
// connection. A file that changed but does not load (caught mid-write)
// leaves the last good configuration in use, and is tried again at the
// next connection.
type tlsFiles struct {
	cfg config.TLS
	log *slog.Logger

	mu     sync.Mutex
	stamps [3]fileStamp // ca, cert, key
	loaded *tls.Config
	leaf   *x509.Certificate // the client certificate, if any
}

// fileStamp is what tells a changed file.
type fileStamp struct {
	size  int64
	mtime time.Time
	info  os.FileInfo
}

func stamp(path string) (fileStamp, error) {
	if path == "" {
		return fileStamp{}, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: fi.Size(), mtime: fi.ModTime(), info: fi}, nil
}

func (s fileStamp) same(o fileStamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == nil && o.info == nil
	}
	return s.size == o.size && s.mtime.Equal(o.mtime) && os.SameFile(s.info, o.info)
}

func newTLSFiles(cfg config.TLS, logger *slog.Logger) (*tlsFiles, error) {
	t := &tlsFiles{cfg: cfg, log: logger}
	if _, err := t.config(); err != nil {
		return nil, err
	}
	return t, nil
}

// config returns the TLS configuration, loading the files again if they
// changed.
func (t *tlsFiles) config() (*tls.Config, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var now [3]fileStamp
	var statErr error
	for i, p := range []string{t.cfg.CAFile, t.cfg.CertFile, t.cfg.KeyFile} {
		s, err := stamp(p)
		if err != nil {
			statErr = err
		}
		now[i] = s
	}
	if t.loaded != nil && (statErr != nil || (now[0].same(t.stamps[0]) && now[1].same(t.stamps[1]) && now[2].same(t.stamps[2]))) {
		return t.loaded, nil
	}
	c, leaf, err := loadTLS(t.cfg)
	if err != nil {
		if t.loaded != nil {
			// Mid-rotation: the next connection tries again.
			t.log.Warn("kafka TLS files changed but do not load; new connections keep the previous ones", "err", err)
			return t.loaded, nil
		}
		return nil, err
	}
	if t.loaded != nil {
		attrs := []any{"ca_file", t.cfg.CAFile}
		if leaf != nil {
			attrs = append(attrs, "cert_file", t.cfg.CertFile, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		t.log.Info("kafka TLS files changed; new connections use them", attrs...)
	}
	t.loaded, t.leaf, t.stamps = c, leaf, now
	return c, nil
}

// clientLeaf returns the client certificate in use, or nil.
func (t *tlsFiles) clientLeaf() *x509.Certificate {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leaf
}

// loadTLS reads cfg's files.
func loadTLS(cfg config.TLS) (*tls.Config, *x509.Certificate, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // the user's choice, warned about
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("kafka.tls.ca_file: %s holds no PEM certificate", cfg.CAFile)
		}
		c.RootCAs = pool
	}
	var leaf *x509.Certificate
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka.tls.cert_file %s and kafka.tls.key_file %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		leaf = pair.Leaf
		if leaf == nil && len(pair.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(pair.Certificate[0])
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, leaf, nil
}

// dial is the Dialer of every client: TCP, then a TLS handshake with the
// current files, its failure classified.
func (t *tlsFiles) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	base, err := t.config()
	if err != nil {
		return nil, &Error{Kind: KindTLS, Broker: addr, Problem: err.Error(), Err: err}
	}
	c := base.Clone()
	c.ServerName = t.cfg.ServerName
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		c.ServerName = host
	}
	// The dial and the handshake within kgo's default dial timeout: a
	// listener that does not speak TLS may wait for more bytes forever.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 30 * time.Second}, Config: c}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		if e := classifyTLS(addr, err, t); e != nil {
			return nil, e
		}
		return nil, err
	}
	return conn, nil
}

// classifyTLS returns the permanent failure a TLS error is, in words, or
// nil. files, when not nil, adds what the client presented.
func classifyTLS(addr string, err error, files *tlsFiles) *Error {
	if contextDone(err) {
		return nil
	}
	e := &Error{Kind: KindTLS, Broker: addr, Err: err}
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var oe *net.OpError
	switch {
	case errors.As(err, &cve):
		e.Problem = verifyProblem(cve)
	case errors.As(err, &rhe):
		e.Kind = KindProtocol
		e.Problem = "it does not answer in TLS: is this port its TLS listener? (kafka.brokers, kafka.tls.enabled)"
	case errors.As(err, &oe) && oe.Op == "remote error":
		e.Problem = "the broker refused the handshake (" + oe.Err.Error() + ")" + clientCertHint(files)
	default:
		var ae tls.AlertError
		if !errors.As(err, &ae) {
			return nil
		}
		e.Problem = "the handshake failed (" + ae.Error() + ")" + clientCertHint(files)
	}
	return e
}

// clientCertHint says what the client presented to a broker that refused
// the handshake.
func clientCertHint(files *tlsFiles) string {
	leaf := files.clientLeaf()
	if leaf == nil {
		if files != nil && files.cfg.CertFile == "" {
			return ": a listener with mutual TLS needs a client certificate: set kafka.tls.cert_file and kafka.tls.key_file"
		}
		return ""
	}
	now := time.Now()
	what := fmt.Sprintf("the client certificate %s (subject %q, issuer %q", files.cfg.CertFile, leaf.Subject.String(), leaf.Issuer.String())
	switch {
	case now.After(leaf.NotAfter):
		return ": " + what + ") expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(leaf.NotBefore):
		return ": " + what + ") is not valid before " + leaf.NotBefore.UTC().Format(time.RFC3339)
	}
	return ": the broker does not accept " + what + "): is it signed by a CA the broker trusts?"
}

// verifyProblem says why the broker's certificate was not accepted.
func verifyProblem(cve *tls.CertificateVerificationError) string {
	subject := ""
	if len(cve.UnverifiedCertificates) > 0 {
		c := cve.UnverifiedCertificates[0]
		subject = fmt.Sprintf(" (subject %q, issuer %q)", c.Subject.String(), c.Issuer.String())
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(cve.Err, &ua):
		return "the broker's certificate" + subject + " is signed by an authority this client does not trust: set kafka.tls.ca_file to the CA that signed it"
	case errors.As(cve.Err, &he):
		var names []string
		if he.Certificate != nil {
			names = append(names, he.Certificate.DNSNames...)
			for _, ip := range he.Certificate.IPAddresses {
				names = append(names, ip.String())
			}
		}
		return fmt.Sprintf("the broker's certificate%s is not valid for %q: it names %s (kafka.tls.server_name, or the address in kafka.brokers)",
			subject, he.Host, orNothing(strings.Join(names, ", ")))
	case errors.As(cve.Err, &ci) && ci.Reason == x509.Expired:
		return "the broker's certificate" + subject + " has expired or is not yet valid: " + ci.Error()
	}
	return "the broker's certificate" + subject + " was not accepted: " + cve.Err.Error()
}

func orNothing(s string) string {
	if s == "" {
		return "no name"
	}
	return s
}
