// Package input is the pure input core of a task that reads a shuffle topic
// (DESIGN.md section 9): it sits between the shuffle reader and the operator
// chain, and decides for each record read whether the chain gets it, aligns
// checkpoint barriers over every (partition, upstream task) pair with
// barrier.Aligner, and tells the reader where to seek, what to pause and
// resume, and when the task must snapshot (with its restart position in
// every partition).
//
// It owns: the generation filter (invariant 6: records of any other
// generation are dropped), the mapping of (partition, upstream task) to
// aligner inputs, the replay filter after a seek back, and the restart
// positions a snapshot records.
//
// It must not: read Kafka, read the clock (time comes with each call), start
// goroutines, or buffer records: a held input's records are skipped and
// re-read from Kafka after the alignment, so memory is O(partitions ×
// upstream tasks) whatever the lag. A Core is not safe for concurrent use;
// one goroutine (the task's record loop) owns it.
//
// # Rules
//
//   - Aligner input of (partition p, upstream u) is slot(p)·U + u, where
//     slot(p) is p's index in Config.Partitions.
//   - Every upstream task writes to every partition, so a partition is
//     never paused while one of its writers is still unheld: that would hide
//     the others' barriers and deadlock the alignment. A record (data or
//     barrier) of a held input is dropped and its partition's rewind
//     position lowered to it; a partition whose every writer is held is
//     paused. When the alignment releases the held inputs, each partition
//     with a rewind position is sought back to it (Seek), and resumed if it
//     was paused (Resume).
//   - After a seek back, records already handled are recognised per
//     (partition, upstream): next[p][u] is the offset after the last record
//     of u on p that was delivered or whose barrier was counted; a record
//     below it is a replay and is dropped.
//   - A watermark record is decided exactly as a data record of its
//     (partition, upstream task): generation filter, replay filter, held
//     input. It is delivered once per offset and re-read after a seek back
//     with the records around it, so the watermark a task has seen always
//     matches the data it has seen.
//   - Records the reader had fetched before a Seek took effect (offsets at
//     or above where the partition stood when the Seek was given) are
//     dropped until the first record below that offset arrives: the reader
//     need not purge its fetch buffer, though it may.
//   - A Snapshot's position for p is its rewind position if it has one,
//     else the offset after the last record read on p (or its start). Every
//     record of the task's generation below it is in the snapshot; records
//     at or above it may be too (another writer's records after a held
//     writer's rewind), which is harmless because after a restore the
//     generation changes: every record below the position is then of an
//     older generation and dropped anyway, and every record of the new one
//     is written after it. The positions are where a restore seeks and
//     what the coordinator may purge below; they never decrease from one
//     snapshot to the next.
//
// Step, the per-record path, does not allocate; a Snapshot action carries a
// new Positions map.
package input
