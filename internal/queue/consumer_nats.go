package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/outage"
)

// offsetsBucket is the key-value bucket that holds every group's position
// in every partition (the next stream sequence to handle), as Kafka holds
// committed offsets.
const offsetsBucket = "gomsg_offsets"

// natsPoll is how often a member looks at the group's members and the free
// partitions: the delay before a partition released by a clean stop is
// taken over.
const natsPoll = 200 * time.Millisecond

// releaseWrite bounds the writes that give a partition back: a released
// partition's commit and the delete of its key together, or the delete of
// a key created for a partition that could not be taken.
const releaseWrite = 5 * time.Second

// NATSConsumer consumes one topic on JetStream as a member of a group, with
// Kafka's guarantees: the records of one key are handled by one member at a
// time, strictly in order, while different keys run in parallel and the
// partitions are spread over the members; a position is committed only up
// to the lowest record not yet finished (at-least-once).
//
// JetStream has no consumer groups that assign partitions, so the group is
// built on two key-value buckets. Each member puts m.<id> into the group's
// bucket every heartbeat; the bucket's max age is the session timeout, so a
// member that dies without leaving disappears within it. The members, in
// sorted order, divide the partitions round robin; a member takes a
// partition by creating p.<n> (which fails while another holds it), keeps
// it by updating that key each heartbeat with the revision it last wrote,
// and gives it up by deleting it once its handlers finished and its
// position is committed. The partition's records are read with an ordered
// consumer starting at the committed position (gomsg_offsets bucket), so a
// new owner resumes exactly where the last one committed.
type NATSConsumer struct {
	j      *JetStream
	engine *Consumer // the key pool, handler retries and statistics
	cfg    ConsumerConfig
	log    *zap.Logger
	member string
	stream string

	own, offs jetstream.KeyValue
	held      map[int]*heldPartition // guarded by the Run goroutine
}

// heldPartition is a partition this member owns.
type heldPartition struct {
	p      *partition
	rev    uint64             // revision of p.<n> this member last wrote
	stop   context.CancelFunc // ends the fetch loop
	done   chan struct{}      // closed when the fetch loop returned
	offKey string
}

// Consumer returns a consumer of cfg.Topic for group cfg.GroupID on j that
// calls h for every record. cfg.Brokers is not used. Its signature fits
// NewConsumerFunc.
func (j *JetStream) Consumer(cfg ConsumerConfig, h Handler, log *zap.Logger) Runner {
	return j.NewConsumer(cfg, h, log)
}

// NewConsumer is Consumer returning the concrete type.
func (j *JetStream) NewConsumer(cfg ConsumerConfig, h Handler, log *zap.Logger) *NATSConsumer {
	e := NewConsumer(cfg, h, log)
	e.log = log.Named("queue").With(zap.String("topic", cfg.Topic), zap.String("group", cfg.GroupID), zap.String("queue", "nats"))
	e.outage = outage.New(e.log, "nats")
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &NATSConsumer{j: j, engine: e, cfg: e.cfg, log: e.log, stream: StreamName(cfg.Topic),
		member: invalidName.ReplaceAllString(host, "_") + "-" + hex.EncodeToString(b[:]), held: make(map[int]*heldPartition)}
}

// Stats returns the consumer's counters; Generations counts the partitions
// taken over.
func (c *NATSConsumer) Stats() ConsumerStats { return c.engine.Stats() }

// Member is this member's id in its group.
func (c *NATSConsumer) Member() string { return c.member }

// Run consumes until ctx is done. Then it leaves the group, stops reading,
// lets running handlers finish (up to DrainTimeout), commits and releases
// its partitions so that the others take them at once, and returns nil.
func (c *NATSConsumer) Run(ctx context.Context) error {
	switch {
	case c.cfg.GroupID == "":
		return errors.New("queue consumer: no group id configured")
	case c.cfg.Topic == "":
		return errors.New("queue consumer: no topic configured")
	}
	retry := c.engine.newBackoff()
	var parts []int
	for {
		err := c.setUp(ctx)
		if err == nil {
			parts, err = c.j.partitionsOf(ctx, c.cfg.Topic)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		c.engine.outage.Fail(fmt.Errorf("set up consumer (will retry): %w", err))
		if !backoff.Sleep(ctx, retry.next()) {
			return nil
		}
	}
	stopWorkers := c.engine.startWorkers()
	hctx := context.WithoutCancel(ctx)

	tick := time.NewTicker(natsPoll)
	defer tick.Stop()
	var lastBeat, lastCommit time.Time
	for ctx.Err() == nil {
		now := time.Now()
		if now.Sub(lastBeat) >= c.cfg.HeartbeatInterval {
			c.heartbeat(ctx)
			lastBeat = now
		}
		c.rebalance(ctx, hctx, len(parts))
		if now.Sub(lastCommit) >= c.cfg.CommitInterval {
			c.commitAll(ctx)
			lastCommit = now
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}

	// Leave: the others see the member gone at their next poll, and take
	// each partition as soon as it is released here.
	lctx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout+5*time.Second)
	defer cancel()
	_ = c.own.Delete(lctx, "m."+c.member)
	var wg sync.WaitGroup
	for n, hp := range c.held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.release(lctx, n, hp, true)
		}()
	}
	wg.Wait()
	clear(c.held)
	stopWorkers()
	if c.cfg.OnBufferedBytes != nil {
		c.cfg.OnBufferedBytes(0)
	}
	c.log.Info("consumer stopped")
	return nil
}

// setUp opens (creating where missing) the group's bucket and the offsets
// bucket.
func (c *NATSConsumer) setUp(ctx context.Context) error {
	if c.own != nil && c.offs != nil {
		return nil
	}
	var err error
	c.own, err = c.groupBucket(ctx)
	if err != nil {
		return err
	}
	c.offs, err = c.j.bucket(ctx, jetstream.KeyValueConfig{Bucket: offsetsBucket, Storage: jetstream.FileStorage, History: 1,
		Description: "gomsg consumer group positions"})
	return err
}

// groupBucket opens (creating where missing) the group's bucket of members
// and partition owners.
func (c *NATSConsumer) groupBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return c.j.bucket(ctx, jetstream.KeyValueConfig{
		Bucket: "gomsg_group_" + invalidName.ReplaceAllString(c.cfg.GroupID+"_"+c.stream, "_"),
		TTL:    c.cfg.SessionTimeout, Storage: jetstream.MemoryStorage, History: 1,
		Description: "gomsg consumer group members and partition owners",
	})
}

// bucket opens a bucket, creating it when it is missing.
func (j *JetStream) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := j.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.Replicas = j.cfg.Replicas
		kv, err = j.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = j.js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// heartbeat renews this member and its partitions. A partition whose key
// was taken meanwhile (this member was cut off for longer than the session
// timeout) is given up without committing: another member owns it now.
func (c *NATSConsumer) heartbeat(ctx context.Context) {
	_, err := c.own.Put(ctx, "m."+c.member, nil)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		// The group's bucket is kept in the servers' memory: a server
		// restarted without its peers lost it. Create it again; the
		// partition keys are gone with it, so the partitions held are
		// given up below and taken again through the group.
		var own jetstream.KeyValue
		if own, err = c.groupBucket(ctx); err == nil {
			c.own = own
			_, err = c.own.Put(ctx, "m."+c.member, nil)
		}
	}
	if err != nil {
		c.engine.outage.Fail(fmt.Errorf("group heartbeat: %w", err))
		return
	}
	for n, hp := range c.held {
		rev, err := c.atOwnRevision(ctx, n, hp.rev, func(rev uint64) (uint64, error) {
			return c.own.Update(ctx, partKey(n), []byte(c.member), rev)
		})
		if err == nil {
			hp.rev = rev
			continue
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound) {
			c.log.Warn("partition taken by another member; giving it up", zap.Int("partition", n), zap.Error(err))
			c.release(ctx, n, hp, false)
			delete(c.held, n)
			continue
		}
		c.engine.outage.Fail(fmt.Errorf("renew partition %d: %w", n, err))
	}
	c.engine.outage.OK()
}

func partKey(n int) string { return "p." + strconv.Itoa(n) }

// rebalance gives up the partitions that are no longer this member's share
// and tries to take those that are and are free.
func (c *NATSConsumer) rebalance(ctx context.Context, hctx context.Context, parts int) {
	members, err := c.members(ctx)
	if err != nil {
		if ctx.Err() == nil { // a stop is not an outage
			c.engine.outage.Fail(fmt.Errorf("list group members: %w", err))
		}
		return
	}
	mine := make(map[int]bool)
	if i := slices.Index(members, c.member); i >= 0 {
		for n := i; n < parts; n += len(members) {
			mine[n] = true
		}
	}
	for n, hp := range c.held {
		if !mine[n] {
			c.release(ctx, n, hp, true)
			delete(c.held, n)
		}
	}
	for n := range mine {
		if c.held[n] != nil {
			continue
		}
		rev, err := c.own.Create(ctx, partKey(n), []byte(c.member))
		if err != nil {
			continue // held by another member until it releases it or its key expires
		}
		if hp, err := c.acquire(ctx, hctx, n, rev); err != nil {
			c.engine.outage.Fail(fmt.Errorf("take partition %d: %w", n, err))
			c.giveBack(ctx, n, rev)
		} else {
			c.held[n] = hp
		}
	}
}

// giveBack deletes partition n's key, created at rev by this member, when
// the partition could not be taken after all (a stop that ended ctx
// meanwhile included): left in place, it would keep the others out for the
// session timeout.
func (c *NATSConsumer) giveBack(ctx context.Context, n int, rev uint64) {
	ctx, cancel := giveBackContext(ctx)
	defer cancel()
	if err := c.own.Delete(ctx, partKey(n), jetstream.LastRevision(rev)); err != nil {
		c.log.Debug("give back partition", zap.Int("partition", n), zap.Error(err))
	}
}

// giveBackContext is the context of the writes that give a partition back:
// ctx's values without its end, bounded by releaseWrite.
func giveBackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), releaseWrite)
}

// members lists the group's live members, sorted.
func (c *NATSConsumer) members(ctx context.Context) ([]string, error) {
	l, err := c.own.ListKeysFiltered(ctx, "m.*")
	if err != nil {
		return nil, err
	}
	return memberIDs(ctx, l)
}

// memberIDs reads the member keys l lists. The lister closes its keys
// early, with no error, when ctx ends: a list cut short would read as
// members gone, and this member would give up partitions that are still its
// share.
func memberIDs(ctx context.Context, l jetstream.KeyLister) ([]string, error) {
	var out []string
	for k := range l.Keys() {
		out = append(out, strings.TrimPrefix(k, "m."))
	}
	_ = l.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// acquire starts reading partition n from its committed position.
func (c *NATSConsumer) acquire(ctx context.Context, hctx context.Context, n int, rev uint64) (*heldPartition, error) {
	offKey := offsetKey(c.cfg.GroupID, c.cfg.Topic, n)
	var start uint64
	e, err := c.offs.Get(ctx, offKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read position: %w", err)
	default:
		if start, err = strconv.ParseUint(string(e.Value()), 10, 64); err != nil {
			return nil, fmt.Errorf("position %q of %s: %w", e.Value(), offKey, err)
		}
	}
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject(c.cfg.Topic, n)},
		DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: 10 * time.Second}
	if start > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	oc, err := c.j.js.OrderedConsumer(ctx, c.stream, occ)
	if err != nil {
		return nil, fmt.Errorf("ordered consumer: %w", err)
	}
	it, err := oc.Messages(jetstream.PullMaxMessages(min(c.cfg.QueueSize, 256)))
	if err != nil {
		return nil, fmt.Errorf("read messages: %w", err)
	}
	c.engine.generations.Add(1)
	p := newPartition(hctx, n, int64(start), newOffsetTracker())
	fctx, stop := context.WithCancel(context.Background())
	hp := &heldPartition{p: p, rev: rev, stop: stop, done: make(chan struct{}), offKey: offKey}
	go func() {
		<-fctx.Done()
		it.Stop()
	}()
	go func() {
		defer close(hp.done)
		c.fetchLoop(fctx, p, it)
	}()
	c.log.Debug("partition taken", zap.Int("partition", n), zap.Uint64("from_sequence", start), zap.String("member", c.member))
	return hp, nil
}

// fetchLoop moves records from it into the key queues until ctx is done,
// pausing while p holds QueueSize records or MaxBufferedBytes bytes. The
// ordered consumer recreates itself on the server after a disconnection.
func (c *NATSConsumer) fetchLoop(ctx context.Context, p *partition, it jetstream.MessagesContext) {
	retry := c.engine.newBackoff()
	for {
		if _, ok := c.engine.pool.waitRoom(ctx, p, c.cfg.QueueSize, c.cfg.MaxBufferedBytes); !ok {
			return
		}
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			c.engine.fetchErrors.Add(1)
			err = fmt.Errorf("fetch partition %d: %w", p.id, err)
			if c.cfg.OnError != nil {
				c.cfg.OnError("fetch", err)
			}
			c.engine.outage.Fail(err)
			if !backoff.Sleep(ctx, retry.next()) {
				return
			}
			continue
		}
		retry.reset()
		md, err := msg.Metadata()
		if err != nil {
			continue // not a JetStream message
		}
		m := Message{Topic: c.cfg.Topic, Partition: p.id, Offset: int64(md.Sequence.Stream), Value: msg.Data(), Time: md.Timestamp}
		if h := msg.Headers(); len(h) > 0 {
			m.Key = h.Get(keyHeader)
			m.Headers = make(map[string]string, len(h))
			for k := range h {
				if k != keyHeader {
					m.Headers[k] = h.Get(k)
				}
			}
		}
		p.lag.Store(int64(md.NumPending))
		c.engine.pool.add(c.engine, p, m, c.cfg.QueueSize+1, c.cfg.MaxBufferedBytes+size(m))
	}
}

// release stops partition n: its fetch loop ends, records not started are
// dropped, running handlers get DrainTimeout; with commit its position is
// committed and its key deleted, so another member takes it at once. The
// commit and the delete outlive ctx's end (by releaseWrite at most): a
// release cut short by a stop would leave records to be handled twice and
// the key for the others to wait out.
func (c *NATSConsumer) release(ctx context.Context, n int, hp *heldPartition, commit bool) {
	hp.stop()
	<-hp.done
	c.engine.pool.revoke(hp.p)
	drain := time.AfterFunc(c.cfg.DrainTimeout, hp.p.cancel)
	c.engine.pool.waitIdle(hp.p)
	drain.Stop()
	hp.p.cancel()
	if !commit {
		return
	}
	ctx, cancel := giveBackContext(ctx)
	defer cancel()
	if err := c.commit(ctx, hp); err != nil {
		c.log.Warn("commit of a released partition failed; its finished records will be handled again",
			zap.Int("partition", n), zap.Error(err))
	}
	// Deleted where it is, or the others wait out its expiry.
	_, err := c.atOwnRevision(ctx, n, hp.rev, func(rev uint64) (uint64, error) {
		return 0, c.own.Delete(ctx, partKey(n), jetstream.LastRevision(rev))
	})
	if err != nil {
		c.log.Debug("release partition", zap.Int("partition", n), zap.Error(err))
	}
	c.log.Debug("partition released", zap.Int("partition", n))
}

// atOwnRevision runs write, a write to partition n's key checked against
// its revision, at rev, the revision this member last saw. If that fails,
// an earlier write whose answer was lost (a renewal cancelled by a stop, or
// timed out after the server applied it) may have moved the key on while it
// still names this member: the key is read again and, if it does, write runs
// once more at its current revision. A key naming another member is
// jetstream.ErrKeyExists, a key gone jetstream.ErrKeyNotFound: both mean the
// partition is not this member's any more. Any other error is a key that
// could not be written or read.
func (c *NATSConsumer) atOwnRevision(ctx context.Context, n int, rev uint64, write func(rev uint64) (uint64, error)) (uint64, error) {
	next, err := write(rev)
	if err == nil {
		return next, nil
	}
	e, err := c.own.Get(ctx, partKey(n))
	if err != nil {
		return 0, err
	}
	if string(e.Value()) != c.member {
		return 0, jetstream.ErrKeyExists
	}
	return write(e.Revision())
}

// commitAll commits every held partition's position and reports lag and
// buffered bytes.
func (c *NATSConsumer) commitAll(ctx context.Context) {
	var lag int64
	for n, hp := range c.held {
		if err := c.commit(ctx, hp); err != nil && ctx.Err() == nil {
			c.engine.commitErrors.Add(1)
			err = fmt.Errorf("commit partition %d (will retry): %w", n, err)
			if c.cfg.OnError != nil {
				c.cfg.OnError("commit", err)
			}
			c.engine.outage.Fail(err)
		}
		lag += hp.p.lag.Load()
	}
	if c.cfg.OnLag != nil {
		c.cfg.OnLag(lag)
	}
	if c.cfg.OnBufferedBytes != nil {
		_, bytes := c.engine.pool.buffered()
		c.cfg.OnBufferedBytes(bytes)
	}
}

// commit stores hp's position: the lowest sequence not yet finished.
func (c *NATSConsumer) commit(ctx context.Context, hp *heldPartition) error {
	cp, ok := hp.p.offsets.uncommitted()[hp.p.id]
	if !ok {
		return nil
	}
	if _, err := c.offs.Put(ctx, hp.offKey, []byte(strconv.FormatInt(cp, 10))); err != nil {
		return err
	}
	c.engine.commits.Add(1)
	hp.p.offsets.committed(map[int]int64{hp.p.id: cp})
	return nil
}
