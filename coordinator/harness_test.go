package coordinator

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

// t0 is the time every script starts at; times print relative to it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fixedSource is a Source that always draws the same value (clamped).
type fixedSource int64

func (f fixedSource) Int64N(n int64) int64 { return min(int64(f), n-1) }

func rel(t time.Time) string { return "+" + t.Sub(t0).String() }

func relMS(ms int64) string { return rel(time.UnixMilli(ms)) }

// harness drives a Core from a datadriven script and keeps the history a
// new coordinator would read, to rebuild it.
type harness struct {
	cfg Config
	c   *Core
	// log is every record the core wrote and every ack it read, in order.
	log []control.Message
	// commit is the commit topic; lastTrigger the newest trigger-topic
	// record; acksAfter the acks read since.
	commit      []control.Message
	lastTrigger control.Message
	acksAfter   []control.Message
	// printed counts the items of the un-advanced Ready already printed.
	printed Ready
	// written are the _metadata objects the core asked for, by ID: what a
	// new coordinator reads back (read-metadata).
	written map[ckpt.ID]control.Metadata
}

func (h *harness) step(e Event) error {
	if a, ok := e.(Acknowledge); ok {
		h.log = append(h.log, a.Ack)
		h.acksAfter = append(h.acksAfter, a.Ack)
	}
	return h.c.Step(e)
}

// delta prints what the core added to its Ready since the last print, and
// logs the new records.
func (h *harness) delta() string {
	rd := h.c.Ready()
	var b strings.Builder
	for _, o := range rd.Outcomes[len(h.printed.Outcomes):] {
		fmt.Fprintf(&b, "%s %d %s gen=%d: %s\n", o.Type, o.ID, o.Task, o.Gen, o.Result)
	}
	for _, r := range rd.Records[len(h.printed.Records):] {
		h.log = append(h.log, r)
		switch topic, _ := control.TopicOf(r); topic {
		case control.TopicCommit:
			h.commit = append(h.commit, r)
		case control.TopicTrigger:
			h.lastTrigger, h.acksAfter = r, nil
		}
		fmt.Fprintf(&b, "%s\n", fmtRecord(r))
	}
	for _, m := range rd.Metadata[len(h.printed.Metadata):] {
		fmt.Fprintf(&b, "write-metadata %d %s gen=%d tasks=%d\n", m.ID, m.Kind, m.Gen, len(m.Tasks))
		if h.written == nil {
			h.written = map[ckpt.ID]control.Metadata{}
		}
		h.written[m.ID] = m
	}
	for _, n := range rd.Notifications[len(h.printed.Notifications):] {
		fmt.Fprintf(&b, "%s\n", fmtNotification(n))
	}
	for _, d := range rd.Discards[len(h.printed.Discards):] {
		fmt.Fprintf(&b, "%s\n", fmtDiscard(d))
	}
	for _, p := range rd.Purges[len(h.printed.Purges):] {
		fmt.Fprintf(&b, "purge %s\n", p)
	}
	if rd.Restart != nil && h.printed.Restart == nil {
		fmt.Fprintf(&b, "restart: %s\n", rd.Restart.Reason)
	}
	h.printed = rd
	return b.String()
}

func fmtRecord(r control.Message) string {
	switch r := r.(type) {
	case control.Trigger:
		s := fmt.Sprintf("publish trigger %d %s gen=%d at=%s", r.ID, r.Kind, r.Gen, relMS(r.TS))
		if r.Target != "" {
			s += " target=" + r.Target
		}
		if r.Request != "" {
			s += " request=" + r.Request
		}
		return s
	case control.Abort:
		return fmt.Sprintf("publish abort %d gen=%d %s last=%d (%s)", r.ID, r.Gen, r.Reason, r.Last, r.Detail)
	case control.Complete:
		return fmt.Sprintf("append complete %d %s gen=%d at=%s metadata=%s", r.ID, r.Kind, r.Gen, relMS(r.TS), r.Metadata)
	case control.Generation:
		tasks, _ := r.Assignment.Tasks()
		var ts []string
		for _, t := range tasks {
			ts = append(ts, t.String())
		}
		s := fmt.Sprintf("append generation %d restore_from=%d tasks=(%s)", r.Gen, r.RestoreFrom, strings.Join(ts, " "))
		if len(r.Skip) > 0 {
			s += " skip=(" + fmtPositions(r.Skip) + ")"
		}
		if r.Fingerprint != "" {
			s += " file=" + r.Fingerprint
		}
		if r.RestoreMetadata != "" {
			s += " restore_metadata=" + r.RestoreMetadata
		}
		if r.RestoreLocation != "" {
			s += " restore_location=" + r.RestoreLocation
		}
		if r.RestoreRequest != "" {
			s += " restore_request=" + r.RestoreRequest
		}
		return s
	case control.Stopped:
		s := fmt.Sprintf("append stopped gen=%d at=%s", r.Gen, relMS(r.TS))
		if r.Savepoint > 0 {
			s += fmt.Sprintf(" savepoint=%d metadata=%s", r.Savepoint, r.Metadata)
		}
		return s
	case control.Failed:
		s := fmt.Sprintf("append failed gen=%d task=%s cause=%s at=%s (%s)", r.Gen, r.Task, r.Cause, relMS(r.TS), r.Reason)
		if !r.Record.IsZero() {
			s += " record=" + r.Record.String()
		}
		return s
	case control.Resumed:
		return fmt.Sprintf("append resumed gen=%d skip=(%s)", r.Gen, fmtPositions(r.Skip))
	}
	return fmt.Sprintf("%#v", r)
}

func fmtPositions(ps []control.Position) string {
	var ss []string
	for _, p := range ps {
		ss = append(ss, p.String())
	}
	return strings.Join(ss, " ")
}

func fmtNotification(n Notification) string {
	if n.Completed {
		s := fmt.Sprintf("notify completed %d %s in %v acked=%d/%d state=%dB uploaded=%dB align<=%v",
			n.ID, n.Kind, n.Duration, n.Acked, n.Tasks, n.StateBytes, n.UploadedBytes, n.MaxAlign)
		if n.Stopped {
			s += " job-stopped"
		}
		return s
	}
	return fmt.Sprintf("notify aborted %d %s after %v acked=%d/%d: %s", n.ID, n.Kind, n.Duration, n.Acked, n.Tasks, n.Reason)
}

func fmtDiscard(d Discard) string {
	s := fmt.Sprintf("discard %d %s", d.ID, d.Reason)
	if len(d.Handles) > 0 {
		s += " handles=(" + strings.Join(d.Handles, " ") + ")"
	}
	if d.Metadata != "" {
		s += " metadata=" + d.Metadata
	}
	return s
}

func fmtReady(rd Ready) string {
	var b strings.Builder
	section := func(name string, n int) {
		if n > 0 {
			fmt.Fprintf(&b, "%s:\n", name)
		}
	}
	section("records", len(rd.Records))
	for i, r := range rd.Records {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, fmtRecord(r))
	}
	section("metadata", len(rd.Metadata))
	for _, m := range rd.Metadata {
		var hs []string
		for _, t := range m.Tasks {
			hs = append(hs, t.Task.String()+"="+t.Handle)
		}
		fmt.Fprintf(&b, "  chk %d %s: %s\n", m.ID, m.Kind, strings.Join(hs, " "))
	}
	section("notifications", len(rd.Notifications))
	for _, n := range rd.Notifications {
		fmt.Fprintf(&b, "  %s\n", fmtNotification(n))
	}
	section("discards", len(rd.Discards))
	for _, d := range rd.Discards {
		fmt.Fprintf(&b, "  %s\n", fmtDiscard(d))
	}
	section("purges", len(rd.Purges))
	for _, p := range rd.Purges {
		fmt.Fprintf(&b, "  below %s\n", p)
	}
	if rd.Restart != nil {
		fmt.Fprintf(&b, "restart: %s\n", rd.Restart.Reason)
	}
	m := rd.Metrics
	fmt.Fprintf(&b, "metrics: triggered=%d completed=%d failed=%d aborted=%d restarts=%d acks=%v gen=%d pending=%d last_completed=%d\n",
		m.Triggered, m.Completed, m.Failed, m.Aborted, m.Restarts, m.Acks, m.Generation, m.Pending, m.LastCompleted)
	return b.String()
}

func fmtStatus(s Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gen=%d phase=%s tasks=%d last_id=%d last_completed=%d failures=%d",
		s.Gen, s.Phase, s.Tasks, s.LastID, s.LastCompleted, s.Failures)
	if s.Scheduled {
		fmt.Fprintf(&b, " next_trigger=%s", rel(s.NextTrigger))
	}
	if s.Failed != nil {
		fmt.Fprintf(&b, " failed=(gen=%d task=%s cause=%s)", s.Failed.Gen, s.Failed.Task, s.Failed.Cause)
	}
	if len(s.Skip) > 0 {
		fmt.Fprintf(&b, " skip=(%s)", fmtPositions(s.Skip))
	}
	if s.GCBacklog > 0 || s.HeldByGC {
		fmt.Fprintf(&b, " gc_backlog=%d held_by_gc=%v", s.GCBacklog, s.HeldByGC)
	}
	b.WriteString("\n")
	for _, p := range s.Pending {
		fmt.Fprintf(&b, "pending %d %s remaining=%d expires=%s", p.ID, p.Kind, p.Remaining, rel(p.Deadline))
		if p.Finalizing {
			b.WriteString(" finalizing")
		}
		b.WriteString("\n")
	}
	for _, k := range s.Completed {
		fmt.Fprintf(&b, "retained %d %s %s", k.ID, k.Kind, k.Metadata)
		switch {
		case !k.ShuffleKnown:
			b.WriteString(" shuffle=unknown")
		case len(k.Shuffle) > 0:
			fmt.Fprintf(&b, " shuffle=(%s)", fmtPositions(k.Shuffle))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func parseTask(t *testing.T, s string) control.TaskID {
	id, err := control.ParseTaskID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func argDuration(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	if a, ok := d.Arg(key); ok {
		v, err := time.ParseDuration(a.SingleVal(t))
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return v
	}
	return def
}

func argInt(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if a, ok := d.Arg(key); ok {
		v, err := strconv.Atoi(a.SingleVal(t))
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return v
	}
	return def
}

func argString(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func errOut(err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return ""
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	if h.c == nil && d.Cmd != "new" {
		t.Fatalf("%s: first command must be new", d.Pos)
	}
	switch d.Cmd {
	case "new":
		h.cfg = Config{
			Interval:          argDuration(t, d, "interval", 10*time.Second),
			Timeout:           argDuration(t, d, "timeout", time.Minute),
			MinPause:          argDuration(t, d, "min_pause", 0),
			MaxConcurrent:     argInt(t, d, "max_concurrent", 1),
			TolerableFailures: argInt(t, d, "tolerable", 0),
			Retained:          argInt(t, d, "retained", 1),
			Random:            fixedSource(argDuration(t, d, "jitter", 0)),
		}
		c, err := New(h.cfg, t0)
		if err != nil {
			return errOut(err)
		}
		*h = harness{cfg: h.cfg, c: c}
		return "ok\n"

	case "assign":
		ev := Assign{Assignment: control.Assignment{}}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			replica, tasks, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			ts := []control.TaskID{}
			for _, f := range strings.Fields(tasks) {
				ts = append(ts, parseTask(t, f))
			}
			ev.Assignment[strings.TrimSpace(replica)] = ts
		}
		if d.HasArg("file") {
			d.ScanArgs(t, "file", &ev.Fingerprint)
		}
		if a, ok := d.Arg("unplaced"); ok {
			for _, v := range a.Vals {
				ev.Unplaced = append(ev.Unplaced, parseTask(t, v))
			}
		}
		if req := argString(d, "restore", ""); req != "" {
			// processor run --restore-from <req>: a savepoint or
			// checkpoint outside the job's sequence.
			loc, _, _ := strings.Cut(req, "#")
			ev.Restore = &RestorePoint{Request: req, Location: loc, ID: ckpt.ID(argInt(t, d, "restore_id", 0)),
				Metadata: argString(d, "restore_metadata", "_metadata")}
		}
		err := h.step(ev)
		return errOut(err) + h.delta()

	case "running":
		gen := uint64(argInt(t, d, "gen", int(h.c.gen)))
		tasks := h.c.tasks
		if a, ok := d.Arg("task"); ok {
			tasks = nil
			for _, v := range a.Vals {
				tasks = append(tasks, parseTask(t, v))
			}
		}
		for _, task := range slices.Clone(tasks) {
			if err := h.step(TaskRunning{Gen: gen, Task: task}); err != nil {
				return errOut(err)
			}
		}
		return h.delta() + fmt.Sprintf("phase=%s\n", h.c.phase)

	case "tick":
		now := h.c.Now()
		for _, a := range d.CmdArgs {
			if strings.HasPrefix(a.Key, "+") {
				dur, err := time.ParseDuration(a.Key[1:])
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				now = now.Add(dur)
			}
		}
		h.c.Tick(now)
		return fmt.Sprintf("now=%s\n", rel(h.c.Now())) + h.delta()

	case "ack", "ack-all":
		id := ckpt.ID(argInt(t, d, "id", int(h.c.lastID)))
		gen := uint64(argInt(t, d, "gen", int(h.c.gen)))
		var tasks []control.TaskID
		if d.Cmd == "ack-all" {
			var except []control.TaskID
			if a, ok := d.Arg("except"); ok {
				for _, v := range a.Vals {
					except = append(except, parseTask(t, v))
				}
			}
			for _, task := range h.c.tasks {
				if !slices.Contains(except, task) {
					tasks = append(tasks, task)
				}
			}
		} else {
			a, ok := d.Arg("task")
			if !ok {
				t.Fatalf("%s: ack needs task=", d.Pos)
			}
			for _, v := range a.Vals {
				tasks = append(tasks, parseTask(t, v))
			}
		}
		var shuffle []control.Position
		if a, ok := d.Arg("shuffle"); ok {
			for _, v := range a.Vals {
				p, err := control.ParsePosition(v)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				shuffle = append(shuffle, p)
			}
			slices.SortFunc(shuffle, control.Position.Compare)
		}
		for _, task := range tasks {
			a := control.Ack{ID: id, Gen: gen, Task: task, Shuffle: shuffle,
				Handle: argString(d, "handle", fmt.Sprintf("chk-%d/%s-%d.manifest", id, task.Stage, task.Index)),
				Metrics: control.AckMetrics{
					StateBytes: int64(argInt(t, d, "state", 100)), UploadedBytes: int64(argInt(t, d, "uploaded", 10)),
					AlignMS: int64(argInt(t, d, "align_ms", 0)), SyncMS: 1, AsyncMS: 5,
				}}
			if err := h.step(Acknowledge{a}); err != nil {
				return errOut(err)
			}
		}
		return h.delta()

	case "decline":
		id := ckpt.ID(argInt(t, d, "id", int(h.c.lastID)))
		gen := uint64(argInt(t, d, "gen", int(h.c.gen)))
		a, _ := d.Arg("task")
		err := h.step(Decline{control.Decline{ID: id, Gen: gen, Task: parseTask(t, a.SingleVal(t)),
			Reason: argString(d, "reason", "snapshot failed")}})
		return errOut(err) + h.delta()

	case "fail":
		// A task's report of a permanent failure (control.Failure).
		gen := uint64(argInt(t, d, "gen", int(h.c.gen)))
		a, _ := d.Arg("task")
		f := control.Failure{Gen: gen, Task: parseTask(t, a.SingleVal(t)),
			Cause: control.FailureCause(argString(d, "cause", "record")), Reason: argString(d, "reason", "does not decode")}
		if r := argString(d, "record", ""); r != "" {
			p, err := control.ParsePosition(r)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			f.Record = p
		}
		err := h.step(TaskFailed{f})
		return errOut(err) + h.delta()

	case "resume":
		// processor resume: a Resumed record appended by another writer;
		// the coordinator that wrote Failed is gone, and a new one is
		// rebuilt from the commit topic with it.
		h.delta()
		st := h.c.Status()
		gen := uint64(argInt(t, d, "gen", int(st.Gen)))
		r := control.Resumed{Gen: gen, TS: h.c.Now().UnixMilli()}
		if a, ok := d.Arg("skip"); ok {
			for _, v := range a.Vals {
				p, err := control.ParsePosition(v)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				r.Skip = append(r.Skip, p)
			}
			slices.SortFunc(r.Skip, control.Position.Compare)
		}
		history := append(slices.Clone(h.log), r)
		c, err := Restore(h.cfg, h.c.Now(), history)
		if err != nil {
			return errOut(err)
		}
		*h = harness{cfg: h.cfg, c: c, log: history, commit: append(slices.Clone(h.commit), r),
			lastTrigger: h.lastTrigger, acksAfter: h.acksAfter, written: h.written}
		return fmtRecord(r) + "\n" + fmtStatus(c.Status())

	case "savepoint", "stop":
		kind := ckpt.KindSavepoint
		if d.Cmd == "stop" {
			kind = ckpt.KindStop
		}
		err := h.step(RequestSavepoint{Kind: kind, Target: argString(d, "target", ""), Request: argString(d, "request", "")})
		return errOut(err) + h.delta()

	case "metadata":
		id := ckpt.ID(argInt(t, d, "id", int(h.c.lastID)))
		var err error
		if a, ok := d.Arg("fail"); ok {
			err = h.step(MetadataFailed{ID: id, Reason: a.SingleVal(t)})
		} else {
			err = h.step(MetadataWritten{ID: id, Location: argString(d, "at", fmt.Sprintf("chk-%d/_metadata", id))})
		}
		return errOut(err) + h.delta()

	case "read-metadata":
		// A new coordinator reads the _metadata object of a retained
		// checkpoint (MetadataRead): the one the core asked to write.
		id := ckpt.ID(argInt(t, d, "id", 0))
		md, ok := h.written[id]
		if !ok {
			t.Fatalf("%s: no _metadata of checkpoint %d was written", d.Pos, id)
		}
		err := h.c.Step(MetadataRead{Metadata: md})
		if err == nil {
			h.log = append(h.log, md)
		}
		return errOut(err) + h.delta()

	case "gc-backlog":
		// The owner's report of discards it has not finished deleting.
		err := h.step(GCBacklog{Discards: argInt(t, d, "discards", 0)})
		return errOut(err) + h.delta()

	case "ready":
		h.delta()
		rd := h.c.Ready()
		h.c.Advance(rd)
		h.printed = Ready{}
		if h.c.HasReady() {
			t.Fatalf("%s: HasReady after Advance", d.Pos)
		}
		return fmtReady(rd)

	case "state":
		return fmtStatus(h.c.Status())

	case "next-trigger":
		// When the owner must tick the core next, if only time holds the
		// next periodic trigger back.
		at, ok := h.c.NextTrigger()
		if !ok {
			return "none\n"
		}
		return fmt.Sprintf("%s (now=%s)\n", rel(at), rel(h.c.Now()))

	case "rebuild":
		h.delta()
		mode := argString(d, "from", "full")
		var history []control.Message
		switch mode {
		case "full":
			history = h.log
		case "topics":
			history = slices.Clone(h.commit)
			if h.lastTrigger != nil {
				history = append(history, h.lastTrigger)
			}
			history = append(history, h.acksAfter...)
		default:
			t.Fatalf("%s: rebuild from=full|topics", d.Pos)
		}
		c, err := Restore(h.cfg, h.c.Now(), history)
		if err != nil {
			return errOut(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "rebuilt from %d records\n", len(history))
		if mode == "full" {
			if diff := durableDiff(h.c, c); diff != "" {
				t.Fatalf("%s: rebuilt core differs from the original: %s", d.Pos, diff)
			}
			b.WriteString("durable state equals the original's\n")
		}
		// The rebuilt core takes over; the old one's unfinished Ready is
		// lost, as in a crash.
		// From now on the live core's history is what it was rebuilt from.
		*h = harness{cfg: h.cfg, c: c, log: slices.Clone(history), commit: h.commit,
			lastTrigger: h.lastTrigger, acksAfter: h.acksAfter, written: h.written}
		b.WriteString(fmtStatus(c.Status()))
		return b.String()
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

// durableState is the part of a core that its records determine.
type durableState struct {
	Gen            uint64
	Assignment     control.Assignment
	Fingerprint    string
	Tasks          []control.TaskID
	LastID         ckpt.ID
	LastCompleted  ckpt.ID
	Pending        []pending
	Completed      []completed
	Recent         []finished
	Savepoints     []ckpt.ID
	Failures       int
	LastCompletion time.Time
	Failed         *control.Failed
	Stopped        *control.Stopped
	Skip           []control.Position
	Restore        *RestorePoint
	Honoured       map[string]uint64
}

func durable(c *Core) durableState {
	s := durableState{Gen: c.gen, Assignment: c.assignment, Fingerprint: c.fingerprint, Tasks: c.tasks, LastID: c.lastID,
		LastCompleted: c.lastCompleted, Completed: c.completed, Recent: c.recent, Savepoints: c.savepoints,
		Failures: c.failures, LastCompletion: c.lastCompletion, Failed: c.failed, Stopped: c.stopped, Skip: c.skip,
		Restore: c.restore, Honoured: c.honoured}
	for _, p := range c.pending {
		s.Pending = append(s.Pending, *p)
	}
	return s
}

// durableDiff returns "" if a and b have the same durable state.
func durableDiff(a, b *Core) string {
	da, db := durable(a), durable(b)
	if reflect.DeepEqual(da, db) {
		return ""
	}
	return fmt.Sprintf("\noriginal %+v\nrebuilt  %+v", da, db)
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) < 15 {
		t.Fatalf("want at least 15 scripts in testdata, got %d (%v)", len(paths), err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := &harness{}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				out := h.run(t, d)
				// After every command, a core rebuilt from the records so far
				// must equal the live one (event sourcing).
				if h.c != nil {
					h.delta()
					c, err := Restore(h.cfg, h.c.Now(), h.log)
					if err != nil {
						t.Fatalf("%s: restore: %v", d.Pos, err)
					}
					if diff := durableDiff(h.c, c); diff != "" {
						t.Fatalf("%s: rebuilt core differs: %s", d.Pos, diff)
					}
				}
				return out
			})
		})
	}
}
