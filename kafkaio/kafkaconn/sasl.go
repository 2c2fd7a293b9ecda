package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/weir-stream/weir/config"
)

// newMechanism returns the SASL mechanism of cfg (a mechanism config.Validate
// accepted). Every mechanism reads its secret again for each new
// connection: from its file if that changed, so rotated credentials are
// used without a restart.
func newMechanism(cfg config.SASL) (sasl.Mechanism, error) {
	switch cfg.Mechanism {
	case config.SASLPlain, config.SASLScram256, config.SASLScram512:
		pw, err := newSecret("kafka.sasl.password", cfg.Password, cfg.PasswordFile)
		if err != nil {
			return nil, err
		}
		user := cfg.Username
		switch cfg.Mechanism {
		case config.SASLPlain:
			return plain.Plain(func(context.Context) (plain.Auth, error) {
				p, err := pw.get()
				return plain.Auth{User: user, Pass: p}, err
			}), nil
		case config.SASLScram256:
			return scram.Sha256(func(context.Context) (scram.Auth, error) {
				p, err := pw.get()
				return scram.Auth{User: user, Pass: p}, err
			}), nil
		default:
			return scram.Sha512(func(context.Context) (scram.Auth, error) {
				p, err := pw.get()
				return scram.Auth{User: user, Pass: p}, err
			}), nil
		}
	case config.SASLOAuthBearer:
		if cfg.OAuth.TokenURL != "" {
			cs, err := newSecret("kafka.sasl.oauth.client_secret", cfg.OAuth.ClientSecret, cfg.OAuth.ClientSecretFile)
			if err != nil {
				return nil, err
			}
			src := &clientCredentials{cfg: cfg.OAuth, secret: cs, http: &http.Client{Timeout: 15 * time.Second}}
			return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
				tok, err := src.token(ctx)
				return oauth.Auth{Token: tok}, err
			}), nil
		}
		tok, err := newSecret("kafka.sasl.token", cfg.Token, cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			t, err := tok.get()
			return oauth.Auth{Token: t}, err
		}), nil
	case config.SASLAWSMSKIAM:
		// The standard chain: AWS_* variables, web identity (IRSA), ECS and
		// EC2 roles, shared files. Credentials are cached and refreshed
		// before they expire by the SDK.
		ac, err := awsconfig.LoadDefaultConfig(context.Background())
		if err != nil {
			return nil, fmt.Errorf("kafka.sasl.mechanism AWS_MSK_IAM: load the AWS configuration: %w", err)
		}
		creds := ac.Credentials
		if creds == nil {
			return nil, errors.New("kafka.sasl.mechanism AWS_MSK_IAM: the AWS configuration has no credentials provider")
		}
		return aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
			c, err := creds.Retrieve(ctx)
			if err != nil {
				return aws.Auth{}, fmt.Errorf("AWS_MSK_IAM: no AWS credentials from the standard chain (AWS_ACCESS_KEY_ID, web identity, instance role, ~/.aws): %w", err)
			}
			return aws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
		}), nil
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism: %q is not supported", cfg.Mechanism)
}

// classifySASL returns the permanent failure a SASL error is, or nil.
func classifySASL(addr string, err error, mechanism, user string) *Error {
	if mechanism == "" || contextDone(err) {
		return nil
	}
	e := &Error{Kind: KindSASL, Broker: addr, Mechanism: mechanism, User: user, Err: err}
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		e.Problem = brokerMessage(err, kerr.SaslAuthenticationFailed) + hintFor(mechanism)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		e.Problem = "the listener does not enable " + mechanism + ": " + brokerMessage(err, kerr.UnsupportedSaslMechanism)
	case errors.Is(err, kerr.IllegalSaslState):
		e.Kind = KindProtocol
		e.Problem = "the listener does not expect SASL here: " + err.Error()
	default:
		return nil
	}
	return e
}

// brokerMessage is what the broker said, without the code's generic text.
func brokerMessage(err error, code *kerr.Error) string {
	s := err.Error()
	if i := strings.Index(s, code.Message+": "); i >= 0 {
		return s[i+len(code.Message)+2:]
	}
	return s
}

func hintFor(mechanism string) string {
	switch mechanism {
	case config.SASLOAuthBearer:
		return " (is the token valid for this cluster, and not expired?)"
	case config.SASLAWSMSKIAM:
		return " (does the IAM role allow kafka-cluster:Connect on this cluster?)"
	}
	return " (check kafka.sasl.username and the password; SCRAM users must exist for this mechanism on the broker)"
}

// secret is a value from the configuration or from a file; a file is read
// again when it changed. A file that fails to read keeps the last value.
type secret struct {
	key, path string

	mu    sync.Mutex
	val   string
	stamp fileStamp
}

func newSecret(key, inline, path string) (*secret, error) {
	s := &secret{key: key, path: path, val: inline}
	if path == "" {
		return s, nil
	}
	if _, err := s.get(); err != nil {
		return nil, err
	}
	return s, nil
}

// get returns the secret, without the line breaks around it.
func (s *secret) get() (string, error) {
	if s.path == "" {
		return s.val, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := stamp(s.path)
	if err == nil && st.same(s.stamp) {
		return s.val, nil
	}
	b, rerr := os.ReadFile(s.path)
	switch {
	case rerr == nil:
		s.val, s.stamp = strings.TrimSpace(string(b)), st
		if s.val == "" {
			return "", fmt.Errorf("%s_file %s is empty", s.key, s.path)
		}
	case s.stamp.info != nil:
		// Kept from before: a rotation in progress.
	default:
		return "", fmt.Errorf("%s_file: %w", s.key, rerr)
	}
	return s.val, nil
}

// clientCredentials fetches OAUTHBEARER tokens through the OIDC
// client-credentials flow and keeps each until shortly before it expires.
type clientCredentials struct {
	cfg    config.OAuth
	secret *secret
	http   *http.Client

	mu  sync.Mutex
	tok *oauth2.Token
}

func (c *clientCredentials) token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tok.Valid() && (c.tok.Expiry.IsZero() || time.Until(c.tok.Expiry) > time.Minute) {
		return c.tok.AccessToken, nil
	}
	sec, err := c.secret.get()
	if err != nil {
		return "", err
	}
	cc := clientcredentials.Config{ClientID: c.cfg.ClientID, ClientSecret: sec, TokenURL: c.cfg.TokenURL, Scopes: c.cfg.Scopes}
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, c.http))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 &&
			re.Response.StatusCode != http.StatusTooManyRequests && re.Response.StatusCode != http.StatusRequestTimeout {
			what := re.ErrorCode
			if re.ErrorDescription != "" {
				what += ": " + re.ErrorDescription
			}
			if what == "" {
				what = re.Response.Status
			}
			return "", &Error{Kind: KindSASL, Mechanism: config.SASLOAuthBearer, User: c.cfg.ClientID, Err: err,
				Problem: fmt.Sprintf("the token endpoint %s refused the client credentials (HTTP %d, %s)", c.cfg.TokenURL, re.Response.StatusCode, what)}
		}
		return "", fmt.Errorf("fetch an OAUTHBEARER token from %s: %w", c.cfg.TokenURL, err)
	}
	c.tok = tok
	return tok.AccessToken, nil
}
