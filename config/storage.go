package config

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// storageScheme is what checkpoint.storage accepts for one URL scheme: the
// query parameters of gocloud.dev/blob's URL opener for it (v0.47.0:
// s3blob.URLOpener with aws.V2ConfigFromURLParams, gcsblob.URLOpener,
// azureblob.URLOpener, fileblob.URLOpener, memblob.URLOpener, and the
// "prefix" every opener takes), and which of them are booleans. The openers
// refuse unknown parameters only when the bucket is opened, and s3's not
// even then for some; checking here lets `processor validate` say so.
type storageScheme struct {
	what   string // "bucket", "container", "path"
	params []string
	bools  []string
}

var storageSchemes = map[string]storageScheme{
	"s3": {what: "bucket",
		params: []string{"region", "endpoint", "use_path_style", "s3ForcePathStyle", "disable_https", "profile",
			"anonymous", "role", "dualstack", "fips", "hostname_immutable", "rate_limiter_capacity",
			"request_checksum_calculation", "response_checksum_validation", "awssdk",
			"ssetype", "kmskeyid", "accelerate", "prefix"},
		bools: []string{"use_path_style", "s3ForcePathStyle", "disable_https", "anonymous", "dualstack", "fips", "hostname_immutable", "accelerate"}},
	"gs": {what: "bucket",
		params: []string{"access_id", "private_key_path", "anonymous", "universe_domain", "grpc", "zonal", "prefix"},
		bools:  []string{"anonymous", "grpc", "zonal"}},
	"azblob": {what: "container",
		params: []string{"storage_account", "domain", "protocol", "cdn", "localemu", "prefix"},
		bools:  []string{"cdn", "localemu"}},
	"file": {what: "path",
		params: []string{"create_dir", "no_tmp_dir", "dir_file_mode", "metadata", "base_url", "secret_key_path", "prefix"}},
	"mem": {params: []string{"nomd5", "prefix"}},
}

// validateStorage checks the checkpoint.storage URL: a known scheme, a
// bucket (container, path), and query parameters that scheme knows, with
// valid boolean values.
func validateStorage(v *validator, raw string) {
	const key = "checkpoint.storage"
	schemes := slices.Sorted(func(yield func(string) bool) {
		for s := range storageSchemes {
			if !yield(s) {
				return
			}
		}
	})
	u, err := url.Parse(raw)
	if err != nil || raw == "" {
		v.add(key, "%q is not a URL: write file:///path, s3://bucket?region=…, gs://bucket or azblob://container", raw)
		return
	}
	if u.Scheme == "" {
		v.add(key, "%q has no scheme: %s", raw, schemeHint(raw))
		return
	}
	sch, ok := storageSchemes[u.Scheme]
	if !ok {
		msg := fmt.Sprintf("%q: scheme %q is not one of %s", raw, u.Scheme, strings.Join(schemes, ", "))
		if s := suggest(u.Scheme, schemes); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		v.add(key, "%s", msg)
		return
	}
	switch {
	case sch.what == "path" && (u.Path == "" || u.Path == "/"):
		v.add(key, "%q: no directory: write file:///absolute/path", raw)
	case sch.what == "path" && u.Host != "" && u.Host != "localhost":
		v.add(key, "%q: %q would be a host: write file:///%s%s (three slashes) for a local directory", raw, u.Host, u.Host, u.Path)
	case sch.what != "path" && sch.what != "" && u.Host == "":
		v.add(key, "%q: no %s: write %s://<%s>", raw, sch.what, u.Scheme, sch.what)
	case sch.what != "path" && sch.what != "" && strings.Trim(u.Path, "/") != "":
		v.add(key, "%q: %s ignores the path %q: write %s://%s?prefix=%s/ to keep checkpoints under it", raw, u.Scheme, u.Path, u.Scheme, u.Host, strings.Trim(u.Path, "/"))
	}
	q := u.Query()
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range q {
			if !yield(p) {
				return
			}
		}
	}) {
		if !slices.Contains(sch.params, p) {
			msg := fmt.Sprintf("%q: query parameter %q is not one %s takes", raw, p, u.Scheme)
			if s := suggest(p, sch.params); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			v.add(key, "%s; it takes %s", msg, strings.Join(sch.params, ", "))
			continue
		}
		if len(q[p]) > 1 {
			v.add(key, "%q: query parameter %q is given %d times", raw, p, len(q[p]))
		}
		if slices.Contains(sch.bools, p) {
			if _, err := strconv.ParseBool(q.Get(p)); err != nil {
				v.add(key, "%q: %s=%q: want true or false", raw, p, q.Get(p))
			}
		}
	}
}

// schemeHint says how to write a checkpoint.storage value given without a
// scheme: an absolute path becomes its file:// URL; anything else may be a
// relative directory or a bucket's name, and both are shown.
func schemeHint(raw string) string {
	if strings.HasPrefix(raw, "/") {
		return fmt.Sprintf("for a local directory write file://%s", raw)
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(raw, "./"), "/")
	return fmt.Sprintf("for a local directory write file:///absolute/path (absolute, three slashes); for a bucket s3://%s?region=…, gs://%s or azblob://%s", name, name, name)
}
