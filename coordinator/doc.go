// Package coordinator owns Weir's checkpoint coordinator.
//
// Its core (Core) is a pure, deterministic state machine in the shape of etcd
// raft's RawNode: inputs arrive through Step and Tick, and Ready lists what the
// owner must do, in order. The core performs no I/O, reads no clock, draws no
// random numbers and starts no goroutines; time and randomness are inputs.
// The runtime loop that drives the core over Kafka control topics lives beside
// it, in the subpackage coordinator/runner, and keeps all I/O at the edges.
//
// # Driving the core
//
// One goroutine owns a Core. Its loop, in outline:
//
//	core, _ := coordinator.Restore(cfg, now, history) // or New on a fresh job
//	core.Step(coordinator.Assign{Assignment: current}) // a new coordinator starts a new generation
//	for {
//		select {
//		case now := <-ticker:      core.Tick(now)
//		case rec := <-acks:        core.Step(coordinator.Acknowledge{Ack: rec}) // or Decline
//		case a := <-rebalances:    core.Step(coordinator.Assign{...})
//		case r := <-running:       core.Step(coordinator.TaskRunning{...})
//		case req := <-savepoints:  err := core.Step(coordinator.RequestSavepoint{...})
//		case m := <-metadataDone:  core.Step(coordinator.MetadataWritten{...}) // or MetadataFailed
//		case n := <-gcProgress:    core.Step(coordinator.GCBacklog{Discards: n})
//		case md := <-retained:     core.Step(coordinator.MetadataRead{Metadata: md}) // after Restore
//		}
//		if core.HasReady() {
//			rd := core.Ready()
//			// carry out rd in the order documented on Ready
//			core.Advance(rd)
//		}
//	}
//
// # Rules the core implements (Flink's CheckpointCoordinator)
//
//   - Periodic triggers every Config.Interval, the first one a random delay in
//     [MinPause, Interval] after every task of the generation runs; never more
//     than MaxConcurrent periodic checkpoints pending, never sooner than
//     MinPause after the last completion, never while the task set is
//     incomplete, a generation is starting, or a stop-with-savepoint runs;
//     and, like Flink's CheckpointRequestDecider (FLINK-17073), never while
//     the owner reports more than MaxConcurrent discards not yet deleted
//     (GCBacklog): storage cannot outgrow what the object store deletes.
//   - Acks are classified SUCCESS, DUPLICATE, UNKNOWN, DISCARDED or STALE
//     (AckResult); UNKNOWN and DISCARDED acks have their state discarded, an
//     ack for a completed checkpoint never does.
//   - A decline, an expiry (Config.Timeout) or a failed _metadata write
//     aborts the checkpoint; more than TolerableFailures such failures of
//     periodic checkpoints in a row restart the job: a new generation with
//     the same assignment, restored from the newest completed checkpoint.
//   - A fully acknowledged checkpoint first has its _metadata written
//     (Ready.Metadata), and only after MetadataWritten is its Complete record
//     appended; older pending periodic checkpoints are then subsumed, and
//     the oldest completed checkpoints beyond Retained are released.
//   - After every completion, each shuffle partition is purged
//     (Ready.Purges) below the lowest position any retained periodic
//     checkpoint holds for it, only when that offset rose; savepoints do
//     not count, and a rebuilt core purges nothing until MetadataRead gave
//     it the positions of every retained checkpoint.
//   - Savepoints (RequestSavepoint) run beside periodic checkpoints, are
//     never subsumed, never released, and their failures do not count. A
//     completed stop-with-savepoint stops the core.
//   - A complete Assign aborts every pending checkpoint and starts a new
//     generation restored from the newest (highest ID) completed checkpoint;
//     acks and declines of other generations are dropped.
//
// # Event sourcing
//
// Every decision that must survive a failover becomes a control record
// (Trigger, Abort, Complete, Generation), applied to the core's state by the
// same function that Restore uses to replay it. A core rebuilt from the
// records, and the acks that followed them, has the same durable state; the
// tests check this after every step. Checkpoint IDs never repeat: Restore
// takes the highest ID from the commit topic and from the newest trigger
// record, whose Abort form carries the highest triggered ID in Last.
//
// docs/protocol.md describes the protocol as built, and where it departs from
// DESIGN.md.
package coordinator
