package state

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ScanKeys calls fn with the user key and the stored value (its payload,
// after any TTL header) of every entry of the value state in key group
// group (with MaxParallelism 0, of the whole state), in key order, until
// fn returns an error, which it returns. Both are valid only during the
// call, and fn must not write: to rewrite entries, collect their keys,
// then set each as the current key. It flushes the record cache first, so
// that it sees every write, and applies no TTL (an expired value is
// listed). It is for a one-time rewrite of a state's values when an
// operator opens (their encoding changed); call it from the task
// goroutine.
func (s *ValueState[V]) ScanKeys(group int, fn func(key, value []byte) error) error {
	b := s.b
	if b.db == nil {
		return ErrClosed
	}
	var prefix []byte
	if b.cfg.MaxParallelism == 0 {
		prefix = append([]byte{keyedStateTag}, s.info.encName...)
	} else {
		if group < 0 || group >= b.cfg.MaxParallelism {
			return fmt.Errorf("state: ScanKeys %q: key group %d outside [0, %d)", s.info.name, group, b.cfg.MaxParallelism)
		}
		prefix = append(keyGroupPrefix(nil, group), s.info.encName...)
	}
	if err := b.flushCache(); err != nil {
		return err
	}
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("state: scan %q: %w", s.info.name, err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		rest := it.Key()[len(prefix):]
		n, w := binary.Uvarint(rest)
		if w <= 0 || n != uint64(len(rest)-w) {
			_ = it.Close()
			return fmt.Errorf("%w: state %q: a key of %d bytes that is not one user key", ErrCorruptValue, s.info.name, len(rest))
		}
		v, err := it.ValueAndErr()
		var payload []byte
		if err == nil {
			_, payload, err = s.splitTTL(v)
		}
		if err == nil {
			err = fn(rest[w:], payload)
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: scan %q: %w", s.info.name, err)
	}
	return nil
}
