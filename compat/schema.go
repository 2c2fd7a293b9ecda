// Package compat owns a job's state schema and the compatibility check.
//
// The schema is what a checkpoint records about the job that took it
// (DESIGN.md invariant 7): every stateful operator under its identity (its
// ID, kind, the key its state is keyed by, the encoding of its state, a
// window's definition, the named parts of its state such as an aggregate
// step's aggregates), each stage's parallelism, max_parallelism, the
// sources with their partition counts, the sinks, and a fingerprint of the
// whole job definition.
//
// Compare decides, before anything is written, whether a job may restore
// a checkpoint taken by another (or the same) version of it: every
// difference is compatible (logged once: a new operator starts empty, more
// input partitions get new tasks), drops state (allowed only with
// --allow-non-restored-state, Flink's flag with the same meaning), or is
// refused. The package is pure: no I/O, no clock; the replica, the
// coordinator and `processor validate --against` call it.
package compat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Version is the schema's encoding version.
const Version = 1

// SourceStage is the name of a job's source stage.
const SourceStage = "main"

// Schema is the state schema of a job: what a checkpoint holds, under which
// identities. Slices are sorted (Normalize) so that two schemas of one job
// encode to the same bytes.
type Schema struct {
	V int `json:"v"`
	// Fingerprint is a hash of the whole job definition (Fingerprint).
	Fingerprint string `json:"fingerprint"`
	// MaxParallelism is the job's number of key groups.
	MaxParallelism int        `json:"max_parallelism"`
	Stages         []Stage    `json:"stages"`
	Sources        []Source   `json:"sources"`
	Operators      []Operator `json:"operators"`
	Sinks          []Sink     `json:"sinks"`
}

// Stage is one stage of the job's plan.
type Stage struct {
	// Name is the name the stage runs under: its tasks', shuffle topic's
	// and sinks' transactional IDs' (the checkpoint's, after an edit that
	// renamed the operator it is named after: Result.StageNames).
	Name        string `json:"name"`
	Parallelism int    `json:"parallelism"`
	// NamedAfter is the ID of the operator the job names the stage after
	// (its first stateful operator), if it does: a stage follows it when
	// an edit renames it. Checkpoints taken before it was recorded name
	// such a stage after the operator of the stage's own name.
	NamedAfter string `json:"named_after,omitempty"`
	// Defined is the job's own name for the stage, if it runs under
	// another (Name).
	Defined string `json:"defined,omitempty"`
}

// JobName is the job's own name for the stage: Defined, or else Name.
func (s *Stage) JobName() string {
	if s.Defined != "" {
		return s.Defined
	}
	return s.Name
}

// Source is one source of the job: its topics and their partition count
// (the source stage's parallelism).
type Source struct {
	Topics     []string `json:"topics"`
	Partitions int      `json:"partitions"`
}

// Operator is one stateful operator.
type Operator struct {
	// ID is the operator's identity: the name its state is stored under.
	// A YAML step's `id:` or, without one, the name derived from its kind
	// (docs/yaml.md); a Go operator's name (or stream.UID).
	ID string `json:"id"`
	// Explicit is set when the ID was given (`id:`), not derived.
	Explicit bool `json:"explicit,omitempty"`
	// Derived is set when the ID was derived from the operator's kind and
	// its rank among the job's operators of that kind (a YAML stateful
	// step without `id:`): an edit that inserts or removes a step of the
	// same kind before it renames it, and Compare then matches it by its
	// Signature (matchOperators).
	Derived bool `json:"derived,omitempty"`
	// State is the name the operator's state and timers are stored under,
	// if not its ID: the ID of the operator whose state it continues, in
	// the checkpoint where Compare matched it by its signature. It is
	// recorded by every later checkpoint, so that the state follows the
	// step across further edits.
	State string `json:"state,omitempty"`
	// Kind is what the operator is: Process, Aggregate, Reduce, Count,
	// Window, or a YAML step's kind (aggregate, dedupe, join...).
	Kind string `json:"kind"`
	// Stage is the stage the operator runs in: its state is in the tasks
	// of that stage.
	Stage string `json:"stage"`
	// Site is where the operator is defined, for messages: the YAML key
	// path (job.pipeline[2].aggregate) or a Go file:line. It is no part
	// of the identity.
	Site string `json:"site,omitempty"`
	// Key is what the operator's state is keyed by (the record key, or a
	// key_by's definition).
	Key string `json:"key"`
	// Encoding names the encoding of the operator's state values.
	Encoding string `json:"encoding,omitempty"`
	// Window is a window operator's definition.
	Window *Window `json:"window,omitempty"`
	// Definition is what else defines the operator's state besides its
	// kind, stage, key and window, for a derived operator: the pipeline
	// its step is in ("job.streams.big"), a join's other side. It is part
	// of the Signature.
	Definition string `json:"definition,omitempty"`
	// Fields are the named parts of the operator's state, each with its
	// type: an aggregate step's aggregates by output name ("sum",
	// "count"...). A new field starts empty; a field dropped loses its
	// state; a field whose type changed is refused.
	Fields []Field `json:"fields,omitempty"`
}

// StateName is the name the operator's state is stored under: State, or
// else its ID.
func (o *Operator) StateName() string {
	if o.State != "" {
		return o.State
	}
	return o.ID
}

// Signature is what defines the operator's state, whatever its name: its
// kind, whether it runs in the source stage or after a shuffle, its key,
// encoding, window and Definition. It leaves out the fields (an aggregate
// added to a step keeps the step's identity: Compare reports the new
// field), where the step is (Site) and its stage's name, which an edit
// can change with the name of the operator the stage is named after
// (Compare checks the stage once it matched the stages).
func (o *Operator) Signature() string {
	stage := "downstream"
	if o.Stage == SourceStage {
		stage = SourceStage
	}
	return strings.Join([]string{o.Kind, stage, o.Key, o.Encoding, o.Window.String(), o.Definition}, "\x00")
}

// Window is a window operator's definition, in milliseconds.
type Window struct {
	Kind            string `json:"kind"`
	SizeMS          int64  `json:"size_ms,omitempty"`
	SlideMS         int64  `json:"slide_ms,omitempty"`
	GapMS           int64  `json:"gap_ms,omitempty"`
	AllowedLateness int64  `json:"allowed_lateness_ms,omitempty"`
}

func (w *Window) String() string {
	if w == nil {
		return "none"
	}
	ms := func(v int64) string { return fmtMS(v) }
	var b strings.Builder
	b.WriteString(w.Kind)
	if w.SizeMS != 0 {
		b.WriteString(" size " + ms(w.SizeMS))
	}
	if w.SlideMS != 0 {
		b.WriteString(" slide " + ms(w.SlideMS))
	}
	if w.GapMS != 0 {
		b.WriteString(" gap " + ms(w.GapMS))
	}
	if w.AllowedLateness != 0 {
		b.WriteString(" allowed lateness " + ms(w.AllowedLateness))
	}
	return b.String()
}

// fmtMS writes a duration in milliseconds as Go writes durations.
func fmtMS(v int64) string {
	s := fmt.Sprintf("%dms", v)
	switch {
	case v%3_600_000 == 0:
		s = fmt.Sprintf("%dh", v/3_600_000)
	case v%60_000 == 0:
		s = fmt.Sprintf("%dm", v/60_000)
	case v%1000 == 0:
		s = fmt.Sprintf("%ds", v/1000)
	}
	return s
}

// Field is one named part of an operator's state.
type Field struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Sink is one sink of the job.
type Sink struct {
	// ID is the sink's identity (its topic, for a sink of the pipeline).
	ID    string `json:"id"`
	Topic string `json:"topic"`
	Stage string `json:"stage"`
	// Delivery is exactly-once or at-least-once.
	Delivery string `json:"delivery"`
	// TransactionalIDPrefix is what the sink's transactional IDs start
	// with (exactly-once sinks).
	TransactionalIDPrefix string `json:"transactional_id_prefix,omitempty"`
}

// Normalize sorts s's slices, so that its encoding does not depend on the
// order in which they were collected. Fields keep their order (the
// step's): only their names matter to Compare.
func (s *Schema) Normalize() {
	s.V = Version
	slices.SortFunc(s.Stages, func(a, b Stage) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Operators, func(a, b Operator) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(s.Sinks, func(a, b Sink) int { return strings.Compare(a.ID, b.ID) })
}

// Stage returns the stage named name, or nil.
func (s *Schema) Stage(name string) *Stage {
	for i := range s.Stages {
		if s.Stages[i].Name == name {
			return &s.Stages[i]
		}
	}
	return nil
}

// Operator returns the operator whose ID is id, or nil.
func (s *Schema) Operator(id string) *Operator {
	for i := range s.Operators {
		if s.Operators[i].ID == id {
			return &s.Operators[i]
		}
	}
	return nil
}

// Validate reports a schema that no job could have: empty or repeated
// identities.
func (s *Schema) Validate() error {
	if s.V != Version {
		return fmt.Errorf("compat: schema version %d (this build reads %d)", s.V, Version)
	}
	seen := map[string]bool{}
	for _, o := range s.Operators {
		if o.ID == "" || o.Kind == "" || o.Stage == "" {
			return fmt.Errorf("compat: operator %q: id, kind and stage are required", o.ID)
		}
		if seen["op:"+o.ID] {
			return fmt.Errorf("compat: operator %q twice", o.ID)
		}
		seen["op:"+o.ID] = true
		if seen["state:"+o.StateName()] {
			return fmt.Errorf("compat: operator %q: its state name %q is another operator's", o.ID, o.StateName())
		}
		seen["state:"+o.StateName()] = true
	}
	for _, st := range s.Stages {
		if st.Name == "" || st.Parallelism < 1 {
			return fmt.Errorf("compat: stage %q of parallelism %d", st.Name, st.Parallelism)
		}
		if seen["stage:"+st.Name] {
			return fmt.Errorf("compat: stage %q twice", st.Name)
		}
		seen["stage:"+st.Name] = true
	}
	for _, k := range s.Sinks {
		if k.ID == "" {
			return fmt.Errorf("compat: a sink without an id")
		}
		if seen["sink:"+k.ID] {
			return fmt.Errorf("compat: sink %q twice", k.ID)
		}
		seen["sink:"+k.ID] = true
	}
	return nil
}

// Fingerprint returns the hex SHA-256 of parts, each of them
// length-prefixed: the job's definition as canonical bytes (for a YAML
// job, the job section as JSON; for a Go job, its graph).
func Fingerprint(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// FingerprintOf returns the fingerprint of v's JSON encoding followed by
// extra (Fingerprint); encoding/json writes struct fields in declaration
// order and map keys sorted, so equal values have equal fingerprints.
func FingerprintOf(v any, extra ...[]byte) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("compat: fingerprint: %w", err)
	}
	return Fingerprint(append([][]byte{b}, extra...)...), nil
}

// Short is the first 12 hex digits of a fingerprint, for logs.
func Short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}
