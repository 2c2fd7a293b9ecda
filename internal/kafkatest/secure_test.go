package kafkatest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// tlsConfig trusts caFile and, if certFile is set, presents that client
// certificate.
func tlsConfig(t *testing.T, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s: no certificate", caFile)
	}
	cfg := &tls.Config{RootCAs: pool}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// metadata asks brokers for metadata with a client of its own and returns
// the brokers it lists, or the error.
func metadata(t *testing.T, brokers []string, opts ...kgo.Opt) (kadm.BrokerDetails, error) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	return md.Brokers, err
}

// wantAdvertised fails the test unless every listed broker is at one of the
// addresses it was asked on.
func wantAdvertised(t *testing.T, got kadm.BrokerDetails, asked []string) {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("metadata lists no broker")
	}
	for _, b := range got {
		if addr := fmt.Sprintf("%s:%d", b.Host, b.Port); !strings.Contains(strings.Join(asked, ","), addr) {
			t.Fatalf("metadata advertises %s, want one of %v (the listener asked)", addr, asked)
		}
	}
}

// isTLSAlert reports whether err is a TLS alert from the server (crypto/tls
// keeps the type unexported: "remote error: tls: bad certificate").
func isTLSAlert(err error) bool {
	return err != nil && strings.Contains(err.Error(), "remote error: tls: ")
}

func TestSecureSASLSSLMechanisms(t *testing.T) {
	s := kafkatest.NewSecure(t)
	tlsCfg := tlsConfig(t, s.CAFile, "", "")
	for _, tc := range []struct {
		name string
		mech sasl.Mechanism
	}{
		{"SCRAM-SHA-256", scram.Auth{User: kafkatest.User, Pass: kafkatest.SCRAMPassword}.AsSha256Mechanism()},
		{"SCRAM-SHA-512", scram.Auth{User: kafkatest.User, Pass: kafkatest.SCRAMPassword}.AsSha512Mechanism()},
		{"SCRAM-SHA-512 verifier", scram.Auth{User: kafkatest.VerifierUser, Pass: kafkatest.VerifierSCRAMPassword}.AsSha512Mechanism()},
		{"SCRAM-SHA-256 verifier", scram.Auth{User: kafkatest.VerifierUser, Pass: kafkatest.VerifierSCRAMPassword}.AsSha256Mechanism()},
		{"PLAIN", plain.Auth{User: kafkatest.User, Pass: kafkatest.PlainPassword}.AsMechanism()},
		{"PLAIN verifier", plain.Auth{User: kafkatest.VerifierUser, Pass: kafkatest.VerifierPlainPassword}.AsMechanism()},
		{"OAUTHBEARER", oauth.Auth{Token: kafkatest.UnsecuredJWT(kafkatest.User, time.Now().Add(time.Hour))}.AsMechanism()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metadata(t, s.SASLSSL, kgo.DialTLSConfig(tlsCfg), kgo.SASL(tc.mech))
			if err != nil {
				t.Fatalf("metadata over SASL_SSL with %s: %v", tc.mech.Name(), err)
			}
			wantAdvertised(t, got, s.SASLSSL)
		})
	}
}

func TestSecureSASLSSLRejects(t *testing.T) {
	s := kafkatest.NewSecure(t)
	tlsCfg := tlsConfig(t, s.CAFile, "", "")
	for _, tc := range []struct {
		name string
		mech sasl.Mechanism
	}{
		{"SCRAM-SHA-512 wrong password", scram.Auth{User: kafkatest.User, Pass: "wrong"}.AsSha512Mechanism()},
		{"SCRAM-SHA-256 PLAIN's password", scram.Auth{User: kafkatest.User, Pass: kafkatest.PlainPassword}.AsSha256Mechanism()},
		{"PLAIN wrong password", plain.Auth{User: kafkatest.User, Pass: kafkatest.SCRAMPassword}.AsMechanism()},
		{"OAUTHBEARER expired token", oauth.Auth{Token: kafkatest.UnsecuredJWT(kafkatest.User, time.Now().Add(-time.Hour))}.AsMechanism()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := metadata(t, s.SASLSSL, kgo.DialTLSConfig(tlsCfg), kgo.SASL(tc.mech))
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Fatalf("got %v, want %v", err, kerr.SaslAuthenticationFailed)
			}
		})
	}
}

func TestSecureSASLSSLUntrustedCA(t *testing.T) {
	s := kafkatest.NewSecure(t)
	mech := scram.Auth{User: kafkatest.User, Pass: kafkatest.SCRAMPassword}.AsSha512Mechanism()
	_, err := metadata(t, s.SASLSSL, kgo.DialTLSConfig(tlsConfig(t, kafkatest.MintCA(t), "", "")), kgo.SASL(mech))
	if !errors.As(err, new(x509.UnknownAuthorityError)) {
		t.Fatalf("got %v, want an unknown-authority error", err)
	}
}

func TestSecureMTLS(t *testing.T) {
	s := kafkatest.NewSecure(t)
	minted, mintedKey := s.MintCert(t, kafkatest.CertOptions{CommonName: "weir-minted"})
	expired, expiredKey := s.MintCert(t, kafkatest.CertOptions{
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	selfSigned, selfSignedKey := s.MintCert(t, kafkatest.CertOptions{SelfSigned: true})
	for _, tc := range []struct {
		name, cert, key string
		ok              bool
	}{
		{"the client certificate", s.ClientCertFile, s.ClientKeyFile, true},
		{"a minted certificate", minted, mintedKey, true},
		{"no certificate", "", "", false},
		{"an expired certificate", expired, expiredKey, false},
		{"a certificate of an untrusted CA", selfSigned, selfSignedKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := metadata(t, s.MTLS, kgo.DialTLSConfig(tlsConfig(t, s.CAFile, tc.cert, tc.key)))
			if !tc.ok {
				if !isTLSAlert(err) {
					t.Fatalf("got %v, want the broker's TLS alert", err)
				}
				t.Logf("refused, as it must be: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("metadata over mTLS: %v", err)
			}
			wantAdvertised(t, got, s.MTLS)
		})
	}
}

func TestKfakeTLS(t *testing.T) {
	t.Run("server only", func(t *testing.T) {
		cfg, ca := kafkatest.KfakeTLS(t, false)
		c := kafkatest.NewKfake(t, kfake.TLS(cfg))
		if _, err := metadata(t, c.Brokers, kgo.DialTLSConfig(tlsConfig(t, ca.CAFile, "", ""))); err != nil {
			t.Fatalf("a client trusting the CA: %v", err)
		}
		_, err := metadata(t, c.Brokers, kgo.DialTLSConfig(tlsConfig(t, kafkatest.MintCA(t), "", "")))
		if !errors.As(err, new(x509.UnknownAuthorityError)) {
			t.Fatalf("a client trusting another CA: got %v, want an unknown-authority error", err)
		}
	})
	t.Run("client certificates required", func(t *testing.T) {
		cfg, ca := kafkatest.KfakeTLS(t, true)
		c := kafkatest.NewKfake(t, kfake.TLS(cfg))
		minted, mintedKey := ca.MintCert(t, kafkatest.CertOptions{CommonName: "other"})
		for _, tc := range []struct {
			name, cert, key string
			ok              bool
		}{
			{"the returned client certificate", ca.ClientCertFile, ca.ClientKeyFile, true},
			{"a minted certificate", minted, mintedKey, true},
			{"no certificate", "", "", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := metadata(t, c.Brokers, kgo.DialTLSConfig(tlsConfig(t, ca.CAFile, tc.cert, tc.key)))
				if tc.ok && err != nil {
					t.Fatalf("metadata: %v", err)
				}
				if !tc.ok && !isTLSAlert(err) {
					t.Fatalf("got %v, want kfake's TLS alert", err)
				}
			})
		}
	})
}

// TestSecureRequiredFailsNotSkips runs NewSecure in a child without the
// secured listeners configured, and with them configured at an address
// where nothing listens: under WEIR_REQUIRE_REAL_KAFKA=1 it must fail,
// without it skip.
func TestSecureRequiredFailsNotSkips(t *testing.T) {
	if os.Getenv("KAFKATEST_CHILD") == "1" {
		kafkatest.NewSecure(t)
		return
	}
	for _, tc := range []struct {
		name     string
		env      []string
		require  string
		wantFail bool
		wantText string
	}{
		{"unset, required", nil, "1", true, "unset"},
		{"unset", nil, "", false, "--- SKIP"},
		{"unreachable, required", []string{kafkatest.EnvSASLSSL + "=127.0.0.1:1", kafkatest.EnvMTLS + "=127.0.0.1:1", kafkatest.EnvTLSDir + "=" + t.TempDir()}, "1", true, "unusable"},
		{"unreachable", []string{kafkatest.EnvSASLSSL + "=127.0.0.1:1", kafkatest.EnvMTLS + "=127.0.0.1:1", kafkatest.EnvTLSDir + "=" + t.TempDir()}, "", false, "--- SKIP"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSecureRequiredFailsNotSkips$", "-test.v")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "WEIR_TEST_KAFKA_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(append(env, "KAFKATEST_CHILD=1", kafkatest.EnvRequireReal+"="+tc.require), tc.env...)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail {
			t.Fatalf("%s: child failed=%v, want %v; output:\n%s", tc.name, failed, tc.wantFail, out)
		}
		if !strings.Contains(string(out), tc.wantText) {
			t.Fatalf("%s: child output lacks %q:\n%s", tc.name, tc.wantText, out)
		}
	}
}
