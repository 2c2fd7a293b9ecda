package faults

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// Ports of the scenarios' own broker and S3 server: below the ephemeral
// range and away from the shared services (19092/19093, 19000) that other
// tests use at the same time. WEIR_FAULTS_KAFKA_PORT (the controller and
// the secured listeners take the next three ports) and WEIR_FAULTS_S3_PORT
// move them.
const (
	defaultKafkaPort = 19392
	defaultS3Port    = 19300
)

func port(env string, def int) int {
	if p, err := strconv.Atoi(os.Getenv(env)); err == nil && p > 0 {
		return p
	}
	return def
}

// listening reports whether something accepts connections on the port.
func listening(p int) bool {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// script runs scripts/<name> with args and extra environment, logging its
// output to the test.
func script(t *testing.T, env []string, name string, args ...string) error {
	t.Helper()
	root, err := e2etest.ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("bash", append([]string{"scripts/" + name}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/%s %s: %s", name, strings.Join(args, " "), strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("scripts/%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// ownKafka is a broker of the scenario's own, started with scripts/kafka.sh
// on its own port and stopped when the test ends.
type ownKafka struct {
	t    *testing.T
	port int
	env  []string
	*kafkatest.Cluster
}

// startOwnKafka starts the broker. It fails (never skips) when the port is
// taken or the broker does not start: the scenario needs it.
func startOwnKafka(t *testing.T) *ownKafka {
	t.Helper()
	p := port("WEIR_FAULTS_KAFKA_PORT", defaultKafkaPort)
	for _, q := range []int{p, p + 1, p + 2, p + 3} {
		if listening(q) {
			t.Fatalf("port %d is taken: this scenario starts a broker of its own on %d (controller %d, SASL_SSL %d, mTLS %d); set WEIR_FAULTS_KAFKA_PORT", q, p, p+1, p+2, p+3)
		}
	}
	k := &ownKafka{t: t, port: p, env: []string{"WEIR_KAFKA_PORT=" + strconv.Itoa(p), "WEIR_KAFKA_HEAP=512m"}}
	t.Cleanup(func() { _ = script(t, k.env, "kafka.sh", "down") })
	if err := script(t, k.env, "kafka.sh", "up"); err != nil {
		t.Fatal(err)
	}
	brokers := []string{fmt.Sprintf("127.0.0.1:%d", p)}
	t.Logf("%s Apache Kafka (this scenario's own broker) at %s", kafkatest.RealMarker, brokers[0])
	k.Cluster = &kafkatest.Cluster{Kind: kafkatest.Real, Brokers: brokers, Name: "Apache Kafka (own)"}
	return k
}

// down stops the broker (SIGTERM, clean shutdown).
func (k *ownKafka) down() {
	k.t.Helper()
	if err := script(k.t, k.env, "kafka.sh", "down"); err != nil {
		k.t.Fatal(err)
	}
}

// up starts the broker again on its kept log directory.
func (k *ownKafka) up() {
	k.t.Helper()
	if err := script(k.t, append(k.env, "WEIR_KAFKA_KEEP_DATA=1"), "kafka.sh", "up"); err != nil {
		k.t.Fatal(err)
	}
}

// ownS3 is an S3 server (versitygw) of the scenario's own, started with
// scripts/s3.sh on its own port and stopped when the test ends.
type ownS3 struct {
	t    *testing.T
	port int
	env  []string
}

func startOwnS3(t *testing.T) *ownS3 {
	t.Helper()
	p := port("WEIR_FAULTS_S3_PORT", defaultS3Port)
	if listening(p) {
		t.Fatalf("port %d is taken: this scenario starts an S3 server of its own there; set WEIR_FAULTS_S3_PORT", p)
	}
	s := &ownS3{t: t, port: p, env: []string{"WEIR_S3_PORT=" + strconv.Itoa(p)}}
	t.Cleanup(func() { _ = script(t, s.env, "s3.sh", "down") })
	s.up()
	t.Logf("weir-real-s3: versitygw (this scenario's own) at 127.0.0.1:%d", p)
	return s
}

func (s *ownS3) up() {
	s.t.Helper()
	if err := script(s.t, s.env, "s3.sh", "up"); err != nil {
		s.t.Fatal(err)
	}
}

func (s *ownS3) down() {
	s.t.Helper()
	if err := script(s.t, s.env, "s3.sh", "down"); err != nil {
		s.t.Fatal(err)
	}
	if listening(s.port) {
		s.t.Fatalf("S3 server still answers on %d after s3.sh down", s.port)
	}
}

// url is the checkpoint.storage URL of the server's bucket under prefix.
func (s *ownS3) url(prefix string) string {
	q := url.Values{}
	q.Set("endpoint", fmt.Sprintf("http://127.0.0.1:%d", s.port))
	q.Set("region", "us-east-1")
	q.Set("use_path_style", "true")
	q.Set("disable_https", "true")
	q.Set("prefix", prefix+"/")
	return "s3://weir-test?" + q.Encode()
}

// credentials is the environment the AWS SDK behind s3:// reads them from
// (scripts/s3.sh's defaults).
func (s *ownS3) credentials() []string {
	return []string{"AWS_ACCESS_KEY_ID=weirtest", "AWS_SECRET_ACCESS_KEY=weirtestsecret"}
}
