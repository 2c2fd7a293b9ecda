package coordinator

import (
	"slices"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

// partition names one partition of a shuffle topic.
type partition struct {
	topic string
	part  int32
}

// lowest returns, for each (topic, partition) of ps, its lowest offset,
// sorted by control.Position.Compare; nil for none.
func lowest(ps []control.Position) []control.Position {
	if len(ps) == 0 {
		return nil
	}
	out := slices.Clone(ps)
	slices.SortFunc(out, control.Position.Compare)
	// Sorted by topic, partition, offset: the first of each partition is
	// its lowest.
	return slices.CompactFunc(out, func(a, b control.Position) bool {
		return a.Topic == b.Topic && a.Partition == b.Partition
	})
}

// applyMetadata takes the shuffle positions of a retained checkpoint from
// its _metadata object, read by the owner after a Restore from the topics
// alone (whose Complete records do not carry them). Metadata of a
// checkpoint the core does not retain, or whose positions it already knows,
// changes nothing.
func (c *Core) applyMetadata(md control.Metadata) {
	i := slices.IndexFunc(c.completed, func(k completed) bool { return k.id == md.ID })
	if i < 0 || c.completed[i].known {
		return
	}
	var ps []control.Position
	for _, t := range md.Tasks {
		ps = append(ps, t.Shuffle...)
	}
	c.completed[i].shuffle, c.completed[i].known = lowest(ps), true
}

// purge asks the owner (Ready.Purges) to delete, in each shuffle partition,
// the records below the lowest position any retained periodic checkpoint
// holds for it, as Kafka Streams purges its repartition topics: a restore
// from any of them seeks to its own position, at or above that offset, so
// nothing a restore reads is deleted.
//
// Savepoints are left out: their positions would pin the shuffle topics for
// as long as a person keeps them. No restore needs the records below the
// retained checkpoints' positions anyway: a restored job starts a new
// generation, and a restored downstream task drops every shuffle record of
// an older generation (DESIGN.md invariant 6), so what it needs is only
// what the restored upstream writes again, above every old position.
//
// A partition that some retained checkpoint does not record (its job had
// no such stage) is purged below the lowest of those that do. Nothing is
// purged while the positions of a retained checkpoint are unknown (after a
// Restore, until MetadataRead), and a partition's purge offset only
// increases: a lower minimum than one already purged asks for nothing.
func (c *Core) purge() {
	var low map[partition]int64
	for _, k := range c.completed {
		if k.kind != ckpt.KindCheckpoint {
			continue
		}
		if !k.known {
			return
		}
		for _, p := range k.shuffle {
			if low == nil {
				low = make(map[partition]int64)
			}
			key := partition{p.Topic, p.Partition}
			if off, ok := low[key]; !ok || p.Offset < off {
				low[key] = p.Offset
			}
		}
	}
	start := len(c.out.Purges)
	for key, off := range low {
		if done, ok := c.purged[key]; (ok && off <= done) || (!ok && off == 0) {
			continue
		}
		if c.purged == nil {
			c.purged = make(map[partition]int64)
		}
		c.purged[key] = off
		c.out.Purges = append(c.out.Purges, control.Position{Topic: key.topic, Partition: key.part, Offset: off})
	}
	slices.SortFunc(c.out.Purges[start:], control.Position.Compare)
}
