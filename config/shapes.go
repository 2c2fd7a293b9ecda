package config

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// This file decodes the shapes of the job language that are not one
// setting per key: expressions (with their position), map values, the
// named aggregates, routes and job.streams.

var (
	exprType        = reflect.TypeFor[Expr]()
	exprPtrType     = reflect.TypeFor[*Expr]()
	mapValuePtrType = reflect.TypeFor[*MapValue]()
	aggregateType   = reflect.TypeFor[AggregateStep]()
	routeType       = reflect.TypeFor[RouteStep]()
	streamsType     = reflect.TypeFor[[]NamedStream]()
	formatType      = reflect.TypeFor[Format]()
)

// isShape reports whether t is decoded by shape rather than by its keys:
// such settings come from YAML only.
func isShape(t reflect.Type) bool {
	switch t {
	case exprType, exprPtrType, mapValuePtrType, aggregateType, routeType, streamsType, formatType:
		return true
	}
	return false
}

// shape decodes n into v if v's type is one of the job language's shapes,
// and reports whether it was.
func (d *decoder) shape(v reflect.Value, n *yaml.Node, path string) bool {
	switch v.Type() {
	case exprType:
		if e, ok := d.expr(n, path); ok {
			v.Set(reflect.ValueOf(e))
		}
	case exprPtrType:
		if e, ok := d.expr(n, path); ok {
			v.Set(reflect.ValueOf(&e))
		}
	case mapValuePtrType:
		if mv, ok := d.mapValue(n, path); ok {
			v.Set(reflect.ValueOf(mv))
		}
	case aggregateType:
		d.aggregate(v.Addr().Interface().(*AggregateStep), n, path)
	case routeType:
		d.route(v.Addr().Interface().(*RouteStep), n, path)
	case streamsType:
		d.streams(v, n, path)
	case formatType:
		if n.Kind == yaml.ScalarNode { // `format: json`: the type alone
			d.origins[join(path, "type")] = d.at(n)
			d.scalar(v.FieldByName("Type"), n.Value, join(path, "type"), d.at(n))
			return true
		}
		d.mapping(v, n, path)
	default:
		return false
	}
	return true
}

const exprHint = `; quote an expression that starts with '{', '[', '!', '&', '*' or '"', or that contains ": " or " #", as in where: "value.a == {x: 1}"`

// expr decodes an expression: a scalar, with where its text starts.
func (d *decoder) expr(n *yaml.Node, path string) (Expr, bool) {
	if n.Kind != yaml.ScalarNode {
		d.problem(path, d.at(n), "%s: want an expression (a string)%s", describe(n), exprHint)
		return Expr{}, false
	}
	e := Expr{Src: n.Value, File: d.file, Line: n.Line, Column: n.Column}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		e.Folded = true
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		e.Column++
	}
	// An offset in Src maps to a column only if the text is written as is
	// on its line: not across lines, not with escapes.
	if !e.Folded && !d.writtenAt(e.Src, e.Line, e.Column) {
		e.Folded = true
	}
	return e, true
}

// writtenAt reports whether s is written as is at line and column (in
// characters, from 1) of the file being decoded.
func (d *decoder) writtenAt(s string, line, column int) bool {
	if strings.Contains(s, "\n") || line < 1 || line > len(d.lines) {
		return false
	}
	text := d.lines[line-1]
	for range column - 1 {
		if text == "" {
			return false
		}
		_, size := utf8.DecodeRuneInString(text)
		text = text[size:]
	}
	return strings.HasPrefix(text, s)
}

// Pos returns "file:line:column" of the byte offset inside Src (columns
// count characters, as editors do), or of the expression's start if it is
// Folded or offset is out of range: the Origin of a FieldError about the
// expression. It is "line:column" without a file, and empty if the
// expression has no position (built in Go, or from an environment
// variable).
func (e Expr) Pos(offset int) string {
	if e.Line == 0 {
		return ""
	}
	col := e.Column
	if !e.Folded && offset > 0 && offset <= len(e.Src) {
		col += utf8.RuneCountInString(e.Src[:offset])
	}
	if e.File == "" {
		return fmt.Sprintf("%d:%d", e.Line, col)
	}
	return fmt.Sprintf("%s:%d:%d", e.File, e.Line, col)
}

// IsZero reports whether the expression is unset.
func (e Expr) IsZero() bool { return e.Src == "" && e.Line == 0 }

// mapValue decodes map.value: an expression, or a mapping of fields.
func (d *decoder) mapValue(n *yaml.Node, path string) (*MapValue, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		e, ok := d.expr(n, path)
		return &MapValue{Expr: &e}, ok
	case yaml.MappingNode:
		mv := &MapValue{Fields: []NamedExpr{}}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			sub := join(path, k.Value)
			d.origins[sub] = d.at(val)
			if e, ok := d.expr(val, sub); ok {
				mv.Fields = append(mv.Fields, NamedExpr{Name: k.Value, Expr: e, File: d.file, Line: k.Line, Column: k.Column})
			}
		}
		return mv, true
	}
	d.problem(path, d.at(n), "%s: want an expression, or a mapping of field names to expressions", describe(n))
	return nil, false
}

// aggregateKeys are the keys of an aggregate step that are not aggregates.
var aggregateKeys = []string{"op", "field", "emit", "on_error", "dead_letter_topic"}

// aggregate decodes an aggregate step: the one-aggregate form {op, field}
// or the named form, whose other keys are output names.
func (d *decoder) aggregate(a *AggregateStep, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.problem(path, d.at(n), "%s: want a mapping of aggregates, such as {count: true, total: {sum: value.amount}}", describe(n))
		return
	}
	v := reflect.ValueOf(a).Elem()
	legacy := false
	for i := 0; i < len(n.Content); i += 2 {
		legacy = legacy || n.Content[i].Value == "op" || n.Content[i].Value == "field"
	}
	var fieldNode *yaml.Node
	failed := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		sub := join(path, k.Value)
		if legacy && !slices.Contains(aggregateKeys, k.Value) && !slices.Contains(AggregateOps(), k.Value) {
			d.problem(sub, d.at(k), "unknown key%s", didYouMean(k.Value, aggregateKeys))
			continue
		}
		if slices.Contains(aggregateKeys, k.Value) {
			f, _ := fieldByKey(v, k.Value)
			d.node(f, val, sub)
			if k.Value == "field" {
				fieldNode = val
			}
			continue
		}
		d.origins[sub] = d.at(k)
		if agg, ok := d.agg(k, val, sub); ok {
			a.Aggs = append(a.Aggs, agg)
		} else {
			failed = true
		}
	}
	if failed && len(a.Aggs) == 0 && a.Op == "" {
		d.bad[path] = true // "no aggregate" would only repeat the problems above
	}
	switch {
	case (a.Op != "" || a.Field != "") && len(a.Aggs) > 0:
		d.problem(path, d.at(n), "mixes op/field (one aggregate) with named aggregates: write %s: {sum: value.%s} instead of op and field", orDefault(a.Op, "name"), orDefault(a.Field, "amount"))
	case a.Op != "":
		agg := legacyAgg(a.Op, a.Field)
		agg.File, agg.Line, agg.Column = d.file, n.Line, n.Column
		if agg.Arg != nil && fieldNode != nil {
			// The expression is not written in the file: point at the field.
			agg.Arg.File, agg.Arg.Line, agg.Arg.Column, agg.Arg.Folded = d.file, fieldNode.Line, fieldNode.Column, true
		}
		a.Aggs = []Agg{agg}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// identRE is a name an expression can write after "value.".
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// legacyAgg is the named aggregate of the one-aggregate form {op, field}:
// named after its op, over value.<field>.
func legacyAgg(op, field string) Agg {
	agg := Agg{Name: op, Op: op}
	if field != "" {
		src := "value." + field
		if !identRE.MatchString(field) {
			src = "value[" + strconv.Quote(field) + "]"
		}
		agg.Arg = &Expr{Src: src}
	}
	if HasLimit(op) {
		agg.Limit = DefaultCollectLimit
	}
	return agg
}

// agg decodes one named aggregate, `name: <value>`.
func (d *decoder) agg(k, val *yaml.Node, path string) (Agg, bool) {
	agg := Agg{Name: k.Value, File: d.file, Line: k.Line, Column: k.Column}
	isOp := slices.Contains(AggregateOps(), k.Value)
	switch val.Kind {
	case yaml.ScalarNode:
		switch {
		case k.Value == OpCount:
			if val.Tag != "!!bool" || val.Value != "true" {
				d.problem(path, d.at(val), "%s: count takes no expression: write count: true", describe(val))
				return agg, false
			}
			agg.Op = OpCount
			return agg, true
		case isOp && val.Tag == "!!bool":
			d.problem(path, d.at(val), "%s needs an expression, as in %s: value.amount (only count takes true)", k.Value, k.Value)
			return agg, false
		case isOp:
			e, ok := d.expr(val, path)
			agg.Op, agg.Arg = k.Value, &e
			if HasLimit(k.Value) {
				agg.Limit = DefaultCollectLimit
			}
			return agg, ok
		}
		msg := fmt.Sprintf("%s: an aggregate named %s needs its op: write %s: {sum: %s}, for example (ops: %s)", describe(val), k.Value, k.Value, orDefault(val.Value, "value.amount"), strings.Join(AggregateOps(), ", "))
		if s := suggest(k.Value, append(AggregateOps(), aggregateKeys...)); s != "" {
			msg = fmt.Sprintf("unknown key (did you mean %s?)", s)
		}
		d.problem(path, d.at(k), "%s", msg)
		return agg, false
	case yaml.MappingNode:
		ok := true
		for i := 0; i+1 < len(val.Content); i += 2 {
			ok2, v2 := val.Content[i], val.Content[i+1]
			sub := join(path, ok2.Value)
			d.origins[sub] = d.at(v2)
			switch {
			case ok2.Value == "limit":
				var limit int
				d.node(reflect.ValueOf(&limit).Elem(), v2, sub)
				agg.Limit = limit
			case ok2.Value == "by":
				e, good := d.expr(v2, sub)
				agg.By = &e
				ok = ok && good
			case slices.Contains(AggregateOps(), ok2.Value):
				if agg.Op != "" {
					d.problem(sub, d.at(ok2), "a second op (%s already): one op per aggregate; give each its own name", agg.Op)
					ok = false
					continue
				}
				agg.Op = ok2.Value
				if ok2.Value == OpCount {
					if v2.Tag != "!!bool" || v2.Value != "true" {
						d.problem(sub, d.at(v2), "%s: count takes no expression: write count: true", describe(v2))
						ok = false
					}
					continue
				}
				if v2.Tag == "!!bool" {
					d.problem(sub, d.at(v2), "%s needs an expression, as in %s: value.amount (only count takes true)", ok2.Value, ok2.Value)
					ok = false
					continue
				}
				e, good := d.expr(v2, sub)
				agg.Arg = &e
				ok = ok && good
			default:
				msg := "unknown key"
				if s := suggest(ok2.Value, append(AggregateOps(), "limit", "by")); s != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", s)
				}
				d.problem(sub, d.at(ok2), "%s: an aggregate is one op (%s) and, for collect, max_by and min_by, limit; for max_by and min_by, by", msg, strings.Join(AggregateOps(), ", "))
				ok = false
			}
		}
		if agg.Op == "" && ok {
			d.problem(path, d.at(val), "no op: write one of %s, as in %s: {sum: value.amount}", strings.Join(AggregateOps(), ", "), k.Value)
			return agg, false
		}
		if HasLimit(agg.Op) && agg.Limit == 0 {
			agg.Limit = DefaultCollectLimit
		}
		return agg, ok
	}
	if isOp {
		d.problem(path, d.at(val), "%s: want an expression, as in %s: value.amount", describe(val), k.Value)
	} else {
		d.problem(path, d.at(val), "%s: want {<op>: <expression>}, as in %s: {sum: value.amount}", describe(val), k.Value)
	}
	return agg, false
}

// route decodes a route step: a list of {when, to}.
func (d *decoder) route(r *RouteStep, n *yaml.Node, path string) {
	if n.Kind != yaml.SequenceNode {
		d.problem(path, d.at(n), "%s: want a list of branches, such as [{when: \"value.amount > 100\", to: big}, {to: all}]", describe(n))
		return
	}
	r.Branches = make([]RouteBranch, len(n.Content))
	for i, item := range n.Content {
		d.node(reflect.ValueOf(&r.Branches[i]).Elem(), item, fmt.Sprintf("%s[%d]", path, i))
	}
}

// streams decodes job.streams: a mapping of names to lists of steps, kept
// in the order written.
func (d *decoder) streams(v reflect.Value, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.problem(path, d.at(n), "%s: want a mapping of stream names to lists of steps", describe(n))
		return
	}
	var out []NamedStream
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		s := NamedStream{Name: k.Value, File: d.file, Line: k.Line, Column: k.Column}
		d.node(reflect.ValueOf(&s.Steps).Elem(), val, join(path, k.Value))
		out = append(out, s)
	}
	v.Set(reflect.ValueOf(out))
}

// PathExpr is an expression of the job with its key path
// ("job.pipeline[1].filter.where").
type PathExpr struct {
	Path string
	Expr Expr
}

// Exprs returns every expression written in the job, in the order
// written, each with the key path under which the pipeline's compiler
// reports its problems ("job.pipeline[2].aggregate.total.sum"): for
// checking expressions without compiling the job (processor validate, on a
// job with other problems; the compiler, past the first step with one).
func (j *Job) Exprs() []PathExpr {
	var out []PathExpr
	add := func(path string, e *Expr) {
		if e != nil && !e.IsZero() {
			out = append(out, PathExpr{path, *e})
		}
	}
	steps := func(list string, steps []Step) {
		for i := range steps {
			s := &steps[i]
			p := fmt.Sprintf("%s[%d]", list, i)
			switch {
			case s.Filter != nil:
				add(p+".filter.where", &s.Filter.Where)
			case s.Map != nil:
				if v := s.Map.Value; v != nil {
					add(p+".map.value", v.Expr)
					for k := range v.Fields {
						add(p+".map.value."+v.Fields[k].Name, &v.Fields[k].Expr)
					}
				}
				add(p+".map.key", s.Map.Key)
			case s.FlatMap != nil:
				add(p+".flat_map.each", &s.FlatMap.Each)
			case s.KeyBy != nil:
				add(p+".key_by.expr", s.KeyBy.Expr)
			case s.Aggregate != nil:
				if s.Aggregate.Op == "" { // the one-aggregate form writes none
					for _, a := range s.Aggregate.Aggs {
						add(p+".aggregate."+a.Name+"."+a.Op, a.Arg)
						add(p+".aggregate."+a.Name+".by", a.By)
					}
				}
			case s.Dedupe != nil:
				add(p+".dedupe.key", s.Dedupe.Key)
			case s.Route != nil:
				for k := range s.Route.Branches {
					add(fmt.Sprintf("%s.route[%d].when", p, k), s.Route.Branches[k].When)
				}
			}
		}
	}
	steps("job.pipeline", j.Pipeline)
	for _, s := range j.Streams {
		steps("job.streams."+s.Name, s.Steps)
	}
	return out
}
