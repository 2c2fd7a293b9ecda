package cli

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
)

// TestDevInputPerTopic runs a stream–table join in `processor dev --job`,
// fed by one --input file per topic (TOPIC=FILE): the orders and the
// customers table. Every order of the first run comes out once, joined or
// (if dev read it before its customer) with customer null; a second run
// on the same --dir, fed new orders alone, joins each of them with the
// customer the first run put in the table.
func TestDevInputPerTopic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := t.TempDir()
	job := filepath.Join(dir, "enrich.yaml")
	write(t, job, `
job:
  name: enrich
  pipeline:
    - source: {topics: [orders]}
    - join: {table: {topic: customers}, as: customer}
    - sink: {topic: enriched}
`)
	customers := filepath.Join(dir, "customers.txt")
	write(t, customers, "ann\t{\"name\":\"Ann\"}\nbob\t{\"name\":\"Bob\"}\n")
	orders1 := filepath.Join(dir, "orders1.txt")
	write(t, orders1, "ann\t{\"id\":1}\nbob\t{\"id\":2}\n")
	orders2 := filepath.Join(dir, "orders2.txt")
	write(t, orders2, "bob\t{\"id\":3}\nann\t{\"id\":4}\n")

	line := regexp.MustCompile(`^\d\d:\d\d:\d\d  enriched  (\w+)  (\{.*\})$`)
	outputs := func(lines []string) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, l := range matching(lines, line) {
			m := line.FindStringSubmatch(l)
			var v map[string]any
			if err := json.Unmarshal([]byte(m[2]), &v); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			id := m[1] + "/" + string(must(json.Marshal(v["id"])))
			if _, ok := out[id]; ok {
				t.Errorf("order %s printed twice", id)
			}
			out[id] = v
		}
		return out
	}
	devDir := filepath.Join(dir, "dev")
	first := startDevProc(t, bin, devDir, "--job", job, "--input", "customers="+customers, "--input", "orders="+orders1)
	first.waitMatches(line, 2)
	first.waitCheckpoint(1)
	first.stop()
	for id, v := range outputs(first.output()) {
		c, ok := v["customer"]
		if !ok || (c != nil && !reflect.DeepEqual(c, map[string]any{"name": map[string]string{"ann/1": "Ann", "bob/2": "Bob"}[id]})) {
			t.Errorf("first run: order %s joined as %v", id, v)
		}
	}

	second := startDevProc(t, bin, devDir, "--job", job, "--input", "orders="+orders2)
	second.waitMatches(line, 2)
	second.stop()
	want := map[string]map[string]any{
		"bob/3": {"id": 3.0, "customer": map[string]any{"name": "Bob"}},
		"ann/4": {"id": 4.0, "customer": map[string]any{"name": "Ann"}},
	}
	if got := outputs(second.output()); !reflect.DeepEqual(got, want) {
		t.Errorf("second run printed %v, want %v", got, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
