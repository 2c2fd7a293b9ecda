package state

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ListState holds a list of values per key (Flink ListState). Add is a
// Pebble merge (append without reading); with TTL each element has its own
// expiry.
//
// Stored value: a concatenation of frames uvarint(n) | [8-byte expiry] |
// payload, where n counts the expiry and payload bytes.
type ListState[V any] struct {
	handle
	codec Codec[V]
	fbuf  []byte
}

// NewListState returns the list state called name.
func NewListState[V any](b *Backend, name string, codec Codec[V], opts ...StateOption) (*ListState[V], error) {
	h, err := b.newHandle(name, kindList, opts)
	if err != nil {
		return nil, err
	}
	return &ListState[V]{handle: h, codec: codec}, nil
}

// appendFrame appends the frame of v to dst.
func (s *ListState[V]) appendFrame(dst []byte, v V) ([]byte, error) {
	var err error
	s.fbuf = s.appendTTL(s.fbuf[:0])
	if s.fbuf, err = s.codec.Append(s.fbuf, v); err != nil {
		return dst, err
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.fbuf)))
	return append(dst, s.fbuf...), nil
}

// Add appends v to the current key's list.
func (s *ListState[V]) Add(v V) error {
	return s.AddAll(v)
}

// AddAll appends vs to the current key's list.
func (s *ListState[V]) AddAll(vs ...V) error {
	k, err := s.key()
	if err != nil || len(vs) == 0 {
		return err
	}
	s.vbuf = s.vbuf[:0]
	for _, v := range vs {
		if s.vbuf, err = s.appendFrame(s.vbuf, v); err != nil {
			return err
		}
	}
	s.b.empty = false
	if err := s.b.db.Merge(k, s.vbuf, s.b.wo); err != nil {
		return fmt.Errorf("state: list add %q: %w", s.info.name, err)
	}
	return nil
}

// Update replaces the current key's list with vs (an empty vs clears it).
func (s *ListState[V]) Update(vs []V) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return s.delete(k)
	}
	s.vbuf = s.vbuf[:0]
	for _, v := range vs {
		if s.vbuf, err = s.appendFrame(s.vbuf, v); err != nil {
			return err
		}
	}
	return s.set(k, s.vbuf)
}

// Get returns the current key's list (nil if empty), without expired
// elements unless ReturnExpired. Reading removes expired elements and, with
// UpdateOnRead, restarts the TTL of the others.
func (s *ListState[V]) Get() ([]V, error) {
	k, err := s.key()
	if err != nil {
		return nil, err
	}
	raw, closer, err := s.b.db.Get(k)
	if err == pebble.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: get %q: %w", s.info.name, err)
	}
	defer closer.Close()
	var out []V
	rewrite := false
	keep := s.vbuf[:0]
	for len(raw) > 0 {
		n, w := binary.Uvarint(raw)
		if w <= 0 || uint64(len(raw)-w) < n {
			return nil, fmt.Errorf("%w: state %q: bad list frame", ErrCorruptValue, s.info.name)
		}
		frame := raw[w : w+int(n)]
		raw = raw[w+int(n):]
		exp, payload, err := s.splitTTL(frame)
		if err != nil {
			return nil, err
		}
		vis, expired := s.visible(exp)
		if expired && !s.info.ttl.ReturnExpired {
			rewrite = true
			continue
		}
		if vis {
			v, err := s.codec.Decode(payload)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if s.info.ttl.enabled() && s.info.ttl.UpdateOnRead && !expired {
			rewrite = true
			s.fbuf = s.appendTTL(s.fbuf[:0])
			s.fbuf = append(s.fbuf, payload...)
			keep = binary.AppendUvarint(keep, uint64(len(s.fbuf)))
			keep = append(keep, s.fbuf...)
		} else {
			keep = binary.AppendUvarint(keep, n)
			keep = append(keep, frame...)
		}
	}
	s.vbuf = keep
	if rewrite {
		if len(keep) == 0 {
			return out, s.delete(k)
		}
		return out, s.set(k, keep)
	}
	return out, nil
}

// Clear removes the current key's list.
func (s *ListState[V]) Clear() error {
	k, err := s.key()
	if err != nil {
		return err
	}
	return s.delete(k)
}

// MapState holds a map per key (Flink MapState). Each entry is its own
// Pebble key, [state][user key][encoded map key], so that Get and Put touch
// one entry and Range iterates the entries in encoded-key order.
type MapState[K, V any] struct {
	handle
	kc Codec[K]
	vc Codec[V]
}

// NewMapState returns the map state called name.
func NewMapState[K, V any](b *Backend, name string, keyCodec Codec[K], valueCodec Codec[V], opts ...StateOption) (*MapState[K, V], error) {
	h, err := b.newHandle(name, kindMap, opts)
	if err != nil {
		return nil, err
	}
	return &MapState[K, V]{handle: h, kc: keyCodec, vc: valueCodec}, nil
}

func (s *MapState[K, V]) entryKey(mk K) ([]byte, error) {
	k, err := s.key()
	if err != nil {
		return nil, err
	}
	s.kbuf, err = s.kc.Append(k, mk)
	return s.kbuf, err
}

// Get returns the value of map key mk under the current key.
func (s *MapState[K, V]) Get(mk K) (V, bool, error) {
	var v V
	k, err := s.entryKey(mk)
	if err != nil {
		return v, false, err
	}
	var derr error
	ok, err := s.getRaw(k, func(p []byte) error {
		v, derr = s.vc.Decode(p)
		return derr
	})
	return v, ok, err
}

// Contains reports whether map key mk is present under the current key.
func (s *MapState[K, V]) Contains(mk K) (bool, error) {
	k, err := s.entryKey(mk)
	if err != nil {
		return false, err
	}
	return s.getRaw(k, func([]byte) error { return nil })
}

// Put sets map key mk to v under the current key.
func (s *MapState[K, V]) Put(mk K, v V) error {
	k, err := s.entryKey(mk)
	if err != nil {
		return err
	}
	s.vbuf = s.appendTTL(s.vbuf[:0])
	if s.vbuf, err = s.vc.Append(s.vbuf, v); err != nil {
		return err
	}
	return s.set(k, s.vbuf)
}

// Remove deletes map key mk under the current key.
func (s *MapState[K, V]) Remove(mk K) error {
	k, err := s.entryKey(mk)
	if err != nil {
		return err
	}
	return s.delete(k)
}

// Range calls fn for each entry of the current key's map in encoded-key
// order until fn returns false. The map must not be modified during Range.
// Expired entries are skipped (unless ReturnExpired) and removed afterwards.
func (s *MapState[K, V]) Range(fn func(k K, v V) bool) error {
	base, err := s.key()
	if err != nil {
		return err
	}
	lower := append([]byte(nil), base...)
	return s.rangeFrom(lower, lower, fn)
}

// RangeFrom is Range from the entry of map key from (or the first after
// it) on. Where entries at the start of the map were deleted (a queue's
// head), it does not step over their tombstones as Range does.
func (s *MapState[K, V]) RangeFrom(from K, fn func(k K, v V) bool) error {
	base, err := s.key()
	if err != nil {
		return err
	}
	prefix := append([]byte(nil), base...)
	start, err := s.kc.Append(append([]byte(nil), base...), from)
	if err != nil {
		return err
	}
	return s.rangeFrom(prefix, start, fn)
}

// rangeFrom iterates the entries under the map's key prefix lower, from
// the encoded entry key start (at or after lower) on.
func (s *MapState[K, V]) rangeFrom(lower, start []byte, fn func(k K, v V) bool) error {
	it, err := s.b.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("state: iterate %q: %w", s.info.name, err)
	}
	var expiredKeys, refresh [][]byte
	var rerr error
	for valid := it.First(); valid; valid = it.Next() {
		raw, err := it.ValueAndErr()
		if err != nil {
			rerr = err
			break
		}
		exp, payload, err := s.splitTTL(raw)
		if err != nil {
			rerr = err
			break
		}
		vis, expired := s.visible(exp)
		if expired && !s.info.ttl.ReturnExpired {
			expiredKeys = append(expiredKeys, append([]byte(nil), it.Key()...))
		}
		if !vis {
			continue
		}
		if s.info.ttl.enabled() && s.info.ttl.UpdateOnRead && !expired {
			nv := append(s.appendTTL(nil), payload...)
			refresh = append(refresh, append([]byte(nil), it.Key()...), nv)
		}
		mk, err := s.kc.Decode(it.Key()[len(lower):])
		if err != nil {
			rerr = err
			break
		}
		v, err := s.vc.Decode(payload)
		if err != nil {
			rerr = err
			break
		}
		if !fn(mk, v) {
			break
		}
	}
	if err := it.Close(); err != nil && rerr == nil {
		rerr = fmt.Errorf("state: iterate %q: %w", s.info.name, err)
	}
	if rerr != nil {
		return rerr
	}
	for _, k := range expiredKeys {
		if err := s.delete(k); err != nil {
			return err
		}
	}
	for i := 0; i+1 < len(refresh); i += 2 {
		if err := s.set(refresh[i], refresh[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// IsEmpty reports whether the current key's map has no (visible) entry.
func (s *MapState[K, V]) IsEmpty() (bool, error) {
	empty := true
	err := s.Range(func(K, V) bool { empty = false; return false })
	return empty, err
}

// Clear removes the current key's whole map.
func (s *MapState[K, V]) Clear() error {
	base, err := s.key()
	if err != nil {
		return err
	}
	s.b.empty = false
	if err := s.b.db.DeleteRange(base, prefixEnd(base), s.b.wo); err != nil {
		return fmt.Errorf("state: clear %q: %w", s.info.name, err)
	}
	return nil
}
