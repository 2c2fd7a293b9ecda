package replica_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// handshakes records the client certificate of each TLS handshake a
// broker completes, and the connections it accepted, to drop them.
type handshakes struct {
	mu    sync.Mutex
	names []string
	conns []net.Conn
}

func (h *handshakes) since(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.names[n:]...)
}

func (h *handshakes) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.names)
}

// dropAll closes every connection the broker accepted so far: the clients
// must connect again.
func (h *handshakes) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}

type trackedListener struct {
	net.Listener
	h *handshakes
}

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.h.mu.Lock()
		l.h.conns = append(l.h.conns, c)
		l.h.mu.Unlock()
	}
	return c, err
}

// TestClientCertificateRotation runs the count job over mutual TLS and
// SCRAM-SHA-512 on a kfake broker that only has that listener, so that
// every client of the replica must use the job's TLS and SASL settings.
// Halfway, the client certificate files are replaced in place (as
// cert-manager renews a Secret) and every connection is dropped: the
// replica's new connections present the new certificate, the job keeps
// committing, and the counts are exactly once.
func TestClientCertificateRotation(t *testing.T) {
	const (
		partitions = 4
		keys       = 50
		records    = 3000
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srvTLS, ca := kafkatest.KfakeTLS(t, true)
	h := &handshakes{}
	srvTLS = srvTLS.Clone()
	srvTLS.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) > 0 {
			h.mu.Lock()
			h.names = append(h.names, cs.PeerCertificates[0].Subject.CommonName)
			h.mu.Unlock()
		}
		return nil
	}
	const user, password = "weir", "rotation-scram-pw"
	c := kafkatest.NewKfake(t, kfake.TLS(srvTLS), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, password),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			return trackedListener{ln, h}, err
		}))
	// The test's own clients: TLS with a certificate of their own, SCRAM.
	testCert, testKey := ca.MintCert(t, kafkatest.CertOptions{CommonName: "test-harness"})
	pair, err := tls.LoadX509KeyPair(testCert, testKey)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: kafkatest.CAPool(t, ca.CAFile), MinVersion: tls.VersionTLS12}
	c.Opts = []kgo.Opt{kgo.DialTLSConfig(clientTLS), kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism())}

	job := kafkatest.Name(t, "rot")
	in, out := job+"-in", job+"-out"
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(cert, key string) { kafkatest.SwapIn(t, map[string]string{cert: certFile, key: keyFile}) }
	oldCert, oldKey := ca.MintCert(t, kafkatest.CertOptions{CommonName: "weir-old"})
	newCert, newKey := ca.MintCert(t, kafkatest.CertOptions{CommonName: "weir-new"})
	install(oldCert, oldKey)
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	yaml := fmt.Sprintf(`
job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka:
  brokers: [%s]
  session_timeout: 6s
  tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}
  sasl: {mechanism: SCRAM-SHA-512, username: %s, password_file: %s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "file://%s/checkpoints"}
state: {dir: "%s/state-a"}
http: {address: ""}
process: {replica_id: a, grace_period: 20s}
`, job, in, out, c.Brokers[0], ca.CAFile, certFile, keyFile, user, pwFile, dir, dir)

	produceInput(ctx, t, c, in, keys, 0, records/2)
	a := startReplica(ctx, t, "a", yaml)
	waitReady(t, a.Replica)
	waitCommitted(ctx, t, c, out, records/4)
	for _, n := range h.since(0) {
		if n != "weir-old" && n != "test-harness" {
			t.Fatalf("a handshake presented %q before the rotation", n)
		}
	}

	install(newCert, newKey)
	mark := h.count()
	h.dropAll()
	t.Logf("certificate files replaced and %d handshakes so far dropped", mark)
	produceInput(ctx, t, c, in, keys, records/2, records)
	verifyCounts(ctx, t, c, out, keys, records)

	var fromJob int
	for _, n := range h.since(mark) {
		switch n {
		case "weir-new":
			fromJob++
		case "test-harness":
		default:
			t.Errorf("a connection after the rotation presented %q", n)
		}
	}
	if fromJob == 0 {
		t.Fatal("no connection of the job presented the new certificate after the rotation")
	}
	t.Logf("%d handshakes of the job with the new certificate after the rotation", fromJob)
	if err := a.Replica.Failure(); err != nil {
		t.Fatalf("job failed: %v", err)
	}
}
