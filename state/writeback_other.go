//go:build !linux

package state

import "github.com/cockroachdb/pebble/v2/vfs"

// startWriteback is a no-op where sync_file_range does not exist.
func startWriteback(vfs.File, int64) {}
