package plan

import (
	"strconv"

	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// Schema returns the state schema of job under plan p: what each of the
// job's checkpoints records of it (package compat). fingerprint is the
// job definition's (compat.Fingerprint); txnPrefix gives what the
// transactional IDs of an exactly-once sink start with (the sink package's
// naming: sink.TxnIDPrefix).
func (p *Plan) Schema(job *stream.Job, fingerprint string, txnPrefix func(stage, topic string) string) compat.Schema {
	s := compat.Schema{Fingerprint: fingerprint, MaxParallelism: p.MaxParallelism}
	namedAfter := map[string]string{}
	for _, d := range job.Stages() {
		namedAfter[d.Name] = d.NamedAfter
	}
	runs := map[string]string{} // the job's stage name → the name it runs under
	for _, st := range p.Stages {
		s.Stages = append(s.Stages, compat.Stage{Name: st.Name, Parallelism: st.Parallelism, NamedAfter: namedAfter[st.JobName()], Defined: st.Defined})
		runs[st.JobName()] = st.Name
	}
	parts := 0
	if src := p.Stage(stream.MainStage); src != nil {
		parts = src.Parallelism
	}
	for _, src := range job.Sources() {
		s.Sources = append(s.Sources, compat.Source{Topics: append([]string(nil), src.Topics...), Partitions: parts})
	}
	s.Operators = job.StateOperators()
	for i := range s.Operators {
		if n, ok := runs[s.Operators[i].Stage]; ok {
			s.Operators[i].Stage = n
		}
	}
	stageOf := map[int]string{}
	for _, st := range p.Stages {
		for _, i := range st.Sinks {
			stageOf[i] = st.Name
		}
	}
	seen := map[string]int{}
	for i, k := range job.Sinks() {
		id := k.Topic
		if n := seen[k.Topic]; n > 0 {
			id += "#" + strconv.Itoa(n+1)
		}
		seen[k.Topic]++
		d := k.Delivery
		if d == "" {
			d = kafkaio.DeliveryExactlyOnce
		}
		sk := compat.Sink{ID: id, Topic: k.Topic, Stage: stageOf[i], Delivery: string(d)}
		if d == kafkaio.DeliveryExactlyOnce {
			sk.TransactionalIDPrefix = txnPrefix(stageOf[i], k.Topic)
		}
		s.Sinks = append(s.Sinks, sk)
	}
	s.Normalize()
	return s
}
