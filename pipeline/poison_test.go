package pipeline_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weir-stream/weir/stream"
)

// TestExpressionFailureIsPoison: under on_error: fail, a record on which an
// expression fails is a poison record (stream.ErrPoison) named by its input
// position, in the source stage (int("abc")) and past a shuffle (a field
// of null): the runtime stops the job at it, and `processor resume --skip`
// can skip it. Under on_error: skip the same record is dropped.
func TestExpressionFailureIsPoison(t *testing.T) {
	const job = `job:
  name: poison
  pipeline:
    - source: {topics: [orders]}
    - map: {value: {k: value.k, n: "int(value.s)", customer: value.customer}, on_error: %s}
    - key_by: {field: k}
    - map: {value: {k: value.k, n: value.n, city: value.customer.city}, on_error: %s}
    - aggregate: {count: true}
    - sink: {topic: out}
`
	for _, tc := range []struct {
		name, record string
		offset       int64
		msg          string
	}{
		{"source stage", `{"k":"a","s":"abc","customer":{"city":"x"}}`, 1, "invalid operation: int(abc)"},
		{"after the shuffle", `{"k":"a","s":"2","customer":null}`, 1, "cannot fetch city from null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := compileYAML(t, fmt.Sprintf(job, "fail", "fail"))
			if err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, j)
			if !r.runLines(t, `{"k":"a","s":"1","customer":{"city":"x"}}`) {
				t.Fatalf("a good record failed: %s", r.out)
			}
			err = r.send(stream.Record{Topic: "orders", Partition: 4, Offset: tc.offset, Value: []byte(tc.record)})
			var re *stream.RecordError
			if !errors.As(err, &re) || !errors.Is(err, stream.ErrPoison) || re.Topic != "orders" || re.Partition != 4 || re.Offset != tc.offset {
				t.Fatalf("%s: %v, want a poison record at orders/4@%d", tc.record, err, tc.offset)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q lacks %q", err, tc.msg)
			}

			j, err = compileYAML(t, fmt.Sprintf(job, "skip", "skip"))
			if err != nil {
				t.Fatal(err)
			}
			if err := newRunner(t, j).send(stream.Record{Topic: "orders", Partition: 4, Offset: tc.offset, Value: []byte(tc.record)}); err != nil {
				t.Fatalf("under on_error: skip: %v", err)
			}
		})
	}
}
