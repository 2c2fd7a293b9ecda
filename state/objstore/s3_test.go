package objstore

import (
	"context"
	"errors"
	"log/slog"
	neturl "net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestS3OpenerTakesGocloudsParameters: s3Opener, the copy of gocloud.dev's
// s3 opener, accepts every query parameter config.storageSchemes lists for
// s3 (gocloud's; "prefix" is the mux's), and refuses others as gocloud does.
func TestS3OpenerTakesGocloudsParameters(t *testing.T) {
	noAWSCredentials(t)
	u, err := neturl.Parse("s3://bucket?anonymous=true&region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true" +
		"&s3ForcePathStyle=true&disable_https=true&dualstack=false&fips=false&hostname_immutable=true&rate_limiter_capacity=10" +
		"&request_checksum_calculation=when_required&response_checksum_validation=when_required&awssdk=v2" +
		"&ssetype=AES256&kmskeyid=k&accelerate=false")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s3Opener{log: slog.New(slog.DiscardHandler)}.OpenBucketURL(context.Background(), u)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	_ = b.Close()
	u, _ = neturl.Parse("s3://bucket?anonymous=true&regoin=eu")
	if _, err := (s3Opener{log: slog.New(slog.DiscardHandler)}).OpenBucketURL(context.Background(), u); err == nil || !strings.Contains(err.Error(), `unknown query parameter "regoin"`) {
		t.Fatalf("open with regoin: %v", err)
	}
}

// TestS3WithoutCredentialsIsPermanent: with no credentials anywhere in the
// SDK's chain, Open fails at once with a StorageError naming the problem,
// not after retries; anonymous=true needs none.
func TestS3WithoutCredentialsIsPermanent(t *testing.T) {
	noAWSCredentials(t)
	_, err := Open(context.Background(), "s3://bucket?region=us-east-1&endpoint=http://127.0.0.1:9", "job", Options{})
	var se *StorageError
	if !errors.Is(err, ErrPermanent) || !errors.As(err, &se) || !strings.Contains(err.Error(), "no AWS credentials") {
		t.Fatalf("open = %v, want the permanent 'no AWS credentials'", err)
	}
	u, _ := neturl.Parse("s3://bucket?region=us-east-1&endpoint=http://127.0.0.1:9&anonymous=true")
	b, err := s3Opener{log: slog.New(slog.DiscardHandler)}.OpenBucketURL(context.Background(), u)
	if err != nil {
		t.Fatalf("anonymous open: %v", err)
	}
	_ = b.Close()
}

// noAWSCredentials empties the SDK's credential chain for the test: no
// variables, no files, no instance metadata (never asked: it is disabled).
func noAWSCredentials(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", dir)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}
