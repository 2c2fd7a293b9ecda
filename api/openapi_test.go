package api

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/plan"
)

type openAPI struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

// TestOpenAPIMatchesTheServer keeps docs/openapi.yaml honest: it lists
// exactly the routes Register serves, with their methods, and the
// properties of the job and checkpoint objects are the keys the server
// writes (a failed job, a stopped one and a plan error cover the optional
// ones).
func TestOpenAPIMatchesTheServer(t *testing.T) {
	b, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	served := []string{
		"GET /api/v1/checkpoints", "GET /api/v1/checkpoints/{id}", "GET /api/v1/job", "GET /api/v1/job/metrics",
		"POST /api/v1/job/resume", "POST /api/v1/job/savepoint", "POST /api/v1/job/stop",
	}
	if !slices.Equal(documented, served) {
		t.Errorf("openapi.yaml documents %v, the server serves %v", documented, served)
	}
	mux := http.NewServeMux()
	New(Options{View: fold{f: testFold(), now: 1500}}).Register(mux)
	for _, route := range served {
		method, path, _ := strings.Cut(route, " ")
		path = strings.ReplaceAll(path, "{id}", "4")
		if _, pattern := mux.Handler(&http.Request{Method: method, URL: mustURL(t, path)}); pattern != route {
			t.Errorf("%s %s is served by %q", method, path, pattern)
		}
	}

	// The keys the server writes, with every optional one present.
	f := testFold()
	f.Apply(control.Failed{Gen: 3, TS: 1, Task: tid("main", 1), Cause: control.CauseRecord, Reason: "x", Record: control.Position{Topic: "in", Offset: 1}})
	s, _ := server(t, f, Options{Local: refused{errTest}, Plan: func([]control.TaskID) (*plan.Plan, error) { return nil, errTest }})
	_, j := get(t, s.URL+"/api/v1/job")
	f.Apply(control.Stopped{Gen: 3, TS: 2})
	s2, _ := server(t, f, Options{Plan: func([]control.TaskID) (*plan.Plan, error) { return &plan.Plan{}, nil }})
	_, j2 := get(t, s2.URL+"/api/v1/job")
	for k, v := range j2 {
		j[k] = v
	}
	checkKeys(t, "JobResponse", doc.Components.Schemas["JobResponse"].Properties, j)
	checkKeys(t, "Checkpoint", doc.Components.Schemas["Checkpoint"].Properties, j["last_checkpoint"].(map[string]any))
}

var errTest = os.ErrNotExist

func checkKeys(t *testing.T, name string, props map[string]any, obj map[string]any) {
	t.Helper()
	for k := range obj {
		if _, ok := props[k]; !ok {
			t.Errorf("openapi.yaml: %s lacks %q, which the server writes", name, k)
		}
	}
}
