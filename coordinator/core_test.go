package coordinator

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

func testConfig() Config {
	return Config{Interval: 10 * time.Second, Timeout: time.Minute, MaxConcurrent: 1, TolerableFailures: 5,
		Retained: 1, Random: fixedSource(0)}
}

// running returns a core whose generation 1 of tasks runs.
func runningCore(t testing.TB, cfg Config, tasks ...control.TaskID) *Core {
	c, err := New(cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(Assign{Assignment: control.Assignment{"r0": tasks}}); err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if err := c.Step(TaskRunning{Gen: 1, Task: task}); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(c.Ready())
	return c
}

var a0, a1 = control.TaskID{Stage: "a", Index: 0}, control.TaskID{Stage: "a", Index: 1}

func TestAdvanceKeepsLaterEvents(t *testing.T) {
	c := runningCore(t, testConfig(), a0, a1)
	c.Tick(t0)
	rd := c.Ready()
	if len(rd.Records) != 1 || rd.Records[0].Type() != control.TypeTrigger {
		t.Fatalf("want one trigger, got %v", rd.Records)
	}
	// Stepped after Ready, before Advance: must survive Advance.
	if err := c.Step(Decline{control.Decline{ID: 1, Gen: 1, Task: a0, Reason: "x"}}); err != nil {
		t.Fatal(err)
	}
	c.Advance(rd)
	if !c.HasReady() {
		t.Fatal("the abort stepped after Ready was lost by Advance")
	}
	rd2 := c.Ready()
	if len(rd2.Records) != 1 || rd2.Records[0].Type() != control.TypeAbort || len(rd2.Outcomes) != 1 ||
		rd2.Metrics.Failed != 1 || rd2.Metrics.Triggered != 0 {
		t.Fatalf("second Ready: %+v", rd2)
	}
	// The first Ready's slices are not changed by later events.
	if rd.Records[0].Type() != control.TypeTrigger || len(rd.Records) != 1 {
		t.Fatal("an earlier Ready changed")
	}
	c.Advance(rd2)
	if c.HasReady() {
		t.Fatalf("HasReady after everything was advanced: %+v", c.Ready())
	}
}

func TestUnknownEvent(t *testing.T) {
	c := runningCore(t, testConfig(), a0)
	type bogus struct{ Event }
	if err := c.Step(bogus{}); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("Step(bogus) = %v", err)
	}
	if err := c.Step(RequestSavepoint{Kind: ckpt.KindCheckpoint}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("savepoint of kind checkpoint: %v", err)
	}
}

func TestTimeNeverGoesBack(t *testing.T) {
	c := runningCore(t, testConfig(), a0)
	c.Tick(t0.Add(time.Minute))
	c.Tick(t0) // ignored
	if !c.Now().Equal(t0.Add(time.Minute)) {
		t.Fatalf("now went back to %v", c.Now())
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := testConfig()
	cfg.Random = nil
	cfg.Retained = 0
	_, err := New(cfg, t0)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("New = %v", err)
	}
	for _, want := range []string{"random source is nil", "retained 0"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestRestoreRejectsImpossibleHistory(t *testing.T) {
	gen := func(g uint64) control.Generation {
		return control.Generation{Gen: g, Assignment: control.Assignment{"r": {a0}}}
	}
	for name, h := range map[string][]control.Message{
		"generation goes back":    {gen(2), gen(2)},
		"invalid record":          {control.Trigger{ID: 0, Gen: 1, Kind: ckpt.KindCheckpoint}},
		"running is not replayed": {gen(1), control.Running{Gen: 1, Task: a0}},
	} {
		if _, err := Restore(testConfig(), t0, h); !errors.Is(err, ErrHistory) {
			t.Errorf("%s: Restore = %v, want ErrHistory", name, err)
		}
	}
}

// TestRestoreNeverReusesIDs: whatever the newest trigger-topic record is,
// the next ID is above every ID used.
func TestRestoreNeverReusesIDs(t *testing.T) {
	commit := []control.Message{
		control.Generation{Gen: 1, Assignment: control.Assignment{"r": {a0}}},
		control.Complete{ID: 4, Gen: 1, TS: 1, Kind: ckpt.KindCheckpoint, Metadata: "m4"},
	}
	for _, tc := range []struct {
		last control.Message
		want ckpt.ID
	}{
		{nil, 5},
		{control.Trigger{ID: 9, Gen: 1, TS: 1, Kind: ckpt.KindCheckpoint}, 10},
		{control.Abort{ID: 5, Gen: 1, Reason: control.AbortExpired, Last: 12}, 13},
		{control.Trigger{ID: 3, Gen: 1, TS: 1, Kind: ckpt.KindSavepoint}, 5},
	} {
		h := commit
		if tc.last != nil {
			h = append(h[:len(h):len(h)], tc.last)
		}
		c, err := Restore(testConfig(), t0, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Step(Assign{Assignment: control.Assignment{"r": {a0}}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Step(TaskRunning{Gen: 2, Task: a0}); err != nil {
			t.Fatal(err)
		}
		c.Tick(t0.Add(time.Hour))
		var got ckpt.ID
		for _, r := range c.Ready().Records {
			if tr, ok := r.(control.Trigger); ok {
				got = tr.ID
			}
			if g, ok := r.(control.Generation); ok && g.RestoreFrom != 4 {
				t.Errorf("generation restores from %d, want 4", g.RestoreFrom)
			}
		}
		if got != tc.want {
			t.Errorf("after %v: next trigger %d, want %d", tc.last, got, tc.want)
		}
	}
}

// TestLateAckBeyondRecentWindow: the core remembers the outcome of the last
// 16 checkpoints. An ack for an older one that completed is a DUPLICATE
// while the checkpoint is retained, and DISCARDED (its state deleted) once
// it is released: nothing can need it then.
func TestLateAckBeyondRecentWindow(t *testing.T) {
	for _, retained := range []int{1, 30} {
		cfg := testConfig()
		cfg.Retained = retained
		c := runningCore(t, cfg, a0)
		now := t0
		for id := ckpt.ID(1); id <= 20; id++ {
			now = now.Add(10 * time.Second)
			c.Tick(now)
			if err := c.Step(Acknowledge{control.Ack{ID: id, Gen: 1, Task: a0, Handle: "h"}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Step(MetadataWritten{ID: id, Location: "m"}); err != nil {
				t.Fatal(err)
			}
		}
		if len(c.recent) != recentSize {
			t.Fatalf("recent holds %d", len(c.recent))
		}
		c.Advance(c.Ready())
		if err := c.Step(Acknowledge{control.Ack{ID: 1, Gen: 1, Task: a0, Handle: "late"}}); err != nil {
			t.Fatal(err)
		}
		rd := c.Ready()
		want := AckDiscarded
		if retained == 30 {
			want = AckDuplicate
		}
		if got := rd.Outcomes[0].Result; got != want {
			t.Errorf("retained=%d: late ack for 1 is %s, want %s", retained, got, want)
		}
		if discarded := len(rd.Discards) == 1; discarded != (want == AckDiscarded) {
			t.Errorf("retained=%d: discards %v", retained, rd.Discards)
		}
	}
}

// TestMetadataRead: after a Restore from the topics, a retained
// checkpoint's shuffle positions are unknown until its _metadata is read;
// metadata that breaks the protocol is refused, metadata of a checkpoint
// not retained changes nothing, and Restore replays metadata as MetadataRead
// does.
func TestMetadataRead(t *testing.T) {
	history := []control.Message{
		control.Generation{Gen: 1, Assignment: control.Assignment{"r": {a0}}},
		control.Complete{ID: 4, Gen: 1, TS: 1, Kind: ckpt.KindCheckpoint, Metadata: "m4"},
	}
	c, err := Restore(testConfig(), t0, history)
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Status().Completed[0]; k.ShuffleKnown {
		t.Fatalf("positions known without _metadata: %+v", k)
	}
	bad := control.Metadata{ID: 4, Gen: 1, Kind: ckpt.KindCheckpoint, TS: 1, Tasks: []control.TaskState{
		{Task: a0, Handle: "h", Shuffle: []control.Position{{Topic: "s", Partition: 0, Offset: -1}}}}}
	if err := c.Step(MetadataRead{Metadata: bad}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("invalid metadata: %v, want ErrInvalidEvent", err)
	}
	other := control.Metadata{ID: 3, Gen: 1, Kind: ckpt.KindCheckpoint, TS: 1, Tasks: []control.TaskState{{Task: a0, Handle: "h"}}}
	if err := c.Step(MetadataRead{Metadata: other}); err != nil || c.Status().Completed[0].ShuffleKnown {
		t.Fatalf("metadata of checkpoint 3 (not retained): err %v, status %+v", err, c.Status().Completed)
	}
	md := control.Metadata{ID: 4, Gen: 1, Kind: ckpt.KindCheckpoint, TS: 1, Tasks: []control.TaskState{
		{Task: a0, Handle: "h", Shuffle: []control.Position{{Topic: "s", Partition: 0, Offset: 9}, {Topic: "s", Partition: 1, Offset: 3}}}}}
	if err := c.Step(MetadataRead{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	want := CompletedStatus{ID: 4, Kind: ckpt.KindCheckpoint, Metadata: "m4", ShuffleKnown: true,
		Shuffle: []control.Position{{Topic: "s", Partition: 0, Offset: 9}, {Topic: "s", Partition: 1, Offset: 3}}}
	if got := c.Status().Completed[0]; !reflect.DeepEqual(got, want) {
		t.Fatalf("after MetadataRead: %+v, want %+v", got, want)
	}
	replayed, err := Restore(testConfig(), t0, append(history, md))
	if err != nil {
		t.Fatal(err)
	}
	if diff := durableDiff(c, replayed); diff != "" {
		t.Fatalf("Restore with the metadata differs from MetadataRead: %s", diff)
	}
}
