// Package barrier owns checkpoint barriers, cancel markers and the pure barrier
// aligner used by tasks with several inputs.
//
// Everything here is deterministic and free of I/O: the aligner takes input
// events (records, barriers, cancel markers, end of input) and says what to
// do (deliver, hold, release, snapshot, forward, abort). It imports the
// standard library only, reads no clock and starts no goroutines.
//
// # Rules (Flink's SingleCheckpointBarrierHandler and CheckpointBarrierTracker)
//
//   - Exactly-once: the first barrier n starts the alignment of n; every
//     input that delivered barrier n is held (Record returns false) until
//     barrier n arrived on every input that has not ended. Then the task
//     snapshots, forwards barrier n, and every held input is released, in
//     that order. The alignment duration, from the first barrier of n to the
//     last, comes with the Snapshot action.
//   - At-least-once: nothing is ever held. Several checkpoints may be in
//     flight (at most 50); each snapshots when its last barrier arrives,
//     which gives up the older ones still in flight.
//   - A barrier n+1 arriving while n aligns (exactly-once) aborts n and
//     releases its held inputs before n+1 starts aligning.
//   - A cancel marker for n aborts n, and anything older in flight; held
//     inputs are released. An Abort action tells the task to forward a
//     cancel marker downstream.
//   - An abort of n from the coordinator (Abort, no input: a shuffle
//     reader learns of aborts from the trigger topic) does the same.
//   - Barriers and cancel markers of a checkpoint that completed or was
//     aborted here, or older than the alignment in progress, are ignored.
//   - An input that ended counts as aligned from then on; its end may
//     complete an alignment.
//   - A barrier twice on one input, or any event on an ended input, is an
//     error: the stream is broken.
//
// Record, the per-record path, is a single slice lookup and never allocates;
// Barrier, Cancel, Abort and End reuse one action buffer. Whether a barrier
// completes an alignment is one comparison (a count of the inputs that
// delivered it or ended), so that a task with ~1 000 inputs (shuffle
// partitions × upstream tasks) pays O(1) per barrier, not O(inputs).
package barrier
