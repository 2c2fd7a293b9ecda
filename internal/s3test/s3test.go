package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // registers s3:// with blob.OpenBucket
)

// Environment variables read by ConfigFromEnv and Bucket.
const (
	EnvEndpoint  = "WEIR_S3_ENDPOINT"
	EnvBucket    = "WEIR_S3_BUCKET"
	EnvAccessKey = "WEIR_S3_ACCESS_KEY"
	EnvSecretKey = "WEIR_S3_SECRET_KEY"
	EnvRegion    = "WEIR_S3_REGION"
	EnvServer    = "WEIR_S3_SERVER"
	EnvRequire   = "WEIR_REQUIRE_S3"
)

// RealMarker starts the log line Bucket writes when a test runs against the
// real server. The test report (internal/tools/testreport) counts the tests
// that wrote it, so CI shows how many real-S3 tests ran and that none was
// skipped.
const RealMarker = "weir-real-s3:"

// Config locates the test server. The zero value is not usable; get one from
// ConfigFromEnv.
type Config struct {
	Endpoint  string // e.g. http://127.0.0.1:19000
	Bucket    string
	AccessKey string
	SecretKey string
	Region    string
	Server    string // name@version, for logs; may be empty
}

// ConfigFromEnv reads the WEIR_S3_* variables. It reports false when
// WEIR_S3_ENDPOINT is unset; the other variables default to the values
// scripts/s3.sh uses.
func ConfigFromEnv() (Config, bool) {
	c := Config{
		Endpoint:  os.Getenv(EnvEndpoint),
		Bucket:    envOr(EnvBucket, "weir-test"),
		AccessKey: envOr(EnvAccessKey, "weirtest"),
		SecretKey: envOr(EnvSecretKey, "weirtestsecret"),
		Region:    envOr(EnvRegion, "us-east-1"),
		Server:    os.Getenv(EnvServer),
	}
	return c, c.Endpoint != ""
}

// URL returns the s3:// URL that blob.OpenBucket opens as c's bucket, under
// prefix when it is not empty (a prefix should end in "/"). The URL carries
// no credentials: the AWS SDK reads them from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
func (c Config) URL(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", c.Endpoint)
	q.Set("region", c.Region)
	// Path-style addressing: the bucket is not a DNS label of 127.0.0.1.
	q.Set("use_path_style", "true")
	if strings.HasPrefix(c.Endpoint, "http://") {
		q.Set("disable_https", "true")
	}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return (&url.URL{Scheme: "s3", Host: c.Bucket, RawQuery: q.Encode()}).String()
}

// URLFromEnv returns the s3:// URL of the test bucket's root, for programs
// such as benchmarks; false when WEIR_S3_ENDPOINT is unset. The caller's
// environment must hold the credentials (eval "$(scripts/s3.sh env)").
func URLFromEnv() (string, bool) {
	c, ok := ConfigFromEnv()
	if !ok {
		return "", false
	}
	return c.URL(""), true
}

// Bucket returns a bucket on the real S3 server, under a key prefix that no
// other test uses, and the s3:// URL that opens the same bucket and prefix
// with blob.OpenBucket. The bucket is closed when the test ends, and the
// objects under the prefix are deleted unless the test failed (then they stay
// for inspection, under the prefix logged).
//
// Without a reachable server Bucket skips the test, or fails it when
// WEIR_REQUIRE_S3=1.
func Bucket(t testing.TB) (*blob.Bucket, string) {
	t.Helper()
	c, ok := ConfigFromEnv()
	if !ok {
		unavailable(t, EnvEndpoint+" is not set; start the server and export its environment: "+
			`make s3-up && eval "$(bash scripts/s3.sh env)", or run make test`)
	}
	if err := probe(c.Endpoint); err != nil {
		unavailable(t, fmt.Sprintf("S3 server at %s does not answer (%v); start it with make s3-up", c.Endpoint, err))
	}
	useCredentials(t, c)

	prefix := testPrefix(t)
	u := c.URL(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		t.Fatalf("s3test: open %s: %v", u, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("s3test: close bucket: %v", err)
		}
	})
	// The server answers TCP; a failure now is a wrong bucket or wrong
	// credentials, which is a broken setup, never a reason to skip.
	if ok, err := b.IsAccessible(ctx); err != nil || !ok {
		t.Fatalf("s3test: bucket %s at %s is not accessible (accessible=%v, err=%v); scripts/s3.sh up creates it",
			c.Bucket, c.Endpoint, ok, err)
	}
	server := c.Server
	if server == "" {
		server = "S3 server (" + EnvServer + " unset)"
	}
	t.Logf("%s %s at %s, prefix s3://%s/%s", RealMarker, server, c.Endpoint, c.Bucket, prefix)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("s3test: keeping objects under s3://%s/%s for inspection", c.Bucket, prefix)
			return
		}
		if err := deleteAll(b); err != nil {
			t.Logf("s3test: clean up prefix %s: %v", prefix, err)
		}
	})
	return b, u
}

// unavailable skips t, or fails it when WEIR_REQUIRE_S3=1.
func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("s3test: %s (%s=1: the real-S3 tests must run)", why, EnvRequire)
	}
	t.Skipf("s3test: %s (set %s=1 to fail instead of skip)", why, EnvRequire)
}

// probe checks that something accepts connections at the endpoint.
func probe(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("bad %s: %w", EnvEndpoint, err)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// useCredentials makes the AWS SDK's environment credentials those of the
// test server. It leaves the environment alone when it already is (so
// parallel tests work when scripts/s3.sh env was exported), and otherwise
// sets it for the duration of t.
func useCredentials(t testing.TB, c Config) {
	t.Helper()
	want := map[string]string{
		"AWS_ACCESS_KEY_ID":     c.AccessKey,
		"AWS_SECRET_ACCESS_KEY": c.SecretKey,
		// Either would change which credentials the SDK picks.
		"AWS_SESSION_TOKEN": "",
		"AWS_PROFILE":       "",
	}
	for k, v := range want {
		if os.Getenv(k) != v {
			t.Setenv(k, v)
		}
	}
}

// testPrefix returns "<test name>-<random>/", the name made safe for a key.
func testPrefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 80 {
		name = name[:80]
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("s3test: random prefix: %v", err)
	}
	return name + "-" + hex.EncodeToString(rnd[:]) + "/"
}

// deleteAll deletes every object in b, which is prefixed to one test.
func deleteAll(b *blob.Bucket) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := b.List(nil)
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := b.Delete(ctx, obj.Key); err != nil {
			return fmt.Errorf("delete %s: %w", obj.Key, err)
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
