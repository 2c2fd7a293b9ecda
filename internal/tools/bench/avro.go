package main

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/weir-stream/weir/internal/benchutil"
)

// avroClickSchema is the -avro input's schema: the count job's records,
// {"i":…,"user":…}, as Avro.
const avroClickSchema = `{"type":"record","name":"Click","namespace":"weir.bench","fields":[{"name":"i","type":"long"},{"name":"user","type":"string"}]}`

type avroClick struct {
	I    int64  `avro:"i"`
	User string `avro:"user"`
}

// avroInput is the -avro input's schema, registered, and its ID.
type avroInput struct {
	schema avro.Schema
	id     int
}

// registerAvro registers the -avro input's schema under <input>-value in
// the registry of -registry.
func (b *bench) registerAvro(ctx context.Context) error {
	cl, err := sr.NewClient(sr.URLs(b.c.registry))
	if err != nil {
		return err
	}
	ss, err := cl.CreateSchema(ctx, b.in+"-value", sr.Schema{Schema: avroClickSchema, Type: sr.TypeAvro})
	if err != nil {
		return fmt.Errorf("-avro: register the input's schema at %s: %w", b.c.registry, err)
	}
	b.avro = &avroInput{schema: avro.MustParse(avroClickSchema), id: ss.ID}
	return nil
}

// avroValue is input record i of key as Avro in the Confluent wire format.
func (b *bench) avroValue(i int, key string) []byte {
	payload, err := avro.Marshal(b.avro.schema, avroClick{I: int64(i), User: key})
	if err != nil {
		panic(err) // the schema and the struct agree
	}
	v := binary.BigEndian.AppendUint32([]byte{0}, uint32(b.avro.id))
	return append(v, payload...)
}

// runAvro is the rest of an -avro run: the raw pipe before and after the
// count job (first -replicas entry) on the same Avro input, the job reading
// it with format avro (each record decoded into its JSON document at the
// source's edge), its output JSON counts; then the verification. No
// latency or recovery.
func (b *bench) runAvro(ctx context.Context) error {
	var raws []pass
	for pass := range 2 {
		if pass == 1 {
			j, t, err := b.throughput(ctx, 0, b.c.replicas[0], b.plain, "avro_checkpoint_duration")
			if err != nil {
				return fmt.Errorf("count job on avro: %w", err)
			}
			defer func() { _ = j.stopAll() }()
			rate := t.rate(b.c.records)
			benchutil.Result("avro_count_job_throughput", "%.0f", rate, "records/s")
			if proc := t.processingRate(b.c.records); proc > 0 {
				benchutil.Result("avro_count_job_startup", "%.2f", t.startup.Seconds(), "s")
				benchutil.Result("avro_count_job_processing_throughput", "%.0f", proc, "records/s")
			}
			b.avroJob, b.avroPass = j, t
		}
		p, err := b.rawPipe(ctx, pass+1, b.plain)
		if err != nil {
			return fmt.Errorf("raw pipe: %w", err)
		}
		raws = append(raws, p)
	}
	rawRate := sum(raws).rate(b.c.records)
	benchutil.Result("raw_pipe_throughput", "%.0f", rawRate, "records/s")
	benchutil.Result("avro_count_job_vs_raw_ratio", "%.3f", b.avroPass.rate(b.c.records)/rawRate, "ratio")
	if proc := b.avroPass.processingRate(b.c.records); proc > 0 {
		benchutil.Result("avro_count_job_processing_vs_raw_ratio", "%.3f", proc/rawRate, "ratio")
	}
	benchutil.Info("load average now %s", loadAvg())
	if !b.c.verify {
		return nil
	}
	vs, err := b.verifyOutputs(ctx, []output{{b.avroJob, b.preloadPerKey, b.c.records}})
	if err != nil {
		return err
	}
	return verdict(vs)
}
