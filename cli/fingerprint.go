package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/stream"
)

// jobFingerprint identifies the job file a replica runs (replica.Options
// Fingerprint): replicas whose fingerprints differ never run tasks of one
// generation (docs/membership.md). It is the first 16 hex digits of a
// SHA-256 over the job section as configured (cfg.Job, as JSON) and the
// built job's graph (its operators and stages, for a job defined in Go).
// Settings outside the job section (the replica's ID, its state
// directory, Kafka's addresses) do not change it.
func jobFingerprint(cfg *config.Config, job *stream.Job) string {
	h := sha256.New()
	// Neither fails: both are plain data (strings, numbers, slices,
	// pointers to structs); an error would only make the digest cover
	// less.
	if b, err := json.Marshal(cfg.Job); err == nil {
		h.Write(b)
	}
	if b, err := json.Marshal(job.Graph()); err == nil {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
