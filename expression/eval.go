package expression

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
)

// Evaluator evaluates programs over records. It reuses its virtual machine
// and its environment from one call to the next so that an evaluation
// allocates as little as possible: a filter over value allocates nothing. It is not safe for concurrent use: use one per task.
type Evaluator struct {
	vm  vm.VM
	env map[string]any // expr-lang's fast path: OpLoadFast reads a map[string]any
}

// NewEvaluator returns an Evaluator.
func NewEvaluator() *Evaluator {
	env := make(map[string]any, len(varNames)+len(funcs))
	for k, f := range funcs {
		env[k] = f
	}
	return &Evaluator{env: env}
}

// run sets the variables p reads and runs it. Only those are set: a variable
// costs an allocation (boxing a string, a time) only when it is read.
func (e *Evaluator) run(p *Program, v *Vars) (any, error) {
	u := p.uses
	if u&useValue != 0 {
		e.env["value"] = v.Value
	}
	if u&useKey != 0 {
		e.env["key"] = string(v.Key)
	}
	if u&useTimestamp != 0 {
		e.env["timestamp"] = v.Timestamp
	}
	if u&useTimestampMs != 0 {
		e.env["timestamp_ms"] = v.Timestamp.UnixMilli()
	}
	if u&useHeaders != 0 {
		// A new map each time: the result may hold it.
		h := make(map[string]any, len(v.Headers))
		for _, kv := range v.Headers {
			h[kv.Key] = string(kv.Value) // the last header with a key wins
		}
		e.env["headers"] = h
	}
	if u&useTopic != 0 {
		e.env["topic"] = v.Topic
	}
	if u&usePartition != 0 {
		e.env["partition"] = int64(v.Partition)
	}
	if u&useOffset != 0 {
		e.env["offset"] = v.Offset
	}
	out, err := e.vm.Run(p.prog, e.env)
	if err != nil {
		return nil, runtimeError(p.src, err)
	}
	return out, nil
}

// runtimeError turns an expr-lang runtime error into a plain error: what
// happened and where in the expression, without the source snippet.
func runtimeError(src string, err error) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return err
	}
	msg := fe.Message
	if errors.Is(err, errDivisionByZero) {
		msg = errDivisionByZero.Error()
	}
	msg = cleanMessage(msg)
	if t, ok := strings.CutPrefix(msg, "invalid operation: bool("); ok {
		msg = "expected a bool, but the result is a " + goTypeWord(strings.TrimSuffix(t, ")"))
	}
	if strings.HasPrefix(msg, "cannot fetch ") && strings.HasSuffix(msg, " from null") {
		msg += " (write ?. to read a field of what may be null)"
	}
	if fe.Line > 1 {
		return fmt.Errorf("%s (line %d, column %d of the expression)", msg, fe.Line, fe.Column+1)
	}
	return fmt.Errorf("%s (column %d of the expression)", msg, fe.Column+1)
}

// Eval evaluates p over v and returns its result as a JSON-like value: nil,
// bool, string, int64, float64, []any or map[string]any. An integer the
// expression computed is an int64; a time is an RFC 3339 string; a duration
// its text ("1m30s"). A result that must be of the Type the program was
// compiled for and is not, or a number that is not finite, is an error.
func (e *Evaluator) Eval(p *Program, v *Vars) (any, error) {
	out, err := e.run(p, v)
	if err != nil {
		return nil, err
	}
	out, _, err = normalize(out)
	if err != nil {
		return nil, err
	}
	switch p.want {
	case Number:
		switch out.(type) {
		case int64, float64:
		default:
			return nil, wrongType(Number, out)
		}
	case String:
		if _, ok := out.(string); !ok {
			return nil, wrongType(String, out)
		}
	case List:
		if _, ok := out.([]any); !ok {
			return nil, wrongType(List, out)
		}
	}
	return out, nil
}

// Bool evaluates p over v and returns its result, which must be a bool; a
// nil result (a missing field) is false.
func (e *Evaluator) Bool(p *Program, v *Vars) (bool, error) {
	out, err := e.run(p, v)
	if err != nil {
		return false, err
	}
	switch b := out.(type) {
	case bool:
		return b, nil
	case nil:
		return false, nil
	}
	return false, wrongType(Bool, out)
}

// Number evaluates p over v and returns its result, which must be a finite
// number (an integer is converted to float64).
func (e *Evaluator) Number(p *Program, v *Vars) (float64, error) {
	out, err := e.run(p, v)
	if err != nil {
		return 0, err
	}
	switch x := out.(type) {
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, errNotFinite
		}
		return x, nil
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	}
	return 0, wrongType(Number, out)
}

// Key evaluates p over v and appends its result to dst as key bytes: a
// string's text, a number as JSON writes it (42, 1.5), anything else (bool,
// null, lists, objects) as JSON text.
func (e *Evaluator) Key(p *Program, v *Vars, dst []byte) ([]byte, error) {
	out, err := e.run(p, v)
	if err != nil {
		return dst, err
	}
	switch x := out.(type) {
	case string:
		return append(dst, x...), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case float64:
		return appendFloat(dst, x)
	case bool:
		return strconv.AppendBool(dst, x), nil
	case nil:
		return append(dst, "null"...), nil
	}
	out, _, err = normalize(out)
	if err != nil {
		return dst, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

var errNotFinite = errors.New("the result is not a finite number (an overflow)")

func wrongType(want Type, got any) error {
	return fmt.Errorf("expected a %s, but the result is %s", want, describe(got))
}

// describe names a result's type and, for short values, shows it.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "the bool " + strconv.FormatBool(x)
	case string:
		if len(x) > 40 {
			return "a string"
		}
		return "the string " + strconv.Quote(x)
	case int64, float64, int:
		return fmt.Sprintf("the number %v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return typeName(reflect.TypeOf(v))
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, errNotFinite
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

// normalize converts v into the value types of decoded JSON (see Vars), in
// place for maps and lists, and reports whether it changed v itself.
func normalize(v any) (any, bool, error) {
	switch x := v.(type) {
	case nil, bool, string, int64:
		return v, false, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, false, errNotFinite
		}
		return v, false, nil
	case int:
		return int64(x), true, nil
	case map[string]any:
		for k, el := range x {
			n, changed, err := normalize(el)
			if err != nil {
				return nil, false, err
			}
			if changed {
				x[k] = n
			}
		}
		return v, false, nil
	case []any:
		for i, el := range x {
			n, changed, err := normalize(el)
			if err != nil {
				return nil, false, err
			}
			if changed {
				x[i] = n
			}
		}
		return v, false, nil
	case time.Time:
		return x.Format(time.RFC3339Nano), true, nil
	case time.Duration:
		return x.String(), true, nil
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return m, true, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(rv.Uint()), true, nil
	case reflect.Float32:
		n, _, err := normalize(rv.Float())
		return n, true, err
	case reflect.Slice, reflect.Array:
		l := make([]any, rv.Len())
		for i := range l {
			n, _, err := normalize(rv.Index(i).Interface())
			if err != nil {
				return nil, false, err
			}
			l[i] = n
		}
		return l, true, nil
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			m := make(map[string]any, rv.Len())
			it := rv.MapRange()
			for it.Next() {
				n, _, err := normalize(it.Value().Interface())
				if err != nil {
					return nil, false, err
				}
				m[it.Key().String()] = n
			}
			return m, true, nil
		}
	}
	return nil, false, fmt.Errorf("the result is a %s, which JSON cannot write", typeName(rv.Type()))
}

// goTypeWord names a Go type that an expr-lang message shows in the words of
// docs/yaml.md, "Expressions".
func goTypeWord(t string) string {
	switch t {
	case "int", "int64", "float64":
		return "number"
	case "map[string]interface {}", "map[string]any":
		return "object"
	case "[]interface {}", "[]any":
		return "list"
	}
	return t
}
