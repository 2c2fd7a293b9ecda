package kafkatest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Environment variables that scripts/kafka.sh exports for the real broker's
// secured listeners. (Not WEIR_KAFKA_SASL_* or WEIR_KAFKA_TLS_*: the product
// reads WEIR_<KEY> variables as its configuration.)
const (
	EnvSASLSSL = "WEIR_TEST_KAFKA_SASL_SSL"
	EnvMTLS    = "WEIR_TEST_KAFKA_MTLS"
	EnvTLSDir  = "WEIR_TEST_KAFKA_TLS_DIR"
)

// Secure is the real broker's secured listeners (scripts/kafka.sh).
type Secure struct {
	SASLSSL []string // SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (unsecured JWT)
	MTLS    []string // SSL with ssl.client.auth=required
	Dir     string   // WEIR_TEST_KAFKA_TLS_DIR
	// In Dir: the CA that signed the broker's certificate (PEM; its key
	// PKCS#8), and a client certificate with CN=weir signed by it.
	CAFile, CAKeyFile, ClientCertFile, ClientKeyFile string
}

// Users of the secured listeners. Both have SCRAM-SHA-256 and SCRAM-SHA-512
// credentials (added when the log directory is formatted) and a PLAIN
// password (in the listener's JAAS configuration). OAUTHBEARER takes any
// unsecured JWT (UnsecuredJWT); there is no authorizer.
const (
	User                  = "weir"
	SCRAMPassword         = "weir-scram-7f3a9c"
	PlainPassword         = "weir-plain-4c81e0"
	VerifierUser          = "verifier"
	VerifierSCRAMPassword = "verifier-scram-52be1d"
	VerifierPlainPassword = "verifier-plain-9d27aa"
)

// NewSecure returns the secured listeners of the real broker. Like NewReal,
// it skips the test when they are not configured (EnvSASLSSL, EnvMTLS,
// EnvTLSDir unset) or do not answer, and fails it instead under
// WEIR_REQUIRE_REAL_KAFKA=1.
func NewSecure(t testing.TB) *Secure {
	t.Helper()
	fail := t.Skipf
	if RealRequired() {
		fail = t.Fatalf
	}
	sasl, mtls, dir := os.Getenv(EnvSASLSSL), os.Getenv(EnvMTLS), os.Getenv(EnvTLSDir)
	if sasl == "" || mtls == "" || dir == "" {
		fail("kafkatest: no secured real broker (%s, %s or %s unset); `make test` starts one (scripts/kafka.sh)", EnvSASLSSL, EnvMTLS, EnvTLSDir)
	}
	s := SecureAt(strings.Split(sasl, ","), strings.Split(mtls, ","), dir)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	guess, err := s.ping(ctx)
	if err != nil {
		fail("kafkatest: secured real broker unusable: %v", err)
	}
	// One " at ": the test report takes what precedes it for the broker's name.
	t.Logf("%s %s at %s (SASL_SSL), %s (mTLS)", RealMarker, realName(guess), sasl, mtls)
	return s
}

// PingSecure checks the secured listeners of a broker whose TLS directory
// (WriteBrokerTLS) is dir: SASL_SSL with SCRAM-SHA-512 as User, and mutual
// TLS with the client certificate; each must answer metadata that
// advertises the listener it was asked on. cmd/kafkawait runs it.
func PingSecure(ctx context.Context, saslSSL, mtls []string, dir string) error {
	_, err := SecureAt(saslSSL, mtls, dir).ping(ctx)
	return err
}

// SecureAt is the secured listeners at these addresses of a broker whose TLS
// directory (WriteBrokerTLS) is dir, for programs that are not tests (the
// benchmarks); it neither checks nor pings them.
func SecureAt(saslSSL, mtls []string, dir string) *Secure {
	return &Secure{
		SASLSSL: saslSSL, MTLS: mtls, Dir: dir,
		CAFile: filepath.Join(dir, caCertName), CAKeyFile: filepath.Join(dir, caKeyName),
		ClientCertFile: filepath.Join(dir, clientCertName), ClientKeyFile: filepath.Join(dir, clientKeyName),
	}
}

// ping pings both listeners and returns the protocol version guess of the
// SASL_SSL one.
func (s *Secure) ping(ctx context.Context) (string, error) {
	pool, err := s.caPool()
	if err != nil {
		return "", err
	}
	pair, err := tls.LoadX509KeyPair(s.ClientCertFile, s.ClientKeyFile)
	if err != nil {
		return "", fmt.Errorf("client certificate: %w", err)
	}
	scramOpts, err := s.SCRAMOpts()
	if err != nil {
		return "", err
	}
	guess, err1 := pingAdvertised(ctx, "SASL_SSL (SCRAM-SHA-512)", s.SASLSSL, scramOpts...)
	_, err2 := pingAdvertised(ctx, "mTLS", s.MTLS,
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}))
	return guess, errors.Join(err1, err2)
}

// pingAdvertised pings the listener and checks that the metadata it answers
// names the brokers at the addresses it was asked on.
func pingAdvertised(ctx context.Context, what string, brokers []string, opts ...kgo.Opt) (string, error) {
	guess, mdBrokers, err := ping(ctx, brokers, opts...)
	if err != nil {
		return "", fmt.Errorf("%s at %s: %w", what, strings.Join(brokers, ","), err)
	}
	for _, b := range mdBrokers {
		if addr := fmt.Sprintf("%s:%d", b.Host, b.Port); !slices.Contains(brokers, addr) {
			return "", fmt.Errorf("%s at %s: the broker advertises %s on this listener", what, strings.Join(brokers, ","), addr)
		}
	}
	return guess, nil
}

// SCRAMOpts returns the options of a plain franz-go client of the SASL_SSL
// listener (without the seed brokers): TLS that trusts CAFile, and
// SCRAM-SHA-512 as User.
func (s *Secure) SCRAMOpts() ([]kgo.Opt, error) {
	pool, err := s.caPool()
	if err != nil {
		return nil, err
	}
	return []kgo.Opt{
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(scram.Auth{User: User, Pass: SCRAMPassword}.AsSha512Mechanism()),
	}, nil
}

func (s *Secure) caPool() (*x509.CertPool, error) {
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", s.CAFile)
	}
	return pool, nil
}

// MintCert writes a certificate and key (PEM) signed by the test CA
// (CAFile/CAKeyFile), or with o.SelfSigned by a fresh CA no one trusts,
// into t.TempDir(), and returns their paths.
func (s *Secure) MintCert(t testing.TB, o CertOptions) (certFile, keyFile string) {
	t.Helper()
	ca, err := loadCA(s.CAFile, s.CAKeyFile)
	if err != nil {
		t.Fatalf("kafkatest: test CA: %v", err)
	}
	return ca.MintCert(t, o)
}

// UnsecuredJWT returns a token the broker's unsecured-JWT validator
// (OAuthBearerUnsecuredValidatorCallbackHandler) accepts for OAUTHBEARER:
// header {"alg":"none"}, claims sub, iat (now) and exp, no signature.
func UnsecuredJWT(sub string, exp time.Time) string {
	enc := base64.RawURLEncoding
	claims, err := json.Marshal(map[string]any{"sub": sub, "iat": time.Now().Unix(), "exp": exp.Unix()})
	if err != nil {
		panic(err) // a map of a string and two ints always marshals
	}
	return enc.EncodeToString([]byte(`{"alg":"none"}`)) + "." + enc.EncodeToString(claims) + "."
}
