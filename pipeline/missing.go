package pipeline

import (
	"slices"

	"github.com/weir-stream/weir/expression"
)

// fieldWatch counts, for one step, the records whose value (an object)
// lacks a top-level field that the step's expressions read: a misspelt
// field (sum: value.amout) is null on every record, which no error shows,
// but the count does (Env.Missing). It is shared by the step's tasks and
// allocates nothing per record.
type fieldWatch struct {
	fields  []string // sorted, no repeats
	missing []func() // missing[i] counts a record without fields[i]
}

// watchFields returns the fieldWatch of the step at path, whose
// expressions are progs (nil ones skipped); nil if the process counts
// nothing (Env.Missing is nil) or the expressions read no field as if it
// were always there (expression.Program.RequiredFields: value?.f and
// value.f ?? 0 say it may be missing).
func (c *compiler) watchFields(path string, progs ...*expression.Program) *fieldWatch {
	if c.env.Missing == nil {
		return nil
	}
	var fields []string
	for _, p := range progs {
		if p != nil {
			fields = append(fields, p.RequiredFields()...)
		}
	}
	slices.Sort(fields)
	fields = slices.Compact(fields)
	if len(fields) == 0 {
		return nil
	}
	w := &fieldWatch{fields: fields, missing: make([]func(), len(fields))}
	for i, f := range fields {
		w.missing[i] = c.env.Missing(path, f)
	}
	return w
}

// check counts the fields that v, if it is an object, lacks.
func (w *fieldWatch) check(v any) {
	if w == nil {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for i, f := range w.fields {
		if _, ok := m[f]; !ok {
			w.missing[i]()
		}
	}
}

// checkTexts counts the fields that an object lacks, given the texts that
// scanning it found for the fields src (nil: not there; as copyPaths and
// scalarArgs find them). A field of w not in src is not counted.
func (w *fieldWatch) checkTexts(src []string, texts [][]byte) {
	if w == nil {
		return
	}
	for i, f := range w.fields {
		seen, found := false, false
		for j, s := range src {
			if s == f {
				seen = true
				found = found || texts[j] != nil
			}
		}
		if seen && !found {
			w.missing[i]()
		}
	}
}
