// Package sink is Weir's two-phase-commit Kafka sink: a Sink writes each
// checkpoint's records in a Kafka transaction from a pool of transactional
// IDs, pre-commits (flushes) at the barrier, and commits when the checkpoint
// completes; Recover commits, with a raw EndTxn, the transactions a restored
// checkpoint recorded (TxnHandle). It also has the at-least-once mode, the
// check of the transaction timeout against the brokers', and Admin, the
// operator's tools for the job's lingering transactions.
package sink
