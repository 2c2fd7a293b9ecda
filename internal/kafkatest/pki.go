package kafkatest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The one place that makes test certificates: the broker's (through
// WriteBrokerTLS, which scripts/kafka.sh runs at `up`), the ones tests mint,
// and kfake's. Keys are RSA 2048, PKCS#8: what Kafka's PEM keystore
// (ssl.keystore.type=PEM) reads without a key password.

// Files of the broker's TLS directory (WEIR_TEST_KAFKA_TLS_DIR).
const (
	caCertName     = "ca.pem"
	caKeyName      = "ca.key"
	brokerPEMName  = "broker.pem" // key and chain: ssl.keystore.location
	clientCertName = "client.pem"
	clientKeyName  = "client.key"
)

// CertOptions say what MintCert makes.
type CertOptions struct {
	// CommonName is the subject's CN; default "weir".
	CommonName string
	// NotBefore and NotAfter bound the validity; default now-1h .. now+24h.
	// A NotAfter in the past makes an expired certificate.
	NotBefore, NotAfter time.Time
	// DNSNames and IPs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	// SelfSigned signs the certificate with a fresh CA no one trusts
	// instead of the CA MintCert is called on.
	SelfSigned bool
}

// MiniCA is a certificate authority for tests: its certificate is at CAFile,
// its key stays in memory.
type MiniCA struct {
	CAFile string
	// ClientCertFile and ClientKeyFile are a valid client certificate and
	// key signed by this CA; KfakeTLS sets them when it requires client
	// certificates, and leaves them empty otherwise.
	ClientCertFile, ClientKeyFile string

	cert *x509.Certificate
	key  crypto.Signer
}

// MintCert writes a certificate and key (PEM) signed by the CA (or, with
// o.SelfSigned, by a fresh CA no one trusts) into t.TempDir(), and returns
// their paths.
func (c *MiniCA) MintCert(t testing.TB, o CertOptions) (certFile, keyFile string) {
	t.Helper()
	signer := c
	if o.SelfSigned {
		var err error
		if signer, err = newCA("weir-test untrusted CA"); err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
	}
	certPEM, keyPEM, err := signer.issue(o)
	if err != nil {
		t.Fatalf("kafkatest: mint certificate: %v", err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := writeFiles(map[string][]byte{certFile: certPEM, keyFile: keyPEM}); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return certFile, keyFile
}

// MintCA writes a fresh CA certificate no broker trusts, for "untrusted CA"
// tests, and returns its PEM path.
func MintCA(t testing.TB) (caFile string) {
	t.Helper()
	return tempCA(t, "weir-test untrusted CA").CAFile
}

// KfakeTLS returns a server *tls.Config for kfake (kfake.TLS) with a
// certificate for 127.0.0.1 and localhost signed by a fresh CA, and that CA
// (its PEM at ca.CAFile). With requireClientCert the config requires and
// verifies client certificates signed by that CA, and ca.ClientCertFile and
// ca.ClientKeyFile are a valid client certificate. ca.MintCert mints more.
func KfakeTLS(t testing.TB, requireClientCert bool) (cfg *tls.Config, ca *MiniCA) {
	t.Helper()
	ca = tempCA(t, "weir-test kfake CA")
	certPEM, keyPEM, err := ca.issue(CertOptions{CommonName: "kfake", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}})
	if err != nil {
		t.Fatalf("kafkatest: kfake certificate: %v", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("kafkatest: kfake key pair: %v", err)
	}
	cfg = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if requireClientCert {
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		ca.ClientCertFile, ca.ClientKeyFile = ca.MintCert(t, CertOptions{})
	}
	return cfg, ca
}

// tempCA makes a fresh CA whose certificate is written into t.TempDir().
func tempCA(t testing.TB, cn string) *MiniCA {
	t.Helper()
	ca, err := newCA(cn)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	ca.CAFile = filepath.Join(t.TempDir(), caCertName)
	if err := writeFiles(map[string][]byte{ca.CAFile: pemBlock("CERTIFICATE", ca.cert.Raw)}); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return ca
}

// WriteBrokerTLS writes the real broker's TLS directory, replacing what was
// there: a CA (ca.pem, ca.key), the broker's key and chain for 127.0.0.1 and
// localhost (broker.pem, Kafka's PEM keystore), and a client certificate
// with CN=weir (client.pem, client.key). Valid for a year from now (an hour
// back, for clock skew). scripts/kafka.sh runs it through cmd/kafkacerts.
func WriteBrokerTLS(dir string) error {
	ca, err := newCA("weir-test CA")
	if err != nil {
		return err
	}
	from, to := time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0)
	brokerCert, brokerKey, err := ca.issue(CertOptions{CommonName: "localhost", NotBefore: from, NotAfter: to,
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return fmt.Errorf("broker certificate: %w", err)
	}
	clientCert, clientKey, err := ca.issue(CertOptions{CommonName: "weir", NotBefore: from, NotAfter: to})
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	caKey, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("CA key: %w", err)
	}
	caCert := pemBlock("CERTIFICATE", ca.cert.Raw)
	// Written beside dir and renamed into place: a half-written directory
	// is never taken for the real one.
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	err = writeFiles(map[string][]byte{
		filepath.Join(tmp, caCertName):     caCert,
		filepath.Join(tmp, caKeyName):      pemBlock("PRIVATE KEY", caKey),
		filepath.Join(tmp, brokerPEMName):  append(append(brokerKey, brokerCert...), caCert...),
		filepath.Join(tmp, clientCertName): clientCert,
		filepath.Join(tmp, clientKeyName):  clientKey,
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// newCA makes a self-signed CA, valid from an hour ago for ten years.
func newCA(cn string) (*MiniCA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"weir tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &MiniCA{cert: cert, key: key}, nil
}

// loadCA reads a CA certificate and its PKCS#8 key (PEM).
func loadCA(certFile, keyFile string) (*MiniCA, error) {
	certDER, err := readPEM(certFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	keyDER, err := readPEM(keyFile, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: a %T cannot sign", keyFile, key)
	}
	return &MiniCA{CAFile: certFile, cert: cert, key: signer}, nil
}

// issue makes a leaf certificate, usable by a server and a client, and its
// PKCS#8 key, both PEM.
func (c *MiniCA) issue(o CertOptions) (certPEM, keyPEM []byte, err error) {
	if o.CommonName == "" {
		o.CommonName = "weir"
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail (Go 1.24+)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// readPEM returns the DER of the first block of the given type in file.
func readPEM(file, typ string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("%s: no %s PEM block", file, typ)
		}
		if b.Type == typ {
			return b.Bytes, nil
		}
	}
}

// writeFiles writes each file (mode 0600: some hold keys).
func writeFiles(files map[string][]byte) error {
	var errs []error
	for name, data := range files {
		errs = append(errs, os.WriteFile(name, data, 0o600))
	}
	return errors.Join(errs...)
}

// SwapIn copies each source file (key) over its destination (value)
// through a rename, as a renewed Kubernetes Secret or cert-manager
// certificate reaches a pod: a reader sees the old file or the new one,
// never half of either.
func SwapIn(t testing.TB, files map[string]string) {
	t.Helper()
	for src, dst := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		if err := os.WriteFile(dst+".new", b, 0o600); err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		if err := os.Rename(dst+".new", dst); err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
	}
}

// CAPool returns the pool of the CA certificates in caFile.
func CAPool(t testing.TB, caFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("kafkatest: %s holds no certificate", caFile)
	}
	return pool
}
