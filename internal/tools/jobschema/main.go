// Command jobschema writes the JSON Schema of the job file
// (docs/job.schema.json) from the configuration types of package config,
// and puts its job section into the Helm chart's values.schema.json, so
// that editors complete and check job files and helm checks the chart's
// config.job. Descriptions are the fields' doc comments; the allowed
// values come from config's own lists (config.AggregateOps, ...).
//
//	go run ./internal/tools/jobschema            # from the module root
//	go run ./internal/tools/jobschema -check     # fails if a file is stale
//
// It must not be imported: it is a build tool.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/weir-stream/weir/config"
)

func main() {
	root := flag.String("root", ".", "the module's root directory")
	check := flag.Bool("check", false, "fail if a file differs from what would be written, instead of writing it")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "jobschema:", err)
		os.Exit(1)
	}
}

const (
	jobSchemaFile  = "docs/job.schema.json"
	helmSchemaFile = "deploy/helm/weir/values.schema.json"
)

func run(root string, check bool) error {
	docs, err := fieldDocs(root + "/config")
	if err != nil {
		return err
	}
	g := generator{docs: docs}
	schema := g.object(reflect.TypeFor[config.Config]())
	schema = append(obj{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", "https://github.com/weir-stream/weir/docs/job.schema.json"},
		{"title", "Weir job file"},
		{"description", "The configuration of a Weir processor and its job (docs/configuration.md, docs/yaml.md). In VS Code with the YAML extension, start a job file with: # yaml-language-server: $schema=<path or URL of this file>"},
	}, schema...)
	files := map[string][]byte{jobSchemaFile: marshal(schema)}

	helm, err := os.ReadFile(root + "/" + helmSchemaFile)
	if err != nil {
		return err
	}
	job := g.object(reflect.TypeFor[config.Job]())
	newHelm, err := replaceHelmJob(helm, job)
	if err != nil {
		return err
	}
	files[helmSchemaFile] = newHelm

	for name, want := range files {
		path := root + "/" + name
		if check {
			have, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Equal(have, want) {
				return fmt.Errorf("%s is stale: run go run ./internal/tools/jobschema", name)
			}
			continue
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// replaceHelmJob replaces properties.config.properties.job of the chart's
// schema, keeping the rest of the file (and its key order) as written.
func replaceHelmJob(helm []byte, job obj) ([]byte, error) {
	var doc ordered
	if err := json.Unmarshal(helm, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", helmSchemaFile, err)
	}
	cfg := doc
	for _, k := range []string{"properties", "config", "properties"} {
		next, ok := cfg.get(k).(ordered)
		if !ok {
			return nil, fmt.Errorf("%s: no properties.config.properties", helmSchemaFile)
		}
		cfg = next
	}
	cfg.set("job", job)
	return marshal(doc), nil
}

// obj is a JSON object that keeps its keys in order.
type obj []kv

type kv struct {
	k string
	v any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := encode(e.k)
		if err != nil {
			return nil, err
		}
		v, err := encode(e.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ordered is a decoded JSON object that keeps its keys in order (a
// pointer to obj, so that set changes it in place).
type ordered = *orderedObj

type orderedObj struct{ o obj }

func (p *orderedObj) MarshalJSON() ([]byte, error) { return p.o.MarshalJSON() }

func (p *orderedObj) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	v, err := decodeOrdered(dec)
	if err != nil {
		return err
	}
	o, ok := v.(ordered)
	if !ok {
		return fmt.Errorf("not an object")
	}
	*p = *o
	return nil
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := &orderedObj{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o.o = append(o.o, kv{k.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return t, nil
}

func (p *orderedObj) get(k string) any {
	if p == nil {
		return nil
	}
	for _, e := range p.o {
		if e.k == k {
			return e.v
		}
	}
	return nil
}

func (p *orderedObj) set(k string, v any) {
	for i, e := range p.o {
		if e.k == k {
			p.o[i].v = v
			return
		}
	}
	p.o = append(p.o, kv{k, v})
}

// encode is json.Marshal without escaping <, > and &: the schema's text
// is read by people.
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func marshal(v any) []byte {
	raw, err := encode(v)
	if err != nil {
		panic(err) // only our own values: a broken invariant
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		panic(err)
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// fieldDocs reads the doc comments of the struct fields of package config
// by "Type.Field".
func fieldDocs(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	out := map[string]string{}
	{
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, fl := range st.Fields.List {
					text := ""
					if fl.Doc != nil {
						text = strings.Join(strings.Fields(fl.Doc.Text()), " ")
					} else if fl.Comment != nil {
						text = strings.Join(strings.Fields(fl.Comment.Text()), " ")
					}
					for _, name := range fl.Names {
						out[ts.Name.Name+"."+name.Name] = text
					}
				}
				return true
			})
		}
	}
	return out, nil
}
