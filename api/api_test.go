package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/jobview"
	"github.com/weir-stream/weir/plan"
)

func tid(s string, i int) control.TaskID { return control.TaskID{Stage: s, Index: i} }

// fold is a View over a jobview.Fold fed by the test.
type fold struct {
	f   *jobview.Fold
	now int64
}

func (v fold) Job() (jobview.Job, error) { return v.f.Job(v.now, 10_000), nil }
func (v fold) Figures() (map[control.TaskID]jobview.Figures, error) {
	return v.f.Figures(v.now, 10_000), nil
}
func (v fold) Checkpoints(limit int) ([]jobview.Checkpoint, error) {
	return v.f.CheckpointsAt(limit, v.now), nil
}
func (v fold) Checkpoint(id ckpt.ID) (jobview.Checkpoint, bool, error) {
	c, ok := v.f.Checkpoint(id, v.now)
	return c, ok, nil
}
func (v fold) Generation() (*control.Generation, error) { return v.f.Generation(), nil }

type refused struct{ err error }

func (r refused) Refused() error { return r.err }

type actions struct{ calls []string }

func (a *actions) Savepoint(_ context.Context, target string) (string, error) {
	a.calls = append(a.calls, "savepoint "+target)
	return "savepoint 9 complete: savepoints/" + target + "/_metadata", nil
}
func (a *actions) Stop(_ context.Context, sp bool, target string) (string, error) {
	a.calls = append(a.calls, "stop")
	return "", errors.New("job is stopped already")
}
func (a *actions) Resume(_ context.Context, skip []string) (string, error) {
	a.calls = append(a.calls, "resume "+strings.Join(skip, ","))
	return "resumed", nil
}

func testFold() *jobview.Fold {
	f := jobview.New("wc")
	f.Apply(control.Generation{Gen: 3, Assignment: control.Assignment{"r0": {tid("main", 0)}, "r1": {tid("main", 1), tid("count", 0)}}})
	for _, id := range []control.TaskID{tid("main", 0), tid("main", 1), tid("count", 0)} {
		f.Apply(control.Running{Gen: 3, Task: id})
	}
	f.Apply(control.Trigger{ID: 4, Gen: 3, TS: 100, Kind: ckpt.KindCheckpoint})
	for i, id := range []control.TaskID{tid("main", 0), tid("main", 1), tid("count", 0)} {
		f.Apply(control.Ack{ID: 4, Gen: 3, Task: id, Handle: "h", Metrics: control.AckMetrics{AlignMS: int64(10 * i), StateBytes: 5}})
	}
	f.Apply(control.Complete{ID: 4, Gen: 3, TS: 180, Kind: ckpt.KindCheckpoint, Metadata: "chk-4/_metadata"})
	f.Apply(control.ReplicaReport{Replica: "r0", TS: 1000, Gen: 3, Tasks: []control.TaskFigures{
		{Task: tid("main", 0), RecordsInPerSecond: 10, RecordsOutPerSecond: 1, LagRecords: 5, WatermarkMS: 900, BusyMSPerSecond: 100},
	}})
	f.Apply(control.ReplicaReport{Replica: "r1", TS: 1000, Gen: 3, Coordinator: true, Tasks: []control.TaskFigures{
		{Task: tid("count", 0), RecordsInPerSecond: 11},
		{Task: tid("main", 1), RecordsInPerSecond: 20, RecordsOutPerSecond: 2, LagRecords: 7, WatermarkMS: 800, BusyMSPerSecond: 300, BackpressuredMSPerSecond: 50},
	}})
	return f
}

func server(t *testing.T, f *jobview.Fold, opts Options) (*httptest.Server, *bytes.Buffer) {
	var logs bytes.Buffer
	opts.View = fold{f: f, now: 1500}
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	mux := http.NewServeMux()
	New(opts).Register(mux)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s, &logs
}

func get(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
	return resp.StatusCode, v
}

// keys returns the sorted keys of a JSON object, for the shape checks.
func keys(v any) string {
	m, _ := v.(map[string]any)
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sortStrings(ks)
	return strings.Join(ks, ",")
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func TestJobShape(t *testing.T) {
	p := func(tasks []control.TaskID) (*plan.Plan, error) {
		return &plan.Plan{Job: "wc", MaxParallelism: 8, Sinks: []string{"out"}, Stages: []plan.Stage{
			{Name: "main", Parallelism: 2, Kafka: true}, {Name: "count", Parallelism: 1, Sinks: []int{0}},
		}}, nil
	}
	s, _ := server(t, testFold(), Options{Plan: p})
	code, j := get(t, s.URL+"/api/v1/job")
	if code != 200 {
		t.Fatal(code, j)
	}
	if got, want := keys(j), "coordinator,generation,last_checkpoint,live_replicas,name,plan,replicas,restore_from,state,tasks"; got != want {
		t.Errorf("job keys %s, want %s", got, want)
	}
	if j["state"] != "running" || j["coordinator"] != "r1" || j["generation"] != 3.0 {
		t.Errorf("job %v", j)
	}
	tasks := j["tasks"].([]any)
	if got, want := keys(tasks[0]), "id,index,replica,stage,status"; got != want {
		t.Errorf("task keys %s, want %s", got, want)
	}
	stages := j["plan"].(map[string]any)["stages"].([]any)
	count := stages[1].(map[string]any)
	if count["name"] != "count" || len(count["tasks"].([]any)) != 1 || count["sink_topics"].([]any)[0] != "out" {
		t.Errorf("stage count: %v", count)
	}
	reps := j["replicas"].([]any)
	if got, want := keys(reps[0]), "coordinator,generation,id,reported_ms,tasks"; got != want {
		t.Errorf("replica keys %s, want %s", got, want)
	}
}

func TestJobFailedAndRefused(t *testing.T) {
	f := testFold()
	f.Apply(control.Failed{Gen: 3, TS: 1200, Task: tid("main", 1), Cause: control.CauseRecord, Reason: "value is not JSON",
		Record: control.Position{Topic: "in", Partition: 1, Offset: 41}})
	s, _ := server(t, f, Options{Local: refused{errors.New("checkpoint 4: stage count changed")}})
	_, j := get(t, s.URL+"/api/v1/job")
	fail := j["failure"].(map[string]any)
	if j["state"] != "failed" || fail["reason"] != "value is not JSON" || fail["cause"] != "record" ||
		!strings.Contains(fail["resume"].(string), "--skip in/1/41") || j["refused"] != "checkpoint 4: stage count changed" {
		t.Errorf("failed job: %v", j)
	}
	if j["plan"] != nil {
		t.Errorf("a plan without a planner: %v", j["plan"])
	}

	s, _ = server(t, testFold(), Options{Local: refused{errors.New("checkpoint 4: stage count changed")}})
	if _, j := get(t, s.URL+"/api/v1/job"); j["state"] != "refused" {
		t.Errorf("refused replica: %v", j)
	}
}

func TestMetrics(t *testing.T) {
	s, _ := server(t, testFold(), Options{})
	code, m := get(t, s.URL+"/api/v1/job/metrics")
	if code != 200 {
		t.Fatal(code, m)
	}
	stages := m["stages"].([]any)
	main := stages[1].(map[string]any)
	if main["stage"] != "main" || main["records_in_per_second"] != 30.0 || main["lag_records"] != 12.0 || main["watermark_ms"] != 800.0 ||
		main["busy_ms_per_second"] != 300.0 || main["backpressured_ms_per_second"] != 50.0 || main["alignment_ms"] != 10.0 {
		t.Errorf("stage main: %v", main)
	}
	task := main["tasks"].([]any)[0].(map[string]any)
	want := "alignment_ms,backpressured_ms_per_second,busy_ms_per_second,idle_ms_per_second,lag_records,records_in_per_second,records_out_per_second,replica,reported_ms,task,watermark_ms"
	if got := keys(task); got != want {
		t.Errorf("task metric keys %s, want %s", got, want)
	}
	if task["task"] != "main/0" || task["replica"] != "r0" || task["reported_ms"] != 1000.0 {
		t.Errorf("task main/0: %v", task)
	}
}

func TestCheckpoints(t *testing.T) {
	s, _ := server(t, testFold(), Options{})
	code, cs := get(t, s.URL+"/api/v1/checkpoints")
	list := cs["checkpoints"].([]any)
	if code != 200 || len(list) != 1 {
		t.Fatal(code, cs)
	}
	want := "acks,duration_ms,expected,generation,id,kind,metadata,state_bytes,status,tasks,triggered_ms,uploaded_bytes,completed_ms"
	ws := strings.Split(want, ",")
	sortStrings(ws)
	if got := keys(list[0]); got != strings.Join(ws, ",") {
		t.Errorf("checkpoint keys %s, want %s", got, strings.Join(ws, ","))
	}
	if code, c := get(t, s.URL+"/api/v1/checkpoints/4"); code != 200 || c["duration_ms"] != 80.0 || c["state_bytes"] != 15.0 {
		t.Errorf("checkpoint 4: %d %v", code, c)
	}
	for path, want := range map[string]int{"/api/v1/checkpoints/5": 404, "/api/v1/checkpoints/0": 400, "/api/v1/checkpoints?limit=-1": 400, "/api/v1/x": 404} {
		if code, body := get(t, s.URL+path); code != want || body["error"] == "" {
			t.Errorf("GET %s: %d %v, want %d with an error", path, code, body, want)
		}
	}
}

func postAPI(t *testing.T, url, auth, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdmin(t *testing.T) {
	const token = "tok-8f2b1c"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	act := &actions{}
	off, _ := server(t, testFold(), Options{Actions: act, TokenFile: file})
	if code, _ := postAPI(t, off.URL+"/api/v1/job/savepoint", "Bearer "+token, ""); code != 403 {
		t.Errorf("admin off: %d, want 403", code)
	}
	on, logs := server(t, testFold(), Options{Admin: true, Actions: act, TokenFile: file})
	for _, auth := range []string{"", "Bearer", "Bearer wrong", token, "Basic " + token} {
		if code, body := postAPI(t, on.URL+"/api/v1/job/savepoint", auth, ""); code != 403 || strings.Contains(body, token) {
			t.Errorf("authorization %q: %d %s, want 403", auth, code, body)
		}
	}
	if code, _ := http.Get(on.URL + "/api/v1/job/savepoint"); code.StatusCode != 405 {
		t.Errorf("GET of a write action: %d, want 405", code.StatusCode)
	}
	if code, body := postAPI(t, on.URL+"/api/v1/job/savepoint", "Bearer "+token, `{"target":"sp1"}`); code != 200 || !strings.Contains(body, "savepoints/sp1/_metadata") {
		t.Errorf("savepoint: %d %s", code, body)
	}
	if code, body := postAPI(t, on.URL+"/api/v1/job/stop", "Bearer "+token, `{"target":"x"}`); code != 400 {
		t.Errorf("stop with a target and no savepoint: %d %s, want 400", code, body)
	}
	if code, body := postAPI(t, on.URL+"/api/v1/job/stop", "Bearer "+token, `{}`); code != 409 || !strings.Contains(body, "stopped already") {
		t.Errorf("stop refused: %d %s, want 409", code, body)
	}
	if code, body := postAPI(t, on.URL+"/api/v1/job/resume", "Bearer "+token, `{"skip":["in/1/41"],"extra":1}`); code != 400 {
		t.Errorf("an unknown field: %d %s, want 400", code, body)
	}
	if code, _ := postAPI(t, on.URL+"/api/v1/job/resume", "Bearer "+token, `{"skip":["in/1/41"]}`); code != 200 {
		t.Errorf("resume: %d", code)
	}
	if got, want := strings.Join(act.calls, "; "), "savepoint sp1; stop; resume in/1/41"; got != want {
		t.Errorf("actions %q, want %q", got, want)
	}
	if strings.Contains(logs.String(), token) || !strings.Contains(logs.String(), "write action refused") {
		t.Errorf("log:\n%s", logs.String())
	}
	// A rotated token counts at once; an unreadable file refuses all.
	if err := os.WriteFile(file, []byte("new-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := postAPI(t, on.URL+"/api/v1/job/resume", "Bearer "+token, ""); code != 403 {
		t.Errorf("the old token after rotation: %d", code)
	}
	if code, _ := postAPI(t, on.URL+"/api/v1/job/resume", "Bearer new-token", ""); code != 200 {
		t.Errorf("the new token: %d", code)
	}
	os.Remove(file)
	if code, _ := postAPI(t, on.URL+"/api/v1/job/resume", "Bearer new-token", ""); code != 403 {
		t.Errorf("no token file: %d", code)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
