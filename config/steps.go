package config

import "time"

// Expr is an expression of the job language (docs/yaml.md), as written in
// the job file: its text and where it starts, so that a compile error can
// point at the line and column of the problem inside it.
type Expr struct {
	// Src is the expression's text.
	Src string
	// File, Line and Column locate the first character of Src in the job
	// file (Column counts from 1, after any opening quote); zero if the
	// expression did not come from a file (an environment variable, a
	// test). Use Pos for an offset inside Src.
	File         string `json:"-"` // positions are no part of the job's fingerprint
	Line, Column int    `json:"-"`
	// Folded is true if Src spans lines or the YAML scalar was folded or
	// escaped, so that an offset in Src cannot be mapped to a column: Pos
	// then points at the start.
	Folded bool `json:"-"`
}

// NamedExpr is one field of a projection: `name: <expr>`.
type NamedExpr struct {
	Name string
	Expr Expr
	// File, Line and Column locate the field's name in the job file.
	File         string `json:"-"` // positions are no part of the job's fingerprint
	Line, Column int    `json:"-"`
}

// FilterStep keeps the records for which Where is true.
type FilterStep struct {
	Where Expr `mapstructure:"where"`
	// OnError is what happens to a record on which Where fails (a type
	// error, a division by zero): "fail" (the default: stop the job),
	// "skip" (count and drop it) or "dead-letter" (count it and write it
	// to DeadLetterTopic).
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
}

// MapStep computes a new value, and optionally a new key, for each record.
// Value is either one expression (`value: <expr>`) or an object whose
// fields are expressions (`value: {id: value.id, total: value.a + value.b}`).
type MapStep struct {
	// Value is nil (the value stays), Expr, or Fields.
	Value *MapValue `mapstructure:"value"`
	// Key, if set, computes the record's new key. It shuffles exactly
	// when key_by would: if a keyed step (aggregate, dedupe, join,
	// window) follows before the next key change.
	Key             *Expr  `mapstructure:"key"`
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
}

// MapValue is map.value: one expression, or an object of named fields, in
// the order written.
type MapValue struct {
	Expr   *Expr
	Fields []NamedExpr
}

// FlatMapStep emits one record per element of the list Each evaluates to,
// with the element as its value (an empty list or null emits none).
type FlatMapStep struct {
	Each            Expr   `mapstructure:"each"`
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
}

// Agg is one named aggregate of an aggregate step.
type Agg struct {
	// Name is the output field.
	Name string
	// Op is count, sum, min, max, avg, count_distinct, first, last,
	// collect, max_by or min_by.
	Op string
	// Arg is the expression aggregated; nil for count.
	Arg *Expr
	// By is what max_by and min_by order the records by (a number or a
	// string); nil for the other ops.
	By *Expr
	// Limit bounds the list of collect (the latest Limit values are kept)
	// and of max_by and min_by (the first Limit values tied at the
	// extreme): DefaultCollectLimit unless set, at most MaxCollectLimit;
	// 0 for the other ops.
	Limit int
	// File, Line and Column locate the aggregate's key in the job file.
	File         string `json:"-"` // positions are no part of the job's fingerprint
	Line, Column int    `json:"-"`
}

// DedupeStep drops a record whose dedupe key was already seen, for the
// current key, within Within (event time if the job has event time,
// processing time otherwise). The state of a dedupe key expires Within
// after it was last seen.
type DedupeStep struct {
	// Key is the dedupe key; default the record key.
	Key             *Expr         `mapstructure:"key"`
	Within          time.Duration `mapstructure:"within"`
	OnError         string        `mapstructure:"on_error"`
	DeadLetterTopic string        `mapstructure:"dead_letter_topic"`
}

// JoinStep joins the stream with a table (Table) or with another stream
// (Stream): exactly one of them.
type JoinStep struct {
	// Table is a stream–table join: each record is enriched with the
	// latest value of its key in a compacted Kafka topic.
	Table *TableJoin `mapstructure:"table"`
	// Stream is an interval join on event time with a named stream of
	// job.streams.
	Stream *StreamJoin `mapstructure:"stream"`
	// As is the field of the output value that holds the other side's
	// value: the output is the record's value (an object) with the field
	// As set. Default "table" or the stream's name.
	As string `mapstructure:"as"`
	// Type is "left" (a record without a match is emitted with As null;
	// the default for a table join) or "inner" (it is dropped; the only
	// type of an interval join).
	Type string `mapstructure:"type"`
}

// TableJoin is the table side of a stream–table join.
type TableJoin struct {
	// Topic is the table's compacted topic, keyed by the join key; it must
	// have as many partitions as the job's source topics, and be
	// partitioned the same way (checked at start).
	Topic string `mapstructure:"topic"`
	// Format of the table's values: "json" (default) or "raw".
	Format string `mapstructure:"format"`
}

// StreamJoin is the other side of an interval join.
type StreamJoin struct {
	// Name is the stream in job.streams.
	Name string `mapstructure:"name"`
	// Within: a pair joins if their event times differ by at most Within.
	Within time.Duration `mapstructure:"within"`
}

// RouteStep sends each record to every branch whose condition holds: the
// last step of a pipeline, with one named stream of job.streams per
// branch.
type RouteStep struct {
	// Branches are the list written as the step's value
	// (`route: [{when: ..., to: ...}, ...]`), in order.
	Branches []RouteBranch `mapstructure:"-"`
}

// RouteBranch is one branch of a route: `{when: <expr>, to: <stream>}`;
// without When every record goes to To.
type RouteBranch struct {
	When *Expr  `mapstructure:"when"`
	To   string `mapstructure:"to"`
}

// NamedStream is one entry of job.streams: a pipeline that starts with a
// source (the other side of an interval join) or that a route feeds.
type NamedStream struct {
	Name  string
	Steps []Step
	// File, Line and Column locate the stream's name in the job file.
	File         string `json:"-"` // positions are no part of the job's fingerprint
	Line, Column int    `json:"-"`
}
