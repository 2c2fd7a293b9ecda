// Package s3test hands tests an S3-compatible object store: the real server
// that `make s3-up` (scripts/s3.sh up) starts and whose endpoint `make`
// exports in WEIR_S3_ENDPOINT. It is for tests only.
//
// Bucket gives each test a gocloud.dev/blob bucket under a key prefix of its
// own, and the s3:// URL that opens the same bucket and prefix with
// blob.OpenBucket, the way Weir opens checkpoint.storage. Without
// WEIR_S3_ENDPOINT, or with an endpoint that does not answer, the test is
// skipped; with WEIR_REQUIRE_S3=1 it fails instead, so CI cannot pass by
// skipping.
//
// The environment, as printed by scripts/s3.sh env:
//
//	WEIR_S3_ENDPOINT    server URL, e.g. http://127.0.0.1:19000
//	WEIR_S3_BUCKET      bucket that exists on it (default weir-test)
//	WEIR_S3_ACCESS_KEY  static credentials of the test server
//	WEIR_S3_SECRET_KEY
//	WEIR_S3_REGION      signing region (default us-east-1)
//	WEIR_S3_SERVER      name@version of the server, for test logs
//	WEIR_REQUIRE_S3=1   fail instead of skip when the server is missing
//
// The AWS SDK behind s3blob takes credentials only from its environment
// (an s3:// URL cannot carry them), so scripts/s3.sh env also prints
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. When they are not already
// those of the test server, Bucket sets them with t.Setenv, which a parallel
// test may not do: run parallel tests with the full environment exported.
package s3test
