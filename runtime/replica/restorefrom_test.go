package replica

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// TestRestoreFromRule: a replica's --restore-from is pending until a
// generation record: one that restores it honours it, any other drops it
// (the coordinator's value wins when replicas disagree); a value that the
// commit topic's history shows restored already is ignored from the
// start (honoured once), with the generation that did in the log; a
// fragment makes another request; a dropped or honoured value is never
// handed to the coordinator's core again.
func TestRestoreFromRule(t *testing.T) {
	src, err := checkpoint.ParseSource("s3://b/moved/sp")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := checkpoint.ParseSource("s3://b/moved/sp#2")
	honours := func(g uint64, req string) control.Generation {
		return control.Generation{Gen: g, RestoreFrom: 7, RestoreLocation: "s3://b/moved/sp", RestoreMetadata: "savepoints/sp/_metadata", RestoreRequest: req}
	}
	plain := control.Generation{Gen: 9, RestoreFrom: 12}
	for _, c := range []struct {
		name    string
		src     checkpoint.Source
		history []control.Message
		next    *control.Generation // the first generation read after the start
		pending bool                // after the history
		log     string              // in the log
	}{
		{"fresh job", src, nil, nil, true, ""},
		{"honoured before", src, []control.Message{honours(4, src.Request), plain}, nil, false, "generation 4 restored it already (honoured once)"},
		{"another request honoured", again, []control.Message{honours(4, src.Request)}, nil, true, ""},
		{"honoured now", src, []control.Message{plain}, ptr(honours(10, src.Request)), false, "--restore-from honoured"},
		{"another coordinator's generation", src, []control.Message{plain}, ptr(control.Generation{Gen: 10, RestoreFrom: 12}), false, "--restore-from dropped"},
		{"another coordinator's value", again, nil, ptr(honours(10, src.Request)), false, "--restore-from dropped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := &Replica{log: slog.New(slog.NewTextHandler(&logs, nil)), topics: controltopic.NewTopics("_weir.j."),
				restoreReq: &restoreRequest{src: c.src, pending: true, since: -1}}
			var recs []controltopic.Record
			for i, m := range c.history {
				recs = append(recs, controltopic.Record{Topic: control.TopicCommit, Offset: int64(i), Msg: m})
			}
			r.noteRestoreHistory(recs, int64(len(recs)))
			if c.next != nil {
				if r.restorePending() == nil {
					t.Fatal("not pending before the first generation after the start")
				}
				r.noteRestoreGeneration(*c.next)
			}
			if got := r.restorePending() != nil; got != c.pending {
				t.Fatalf("pending = %v, want %v\n%s", got, c.pending, logs.String())
			}
			if !c.pending && r.assignRestore() != nil {
				t.Fatal("a value no longer pending is handed to the core")
			}
			if c.log != "" && !strings.Contains(logs.String(), c.log) {
				t.Fatalf("log lacks %q:\n%s", c.log, logs.String())
			}
			// A later session's history: its generations before the
			// first session's end change nothing more.
			r.noteRestoreHistory(recs, int64(len(recs)))
			if got := r.restorePending() != nil; got != c.pending {
				t.Fatalf("a second session's history changed pending to %v", got)
			}
			// After any generation read, the value is never pending again.
			r.noteRestoreGeneration(honours(20, c.src.Request))
			if r.restorePending() != nil {
				t.Fatal("pending after a generation")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestRestoreFromGenerationMissedBetweenSessions: a generation written
// after the replica's first session read the commit topic, but read only
// by a later session's history (the first ended before its tail
// delivered it), decides the value as one read live: it drops it.
func TestRestoreFromGenerationMissedBetweenSessions(t *testing.T) {
	src, _ := checkpoint.ParseSource("s3://b/moved/sp")
	var logs bytes.Buffer
	r := &Replica{log: slog.New(slog.NewTextHandler(&logs, nil)), topics: controltopic.NewTopics("_weir.j."),
		restoreReq: &restoreRequest{src: src, pending: true, since: -1}}
	first := []controltopic.Record{{Topic: control.TopicCommit, Offset: 0, Msg: control.Generation{Gen: 1}}}
	r.noteRestoreHistory(first, 1)
	if r.restorePending() == nil {
		t.Fatal("a generation before the start dropped the value")
	}
	second := append(first, controltopic.Record{Topic: control.TopicCommit, Offset: 1, Msg: control.Generation{Gen: 2, RestoreFrom: 3}})
	r.noteRestoreHistory(second, 2)
	if r.restorePending() != nil || !strings.Contains(logs.String(), "--restore-from dropped") {
		t.Fatalf("generation 2, started after the replica without its value, did not drop it:\n%s", logs.String())
	}
}
