package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-stream/weir/config"
)

// TestKafkaSecurityChecked: every combination of kafka.tls and kafka.sasl
// settings a mechanism does not take, or lacks, is a problem at its key
// path, and no problem repeats a secret.
func TestKafkaSecurityChecked(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists.pem")
	if err := os.WriteFile(exists, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "hunter2-do-not-print"
	cases := []struct {
		name  string
		kafka string
		env   map[string]string
		want  []string // problem prefixes after the origin; none: valid
	}{
		{name: "plaintext", kafka: ``},
		{name: "scram via env", kafka: `sasl: {mechanism: SCRAM-SHA-512, username: weir}`,
			env: map[string]string{"WEIR_KAFKA_SASL_PASSWORD": secret}},
		{name: "scram via file", kafka: `sasl: {mechanism: SCRAM-SHA-256, username: weir, password_file: ` + exists + `}`},
		{name: "plain needs password", kafka: `sasl: {mechanism: PLAIN, username: weir}`,
			want: []string{"kafka.sasl.password_file: required by kafka.sasl.mechanism PLAIN: set kafka.sasl.password_file or kafka.sasl.password (or its environment variable WEIR_KAFKA_SASL_PASSWORD)"}},
		{name: "two passwords", kafka: `sasl: {mechanism: PLAIN, username: weir, password: ` + secret + `, password_file: ` + exists + `}`,
			want: []string{"kafka.sasl.password_file: the password is given more than once"}},
		{name: "scram needs user", kafka: `sasl: {mechanism: SCRAM-SHA-512, password_file: ` + exists + `}`,
			want: []string{"kafka.sasl.username: required by kafka.sasl.mechanism SCRAM-SHA-512"}},
		{name: "missing password file", kafka: `sasl: {mechanism: SCRAM-SHA-512, username: weir, password_file: /nonexistent/pw}`,
			want: []string{`kafka.sasl.password_file: "/nonexistent/pw" does not exist`}},
		{name: "lower case mechanism", kafka: `sasl: {mechanism: scram-sha-512, username: weir, password: ` + secret + `}`,
			want: []string{`kafka.sasl.mechanism: "scram-sha-512": use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM, or leave it empty for no SASL; did you mean SCRAM-SHA-512? (upper case)`}},
		{name: "unknown mechanism", kafka: `sasl: {mechanism: SCRAM}`,
			want: []string{`kafka.sasl.mechanism: "SCRAM": use one of`}},
		{name: "user without mechanism", kafka: `sasl: {username: weir}`,
			want: []string{"kafka.sasl.username: set, but kafka.sasl.mechanism (none) does not use it"}},
		{name: "oauth token file", kafka: `sasl: {mechanism: OAUTHBEARER, token_file: ` + exists + `}`},
		{name: "oauth client credentials", kafka: `sasl: {mechanism: OAUTHBEARER, oauth: {token_url: "https://idp.example/token", client_id: weir, client_secret_file: ` + exists + `, scopes: [kafka]}}`},
		{name: "oauth needs a token", kafka: `sasl: {mechanism: OAUTHBEARER}`,
			want: []string{"kafka.sasl.token_file: required by kafka.sasl.mechanism OAUTHBEARER"}},
		{name: "oauth bad url and no client", kafka: `sasl: {mechanism: OAUTHBEARER, oauth: {token_url: "idp/token", client_secret: ` + secret + `}}`,
			want: []string{`kafka.sasl.oauth.token_url: "idp/token" is not an http(s) URL`, "kafka.sasl.oauth.client_id: required with kafka.sasl.oauth.token_url"}},
		{name: "oauth with password", kafka: `sasl: {mechanism: OAUTHBEARER, token: t, password: ` + secret + `}`,
			want: []string{"kafka.sasl.password: set, but kafka.sasl.mechanism OAUTHBEARER does not use it"}},
		{name: "msk iam", kafka: `{tls: {enabled: true}, sasl: {mechanism: AWS_MSK_IAM}}`},
		{name: "msk iam needs tls", kafka: `sasl: {mechanism: AWS_MSK_IAM}`,
			want: []string{"kafka.sasl.mechanism: AWS_MSK_IAM needs kafka.tls.enabled: true"}},
		{name: "mtls", kafka: `tls: {enabled: true, ca_file: ` + exists + `, cert_file: ` + exists + `, key_file: ` + exists + `, server_name: kafka.internal}`},
		{name: "cert without key", kafka: `tls: {enabled: true, cert_file: ` + exists + `}`,
			want: []string{"kafka.tls.cert_file: mutual TLS needs both kafka.tls.cert_file and kafka.tls.key_file"}},
		{name: "files without tls", kafka: `tls: {ca_file: ` + exists + `}`,
			want: []string{"kafka.tls.ca_file: set, but kafka.tls.enabled is false"}},
		{name: "missing ca", kafka: `tls: {enabled: true, ca_file: /nonexistent/ca.pem}`,
			want: []string{`kafka.tls.ca_file: "/nonexistent/ca.pem" does not exist`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.env)
			_, err := config.Load(config.Source{YAML: []byte(kafkaBlock(tc.kafka))})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid configuration refused:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", tc.want)
			}
			got := unjoin(err)
			for _, w := range tc.want {
				found := false
				for _, e := range got {
					found = found || strings.Contains(e.Error(), w)
				}
				if !found {
					t.Errorf("no problem %q in:\n%v", w, err)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("a problem repeats the secret:\n%v", err)
			}
		})
	}
}

// kafkaBlock is the clicks job with kafka's extra settings (a YAML flow
// mapping's contents, or a mapping in braces).
func kafkaBlock(extra string) string {
	y := strings.Replace(clicksJob, "kafka:\n  brokers: [127.0.0.1:9092]\n", "", 1)
	inner := strings.TrimSuffix(strings.TrimPrefix(extra, "{"), "}")
	if extra == "" {
		return y + "kafka: {brokers: [127.0.0.1:9092]}\n"
	}
	if !strings.HasPrefix(extra, "{") {
		inner = extra
	}
	return y + "kafka: {brokers: [127.0.0.1:9092], " + inner + "}\n"
}

// TestSecretsInTheFileAreWarnedAbout: a secret in the YAML or a flag works
// and is warned about at its origin; from the environment it is not, and
// no warning repeats the secret.
func TestSecretsInTheFileAreWarnedAbout(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	y := kafkaBlock(`sasl: {mechanism: OAUTHBEARER, oauth: {token_url: "https://idp.example/token", client_id: weir, client_secret: s3cret-in-yaml}}, tls: {enabled: true, insecure_skip_verify: true}`)
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Source{File: path, NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(cfg.Warnings(), "\n")
	for _, want := range []string{
		path + ":", "kafka.sasl.oauth.client_secret: a secret written in the configuration; use kafka.sasl.oauth.client_secret_file (a mounted Secret) or the environment variable WEIR_KAFKA_SASL_OAUTH_CLIENT_SECRET",
		"kafka.tls.insecure_skip_verify: the brokers' certificates are NOT verified",
	} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if strings.Contains(w, "s3cret-in-yaml") {
		t.Errorf("a warning repeats the secret:\n%s", w)
	}

	y = kafkaBlock(`sasl: {mechanism: PLAIN, username: weir}`)
	setEnv(t, map[string]string{"WEIR_KAFKA_SASL_PASSWORD": "from-env"})
	cfg, err = config.Load(config.Source{YAML: []byte(y)})
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("a password from the environment is warned about: %q", w)
	}
	if cfg.Kafka.SASL.Password != "from-env" {
		t.Errorf("password %q, want from-env", cfg.Kafka.SASL.Password)
	}
}
