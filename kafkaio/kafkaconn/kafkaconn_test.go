package kafkaconn_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/kafkaconn"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// reach asks the brokers for metadata through a client built from c.
func reach(t *testing.T, c *kafkaconn.Conn) error {
	t.Helper()
	cl, err := kgo.NewClient(c.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).BrokerMetadata(ctx)
	return err
}

func newConn(t *testing.T, k config.Kafka) *kafkaconn.Conn {
	t.Helper()
	c, err := kafkaconn.New(k, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantFailure checks that clients of c meet a permanent failure: at once
// for a refused certificate or credential, or, for a listener that hangs
// up on every connection, after the first of them that the replica's retry
// loop would make over kafkaconn's window (a client every 500ms here).
// Failed closes, a client's error explains to it, and its message has
// every part of want and never secret.
func wantFailure(t *testing.T, c *kafkaconn.Conn, kind kafkaconn.Kind, secret string, want ...string) {
	t.Helper()
	start := time.Now()
	var err error
	for failed := false; !failed; {
		err = reach(t, c)
		select {
		case <-c.Failed():
			failed = true
		case <-time.After(500 * time.Millisecond):
			if time.Since(start) > 30*time.Second {
				t.Fatalf("no permanent failure after 30s; the request said: %v", err)
			}
		}
	}
	took := time.Since(start)
	ferr := c.Err()
	var ke *kafkaconn.Error
	if !errors.As(ferr, &ke) {
		t.Fatalf("Err() = %v, want a *kafkaconn.Error", ferr)
	}
	if ke.Kind != kind {
		t.Errorf("kind %s, want %s: %v", ke.Kind, kind, ferr)
	}
	if got := c.Explain(errors.New("request failed")); got != ferr {
		t.Errorf("Explain = %v, want the failure", got)
	}
	msg := ferr.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("failure %q lacks %q", msg, w)
		}
	}
	if secret != "" && strings.Contains(msg, secret) {
		t.Errorf("failure repeats the secret: %q", msg)
	}
	t.Logf("after %v: %s", took.Round(time.Millisecond), msg)
}

// tokenServer is an OIDC token endpoint for the client-credentials grant
// that issues unsecured JWTs to client weir with secret want.
func tokenServer(t *testing.T, want string) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.Form.Get("client_id"), r.Form.Get("client_secret")
		}
		w.Header().Set("Content-Type", "application/json")
		if id != "weir" || secret != want {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client","error_description":"client authentication failed"}`)
			return
		}
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, kafkatest.UnsecuredJWT("weir", time.Now().Add(time.Hour)))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// TestSecuredKfake: every mechanism kfake has (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512) over mutual TLS, and each permanent failure said at once.
func TestSecuredKfake(t *testing.T) {
	srvTLS, ca := kafkatest.KfakeTLS(t, true)
	cert, key := ca.MintCert(t, kafkatest.CertOptions{})
	c := kafkatest.NewKfake(t, kfake.TLS(srvTLS), kfake.EnableSASL(),
		kfake.Superuser(config.SASLPlain, "weir", "plain-pw"),
		kfake.Superuser(config.SASLScram256, "weir", "scram256-pw"),
		kfake.Superuser(config.SASLScram512, "weir", "scram512-pw"))
	tlsOK := config.TLS{Enabled: true, CAFile: ca.CAFile, CertFile: cert, KeyFile: key}
	for mech, pw := range map[string]string{config.SASLPlain: "plain-pw", config.SASLScram256: "scram256-pw", config.SASLScram512: "scram512-pw"} {
		t.Run(mech, func(t *testing.T) {
			conn := newConn(t, config.Kafka{Brokers: c.Brokers, TLS: tlsOK,
				SASL: config.SASL{Mechanism: mech, Username: "weir", PasswordFile: writeFile(t, "pw", pw+"\n")}})
			if err := reach(t, conn); err != nil {
				t.Fatalf("%s over mutual TLS: %v", mech, err)
			}
			if conn.Err() != nil {
				t.Fatalf("a failure after a success: %v", conn.Err())
			}
			bad := newConn(t, config.Kafka{Brokers: c.Brokers, TLS: tlsOK,
				SASL: config.SASL{Mechanism: mech, Username: "weir", Password: "wrong-" + pw}})
			// kfake hangs up on a refused credential instead of
			// answering it, as some brokers do.
			wantFailure(t, bad, kafkaconn.KindProtocol, "wrong-"+pw, "broker "+c.Brokers[0], "mechanism "+mech, `user "weir"`, "is the password or token right")
		})
	}
	scram := config.SASL{Mechanism: config.SASLScram512, Username: "weir", Password: "scram512-pw"}
	t.Run("no client certificate", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: c.Brokers, TLS: config.TLS{Enabled: true, CAFile: ca.CAFile}, SASL: scram})
		wantFailure(t, conn, kafkaconn.KindTLS, "", "TLS handshake with broker "+c.Brokers[0], "set kafka.tls.cert_file and kafka.tls.key_file")
	})
	t.Run("untrusted CA", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: c.Brokers, TLS: config.TLS{Enabled: true, CAFile: kafkatest.MintCA(t), CertFile: cert, KeyFile: key}, SASL: scram})
		wantFailure(t, conn, kafkaconn.KindTLS, "", "signed by an authority this client does not trust", "kafka.tls.ca_file")
	})
	t.Run("wrong server name", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: c.Brokers, TLS: config.TLS{Enabled: true, CAFile: ca.CAFile, CertFile: cert, KeyFile: key, ServerName: "wrong.example"}, SASL: scram})
		wantFailure(t, conn, kafkaconn.KindTLS, "", `is not valid for "wrong.example"`, "kafka.tls.server_name")
	})
	t.Run("expired broker certificate", func(t *testing.T) {
		certFile, keyFile := ca.MintCert(t, kafkatest.CertOptions{CommonName: "kfake-expired",
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
			DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		expired := kafkatest.NewKfake(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
		conn := newConn(t, config.Kafka{Brokers: expired.Brokers, TLS: config.TLS{Enabled: true, CAFile: ca.CAFile}})
		wantFailure(t, conn, kafkaconn.KindTLS, "", "TLS handshake with broker "+expired.Brokers[0], `subject "CN=kfake-expired"`, "has expired or is not yet valid")
	})
	t.Run("plaintext client", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: c.Brokers, SASL: scram})
		wantFailure(t, conn, kafkaconn.KindProtocol, "", "connections in a row", "kafka.tls.enabled")
	})
}

// TestSecuredRealBroker: the real broker's SASL_SSL listener with PLAIN,
// both SCRAMs, OAUTHBEARER from a token file and through the OIDC
// client-credentials flow, its mutual-TLS listener, and every permanent
// failure: wrong password, untrusted CA, wrong SNI, expired or missing
// client certificate, TLS to a plaintext listener.
func TestSecuredRealBroker(t *testing.T) {
	s := kafkatest.NewSecure(t)
	plain := kafkatest.NewReal(t)
	tlsCA := config.TLS{Enabled: true, CAFile: s.CAFile}
	ok := []struct {
		name string
		sasl config.SASL
	}{
		{"PLAIN", config.SASL{Mechanism: config.SASLPlain, Username: kafkatest.User, PasswordFile: writeFile(t, "pw", kafkatest.PlainPassword)}},
		{"SCRAM-SHA-256", config.SASL{Mechanism: config.SASLScram256, Username: kafkatest.User, Password: kafkatest.SCRAMPassword}},
		{"SCRAM-SHA-512", config.SASL{Mechanism: config.SASLScram512, Username: kafkatest.User, PasswordFile: writeFile(t, "pw", kafkatest.SCRAMPassword+"\n")}},
		{"OAUTHBEARER token file", config.SASL{Mechanism: config.SASLOAuthBearer, TokenFile: writeFile(t, "token", kafkatest.UnsecuredJWT("weir", time.Now().Add(time.Hour)))}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			conn := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: tlsCA, SASL: tc.sasl})
			if err := reach(t, conn); err != nil {
				t.Fatalf("%s over SASL_SSL: %v", tc.name, err)
			}
		})
	}
	t.Run("OAUTHBEARER client credentials", func(t *testing.T) {
		srv, calls := tokenServer(t, "client-secret-1")
		oauth := config.OAuth{TokenURL: srv.URL + "/token", ClientID: "weir", ClientSecretFile: writeFile(t, "cs", "client-secret-1"), Scopes: []string{"kafka"}}
		conn := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: tlsCA, SASL: config.SASL{Mechanism: config.SASLOAuthBearer, OAuth: oauth}})
		if err := reach(t, conn); err != nil {
			t.Fatalf("OAUTHBEARER with a token from the endpoint: %v", err)
		}
		if err := reach(t, conn); err != nil {
			t.Fatal(err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("the token endpoint was asked %d times for two clients; a token is kept until shortly before it expires", n)
		}
		oauth.ClientSecretFile = writeFile(t, "cs", "wrong-client-secret")
		bad := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: tlsCA, SASL: config.SASL{Mechanism: config.SASLOAuthBearer, OAuth: oauth}})
		wantFailure(t, bad, kafkaconn.KindSASL, "wrong-client-secret", "refused the client credentials", "HTTP 401", "invalid_client", `user "weir"`)
	})
	t.Run("mutual TLS", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: s.MTLS, TLS: config.TLS{Enabled: true, CAFile: s.CAFile, CertFile: s.ClientCertFile, KeyFile: s.ClientKeyFile}})
		if err := reach(t, conn); err != nil {
			t.Fatalf("mutual TLS: %v", err)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: tlsCA,
			SASL: config.SASL{Mechanism: config.SASLScram512, Username: kafkatest.User, PasswordFile: writeFile(t, "pw", "not-the-password-9f8e")}})
		wantFailure(t, conn, kafkaconn.KindSASL, "not-the-password-9f8e", "authentication with broker "+s.SASLSSL[0], "mechanism SCRAM-SHA-512", `user "weir"`)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: config.TLS{Enabled: true, CAFile: kafkatest.MintCA(t)},
			SASL: config.SASL{Mechanism: config.SASLScram512, Username: kafkatest.User, Password: kafkatest.SCRAMPassword}})
		wantFailure(t, conn, kafkaconn.KindTLS, kafkatest.SCRAMPassword, "TLS handshake with broker "+s.SASLSSL[0], "signed by an authority this client does not trust")
	})
	t.Run("system pool", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: config.TLS{Enabled: true},
			SASL: config.SASL{Mechanism: config.SASLScram512, Username: kafkatest.User, Password: kafkatest.SCRAMPassword}})
		wantFailure(t, conn, kafkaconn.KindTLS, "", "signed by an authority this client does not trust")
	})
	t.Run("wrong server name", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: s.SASLSSL, TLS: config.TLS{Enabled: true, CAFile: s.CAFile, ServerName: "kafka.wrong.example"},
			SASL: config.SASL{Mechanism: config.SASLScram512, Username: kafkatest.User, Password: kafkatest.SCRAMPassword}})
		wantFailure(t, conn, kafkaconn.KindTLS, "", `is not valid for "kafka.wrong.example"`, "kafka.tls.server_name")
	})
	t.Run("expired client certificate", func(t *testing.T) {
		cert, key := s.MintCert(t, kafkatest.CertOptions{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
		conn := newConn(t, config.Kafka{Brokers: s.MTLS, TLS: config.TLS{Enabled: true, CAFile: s.CAFile, CertFile: cert, KeyFile: key}})
		wantFailure(t, conn, kafkaconn.KindTLS, "", "TLS handshake with broker "+s.MTLS[0], "refused", "expired at")
	})
	t.Run("no client certificate", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: s.MTLS, TLS: tlsCA})
		wantFailure(t, conn, kafkaconn.KindTLS, "", "TLS handshake with broker "+s.MTLS[0], "set kafka.tls.cert_file and kafka.tls.key_file")
	})
	t.Run("TLS to the plaintext listener", func(t *testing.T) {
		conn := newConn(t, config.Kafka{Brokers: plain.Brokers, TLS: tlsCA})
		wantFailure(t, conn, kafkaconn.KindProtocol, "", "connections in a row", "not a TLS listener")
	})
}

// TestCertificateFilesReadAgain: on the real mutual-TLS listener, each
// new connection reads the certificate files again when they changed. A
// valid certificate connects; replaced in place by an expired one, the
// next connection presents that one (the broker refuses it, and the
// failure names its expiry); replaced by a valid one again, the next
// connection succeeds, without a new Conn.
func TestCertificateFilesReadAgain(t *testing.T) {
	s := kafkatest.NewSecure(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	// As cert-manager's renewal reaches a pod: new files swapped in.
	install := func(cert, key string) { kafkatest.SwapIn(t, map[string]string{cert: certFile, key: keyFile}) }
	install(s.ClientCertFile, s.ClientKeyFile)
	conn := newConn(t, config.Kafka{Brokers: s.MTLS, TLS: config.TLS{Enabled: true, CAFile: s.CAFile, CertFile: certFile, KeyFile: keyFile}})
	if err := reach(t, conn); err != nil {
		t.Fatalf("first certificate: %v", err)
	}
	expiredCert, expiredKey := s.MintCert(t, kafkatest.CertOptions{CommonName: "weir-expired", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	install(expiredCert, expiredKey)
	if err := reach(t, conn); err == nil {
		t.Fatal("a new connection after the files changed to an expired certificate succeeded: the files were not read again")
	}
	if err := conn.Err(); err == nil || !strings.Contains(err.Error(), "weir-expired") {
		t.Fatalf("failure %v does not name the new certificate", err)
	}
	renewedCert, renewedKey := s.MintCert(t, kafkatest.CertOptions{CommonName: "weir-renewed"})
	install(renewedCert, renewedKey)
	if err := reach(t, conn); err != nil {
		t.Fatalf("a new connection after renewal: %v", err)
	}
}
