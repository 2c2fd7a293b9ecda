// Package eventtime owns watermark generation and the min-over-inputs rule
// (DESIGN.md section 10, issue 13): a Generator per source input partition
// turns the event times it observes into a watermark with bounded
// out-of-orderness and says when its input is idle; a Valve combines the
// watermarks of a task's inputs into the task's watermark, the minimum over
// its active inputs, which never decreases.
//
// Event times and watermarks are int64 Unix milliseconds (Kafka's timestamp
// resolution). A watermark W means "no more records with event time <= W are
// expected"; MinWatermark means nothing is known yet.
//
// It performs no I/O and reads no clock: processing time comes with each
// call that needs it. Neither type is safe for concurrent use; one goroutine
// (the task's record loop) owns them. Observe, Advance and SetIdle do not
// allocate. Both snapshot to small plain structs that encode as JSON, which
// the runtime stores with a task's operator state.
package eventtime
