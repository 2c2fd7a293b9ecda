// Command s3bucket waits until an S3-compatible server answers and makes
// sure a bucket exists on it. scripts/s3.sh runs it after starting the test
// server; it is a test tool, not part of Weir.
//
//	go run ./internal/s3test/cmd/s3bucket -endpoint http://127.0.0.1:19000 -bucket weir-test
//
// Credentials come from -access/-secret, by default WEIR_S3_ACCESS_KEY and
// WEIR_S3_SECRET_KEY. Creating a bucket that the caller already owns is not
// an error, so running it twice is harmless. It exits 0 once HeadBucket on
// the bucket succeeds, and 1 with the last error when -timeout passes first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

func main() {
	var (
		endpoint = flag.String("endpoint", os.Getenv("WEIR_S3_ENDPOINT"), "server URL, e.g. http://127.0.0.1:19000")
		bucket   = flag.String("bucket", os.Getenv("WEIR_S3_BUCKET"), "bucket to create if absent")
		region   = flag.String("region", envOr("WEIR_S3_REGION", "us-east-1"), "signing region")
		access   = flag.String("access", os.Getenv("WEIR_S3_ACCESS_KEY"), "access key ID")
		secret   = flag.String("secret", os.Getenv("WEIR_S3_SECRET_KEY"), "secret access key")
		timeout  = flag.Duration("timeout", 30*time.Second, "how long to wait for the server to answer")
	)
	flag.Parse()
	if *endpoint == "" || *bucket == "" || *access == "" || *secret == "" {
		fmt.Fprintln(os.Stderr, "s3bucket: -endpoint, -bucket, -access and -secret are required")
		os.Exit(2)
	}
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(*endpoint),
		Region:       *region,
		Credentials:  credentials.NewStaticCredentialsProvider(*access, *secret, ""),
		UsePathStyle: true,
	})
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := ensureBucket(ctx, client, *bucket); err != nil {
		fmt.Fprintf(os.Stderr, "s3bucket: bucket %s at %s: %v\n", *bucket, *endpoint, err)
		os.Exit(1)
	}
}

// ensureBucket creates bucket unless it exists. It retries while the server
// does not answer (connection refused, timeouts) until ctx ends; an answer
// that is an S3 error other than "already owned by you" ends it at once.
func ensureBucket(ctx context.Context, client *s3.Client, bucket string) error {
	for {
		err := tryEnsure(ctx, client, bucket)
		var ae smithy.APIError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ae):
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer before the timeout: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func tryEnsure(ctx context.Context, client *s3.Client, bucket string) error {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := client.CreateBucket(actx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var ae smithy.APIError
	if err != nil && !(errors.As(err, &ae) && ae.ErrorCode() == "BucketAlreadyOwnedByYou") {
		return fmt.Errorf("create: %w", err)
	}
	if _, err := client.HeadBucket(actx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("head: %w", err)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
