// Command views-per-page-go is a Weir job defined in Go and run as its own
// binary: it counts page views from clicks keyed by user. It re-keys the
// clicks by page (stream.KeyBy, which makes the job two stages joined by a
// shuffle topic), counts each page's views in a keyed Process function
// with value state, and writes, for each click, {"key":"<page>","count":<n>}
// keyed by the page, exactly once.
//
// cli.Main gives it the commands, configuration, HTTP endpoints and
// lifecycle of the stock processor binary:
//
//	go build -o views-per-page ./examples/views-per-page-go
//	./views-per-page validate -c examples/views-per-page-go/weir.yaml
//	./views-per-page run -c examples/views-per-page-go/weir.yaml
//
// The configuration has no job.pipeline: the job is this program's. The
// topics are the program's own settings: CLICKS_TOPIC (default clicks) and
// VIEWS_TOPIC (default views-per-page) in the environment.
package main

import (
	"os"

	"github.com/weir-stream/weir/cli"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// Click is an input record's value.
type Click struct {
	User string `json:"user"`
	Page string `json:"page"`
}

// PageViews is an output record's value: a page's running count.
type PageViews struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

func main() {
	cli.Main(viewsPerPage(env("CLICKS_TOPIC", "clicks"), env("VIEWS_TOPIC", "views-per-page")))
}

// viewsPerPage defines the job: clicks from input, views per page to output.
func viewsPerPage(input, output string) *stream.Job {
	job := stream.NewJob("views-per-page-go")
	clicks := stream.From(job, stream.KafkaSource{
		Topics: []string{input},
		Format: stream.FormatJSON,
		Start:  kafkaio.Start{Kind: kafkaio.StartEarliest},
	}, stream.JSONCodec[Click]{})
	// The clicks travel to the per-page stage through a shuffle topic,
	// encoded as JSON again.
	byPage := stream.KeyBy(clicks, func(c Click) ([]byte, error) { return []byte(c.Page), nil },
		stream.ShuffleCodec(stream.JSONCodec[Click]{}))
	views := stream.Process(byPage, "views", func() stream.KeyedProcessFunction[Click, PageViews] {
		return &viewCounter{}
	})
	stream.To(views, stream.KafkaSink{Topic: output}, stream.JSONCodec[PageViews]{})
	return job
}

// viewCounter counts the views of the current key, a page, in value state.
type viewCounter struct {
	views *state.ValueState[int64]
}

// Open creates the state handle, once per task.
func (v *viewCounter) Open(oc stream.OpenContext) error {
	var err error
	v.views, err = state.NewValueState(oc.Backend, oc.StateName("views"), stream.Int64Codec{})
	return err
}

// ProcessElement counts one click of the current page and emits the page's
// count.
func (v *viewCounter) ProcessElement(ctx *stream.Context[PageViews], _ Click) error {
	n, _, err := v.views.Get()
	if err != nil {
		return err
	}
	n++
	if err := v.views.Put(n); err != nil {
		return err
	}
	return ctx.Emit(PageViews{Key: string(ctx.Key()), Count: n})
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
