package shuffle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrReaderClosed is what Poll returns once Close was called.
var ErrReaderClosed = errors.New("shuffle: reader closed")

// ReadError is a fetch error that stops a reader: the partition's position
// is outside its log (records a checkpoint still needs were deleted, or the
// topic was recreated), or the broker refused the fetch for good.
type ReadError struct {
	Topic     string
	Partition int32
	Offset    int64 // the reader's next offset in the partition; -1 if none was known
	Err       error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("shuffle: read %s[%d] at offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// StallAfter is how long a partition may go without a record after a seek
// before the reader asks the broker whether it has records there (see
// Reader.unstall).
const StallAfter = 2 * FetchMaxWait

// FetchMaxWait is how long a reader's fetch waits at the broker for records.
const FetchMaxWait = 500 * time.Millisecond

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	ClientOpts []kgo.Opt
	Topic      string
	Lo, Hi     int32           // the partitions [Lo, Hi) read: the task's key groups
	Start      map[int32]int64 // restored positions; a partition absent here starts at its log start
	Logger     *slog.Logger    // nil: no logs
	Metrics    *Metrics        // nil: no metrics
}

// Reader fetches a range of partitions of a shuffle topic read_uncommitted,
// with no consumer group: positions are the task's, kept in its snapshots.
// One goroutine owns it (Poll, Pause, Resume, Seek); Close may come from any.
//
// Seeks and resumes are applied at the next Poll, together: one SetOffsets
// of every partition sought since the last Poll, then one
// ResumeFetchPartitions of every partition resumed. franz-go (v1.22.3) can
// lose a broker's fetch loop when a session stop (SetOffsets) closely
// follows a call that started that loop (the previous SetOffsets, or a
// ResumeFetchPartitions while every partition was paused): the client then
// never fetches from that broker again, though its partitions have records
// and are not paused. A Poll's one SetOffsets comes first, and the next
// one only after a poll has waited for a fetch (see flush and
// TestStallAfterSeekResume); unstall remains as a safety net.
type Reader struct {
	cl      *kgo.Client
	topic   string
	lo      int32
	log     *slog.Logger
	read    prometheus.Counter
	stalled prometheus.Counter
	out     []*kgo.Record // Poll's result, reused
	now     func() time.Time

	// Per partition, indexed by partition-lo. next is the offset below
	// which a record is stale (-1: none known yet); it defends against a
	// fetch from before a Seek, which franz-go discards itself (see
	// TestReaderSeekDropsBuffered). paused partitions' records are never
	// returned; if franz-go ever returned some, resume seeks back to the
	// first one (rewind).
	next   []int64
	paused []bool
	rewind []int64 // -1: nothing to re-read on Resume
	// seekAt is when the partition was last sought and has returned no
	// record since (zero: a record came); lastCheck when unstall last
	// asked the broker.
	seekAt    []time.Time
	lastCheck time.Time
	noUnstall bool // tests: no unstall, to see stalls
	// What the next Poll applies (flush): seekTo the offset to give
	// SetOffsets (-1: none), resumeDue the partitions to resume in the
	// client; pending says whether there is any.
	seekTo    []int64
	resumeDue []bool
	pending   bool
}

// NewReader checks that the topic has at least Hi partitions and starts
// fetching [Lo, Hi) from cfg.Start, or from each partition's log start.
func NewReader(ctx context.Context, cfg ReaderConfig) (*Reader, error) {
	if cfg.Topic == "" {
		return nil, errors.New("shuffle: reader: no topic")
	}
	if cfg.Lo < 0 || cfg.Hi <= cfg.Lo {
		return nil, fmt.Errorf("shuffle: reader %s: partitions [%d, %d) are not a range", cfg.Topic, cfg.Lo, cfg.Hi)
	}
	r := &Reader{
		topic:   cfg.Topic,
		lo:      cfg.Lo,
		log:     cfg.Logger,
		read:    cfg.Metrics.counter(read, cfg.Topic),
		stalled: cfg.Metrics.counter(stalled, cfg.Topic),
		now:     time.Now,
		next:    make([]int64, cfg.Hi-cfg.Lo),
		paused:  make([]bool, cfg.Hi-cfg.Lo),
		rewind:  make([]int64, cfg.Hi-cfg.Lo),
		seekAt:  make([]time.Time, cfg.Hi-cfg.Lo),
		seekTo:  make([]int64, cfg.Hi-cfg.Lo),

		resumeDue: make([]bool, cfg.Hi-cfg.Lo),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("topic", cfg.Topic)
	offsets := make(map[int32]kgo.Offset, cfg.Hi-cfg.Lo)
	for p := cfg.Lo; p < cfg.Hi; p++ {
		r.next[p-cfg.Lo], r.rewind[p-cfg.Lo], r.seekTo[p-cfg.Lo] = -1, -1, -1
		offsets[p] = kgo.NewOffset().AtStart()
	}
	for p, off := range cfg.Start {
		if p < cfg.Lo || p >= cfg.Hi || off < 0 {
			return nil, fmt.Errorf("shuffle: reader %s: start position %d of partition %d is outside partitions [%d, %d) or negative", cfg.Topic, off, p, cfg.Lo, cfg.Hi)
		}
		offsets[p] = kgo.NewOffset().At(off)
		r.next[p-cfg.Lo] = off
	}
	opts := append(append([]kgo.Opt(nil), cfg.ClientOpts...),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		// A position outside the log is an error, not a silent jump:
		// the records there were needed.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
	// Ahead of ClientOpts, which may override it: Kafka's default, not
	// kgo's 5s, to bound how long a resumed partition with an unknown
	// position waits for the fetch in flight (see Resume).
	opts = append([]kgo.Opt{kgo.FetchMaxWait(FetchMaxWait), kgo.MetadataMinAge(MetadataMinAge)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("shuffle: reader %s: %w", cfg.Topic, err)
	}
	topics, err := kadm.NewClient(cl).ListTopics(ctx, cfg.Topic)
	if err == nil {
		err = topics.Error()
	}
	if err == nil {
		if n := len(topics[cfg.Topic].Partitions); int32(n) < cfg.Hi {
			err = fmt.Errorf("the topic has %d partitions, fewer than %d", n, cfg.Hi)
		}
	}
	if err == nil && len(cfg.Start) > 0 {
		err = r.clampStart(ctx, kadm.NewClient(cl), cfg.Start, offsets)
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("shuffle: reader %s: %w", cfg.Topic, err)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: offsets})
	r.cl = cl
	return r, nil
}

// clampStart moves each restored position that lies outside its
// partition's log into it: below the log start (a restore from a savepoint,
// whose positions purging ignores) to the log start, above the end (the
// topic was deleted and created again) to the log start too. Both are safe
// because a restored task drops every record of an older generation, and
// all of its own generation's records are in the log: what is skipped is
// only old records. Positions inside the log are kept.
func (r *Reader) clampStart(ctx context.Context, adm *kadm.Client, start map[int32]int64, offsets map[int32]kgo.Offset) error {
	starts, err := adm.ListStartOffsets(ctx, r.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("log start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("log end offsets: %w", err)
	}
	for p, off := range start {
		lo, okLo := starts.Lookup(r.topic, p)
		hi, okHi := ends.Lookup(r.topic, p)
		if !okLo || !okHi || (off >= lo.Offset && off <= hi.Offset) {
			continue
		}
		r.log.Info("restored shuffle position outside the log; reading from its start", "partition", p,
			"position", off, "log_start", lo.Offset, "log_end", hi.Offset)
		offsets[p] = kgo.NewOffset().At(lo.Offset)
		r.next[p-r.lo] = lo.Offset
	}
	return nil
}

// Poll returns the next records, of one or more partitions, each partition's
// in offset order, blocking until there are some or ctx ends. The slice is
// reused by the next Poll. Retriable fetch errors are logged and retried;
// others end the reader with a *ReadError. It first applies the Seeks and
// Resumes given since the last Poll.
func (r *Reader) Poll(ctx context.Context) ([]*kgo.Record, error) {
	for {
		// unstall, which may restart the client's session too, waits
		// for a Poll whose flush did nothing: a session stop right after
		// a loop start is what can lose a fetch loop (see flush).
		if !r.flush() {
			r.unstall(ctx)
		}
		fs := r.cl.PollFetches(ctx)
		r.out = r.out[:0]
		for i := range fs {
			for j := range fs[i].Topics {
				t := &fs[i].Topics[j]
				for k := range t.Partitions {
					if err := r.partition(ctx, t.Topic, &t.Partitions[k]); err != nil {
						return nil, err
					}
				}
			}
		}
		if len(r.out) > 0 {
			r.read.Add(float64(len(r.out)))
			return r.out, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// partition appends the fresh records of fp to r.out, or returns the error
// that stops the reader.
func (r *Reader) partition(ctx context.Context, topic string, fp *kgo.FetchPartition) error {
	if fp.Err != nil {
		if err := r.fetchError(ctx, topic, fp); err != nil {
			return err
		}
	}
	if topic != r.topic {
		return nil
	}
	i := fp.Partition - r.lo
	if i < 0 || int(i) >= len(r.next) {
		return nil
	}
	for _, rec := range fp.Records {
		switch {
		case rec.Offset < r.next[i]:
			continue // fetched before a Seek
		case r.paused[i]:
			if r.rewind[i] < 0 {
				r.rewind[i] = rec.Offset
			}
			continue
		}
		r.next[i] = rec.Offset + 1
		r.seekAt[i] = time.Time{}
		r.out = append(r.out, rec)
	}
	return nil
}

// fetchError classifies a partition error of a poll: nil to go on (kgo
// retries it) or the error that stops the reader.
func (r *Reader) fetchError(ctx context.Context, topic string, fp *kgo.FetchPartition) error {
	err := fp.Err
	if topic == "" && fp.Partition == -1 { // injected by kgo, not from a broker
		switch {
		case errors.Is(err, kgo.ErrClientClosed):
			return ErrReaderClosed
		case ctx.Err() != nil:
			return ctx.Err()
		}
		return fmt.Errorf("shuffle: read %s: %w", r.topic, err)
	}
	var next int64 = -1
	if i := fp.Partition - r.lo; i >= 0 && int(i) < len(r.next) {
		next = r.next[i]
	}
	if kerr.IsRetriable(err) && !errors.Is(err, kerr.OffsetOutOfRange) {
		r.log.Warn("shuffle fetch error, retrying", "partition", fp.Partition, "offset", next, "error", err)
		return nil
	}
	return &ReadError{Topic: topic, Partition: fp.Partition, Offset: next, Err: err}
}

// Pause stops returning records of partition p (and fetching it) until
// Resume. Records of p already fetched are not lost: they are fetched again.
// It takes effect at once (pausing does not restart the client's session).
func (r *Reader) Pause(p int32) {
	i := r.index(p)
	if r.paused[i] {
		return
	}
	r.paused[i] = true
	r.resumeDue[i] = false // a Resume since the last Poll: the client never saw it
	r.cl.PauseFetchPartitions(map[string][]int32{r.topic: {p}})
}

// Resume lets partition p's records come again, from where Pause left them,
// from the next Poll on.
func (r *Reader) Resume(p int32) {
	i := r.index(p)
	if !r.paused[i] {
		return
	}
	r.paused[i] = false
	r.resumeDue[i], r.pending = true, true
	// A resumed partition is only fetched once the fetch in flight ends,
	// which, while the other partitions are idle (as when they wait for a
	// barrier), takes up to FetchMaxWait. Seeking to the position restarts
	// the fetch session at once; unknown positions (nothing read yet) wait.
	// (flush resumes after the seek, so the new session's first fetch,
	// if it is quicker, may still miss the partition: a rare wait of up to
	// FetchMaxWait, the price of not stopping a session after a resume.)
	switch off := r.rewind[i]; {
	case off >= 0:
		r.Seek(p, off)
	case r.next[i] >= 0:
		r.Seek(p, r.next[i])
	}
}

// Seek makes partition p's next records start at offset off; no record of p
// fetched before the Seek is returned after it. The next Poll restarts the
// client's fetch session (once for all the Seeks since the last Poll), so
// the other partitions' buffered records are fetched again too: a Seek is
// for releasing a held input, not for every record.
func (r *Reader) Seek(p int32, off int64) {
	i := r.index(p)
	if off < 0 {
		panic(fmt.Sprintf("shuffle: reader %s: seek partition %d to negative offset %d", r.topic, p, off))
	}
	r.next[i], r.rewind[i], r.seekAt[i] = off, -1, r.now()
	r.seekTo[i], r.pending = off, true
}

// flush applies the Seeks and Resumes given since the last Poll, before it
// polls: no poll comes between a Seek and its SetOffsets, so no record
// fetched before the Seek is returned after it (the client drops what it
// had buffered, and Poll drops what lies below the position). It returns
// whether it did anything: then unstall, whose seek would stop the session
// right after this, waits for the next Poll.
//
// The order matters, for franz-go v1.22.3's source fetch loop
// (pkg/kgo/source.go, loopFetch): a call that finds the loop stopped
// starts a goroutine that loads the current session and only then counts
// itself as the session's worker. If that session is stopped in between
// (stopSession waits only for counted workers) and a new one started, the
// new session's wake-up finds the loop still marked running and is
// dropped, and the stale goroutine, seeing its session cancelled, marks
// the loop stopped (hardFinish) and exits: nothing fetches for that broker
// until something wakes the loop again, though its partitions have records
// and are not paused. SetOffsets both stops a session and starts a loop,
// and ResumeFetchPartitions starts one when every partition was paused, so
// a SetOffsets right after either loses the loop now and then; one
// SetOffsets per partition per Seek, each Resume doing ResumeFetchPartitions
// then SetOffsets, was exactly that. Here the one session stop comes
// first, and nothing stops the session again before the next Poll has
// waited for a fetch.
func (r *Reader) flush() (acted bool) {
	if !r.pending {
		return false
	}
	r.pending = false
	var seek map[int32]kgo.EpochOffset
	var resume []int32
	for i := range r.seekTo {
		p := r.lo + int32(i)
		if off := r.seekTo[i]; off >= 0 {
			if seek == nil {
				seek = make(map[int32]kgo.EpochOffset)
			}
			seek[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
			r.seekTo[i] = -1
		}
		if r.resumeDue[i] {
			resume = append(resume, p)
			r.resumeDue[i] = false
		}
	}
	if len(seek) > 0 {
		r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.topic: seek})
	}
	if len(resume) > 0 {
		r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: resume})
	}
	return len(seek) > 0 || len(resume) > 0
}

// unstall is a safety net for partitions that franz-go stopped fetching
// after a Seek, though they have records and are not paused; a downstream
// task would then wait for a barrier behind them until its checkpoint
// expires. The known cause, a source fetch loop lost to a session stop
// that closely follows its start (see flush), no longer arises from the
// reader's own calls, which flush orders; the net stays because the race
// is in franz-go (v1.22.3) and the reader cannot rule it out (with several
// brokers, a Poll answered by one broker does not prove that another
// broker's loop has started). A partition that has returned no record for
// StallAfter since its Seek is checked, at most once per StallAfter for the
// reader: if the broker's log end is past the reader's position, the
// partition is sought there again, counted in
// weir_shuffle_stalled_seeks_total. The seek restarts the client's session,
// and with it every lost fetch loop; it also re-enables a cursor franz-go
// left waiting for an offset load. (Removing the partition and adding it
// again, as before, lost a Seek given before the client's metadata update
// assigned it back.) A partition at the end of its log is left alone until
// it returns a record. Poll calls it only when flush did nothing.
func (r *Reader) unstall(ctx context.Context) {
	now := r.now()
	if r.noUnstall || now.Sub(r.lastCheck) < StallAfter {
		return
	}
	var check []int32
	for i, at := range r.seekAt {
		if !at.IsZero() && !r.paused[i] && now.Sub(at) >= StallAfter {
			check = append(check, r.lo+int32(i))
		}
	}
	if len(check) == 0 {
		return
	}
	r.lastCheck = now
	lctx, cancel := context.WithTimeout(ctx, FetchMaxWait)
	defer cancel()
	ends, err := kadm.NewClient(r.cl).ListEndOffsets(lctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		r.log.Debug("shuffle stall check failed; trying again later", "error", err)
		return
	}
	for _, p := range check {
		i := p - r.lo
		end, ok := ends.Lookup(r.topic, p)
		if !ok || end.Offset <= r.next[i] {
			continue
		}
		r.log.Warn("shuffle partition not fetched since a seek although it has records; seeking it again",
			"partition", p, "offset", r.next[i], "log_end", end.Offset, "since", now.Sub(r.seekAt[i]).Round(time.Millisecond))
		r.seekAt[i] = now
		r.seekTo[i], r.pending = r.next[i], true
		r.stalled.Inc()
	}
	r.flush()
}

// index returns the position of p in the reader's slices; a partition the
// reader does not read is a caller's bug.
func (r *Reader) index(p int32) int32 {
	i := p - r.lo
	if i < 0 || int(i) >= len(r.next) {
		panic(fmt.Sprintf("shuffle: reader %s: partition %d is not in [%d, %d)", r.topic, p, r.lo, r.lo+int32(len(r.next))))
	}
	return i
}

// Close stops the reader; a Poll under way returns ErrReaderClosed.
func (r *Reader) Close() { r.cl.Close() }
