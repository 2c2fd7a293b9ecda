package state

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// DefaultRecordCacheBytes is the record cache size of a task when
// Config.RecordCacheBytes is zero.
const DefaultRecordCacheBytes = 8 << 20

// cacheEntryOverhead approximates what one cached entry costs beyond its key
// and value bytes: the entry struct, the map slot and the string header.
const cacheEntryOverhead = 96

// recordCache is a task's write-back cache in front of Pebble for the state
// kinds whose entries are one key each: value, aggregating and reducing
// state (list and map state bypass it). It is what Kafka Streams calls the
// record cache: a read of a cached key does not seek Pebble's memtable, and
// the writes of a key between two flushes collapse into one, written with
// the others in one Pebble batch. It holds the stored frames (TTL header
// included), so TTL is applied on top of it exactly as on top of Pebble.
//
// The cache is flushed before anything reads Pebble other than by point
// lookups of these kinds: the synchronous part of a snapshot (so a
// checkpoint holds every write before its barrier), PurgeExpired and
// Backend.Flush. When it outgrows its budget it flushes and evicts entries
// in map order (random) down to three quarters of the budget.
//
// It belongs to the task goroutine, as the state handles do. Counters are
// plain integers, published to Prometheus at each flush, so that a record
// costs no atomic operation.
type recordCache struct {
	entries map[string]*cacheEntry
	last    *cacheEntry // the entry found last: a read then a write of one key probe the map once
	dirty   []*cacheEntry
	size    int64
	max     int64

	// Since the last publish. Hits and misses count reads only.
	hits, misses, evictions int64
}

// cacheEntry is one cached key. present=false caches a key known to have no
// value (not in Pebble, or deleted since the last flush when dirty).
type cacheEntry struct {
	key     string
	val     []byte
	present bool
	dirty   bool
}

func newRecordCache(max int64) *recordCache {
	return &recordCache{entries: make(map[string]*cacheEntry), max: max}
}

func (e *cacheEntry) cost() int64 { return int64(len(e.key)+cap(e.val)) + cacheEntryOverhead }

// lookup returns the entry of key, or nil. It does not allocate.
func (c *recordCache) lookup(key []byte) *cacheEntry {
	if c.last != nil && c.last.key == string(key) {
		return c.last
	}
	e := c.entries[string(key)]
	if e != nil {
		c.last = e
	}
	return e
}

// add caches key with a copy of val (present) or as absent, first making
// room if the cache is full. dirty marks an entry Pebble does not have yet.
func (c *recordCache) add(db *pebble.DB, key, val []byte, present, dirty bool) (*cacheEntry, error) {
	e := &cacheEntry{key: string(key), present: present}
	if present {
		e.val = append([]byte(nil), val...)
	}
	// The cost of the copy as allocated: its capacity is rounded up to a
	// size class, up to an eighth more than len(val), which once let the
	// cache end above its budget.
	if need := e.cost(); c.size+need > c.max {
		if err := c.evict(db, c.max*3/4-need); err != nil {
			return nil, err
		}
	}
	c.entries[e.key] = e
	c.last = e
	c.size += e.cost()
	if dirty {
		c.markDirty(e)
	}
	return e, nil
}

// set replaces e's value with a copy of val. If the value grew the cache
// past its budget, it evicts (after a flush, so e may go too: callers hold
// no entry across set).
func (c *recordCache) set(db *pebble.DB, e *cacheEntry, val []byte) error {
	before := cap(e.val)
	e.val = append(e.val[:0], val...)
	e.present = true
	c.size += int64(cap(e.val) - before)
	c.markDirty(e)
	if c.size > c.max {
		return c.evict(db, c.max*3/4)
	}
	return nil
}

// del marks e deleted.
func (c *recordCache) del(e *cacheEntry) {
	e.val = e.val[:0]
	e.present = false
	c.markDirty(e)
}

func (c *recordCache) markDirty(e *cacheEntry) {
	if !e.dirty {
		e.dirty = true
		c.dirty = append(c.dirty, e)
	}
}

// flush writes the dirty entries to Pebble in one batch. Entries stay
// cached, clean.
func (c *recordCache) flush(db *pebble.DB, wo *pebble.WriteOptions) error {
	if len(c.dirty) == 0 {
		return nil
	}
	b := db.NewBatchWithSize(len(c.dirty) * 32)
	defer b.Close()
	for _, e := range c.dirty {
		var err error
		if e.present {
			err = b.Set([]byte(e.key), e.val, nil)
		} else {
			err = b.Delete([]byte(e.key), nil)
		}
		if err != nil {
			return fmt.Errorf("state: record cache flush: %w", err)
		}
	}
	if err := b.Commit(wo); err != nil {
		return fmt.Errorf("state: record cache flush: %w", err)
	}
	for i, e := range c.dirty {
		e.dirty = false
		c.dirty[i] = nil
	}
	c.dirty = c.dirty[:0]
	return nil
}

// evict flushes, then drops entries until the cache holds at most target
// bytes.
func (c *recordCache) evict(db *pebble.DB, target int64) error {
	if err := c.flush(db, pebble.NoSync); err != nil {
		return err
	}
	c.last = nil
	for k, e := range c.entries {
		if c.size <= target {
			break
		}
		delete(c.entries, k)
		c.size -= e.cost()
		c.evictions++
	}
	return nil
}

// drop empties the cache; it must be clean (flushed).
func (c *recordCache) drop() {
	clear(c.entries)
	c.last = nil
	c.size = 0
}

// publish adds the counters since the last publish to m.
func (c *recordCache) publish(m *metrics) {
	m.cacheHits.Add(float64(c.hits))
	m.cacheMisses.Add(float64(c.misses))
	m.cacheEvictions.Add(float64(c.evictions))
	m.cacheBytes.Set(float64(c.size))
	c.hits, c.misses, c.evictions = 0, 0, 0
}

// Flush writes the record cache's pending writes to Pebble. Snapshot and
// PurgeExpired flush by themselves; call Flush before reading the database
// returned by DB. Task goroutine only.
func (b *Backend) Flush() error {
	if b.db == nil {
		return ErrClosed
	}
	return b.flushCache()
}

func (b *Backend) flushCache() error {
	if b.rc == nil {
		return nil
	}
	err := b.rc.flush(b.db, b.wo)
	b.rc.publish(b.metrics)
	return err
}
