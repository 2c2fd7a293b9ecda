package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/weir-stream/weir/config"
)

// TestExprPos maps a byte offset inside an expression to its line and
// column in the job file, counting characters (not bytes) as editors do,
// and a folded expression to its start.
func TestExprPos(t *testing.T) {
	y := `job:
  name: pos
  pipeline:
    - source: {topics: [in]}
    - filter: {where: "value.name == 'ü' && value.x >"}
    - filter:
        where: >
          value.a
          > 1
    - sink: {topic: out}
kafka: {brokers: ["k:9092"]}
`
	cfg, err := config.Load(config.Source{YAML: []byte(y), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Job.Pipeline[1].Filter.Where
	off := strings.Index(e.Src, "&&")
	for _, c := range []struct {
		offset int
		want   string
	}{
		{0, "yaml:5:24"},
		{off, "yaml:5:42"}, // 'ü' is two bytes, one column
		{len(e.Src), "yaml:5:54"},
		{len(e.Src) + 5, "yaml:5:24"}, // out of range: the start
	} {
		if got := e.Pos(c.offset); got != c.want {
			t.Errorf("Pos(%d) = %s, want %s", c.offset, got, c.want)
		}
	}
	folded := cfg.Job.Pipeline[2].Filter.Where
	if !folded.Folded || folded.Pos(3) != "yaml:7:16" {
		t.Errorf("folded expression %+v: Pos(3) = %s", folded, folded.Pos(3))
	}
	if p := (config.Expr{Src: "a"}).Pos(0); p != "" {
		t.Errorf("an expression with no position: Pos = %q", p)
	}
	if p := (config.Expr{Src: "a + b", Line: 3, Column: 7}).Pos(4); p != "3:11" {
		t.Errorf("an expression without a file: Pos = %q, want 3:11", p)
	}

	// A problem the compiler finds in an expression keeps the position
	// it carries; Annotate fills in only the problems without one.
	problems := errors.Join(
		&config.FieldError{Path: "job.pipeline[1].filter.where", Msg: "unexpected token", Origin: e.Pos(off)},
		&config.FieldError{Path: "job.pipeline[1].filter.where", Msg: "no origin"},
	)
	got := cfg.Annotate(problems).Error()
	for _, want := range []string{
		"yaml:5:42: job.pipeline[1].filter.where: unexpected token",
		"yaml:5:23: job.pipeline[1].filter.where: no origin",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("annotated %q, want %q", got, want)
		}
	}
}
