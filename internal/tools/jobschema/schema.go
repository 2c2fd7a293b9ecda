package main

import (
	"fmt"
	"reflect"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/keygroup"
)

// generator builds the schema of a configuration type by reflection over
// its mapstructure tags; the job language's shapes (expressions, map
// values, named aggregates, routes, streams) have schemas of their own.
type generator struct {
	docs map[string]string // "Type.Field" → doc comment
}

// durationPattern is a Go duration (time.ParseDuration).
const durationPattern = `^-?(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`

// enums are the allowed values of string settings, by "Type.key".
var enums = map[string][]string{
	"SourceStep.format":      config.SourceFormats(),
	"SourceStep.key_format":  config.KeyFormats(),
	"SourceStep.on_error":    config.OnErrors(),
	"TimestampSpec.format":   config.TimestampFormats(),
	"WindowStep.type":        config.WindowTypes(),
	"AggregateStep.op":       config.LegacyAggregateOps(),
	"AggregateStep.emit":     {config.EmitUpdate, config.EmitClose},
	"AggregateStep.on_error": config.OnErrors(),
	"FilterStep.on_error":    config.OnErrors(),
	"MapStep.on_error":       config.OnErrors(),
	"FlatMapStep.on_error":   config.OnErrors(),
	"KeyByStep.on_error":     config.OnErrors(),
	"DedupeStep.on_error":    config.OnErrors(),
	"JoinStep.type":          {config.JoinLeft, config.JoinInner},
	"TableJoin.format":       config.SourceFormats(),
	"SinkStep.format":        config.SinkFormats(),
	"SinkStep.key_format":    config.KeyFormats(),
	"SinkStep.delivery":      config.Deliveries(),
	"Checkpoint.mode":        {config.ModeExactlyOnce, config.ModeAtLeastOnce},
	"Log.level":              {"debug", "info", "warn", "error"},
	"Log.format":             {"text", "json"},
	"SASL.mechanism":         append([]string{""}, config.SASLMechanisms()...),
}

// bounds are further constraints of settings, by "Type.key": those a
// schema can say and an editor should show.
var bounds = map[string]obj{
	"Job.name":              {{"pattern", "^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$"}},
	"Job.parallelism":       {{"minimum", 0}},
	"Job.max_parallelism":   {{"minimum", 1}, {"maximum", keygroup.Limit}},
	"KeyByStep.parallelism": {{"minimum", 0}},
	"SourceStep.topics":     {{"minItems", 1}},
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	exprType      = reflect.TypeFor[config.Expr]()
	mapValueType  = reflect.TypeFor[config.MapValue]()
	aggregateType = reflect.TypeFor[config.AggregateStep]()
	routeType     = reflect.TypeFor[config.RouteStep]()
	streamsType   = reflect.TypeFor[[]config.NamedStream]()
	stepType      = reflect.TypeFor[config.Step]()
	formatType    = reflect.TypeFor[config.Format]()
)

// object is the schema of struct type t: its keys, nothing else.
func (g generator) object(t reflect.Type) obj {
	var props obj
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("mapstructure")
		if key == "" || key == "-" {
			continue
		}
		s := g.of(f.Type, t.Name()+"."+key)
		s = append(s, bounds[t.Name()+"."+key]...)
		if d := g.docs[t.Name()+"."+f.Name]; d != "" {
			s = append(s, kv{"description", d})
		}
		props = append(props, kv{key, s})
	}
	o := obj{{"type", "object"}, {"additionalProperties", false}}
	if t == stepType {
		// One kind, and an id beside it or not.
		o = append(o, kv{"minProperties", 1}, kv{"oneOf", []obj{
			{{"maxProperties", 1}, {"not", obj{{"required", []string{"id"}}}}},
			{{"required", []string{"id"}}, {"minProperties", 2}, {"maxProperties", 2}},
		}})
	}
	return append(o, kv{"properties", props})
}

// of is the schema of a setting of type t; where is "Type.key".
func (g generator) of(t reflect.Type, where string) obj {
	switch t {
	case durationType:
		return obj{{"type", "string"}, {"pattern", durationPattern}}
	case exprType:
		return exprSchema()
	case streamsType:
		return obj{
			{"type", "object"},
			{"propertyNames", obj{{"pattern", "^[a-zA-Z0-9][a-zA-Z0-9_-]{0,99}$"}}},
			{"additionalProperties", obj{{"type", "array"}, {"items", g.object(stepType)}}},
		}
	case routeType:
		return obj{{"type", "array"}, {"items", g.object(reflect.TypeFor[config.RouteBranch]())}}
	case aggregateType:
		return g.aggregate()
	case formatType:
		// `format: json`, or a mapping with the type and its settings.
		types := enums[where]
		o := g.object(t)
		for i := range o {
			if o[i].k == "properties" {
				props := o[i].v.(obj)
				for j := range props {
					if props[j].k == "type" {
						props[j].v = obj{{"type", "string"}, {"enum", types}}
					}
				}
			}
		}
		return obj{{"anyOf", []any{obj{{"type", "string"}, {"enum", types}}, o}}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		if t.Elem() == mapValueType {
			return obj{{"anyOf", []any{
				exprSchema(),
				obj{{"type", "object"}, {"additionalProperties", exprSchema()}},
			}}}
		}
		return g.of(t.Elem(), where)
	case reflect.Struct:
		return g.object(t)
	case reflect.Slice:
		return obj{{"type", "array"}, {"items", g.of(t.Elem(), where)}}
	case reflect.String:
		if e, ok := enums[where]; ok {
			return obj{{"type", "string"}, {"enum", e}}
		}
		return obj{{"type", "string"}}
	case reflect.Bool:
		return obj{{"type", "boolean"}}
	case reflect.Int, reflect.Int64:
		return obj{{"type", "integer"}}
	}
	panic(fmt.Sprintf("jobschema: no schema for %s (%s)", t, where))
}

// exprSchema is an expression: YAML scalars (a plain `true` or `1` is an
// expression too).
func exprSchema() obj {
	return obj{{"type", []string{"string", "number", "boolean"}}, {"description", "an expression (docs/yaml.md); quote it if it starts with '{', '[' or contains ': '"}}
}

// aggregate is the schema of an aggregate step: the one-aggregate form's
// keys and the step's options, and any other key a named aggregate.
func (g generator) aggregate() obj {
	o := g.object(aggregateType)
	ops := obj{}
	for _, op := range config.AggregateOps() {
		if op == config.OpCount {
			ops = append(ops, kv{op, obj{{"const", true}}})
			continue
		}
		ops = append(ops, kv{op, exprSchema()})
	}
	ops = append(ops, kv{"limit", obj{{"type", "integer"}, {"minimum", 1}, {"maximum", config.MaxCollectLimit}}})
	ops = append(ops, kv{"by", exprSchema()})
	aggObject := obj{{"type", "object"}, {"additionalProperties", false}, {"minProperties", 1}, {"properties", ops}}
	named := obj{
		{"description", "a named aggregate: count: true, <op>: <expression>, or <name>: {<op>: <expression>} (collect, max_by and min_by also take limit; max_by and min_by take by)"},
		{"anyOf", []any{
			obj{{"const", true}},
			exprSchema(),
			aggObject,
		}},
	}
	// count: true is the only scalar count takes (a pattern, not a
	// property: the step's properties are its keys).
	o = append(o, kv{"patternProperties", obj{{"^count$", obj{{"anyOf", []any{obj{{"const", true}}, aggObject}}}}}})
	// The properties stay the keys of the step; every other key is an
	// aggregate's name.
	for i := range o {
		if o[i].k == "additionalProperties" {
			o[i].v = named
		}
	}
	return o
}
