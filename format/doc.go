// Package format owns the record formats that need a schema registry:
// Avro in the Confluent wire format (a zero magic byte, a 4-byte big-endian
// schema ID, then the Avro binary payload).
//
// A source's Avro values are converted at the edge, before the record
// enters the task, into the JSON document every step reads (AvroDecoder),
// so that expressions, timestamps and shuffles see an Avro record exactly as
// they see a JSON value. A sink's JSON-model values are converted back
// (AvroEncoder) under a schema the sink registers, or finds, in the registry
// when the job starts. How each Avro type maps to JSON is in docs/formats.md.
//
// The registry client is franz-go's pkg/sr; the Avro codec is
// github.com/hamba/avro/v2. Schemas are fetched once per ID and cached for
// the life of the process (an ID's schema never changes in a registry). A
// registry that cannot be reached is retried with backoff and reported by
// Registry.Unavailable (the /readyz answer) and the metrics; a schema ID the
// registry does not know is the record's error, which follows the source's
// on_error policy.
package format
