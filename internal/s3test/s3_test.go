package s3test_test

// Smoke tests of the real S3 server through gocloud.dev/blob and the s3://
// URL, one per operation Weir relies on (docs/testing.md, "S3-compatible
// server"). Every test named TestS3... needs the server: it is skipped
// without one, and fails under WEIR_REQUIRE_S3=1.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/weir-stream/weir/internal/s3test"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, b *blob.Bucket, key string, data []byte, opts *blob.WriterOptions) {
	t.Helper()
	if err := b.WriteAll(ctxFor(t), key, data, opts); err != nil {
		t.Fatalf("write %s: %v", key, err)
	}
}

func get(t *testing.T, b *blob.Bucket, key string) []byte {
	t.Helper()
	data, err := b.ReadAll(ctxFor(t), key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return data
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// TestS3Server logs which server the real-S3 tests ran against.
func TestS3Server(t *testing.T) {
	_, u := s3test.Bucket(t)
	c, _ := s3test.ConfigFromEnv()
	header := "?"
	if resp, err := http.Get(c.Endpoint); err == nil {
		header = resp.Header.Get("Server")
		resp.Body.Close()
	}
	server := c.Server
	if server == "" {
		server = "unknown (" + s3test.EnvServer + " unset)"
	}
	t.Logf("S3 server: %s (HTTP Server header %q) at %s", server, header, c.Endpoint)
	t.Logf("bucket URL: %s", u)
}

// TestS3PutGet: PutObject, GetObject and HeadObject of a small object.
func TestS3PutGet(t *testing.T) {
	b, _ := s3test.Bucket(t)
	data := []byte("hello, weir")
	put(t, b, "chk-1/task-0.manifest", data, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if got := get(t, b, "chk-1/task-0.manifest"); !bytes.Equal(got, data) {
		t.Fatalf("read back %q, want %q", got, data)
	}
	attrs, err := b.Attributes(ctxFor(t), "chk-1/task-0.manifest")
	if err != nil {
		t.Fatalf("attributes: %v", err)
	}
	if attrs.Size != int64(len(data)) || attrs.ETag == "" || attrs.ContentType != "application/octet-stream" {
		t.Fatalf("attributes: size %d etag %q content type %q", attrs.Size, attrs.ETag, attrs.ContentType)
	}
	// A plain put (no condition) overwrites.
	put(t, b, "chk-1/task-0.manifest", []byte("v2"), nil)
	if got := get(t, b, "chk-1/task-0.manifest"); string(got) != "v2" {
		t.Fatalf("after overwrite read %q, want v2", got)
	}
	_, err = b.ReadAll(ctxFor(t), "no/such/key")
	if gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("read of a missing key: %v (code %v), want NotFound", err, gcerrors.Code(err))
	}
}

// TestS3RangeRead: GetObject with a Range header, as restoring a slice of an
// SST file does.
func TestS3RangeRead(t *testing.T) {
	b, _ := s3test.Bucket(t)
	data := randomBytes(10_000, 1)
	put(t, b, "shared/0/000001.sst", data, nil)
	for _, r := range []struct{ off, n int64 }{
		{0, 1}, {0, 100}, {4096, 1000}, {9_990, 10}, {9_000, -1}, {9_995, 100}, {0, -1},
	} {
		rd, err := b.NewRangeReader(ctxFor(t), "shared/0/000001.sst", r.off, r.n, nil)
		if err != nil {
			t.Fatalf("range %d+%d: %v", r.off, r.n, err)
		}
		got, err := io.ReadAll(rd)
		rd.Close()
		if err != nil {
			t.Fatalf("range %d+%d: read: %v", r.off, r.n, err)
		}
		end := int64(len(data))
		if r.n >= 0 && r.off+r.n < end {
			end = r.off + r.n
		}
		if !bytes.Equal(got, data[r.off:end]) {
			t.Fatalf("range %d+%d: got %d bytes, want bytes [%d,%d)", r.off, r.n, len(got), r.off, end)
		}
		if rd.Size() != int64(len(data)) {
			t.Fatalf("range %d+%d: reader reports object size %d, want %d", r.off, r.n, rd.Size(), len(data))
		}
	}
}

// TestS3List: ListObjectsV2 with a prefix, with a delimiter, and in pages.
func TestS3List(t *testing.T) {
	b, _ := s3test.Bucket(t)
	keys := []string{
		"job/chk-1/_metadata", "job/chk-1/t0.manifest", "job/chk-1/t1.manifest",
		"job/chk-2/t0.manifest", "job/shared/t0/a.sst", "job/shared/t0/b.sst", "job/shared/t1/c.sst",
		"other/x",
	}
	for _, k := range keys {
		put(t, b, k, []byte(k), nil)
	}
	ctx := ctxFor(t)

	list := func(opts *blob.ListOptions) []string {
		t.Helper()
		var out []string
		it := b.List(opts)
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatalf("list %+v: %v", opts, err)
			}
			name := o.Key
			if o.IsDir {
				name += " (dir)"
			}
			out = append(out, name)
		}
	}
	check := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
		}
	}

	check("all", list(nil), keys)
	check("prefix job/chk-1/", list(&blob.ListOptions{Prefix: "job/chk-1/"}), keys[:3])
	check("prefix job/ delimiter /", list(&blob.ListOptions{Prefix: "job/", Delimiter: "/"}),
		[]string{"job/chk-1/ (dir)", "job/chk-2/ (dir)", "job/shared/ (dir)"})
	check("prefix job/shared/ delimiter /", list(&blob.ListOptions{Prefix: "job/shared/", Delimiter: "/"}),
		[]string{"job/shared/t0/ (dir)", "job/shared/t1/ (dir)"})

	// Pagination: ListPage with 3 keys a page follows continuation tokens.
	var paged []string
	pages := 0
	token := blob.FirstPageToken
	for {
		objs, next, err := b.ListPage(ctx, token, 3, &blob.ListOptions{Prefix: "job/"})
		if err != nil {
			t.Fatalf("list page %d: %v", pages, err)
		}
		pages++
		if len(objs) > 3 {
			t.Fatalf("page %d has %d keys, asked for 3", pages, len(objs))
		}
		for _, o := range objs {
			paged = append(paged, o.Key)
		}
		if next == nil {
			break
		}
		token = next
	}
	check("paged", paged, keys[:7])
	if pages < 3 {
		t.Fatalf("7 keys at 3 a page came in %d pages", pages)
	}
}

// TestS3Delete: DeleteObject, and that a missing key reports NotFound.
func TestS3Delete(t *testing.T) {
	b, _ := s3test.Bucket(t)
	ctx := ctxFor(t)
	put(t, b, "shared/0/old.sst", []byte("x"), nil)
	put(t, b, "shared/0/keep.sst", []byte("y"), nil)
	if err := b.Delete(ctx, "shared/0/old.sst"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if ok, err := b.Exists(ctx, "shared/0/old.sst"); err != nil || ok {
		t.Fatalf("after delete: exists=%v err=%v", ok, err)
	}
	if ok, err := b.Exists(ctx, "shared/0/keep.sst"); err != nil || !ok {
		t.Fatalf("the other key: exists=%v err=%v", ok, err)
	}
	if err := b.Delete(ctx, "shared/0/old.sst"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("second delete: %v (code %v), want NotFound", err, gcerrors.Code(err))
	}
}

// The AWS transfer manager behind s3blob sends objects below 16 MiB in one
// PutObject whatever the part size; BufferSize sets the part size above it.
const (
	multipartThreshold = 16 << 20
	partSize           = 5 << 20 // the S3 minimum part size
)

// TestS3Multipart: a write above the multipart threshold goes up as a
// multipart upload (CreateMultipartUpload, UploadPart, CompleteMultipartUpload)
// and reads back intact, also across a part boundary.
func TestS3Multipart(t *testing.T) {
	b, _ := s3test.Bucket(t)
	data := randomBytes(multipartThreshold+12345, 2)
	wantParts := (len(data) + partSize - 1) / partSize
	w, err := b.NewWriter(ctxFor(t), "shared/0/big.sst", &blob.WriterOptions{BufferSize: partSize, MaxConcurrency: 2})
	if err != nil {
		t.Fatalf("new writer: %v", err)
	}
	// Write in odd-sized chunks, as an SST upload from a file would.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 777_777)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatalf("write: %v", err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close writer: %v", err)
	}
	attrs, err := b.Attributes(ctxFor(t), "shared/0/big.sst")
	if err != nil {
		t.Fatalf("attributes: %v", err)
	}
	// S3 gives a multipart object the ETag "<md5 of the part md5s>-<parts>".
	if attrs.Size != int64(len(data)) || !strings.HasSuffix(strings.Trim(attrs.ETag, `"`), fmt.Sprintf("-%d", wantParts)) {
		t.Fatalf("size %d (want %d), etag %s (want a %d-part multipart ETag)", attrs.Size, len(data), attrs.ETag, wantParts)
	}
	t.Logf("%d bytes in %d parts, ETag %s", attrs.Size, wantParts, attrs.ETag)
	if got := get(t, b, "shared/0/big.sst"); sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(data))
	}
	rd, err := b.NewRangeReader(ctxFor(t), "shared/0/big.sst", partSize-100, 200, nil)
	if err != nil {
		t.Fatalf("range across a part boundary: %v", err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(got, data[partSize-100:partSize+100]) {
		t.Fatalf("range across a part boundary: %d bytes, err %v", len(got), err)
	}
}

// TestS3ConditionalPut: a put with If-None-Match: * (blob.WriterOptions
// IfNotExist) creates the key once; a second one fails with
// FailedPrecondition and leaves the first content. This is how the
// coordinator writes _metadata (DESIGN.md section 7).
func TestS3ConditionalPut(t *testing.T) {
	b, _ := s3test.Bucket(t)
	ifNotExist := &blob.WriterOptions{IfNotExist: true}
	put(t, b, "job/chk-7/_metadata", []byte("first"), ifNotExist)
	err := b.WriteAll(ctxFor(t), "job/chk-7/_metadata", []byte("second"), ifNotExist)
	if err == nil {
		t.Fatal("second conditional put succeeded; it must fail")
	}
	if code := gcerrors.Code(err); code != gcerrors.FailedPrecondition {
		t.Fatalf("second conditional put: %v (code %v), want FailedPrecondition", err, code)
	}
	t.Logf("second conditional put fails as it must: %v", err)
	if got := get(t, b, "job/chk-7/_metadata"); string(got) != "first" {
		t.Fatalf("after the refused put the object holds %q, want %q", got, "first")
	}
	// The condition is on the key, not on the bucket: another key still works.
	put(t, b, "job/chk-8/_metadata", []byte("other"), ifNotExist)
}

// TestS3ConditionalPutRace: of writers racing to create one key with
// If-None-Match: *, exactly one wins and the object holds its content, as two
// coordinators racing to complete a checkpoint need.
func TestS3ConditionalPutRace(t *testing.T) {
	b, _ := s3test.Bucket(t)
	const writers = 8
	for round := range 3 {
		key := fmt.Sprintf("job/chk-%d/_metadata", round)
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Go(func() {
				errs[i] = b.WriteAll(ctxFor(t), key, []byte(fmt.Sprintf("writer %d", i)), &blob.WriterOptions{IfNotExist: true})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both succeeded", round, winner, i)
			case err == nil:
				winner = i
			case gcerrors.Code(err) != gcerrors.FailedPrecondition:
				t.Fatalf("round %d: writer %d: %v (code %v), want FailedPrecondition", round, i, err, gcerrors.Code(err))
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer succeeded", round)
		}
		if got, want := string(get(t, b, key)), fmt.Sprintf("writer %d", winner); got != want {
			t.Fatalf("round %d: object holds %q, winner wrote %q", round, got, want)
		}
	}
}

// TestS3ConditionalPutMultipart: If-None-Match: * also holds for an object
// large enough to go up in parts; the SDK sends the condition with
// CompleteMultipartUpload.
func TestS3ConditionalPutMultipart(t *testing.T) {
	b, _ := s3test.Bucket(t)
	opts := &blob.WriterOptions{IfNotExist: true, BufferSize: partSize}
	first := randomBytes(multipartThreshold+1, 3)
	put(t, b, "job/savepoints/s1/big", first, opts)
	err := b.WriteAll(ctxFor(t), "job/savepoints/s1/big", randomBytes(multipartThreshold+1, 4), opts)
	if code := gcerrors.Code(err); err == nil || code != gcerrors.FailedPrecondition {
		t.Fatalf("second multipart conditional put: %v (code %v), want FailedPrecondition", err, code)
	}
	if got := get(t, b, "job/savepoints/s1/big"); !bytes.Equal(got, first) {
		t.Fatal("the refused multipart put changed the object")
	}
}

// TestS3ConditionalPutLargeSingle: a refused conditional PutObject of a few
// MiB must not overwrite either. The server answers 412 before it has read
// the body and closes the connection, so the client may see a reset instead
// of the 412 (docs/testing.md, quirks): only "failed, unchanged" is asserted.
func TestS3ConditionalPutLargeSingle(t *testing.T) {
	b, _ := s3test.Bucket(t)
	opts := &blob.WriterOptions{IfNotExist: true}
	first := randomBytes(partSize+1, 5)
	put(t, b, "job/chk-9/_metadata", first, opts)
	err := b.WriteAll(ctxFor(t), "job/chk-9/_metadata", randomBytes(partSize+1, 6), opts)
	if err == nil {
		t.Fatal("second conditional put succeeded; it must fail")
	}
	t.Logf("second conditional put of %d bytes failed with code %v: %v", partSize+1, gcerrors.Code(err), err)
	if got := get(t, b, "job/chk-9/_metadata"); !bytes.Equal(got, first) {
		t.Fatal("the refused put changed the object")
	}
}

// TestS3URL: the URL from Bucket opens the same bucket and prefix with
// blob.OpenBucket, and the prefix keeps tests apart.
func TestS3URL(t *testing.T) {
	b, u := s3test.Bucket(t)
	ctx := ctxFor(t)
	put(t, b, "via-helper", []byte("1"), nil)

	b2, err := blob.OpenBucket(ctx, u)
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	defer b2.Close()
	if got, err := b2.ReadAll(ctx, "via-helper"); err != nil || string(got) != "1" {
		t.Fatalf("read through the URL: %q, %v", got, err)
	}

	other, _ := s3test.Bucket(t)
	if ok, err := other.Exists(ctx, "via-helper"); err != nil || ok {
		t.Fatalf("another Bucket sees this test's key: exists=%v err=%v", ok, err)
	}

	root, ok := s3test.URLFromEnv()
	if !ok {
		t.Fatal("URLFromEnv: not set, yet Bucket found the server")
	}
	rb, err := blob.OpenBucket(ctx, root)
	if err != nil {
		t.Fatalf("open %s: %v", root, err)
	}
	defer rb.Close()
	prefix := mustPrefix(t, u)
	if got, err := rb.ReadAll(ctx, prefix+"via-helper"); err != nil || string(got) != "1" {
		t.Fatalf("read %s through the root URL: %q, %v", prefix+"via-helper", got, err)
	}
}

func mustPrefix(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse %s: %v", u, err)
	}
	p := pu.Query().Get("prefix")
	if p == "" {
		t.Fatalf("URL %s has no prefix", u)
	}
	return p
}
