// Package barrier owns the pure barrier aligner of a task with several
// inputs: a downstream task of a shuffle, whose inputs are the upstream
// tasks writing to each partition it reads (DESIGN.md section 9).
//
// Everything here is deterministic and free of I/O: the aligner takes input
// events (barriers, aborts from the coordinator) and says what to do
// (snapshot, abort, hold, release). It imports the standard library only,
// reads no clock and starts no goroutines. runtime/input turns its actions
// into the reader's seeks, pauses and resumes.
//
// # Rules (Flink's SingleCheckpointBarrierHandler, aligned checkpoints)
//
//   - The first barrier n starts the alignment of n; every input that
//     delivered barrier n is held (IsHeld reports true) until barrier n
//     arrived on every input. Then the task snapshots (and forwards barrier
//     n downstream), and every held input is released, in that order. The
//     alignment duration, from the first barrier of n to the last, comes
//     with the Snapshot action.
//   - A barrier n+1 arriving while n aligns aborts n and releases its held
//     inputs before n+1 starts aligning.
//   - An abort of n from the coordinator (Abort, on no input: a shuffle
//     reader learns of aborts from the trigger topic) gives up the
//     alignment of n, and of anything older, and releases the held inputs.
//   - Barriers of a checkpoint that completed or was aborted here, or older
//     than the alignment in progress, are ignored; so is an abort of one.
//   - A barrier twice on one input is an error: the stream is broken.
//
// IsHeld, the per-record path, is a single slice lookup and never
// allocates; Barrier and Abort reuse one action buffer. Whether a barrier
// completes an alignment is one comparison (a count of the inputs that
// delivered it), so that a task with ~1 000 inputs (shuffle partitions ×
// upstream tasks) pays O(1) per barrier, not O(inputs).
package barrier
