package stream

import (
	"fmt"

	"github.com/weir-stream/weir/compat"
)

// StateSchema is what a keyed operator declares of its state for the job's
// state schema (package compat), which every checkpoint records and every
// restore compares with the job's: a restore under another declaration is
// refused before anything is written (docs/operations.md, "Upgrading a
// job").
type StateSchema struct {
	// Kind overrides the operator's kind ("Process", "Window"...): a YAML
	// step records its own ("aggregate", "dedupe").
	Kind string
	// Encoding names the format of the operator's state values: change it
	// when the format changes incompatibly. Built-in operators record
	// their codec's (a codec with an Encoding() string method names
	// itself; others by their Go type).
	Encoding string
	// Fields are the named parts of the state (an aggregate step's
	// aggregates), each with its type: compat.Compare matches them by
	// name.
	Fields []compat.Field
	// Derived says that the operator's name was derived from its kind and
	// its rank among the job's operators of that kind (a YAML step without
	// `id:`), and Definition what defines its state besides its kind,
	// stage, key and window: compat.Compare matches such an operator by
	// what defines it when an edit renamed it (compat.Operator.Derived).
	Derived    bool
	Definition string
}

// WithStateSchema declares what the operator's state is (StateSchema).
// Fields and Kind are taken as given; a non-empty Encoding replaces the
// built-in operator's own.
func WithStateSchema(s StateSchema) ProcessOption {
	return func(o *processOptions) { o.schema = s }
}

// UID sets the operator's identity, under which its state, its timers
// and, for a stage's first keyed operator, the stage are named, in place
// of its name: with it, an operator can be renamed without losing its
// state (Flink's uid). It must be unique in the job, as names are.
func UID(id string) ProcessOption {
	return func(o *processOptions) { o.uid = id }
}

// opState is what a keyed node records of its state.
type opState struct {
	kind     string
	encoding string
	window   *compat.Window
	fields   []compat.Field
	explicit bool
	derived  bool
	def      string
}

func newOpState(kind string, o processOptions) *opState {
	s := &opState{kind: kind, encoding: o.encoding, window: o.window, fields: o.schema.Fields, explicit: o.uid != "",
		derived: o.schema.Derived && o.uid == "", def: o.schema.Definition}
	if o.schema.Kind != "" {
		s.kind = o.schema.Kind
	}
	if o.schema.Encoding != "" {
		s.encoding = o.schema.Encoding
	}
	return s
}

// encodingOf names a codec's format: its Encoding() if it has one, else
// its Go type.
func encodingOf(c any) string {
	if e, ok := c.(interface{ Encoding() string }); ok {
		return e.Encoding()
	}
	return fmt.Sprintf("%T", c)
}

// schema returns the window's definition as the state schema records it
// (early results, EmitEvery, do not change the state's meaning).
func (sp windowSpec) schema() *compat.Window {
	return &compat.Window{Kind: sp.kind.String(), SizeMS: sp.size, SlideMS: sp.slide, GapMS: sp.gap, AllowedLateness: sp.lateness}
}

// StateOperators returns the job's stateful operators as the state schema
// records them (compat.Operator), in definition order; nil before Build
// succeeds. A stage's key is "record key" for main, else its KeyBy's
// KeyDescription, or "the key of stage <name>".
func (j *Job) StateOperators() []compat.Operator {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.built || j.err != nil {
		return nil
	}
	var ops []compat.Operator
	for _, n := range j.nodes {
		if n.kind != kindKeyed || n.state == nil {
			continue
		}
		st := j.stages[n.stage]
		key := "record key"
		if n.stage > 0 {
			key = "the key of stage " + st.Name
			if kb := j.entries[n.stage].keyBy; kb.keyDesc != "" {
				key = kb.keyDesc
			}
		}
		ops = append(ops, compat.Operator{
			ID: n.op, Explicit: n.state.explicit, Kind: n.state.kind, Stage: st.Name, Site: n.where,
			Key: key, Encoding: n.state.encoding, Window: n.state.window, Fields: n.state.fields,
			Derived: n.state.derived, Definition: n.state.def,
		})
	}
	return ops
}
