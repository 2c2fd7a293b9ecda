package faults

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// sessionTimeout is kafka.session_timeout of every scenario's job
// (e2etest.Job's default).
const sessionTimeout = 6 * time.Second

// TestFaultReplicaPaused: the coordinator's replica is SIGSTOPped for longer
// than the session timeout while input flows, then resumed. The others take
// its tasks and the coordinator role over; when it wakes up, its late
// triggers, completes, acks and transactions belong to a fenced producer or
// an older generation and must change nothing.
func TestFaultReplicaPaused(t *testing.T) {
	c := kafkatest.NewReal(t)
	s := newScenario(t, c, "replica_paused", scenarioOptions{})
	s.startReplicas(3)
	victim, err := s.reps.Coordinator(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gens := len(s.commits.Records("generation"))

	s.reps.Signal(victim, syscall.SIGSTOP)
	paused := time.Now()
	t.Logf("SIGSTOP replica %s (the coordinator)", victim)
	time.Sleep(sessionTimeout + 9*time.Second)
	if got := len(s.commits.Records("generation")); got <= gens {
		t.Errorf("no new generation while %s was paused past the session timeout", victim)
	}
	if d, err := s.ver.WaitAdvance(paused, time.Millisecond); err == nil {
		t.Logf("committed output advanced %.1f s after the pause began (the others took over)", d.Seconds())
	}
	s.reps.Signal(victim, syscall.SIGCONT)
	resumed := time.Now()
	t.Logf("SIGCONT replica %s after %.1f s", victim, resumed.Sub(paused).Seconds())

	s.result("recovery", s.recovered(resumed, 2*time.Minute))
	// The zombie finds its session gone and joins again, which starts a
	// generation; run on with it back among the replicas.
	s.waitGeneration(resumed, time.Minute)
	s.waitOutput(2*rate, 2*time.Minute)
	select {
	case <-s.reps.Proc(victim).Done():
		t.Errorf("replica %s exited after it was resumed: %v", victim, s.reps.Proc(victim).Err())
	default:
	}
	s.finish()
}

// TestFaultCoordinatorKilled: the coordinator's replica is killed with
// SIGKILL five times, and restarted each time; kills 1, 3 and 5 come right
// after a `complete` record appears on the commit topic (seen by a raw
// consumer), before the replicas' sinks can have committed that checkpoint.
func TestFaultCoordinatorKilled(t *testing.T) {
	c := kafkatest.NewReal(t)
	s := newScenario(t, c, "coordinator_killed", scenarioOptions{})
	s.startReplicas(3)
	completes := s.commits.Subscribe()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 10))
	var worst time.Duration
	for i := range 5 {
		victim, err := s.reps.Coordinator(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		how := "at a random moment"
		if i%2 == 0 {
			// Drop what is queued, then kill on the next complete.
			for len(completes) > 0 {
				<-completes
			}
			deadline := time.After(time.Minute)
		wait:
			for {
				select {
				case r := <-completes:
					if r.Type == "complete" {
						how = "right after complete " + r.Raw
						break wait
					}
				case <-deadline:
					t.Fatal("no checkpoint completed within a minute")
				}
			}
		} else {
			time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
		}
		s.reps.Kill(victim)
		t.Logf("kill %d: SIGKILL coordinator %s %s", i+1, victim, how)
		time.Sleep(time.Second)
		s.reps.Restart(victim)
		restarted := time.Now()
		d := s.recovered(restarted, 2*time.Minute)
		t.Logf("kill %d: committed output advanced %.1f s after the restart", i+1, d.Seconds())
		worst = max(worst, d)
		s.waitOutput(rate, 2*time.Minute)
	}
	s.result("recovery", worst)
	s.finish()
}
