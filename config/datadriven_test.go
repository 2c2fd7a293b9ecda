package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/weir-stream/weir/config"
)

// TestValidateScripts runs testdata/validate/*.txt: each case is a job
// file (the harness adds kafka.brokers after it, so that lines and columns
// are those written in the case).
//
//	validate   prints every problem Load reports, one a line, or "ok"
//	decode     prints the shapes the job decodes to (expressions with
//	           their positions, aggregates, routes, streams), or the problems
//	exprs      prints Job.Exprs: every expression written, with its key path
func TestValidateScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/validate", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			y := d.Input + "\nkafka: {brokers: [\"k:9092\"]}\n"
			cfg, err := config.Load(config.Source{YAML: []byte(y), NoEnv: true})
			if err != nil {
				return err.Error() + "\n"
			}
			switch d.Cmd {
			case "validate":
				return "ok\n"
			case "decode":
				return describeJob(cfg.Job)
			case "exprs":
				var b strings.Builder
				for _, pe := range cfg.Job.Exprs() {
					fmt.Fprintf(&b, "%s %s\n", pe.Path, expr(&pe.Expr))
				}
				return b.String()
			}
			t.Fatalf("unknown command %s", d.Cmd)
			return ""
		})
	})
}

func describeJob(j config.Job) string {
	var b strings.Builder
	describeSteps(&b, "pipeline", j.Pipeline)
	for _, s := range j.Streams {
		fmt.Fprintf(&b, "stream %s @%s:%d:%d\n", s.Name, s.File, s.Line, s.Column)
		describeSteps(&b, "  "+s.Name, s.Steps)
	}
	return b.String()
}

func expr(e *config.Expr) string {
	if e == nil {
		return "-"
	}
	s := fmt.Sprintf("%q @%s", e.Src, e.Pos(0))
	if e.Folded {
		s += " folded"
	}
	return s
}

func describeSteps(b *strings.Builder, list string, steps []config.Step) {
	for i, s := range steps {
		p := fmt.Sprintf("%s[%d]", list, i)
		switch {
		case s.Source != nil:
			fmt.Fprintf(b, "%s source %v\n", p, s.Source.Topics)
		case s.Filter != nil:
			fmt.Fprintf(b, "%s filter where=%s on_error=%s\n", p, expr(&s.Filter.Where), s.Filter.OnError)
		case s.Map != nil:
			fmt.Fprintf(b, "%s map key=%s\n", p, expr(s.Map.Key))
			if v := s.Map.Value; v != nil {
				if v.Expr != nil {
					fmt.Fprintf(b, "  value=%s\n", expr(v.Expr))
				}
				for _, f := range v.Fields {
					fmt.Fprintf(b, "  field %s @%d:%d = %s\n", f.Name, f.Line, f.Column, expr(&f.Expr))
				}
			}
		case s.FlatMap != nil:
			fmt.Fprintf(b, "%s flat_map each=%s\n", p, expr(&s.FlatMap.Each))
		case s.KeyBy != nil:
			fmt.Fprintf(b, "%s key_by field=%q expr=%s\n", p, s.KeyBy.Field, expr(s.KeyBy.Expr))
		case s.Window != nil:
			fmt.Fprintf(b, "%s window %s %v\n", p, s.Window.Type, s.Window.Size)
		case s.Aggregate != nil:
			fmt.Fprintf(b, "%s aggregate emit=%s\n", p, s.Aggregate.Emit)
			for _, a := range s.Aggregate.Aggs {
				fmt.Fprintf(b, "  %s @%d:%d = %s(%s)", a.Name, a.Line, a.Column, a.Op, expr(a.Arg))
				if a.Limit != 0 {
					fmt.Fprintf(b, " limit=%d", a.Limit)
				}
				b.WriteString("\n")
			}
		case s.Dedupe != nil:
			fmt.Fprintf(b, "%s dedupe key=%s within=%v\n", p, expr(s.Dedupe.Key), s.Dedupe.Within)
		case s.Join != nil:
			j := s.Join
			switch {
			case j.Table != nil:
				fmt.Fprintf(b, "%s join table=%s format=%s as=%s type=%s\n", p, j.Table.Topic, j.Table.Format, j.As, j.Type)
			case j.Stream != nil:
				fmt.Fprintf(b, "%s join stream=%s within=%v as=%s type=%s\n", p, j.Stream.Name, j.Stream.Within, j.As, j.Type)
			}
		case s.Route != nil:
			fmt.Fprintf(b, "%s route\n", p)
			for _, br := range s.Route.Branches {
				fmt.Fprintf(b, "  when=%s to=%s\n", expr(br.When), br.To)
			}
		case s.Sink != nil:
			fmt.Fprintf(b, "%s sink %s\n", p, s.Sink.Topic)
		}
	}
}
