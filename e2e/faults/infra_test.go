package faults

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestFaultBrokerRestart: the broker is stopped and started again (on its
// kept log directory) while the job runs and input is produced. A broker of
// the scenario's own: the shared one serves other tests.
func TestFaultBrokerRestart(t *testing.T) {
	k := startOwnKafka(t)
	s := newScenario(t, k.Cluster, "broker_restart", scenarioOptions{})
	s.startReplicas(2)
	s.waitOutput(2*rate, 2*time.Minute)

	down := time.Now()
	k.down()
	t.Logf("broker stopped in %.1f s", time.Since(down).Seconds())
	time.Sleep(5 * time.Second)
	k.up()
	up := time.Now()
	t.Logf("broker up again after %.1f s", up.Sub(down).Seconds())
	s.checkStalled(down, up, 5*time.Second)

	s.result("recovery", s.recovered(up, 3*time.Minute))
	s.waitOutput(2*rate, 2*time.Minute)
	s.finish()
}

// storageOutage is how long object storage is unavailable.
const storageOutage = 30 * time.Second

// TestFaultStorageOutage: object storage is unavailable for 30 seconds while
// the job runs: for file://, the storage directory is replaced by a regular
// file (so that every read and write fails, for root too, which chmod would
// not stop); for s3://, the scenario's own S3 server is stopped.
//
// The two run at once (CI's time budget): each has its own job, replicas
// and store (the s3 one its own server), on the shared broker.
func TestFaultStorageOutage(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.NewReal(t)
		s := newScenario(t, c, "storage_file", scenarioOptions{})
		root := filepath.Join(s.dir, "checkpoints") // e2etest's default checkpoint.storage
		s.startReplicas(2)
		s.waitOutput(2*rate, 2*time.Minute)

		aside := root + ".away"
		if err := os.Rename(root, aside); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(root, []byte("object storage is down\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// Check that the outage is real for this process (root): nothing
		// can be written or created under the storage root.
		err := os.MkdirAll(filepath.Join(root, s.job.Name, "probe"), 0o700)
		if !errors.Is(err, syscall.ENOTDIR) {
			t.Fatalf("storage outage not effective: mkdir under %s: %v (want ENOTDIR)", root, err)
		}
		time.Sleep(storageOutage - time.Since(start))
		if err := os.Remove(root); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(aside, root); err != nil {
			t.Fatal(err)
		}
		end := time.Now()
		t.Logf("storage unavailable for %.1f s", end.Sub(start).Seconds())
		s.checkStalled(start, end, 5*time.Second)

		s.result("recovery", s.recovered(end, 3*time.Minute))
		s.waitOutput(2*rate, 2*time.Minute)
		s.finish()
	})
	t.Run("s3", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.NewReal(t)
		srv := startOwnS3(t)
		prefix := kafkatest.Name(t, "faults")
		s := newScenario(t, c, "storage_s3", scenarioOptions{})
		s.reps.SetStorage(srv.url(prefix), srv.credentials()...)
		s.startReplicas(2)
		s.waitOutput(2*rate, 2*time.Minute)

		start := time.Now()
		srv.down()
		time.Sleep(storageOutage - time.Since(start))
		srv.up()
		end := time.Now()
		t.Logf("S3 server down for %.1f s", end.Sub(start).Seconds())
		s.checkStalled(start, end, 5*time.Second)

		s.result("recovery", s.recovered(end, 3*time.Minute))
		s.waitOutput(2*rate, 2*time.Minute)
		s.finish()
	})
}
