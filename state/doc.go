// Package state owns operator state: keyed state on Pebble (one database per
// task), incremental snapshots to object storage through gocloud.dev/blob,
// restore, the object-store layout and garbage collection of files that no
// retained checkpoint or savepoint refers to.
package state
