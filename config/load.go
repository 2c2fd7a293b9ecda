package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
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
	// Env reads environment variables WEIR_<SECTION>_<KEY>; nil means
	// os.LookupEnv.
	Env func(string) (string, bool)
}

// Load reads a configuration from, lowest to highest precedence: defaults,
// the YAML file, environment variables and flags. It then fills derived
// defaults and validates. Unknown keys are errors. Every problem is
// reported, each with its key path, joined in one error whose lines read
// "key.path: problem".
func Load(src Source) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	def := Default()
	var problems []error

	// Defaults, so that viper knows every scalar key (and so binds its
	// environment variable).
	scalars := flatten(def)
	for k, val := range scalars {
		v.SetDefault(k, val)
	}
	var raw []map[string]any
	readYAML := func(name string, b []byte) {
		if len(bytes.TrimSpace(b)) == 0 {
			return
		}
		if err := v.MergeConfig(bytes.NewReader(b)); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", name, err))
			return
		}
		m := map[string]any{}
		one := viper.New()
		one.SetConfigType("yaml")
		if err := one.ReadConfig(bytes.NewReader(b)); err == nil {
			m = one.AllSettings()
		}
		raw = append(raw, m)
	}
	if src.File != "" {
		b, err := os.ReadFile(src.File)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		readYAML(src.File, b)
	}
	readYAML("yaml", src.YAML)
	for _, m := range raw {
		problems = append(problems, unknownKeys(reflect.TypeFor[Config](), m, "")...)
	}

	lookup := src.Env
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for _, k := range sortedKeys(scalars) {
		env := EnvName(k)
		if val, ok := lookup(env); ok {
			v.Set(k, val)
		}
	}
	if src.Flags != nil {
		src.Flags.Visit(func(f *pflag.Flag) {
			if _, known := scalars[f.Name]; !known {
				return
			}
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				v.Set(f.Name, sv.GetSlice())
				return
			}
			v.Set(f.Name, f.Value.String())
		})
	}
	cfg := Default()
	if err := v.Unmarshal(&cfg, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
	))); err != nil {
		// A value of the wrong type ("interval: soon"): mapstructure names
		// the key; nothing else can be checked reliably.
		return nil, errors.Join(append(problems, fmt.Errorf("config: %w", err))...)
	}
	cfg.derivedDefaults()
	if err := cfg.Validate(); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return &cfg, nil
}

// EnvName returns the environment variable of a key path:
// "checkpoint.max_concurrent" → WEIR_CHECKPOINT_MAX_CONCURRENT.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns every scalar key path, sorted: the settings that have an
// environment variable and may be set by a flag.
func Keys() []string { return sortedKeys(flatten(Default())) }

// flatten returns the scalar settings of c by key path. Pipeline steps are
// no scalars: they come from YAML only.
func flatten(c Config) map[string]any {
	out := map[string]any{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			key := f.Tag.Get("mapstructure")
			if key == "" {
				continue
			}
			if prefix != "" {
				key = prefix + "." + key
			}
			fv := v.Field(i)
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(fv, key)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				// A list of sections: YAML only.
			case f.Type == reflect.TypeFor[time.Duration]():
				out[key] = fv.Interface().(time.Duration).String()
			default:
				out[key] = fv.Interface()
			}
		}
	}
	walk(reflect.ValueOf(c), "")
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// unknownKeys reports every key of m, at any depth, that t has no field for.
func unknownKeys(t reflect.Type, m map[string]any, prefix string) []error {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		if key := t.Field(i).Tag.Get("mapstructure"); key != "" {
			fields[key] = t.Field(i).Type
		}
	}
	var problems []error
	for _, k := range sortedKeys(m) {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		ft, ok := fields[k]
		if !ok {
			problems = append(problems, &FieldError{Path: path, Msg: "unknown key"})
			continue
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]():
			if sub, ok := m[k].(map[string]any); ok {
				problems = append(problems, unknownKeys(ft, sub, path)...)
			}
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			items, _ := m[k].([]any)
			for i, item := range items {
				sub, ok := item.(map[string]any)
				if !ok {
					problems = append(problems, &FieldError{Path: fmt.Sprintf("%s[%d]", path, i), Msg: "must be a mapping"})
					continue
				}
				problems = append(problems, unknownKeys(ft.Elem(), sub, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return problems
}

// absPath makes a local directory absolute for a file:// URL.
func absPath(dir string) string {
	if a, err := filepath.Abs(dir); err == nil {
		return filepath.ToSlash(a)
	}
	return filepath.ToSlash(dir)
}
