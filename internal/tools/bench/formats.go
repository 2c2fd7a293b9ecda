package main

import (
	"runtime"

	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/internal/formatbench"
)

// runFormats measures what a record format costs per record (issue 15):
// decoding at a source and encoding at a sink, Avro in the Confluent wire
// format and Protobuf against JSON on the same 1024 orders (internal/formatbench). It
// needs no broker: -formats runs only this.
func runFormats() error {
	benchutil.Info("-formats: decode (source edge + the value steps read) and encode (sink) per record, JSON, Avro and Protobuf, 1024 orders, the fastest of %d rounds each; %d CPUs, load average %s",
		formatbench.Rounds, runtime.NumCPU(), loadAvg())
	rs, err := formatbench.Run()
	if err != nil {
		return err
	}
	ns := map[string]float64{}
	for _, r := range rs {
		ns[r.Name] = r.NsPerOp
		benchutil.Result(r.Name, "%.0f", r.NsPerOp, "ns/op")
		benchutil.Result(r.Name+"_allocs", "%d", r.AllocsPerOp, "allocs/op")
	}
	for _, kind := range []string{"decode", "encode"} {
		if j := ns["format_"+kind+"_json"]; j > 0 {
			benchutil.Result("format_"+kind+"_avro_vs_json", "%.2f", ns["format_"+kind+"_avro"]/j, "ratio")
			benchutil.Result("format_"+kind+"_protobuf_vs_json", "%.2f", ns["format_"+kind+"_protobuf"]/j, "ratio")
		}
	}
	return nil
}
