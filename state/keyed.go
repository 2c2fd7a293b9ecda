package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/keygroup"
)

// Key layout in Pebble. With Config.MaxParallelism 0 (the legacy layout,
// which stage main keeps so that its checkpoints stay readable) every
// keyed-state entry lives under
//
//	0x01 | uvarint(len(state)) | state | uvarint(len(user key)) | user key | sub key
//
// and with MaxParallelism M > 0 under
//
//	0x02 | uint16 big-endian key group | uvarint(len(state)) | state | uvarint(len(user key)) | user key | sub key
//
// where the key group is keygroup.Of(user key, M) and the sub key is empty
// for value, list, aggregating and reducing state and the encoded map key
// for map state. Both length prefixes make the encoding prefix-free, so that
// all entries of one state (of one key group), and all entries of one user
// key within one state, are contiguous ranges that prefix iteration (and
// DeleteRange) can address. Leading with the key group makes the state of a
// range of key groups one contiguous range too (KeyGroupBounds): what moves
// when a stage's parallelism changes.
const (
	keyedStateTag = 0x01
	keyGroupedTag = 0x02
)

// stateKind tells the kinds of state apart, so that a name cannot be reused
// with a different layout.
type stateKind uint8

const (
	kindValue stateKind = iota + 1
	kindList
	kindMap
	kindAggregating
	kindReducing
)

func (k stateKind) String() string {
	switch k {
	case kindValue:
		return "value"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	case kindAggregating:
		return "aggregating"
	case kindReducing:
		return "reducing"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type stateInfo struct {
	name string
	kind stateKind
	ttl  TTLConfig
	// encName is uvarint(len(name)) | name: what follows the tag (and key
	// group) in every key of the state.
	encName []byte
}

// TTLConfig gives keyed state a time to live, as Flink's StateTtlConfig.
// Expiry is measured with Config.Now in milliseconds and stored with each
// value (each list element, each map entry), so it survives snapshots and
// restores. Expired entries are removed when read and by PurgeExpired.
type TTLConfig struct {
	// TTL is the time to live; zero disables TTL.
	TTL time.Duration
	// UpdateOnRead also restarts the TTL when the entry is read (Flink
	// OnReadAndWrite). By default only writes do (OnCreateAndWrite).
	UpdateOnRead bool
	// ReturnExpired returns expired entries that have not been removed yet
	// (Flink ReturnExpiredIfNotCleanedUp). By default they are never returned.
	ReturnExpired bool
}

func (c TTLConfig) enabled() bool { return c.TTL > 0 }

// StateOption configures a keyed state handle.
type StateOption func(*stateInfo)

// WithTTL gives the state a time to live.
func WithTTL(c TTLConfig) StateOption { return func(s *stateInfo) { s.ttl = c } }

// SetCurrentKey sets the key that keyed state handles read and write, until
// the next call. The runtime calls it before each record; key is copied.
// With MaxParallelism > 0 it computes the key's key group, once per key.
func (b *Backend) SetCurrentKey(key []byte) {
	b.curKey = append(b.curKey[:0], key...)
	b.hasKey = true
	if b.cfg.MaxParallelism > 0 {
		b.curGroup = keygroup.Of(key, b.cfg.MaxParallelism)
	}
}

// SetCurrentKeyInGroup sets the current key as SetCurrentKey does, but
// files it under key group group instead of the key's own: for state that
// a task keeps per key group rather than per key (its timers, one map per
// key group under the empty key, so that they move with the group's keys).
// It panics if group is not in [0, MaxParallelism); with MaxParallelism 0
// there are no key groups and it is SetCurrentKey.
func (b *Backend) SetCurrentKeyInGroup(key []byte, group int) {
	if b.cfg.MaxParallelism == 0 {
		b.SetCurrentKey(key)
		return
	}
	if group < 0 || group >= b.cfg.MaxParallelism {
		panic(fmt.Sprintf("state: key group %d outside [0, %d)", group, b.cfg.MaxParallelism))
	}
	b.curKey = append(b.curKey[:0], key...)
	b.hasKey = true
	b.curGroup = group
}

// CurrentKey returns the current key (valid until the next SetCurrentKey).
func (b *Backend) CurrentKey() []byte { return b.curKey }

// CurrentKeyGroup returns the key group the current key's state is filed
// under; 0 with MaxParallelism 0.
func (b *Backend) CurrentKeyGroup() int { return b.curGroup }

// MaxParallelism returns the number of key groups the keyed state is
// filed under (Config.MaxParallelism); 0 is the legacy layout, without key
// groups.
func (b *Backend) MaxParallelism() int { return b.cfg.MaxParallelism }

// KeyGroups returns the key groups [lo, hi) the task owns
// (Config.KeyGroups, [0, MaxParallelism) by default); 0, 0 with
// MaxParallelism 0.
func (b *Backend) KeyGroups() (lo, hi int) { return b.cfg.KeyGroups[0], b.cfg.KeyGroups[1] }

// KeyGroupBounds returns the Pebble key range [start, end) that holds all
// keyed state of key groups [lo, hi) (0 <= lo <= hi <= keygroup.Limit) in
// the key-grouped layout (MaxParallelism > 0), and nothing else: no state
// of another key group, no state of the legacy layout.
func KeyGroupBounds(lo, hi int) (start, end []byte) {
	if lo < 0 || lo > hi || hi > keygroup.Limit {
		panic(fmt.Sprintf("state: key group range [%d, %d) is not within [0, %d]", lo, hi, keygroup.Limit))
	}
	return keyGroupPrefix(nil, lo), keyGroupPrefix(nil, hi)
}

// keyGroupPrefix appends the tag and key group g to dst. g may be
// keygroup.Limit, as the end of a range.
func keyGroupPrefix(dst []byte, g int) []byte {
	return append(dst, keyGroupedTag, byte(g>>8), byte(g))
}

// ScanKeyGroups calls fn with every Pebble entry of keyed state in key
// groups [lo, hi), in key order, until fn returns an error, which it
// returns: the raw keys and values (key group, state, user key, sub key;
// framed value), valid only during the call, that moving key groups to
// another task copies. It flushes the record cache first. Call it from the
// task goroutine; it needs MaxParallelism > 0.
func (b *Backend) ScanKeyGroups(lo, hi int, fn func(key, value []byte) error) error {
	if b.db == nil {
		return ErrClosed
	}
	if b.cfg.MaxParallelism == 0 {
		return errors.New("state: ScanKeyGroups: the backend has no key groups (MaxParallelism 0)")
	}
	if lo < 0 || lo > hi || hi > b.cfg.MaxParallelism {
		return fmt.Errorf("state: ScanKeyGroups: key groups [%d, %d) outside [0, %d)", lo, hi, b.cfg.MaxParallelism)
	}
	if err := b.flushCache(); err != nil {
		return err
	}
	start, end := KeyGroupBounds(lo, hi)
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return fmt.Errorf("state: scan key groups: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key(), v)
		}
		if err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: scan key groups: %w", err)
	}
	return nil
}

func (b *Backend) register(name string, kind stateKind, opts []StateOption) (*stateInfo, error) {
	if name == "" {
		return nil, errors.New("state: empty state name")
	}
	si := &stateInfo{name: name, kind: kind}
	for _, o := range opts {
		o(si)
	}
	if si.ttl.TTL < 0 {
		return nil, fmt.Errorf("state: state %q: negative TTL %v", name, si.ttl.TTL)
	}
	if old, ok := b.states[name]; ok {
		if old.kind != kind {
			return nil, fmt.Errorf("%w: %q is %s state, not %s", ErrStateKind, name, old.kind, kind)
		}
		if old.ttl != si.ttl {
			return nil, fmt.Errorf("%w: %q registered again with another TTL", ErrStateKind, name)
		}
		return old, nil
	}
	si.encName = binary.AppendUvarint(nil, uint64(len(name)))
	si.encName = append(si.encName, name...)
	b.states[name] = si
	return si, nil
}

// prefixes returns the key prefixes that hold all of a state's entries: one
// in the legacy layout, one per key group otherwise.
func (b *Backend) prefixes(si *stateInfo) [][]byte {
	if b.cfg.MaxParallelism == 0 {
		return [][]byte{append([]byte{keyedStateTag}, si.encName...)}
	}
	out := make([][]byte, b.cfg.MaxParallelism)
	for g := range out {
		out[g] = append(keyGroupPrefix(nil, g), si.encName...)
	}
	return out
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // all 0xff: no upper bound
}

// handle is what every state handle shares: its registration, its backend
// and reused key and value buffers (handles belong to the task goroutine, so
// the buffers make reads and writes allocation-free).
type handle struct {
	b    *Backend
	info *stateInfo
	kbuf []byte
	vbuf []byte
}

func (b *Backend) newHandle(name string, kind stateKind, opts []StateOption) (handle, error) {
	if b.db == nil {
		return handle{}, ErrClosed
	}
	si, err := b.register(name, kind, opts)
	if err != nil {
		return handle{}, err
	}
	return handle{b: b, info: si}, nil
}

// key builds [tag][key group][state][current key] into kbuf.
func (h *handle) key() ([]byte, error) {
	if !h.b.hasKey {
		return nil, ErrNoCurrentKey
	}
	if h.b.db == nil {
		return nil, ErrClosed
	}
	if h.b.cfg.MaxParallelism == 0 {
		h.kbuf = append(h.kbuf[:0], keyedStateTag)
	} else {
		h.kbuf = keyGroupPrefix(h.kbuf[:0], h.b.curGroup)
	}
	h.kbuf = append(h.kbuf, h.info.encName...)
	h.kbuf = binary.AppendUvarint(h.kbuf, uint64(len(h.b.curKey)))
	h.kbuf = append(h.kbuf, h.b.curKey...)
	return h.kbuf, nil
}

func (h *handle) nowMillis() int64 { return h.b.cfg.Now().UnixMilli() }

// expiry returns the expiry timestamp for an entry written now.
func (h *handle) expiry() int64 {
	return h.nowMillis() + h.info.ttl.TTL.Milliseconds()
}

// appendTTL starts a value frame: the 8-byte expiry if TTL is on.
func (h *handle) appendTTL(dst []byte) []byte {
	if !h.info.ttl.enabled() {
		return dst
	}
	return binary.BigEndian.AppendUint64(dst, uint64(h.expiry()))
}

// splitTTL splits a stored value into expiry and payload.
func (h *handle) splitTTL(v []byte) (exp int64, payload []byte, err error) {
	if !h.info.ttl.enabled() {
		return 0, v, nil
	}
	if len(v) < 8 {
		return 0, nil, fmt.Errorf("%w: state %q: value of %d bytes has no TTL header", ErrCorruptValue, h.info.name, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), v[8:], nil
}

// visible reports whether an entry with expiry exp is returned now, and
// whether it has expired.
func (h *handle) visible(exp int64) (visible, expired bool) {
	if !h.info.ttl.enabled() {
		return true, false
	}
	expired = exp <= h.nowMillis()
	return !expired || h.info.ttl.ReturnExpired, expired
}

// cached reports whether the handle's entries go through the record cache:
// the kinds with one Pebble key per user key.
func (h *handle) cached() bool {
	if h.b.rc == nil {
		return false
	}
	switch h.info.kind {
	case kindValue, kindAggregating, kindReducing:
		return true
	}
	return false
}

// getRaw reads the value under key and calls fn with its payload, which is
// valid only during fn. It applies TTL: an expired value is deleted and not
// shown (unless ReturnExpired), a read refreshes the TTL if UpdateOnRead.
func (h *handle) getRaw(key []byte, fn func(payload []byte) error) (bool, error) {
	var v []byte
	var c io.Closer // nil when v is the cache's
	closer := func() {
		if c != nil {
			_ = c.Close()
		}
	}
	if h.cached() {
		e, err := h.cacheEntry(key)
		if err != nil {
			return false, err
		}
		if !e.present {
			return false, nil
		}
		v = e.val
	} else {
		pv, pc, err := h.b.db.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("state: get %q: %w", h.info.name, err)
		}
		v, c = pv, pc
	}
	exp, payload, err := h.splitTTL(v)
	if err != nil {
		closer()
		return false, err
	}
	vis, expired := h.visible(exp)
	if !vis {
		closer()
		return false, h.delete(key)
	}
	if h.info.ttl.enabled() && h.info.ttl.UpdateOnRead && !expired {
		h.vbuf = h.appendTTL(h.vbuf[:0])
		h.vbuf = append(h.vbuf, payload...)
		err = fn(payload)
		closer()
		if err != nil {
			return false, err
		}
		return true, h.set(key, h.vbuf)
	}
	err = fn(payload)
	closer()
	return err == nil, err
}

// cacheEntry returns key's record cache entry, reading Pebble on a miss.
func (h *handle) cacheEntry(key []byte) (*cacheEntry, error) {
	rc := h.b.rc
	if e := rc.lookup(key); e != nil {
		rc.hits++
		return e, nil
	}
	rc.misses++
	v, c, err := h.b.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return rc.add(h.b.db, key, nil, false, false)
	}
	if err != nil {
		return nil, fmt.Errorf("state: get %q: %w", h.info.name, err)
	}
	e, err := rc.add(h.b.db, key, v, true, false)
	_ = c.Close()
	return e, err
}

func (h *handle) set(key, value []byte) error {
	h.b.empty = false
	if h.cached() {
		rc := h.b.rc
		if e := rc.lookup(key); e != nil {
			return rc.set(h.b.db, e, value)
		}
		_, err := rc.add(h.b.db, key, value, true, true)
		return err
	}
	if err := h.b.db.Set(key, value, h.b.wo); err != nil {
		return fmt.Errorf("state: put %q: %w", h.info.name, err)
	}
	return nil
}

func (h *handle) delete(key []byte) error {
	h.b.empty = false
	if h.cached() {
		rc := h.b.rc
		if e := rc.lookup(key); e != nil {
			rc.del(e)
			return nil
		}
		_, err := rc.add(h.b.db, key, nil, false, true)
		return err
	}
	if err := h.b.db.Delete(key, h.b.wo); err != nil {
		return fmt.Errorf("state: delete %q: %w", h.info.name, err)
	}
	return nil
}

// ValueState holds one value per key (Flink ValueState).
type ValueState[V any] struct {
	handle
	codec Codec[V]
}

// NewValueState returns the value state called name.
func NewValueState[V any](b *Backend, name string, codec Codec[V], opts ...StateOption) (*ValueState[V], error) {
	h, err := b.newHandle(name, kindValue, opts)
	if err != nil {
		return nil, err
	}
	return &ValueState[V]{handle: h, codec: codec}, nil
}

// Get returns the current key's value, and whether there is one.
func (s *ValueState[V]) Get() (V, bool, error) {
	var v V
	k, err := s.key()
	if err != nil {
		return v, false, err
	}
	var derr error
	ok, err := s.getRaw(k, func(p []byte) error {
		v, derr = s.codec.Decode(p)
		return derr
	})
	return v, ok, err
}

// Put sets the current key's value.
func (s *ValueState[V]) Put(v V) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	s.vbuf = s.appendTTL(s.vbuf[:0])
	if s.vbuf, err = s.codec.Append(s.vbuf, v); err != nil {
		return err
	}
	return s.set(k, s.vbuf)
}

// Clear removes the current key's value.
func (s *ValueState[V]) Clear() error {
	k, err := s.key()
	if err != nil {
		return err
	}
	return s.delete(k)
}

// AggregateFunc aggregates inputs of type IN into an accumulator ACC and
// produces a result OUT (Flink AggregateFunction).
type AggregateFunc[IN, ACC, OUT any] interface {
	CreateAccumulator() ACC
	Add(acc ACC, in IN) ACC
	Result(acc ACC) OUT
}

// AggregatingState folds the values added for a key into an accumulator
// (Flink AggregatingState). The accumulator is stored with accCodec.
type AggregatingState[IN, ACC, OUT any] struct {
	handle
	codec Codec[ACC]
	agg   AggregateFunc[IN, ACC, OUT]
}

// NewAggregatingState returns the aggregating state called name.
func NewAggregatingState[IN, ACC, OUT any](b *Backend, name string, accCodec Codec[ACC], agg AggregateFunc[IN, ACC, OUT], opts ...StateOption) (*AggregatingState[IN, ACC, OUT], error) {
	h, err := b.newHandle(name, kindAggregating, opts)
	if err != nil {
		return nil, err
	}
	return &AggregatingState[IN, ACC, OUT]{handle: h, codec: accCodec, agg: agg}, nil
}

func (s *AggregatingState[IN, ACC, OUT]) acc(k []byte) (ACC, bool, error) {
	var acc ACC
	var derr error
	ok, err := s.getRaw(k, func(p []byte) error {
		acc, derr = s.codec.Decode(p)
		return derr
	})
	return acc, ok, err
}

// Add folds in into the current key's accumulator.
func (s *AggregatingState[IN, ACC, OUT]) Add(in IN) error {
	k, err := s.key()
	if err != nil {
		return err
	}
	acc, ok, err := s.acc(k)
	if err != nil {
		return err
	}
	if !ok {
		acc = s.agg.CreateAccumulator()
	}
	acc = s.agg.Add(acc, in)
	s.vbuf = s.appendTTL(s.vbuf[:0])
	if s.vbuf, err = s.codec.Append(s.vbuf, acc); err != nil {
		return err
	}
	return s.set(k, s.vbuf)
}

// Get returns the result for the current key, and whether anything was added.
func (s *AggregatingState[IN, ACC, OUT]) Get() (OUT, bool, error) {
	var out OUT
	k, err := s.key()
	if err != nil {
		return out, false, err
	}
	acc, ok, err := s.acc(k)
	if err != nil || !ok {
		return out, false, err
	}
	return s.agg.Result(acc), true, nil
}

// Clear removes the current key's accumulator.
func (s *AggregatingState[IN, ACC, OUT]) Clear() error {
	k, err := s.key()
	if err != nil {
		return err
	}
	return s.delete(k)
}

// ReducingState combines the values added for a key with a reduce function
// (Flink ReducingState). It stores one value per key, as ValueState does,
// under a state kind of its own.
type ReducingState[V any] struct {
	value  ValueState[V]
	reduce func(a, b V) V
}

// NewReducingState returns the reducing state called name.
func NewReducingState[V any](b *Backend, name string, codec Codec[V], reduce func(a, b V) V, opts ...StateOption) (*ReducingState[V], error) {
	h, err := b.newHandle(name, kindReducing, opts)
	if err != nil {
		return nil, err
	}
	return &ReducingState[V]{value: ValueState[V]{handle: h, codec: codec}, reduce: reduce}, nil
}

// Get returns the current key's reduced value, and whether there is one.
func (s *ReducingState[V]) Get() (V, bool, error) { return s.value.Get() }

// Add reduces v into the current key's value.
func (s *ReducingState[V]) Add(v V) error {
	old, ok, err := s.value.Get()
	if err != nil {
		return err
	}
	if ok {
		v = s.reduce(old, v)
	}
	return s.value.Put(v)
}

// Clear removes the current key's value.
func (s *ReducingState[V]) Clear() error { return s.value.Clear() }
