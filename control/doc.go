// Package control owns the messages of Weir's Kafka control topics (trigger,
// ack, commit) and their versioned JSON encoding, shared by the coordinator
// and the tasks. It imports the standard library only.
//
// Every encoded value is one JSON object whose first fields are "v" (the
// schema version, Version) and "type" (see Type), followed by the message's
// fields, so that kcat shows a readable history:
//
//	{"v":1,"type":"trigger","id":7,"ts":1767225610000,"kind":"checkpoint","gen":2}
//	{"v":1,"type":"ack","id":7,"gen":2,"task":"enrich/3","handle":"chk-7/enrich-3.manifest","metrics":{...}}
//
// Decode is strict: an unknown version (ErrUnknownVersion), an unknown type
// (ErrUnknownType), malformed JSON, a field the type does not have or
// trailing data (ErrMalformed), and a message that breaks a protocol rule,
// such as an ID of 0 (ErrInvalid), are errors, testable with errors.Is.
// FuzzDecode checks that decoding never panics and that encoding round-trips.
// Because of that strictness, a field added later (Ack.Shuffle,
// TaskState.Shuffle) is left out when empty: what a job without shuffles
// writes, older builds still read (docs/protocol.md says what they do with
// the rest).
//
// Task IDs are TaskID values, written "<stage>/<index>" in JSON and logs.
// Timestamps are Unix milliseconds. The checkpoint's _metadata object is a
// Metadata value in the same encoding.
package control
