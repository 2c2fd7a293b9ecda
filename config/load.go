package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable Weir reads.
const EnvPrefix = "WEIR"

// Source says where a configuration comes from. Every part is optional.
type Source struct {
	// File is a YAML file; empty reads none.
	File string
	// YAML is YAML text, read after File (tests, embedded jobs).
	YAML []byte
	// Flags are command-line flags whose names are key paths
	// ("checkpoint.interval"); only flags the user set count.
	Flags *pflag.FlagSet
	// NoEnv reads no environment variables: processor dev and tests, whose
	// configuration must not change with the shell's WEIR_* variables.
	// Otherwise every key path has one, WEIR_<SECTION>_<KEY> (EnvName).
	NoEnv bool
	// GoJob is the name of the job defined in Go (stream.Job, run by
	// cli.Main) that the configuration is for; empty for a YAML job. The
	// job is then the Go program's, not the configuration's: job.pipeline
	// must be empty, and job.name defaults to GoJob and, when set, must
	// equal it (it names the job's topics, groups and checkpoints, so a
	// different name would run the program against another job's).
	GoJob string
	// Offline is for commands that connect to nothing (validate, plan
	// --partitions): the connection settings a replica needs, such as
	// kafka.brokers, are then not required (those that are set are still
	// checked).
	Offline bool
}

// Load reads a configuration from, lowest to highest precedence: defaults,
// the YAML file, environment variables and flags. It then fills derived
// defaults and validates. Unknown keys are errors. Every problem is
// reported, each a *FieldError with its key path and where the value came
// from (file:line:column, environment variable or flag), joined in one
// error. A YAML syntax error is reported alone: nothing after it could be
// read reliably.
//
// Values are decoded here, not by a generic decoder, so that a problem says
// what was expected in the user's terms ("a duration needs a unit") and
// where the value was written; a value that does not decode keeps its
// default, and the checks of Validate that it would only confuse are left
// out.
func Load(src Source) (*Config, error) {
	cfg, err := Check(src)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// Check is Load for tools that report problems rather than run: with
// problems, it returns them and also the configuration as far as it was
// read (nil after a YAML syntax error or an unreadable file), whose values
// must not be trusted: processor validate checks its expressions, so that
// their problems are reported with the others.
func Check(src Source) (*Config, error) {
	cfg := Default()
	d := decoder{origins: map[string]string{}, bad: map[string]bool{}}
	root := reflect.ValueOf(&cfg).Elem()

	readYAML := func(name string, b []byte) error {
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return yamlSyntaxError(name, b, err)
		}
		if len(doc.Content) == 0 {
			return nil // empty, or only comments
		}
		d.file = name
		d.lines = strings.Split(string(b), "\n")
		d.node(root, doc.Content[0], "")
		return nil
	}
	if src.File != "" {
		b, err := os.ReadFile(src.File)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := readYAML(src.File, b); err != nil {
			return nil, err
		}
	}
	if len(src.YAML) > 0 {
		if err := readYAML("yaml", src.YAML); err != nil {
			return nil, err
		}
	}

	fields := scalarFields(root)
	overlay(src, fields, &d)

	cfg.offline = src.Offline
	if src.GoJob != "" {
		cfg.goJob = src.GoJob
		if cfg.Job.Name == "" {
			cfg.Job.Name = src.GoJob
		}
	}
	cfg.derivedDefaults()
	cfg.origins = d.origins
	problems := d.problems
	for _, p := range unjoin(cfg.Validate()) {
		var fe *FieldError
		if errors.As(p, &fe) && d.covers(fe.Path) {
			continue // a consequence of a value that did not decode
		}
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return &cfg, cfg.Annotate(errors.Join(problems...))
	}
	return &cfg, nil
}

// Annotate adds to every *FieldError in err, by its key path, where that
// setting's value came from, if Load knows and it is not set yet: the
// problems that the pipeline compiler finds after Load are annotated too.
func (c *Config) Annotate(err error) error {
	if err == nil {
		return nil
	}
	problems := unjoin(err)
	for _, p := range problems {
		var fe *FieldError
		if errors.As(p, &fe) && fe.Origin == "" {
			fe.Origin = c.Origin(fe.Path)
		}
	}
	return errors.Join(problems...)
}

// Origin returns where the value at path (or, failing that, the nearest
// enclosing setting) came from: "job.yaml:9:13", "environment variable
// WEIR_KAFKA_BROKERS", "flag --checkpoint.interval"; empty for a default.
func (c *Config) Origin(path string) string {
	for path != "" {
		if o, ok := c.origins[path]; ok {
			return o
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return ""
}

// decoder decodes YAML nodes and strings into a Config, recording problems
// and where each setting came from.
type decoder struct {
	file     string            // the YAML being decoded, for origins
	lines    []string          // its lines, to locate expressions
	origins  map[string]string // key path -> where its value came from
	bad      map[string]bool   // key paths whose value did not decode
	problems []error
}

func (d *decoder) problem(path, origin, format string, args ...any) {
	d.bad[path] = true
	d.problems = append(d.problems, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Origin: origin})
}

// covers reports whether path is, or is inside, a setting whose value did
// not decode.
func (d *decoder) covers(path string) bool {
	for p := range d.bad {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

func (d *decoder) at(n *yaml.Node) string { return fmt.Sprintf("%s:%d:%d", d.file, n.Line, n.Column) }

var (
	durationType = reflect.TypeFor[time.Duration]()
	stepType     = reflect.TypeFor[Step]()
)

// node decodes n into v, the setting at path.
func (d *decoder) node(v reflect.Value, n *yaml.Node, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if path != "" {
		d.origins[path] = d.at(n)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with no value: the default
	}
	if d.shape(v, n, path) {
		return
	}
	t := v.Type()
	switch {
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.node(v.Elem(), n, path)
	case t.Kind() == reflect.Struct && t != durationType:
		d.mapping(v, n, path)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		if n.Kind != yaml.SequenceNode {
			d.problem(path, d.at(n), "%s: want a list", describe(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.node(s.Index(i), item, fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case t.Kind() == reflect.Slice: // []string
		var items []string
		switch n.Kind {
		case yaml.SequenceNode:
			for i, item := range n.Content {
				if item.Kind != yaml.ScalarNode {
					d.problem(fmt.Sprintf("%s[%d]", path, i), d.at(item), "%s: want a string", describe(item))
					return
				}
				d.origins[fmt.Sprintf("%s[%d]", path, i)] = d.at(item)
				items = append(items, item.Value)
			}
		case yaml.ScalarNode:
			items = splitList(n.Value)
		default:
			d.problem(path, d.at(n), "%s: want a list of strings", describe(n))
			return
		}
		v.Set(reflect.ValueOf(items))
	default:
		if n.Kind != yaml.ScalarNode {
			d.problem(path, d.at(n), "%s: want %s", describe(n), expected(t))
			return
		}
		d.scalar(v, n.Value, path, d.at(n))
	}
}

// mapping decodes the mapping n into the struct v, key by key.
func (d *decoder) mapping(v reflect.Value, n *yaml.Node, path string) {
	t := v.Type()
	if n.Kind != yaml.MappingNode {
		d.problem(path, d.at(n), "%s: want a mapping of %s", describe(n), strings.Join(keysOf(t), ", "))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		sub := join(path, k.Value)
		f, ok := fieldByKey(v, k.Value)
		if !ok {
			msg := "unknown key"
			s := suggest(k.Value, keysOf(t))
			if s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			d.problem(sub, d.at(k), "%s", msg)
			if s != "" {
				// The key meant is missing only because of the typo.
				d.bad[join(path, s)] = true
				if t == stepType && slices.Contains(stepKinds, s) {
					// So is the step's kind: "must have one of source,
					// filter, ..." would only repeat the problem.
					d.bad[path] = true
				}
			}
			continue
		}
		d.node(f, val, sub)
	}
}

// text decodes s, from an environment variable or a flag, into the scalar
// setting v at path.
func (d *decoder) text(v reflect.Value, s, path, origin string) {
	for p := range d.origins { // the YAML list this value replaces
		if strings.HasPrefix(p, path+"[") {
			delete(d.origins, p)
		}
	}
	d.origins[path] = origin
	delete(d.bad, path) // a higher-precedence value replaces one that was bad
	if v.Kind() == reflect.Slice {
		v.Set(reflect.ValueOf(splitList(s)))
		return
	}
	d.scalar(v, s, path, origin)
}

// scalar decodes the scalar s into v.
func (d *decoder) scalar(v reflect.Value, s, path, origin string) {
	switch {
	case v.Type() == durationType:
		if dur, err := time.ParseDuration(s); err == nil {
			v.SetInt(int64(dur))
			return
		}
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			d.problem(path, origin, "%s: a duration needs a unit: write %ss, %sms or %sm, for example", s, s, s, s)
			return
		}
		d.problem(path, origin, "%q: want a duration such as 500ms, 10s or 2m", s)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v.OverflowInt(n) {
			d.problem(path, origin, "%q: want a whole number", s)
			return
		}
		v.SetInt(n)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			d.problem(path, origin, "%q: want true or false", s)
			return
		}
		v.SetBool(b)
	case v.Kind() == reflect.String:
		v.SetString(s)
	default:
		d.problem(path, origin, "cannot be set here (%s)", v.Type())
	}
}

// describe names what a YAML node is, for a problem.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// expected says, for a problem, what a scalar setting of type t takes.
func expected(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 10s"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "a whole number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	}
	return "a string"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// splitList splits a comma-separated list, as environment variables and
// flags write lists.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// fieldByKey returns the field of struct v whose key is key.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("mapstructure"); k == key && k != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// keysOf returns the keys of struct type t.
func keysOf(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("mapstructure"); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// overlay decodes the layers above the YAML into fields: the environment
// variables and the flags the user set, whose precedence (a flag over its
// variable) viper resolves. The YAML is not viper's to read: it is decoded
// from yaml.v3 nodes, so that a problem names its line and column, which
// viper does not keep. Each value is decoded by d, with its origin.
func overlay(src Source, fields map[string]reflect.Value, d *decoder) {
	v := viper.NewWithOptions(viper.WithLogger(slog.New(slog.DiscardHandler)))
	v.AllowEmptyEnv(true) // WEIR_X= sets X to "", as in the YAML
	keys := sortedKeys(fields)
	for _, k := range keys {
		if !src.NoEnv {
			_ = v.BindEnv(k, EnvName(k)) // fails only without a key
		}
		if src.Flags != nil {
			if f := src.Flags.Lookup(k); f != nil {
				_ = v.BindPFlag(k, f) // fails only for a nil flag
			}
		}
	}
	for _, k := range keys {
		if !v.IsSet(k) {
			continue
		}
		origin := "environment variable " + EnvName(k)
		if src.Flags != nil {
			if f := src.Flags.Lookup(k); f != nil && f.Changed {
				origin = "flag --" + k
			}
		}
		d.text(fields[k], v.GetString(k), k, origin)
	}
}

// EnvName returns the environment variable of a key path:
// "checkpoint.max_concurrent" → WEIR_CHECKPOINT_MAX_CONCURRENT.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns every scalar key path, sorted: the settings that have an
// environment variable and may be set by a flag.
func Keys() []string {
	c := Default()
	return sortedKeys(scalarFields(reflect.ValueOf(&c).Elem()))
}

// scalarFields returns the scalar settings of the Config v by key path.
// Pipeline steps are no scalars: they come from YAML only.
func scalarFields(v reflect.Value) map[string]reflect.Value {
	out := map[string]reflect.Value{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			key := t.Field(i).Tag.Get("mapstructure")
			if key == "" || key == "-" {
				continue
			}
			key = join(prefix, key)
			fv := v.Field(i)
			switch ft := fv.Type(); {
			case isShape(ft):
				// A shape of the job language: YAML only.
			case ft.Kind() == reflect.Struct && ft != durationType:
				walk(fv, key)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				// A list of sections: YAML only.
			default:
				out[key] = fv
			}
		}
	}
	walk(v, "")
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// unjoin flattens errors.Join trees into their leaves.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// absPath makes a local directory absolute for a file:// URL.
func absPath(dir string) string {
	if a, err := filepath.Abs(dir); err == nil {
		return filepath.ToSlash(a)
	}
	return filepath.ToSlash(dir)
}
