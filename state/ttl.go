package state

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// PurgeExpired removes expired entries of every registered state with TTL
// (values, accumulators, map entries, list elements), at most limit of them
// (limit <= 0: no limit), and returns how many it removed. Reads already
// remove the expired entries they meet; PurgeExpired is for keys that are
// never read again (Flink's full-scan / compaction-filter cleanup). Call it
// from the task goroutine, for example on a processing-time timer.
func (b *Backend) PurgeExpired(limit int) (int, error) {
	if b.db == nil {
		return 0, ErrClosed
	}
	// Purging deletes in Pebble behind the record cache: flush it, and drop
	// it afterwards so that no purged entry is still served from it.
	if err := b.flushCache(); err != nil {
		return 0, err
	}
	if b.rc != nil {
		defer b.rc.drop()
	}
	removed := 0
	now := b.cfg.Now().UnixMilli()
	for _, si := range b.states {
		if !si.ttl.enabled() {
			continue
		}
		n, err := b.purgeState(si, now, limit-removed, limit > 0)
		removed += n
		if err != nil {
			return removed, err
		}
		if limit > 0 && removed >= limit {
			break
		}
	}
	return removed, nil
}

// purgeState removes up to budget (if limited) expired entries of si, in
// each of the key prefixes that hold them.
func (b *Backend) purgeState(si *stateInfo, now int64, budget int, limited bool) (int, error) {
	it, err := b.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	batch := b.db.NewBatch()
	defer batch.Close()
	removed := 0
	for _, p := range b.prefixes(si) {
		if limited && removed >= budget {
			break
		}
		it.SetBounds(p, prefixEnd(p))
		n, err := purgeRange(it, batch, si, now, budget-removed, limited)
		removed += n
		if err != nil {
			_ = it.Close()
			return removed, err
		}
	}
	if err := it.Close(); err != nil {
		return removed, err
	}
	if batch.Empty() {
		return removed, nil
	}
	b.empty = false
	if err := batch.Commit(b.wo); err != nil {
		return removed, fmt.Errorf("state: purge %q: %w", si.name, err)
	}
	return removed, nil
}

// purgeRange adds to batch the removal of up to budget (if limited) expired
// entries of si within it's bounds.
func purgeRange(it *pebble.Iterator, batch *pebble.Batch, si *stateInfo, now int64, budget int, limited bool) (int, error) {
	removed := 0
	for valid := it.First(); valid && (!limited || removed < budget); valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return removed, err
		}
		if si.kind != kindList {
			if len(v) < 8 {
				return removed, fmt.Errorf("%w: state %q: value without TTL header", ErrCorruptValue, si.name)
			}
			if int64(binary.BigEndian.Uint64(v)) <= now {
				if err := batch.Delete(it.Key(), nil); err != nil {
					return removed, err
				}
				removed++
			}
			continue
		}
		var keep []byte
		dropped := 0
		for rest := v; len(rest) > 0; {
			n, w := binary.Uvarint(rest)
			if w <= 0 || uint64(len(rest)-w) < n || n < 8 {
				return removed, fmt.Errorf("%w: state %q: bad list frame", ErrCorruptValue, si.name)
			}
			frame := rest[:w+int(n)]
			if int64(binary.BigEndian.Uint64(rest[w:])) <= now {
				dropped++
			} else {
				keep = append(keep, frame...)
			}
			rest = rest[w+int(n):]
		}
		if dropped == 0 {
			continue
		}
		removed += dropped
		if len(keep) == 0 {
			err = batch.Delete(it.Key(), nil)
		} else {
			err = batch.Set(it.Key(), keep, nil)
		}
		if err != nil {
			return removed, err
		}
	}
	return removed, it.Error()
}
