package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/weir-stream/weir/compat"
	"slices"
	"sync"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/internal/jsontext"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// An aggregate step (docs/yaml.md, "aggregate") compiles to, in the stage of the
// current key (after the shuffle of a key_by):
//
//   - if an aggregate has an argument, a Transform "<name>-args" that
//     evaluates every argument of a record (aggIn), under the step's
//     on_error: an expression that fails, or a value its aggregate cannot
//     take (a string to sum), rejects the record whole;
//   - without a window, a Process <name> (runningAgg) that folds the
//     arguments into the key's accumulator (aggAcc, one value state) and
//     emits the key's results so far, for every record;
//   - with a window, a stream.Window <name> over the accumulator (windowAgg)
//     and a Map that writes each window's result.
//
// <name> is "aggregate" (then "aggregate-2"...) for the named form, and,
// for the one-aggregate form (`{op: count}`), "<op>" or "window-<op>" as
// before, so that stages keep their names.

// aggregate compiles an aggregate step: with the window step before it, a
// window aggregate; without, a running aggregate.
func (c *compiler) aggregate(path string, a *config.AggregateStep) {
	c.flush()
	w, wpath := c.window, c.windowPath
	c.window = nil
	checked := c.checked
	c.checked = ""
	aggs := a.Aggs
	legacy := a.Op != ""
	if legacy {
		aggs = c.legacyAggs(path, a)
	} else if len(aggs) == 0 {
		c.add(path, "required: at least one aggregate (count: true, <name>: {sum: <expr>}...)")
	}
	set, args := c.compileAggs(path, aggs, legacy)
	switch a.Emit {
	case "":
	case "update":
		if w != nil {
			c.add(path+".emit", "update: an aggregate after a window emits when the window closes (emit: close); for results before, set the window's emit_every")
		}
	case "close":
		if w == nil {
			c.add(path+".emit", "close: only an aggregate after a window step emits when a window closes; without one, results are emitted on every update")
		}
	default:
		c.add(path+".emit", "%q: must be update or close", a.Emit)
	}
	opts := c.onError(path, a.OnError, a.DeadLetterTopic)
	if len(c.problems) > 0 || c.cur == nil {
		return
	}
	if legacy && a.Field != "" && checked != a.Field {
		// No key change checked the field before a shuffle: check it here,
		// in the aggregate's stage, under the source's on_error.
		c.cur = stream.Filter(c.cur, newNumberField(a.Field).check)
	}
	name := "aggregate"
	if legacy {
		name = a.Op
		if w != nil {
			name = "window-" + a.Op
		}
	}
	name = c.stateName(name)
	// The one-aggregate form keeps its state layout (legacyCodec).
	legacyOp := ""
	var accCodec state.Codec[aggAcc] = newAggCodec(set, false)
	if legacy {
		legacyOp = a.Op
		accCodec = legacyCodec{op: set.defs[0].op}
	}
	names := make([]string, len(set.defs))
	schemaFields := make([]compat.Field, len(set.defs))
	for i, d := range set.defs {
		names[i] = d.name
		schemaFields[i] = compat.Field{Name: d.name, Type: d.opName()}
	}
	// The state schema: aggregates by name (aggCodec), or the one-aggregate
	// form's layout (legacyCodec), which only its own op reads.
	encoding := "aggregate"
	if legacy {
		encoding = "aggregate-" + a.Op
	}
	schema := c.stateSchema("aggregate", encoding, "", schemaFields...)
	// read gives a record's arguments: none (counts only), the field of
	// the one-aggregate form, or the Transform's (aggIn).
	var read func(r Rec, dst []any) []any
	switch {
	case legacy && a.Field != "":
		field := a.Field
		read = func(r Rec, dst []any) []any {
			o, _ := r.object()
			return append(dst[:0], normalize(o[field]))
		}
	default:
		n := len(set.defs)
		read = func(_ Rec, dst []any) []any {
			if len(dst) != n {
				dst = make([]any, n)
			}
			return dst
		}
	}
	if w != nil {
		ws, ok := c.windowing(wpath, w)
		if !ok {
			return
		}
		if ws.LateTopic == "" {
			ws.LateCodec = nil // stream.Window rejects a codec without a topic
		}
		fields := append(append([]string{"key", "window_start", "window_end"}, names...), "early")
		if args == nil {
			c.cur = windowAggregate(c.cur, name, set, accCodec, fields, ws, func(r Rec) []any { return read(r, nil) }, schema)
		} else {
			in := c.aggArgs(name, set, args, opts)
			late := stream.Windowing[aggIn]{Kind: ws.Kind, Size: ws.Size, Slide: ws.Slide, Gap: ws.Gap,
				AllowedLateness: ws.AllowedLateness, EmitEvery: ws.EmitEvery, LateTopic: ws.LateTopic}
			if ws.LateTopic != "" {
				late.LateCodec = aggInCodec{}
			}
			c.cur = windowAggregate(in, name, set, accCodec, fields, late, func(in aggIn) []any { return in.args }, schema)
		}
		if err := c.job.Err(); err != nil {
			c.addJob(wpath, err)
		}
		c.raw, c.fields, c.numbers = false, fields[:len(fields)-1], aggNumbers(set)
		return
	}
	fields := append([]string{"key"}, names...)
	if args == nil {
		c.cur = stream.Process(c.cur, name, newRunningAgg(set, legacyOp, func(r Rec, dst []any) ([]any, Rec) { return read(r, dst), r }), schema)
	} else {
		in := c.aggArgs(name, set, args, opts)
		c.cur = stream.Process(in, name, newRunningAgg(set, "", func(in aggIn, _ []any) ([]any, Rec) { return in.args, in.rec }), schema)
	}
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
	c.raw, c.fields, c.numbers = false, fields, aggNumbers(set)
}

// legacyAggs returns the one aggregate of the one-aggregate form
// (`{op: sum, field: v}`), checking it as before.
func (c *compiler) legacyAggs(path string, a *config.AggregateStep) []config.Agg {
	switch {
	case a.Op == config.OpCount:
		if a.Field != "" {
			c.add(path+".field", "set, but count reads no field: remove it, or use sum, min, max or avg")
		}
	case slices.Contains(config.AggregateOps(), a.Op):
		switch {
		case a.Field == "":
			c.add(path+".field", "required by op %s: the top-level JSON number field to aggregate", a.Op)
		case c.raw:
			c.add(path+".field", "%s reads a JSON field, but the values are raw bytes (source format raw): use a json source", a.Op)
		case c.numbers != nil && !slices.Contains(c.numbers, a.Field):
			c.add(path+".field", "%q: the values reaching this aggregate have only the number fields %s", a.Field, listFields(c.numbers))
		}
	default:
		c.add(path+".op", "%q: must be count, sum, min, max or avg", a.Op)
	}
	return []config.Agg{{Name: a.Op, Op: a.Op}}
}

// aggArg computes one aggregate's argument from a record: an expression
// (nil for count).
type aggArg struct {
	prog *expression.Program
	by   *expression.Program // max_by, min_by
}

// reservedAggNames are the output fields an aggregate's name cannot take.
var reservedAggNames = []string{"key", "window_start", "window_end", "early"}

// aggArgTypes are the types an aggregate's expression may have, by
// operation (and "by" for the by of max_by and min_by): one of another
// type where the type is known at compile time (sum: "'x'") is refused;
// otherwise each record's value is checked (aggDef.checkArg).
var aggArgTypes = map[string][]expression.Type{
	"sum": {expression.Number}, "avg": {expression.Number},
	"min": {expression.Number, expression.String}, "max": {expression.Number, expression.String},
	"by": {expression.Number, expression.String},
}

// compileAggs checks and compiles the aggregates of the step at path. args
// is nil if no aggregate has an argument (counts only).
func (c *compiler) compileAggs(path string, aggs []config.Agg, legacy bool) (*aggSet, []aggArg) {
	set := &aggSet{}
	var args []aggArg
	seen := map[string]bool{}
	for _, a := range aggs {
		p := path + "." + a.Name
		origin := ""
		if a.Line > 0 {
			origin = exprOrigin(config.Expr{File: a.File, Line: a.Line, Column: a.Column}, 0)
		}
		bad := func(format string, v ...any) {
			c.problems = append(c.problems, &config.FieldError{Path: p, Msg: fmt.Sprintf(format, v...), Origin: origin})
		}
		op, ok := aggOps[a.Op]
		switch {
		case a.Name == "":
			bad("an aggregate needs a name")
			continue
		case !ok:
			bad("%q: the operation must be %s", a.Op, aggOpNames)
			continue
		case seen[a.Name]:
			bad("a second aggregate named %s: names are the result's fields", a.Name)
		case slices.Contains(reservedAggNames, a.Name):
			bad("%s: the result has this field already; name the aggregate otherwise", a.Name)
		case op == opCount && a.Arg != nil:
			bad("count counts records and takes no expression (count: true); to count the distinct values of one, use count_distinct")
		case op != opCount && a.Arg == nil && !legacy:
			bad("%s needs an expression: %s: {%s: <expr>}", a.Op, a.Name, a.Op)
		case !config.HasLimit(a.Op) && a.Limit != 0:
			bad("limit is for collect, max_by and min_by: remove it")
		case config.HasBy(a.Op) && a.By == nil:
			bad("%s needs by, what to order the records by: %s: {%s: value, by: value.price}", a.Op, a.Name, a.Op)
		case !config.HasBy(a.Op) && a.By != nil:
			bad("by is for max_by and min_by: remove it")
		case a.Limit < 0:
			bad("limit %d: must be at least 1 (default %d)", a.Limit, defaultCollectLimit)
		}
		seen[a.Name] = true
		d := aggDef{name: a.Name, op: op, limit: a.Limit, strict: legacy}
		if config.HasLimit(a.Op) && d.limit == 0 {
			d.limit = defaultCollectLimit
		}
		var arg aggArg
		if a.Arg != nil {
			arg.prog = c.compileTyped(p+"."+a.Op, *a.Arg, aggArgTypes[a.Op]...)
		}
		if a.By != nil {
			arg.by = c.compileTyped(p+".by", *a.By, aggArgTypes["by"]...)
		}
		set.defs = append(set.defs, d)
		args = append(args, arg)
	}
	set.width = len(set.defs)
	for i := range set.defs {
		if op := set.defs[i].op; op == opMaxBy || op == opMinBy {
			set.defs[i].byAt = set.width
			set.width++
		}
	}
	if !slices.ContainsFunc(args, func(a aggArg) bool { return a.prog != nil }) {
		args = nil
	}
	return set, args
}

// aggNumbers returns the result fields that are numbers: count,
// count_distinct, sum and avg (null before a value).
func aggNumbers(set *aggSet) []string {
	var out []string
	for _, d := range set.defs {
		switch d.op {
		case opCount, opCountDistinct, opSum, opAvg:
			out = append(out, d.name)
		}
	}
	return out
}

// aggIn is a record on its way into an aggregate: the record and its
// aggregates' checked arguments (args[i] for aggregate i, nil for count).
type aggIn struct {
	rec  Rec
	args []any
}

// aggInCodec writes the record of an aggIn as JSON: the late topic's codec.
type aggInCodec struct{}

func (aggInCodec) Append(dst []byte, in aggIn) ([]byte, error) {
	return JSONCodec{}.Append(dst, in.rec)
}
func (aggInCodec) Decode(src []byte) (aggIn, error) {
	r, err := JSONCodec{}.Decode(src)
	return aggIn{rec: r}, err
}

// aggArgs defines the Transform that evaluates every argument of a record
// (see the top of this file).
func (c *compiler) aggArgs(name string, set *aggSet, args []aggArg, opts []stream.TransformOption) *stream.Stream[aggIn] {
	// The function is shared by the tasks: evalTasks are pooled, as in
	// compiler.transform.
	pool := &sync.Pool{New: func() any { return &evalTask{ev: expression.NewEvaluator()} }}
	// Only an argument's expression reads the value, and most read a field
	// or two of it (evalTask.view): counts alone leave it undecoded.
	var progs []*expression.Program
	for _, a := range args {
		progs = append(progs, a.by, a.prog)
	}
	rd := readsOf(progs...)
	w := c.watchFields(c.site, progs...) // c.site: the aggregate step's key path
	// Arguments that are plain field reads (value.f; a count has none)
	// are read from an undecoded value's text (scalarArgs).
	plain := make([]string, len(args))
	for i, a := range args {
		if a.by != nil {
			plain = nil
			break
		}
		if a.prog == nil {
			continue
		}
		f, ok := a.prog.ValueField()
		if !ok {
			plain = nil
			break
		}
		plain[i] = f
	}
	if !slices.ContainsFunc(plain, func(f string) bool { return f != "" }) {
		plain = nil // counts alone read nothing: the value stays unscanned
	}
	return stream.Transform(c.cur, name+"-args", func(e stream.Elem, r Rec, emit func(aggIn) error) error {
		t := pool.Get().(*evalTask)
		defer pool.Put(t)
		return poison(e, r, aggArgsOf(t, e, r, set, args, plain, rd, w, emit))
	}, opts...)
}

// aggArgsOf evaluates the arguments of r (see aggArgs) and emits them.
func aggArgsOf(t *evalTask, e stream.Elem, r Rec, set *aggSet, args []aggArg, plain []string, rd valueReads, w *fieldWatch, emit func(aggIn) error) error {
	if plain != nil && r.raw != nil {
		if len(t.texts) < len(plain) {
			t.texts = make([][]byte, len(plain))
		}
		in := aggIn{rec: withOrigin(e, r), args: make([]any, set.width)}
		if scalarArgs(r.raw, plain, t.texts[:len(plain)], in.args) {
			w.checkTexts(plain, t.texts[:len(plain)])
			for i := range args {
				v, err := set.defs[i].checkArg(in.args[i])
				if err != nil {
					return err
				}
				in.args[i] = v
			}
			return emit(in)
		}
	}
	r, value, err := t.view(r, rd)
	if err != nil {
		return err
	}
	w.check(value)
	in := aggIn{rec: withOrigin(e, r), args: make([]any, set.width)}
	for i, a := range args {
		if a.by != nil {
			by, err := t.ev.Eval(a.by, elemVarsOf(&t.vars, e, r, value))
			if err != nil {
				return fmt.Errorf("aggregate %s: by: %w", set.defs[i].name, err)
			}
			if in.args[set.defs[i].byAt], err = set.defs[i].checkBy(by); err != nil {
				return err
			}
		}
		var v any
		if a.prog != nil {
			var err error
			if v, err = t.ev.Eval(a.prog, elemVarsOf(&t.vars, e, r, value)); err != nil {
				return fmt.Errorf("aggregate %s: %w", set.defs[i].name, err)
			}
		}
		v, err := set.defs[i].checkArg(v)
		if err != nil {
			return err
		}
		in.args[i] = v
	}
	return emit(in)
}

// runningAgg is an aggregate without a window, one per task: per key, an
// accumulator (value state "<operator>/acc", aggCodec: by the aggregates'
// names) and, for each count_distinct, the key's distinct values (map
// state "<operator>/distinct", map key distinctKey: by the aggregate's
// name too, so that the count is exact and the accumulator stays small),
// and per key group the mark of migratePositional ("<operator>/by_name").
// For every record it emits {"key":…, <name>: <result so far>…}.
type runningAgg[T any] struct {
	set *aggSet
	// prefix[i] is `,"<name>":` of aggregate i: the result is written as
	// JSON text directly (Rec.raw), as AppendJSON would write the object
	// {"key":…, <name>: …} in the step's order, without building the map.
	prefix [][]byte
	// distinctPrefix[i] is the start of aggregate i's distinct keys
	// (distinctKey), for each count_distinct.
	distinctPrefix [][]byte
	split          func(in T, dst []any) ([]any, Rec)
	// legacy is the one-aggregate form's op: its value state is
	// "<operator>/<op>" in legacyCodec, as before named aggregates.
	legacy string
	args   []any

	codec *aggCodec // the accumulator's; nil in the one-aggregate form
	acc   *state.ValueState[aggAcc]
	// distinct is the count_distinct values' map state: opened by Open if
	// the step has a count_distinct, else by dropDistinct if a key's
	// accumulator still holds one the step no longer has.
	distinct     *state.MapState[[]byte, []byte]
	openDistinct func() (*state.MapState[[]byte, []byte], error)
	isNew        []bool
	kbuf         []byte
	keys         [][]byte // scratch of migrateDistinct and dropDistinct
}

// distinctKey appends to dst the map key of a distinct value of the
// running count_distinct called name: byNameMark, uvarint(len(name)), the
// name, then the value's canonical encoding (appendCanonical). Before the
// by-name encoding the key started with uvarint(the aggregate's index)
// instead, which never starts with byNameMark (see aggCodec): a key whose
// accumulator is positional has such keys, and migrateDistinct rewrites
// them.
func distinctKey(dst []byte, name string) []byte {
	dst = append(dst, byNameMark...)
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	return append(dst, name...)
}

func newRunningAgg[T any](set *aggSet, legacy string, split func(in T, dst []any) ([]any, Rec)) func() stream.KeyedProcessFunction[T, Rec] {
	// The running form keeps count_distinct in map state.
	inMap := &aggSet{defs: slices.Clone(set.defs)}
	for i := range inMap.defs {
		inMap.defs[i].inMap = inMap.defs[i].op == opCountDistinct
	}
	prefix := make([][]byte, len(set.defs))
	distinctPrefix := make([][]byte, len(set.defs))
	for i, d := range set.defs {
		prefix[i] = append(jsontext.AppendText([]byte{','}, d.name), ':')
		if inMap.defs[i].inMap {
			distinctPrefix[i] = distinctKey(nil, d.name)
		}
	}
	return func() stream.KeyedProcessFunction[T, Rec] {
		return &runningAgg[T]{set: inMap, prefix: prefix, distinctPrefix: distinctPrefix, split: split, legacy: legacy, isNew: make([]bool, len(set.defs))}
	}
}

func (f *runningAgg[T]) Open(oc stream.OpenContext) error {
	var err error
	if f.legacy != "" {
		f.acc, err = state.NewValueState(oc.Backend, oc.StateName(f.legacy), state.Codec[aggAcc](legacyCodec{op: f.set.defs[0].op}))
	} else {
		f.codec = newAggCodec(f.set, true)
		f.acc, err = state.NewValueState(oc.Backend, oc.StateName("acc"), state.Codec[aggAcc](f.codec))
	}
	if err != nil {
		return err
	}
	f.openDistinct = func() (*state.MapState[[]byte, []byte], error) {
		return state.NewMapState(oc.Backend, oc.StateName("distinct"), state.BytesCodec{}, state.Codec[[]byte](state.BytesCodec{}))
	}
	if slices.ContainsFunc(f.set.defs, func(d aggDef) bool { return d.inMap }) {
		if f.distinct, err = f.openDistinct(); err != nil {
			return err
		}
	}
	if f.codec == nil {
		return nil
	}
	return f.migratePositional(oc)
}

// migratePositional rewrites by name, once, every accumulator of the
// task's key groups still stored by position (with its distinct values):
// the state of a checkpoint written before the by-name encoding. Read
// then with the step's aggregates, as every positional value is, they are
// right for the unchanged job that wrote them, which is the job that
// should run first after the upgrade (docs/yaml.md, "State"); rewritten,
// they stay right when the job's aggregates are edited later, even for
// keys that never get another record. A key group that holds
// accumulators gets a mark, "<operator>/by_name" under the empty key,
// once they are all by name, so that later opens of the task skip it
// with one lookup; a key group without any costs one seek and gets none
// (a stage that holds nothing keeps its empty snapshots).
func (f *runningAgg[T]) migratePositional(oc stream.OpenContext) error {
	b := oc.Backend
	done, err := state.NewValueState(b, oc.StateName("by_name"), state.Codec[[]byte](state.BytesCodec{}))
	if err != nil {
		return err
	}
	lo, hi := b.KeyGroups()
	if b.MaxParallelism() == 0 {
		lo, hi = 0, 1 // no key groups: the whole state, one mark
	}
	for g := lo; g < hi; g++ {
		b.SetCurrentKeyInGroup(nil, g)
		_, marked, err := done.Get()
		if err != nil {
			return err
		}
		if marked {
			continue
		}
		held := false
		f.keys = f.keys[:0]
		err = f.acc.ScanKeys(g, func(key, value []byte) error {
			held = true
			if !isByName(value) {
				f.keys = append(f.keys, bytes.Clone(key))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("aggregate: rewrite positional state: %w", err)
		}
		if !held {
			continue
		}
		keys := f.keys
		f.keys = nil // migrateDistinct's scratch
		for _, key := range keys {
			b.SetCurrentKey(key)
			acc, ok, err := f.acc.Get()
			if err != nil {
				return fmt.Errorf("aggregate: rewrite positional state of key %q: %w", key, err)
			}
			if !ok {
				continue
			}
			if f.distinct != nil {
				if err := f.migrateDistinct(); err != nil {
					return err
				}
			}
			if err := f.acc.Put(acc); err != nil {
				return err
			}
		}
		b.SetCurrentKeyInGroup(nil, g)
		if err := done.Put([]byte{aggCodecVersion}); err != nil {
			return err
		}
	}
	return nil
}

func (f *runningAgg[T]) ProcessElement(ctx *stream.Context[Rec], in T) error {
	args, rec := f.split(in, f.args)
	f.args = args
	acc, ok, err := f.acc.Get()
	if err != nil {
		return err
	}
	if !ok {
		acc = f.set.newAcc()
	}
	if ok && f.codec != nil {
		// The key's distinct values follow its accumulator: positional
		// keys become keys by name, a dropped aggregate's go.
		if f.codec.positional && f.distinct != nil {
			if err := f.migrateDistinct(); err != nil {
				return err
			}
		}
		for _, name := range f.codec.dropped {
			if err := f.dropDistinct(name); err != nil {
				return err
			}
		}
	}
	for i := range f.set.defs {
		f.isNew[i] = false
		if !f.set.defs[i].inMap || args[i] == nil {
			continue
		}
		f.kbuf = appendCanonical(append(f.kbuf[:0], f.distinctPrefix[i]...), args[i])
		found, err := f.distinct.Contains(f.kbuf)
		if err != nil {
			return err
		}
		if !found {
			if err := f.distinct.Put(f.kbuf, nil); err != nil {
				return err
			}
			f.isNew[i] = true
		}
	}
	f.set.fold(&acc, args, f.isNew)
	if err := f.acc.Put(acc); err != nil {
		return err
	}
	// A new slice per result: the Rec may outlive this call.
	out := make([]byte, 0, 16+len(ctx.Key())+12*len(f.prefix))
	out = jsontext.Append(append(out, `{"key":`...), ctx.Key())
	for i := range f.set.defs {
		if out, err = AppendJSON(append(out, f.prefix[i]...), f.set.result(&acc, i), nil); err != nil {
			return err
		}
	}
	return ctx.Emit(Rec{raw: append(out, '}'), Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset})
}

// migrateDistinct rewrites the current key's distinct values stored under
// positional map keys (uvarint(index) | value, written before the by-name
// encoding, with its positional accumulator) as keys by name
// (distinctKey). A positional accumulator is read with the step's
// aggregates, so index i is the step's aggregate i.
func (f *runningAgg[T]) migrateDistinct() error {
	f.keys = f.keys[:0]
	err := f.distinct.Range(func(k, _ []byte) bool {
		if !isByName(k) {
			f.keys = append(f.keys, k) // a copy: BytesCodec
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, old := range f.keys {
		i, n := binary.Uvarint(old)
		if n <= 0 || i >= uint64(len(f.set.defs)) || !f.set.defs[i].inMap {
			return fmt.Errorf("%w: aggregate: distinct value of aggregate %d: the step has no count_distinct there", state.ErrCorruptValue, i)
		}
		f.kbuf = append(append(f.kbuf[:0], f.distinctPrefix[i]...), old[n:]...)
		if err := f.distinct.Put(f.kbuf, nil); err != nil {
			return err
		}
		if err := f.distinct.Remove(old); err != nil {
			return err
		}
	}
	return nil
}

// dropDistinct removes the current key's distinct values of the
// count_distinct called name, which the step no longer has (its slot was
// dropped from the accumulator being written back), so that an aggregate
// added later under that name starts empty.
func (f *runningAgg[T]) dropDistinct(name string) error {
	if f.distinct == nil {
		var err error
		if f.distinct, err = f.openDistinct(); err != nil {
			return err
		}
	}
	prefix := distinctKey(nil, name)
	f.keys = f.keys[:0]
	err := f.distinct.RangeFrom(prefix, func(k, _ []byte) bool {
		if !bytes.HasPrefix(k, prefix) {
			return false
		}
		f.keys = append(f.keys, k)
		return true
	})
	if err != nil {
		return err
	}
	for _, k := range f.keys {
		if err := f.distinct.Remove(k); err != nil {
			return err
		}
	}
	return nil
}

// windowAgg is the stream.AggregateFunc of a windowed aggregate: its
// count_distinct keeps the window's distinct values in the accumulator
// (exact, held in the window's state; see docs/yaml.md, "aggregate"). It is shared
// by the tasks and holds no mutable state.
type windowAgg[T any] struct {
	set  *aggSet
	args func(T) []any
}

func (a windowAgg[T]) CreateAccumulator() aggAcc { return a.set.newAcc() }
func (a windowAgg[T]) Add(acc aggAcc, in T) aggAcc {
	a.set.fold(&acc, a.args(in), nil)
	return acc
}
func (a windowAgg[T]) Merge(x, y aggAcc) aggAcc { return a.set.merge(x, y) }
func (a windowAgg[T]) Result(acc aggAcc) aggAcc { return acc }

// windowAggregate defines the Window of a windowed aggregate over s and
// the Map that writes its results:
// {"key":…,"window_start":…,"window_end":…, <name>: <result>…} (and
// "early": true for an early result).
func windowAggregate[T any](s *stream.Stream[T], name string, set *aggSet, accCodec state.Codec[aggAcc], fields []string, ws stream.Windowing[T], args func(T) []any, schema stream.ProcessOption) *stream.Stream[Rec] {
	res := stream.Window(s, name, ws, accCodec, stream.AggregateFunc[T, aggAcc, aggAcc](windowAgg[T]{set: set, args: args}), schema)
	return stream.Map(res, func(r stream.WindowResult[aggAcc]) (Rec, error) {
		v := make(map[string]any, len(fields))
		v["key"], v["window_start"], v["window_end"] = string(r.Key), rfc3339(r.Start), rfc3339(r.End)
		for i := range set.defs {
			v[set.defs[i].name] = set.result(&r.Value, i)
		}
		if r.Early {
			v["early"] = true
		}
		return Rec{V: v, Fields: fields}, nil
	})
}

// checkLegacy adds, before the key change at path, the number check of the
// aggregate that the steps after it lead to, if that is a one-aggregate
// form over a field: a record the aggregate cannot read is rejected in
// this stage, where the source's on_error applies.
func (c *compiler) checkLegacy(path string, rest []config.Step) {
	next, kind := nextKeyed(rest)
	if kind == "window" {
		for _, s := range rest {
			if s.Aggregate != nil {
				next, kind = s, "aggregate"
				break
			}
		}
	}
	if kind != "aggregate" {
		return
	}
	a := next.Aggregate
	if a.Field != "" && !c.raw && a.Op != config.OpCount && a.Op != "" {
		c.cur = stream.Filter(c.cur, newNumberField(a.Field).check)
		c.checked = a.Field
	}
}

// numberField reads the top-level number field of a one-aggregate form.
// Its check runs before the aggregate (in the stage of the key change that
// leads to it, see checkLegacy): a value without the field, or whose field
// is not a finite number, is rejected there with stream.ErrDecode, so that
// the source's on_error applies. It keeps no state.
type numberField struct{ name string }

func newNumberField(name string) numberField { return numberField{name: name} }

// value returns the field's value, 0 if there is none (the check let only
// values with one through).
func (f numberField) value(r Rec) float64 {
	o, _ := r.object() // decodes a value no step has read yet
	switch x := o[f.name].(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

func (f numberField) check(r Rec) (bool, error) {
	o, err := r.object()
	if err != nil {
		return false, err
	}
	v, ok := o[f.name]
	switch x := v.(type) {
	case int64:
		return true, nil
	case float64:
		if finite(x) {
			return true, nil
		}
		return false, fmt.Errorf("%w: aggregate: field %q is out of the range of a float64", stream.ErrDecode, f.name)
	}
	if !ok {
		return false, fmt.Errorf("%w: aggregate: the value has no top-level field %q", stream.ErrDecode, f.name)
	}
	return false, fmt.Errorf("%w: aggregate: field %q is %s, not a number", stream.ErrDecode, f.name, typeOf(v))
}
