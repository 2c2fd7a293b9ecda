package task

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/stream"
)

// A sink's identity in a task is its topic: a stage writes each topic
// through one sink (stream.To shares the sink of a topic between the places
// that write it, route branches included), so the topic tells a stage's
// sinks apart and does not change when sinks are added to the job or
// removed from it, as their index in Job.Sinks does. The sink's
// transactional IDs carry it (sink.PoolName: "<stage>@<topic>"), and a
// checkpoint records each sink's transactions under it (sinkPool), so that
// a restore hands every sink its own transactions whatever changed around
// it, and still commits those of a sink the job no longer has.

// sinkPool is what a checkpoint records of one sink of a task: its
// identity, the pool of transactional IDs it ran, and the transactions it
// had pre-committed at the barrier.
type sinkPool struct {
	// Topic names the sink among its stage's sinks. Empty only for a sink
	// of a checkpoint that predates sink pools, when the topic could not be
	// told (legacySinkPools).
	Topic string `json:"topic"`
	// Pool and Size are the sink's pool as the task ran it: its
	// transactional IDs are sink.TxnID(prefix, Pool, partition, slot) for
	// every slot below Size. Size is 0 for an at-least-once sink, which has
	// no pool.
	Pool string `json:"pool"`
	Size int    `json:"size,omitempty"`
	// Txns are the transactions pre-committed and not yet committed when
	// the barrier passed (sink.PreCommit.Wait): what a restore from the
	// checkpoint commits.
	Txns []sink.TxnHandle `json:"txns"`
}

// txnIDs returns the transactional IDs of p's pool.
func (p sinkPool) txnIDs(prefix string, partition int32) []string {
	ids := make([]string, p.Size)
	for i := range ids {
		ids[i] = sink.TxnID(prefix, p.Pool, partition, i)
	}
	return ids
}

// legacyPoolName is the name builds before sink pools gave sink i of a
// stage in its transactional IDs: the first sink of the job had the
// stage's name, the others "<stage>.s<i>".
func legacyPoolName(stage string, i int) string {
	if i == 0 {
		return stage
	}
	return fmt.Sprintf("%s.s%d", stage, i)
}

// poolOf returns the pool the task runs for sink spec of its stage.
func poolOf(stage string, spec stream.KafkaSink, maxConcurrent int) sinkPool {
	p := sinkPool{Topic: spec.Topic, Pool: sink.PoolName(stage, spec.Topic)}
	if spec.Delivery != kafkaio.DeliveryAtLeastOnce {
		p.Size = sink.DefaultPoolSize(maxConcurrent)
	}
	return p
}

// recordedSinkPools returns the sinks of the task that op records. A
// checkpoint written before sink pools has the sinks' transactions by
// index in the job's sinks as they were then (op.Sinks; null for a sink of
// another stage): see legacySinkPools.
func recordedSinkPools(op *operatorState, stage string, specs []stream.KafkaSink, stageSinks []int, maxConcurrent int) ([]sinkPool, error) {
	if op.SinkPools == nil {
		return legacySinkPools(op.Sinks, stage, specs, stageSinks, maxConcurrent), nil
	}
	seen := map[string]bool{}
	for _, p := range op.SinkPools {
		if p.Topic != "" && seen[p.Topic] {
			return nil, fmt.Errorf("two sinks of topic %s", p.Topic)
		}
		seen[p.Topic] = true
	}
	return op.SinkPools, nil
}

// legacySinkPools names the sinks of a checkpoint that recorded them by
// index (entry i: sink i of the job then; nil: of another stage). A
// sink's topic is the topic its handles' marker records are in, or else,
// if it has none (no transactions, or version-1 handles), that of sink i
// of the job now, if this stage writes it and no other entry is known to
// be its. That is right when the job is unchanged; when it is not, what
// is committed and fenced is still right (the handles name their
// transactional IDs, the pool is named by its index), only the log may
// name the wrong sink. Its pool is as those builds ran it: named by the
// index, and as large as now (the pool size is not recorded).
func legacySinkPools(bySink [][]sink.TxnHandle, stage string, specs []stream.KafkaSink, stageSinks []int, maxConcurrent int) []sinkPool {
	var out []sinkPool
	claimed := map[string]bool{}
	for i, hs := range bySink {
		if hs == nil {
			continue
		}
		p := sinkPool{Pool: legacyPoolName(stage, i), Size: sink.DefaultPoolSize(maxConcurrent), Txns: hs}
		for _, h := range hs {
			if h.Marker.Topic != "" {
				p.Topic = h.Marker.Topic
				break
			}
		}
		if p.Topic != "" {
			claimed[p.Topic] = true
		}
		out = append(out, p)
	}
	for k, p := range out {
		if p.Topic != "" {
			continue
		}
		i := legacyIndex(bySink, k)
		if i < len(specs) && slices.Contains(stageSinks, i) && !claimed[specs[i].Topic] {
			out[k].Topic = specs[i].Topic
			claimed[specs[i].Topic] = true
			if specs[i].Delivery == kafkaio.DeliveryAtLeastOnce {
				out[k].Size = 0
			}
		}
	}
	return out
}

// legacyIndex returns the index in bySink of its k-th non-nil entry.
func legacyIndex(bySink [][]sink.TxnHandle, k int) int {
	for i, hs := range bySink {
		if hs == nil {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	return -1
}

// sinkRecovery is what a task's restore does with one sink.
type sinkRecovery struct {
	// index is the sink's index in Job.Sinks; -1 for a sink the job no
	// longer has, or one of an old task of another index (a rescaled
	// stage, rescale.go), which is retired: its transactions committed,
	// its pool fenced (sink.Retire).
	index int
	// partition is the task index the pool's transactional IDs carry:
	// the restoring task's, or the old task's whose sink it retires.
	partition int32
	// pool is the pool the sink runs now; for a retired sink, the one the
	// checkpoint recorded.
	pool sinkPool
	// txns are the transactions the checkpoint recorded for it.
	txns []sink.TxnHandle
	// fence are the transactional IDs of the pool the checkpoint recorded
	// for it, if the sink runs another one now (its pool's name changed):
	// fenced with the new pool.
	fence []string
}

// planSinkRecovery matches the sinks the checkpoint recorded (rec) with the
// stage's sinks now (stageSinks, indices into specs) by topic: a sink in
// both recovers its transactions, a new one starts with a fresh pool, one
// only in rec is retired. It refuses if a transactional ID would be
// touched by two of them, as it could if a checkpoint were damaged: one
// sink's fence (InitProducerID) would abort a transaction that another
// must first commit.
func planSinkRecovery(prefix, stage string, partition int32, specs []stream.KafkaSink, stageSinks []int, maxConcurrent int, rec []sinkPool) ([]sinkRecovery, error) {
	byTopic := map[string]int{}
	for k, p := range rec {
		if p.Topic != "" {
			byTopic[p.Topic] = k
		}
	}
	used := make([]bool, len(rec))
	var plan []sinkRecovery
	for _, i := range stageSinks {
		r := sinkRecovery{index: i, partition: partition, pool: poolOf(stage, specs[i], maxConcurrent)}
		if k, ok := byTopic[specs[i].Topic]; ok {
			used[k] = true
			r.txns = rec[k].Txns
			if rec[k].Pool != r.pool.Pool {
				r.fence = rec[k].txnIDs(prefix, partition)
			}
		}
		plan = append(plan, r)
	}
	for k, p := range rec {
		if !used[k] && (len(p.Txns) > 0 || p.Size > 0) {
			plan = append(plan, sinkRecovery{index: -1, partition: partition, pool: p, txns: p.Txns})
		}
	}
	return plan, checkSinkOwners(prefix, plan)
}

// planMovedSinks adds to plan the retirement of the sinks of old tasks of
// other indices that a rescaled task recovers (rescale.go): every pool
// they recorded is retired under its own partition, its transactions
// committed and its transactional IDs fenced.
func planMovedSinks(prefix string, plan []sinkRecovery, moved []movedSinks) ([]sinkRecovery, error) {
	for _, m := range moved {
		for _, p := range m.pools {
			if len(p.Txns) > 0 || p.Size > 0 {
				plan = append(plan, sinkRecovery{index: -1, partition: m.partition, pool: p, txns: p.Txns})
			}
		}
	}
	return plan, checkSinkOwners(prefix, plan)
}

// checkSinkOwners refuses a plan in which a transactional ID would be
// touched by two entries.
func checkSinkOwners(prefix string, plan []sinkRecovery) error {
	owner := map[string]int{} // transactional ID -> the plan entry that touches it
	for k, r := range plan {
		ids := r.pool.txnIDs(prefix, r.partition)
		ids = append(ids, r.fence...)
		for _, h := range r.txns {
			ids = append(ids, h.TransactionalID)
		}
		for _, id := range ids {
			if o, ok := owner[id]; ok && o != k {
				return fmt.Errorf("transactional ID %s belongs to two sinks, %s and %s: the checkpoint's sink transactions cannot be recovered safely",
					id, plan[o].name(), r.name())
			}
			owner[id] = k
		}
	}
	return nil
}

// name names the sink in messages: its topic, or its pool if the topic is
// not known.
func (r sinkRecovery) name() string {
	if r.pool.Topic != "" {
		return r.pool.Topic
	}
	return r.pool.Pool
}

// leaveForeignTransactions drops, from the sinks a restore point the job
// does not own recorded (Config.RestoreStore), every transaction whose
// transactional ID is not the job's own (kafka.topic_prefix): another
// job's, which this job must never commit, abort or fence, since that
// job may still run. That job committed them when its checkpoint
// completed (every replica commits a checkpoint's transactions when it
// reads its complete record, before it reads a stop), so the restored
// state's output is all there unless a replica of that job died in
// between; then that job's own restore, or `processor transactions
// commit` against it, commits them. Each one left is logged. A
// transaction under the job's own IDs (the same job name and prefix: a
// rollback, or a savepoint copied and restored under the same name) is
// recovered as after any restore.
func (t *Task) leaveForeignTransactions(rec []sinkPool) []sinkPool {
	out := make([]sinkPool, 0, len(rec))
	for _, p := range rec {
		own := p.Txns[:0:0]
		for _, h := range p.Txns {
			if strings.HasPrefix(h.TransactionalID, t.cfg.Prefix+p.Pool+"-") {
				own = append(own, h)
				continue
			}
			t.log.Info("restore point of another job: its recorded transaction is left to that job (committed when its checkpoint completed), neither committed nor fenced here",
				"sink", p.Topic, "transactional_id", h.TransactionalID, "checkpoint_id", t.cfg.RestoreFrom)
		}
		p.Txns = own
		out = append(out, p)
	}
	return out
}
