package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/stream"
)

func newProduceCmd(goJob *stream.Job) *cobra.Command {
	var file, topic, input, schemaFile string
	cmd := &cobra.Command{
		Use:   "produce -c FILE --topic TOPIC --input FILE",
		Short: "Write test records, one a line, to a topic of the job",
		Long: `produce writes the records of --input (one a line: a JSON value, or
key<TAB>value; empty lines skipped; - reads standard input) to --topic, a
topic the job reads or writes, on the job's Kafka: it connects with the
configuration's kafka settings (the file, WEIR_* variables and the same
flags as run), and waits until Kafka has every record. Keys are written as
they are; records with the same key go to the same partition (Kafka's
default partitioner, murmur2), as a Java producer would place them.

Values are written in the topic's format in the job: json and raw as they
are (a json value must be valid JSON), avro and protobuf encoded from the
JSON value in the Confluent wire format, with the format's registry. The
schema is --schema-file (registered under the format's subject, default
<topic>-value), else the one the format names (a sink's schema,
schema_file or schema_id), else the newest schema under the subject.

produce is for trying a job out; it is not the job's input path.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKafka(cmd, file, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				f, ok := topicFormat(cfg, topic)
				if !ok {
					if goJob == nil {
						return fmt.Errorf("--topic %s: job %s neither reads nor writes it (its topics: %s)", topic, cfg.Job.Name, strings.Join(jobTopics(cfg), ", "))
					}
					// A Go job's formats are its codecs: JSON lines are
					// written as they are.
					f = config.Format{Type: config.FormatRaw}
				}
				encode, what, err := produceEncoder(ctx, f, topic, schemaFile)
				if err != nil {
					return err
				}
				in, err := openInput(input, cmd.InOrStdin())
				if err != nil {
					return err
				}
				defer in.Close()
				recs, err := readRecords(in, input, encode)
				if err != nil {
					return err
				}
				n, err := produceRecords(ctx, opts, topic, recs)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "produced %d records to %s (%s)\n", n, topic, what)
				return nil
			})
		},
	}
	addConfigFlags(cmd.Flags(), &file)
	cmd.Flags().StringVar(&topic, "topic", "", "the topic to write: one the job reads (a source, a table) or writes (a sink)")
	cmd.Flags().StringVar(&input, "input", "", "the records, one a line: a JSON value, or key<TAB>value (- : standard input)")
	cmd.Flags().StringVar(&schemaFile, "schema-file", "", "avro or protobuf: the schema to write with, registered under the format's subject")
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagRequired("topic")
	_ = cmd.MarkFlagRequired("input")
	return cmd
}

// topicFormat returns the format of topic's values in the YAML job of cfg:
// that of the source that reads it, of the table join that reads it (the
// type of the join's format, over its source's registry settings), or of
// the sink that writes it.
func topicFormat(cfg *config.Config, topic string) (config.Format, bool) {
	var found *config.Format
	var source config.Format // the format of the last source before a step
	each := func(steps []config.Step) {
		for _, s := range steps {
			switch {
			case found != nil:
				return
			case s.Source != nil:
				source = s.Source.Format
				if slices.Contains(s.Source.Topics, topic) {
					found = &s.Source.Format
				}
			case s.Join != nil && s.Join.Table != nil && s.Join.Table.Topic == topic:
				f := source
				if s.Join.Table.Format != "" {
					f = config.Format{Type: s.Join.Table.Format}
				}
				found = &f
			case s.Sink != nil && s.Sink.Topic == topic:
				found = &s.Sink.Format
			}
		}
	}
	each(cfg.Job.Pipeline)
	for _, ns := range cfg.Job.Streams {
		each(ns.Steps)
	}
	if found == nil {
		return config.Format{}, false
	}
	f := *found
	if f.Type == "" {
		f.Type = config.FormatJSON
	}
	return f, true
}

// jobTopics lists the topics the YAML job of cfg reads and writes.
func jobTopics(cfg *config.Config) []string {
	var out []string
	add := func(t string) {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	each := func(steps []config.Step) {
		for _, s := range steps {
			switch {
			case s.Source != nil:
				for _, t := range s.Source.Topics {
					add(t)
				}
			case s.Join != nil && s.Join.Table != nil:
				add(s.Join.Table.Topic)
			case s.Sink != nil:
				add(s.Sink.Topic)
			}
		}
	}
	each(cfg.Job.Pipeline)
	for _, ns := range cfg.Job.Streams {
		each(ns.Steps)
	}
	return out
}

// produceEncoder returns how the values of a topic in format f are
// written from their text in the input, and says so for the summary.
func produceEncoder(ctx context.Context, f config.Format, topic, schemaFile string) (func([]byte) ([]byte, error), string, error) {
	switch f.Type {
	case config.FormatRaw:
		if schemaFile != "" {
			return nil, "", errors.New("--schema-file: the topic's format is raw")
		}
		return func(b []byte) ([]byte, error) { return b, nil }, "raw", nil
	case config.FormatJSON:
		if schemaFile != "" {
			return nil, "", errors.New("--schema-file: the topic's format is json")
		}
		return func(b []byte) ([]byte, error) {
			if !json.Valid(b) {
				return nil, errors.New("not a JSON value (the topic's format is json)")
			}
			return b, nil
		}, "json", nil
	}
	if f.Registry == "" {
		return nil, "", fmt.Errorf("the topic's format is %s, and its format names no registry", f.Type)
	}
	reg, err := format.NewRegistry(format.RegistryConfig{URL: f.Registry, Username: f.RegistryUsername, Password: f.RegistryPassword, MaxBackoff: time.Second})
	if err != nil {
		return nil, "", err
	}
	subject := f.Subject
	if subject == "" {
		subject = topic + "-value"
	}
	schema, id := f.Schema, f.SchemaID
	file := f.SchemaFile
	if schemaFile != "" {
		file, schema, id = schemaFile, "", 0
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, "", err
		}
		schema = string(b)
	}
	if schema == "" && id == 0 {
		ss, err := reg.Client().SchemaByVersion(ctx, subject, -1)
		if err != nil {
			return nil, "", fmt.Errorf("the newest schema under subject %s at %s (give one with --schema-file): %w", subject, f.Registry, err)
		}
		id = ss.ID
	}
	var enc interface {
		Prepare(context.Context) error
		Append([]byte, any) ([]byte, error)
		SchemaID() int
	}
	if f.Type == config.FormatProtobuf {
		enc, err = format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: subject, SchemaID: id, Message: f.Message}, schema)
	} else {
		enc, err = format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subject, SchemaID: id}, schema)
	}
	if err != nil {
		return nil, "", err
	}
	if err := enc.Prepare(ctx); err != nil {
		return nil, "", fmt.Errorf("schema registry %s, subject %s: %w", f.Registry, subject, err)
	}
	what := fmt.Sprintf("%s, schema %d (subject %s)", f.Type, enc.SchemaID(), subject)
	return func(b []byte) ([]byte, error) {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("not a JSON value: %w", err)
		}
		return enc.Append(nil, v)
	}, what, nil
}

// openInput opens the file of --input; "-" is in.
func openInput(name string, in io.Reader) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(in), nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--input: %w", err)
	}
	return f, nil
}

// readRecords reads records, one a line (a value, or key<TAB>value; empty
// lines skipped), from r, the input name, each value written by encode.
func readRecords(r io.Reader, name string, encode func([]byte) ([]byte, error)) ([]*kgo.Record, error) {
	var recs []*kgo.Record
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSuffix(sc.Text(), "\r")
		if text == "" {
			continue
		}
		rec := &kgo.Record{}
		value := text
		if k, v, ok := strings.Cut(text, "\t"); ok {
			rec.Key, value = []byte(k), v
		}
		var err error
		if rec.Value, err = encode([]byte(value)); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return recs, nil
}

// produceRecords writes recs to topic with an idempotent producer and
// waits until Kafka has them all.
func produceRecords(ctx context.Context, opts []kgo.Opt, topic string, recs []*kgo.Record) (int, error) {
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("write to %s: %w", topic, err)
	}
	return len(recs), nil
}
