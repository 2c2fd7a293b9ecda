package state

import (
	"fmt"
	"slices"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// The plan of a snapshot's asynchronous part: for every file of the local
// copy, what the task manifest lists and what must happen before it can
// (nothing, read it into the manifest, upload it, or claim a shared object).
// planSnapshot is pure: it reads no file, no clock and no shared state, and
// does no I/O; Snapshot.run gathers its input and carries it out (the
// upload step, then the manifest step).

// localFile is one file of a snapshot's local copy, as planSnapshot sees it.
type localFile struct {
	Name string
	// Size is the file's size when the asynchronous part listed it.
	Size int64
	// Captured marks a WAL captured by link at the barrier (see liveFS);
	// WALLen is then its length at the barrier, the bytes the snapshot holds.
	Captured bool
	WALLen   int64
}

// planInput is everything the plan depends on.
type planInput struct {
	Task     string
	Instance string // the backend's instance: names the shared objects it uploads
	// Checkpoint is the snapshot's ID, Savepoint its name (empty: a checkpoint).
	Checkpoint ckpt.ID
	Savepoint  string
	// Files is the local copy, sorted by name (empty: a database that holds
	// nothing, whose manifest lists no files).
	Files []localFile
	// Base maps the local names of the last confirmed checkpoint's shared
	// files and WAL files to their entries (Backend.mu.confirmed): their
	// objects are reused without uploading. planSnapshot does not modify it.
	Base map[string]FileEntry
}

// fileStep is what the asynchronous part does with one planned file.
type fileStep uint8

const (
	// stepReuse: the entry is complete; its objects are the base's.
	stepReuse fileStep = iota
	// stepInline: read the file into the entry (Data and SHA256); no object.
	stepInline
	// stepUpload: upload the whole file to the entry's object key, an object
	// only this snapshot writes (chk-<n>/<task>/<file>, or a savepoint's
	// copy), and set the entry's SHA256.
	stepUpload
	// stepShared: claim the shared object that the file lacks, which pending
	// snapshots may share (Backend.acquire): the whole file at the entry's
	// Key (an SST), or the last of its Parts (the WAL bytes appended since
	// the base). The claim says whether to reuse another pending snapshot's
	// upload, wait for it, or upload it.
	stepShared
)

func (s fileStep) String() string {
	switch s {
	case stepReuse:
		return "reuse"
	case stepInline:
		return "inline"
	case stepUpload:
		return "upload"
	case stepShared:
		return "shared"
	}
	return fmt.Sprintf("fileStep(%d)", uint8(s))
}

// plannedFile is one file of the plan.
type plannedFile struct {
	// Entry is the manifest's entry for the file: name, size, and key or
	// parts. The upload step completes a copy of it with the data of an
	// inline file, or the checksum of the object it writes or claims.
	Entry FileEntry
	Step  fileStep
	// Object, for stepUpload and stepShared, is the key (relative to the job
	// root) of the object that holds bytes [Offset, Offset+Length) of the
	// file: the whole file, or the last of its Parts.
	Object         string
	Offset, Length int64
	// BaseReused reports whether Entry reuses objects of the base (a shared
	// file, or the first parts of a WAL).
	BaseReused bool
}

// snapshotPlan is the plan of a snapshot's asynchronous part.
type snapshotPlan struct {
	// Files, in the order of planInput.Files: the manifest's Files once the
	// upload step has completed them.
	Files []plannedFile
	// Reused counts the files whose entries reuse objects of the base.
	Reused int
}

// planSnapshot decides, for every file of the local copy, in this order:
//
//   - a file that is neither shared (an SST or blob file) nor a WAL, of at
//     most InlineMaxBytes: inline, in the manifest (checkpoints and
//     savepoints alike);
//   - in a savepoint, every other file: uploaded whole under the
//     savepoint's directory;
//   - a shared file: the base's entry if the base has it under the same
//     key (the same instance uploaded it), else the shared object
//     shared/<task>/<instance>-<file> is claimed;
//   - a captured WAL: the base's parts if the base's copy of the same file
//     is a prefix of it (a WAL only grows by appends), then one new shared
//     piece shared/<task>/<instance>-<file>.<from>-<to> for the bytes the
//     base lacks, claimed; nothing new if it did not grow;
//   - any other file: uploaded whole to chk-<n>/<task>/<file>.
//
// It fails if a WAL was not captured at the barrier or shrank since, or if
// a shared file's size differs from the base's.
func planSnapshot(in planInput) (*snapshotPlan, error) {
	p := &snapshotPlan{Files: make([]plannedFile, 0, len(in.Files))}
	for _, lf := range in.Files {
		f, err := planFile(in, lf)
		if err != nil {
			return nil, err
		}
		if f.BaseReused {
			p.Reused++
		}
		p.Files = append(p.Files, f)
	}
	return p, nil
}

func planFile(in planInput, lf localFile) (plannedFile, error) {
	n, size := lf.Name, lf.Size
	if isWAL(n) && !lf.Captured {
		// Every WAL in the directory must have been captured by link:
		// anything else could be an empty copy (see liveFS).
		return plannedFile{}, fmt.Errorf("WAL %s was not captured at the barrier", n)
	}
	if lf.Captured {
		if size < lf.WALLen {
			return plannedFile{}, fmt.Errorf("WAL %s shrank from %d to %d bytes", n, lf.WALLen, size)
		}
		size = lf.WALLen
	}
	e := FileEntry{Name: n, Size: size}
	switch {
	case !isShared(n) && !lf.Captured && size <= InlineMaxBytes:
		e.Inline = true
		return plannedFile{Entry: e, Step: stepInline}, nil
	case in.Savepoint != "":
		e.Key = in.Task + "/" + n
		return plannedFile{Entry: e, Step: stepUpload, Object: objstore.SavepointPrefix(in.Savepoint) + e.Key, Length: size}, nil
	case isShared(n):
		e.Shared = true
		e.Key = objstore.SharedKey(in.Task, in.Instance+"-"+n)
		if prev, ok := in.Base[n]; ok && prev.Key == e.Key {
			if prev.Size != size {
				return plannedFile{}, fmt.Errorf("shared file %s: local size %d, uploaded size %d", n, size, prev.Size)
			}
			return plannedFile{Entry: prev, Step: stepReuse, BaseReused: true}, nil
		}
		return plannedFile{Entry: e, Step: stepShared, Object: e.Key, Length: size}, nil
	case lf.Captured:
		// Reuse the parts of the base's copy of this WAL (the same file,
		// append-only, so a prefix), and add a piece for the rest.
		f := plannedFile{Step: stepReuse}
		start := int64(0)
		if prev, ok := in.Base[n]; ok && len(prev.Parts) > 0 && prev.Size <= size {
			e.Parts = slices.Clone(prev.Parts)
			start = prev.Size
			f.BaseReused = true
		}
		if start < size || len(e.Parts) == 0 {
			key := objstore.SharedKey(in.Task, fmt.Sprintf("%s-%s.%d-%d", in.Instance, n, start, size))
			e.Parts = append(e.Parts, Part{Key: key, Size: size - start})
			f.Step, f.Object, f.Offset, f.Length = stepShared, key, start, size-start
		}
		f.Entry = e
		return f, nil
	default:
		e.Key = objstore.ExclusiveKey(in.Checkpoint, in.Task, n)
		return plannedFile{Entry: e, Step: stepUpload, Object: e.Key, Length: size}, nil
	}
}
