package source

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header keys of a dead-letter record. Together, topic, partition and offset
// name the source record uniquely, so a consumer of the dead-letter topic can
// drop the duplicates that at-least-once delivery may write (see
// DeadLetterWriter).
const (
	DeadLetterHeaderTopic     = "weir-dlq-topic"
	DeadLetterHeaderPartition = "weir-dlq-partition"
	DeadLetterHeaderOffset    = "weir-dlq-offset"
	DeadLetterHeaderError     = "weir-dlq-error"
)

// deadLetterMaxError bounds the weir-dlq-error header: a decoder's message
// can quote the whole input.
const deadLetterMaxError = 1024

// DeadLetterWriter takes the dead-letter records of a source under
// kafkaio.OnErrorDeadLetter. Both methods are called on the goroutine that
// calls Source.Next and Source.Barrier.
//
// Source.Barrier calls FlushDeadLetters before it places barrier n, so every
// dead letter of the records before barrier n is durable before checkpoint n
// can complete, and none is lost across a restore.
//
// The default writer (used when Config.DeadLetter is nil) produces
// with the source's own client, an idempotent producer: delivery is
// at-least-once. Records dead-lettered after the last completed checkpoint
// are read again after a restore and written again; the headers name each
// source record uniquely, so consumers can drop duplicates. A task that wants
// exactly-once dead letters can pass a writer that adds the records to its
// transactional sink: they then commit with the checkpoint of their epoch.
type DeadLetterWriter interface {
	// WriteDeadLetter hands r over for writing; it may return before r is
	// durable. The writer owns r afterwards.
	WriteDeadLetter(ctx context.Context, r *kgo.Record) error
	// FlushDeadLetters returns once every record handed over so far is
	// durable, or with the first error.
	FlushDeadLetters(ctx context.Context) error
}

// NewDeadLetterRecord returns the dead-letter record, for topic, of source
// record r that failed with cause: key, value and headers unchanged, plus the
// weir-dlq-* headers. The timestamp is left for the producer to set, so that
// the dead-letter topic's retention counts from when the record failed.
func NewDeadLetterRecord(topic string, r *kgo.Record, cause error) *kgo.Record {
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	if len(msg) > deadLetterMaxError {
		msg = strings.ToValidUTF8(msg[:deadLetterMaxError], "")
	}
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+4)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: DeadLetterHeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: DeadLetterHeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: DeadLetterHeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: DeadLetterHeaderError, Value: []byte(msg)},
	)
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers}
}

// deadLetterProducer is the default DeadLetterWriter: asynchronous produces
// on a kgo client with idempotent writes (kgo's default), checked at flush.
type deadLetterProducer struct {
	cl      *kgo.Client
	promise func(*kgo.Record, error) // p.done, bound once

	mu  sync.Mutex // guards err; promises run on kgo's goroutines
	err error      // the first produce failure; sticky
}

func newDeadLetterProducer(cl *kgo.Client) *deadLetterProducer {
	p := &deadLetterProducer{cl: cl}
	p.promise = p.done
	return p
}

func (p *deadLetterProducer) done(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = fmt.Errorf("source: produce dead letter of %s partition %s offset %s to %s: %w",
			deadLetterHeader(r, DeadLetterHeaderTopic), deadLetterHeader(r, DeadLetterHeaderPartition),
			deadLetterHeader(r, DeadLetterHeaderOffset), r.Topic, err)
	}
}

func (p *deadLetterProducer) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// WriteDeadLetter produces r asynchronously.
func (p *deadLetterProducer) WriteDeadLetter(ctx context.Context, r *kgo.Record) error {
	if err := p.failed(); err != nil {
		return err
	}
	p.cl.Produce(ctx, r, p.promise)
	return nil
}

// FlushDeadLetters waits for every produce and reports the first failure.
func (p *deadLetterProducer) FlushDeadLetters(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("source: flush dead letters: %w", err)
	}
	return p.failed()
}

// deadLetterHeader returns the value of header key of r, or "?".
func deadLetterHeader(r *kgo.Record, key string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value)
		}
	}
	return "?"
}
