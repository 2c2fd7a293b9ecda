// Package shuffle owns the Kafka side of shuffle topics, the job-owned topics
// through which one stage hands records to the next (DESIGN.md sections 3, 5
// and 9): the record format (the weir- headers and their one reader,
// Parser), the writer an upstream task produces with (idempotent, one
// partition per key group, a barrier record to every partition at each
// checkpoint, a watermark record to every partition when the task's
// watermark advances), the reader a downstream task fetches its key groups'
// partitions with (pause, resume, seek back), and the topics' administration
// (creation and check, purge below the retained checkpoints).
//
// It must not decide anything a task decides: which generation's records
// count, how barriers align (barrier.Aligner), where a snapshot's positions
// come from. It only moves records and says what their headers mean.
//
// # Record format
//
// A data record keeps its key, value and headers, and ends with two headers
// the writer appends: weir-task ("<stage>/<index>" of the writing task) and
// weir-gen (its generation, decimal). A barrier record has a nil key, an
// empty value and exactly the headers weir-task, weir-gen and weir-barrier
// (the checkpoint ID, decimal), in that order. A watermark record likewise
// has a nil key, an empty value and exactly the headers weir-task, weir-gen
// and weir-watermark (the writing task's watermark in Unix milliseconds,
// signed decimal, or "idle" when all its inputs are idle). The last header
// thus tells the three apart, whatever headers a data record carried from
// its input.
//
// # Goroutines
//
// A Writer is safe for concurrent use; its acknowledgements arrive on
// franz-go's promise goroutine, which only touches atomics and closes a
// Pending's channel. A Reader is owned by one goroutine: Poll, Pause,
// Resume and Seek must not be called concurrently; Close may be called from
// any goroutine.
package shuffle
