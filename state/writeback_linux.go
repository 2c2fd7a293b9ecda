package state

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing back f's dirty pages up to
// offset and waits for earlier writeback to finish (sync_file_range
// WAIT_BEFORE|WRITE), as Pebble's own SyncTo does. It is no durability
// barrier; it keeps dirty data from piling up, which would otherwise stall
// every writer of the process (the synchronous part of a snapshot included)
// when the kernel throttles dirty pages.
func startWriteback(f vfs.File, offset int64) {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return
	}
	_ = unix.SyncFileRange(int(fd), 0, offset, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE)
}
