package kafkaconn

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/weir-stream/weir/config"
)

// TestMSKIAMSignature: the AWS_MSK_IAM mechanism takes its credentials from
// the standard AWS chain (here the AWS_* variables) and its first message
// is the MSK IAM payload (the fields and values aws-msk-iam-auth sends,
// recorded below) with a SigV4 signature that the AWS SDK's own signer,
// sharing no code with franz-go, computes again from the same request.
func TestMSKIAMSignature(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDWEIRTEST0000")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "weir-test-secret-key/0123456789abcdef")
	t.Setenv("AWS_SESSION_TOKEN", "weir-session-token")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	m, err := newMechanism(config.SASL{Mechanism: config.SASLAWSMSKIAM})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %s", m.Name())
	}
	const host = "b-1.weir.abc123.c2.kafka.eu-west-1.amazonaws.com"
	_, first, err := m.Authenticate(context.Background(), host+":9098")
	if err != nil {
		t.Fatal(err)
	}
	var msg map[string]string
	if err := json.Unmarshal(first, &msg); err != nil {
		t.Fatalf("first message is not JSON: %v: %s", err, first)
	}
	// The recorded expectation: every field but the time-dependent ones.
	date := msg["x-amz-date"]
	signingTime, err := time.Parse("20060102T150405Z", date)
	if err != nil {
		t.Fatalf("x-amz-date %q: %v", date, err)
	}
	if d := time.Since(signingTime); d < -time.Minute || d > time.Minute {
		t.Errorf("x-amz-date %s is %v from now", date, d)
	}
	want := map[string]string{
		"version":              "2020_10_22",
		"host":                 host,
		"action":               "kafka-cluster:Connect",
		"x-amz-algorithm":      "AWS4-HMAC-SHA256",
		"x-amz-credential":     "AKIDWEIRTEST0000/" + date[:8] + "/eu-west-1/kafka-cluster/aws4_request",
		"x-amz-expires":        "900",
		"x-amz-signedheaders":  "host",
		"x-amz-security-token": "weir-session-token",
	}
	for k, v := range want {
		if msg[k] != v {
			t.Errorf("%s = %q, want %q", k, msg[k], v)
		}
	}
	if !strings.HasPrefix(msg["user-agent"], "franz-go/") {
		t.Errorf("user-agent %q", msg["user-agent"])
	}

	// The same presigned request, signed by the AWS SDK.
	q := url.Values{}
	q.Set("Action", "kafka-cluster:Connect")
	q.Set("X-Amz-Expires", "900")
	req, err := http.NewRequest(http.MethodGet, "https://"+host+"/?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const emptyBody = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	creds := awssdk.Credentials{AccessKeyID: "AKIDWEIRTEST0000", SecretAccessKey: "weir-test-secret-key/0123456789abcdef", SessionToken: "weir-session-token"}
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, emptyBody, "kafka-cluster", "eu-west-1", signingTime)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := msg["x-amz-signature"], u.Query().Get("X-Amz-Signature"); got != want || got == "" {
		t.Errorf("x-amz-signature %q; the AWS SDK signs the same request %q", got, want)
	}
}
