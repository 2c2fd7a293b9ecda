package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/state"
)

// TestCheckpointerScripts runs the scripts of testdata/checkpointer: the
// task's checkpoint part with scripted outputs, state and acks, no Kafka and
// no goroutines (an asynchronous part runs when the script says `run`).
//
//	new sinks=(a,b:3) [job-sinks=N] shuffles=(s) [watermarks]
//	barrier id=N [kind=K target=T] [delay=D] [fail-precommit=O] [fail-snapshot]
//	run id=N [fail-flush=O] [fail-upload]
//	abort id=N
//	complete id=N [fail=O]
//	stop
//	running
func TestCheckpointerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/checkpointer", func(t *testing.T, path string) {
		var h *ckptHarness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				h = newCkptHarness(t, d)
				return "ok\n"
			}
			if h == nil {
				t.Fatalf("%s: new first", d.Pos)
			}
			return h.run(t, d)
		})
	})
}

var ckptT0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

type ckptHarness struct {
	c      *checkpointer
	cancel context.CancelFunc
	outs   []*fakeOutput
	st     *fakeState
	events []string
	// queued are the spawned asynchronous parts not run yet, by checkpoint.
	queued map[ckpt.ID]func()
	// spawning is the checkpoint whose barrier is being handled.
	spawning ckpt.ID
}

func (h *ckptHarness) log(format string, args ...any) {
	h.events = append(h.events, fmt.Sprintf(format, args...))
}

func newCkptHarness(t *testing.T, d *datadriven.TestData) *ckptHarness {
	h := &ckptHarness{queued: map[ckpt.ID]func(){}}
	var sinks, shuffles []string
	if d.HasArg("sinks") {
		d.ScanArgs(t, "sinks", &sinks)
	}
	if d.HasArg("shuffles") {
		d.ScanArgs(t, "shuffles", &shuffles)
	}
	// A sink is "name" (its index in the job: its rank) or "name:index";
	// job-sinks is the number of the job's sinks (default: the task's).
	jobSinks := len(sinks)
	d.MaybeScanArgs(t, "job-sinks", &jobSinks)
	var outs []output
	for i, name := range sinks {
		if n, idx, ok := strings.Cut(name, ":"); ok {
			var err error
			if name, i = n, 0; idx != "" {
				_, err = fmt.Sscan(idx, &i)
			}
			if err != nil {
				t.Fatalf("%s: sink %q: %v", d.Pos, name, err)
			}
		}
		o := &fakeOutput{h: h, name: name, sink: true, index: i}
		h.outs, outs = append(h.outs, o), append(outs, o)
	}
	for _, name := range shuffles {
		o := &fakeOutput{h: h, name: name}
		h.outs, outs = append(h.outs, o), append(outs, o)
	}
	h.st = &fakeState{h: h}
	cfg := checkpointerConfig{
		Task: control.TaskID{Stage: "main", Index: 0}, Gen: 3, Outputs: outs, Sinks: jobSinks,
		State: h.st, Acks: fakeAcks{h}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:          func() time.Time { return ckptT0 },
		OnStartDelay: func(d time.Duration) { h.log("start delay %v", d) },
		spawn: func(f func()) {
			h.log("async part of %d started", h.spawning)
			h.queued[h.spawning] = f
		},
	}
	if d.HasArg("watermarks") {
		cfg.Watermarks = func() *watermarkState { return &watermarkState{Current: 1764612345000} }
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.c = newCheckpointer(ctx, cfg)
	return h
}

func (h *ckptHarness) output(t *testing.T, d *datadriven.TestData, arg string) *fakeOutput {
	if !d.HasArg(arg) {
		return nil
	}
	var name string
	d.ScanArgs(t, arg, &name)
	for _, o := range h.outs {
		if o.name == name {
			return o
		}
	}
	t.Fatalf("%s: no output %q", d.Pos, name)
	return nil
}

func (h *ckptHarness) run(t *testing.T, d *datadriven.TestData) string {
	var id ckpt.ID
	if d.HasArg("id") {
		d.ScanArgs(t, "id", &id)
	}
	switch d.Cmd {
	case "barrier":
		b := ckpt.Barrier{ID: id, Kind: ckpt.KindCheckpoint}
		if d.HasArg("kind") {
			var k, target string
			d.ScanArgs(t, "kind", &k)
			d.MaybeScanArgs(t, "target", &target)
			b.Kind, b.Target = ckpt.Kind(k), target
		}
		if d.HasArg("delay") {
			var s string
			d.ScanArgs(t, "delay", &s)
			delay, err := time.ParseDuration(s)
			if err != nil {
				t.Fatal(err)
			}
			b.Timestamp = ckptT0.Add(-delay).UnixMilli()
		}
		if o := h.output(t, d, "fail-precommit"); o != nil {
			o.failPre = true
		}
		h.st.failSnapshot = d.HasArg("fail-snapshot")
		m := &mark{barrier: b, offsets: source.Offsets{"in": {0: int64(id) * 10}}, align: 5 * time.Millisecond}
		h.spawning = id
		if err := h.c.onBarrier(m); err != nil {
			h.log("error: %v", err)
		}
		h.spawning = 0
	case "run":
		f := h.queued[id]
		if f == nil {
			t.Fatalf("%s: no asynchronous part of %d to run", d.Pos, id)
		}
		delete(h.queued, id)
		for _, o := range h.outs {
			o.failFlush = false
		}
		if o := h.output(t, d, "fail-flush"); o != nil {
			o.failFlush = true
		}
		h.st.failUpload = d.HasArg("fail-upload")
		f()
	case "abort":
		h.c.abort(context.Background(), id)
	case "complete":
		for _, o := range h.outs {
			o.failComplete = false
		}
		if o := h.output(t, d, "fail"); o != nil {
			o.failComplete = true
		}
		if err := h.c.complete(context.Background(), id); err != nil {
			h.log("error: %v", err)
		}
	case "stop":
		// As Task.Stop: the task's life ends, then the checkpointer stops.
		h.cancel()
		h.c.stop()
	case "running":
		h.c.mu.Lock()
		ids := slices.Sorted(maps.Keys(h.c.mu.running))
		h.c.mu.Unlock()
		h.log("running %v", ids)
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	out := strings.Join(h.events, "\n")
	h.events = h.events[:0]
	if out == "" {
		return "(nothing)\n"
	}
	return out + "\n"
}

// fakeOutput is a scripted output: a sink (records one transaction per
// pre-commit) or a shuffle.
type fakeOutput struct {
	h                                *ckptHarness
	name                             string
	sink                             bool
	index                            int
	failPre, failFlush, failComplete bool
}

func (o *fakeOutput) String() string {
	if o.sink {
		return "sink " + o.name
	}
	return "shuffle " + o.name
}

func (o *fakeOutput) write(context.Context, *kgo.Record) error { return nil }
func (o *fakeOutput) close(context.Context) error              { return nil }
func (o *fakeOutput) abort(n ckpt.ID)                          { o.h.log("%s: abort %d", o, n) }

func (o *fakeOutput) preCommit(_ context.Context, b ckpt.Barrier) (pending, error) {
	if o.failPre {
		o.failPre = false
		return nil, errors.New("broker unreachable")
	}
	o.h.log("%s: pre-commit %s", o, b)
	return fakePending{o, b.ID}, nil
}

func (o *fakeOutput) complete(_ context.Context, n ckpt.ID) error {
	if o.failComplete {
		return errors.New("producer fenced")
	}
	o.h.log("%s: commit up to %d", o, n)
	return nil
}

type fakePending struct {
	o  *fakeOutput
	id ckpt.ID
}

func (p fakePending) wait(ctx context.Context, op *operatorState) error {
	if err := ctx.Err(); err != nil {
		p.o.h.log("%s: flush of %d: %v", p.o, p.id, err)
		return err
	}
	if p.o.failFlush {
		return errors.New("record too large")
	}
	if p.o.sink {
		hs := []sink.TxnHandle{{TransactionalID: fmt.Sprintf("%s-%d", p.o.name, p.id)}}
		op.SinkPools = append(op.SinkPools, sinkPool{Topic: p.o.name, Txns: hs})
		op.Sinks[p.o.index] = hs
	}
	return nil
}

// fakeState is the scripted state backend.
type fakeState struct {
	h                        *ckptHarness
	failSnapshot, failUpload bool
}

func (s *fakeState) Snapshot(b ckpt.Barrier) (stateSnapshot, error) {
	if s.failSnapshot {
		return nil, errors.New("disk full")
	}
	if b.Kind.IsSavepoint() {
		s.h.log("state: snapshot of %s", b)
	} else {
		s.h.log("state: snapshot %d", b.ID)
	}
	return &fakeSnap{s: s, id: b.ID}, nil
}

func (s *fakeState) NotifyComplete(_ context.Context, id ckpt.ID) error {
	s.h.log("state: complete %d", id)
	return nil
}

func (s *fakeState) NotifyAborted(_ context.Context, id ckpt.ID) error {
	s.h.log("state: abort %d", id)
	return nil
}

type fakeSnap struct {
	s  *fakeState
	id ckpt.ID
	op func(ctx context.Context) ([]byte, error)
}

func (f *fakeSnap) SetOperatorStateFunc(op func(ctx context.Context) ([]byte, error)) { f.op = op }

func (f *fakeSnap) Run(ctx context.Context) (*state.SnapshotResult, error) {
	if err := ctx.Err(); err != nil {
		f.s.h.log("state: upload of %d: %v", f.id, err)
		return nil, err
	}
	if f.s.failUpload {
		return nil, errors.New("object store: 503 slow down")
	}
	opb, err := f.op(ctx)
	if err != nil {
		return nil, err
	}
	f.s.h.log("state: manifest %d, %s", f.id, fmtOpState(opb))
	return &state.SnapshotResult{Checkpoint: f.id, Handle: fmt.Sprintf("chk-%d/main-0", f.id), StateBytes: 100, UploadedBytes: 40}, nil
}

// fmtOpState renders a task's operator state for the scripts.
func fmtOpState(b []byte) string {
	var op operatorState
	if err := json.Unmarshal(b, &op); err != nil {
		return fmt.Sprintf("operator state %q: %v", b, err)
	}
	txns := func(hs []sink.TxnHandle) string {
		if hs == nil {
			return "null"
		}
		ids := make([]string, len(hs))
		for i, h := range hs {
			ids[i] = h.TransactionalID
		}
		return "[" + strings.Join(ids, " ") + "]"
	}
	out := fmt.Sprintf("offsets %v", op.Offsets)
	if op.SinkPools != nil {
		out += "; pools"
		for _, p := range op.SinkPools {
			out += " " + p.Topic + txns(p.Txns)
		}
	}
	if op.Sinks != nil {
		out += "; by index"
		for _, hs := range op.Sinks {
			out += " " + txns(hs)
		}
	}
	if op.Watermark != nil {
		out += fmt.Sprintf("; watermark %d", op.Watermark.Current)
	}
	return out
}

type fakeAcks struct{ h *ckptHarness }

func (a fakeAcks) Send(_ context.Context, m control.Message) error {
	switch m := m.(type) {
	case control.Ack:
		a.h.log("ack %d gen %d task %s handle %s", m.ID, m.Gen, m.Task, m.Handle)
	case control.Decline:
		a.h.log("decline %d: %s", m.ID, m.Reason)
	default:
		a.h.log("sent %T", m)
	}
	return nil
}
