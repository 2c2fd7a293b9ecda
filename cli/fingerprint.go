package cli

import (
	"encoding/json"

	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/stream"
)

// jobFingerprint is the fingerprint of the job a replica runs
// (compat.Fingerprint): its job section (without positions in the file,
// comments or secrets) and the graph it builds, which a Go job's code or
// another version of Weir may change for one job file.
func jobFingerprint(cfg *config.Config, job *stream.Job) (string, error) {
	if err := job.Build(); err != nil {
		return "", err
	}
	graph, err := json.Marshal(job.Graph())
	if err != nil {
		return "", err
	}
	return compat.FingerprintOf(cfg.Job, graph)
}
