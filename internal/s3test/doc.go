// Package s3test hands tests an S3-compatible object store: the real server
// that `make s3-up` starts and whose endpoint `make` exports in
// WEIR_S3_ENDPOINT. It is for tests only.
package s3test
