// Package expression owns the expression language of YAML jobs: the
// expressions a filter, map, flat_map, key_by, aggregate, dedupe or route
// step computes over a record. It compiles an expression once, at job start,
// checking its syntax and, where the types are known, its types, and
// evaluates the compiled program per record with a reusable Evaluator.
//
// Expressions are written in the language of github.com/expr-lang/expr
// (docs/yaml.md is the reference for YAML users). An expression sees
// the record through the variables value, key, timestamp, headers, topic,
// partition and offset (see Vars).
//
// The package does no I/O and keeps no state between calls except what an
// Evaluator reuses. A Program is immutable and may be shared by goroutines;
// an Evaluator belongs to one goroutine (one per task).
//
// Types: value's numbers are int64 (a JSON integer that fits) or float64,
// and expressions mix them freely; an integer operation gives an integer,
// `/` always a float. key, topic are strings, partition, offset and
// timestamp_ms int64, timestamp a time.Time (its methods, such as
// timestamp.Unix(), and expr-lang's date(), duration() and now() apply),
// headers an object of strings. Eval returns only the value types of
// decoded JSON (see Eval), so that what an expression builds can be encoded
// as JSON, stored in state and compared like a decoded record.
//
// Speed: Compile rewrites member access on value (value.a.b, value.items[0],
// .price in a predicate) into direct reads of map[string]any and []any
// (fetch.go): expr-lang would use reflection, which allocates. A filter
// over value allocates nothing per record (TestFilterAllocs).
//
// Null: a missing field is null, and an operation on null gives null (or,
// as a condition, false) instead of an error, as in SQL; == compares null
// as a value; a member of null is an error. null.go states every rule and
// implements them; docs/yaml.md, "Missing fields and null", is the table.
//
// Errors: Compile returns an *Error with the byte offset of the problem in
// the source; the caller (config validation) turns it into file:line:column.
// Eval returns plain errors for runtime failures (a type mismatch, a division
// by zero, a member of nil); they never contain Go file names.
package expression

import (
	"reflect"
	"time"

	"github.com/expr-lang/expr/vm"
)

// Header is one Kafka record header. It has the same layout as
// stream.Header so that a caller converts a slice without copying.
type Header struct {
	Key   string
	Value []byte
}

// Vars is what an expression sees of one record.
//
// Value is the decoded JSON value: map[string]any, []any, string, float64,
// int64 (a JSON integer that fits), bool or nil. The other fields are the
// record's context.
type Vars struct {
	Value     any       // `value`
	Key       []byte    // `key`, seen as a string
	Timestamp time.Time // `timestamp`, and `timestamp_ms` (Unix milliseconds, an int64)
	Headers   []Header  // `headers`, seen as a map[string]string (built only if the program uses it)
	Topic     string    // `topic`
	Partition int32     // `partition`, seen as an int64
	Offset    int64     // `offset`
}

// Type is the type of result a step wants from an expression. Compile checks
// it where the expression's type is known at compile time; where it is not
// (a field of value), the Evaluator checks it per record.
type Type int

const (
	Any    Type = iota // any value
	Bool               // true or false: a filter's where, a route's when
	Number             // an int64 or float64: sum, min, max, avg
	String             // a string
	List               // a []any: flat_map's each
)

// String returns the type's name as YAML users read it.
func (t Type) String() string {
	switch t {
	case Any:
		return "any"
	case Bool:
		return "bool"
	case Number:
		return "number"
	case String:
		return "string"
	case List:
		return "list"
	}
	return "unknown"
}

// Error is a compile error of an expression. Offset is the byte offset in
// the source where the problem is; Error() does not include the position:
// the caller adds the file, line and column of the expression in the YAML.
type Error struct {
	Offset int    // byte offset in the source, 0 ≤ Offset ≤ len(src)
	Msg    string // the library's message, without position or source snippet
}

func (e *Error) Error() string { return e.Msg }

// Program is a compiled expression. It is immutable and safe for concurrent
// use; evaluate it with an Evaluator.
type Program struct {
	src  string
	want Type
	// result is the type of the result as the checker knows it: nil or an
	// interface where it depends on the record.
	result reflect.Type
	uses   uses
	prog   *vm.Program
	// fields are the top-level fields of value the expression reads, if
	// wholeValue is false (valueFields).
	fields     []string
	wholeValue bool
	// field is the expression's one field if it is a plain read of it
	// (ValueField).
	field   string
	isField bool
	// path is the expression's path if it is a plain read of it
	// (ValuePath).
	path   []string
	isPath bool
	// scaled and factor are the path and the constant of an expression
	// that multiplies them (ScaledPath).
	scaled   []string
	factor   float64
	isScaled bool
	// intPred is the expression as an IntPredicate, if it is one.
	intPred *IntPredicate
	// required are the fields RequiredFields returns.
	required []string
}

// ValueFields returns the top-level fields of value that the expression
// reads (sorted, shared: not to be modified), and whether they are all it
// reads of value: then a value with only those fields gives the expression
// the same result as the whole value. ok is false if the expression reads
// value otherwise than by members with constant names (value itself,
// len(value), value[k], $env). An expression without value reads no field.
func (p *Program) ValueFields() (fields []string, ok bool) { return p.fields, !p.wholeValue }

// RequiredFields returns the top-level fields of value that the
// expression reads as if they were always there (sorted, shared: not to be
// modified): by value.f or value["f"], not by value?.f nor as the left
// side of ?? (value.f ?? 0), which say that the field may be missing. A
// record without one of them is probably not what the expression's author
// meant (a misspelt name reads null on every record).
func (p *Program) RequiredFields() []string { return p.required }

// ValueField returns the field f if the expression is nothing but a read
// of it (value.f, value?.f, value["f"]): its result is then the value's
// field f as decoded, or nil where value is an object without f.
func (p *Program) ValueField() (f string, ok bool) { return p.field, p.isField }

// ValuePath returns the path [f1, f2, …] if the expression is nothing
// but a read of it, at any depth (value.f1.f2, value?.f1?.f2,
// value["f1"].f2; shared: not to be modified). Over a value whose members
// along the path up to the last are objects, its result is the last
// member as decoded, or nil where the last object lacks it; otherwise
// (a member missing or not an object on the way, or value not an object)
// only evaluating the expression says what it gives, an error or nil.
func (p *Program) ValuePath() (path []string, ok bool) { return p.path, p.isPath }

// ScaledPath returns the path and the constant c if the expression is c *
// path or path * c, with path as ValuePath's and c a floating-point
// literal (0.908 * value.price). Where the path reads a JSON integer x
// that an int64 holds (as ValuePath says), its result is float64(x) * c.
func (p *Program) ScaledPath() (path []string, c float64, ok bool) {
	return p.scaled, p.factor, p.isScaled
}

// IntPredicate returns the expression compiled to run on integers
// without boxing, if it is a boolean expression of integer members of
// value and integer literals (see IntPredicate).
func (p *Program) IntPredicate() (*IntPredicate, bool) { return p.intPred, p.intPred != nil }

// Source returns the expression's source text.
func (p *Program) Source() string { return p.src }

// Uses reports whether the expression reads the variable name (one of
// value, key, timestamp, timestamp_ms, headers, topic, partition, offset).
// An expression that reads $env reads them all.
func (p *Program) Uses(name string) bool {
	for i, n := range varNames {
		if n == name {
			return p.uses&(1<<i) != 0
		}
	}
	return false
}
