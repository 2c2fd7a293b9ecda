package cli

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/weir-stream/weir/config"
)

// schemaNode is the part of a JSON schema the chart's values.schema.json
// uses to describe the processor's configuration.
type schemaNode struct {
	Type                 any                    `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	Items                *schemaNode            `json:"items"`
	AdditionalProperties json.RawMessage        `json:"additionalProperties"`
	// AnyOf holds the forms of a setting with a short form (`format: json`
	// or a mapping).
	AnyOf []*schemaNode `json:"anyOf"`
}

// TestHelmSchemaCoversTheConfiguration compares the `config` part of the
// Helm chart's values.schema.json with the configuration struct the
// processor loads, both ways: every key the processor knows is in the
// schema (a valid key must not be refused by helm) and every key of the
// schema is one the processor knows, and every object in it refuses
// unknown keys, as the processor does (a misspelt key fails at helm
// install, not in the pod).
func TestHelmSchemaCoversTheConfiguration(t *testing.T) {
	raw, err := os.ReadFile("../deploy/helm/weir/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var root schemaNode
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	cfgSchema := root.Properties["config"]
	if cfgSchema == nil {
		t.Fatal("values.schema.json has no config property")
	}

	want := map[string]bool{}
	var walkType func(rt reflect.Type, prefix string)
	walkType = func(rt reflect.Type, prefix string) {
		for rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		switch {
		case rt.Kind() == reflect.Slice && rt.Elem().Kind() == reflect.Struct:
			walkType(rt.Elem(), prefix+"[]")
			return
		case rt.Kind() != reflect.Struct:
			return
		}
		for i := range rt.NumField() {
			f := rt.Field(i)
			key := f.Tag.Get("mapstructure")
			if key == "" {
				continue
			}
			if key == "-" { // a shape: a route's list of branches, the named aggregates
				walkType(f.Type, prefix)
				continue
			}
			path := key
			if prefix != "" {
				path = prefix + "." + key
			}
			want[path] = true
			walkType(f.Type, path)
		}
	}
	walkType(reflect.TypeFor[config.Config](), "")

	have := map[string]bool{}
	var walkSchema func(n *schemaNode, path string)
	walkSchema = func(n *schemaNode, path string) {
		if n.Items != nil {
			walkSchema(n.Items, path+"[]")
		}
		for _, form := range n.AnyOf {
			walkSchema(form, path)
		}
		if n.Properties == nil {
			return
		}
		// An aggregate step's other keys are the names of its aggregates.
		if string(n.AdditionalProperties) != "false" && !strings.HasSuffix(path, ".aggregate") {
			t.Errorf("schema of config%s does not refuse unknown keys (additionalProperties: false)", "."+path)
		}
		for k, c := range n.Properties {
			p := k
			if path != "" {
				p = path + "." + k
			}
			have[p] = true
			walkSchema(c, p)
		}
	}
	walkSchema(cfgSchema, "")

	var missing, extra []string
	for k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	for k := range have {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("configuration keys missing from values.schema.json (helm would refuse them): %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("values.schema.json keys the processor does not know: %v", extra)
	}
	if len(want) < 30 {
		t.Errorf("only %d configuration keys found: the walk is broken", len(want))
	}
}
