package expression

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/types"
)

// The variables an expression sees, in the order of the bits of uses.
var varNames = [...]string{"value", "key", "timestamp", "timestamp_ms", "headers", "topic", "partition", "offset"}

const (
	useValue uses = 1 << iota
	useKey
	useTimestamp
	useTimestampMs
	useHeaders
	useTopic
	usePartition
	useOffset
	useAll = 1<<len(varNames) - 1
)

// uses is the bit set of the variables a program reads.
type uses uint8

// checkEnv gives the checker the type of each variable: value is unknown
// (any), the others are typed so that `key + 1` or `offset == "a"` fail at
// compile time.
var checkEnv = types.Map{
	"value":        types.Any,
	"key":          types.String,
	"timestamp":    types.TypeOf(time.Time{}),
	"timestamp_ms": types.TypeOf(int64(0)),
	"headers":      types.TypeOf(map[string]any{}), // of strings; a missing header is null
	"topic":        types.String,
	"partition":    types.TypeOf(int64(0)),
	"offset":       types.TypeOf(int64(0)),
}

// The functions the rewritten program calls, with the variables: in the
// environment, expr-lang calls a func(any, any) any directly.
var funcs = func() map[string]any {
	m := map[string]any{
		getFunc:   get,
		ogetFunc:  oget,
		chainFunc: endChain,
		divFunc:   div,
		modFunc:   mod,
	}
	for k, f := range nullFuncs {
		m[k] = f
	}
	return m
}()

// runEnv is checkEnv with funcs: the environment of the rewritten program.
// Expressions are checked against checkEnv, so they cannot call funcs.
var runEnv = func() types.Map {
	m := types.Map{}
	for k, v := range checkEnv {
		m[k] = v
	}
	for k, f := range funcs {
		m[k] = types.TypeOf(f)
	}
	return m
}()

// Compile compiles src, an expression whose result must be of type want.
// A syntax error, an unknown variable or function, an operation on types
// that can never work, or a result that can never be of type want is
// returned as an *Error.
func Compile(src string, want Type) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &Error{Msg: "the expression is empty"}
	}
	// Dates without a zone (date("2024-01-01"), now()) are in UTC: a job's
	// results do not depend on the machine's zone.
	opts := []expr.Option{expr.Env(checkEnv), expr.Timezone("UTC")}
	if want == Bool {
		opts = append(opts, expr.AsBool())
	}
	// The first compilation type-checks the expression as written, so that
	// `1 / "a"` is reported as the operator's error. The second rewrites it
	// for speed and safety: / and % report a division by zero (expr-lang's /
	// gives +Inf, which JSON cannot encode, and its % panics), members of
	// value are read without reflection (fetch.go), and operations on null
	// follow null.go.
	checked, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, compileError(src, err)
	}
	if err := checkResult(checked.Node().Type(), want); err != nil {
		return nil, err
	}
	// The predicate is read from the expression as written: expr-lang's
	// optimizer folds `x || true` into true where the program that runs
	// evaluates x (and fails if x does).
	var intPred *IntPredicate
	if want == Bool {
		if raw, err := expr.Compile(src, append(slices.Clip(opts), expr.Optimize(false))...); err == nil {
			intPred, _ = intPredicate(raw.Node())
		}
	}
	opts = append(opts, expr.Env(runEnv), expr.Patch(fetchPatcher{}))
	if strings.ContainsAny(src, "/%") {
		opts = append(opts, expr.Patch(divisionPatcher{}))
	}
	opts = append(opts, expr.Patch(&nullPatcher{}))
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, compileError(src, err)
	}
	fields, ok := valueFields(checked.Node())
	field, isField := valueField(checked.Node())
	path, isPath := valuePath(checked.Node())
	scaled, factor, isScaled := scaledPath(checked.Node())
	return &Program{src: src, want: want, result: checked.Node().Type(), uses: usedVars(prog.Node()), prog: prog, fields: fields, wholeValue: !ok,
		field: field, isField: isField, path: path, isPath: isPath, scaled: scaled, factor: factor, isScaled: isScaled,
		intPred:  intPred,
		required: requiredFields(checked.Node())}, nil
}

// Check returns an *Error if p's result can never be of one of the types
// wants: its type is known at compile time (a literal, a comparison, a
// function's result) and is none of them. A result of unknown type (a
// field of value) passes: the step checks it per record. It is for steps
// that take more than one type (min and max: a number or a string) or
// that check their values themselves (sum skips a null).
func (p *Program) Check(wants ...Type) error {
	var err error
	for _, w := range wants {
		if err = checkResult(p.result, w); err == nil {
			return nil
		}
	}
	if len(wants) > 1 {
		names := make([]string, len(wants))
		for i, w := range wants {
			names[i] = "a " + w.String()
		}
		return &Error{Msg: fmt.Sprintf("expected %s, but the expression is a %s", strings.Join(names, " or "), typeName(p.result))}
	}
	return err
}

// checkResult rejects a result type t that is known and is not want. A
// result of unknown type (a field of value) is checked per record.
func checkResult(t reflect.Type, want Type) error {
	if t == nil || t.Kind() == reflect.Interface || want == Any {
		return nil
	}
	ok := true
	switch want {
	case Bool:
		ok = t.Kind() == reflect.Bool
	case Number:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
		default:
			ok = false
		}
	case String:
		ok = t.Kind() == reflect.String
	case List:
		ok = t.Kind() == reflect.Slice || t.Kind() == reflect.Array
	}
	if ok {
		return nil
	}
	return &Error{Offset: 0, Msg: fmt.Sprintf("expected a %s, but the expression is a %s", want, typeName(t))}
}

// typeName names a Go type the way YAML users think of it.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map:
		return "map"
	}
	if t == reflect.TypeOf(time.Time{}) {
		return "time"
	}
	if t == reflect.TypeOf(time.Duration(0)) {
		return "duration"
	}
	return t.String()
}

// compileError converts an expr-lang error into an *Error with a byte offset
// and the library's message without its rendering of the source.
func compileError(src string, err error) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return &Error{Msg: err.Error()}
	}
	return &Error{Offset: byteOffset(src, fe.From), Msg: cleanMessage(fe.Message)}
}

// byteOffset converts expr-lang's offset, counted in runes, into a byte
// offset in src.
func byteOffset(src string, runes int) int {
	i := 0
	for n := 0; n < runes && i < len(src); n++ {
		_, size := utf8.DecodeRuneInString(src[i:])
		i += size
	}
	return i
}

// cleanMessage removes what a YAML user does not need from an expr-lang
// message: the Go type syntax of the empty interface and of the variables'
// types.
func cleanMessage(msg string) string {
	msg = strings.ReplaceAll(msg, "interface {}", "any")
	msg = strings.ReplaceAll(msg, "map[string]string", "map")
	msg = strings.ReplaceAll(msg, "map[string]any", "map")
	msg = strings.ReplaceAll(msg, "[]any", "list")
	msg = strings.ReplaceAll(msg, "<nil>", "null")
	return msg
}

// usedVars returns the variables the expression reads.
func usedVars(n ast.Node) uses {
	var v usesVisitor
	ast.Walk(&n, &v)
	return v.uses
}

type usesVisitor struct{ uses uses }

func (v *usesVisitor) Visit(n *ast.Node) {
	id, ok := (*n).(*ast.IdentifierNode)
	if !ok {
		return
	}
	if id.Value == "$env" {
		v.uses = useAll
		return
	}
	for i, name := range varNames {
		if id.Value == name {
			v.uses |= 1 << i
		}
	}
}
