package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

type Click struct {
	User string `json:"user"`
	Page string `json:"page"`
}

func clicksJob() (*stream.Job, error) {
	job := stream.NewJob("clicks-per-user")

	clicks := stream.From(job, stream.KafkaSource{
		Topics:          []string{"clicks"},
		Start:           kafkaio.Start{Kind: kafkaio.StartEarliest}, // or kafkaio.StartAt(t)
		Format:          stream.FormatJSON,
		OnError:         kafkaio.OnErrorDeadLetter,
		DeadLetterTopic: "clicks-dlq",
	}, stream.JSONCodec[Click]{})

	pages := stream.Filter(clicks, func(c Click) (bool, error) { return c.Page != "/health", nil })
	counts := stream.Count(pages, "clicks") // *Stream[int64], per record key
	text := stream.Map(counts, func(n int64) (string, error) { return strconv.FormatInt(n, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: "clicks-per-user"}, stream.StringCodec{})

	// Sessions: a keyed process function with state and a timer.
	sessions := stream.Process(pages, "sessions", func() stream.KeyedProcessFunction[Click, string] {
		return &sessionizer{gap: 30 * time.Minute}
	})
	stream.To(sessions, stream.KafkaSink{Topic: "sessions"}, stream.StringCodec{})

	return job, job.Build()
}

type sessionizer struct {
	gap   time.Duration
	count *state.ValueState[int64]
	timer *state.ValueState[int64]
}

// Open creates the state handles, once per task.
func (s *sessionizer) Open(oc stream.OpenContext) error {
	var err error
	if s.count, err = state.NewValueState(oc.Backend, oc.StateName("count"), stream.Int64Codec{}); err != nil {
		return err
	}
	s.timer, err = state.NewValueState(oc.Backend, oc.StateName("timer"), stream.Int64Codec{})
	return err
}

// ProcessElement runs for each element, with its record key current.
func (s *sessionizer) ProcessElement(ctx *stream.Context[string], c Click) error {
	n, _, err := s.count.Get()
	if err != nil {
		return err
	}
	if err := s.count.Put(n + 1); err != nil {
		return err
	}
	if old, ok, err := s.timer.Get(); err != nil {
		return err
	} else if ok {
		if err := ctx.DeleteProcessingTimeTimer(time.Unix(0, old)); err != nil {
			return err
		}
	}
	at := ctx.Now().Add(s.gap)
	if err := ctx.RegisterProcessingTimeTimer(at); err != nil {
		return err
	}
	return s.timer.Put(at.UnixNano())
}

// OnTimer runs when a timer is due, with the timer's key current.
func (s *sessionizer) OnTimer(ctx *stream.Context[string], at time.Time) error {
	n, _, err := s.count.Get()
	if err != nil {
		return err
	}
	_ = s.count.Clear()
	_ = s.timer.Clear()
	return ctx.Emit(fmt.Sprintf("%s: %d clicks", ctx.Key(), n))
}

// Example runs the job of docs/job-api.md in one task, as the runtime
// does: a batch of records, then the timers an hour later.
func Example() {
	job, err := clicksJob()
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "weir-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	backend, err := state.Open(ctx, state.Config{Dir: dir, Task: "clicks-0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close(ctx)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	task, err := job.NewTask(stream.TaskContext{Backend: backend, Task: "clicks-0", Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer task.Close()

	sinks := job.Sinks()
	print := stream.EmitterFunc(func(sink int, r stream.Record) error {
		fmt.Printf("%s %s=%s\n", sinks[sink].Topic, r.Key, r.Value)
		return nil
	})
	in := []stream.Record{
		{Topic: "clicks", Key: []byte("ann"), Value: []byte(`{"user":"ann","page":"/a"}`)},
		{Topic: "clicks", Key: []byte("bob"), Value: []byte(`{"user":"bob","page":"/health"}`)},
		{Topic: "clicks", Key: []byte("ann"), Value: []byte(`{"user":"ann","page":"/b"}`)},
		{Topic: "clicks", Key: []byte("bob"), Value: []byte(`not json`)},
	}
	if err := task.ProcessBatch(in, print); err != nil {
		fmt.Println(err)
	}
	if err := task.FireTimers(now.Add(time.Hour), print); err != nil {
		fmt.Println(err)
	}
	// Output:
	// clicks-per-user ann=1
	// clicks-per-user ann=2
	// clicks-dlq bob=not json
	// sessions ann=ann: 2 clicks
}

// ExampleKeyBy counts views per page of clicks keyed by user: the KeyBy
// before Count cuts the job into two stages. It runs one task of each, as
// the runtime does, handing main's shuffle records to the "pages" task.
func ExampleKeyBy() {
	job := stream.NewJob("views-per-page")
	clicks := stream.From(job, stream.KafkaSource{Topics: []string{"clicks"}}, stream.JSONCodec[Click]{})
	byPage := stream.KeyBy(clicks, func(c Click) ([]byte, error) { return []byte(c.Page), nil },
		stream.ShuffleCodec(stream.JSONCodec[Click]{}), stream.Named("pages"), stream.Parallelism(4))
	views := stream.Count(byPage, "views")
	stream.To(views, stream.KafkaSink{Topic: "views"}, stream.JSONCodec[int64]{})
	if err := job.Build(); err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range job.Stages() {
		fmt.Println(st.Name, st.Operators)
	}

	// Stage main: records keyed by user in, shuffle records keyed by page out.
	main, _ := job.NewTask(stream.TaskContext{Stage: "main", Task: "main/0"})
	defer main.Close()
	var shuffled []stream.Record
	upstream := emitter{shuffle: func(edge int, r stream.Record) error {
		shuffled = append(shuffled, stream.Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)})
		return nil
	}}
	_ = main.ProcessBatch([]stream.Record{
		{Topic: "clicks", Key: []byte("ann"), Value: []byte(`{"user":"ann","page":"/a"}`)},
		{Topic: "clicks", Key: []byte("bob"), Value: []byte(`{"user":"bob","page":"/a"}`)},
		{Topic: "clicks", Key: []byte("ann"), Value: []byte(`{"user":"ann","page":"/b"}`)},
	}, upstream)

	// Stage pages: the shuffle records in, counts per page out.
	dir, _ := os.MkdirTemp("", "weir-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	backend, _ := state.Open(ctx, state.Config{Dir: dir, Task: "pages-0"})
	defer backend.Close(ctx)
	pages, err := job.NewTask(stream.TaskContext{Stage: "pages", Task: "pages/0", Backend: backend})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pages.Close()
	_ = pages.ProcessBatch(shuffled, stream.EmitterFunc(func(sink int, r stream.Record) error {
		fmt.Printf("%s %s=%s\n", r.Topic, r.Key, r.Value)
		return nil
	}))
	// Output:
	// main [From([clicks]) KeyBy]
	// pages [Count("views") To(views)]
	// views /a=1
	// views /a=2
	// views /b=1
}

// emitter is an Emitter of functions.
type emitter struct {
	emit    func(sink int, r stream.Record) error
	shuffle func(edge int, r stream.Record) error
}

func (e emitter) Emit(sink int, r stream.Record) error    { return e.emit(sink, r) }
func (e emitter) Shuffle(edge int, r stream.Record) error { return e.shuffle(edge, r) }
