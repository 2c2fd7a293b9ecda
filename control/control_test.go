package control

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

func task(s string, i int) TaskID { return TaskID{Stage: s, Index: i} }

// examples holds one valid message of every type.
func examples() []Message {
	return []Message{
		Trigger{ID: 7, TS: 1_700_000_000_000, Kind: ckpt.KindCheckpoint, Gen: 2},
		Trigger{ID: 8, TS: 1_700_000_000_500, Kind: ckpt.KindSavepoint, Gen: 2, Target: "s3://bucket/sp-1"},
		Trigger{ID: 9, TS: 1_700_000_001_000, Kind: ckpt.KindStop, Gen: 2, Target: "before-upgrade"},
		Abort{ID: 7, Gen: 2, Reason: AbortDeclined, Detail: "disk full", Last: 9},
		Ack{ID: 7, Gen: 2, Task: task("enrich", 3), Handle: "chk-7/enrich-3.manifest",
			Metrics: AckMetrics{SyncMS: 1, AsyncMS: 250, AlignMS: 4, StateBytes: 1 << 20, UploadedBytes: 4096}},
		Ack{ID: 8, Gen: 2, Task: task("count", 1), Handle: "chk-8/count-1.manifest", Shuffle: []Position{
			{Topic: "_weir.shuffle.count", Partition: 64, Offset: 0}, {Topic: "_weir.shuffle.count", Partition: 65, Offset: 1200}}},
		Decline{ID: 7, Gen: 2, Task: task("enrich", 3), Reason: "upload failed: timeout"},
		Running{Gen: 3, Task: task("enrich", 0)},
		Generation{Gen: 3, RestoreFrom: 6, Assignment: Assignment{
			"processor-0": {task("enrich", 0), task("enrich", 1)},
			"processor-1": {task("enrich", 2), task("sink", 0)},
		}},
		Complete{ID: 6, Gen: 2, TS: 1_700_000_000_900, Kind: ckpt.KindCheckpoint, Metadata: "file:///ckpt/job/chk-6/_metadata"},
		Generation{Gen: 4, RestoreFrom: 6, Assignment: Assignment{"p-0": {task("main", 0)}},
			Skip: []Position{{Topic: "clicks", Partition: 0, Offset: 17}, {Topic: "clicks", Partition: 2, Offset: 3}}},
		Failure{Gen: 3, Task: task("main", 2), Cause: CauseRecord, Reason: "value is not valid JSON",
			Record: Position{Topic: "clicks", Partition: 2, Offset: 41}},
		Failure{Gen: 3, Task: task("main", 0), Cause: CauseStorage, Reason: "bucket does not exist"},
		Failed{Gen: 3, TS: 1_700_000_002_000, Task: task("main", 2), Cause: CauseRecord, Reason: "value is not valid JSON",
			Record: Position{Topic: "clicks", Partition: 2, Offset: 41}},
		Failed{Gen: 3, TS: 5, Cause: CauseKafka, Reason: "topic authorization failed"},
		Resumed{Gen: 3, TS: 1_700_000_003_000, Skip: []Position{{Topic: "clicks", Partition: 2, Offset: 41}}},
		Resumed{Gen: 3, TS: 6},
		SavepointRequest{Request: "7f3a", Kind: ckpt.KindSavepoint, Target: "before-v2", TS: 5},
		Stopped{Gen: 3, TS: 8, Savepoint: 12, Metadata: "savepoints/final/_metadata"},
		Stopped{Gen: 3, TS: 9},
		SavepointRequest{Request: "7f3b", Kind: ckpt.KindStop, Target: "final", TS: 6},
		ReplicaReport{Replica: "p-0", TS: 9, Gen: 3, Coordinator: true, Tasks: []TaskFigures{
			{Task: task("count", 0), RecordsInPerSecond: 1500.5, RecordsOutPerSecond: 12, LagRecords: 40, WatermarkMS: 1_700_000_000_000},
			{Task: task("count", 1), BusyMSPerSecond: 900, BackpressuredMSPerSecond: 80, IdleMSPerSecond: 20},
		}},
		ReplicaReport{Replica: "p-1", TS: 10},
		Trigger{ID: 12, Gen: 3, TS: 7, Kind: ckpt.KindSavepoint, Target: "before-v2", Request: "7f3a"},
		Generation{Gen: 5, RestoreFrom: 12, RestoreMetadata: "savepoints/before-v2/_metadata", Assignment: Assignment{"p-0": {task("main", 0)}}},
		Metadata{ID: 6, Gen: 2, Kind: ckpt.KindSavepoint, Target: "sp", TS: 5, Tasks: []TaskState{
			{Task: task("a", 0), Handle: "h0"}, {Task: task("a", 1), Handle: "h1", Metrics: AckMetrics{StateBytes: 3}},
		}},
		Metadata{ID: 9, Gen: 2, Kind: ckpt.KindCheckpoint, TS: 5, Tasks: []TaskState{
			{Task: task("count", 0), Handle: "h0", Shuffle: []Position{{Topic: "s", Partition: 0, Offset: 7}}},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range examples() {
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("encode %#v: %v", m, err)
		}
		if !strings.HasPrefix(string(b), `{"v":1,"type":"`+string(m.Type())+`",`) {
			t.Errorf("encoding does not start with v and type: %s", b)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip:\n got %#v\nwant %#v", got, m)
		}
	}
}

// TestGoldenEncoding pins the wire format: changing it needs a new Version.
func TestGoldenEncoding(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		want string
	}{
		{Trigger{ID: 7, TS: 1000, Kind: ckpt.KindCheckpoint, Gen: 2},
			`{"v":1,"type":"trigger","id":7,"ts":1000,"kind":"checkpoint","gen":2}`},
		{Abort{ID: 7, Gen: 2, Reason: AbortExpired, Last: 8},
			`{"v":1,"type":"abort","id":7,"gen":2,"reason":"expired","last":8}`},
		{Ack{ID: 7, Gen: 2, Task: task("map", 0), Handle: "h"},
			`{"v":1,"type":"ack","id":7,"gen":2,"task":"map/0","handle":"h","metrics":{"sync_ms":0,"async_ms":0,"align_ms":0,"state_bytes":0,"uploaded_bytes":0}}`},
		{Ack{ID: 7, Gen: 2, Task: task("count", 0), Handle: "h", Shuffle: []Position{{Topic: "s", Partition: 3, Offset: 9}}},
			`{"v":1,"type":"ack","id":7,"gen":2,"task":"count/0","handle":"h","metrics":{"sync_ms":0,"async_ms":0,"align_ms":0,"state_bytes":0,"uploaded_bytes":0},"shuffle":[{"topic":"s","partition":3,"offset":9}]}`},
		{Metadata{ID: 7, Gen: 2, Kind: ckpt.KindCheckpoint, TS: 1, Tasks: []TaskState{{Task: task("count", 0), Handle: "h", Shuffle: []Position{{Topic: "s", Partition: 3, Offset: 9}}}}},
			`{"v":1,"type":"metadata","id":7,"gen":2,"kind":"checkpoint","ts":1,"tasks":[{"task":"count/0","handle":"h","metrics":{"sync_ms":0,"async_ms":0,"align_ms":0,"state_bytes":0,"uploaded_bytes":0},"shuffle":[{"topic":"s","partition":3,"offset":9}]}]}`},
		{Decline{ID: 7, Gen: 2, Task: task("map", 10), Reason: "x"},
			`{"v":1,"type":"decline","id":7,"gen":2,"task":"map/10","reason":"x"}`},
		{Running{Gen: 4, Task: task("map", 1)},
			`{"v":1,"type":"running","gen":4,"task":"map/1"}`},
		{Generation{Gen: 1, Assignment: Assignment{"r1": {task("map", 0)}}},
			`{"v":1,"type":"generation","gen":1,"assignment":{"r1":["map/0"]},"restore_from":0}`},
		{Complete{ID: 7, Gen: 2, TS: 9, Kind: ckpt.KindStop, Target: "t", Metadata: "m"},
			`{"v":1,"type":"complete","id":7,"gen":2,"ts":9,"kind":"stop","target":"t","metadata":"m"}`},
		{Failure{Gen: 3, Task: task("main", 1), Cause: CauseRecord, Reason: "bad", Record: Position{Topic: "in", Partition: 1, Offset: 0}},
			`{"v":1,"type":"failure","gen":3,"task":"main/1","cause":"record","reason":"bad","record":{"topic":"in","partition":1,"offset":0}}`},
		{Failed{Gen: 3, TS: 9, Cause: CauseStorage, Reason: "no bucket"},
			`{"v":1,"type":"failed","gen":3,"ts":9,"cause":"storage","reason":"no bucket"}`},
		{Resumed{Gen: 3, TS: 10, Skip: []Position{{Topic: "in", Partition: 1, Offset: 0}}},
			`{"v":1,"type":"resumed","gen":3,"ts":10,"skip":[{"topic":"in","partition":1,"offset":0}]}`},
		{Generation{Gen: 4, Assignment: Assignment{"r1": {task("map", 0)}}, Skip: []Position{{Topic: "in", Partition: 0, Offset: 5}}},
			`{"v":1,"type":"generation","gen":4,"assignment":{"r1":["map/0"]},"restore_from":0,"skip":[{"topic":"in","partition":0,"offset":5}]}`},
		{Generation{Gen: 5, Assignment: Assignment{"r1": {task("map", 0)}}, RestoreFrom: 3, Fingerprint: "9c1e"},
			`{"v":1,"type":"generation","gen":5,"assignment":{"r1":["map/0"]},"restore_from":3,"fingerprint":"9c1e"}`},
		{Generation{Gen: 6, Assignment: Assignment{"r1": {task("map", 0)}}, RestoreFrom: 4, RestoreMetadata: "savepoints/sp/_metadata"},
			`{"v":1,"type":"generation","gen":6,"assignment":{"r1":["map/0"]},"restore_from":4,"restore_metadata":"savepoints/sp/_metadata"}`},
		{Generation{Gen: 7, Assignment: Assignment{"r1": {task("map", 0)}}, RestoreFrom: 4, RestoreMetadata: "savepoints/sp/_metadata",
			RestoreLocation: "s3://b/moved/sp", RestoreRequest: "s3://b/moved/sp#2"},
			`{"v":1,"type":"generation","gen":7,"assignment":{"r1":["map/0"]},"restore_from":4,"restore_metadata":"savepoints/sp/_metadata","restore_location":"s3://b/moved/sp","restore_request":"s3://b/moved/sp#2"}`},
		{Stopped{Gen: 2, TS: 5, Savepoint: 4, Metadata: "savepoints/final/_metadata"},
			`{"v":1,"type":"stopped","gen":2,"ts":5,"savepoint":4,"metadata":"savepoints/final/_metadata"}`},
		{Stopped{Gen: 2, TS: 6}, `{"v":1,"type":"stopped","gen":2,"ts":6}`},
		{SavepointRequest{Request: "r1", Kind: ckpt.KindSavepoint, Target: "sp", TS: 3},
			`{"v":1,"type":"savepoint_request","request":"r1","kind":"savepoint","target":"sp","ts":3}`},
		{ReplicaReport{Replica: "p-1", TS: 7, Gen: 2, Tasks: []TaskFigures{{Task: task("map", 0), RecordsInPerSecond: 2.5, LagRecords: 3}}},
			`{"v":1,"type":"replica_report","replica":"p-1","ts":7,"gen":2,"tasks":[{"task":"map/0","records_in_per_second":2.5,"records_out_per_second":0,"lag_records":3,"watermark_ms":0,"busy_ms_per_second":0,"backpressured_ms_per_second":0,"idle_ms_per_second":0}]}`},
		{Trigger{ID: 4, Gen: 2, TS: 3, Kind: ckpt.KindSavepoint, Target: "sp", Request: "r1"},
			`{"v":1,"type":"trigger","id":4,"ts":3,"kind":"savepoint","gen":2,"target":"sp","request":"r1"}`},
	} {
		b, err := Encode(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("encode %T:\n got %s\nwant %s", tc.m, b, tc.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{``, ErrMalformed},
		{`not json`, ErrMalformed},
		{`null`, ErrMalformed},
		{`[]`, ErrMalformed},
		{`{"v":1,"type":"trigger","id":1,"ts":1,"kind":"checkpoint","gen":1} {}`, ErrMalformed},
		{`{"type":"trigger","id":1}`, ErrUnknownVersion},
		{`{"v":2,"type":"trigger","id":1,"ts":1,"kind":"checkpoint","gen":1}`, ErrUnknownVersion},
		{`{"v":"1","type":"trigger"}`, ErrUnknownVersion},
		{`{"v":1.5,"type":"trigger"}`, ErrUnknownVersion},
		{`{"v":1}`, ErrUnknownType},
		{`{"v":1,"type":"barrier"}`, ErrUnknownType},
		{`{"v":1,"type":7}`, ErrUnknownType},
		{`{"v":1,"type":"trigger","id":1,"ts":1,"kind":"checkpoint","gen":1,"extra":true}`, ErrMalformed},
		{`{"v":1,"type":"trigger","id":"1","ts":1,"kind":"checkpoint","gen":1}`, ErrMalformed},
		{`{"v":1,"type":"trigger","id":-1,"ts":1,"kind":"checkpoint","gen":1}`, ErrMalformed},
		{`{"v":1,"type":"trigger","ts":1,"kind":"checkpoint","gen":1}`, ErrInvalid},
		{`{"v":1,"type":"trigger","id":1,"ts":1,"kind":"checkpoint"}`, ErrInvalid},
		{`{"v":1,"type":"trigger","id":1,"ts":1,"kind":"snapshot","gen":1}`, ErrInvalid},
		{`{"v":1,"type":"trigger","id":1,"ts":1,"kind":"checkpoint","gen":1,"target":"x"}`, ErrInvalid},
		{`{"v":1,"type":"trigger","id":1,"ts":1,"kind":"checkpoint","gen":1,"request":"r"}`, ErrInvalid},
		{`{"v":1,"type":"savepoint_request","request":"","kind":"savepoint","target":"t","ts":1}`, ErrInvalid},
		{`{"v":1,"type":"stopped","gen":0,"ts":1}`, ErrInvalid},
		{`{"v":1,"type":"generation","gen":2,"assignment":{"r1":["map/0"]},"restore_from":0,"restore_location":"s3://b/sp"}`, ErrInvalid},
		{`{"v":1,"type":"generation","gen":2,"assignment":{"r1":["map/0"]},"restore_from":3,"restore_request":"s3://b/sp"}`, ErrInvalid},
		{`{"v":1,"type":"stopped","gen":1,"ts":1,"savepoint":3}`, ErrInvalid},
		{`{"v":1,"type":"stopped","gen":1,"ts":1,"metadata":"m"}`, ErrInvalid},
		{`{"v":1,"type":"savepoint_request","request":"r","kind":"checkpoint","target":"t","ts":1}`, ErrInvalid},
		{`{"v":1,"type":"savepoint_request","request":"r","kind":"savepoint","target":"","ts":1}`, ErrInvalid},
		{`{"v":1,"type":"savepoint_request","request":"r","kind":"savepoint","target":"t","ts":-1}`, ErrInvalid},
		{`{"v":1,"type":"abort","id":3,"gen":1,"reason":"expired","last":2}`, ErrInvalid},
		{`{"v":1,"type":"abort","id":3,"gen":1,"reason":"bored","last":3}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"map","handle":"h"}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"map/01","handle":"h"}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"/1","handle":"h"}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"a/b/1","handle":"h"}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"map/1","handle":""}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"map/1","handle":"h","metrics":{"sync_ms":-1}}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"map/1","handle":"h","metrics":{"cpu":1}}`, ErrMalformed},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[{"topic":"s","partition":0,"offset":-1}]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[{"topic":"","partition":0,"offset":1}]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[{"topic":"a b","partition":0,"offset":1}]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[{"topic":"s","partition":-1,"offset":1}]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[{"topic":"s","partition":1,"offset":1},{"topic":"s","partition":0,"offset":1}]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":[{"topic":"s","partition":1,"offset":1},{"topic":"s","partition":1,"offset":2}]}`, ErrInvalid},
		{`{"v":1,"type":"ack","id":1,"gen":1,"task":"m/1","handle":"h","shuffle":{"s":1}}`, ErrMalformed},
		{`{"v":1,"type":"metadata","id":1,"gen":1,"ts":1,"kind":"checkpoint","tasks":[{"task":"m/0","handle":"h","shuffle":[{"topic":"s","partition":0,"offset":-3}]}]}`, ErrInvalid},
		{`{"v":1,"type":"generation","gen":1,"assignment":{}}`, ErrInvalid},
		{`{"v":1,"type":"generation","gen":1,"assignment":{"a":["m/0"],"b":["m/0"]}}`, ErrInvalid},
		{`{"v":1,"type":"complete","id":1,"gen":1,"ts":1,"kind":"checkpoint"}`, ErrInvalid},
		{`{"v":1,"type":"metadata","id":1,"gen":1,"ts":1,"kind":"checkpoint","tasks":[{"task":"m/1","handle":"h"},{"task":"m/0","handle":"h"}]}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":1,"cause":"record","reason":"x"}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":1,"task":"m/0","cause":"cosmic","reason":"x"}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":1,"task":"m/0","cause":"record","reason":""}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":0,"task":"m/0","cause":"record","reason":"x"}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":1,"task":"m/0","cause":"record","reason":"x","record":{"topic":"","partition":1,"offset":2}}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":1,"task":"m/0","cause":"record","reason":"x","record":{"topic":"t","partition":-1,"offset":2}}`, ErrInvalid},
		{`{"v":1,"type":"failure","gen":1,"task":"m/0","cause":"record","reason":"x","record":{"topic":"t","partition":1,"offset":2,"key":"k"}}`, ErrMalformed},
		{`{"v":1,"type":"failed","gen":1,"ts":-1,"cause":"record","reason":"x"}`, ErrInvalid},
		{`{"v":1,"type":"failed","gen":1,"ts":1,"task":"","cause":"record","reason":"x"}`, ErrInvalid},
		{`{"v":1,"type":"resumed","gen":0,"ts":1}`, ErrInvalid},
		{`{"v":1,"type":"resumed","gen":1,"ts":1,"skip":[]}`, ErrInvalid},
		{`{"v":1,"type":"resumed","gen":1,"ts":1,"skip":[{"topic":"t","partition":0,"offset":2},{"topic":"t","partition":0,"offset":2}]}`, ErrInvalid},
		{`{"v":1,"type":"generation","gen":1,"assignment":{"a":["m/0"]},"skip":[{"topic":"a/b","partition":0,"offset":2}]}`, ErrInvalid},
	} {
		_, err := Decode([]byte(tc.in))
		if !errors.Is(err, tc.want) {
			t.Errorf("Decode(%s) = %v, want %v", tc.in, err, tc.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "control: ") && !strings.HasPrefix(err.Error(), "decode ") {
			t.Errorf("error %q does not name its origin", err)
		}
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	for _, m := range []Message{
		nil,
		Trigger{ID: 0, Gen: 1, Kind: ckpt.KindCheckpoint},
		Ack{ID: 1, Gen: 1, Task: task("a/b", 0), Handle: "h"},
		Generation{Gen: 1},
		ReplicaReport{TS: 1},
		ReplicaReport{Replica: "p", Tasks: []TaskFigures{}},
		ReplicaReport{Replica: "p", Tasks: []TaskFigures{{Task: task("a", 1)}, {Task: task("a", 0)}}},
		ReplicaReport{Replica: "p", Tasks: []TaskFigures{{Task: task("a", 0), LagRecords: -1}}},
		ReplicaReport{Replica: "p", Tasks: []TaskFigures{{Task: task("a", 0), BusyMSPerSecond: math.NaN()}}},
	} {
		if _, err := Encode(m); !errors.Is(err, ErrInvalid) {
			t.Errorf("Encode(%#v) = %v, want ErrInvalid", m, err)
		}
	}
}

func TestTaskID(t *testing.T) {
	id, err := ParseTaskID("window-agg/12")
	if err != nil || id != task("window-agg", 12) || id.String() != "window-agg/12" {
		t.Fatalf("ParseTaskID = %v, %v", id, err)
	}
	for _, bad := range []string{"", "a", "a/", "/0", "a/-1", "a/+1", "a/00", "a/1x", "a b/1", "a/b/1"} {
		if _, err := ParseTaskID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseTaskID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if task("a", 2).Compare(task("a", 10)) >= 0 || task("b", 0).Compare(task("a", 9)) <= 0 {
		t.Error("Compare orders by stage, then numeric index")
	}
}

func TestTopicOf(t *testing.T) {
	want := map[Type]Topic{TypeTrigger: TopicTrigger, TypeAbort: TopicTrigger, TypeAck: TopicAck,
		TypeDecline: TopicAck, TypeRunning: TopicAck, TypeGeneration: TopicCommit, TypeComplete: TopicCommit,
		TypeFailure: TopicAck, TypeFailed: TopicCommit, TypeResumed: TopicCommit, TypeSavepointRequest: TopicAck, TypeStopped: TopicCommit, TypeReplicaReport: TopicAck}
	for _, m := range examples() {
		got, ok := TopicOf(m)
		if w, isRecord := want[m.Type()]; got != w || ok != isRecord {
			t.Errorf("TopicOf(%s) = %q, %v", m.Type(), got, ok)
		}
	}
}

func TestAbortReasons(t *testing.T) {
	counts := map[AbortReason]bool{AbortExpired: true, AbortDeclined: true, AbortFinalizeFailed: true,
		AbortSubsumed: false, AbortGeneration: false, AbortIncomplete: false, AbortStopped: false, AbortFailed: false}
	for r, c := range counts {
		if !r.Valid() || r.CountsAsFailure() != c {
			t.Errorf("reason %s: valid=%v counts=%v", r, r.Valid(), r.CountsAsFailure())
		}
	}
}

func TestPosition(t *testing.T) {
	p, err := ParsePosition("clicks/3/1024")
	if err != nil || p != (Position{Topic: "clicks", Partition: 3, Offset: 1024}) || p.String() != "clicks/3/1024" {
		t.Fatalf("ParsePosition = %v, %v", p, err)
	}
	for _, bad := range []string{"", "clicks", "clicks/3", "/3/4", "c/-1/4", "c/1/-4", "c/x/4", "c/1/4/5", "c/99999999999/1"} {
		if _, err := ParsePosition(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePosition(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range examples() {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		``, `{}`, `null`, `{"v":1}`, `{"v":2,"type":"ack"}`, `{"v":1,"type":"ack","task":"a/1"}`,
		`{"v":1,"type":"generation","gen":1,"assignment":{"r":[],"s":["a/0"]}}`,
		`{"v":1,"type":"generation","gen":1,"assignment":{"r":null,"s":["a/0"]}}`,
		`{"v":1,"type":"metadata","id":1,"gen":1,"ts":1,"kind":"checkpoint","tasks":[]}`,
		`{"v":1,"type":"trigger","ID":1,"id":2,"ts":1,"kind":"checkpoint","gen":1}`,
		`{"v":1,"type":"failure","gen":1,"task":"m/0","cause":"record","reason":"x","record":{"topic":"t","partition":0,"offset":0}}`,
		`{"v":1,"type":"failed","gen":1,"ts":0,"task":"m/0","cause":"kafka","reason":"x","record":{}}`,
		`{"v":1,"type":"resumed","gen":1,"ts":0,"skip":null}`,
		"{\"v\":1,\"type\":\"decline\",\"id\":1,\"gen\":1,\"task\":\"\xff/1\",\"reason\":\"\xfe\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned a message with error %v", err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownVersion) &&
				!errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v wraps no sentinel", err)
			}
			return
		}
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode(Decode(%q)) failed: %v", b, err)
		}
		m2, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) failed: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message:\n%#v\n%#v", m, m2)
		}
		enc2, err := Encode(m2)
		if err != nil || string(enc2) != string(enc) {
			t.Fatalf("encoding is not a fixed point: %s vs %s (%v)", enc, enc2, err)
		}
	})
}
