//lint:file-ignore SA1019 the endpoint= parameter sets the deprecated EndpointResolverWithOptions, exactly as gocloud.dev does, so that URLs keep their meaning

package objstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/logging"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// s3Opener opens s3:// URLs as gocloud.dev's s3blob.URLOpener does (v0.47.0,
// with aws.V2ConfigFromURLParams: the same query parameters, the same
// meaning), with two differences that gocloud offers no option for:
//
//   - the AWS SDK logs through log (its default logger writes plain-text
//     "SDK … WARN" lines to stderr, whatever the log format), and
//   - the credentials are resolved once at open: a chain that finds none is
//     a *StorageError, a permanent error at start, instead of a request
//     failing with it at every retry.
type s3Opener struct {
	log *slog.Logger
}

// noCredentials is the problem of a StorageError for a credential chain
// that found nothing.
const noCredentials = "no AWS credentials: the SDK's chain found none " +
	"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws, a web identity token, an ECS or EC2 instance role); " +
	"set them, or anonymous=true for a public bucket"

func (o s3Opener) OpenBucketURL(ctx context.Context, u *neturl.URL) (*blob.Bucket, error) {
	q := u.Query()
	var bopts s3blob.Options
	var copts []func(*s3.Options)
	if v := q.Get("ssetype"); v != "" {
		q.Del("ssetype")
		t, err := sseType(v)
		if err != nil {
			return nil, err
		}
		bopts.EncryptionType = t
	}
	if v := q.Get("kmskeyid"); v != "" {
		q.Del("kmskeyid")
		bopts.KMSEncryptionID = v
	}
	accelerate, err := boolParam(q, "accelerate")
	if err != nil {
		return nil, err
	}
	copts = append(copts, func(o *s3.Options) { o.UseAccelerate = accelerate })
	if q.Has("disable_https") {
		v, err := boolParam(q, "disable_https")
		if err != nil {
			return nil, err
		}
		copts = append(copts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = v })
	}
	for _, key := range []string{"use_path_style", "s3ForcePathStyle"} {
		if q.Has(key) {
			v, err := boolParam(q, key)
			if err != nil {
				return nil, err
			}
			copts = append(copts, func(o *s3.Options) { o.UsePathStyle = v })
		}
	}
	cfg, anonymous, err := awsConfig(ctx, q, o.log)
	if err != nil {
		return nil, fmt.Errorf("open bucket %v: %w", u, err)
	}
	if !anonymous {
		if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, &StorageError{Op: "open s3://" + u.Host, Problem: noCredentials, Err: err}
		}
	}
	client := s3.NewFromConfig(cfg, copts...)
	// As in s3blob: its upload manager does not read the checksum
	// setting from the client.
	bopts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	return s3blob.OpenBucket(ctx, client, u.Host, &bopts)
}

func sseType(v string) (types.ServerSideEncryption, error) {
	for _, t := range types.ServerSideEncryptionAes256.Values() {
		if strings.EqualFold(string(t), v) {
			return t, nil
		}
	}
	return "", fmt.Errorf("%q is not a valid value for %q", v, "ssetype")
}

// boolParam removes key from q and parses its value; absent is false.
func boolParam(q neturl.Values, key string) (bool, error) {
	v := q.Get(key)
	q.Del(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("invalid value for %q: %w", key, err)
	}
	return b, nil
}

// awsConfig is gocloud.dev/aws.V2ConfigFromURLParams (v0.47.0) with the
// SDK's logger set; anonymous reports anonymous=true.
func awsConfig(ctx context.Context, q neturl.Values, log *slog.Logger) (cfg aws.Config, anonymous bool, err error) {
	logger := sdkLogger{log}
	var endpoint, roleARN string
	var hostnameImmutable bool
	var rateLimitCapacity int64
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithLogger(logger)}
	for param, values := range q {
		value := values[0]
		switch param {
		case "hostname_immutable":
			if hostnameImmutable, err = strconv.ParseBool(value); err != nil {
				return aws.Config{}, false, fmt.Errorf("invalid value for hostname_immutable: %w", err)
			}
		case "region":
			opts = append(opts, awsconfig.WithRegion(value))
		case "endpoint":
			endpoint = value
		case "profile":
			opts = append(opts, awsconfig.WithSharedConfigProfile(value))
		case "dualstack", "fips", "anonymous":
			on, err := strconv.ParseBool(value)
			if err != nil {
				return aws.Config{}, false, fmt.Errorf("invalid value for %s: %w", param, err)
			}
			switch {
			case !on:
			case param == "dualstack":
				opts = append(opts, awsconfig.WithUseDualStackEndpoint(aws.DualStackEndpointStateEnabled))
			case param == "fips":
				opts = append(opts, awsconfig.WithUseFIPSEndpoint(aws.FIPSEndpointStateEnabled))
			default:
				anonymous = true
				opts = append(opts, awsconfig.WithCredentialsProvider(aws.AnonymousCredentials{}))
			}
		case "rate_limiter_capacity":
			if rateLimitCapacity, err = strconv.ParseInt(value, 10, 32); err != nil {
				return aws.Config{}, false, fmt.Errorf("invalid value for capacity: %w", err)
			}
		case "role":
			if !strings.HasPrefix(value, "arn:") {
				return aws.Config{}, false, fmt.Errorf("invalid value for role: must be a valid ARN (starts with 'arn:'): %s", value)
			}
			roleARN = value
		case "request_checksum_calculation":
			switch strings.ToLower(value) {
			case "when_supported":
				opts = append(opts, awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenSupported))
			case "when_required":
				opts = append(opts, awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired))
			default:
				return aws.Config{}, false, fmt.Errorf("invalid value for %q: %q. Valid values are: when_supported, when_required", param, value)
			}
		case "response_checksum_validation":
			switch strings.ToLower(value) {
			case "when_supported":
				opts = append(opts, awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenSupported))
			case "when_required":
				opts = append(opts, awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
			default:
				return aws.Config{}, false, fmt.Errorf("invalid value for %q: %q. Valid values are: when_supported, when_required", param, value)
			}
		case "awssdk":
			// gocloud's choice of SDK version; v2 is the only one.
		default:
			return aws.Config{}, false, fmt.Errorf("unknown query parameter %q", param)
		}
	}
	if roleARN != "" {
		base, err := awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return aws.Config{}, false, fmt.Errorf("failed to load default AWS config: %w", err)
		}
		if base.Region == "" {
			return aws.Config{}, false, errors.New("STS client created with empty region: all other parameters must be collected before assuming role")
		}
		opts = []func(*awsconfig.LoadOptions) error{
			awsconfig.WithLogger(logger),
			awsconfig.WithCredentialsProvider(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(base), roleARN)),
			awsconfig.WithRegion(base.Region),
		}
		anonymous = false
	}
	limiter := retry.RateLimiter(ratelimit.None)
	if rateLimitCapacity > 0 {
		limiter = ratelimit.NewTokenRateLimit(uint(rateLimitCapacity))
	}
	opts = append(opts, awsconfig.WithRetryer(func() aws.Retryer {
		return retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = limiter })
	}))
	cfg, err = awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, false, err
	}
	if endpoint != "" {
		cfg.EndpointResolverWithOptions = aws.EndpointResolverWithOptionsFunc(
			func(service, region string, options ...any) (aws.Endpoint, error) {
				return aws.Endpoint{PartitionID: "aws", URL: endpoint, SigningRegion: region, HostnameImmutable: hostnameImmutable}, nil
			})
	}
	return cfg, anonymous, nil
}

// sdkLogger sends the AWS SDK's log lines to slog: its warnings at WARN,
// its debug lines at DEBUG, each with component=aws-sdk.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "aws-sdk")
}

// openBucket opens url: s3:// through s3Opener with log, every other scheme
// through gocloud.dev's default mux.
func openBucket(ctx context.Context, url string, log *slog.Logger) (*blob.Bucket, error) {
	if u, err := neturl.Parse(url); err == nil && u.Scheme == s3blob.Scheme {
		mux := new(blob.URLMux)
		mux.RegisterBucket(s3blob.Scheme, s3Opener{log: log})
		return mux.OpenBucket(ctx, url)
	}
	return blob.OpenBucket(ctx, url)
}
