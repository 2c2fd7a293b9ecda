package e2e

import (
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// Sizes of the two-stage run (issue 12): clicks keyed by user, counted per
// page, so that every record crosses the shuffle topic.
const (
	pages           = 500
	downstreamTasks = 6
)

// TestExactlyOnceTwoStage is the promise across a shuffle: the YAML job
// views-per-page (source → key_by page → count → exactly-once sink), its
// downstream stage of six tasks reading a job-owned shuffle topic, run by
// three replicas that are killed with SIGKILL and rescaled, counts every
// click exactly once per page. The independent verifier checks each
// page's committed counts are exactly 1..N in order, the checkpoint IDs
// only increased, no transaction is left open, and the shuffle topic was
// purged (log start offsets above 0).
func TestExactlyOnceTwoStage(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	// The stage after the key_by is named by its first keyed operator,
	// the aggregate's count (docs/shuffles.md), and its shuffle topic has
	// the default max_parallelism of partitions. The input's second half
	// arrives over about 40s, so that the kills and both rescalings meet
	// records in flight in both stages.
	exactlyOnce(t, c, secured{}, shape{name: "views-per-page", keyBy: "page", parallelism: downstreamTasks, pages: pages,
		stage: "count", keyGroups: 128, pause: 2 * time.Second}, records(), 5)
}
