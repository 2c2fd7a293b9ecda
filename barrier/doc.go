// Package barrier owns checkpoint barriers, cancel markers and the pure barrier
// aligner used by tasks with several inputs.
//
// Everything here is deterministic and free of I/O: the aligner takes input
// events (records, barriers, cancel markers, end of input) and says what to
// do (deliver, hold, release, snapshot, forward, abort). It imports the
// standard library only, reads no clock and starts no goroutines.
package barrier
