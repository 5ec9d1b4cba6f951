// Package dlq lets an operator act on carrier's dead-letter topic: list its
// tasks, show one, put them back on the task topic (redrive) and purge them.
//
// Kafka topics are append-only, so what an operator did is kept beside the
// topic, in Redis: the records redriven (by partition and offset) and a
// "purged before" time. The list is the topic's records minus those. The
// topic is read by partition and offset, never in a consumer group, so
// listing moves nobody's position; records the broker's retention removed
// simply leave the list.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Limits of one call.
const (
	DefaultListLimit    = 100
	MaxListLimit        = 1000
	DefaultRedriveLimit = 100
	MaxRedriveLimit     = 10000
	DefaultRedriveRate  = 10
	MaxRedriveRate      = 1000
	maxUIDBytes         = 256
	maxReasonBytes      = 256
)

// Config configures the dead-letter tools.
type Config struct {
	// TaskTopic is where a redrive puts tasks back.
	TaskTopic string
	// MaxRedrives is how many times one task may be redriven
	// (--dlq-max-redrives): a task that died again after that many stays
	// where it is, so a task whose cause is not fixed cannot loop.
	MaxRedrives int
	// RefreshInterval is how often Run reads new dead letters and sets the
	// metrics (--dlq-refresh-interval).
	RefreshInterval time.Duration
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.MaxRedrives == 0 {
		c.MaxRedrives = 3
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = 30 * time.Second
	}
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.TaskTopic == "":
		return errors.New("dlq: the task topic must be set")
	case c.MaxRedrives < 1:
		return fmt.Errorf("--dlq-max-redrives: %d, must be at least 1", c.MaxRedrives)
	case c.RefreshInterval < time.Second:
		return fmt.Errorf("--dlq-refresh-interval: %s, must be at least 1s", c.RefreshInterval)
	}
	return nil
}

// Source reads the dead-letter topic; *queue.TopicReader is one.
type Source interface {
	Ranges(ctx context.Context) ([]queue.PartitionRange, error)
	Read(ctx context.Context, partition int, from, end int64, fn func(queue.Message) error) error
	ReadOne(ctx context.Context, partition int, offset int64) (queue.Message, error)
}

// Publisher writes redriven tasks.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// entry is what the list keeps of one dead letter.
type entry struct {
	sum *pushpb.DeadLetterSummary
	key string
}

func (e *entry) id() string {
	return strconv.Itoa(int(e.sum.GetPartition())) + ":" + strconv.FormatInt(e.sum.GetOffset(), 10)
}

// DLQ is the dead-letter tools of one station.
type DLQ struct {
	cfg     Config
	log     *zap.Logger
	src     Source
	pub     Publisher
	rdb     redis.UniversalClient
	keys    rkeys.Layout
	metrics *metrics.Metrics

	// mu guards the index: entries read so far (those redriven or purged
	// are dropped at each refresh) and the next offset per partition.
	mu      sync.Mutex
	entries []*entry
	next    map[int]int64
	// redriveMu lets one redrive run at a time on this station, so two
	// calls do not put the same task back twice.
	redriveMu sync.Mutex
}

// New makes the tools.
func New(cfg Config, log *zap.Logger, m *metrics.Metrics, src Source, pub Publisher, rdb redis.UniversalClient) (*DLQ, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &DLQ{cfg: cfg, log: log.With(zap.String("component", "dlq")), src: src, pub: pub, rdb: rdb,
		keys: rkeys.Of(rdb), metrics: m, next: map[int]int64{}}, nil
}

// Run refreshes the list and the metrics every RefreshInterval until ctx
// ends. A failed refresh is logged and tried again at the next tick.
func (d *DLQ) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if _, err := d.refresh(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("dead-letter list not refreshed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func storeErr(op string, err error) error {
	return grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "dead letters: %s: %v", op, err)
}

// refresh reads the records appended since the last refresh and the
// operator's marks, drops from the index what is redriven, purged or gone
// by retention, and returns the waiting entries, newest first.
func (d *DLQ) refresh(ctx context.Context) ([]*entry, error) {
	ranges, err := d.src.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	first := map[int]int64{}
	for _, r := range ranges {
		first[r.ID] = r.First
		from := max(d.next[r.ID], r.First)
		err := d.src.Read(ctx, r.ID, from, r.End, func(m queue.Message) error {
			d.next[r.ID] = m.Offset + 1
			e, err := decode(m)
			if err != nil {
				d.log.Error("undecodable dead letter left out of the list", zap.Int("partition", m.Partition),
					zap.Int64("offset", m.Offset), zap.Error(err))
				return nil
			}
			d.entries = append(d.entries, e)
			return nil
		})
		if err != nil {
			return nil, err
		}
		d.next[r.ID] = max(d.next[r.ID], r.End)
	}
	purged, handled, err := d.marks(ctx)
	if err != nil {
		return nil, err
	}
	d.entries = slices.DeleteFunc(d.entries, func(e *entry) bool {
		p := int(e.sum.GetPartition())
		return e.sum.GetDeadAt() < purged || handled[e.id()] || e.sum.GetOffset() < first[p]
	})
	out := slices.Clone(d.entries)
	slices.SortStableFunc(out, func(a, b *entry) int {
		if c := b.sum.GetDeadAt() - a.sum.GetDeadAt(); c != 0 {
			return sign(c)
		}
		return sign(b.sum.GetSeq() - a.sum.GetSeq())
	})
	if d.metrics != nil {
		d.metrics.DLQRecords.Set(float64(len(out)))
		age := 0.0
		if len(out) > 0 {
			age = max(0, time.Since(time.UnixMilli(out[len(out)-1].sum.GetDeadAt())).Seconds())
		}
		d.metrics.DLQOldestAge.Set(age)
	}
	return out, nil
}

func sign(v int64) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// marks reads the purge time and the redriven records.
func (d *DLQ) marks(ctx context.Context) (purged int64, handled map[string]bool, err error) {
	v, err := d.rdb.Get(ctx, d.keys.DLQPurged()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, storeErr("read the purge mark", err)
	}
	purged = v
	fields, err := d.rdb.HKeys(ctx, d.keys.DLQHandled()).Result()
	if err != nil {
		return 0, nil, storeErr("read the redriven records", err)
	}
	handled = make(map[string]bool, len(fields))
	for _, f := range fields {
		handled[f] = true
	}
	return purged, handled, nil
}

// decode makes the list's entry of a dead-letter record. Records written
// before dead letters carried a redrive count read as never redriven.
func decode(m queue.Message) (*entry, error) {
	var dl mqpb.DeadLetter
	if err := proto.Unmarshal(m.Value, &dl); err != nil {
		return nil, err
	}
	sum := summarize(&dl)
	sum.Partition, sum.Offset = int32(m.Partition), m.Offset
	if sum.DeadAt == 0 {
		sum.DeadAt = m.Time.UnixMilli()
	}
	return &entry{sum: sum, key: m.Key}, nil
}

func summarize(dl *mqpb.DeadLetter) *pushpb.DeadLetterSummary {
	p := dl.GetPayload()
	s := &pushpb.DeadLetterSummary{Seq: p.GetSeq(), Attempts: int32(len(p.GetAttempts())), DeadAt: dl.GetDeadAt(),
		Reason: dl.GetReason(), RedriveCount: p.GetRedriveCount()}
	if n := len(p.GetAttempts()); n > 0 {
		last := p.GetAttempts()[n-1]
		s.LastError, s.Platforms = last.GetError(), last.GetPlatforms()
	}
	switch b := p.GetBody().(type) {
	case *mqpb.Payload_ToUid:
		s.Kind, s.Uid = "to_uid", b.ToUid.GetUid()
		if len(s.Platforms) == 0 {
			s.Platforms = b.ToUid.GetPlatforms()
		}
		for _, m := range b.ToUid.GetMsgs() {
			s.MsgSeqs = append(s.MsgSeqs, m.GetSeq())
		}
	case *mqpb.Payload_KickoutSession:
		s.Kind, s.Uid = "kickout_session", b.KickoutSession.GetUid()
	case *mqpb.Payload_SendOfflineToSession:
		s.Kind, s.Uid = "send_offline_to_session", b.SendOfflineToSession.GetUid()
		if len(s.Platforms) == 0 && b.SendOfflineToSession.GetPlatform() != "" {
			s.Platforms = []string{b.SendOfflineToSession.GetPlatform()}
		}
	default:
		s.Kind = "other"
	}
	return s
}

// ListFilter selects dead letters.
type ListFilter struct {
	Since  time.Time // zero: all
	UID    string
	Reason string
	Limit  int
}

func validUID(field, uid string) error {
	if len(uid) > maxUIDBytes {
		return grpcerr.Invalid(field, "%d bytes, at most %d", len(uid), maxUIDBytes)
	}
	return nil
}

func validTime(field string, ms int64) error {
	if ms < 0 {
		return grpcerr.Invalid(field, "%d is negative", ms)
	}
	if ms > time.Now().Add(time.Minute).UnixMilli() {
		return grpcerr.Invalid(field, "%s is in the future", time.UnixMilli(ms).UTC().Format(time.RFC3339))
	}
	return nil
}

// List returns the waiting dead letters that match req, newest first, and
// how many match in all.
func (d *DLQ) List(ctx context.Context, req *pushpb.ListDeadLettersRequest) (*pushpb.ListDeadLettersResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case req.GetLimit() < 0 || limit > MaxListLimit:
		return nil, grpcerr.Invalid("limit", "%d, want 1 to %d (0: %d)", req.GetLimit(), MaxListLimit, DefaultListLimit)
	case len(req.GetReason()) > maxReasonBytes:
		return nil, grpcerr.Invalid("reason", "%d bytes, at most %d", len(req.GetReason()), maxReasonBytes)
	}
	if err := validTime("since_ms", req.GetSinceMs()); err != nil {
		return nil, err
	}
	if err := validUID("uid", req.GetUid()); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	all, err := d.refresh(ctx)
	if err != nil {
		return nil, err
	}
	reason := strings.ToLower(req.GetReason())
	resp := &pushpb.ListDeadLettersResponse{}
	for _, e := range all {
		s := e.sum
		if s.GetDeadAt() < req.GetSinceMs() || (req.GetUid() != "" && s.GetUid() != req.GetUid()) ||
			(reason != "" && !strings.Contains(strings.ToLower(s.GetReason()), reason) &&
				!strings.Contains(strings.ToLower(s.GetLastError()), reason)) {
			continue
		}
		resp.Matched++
		if len(resp.Records) < limit {
			resp.Records = append(resp.Records, s)
		}
	}
	return resp, nil
}

// find returns the newest waiting entry whose task seq, or one of whose
// message seqs, is seq.
func find(all []*entry, seq int64) *entry {
	for _, e := range all {
		if e.sum.GetSeq() == seq || slices.Contains(e.sum.GetMsgSeqs(), seq) {
			return e
		}
	}
	return nil
}

// Get returns one waiting dead letter in full.
func (d *DLQ) Get(ctx context.Context, seq int64) (*pushpb.GetDeadLetterResponse, error) {
	if seq <= 0 {
		return nil, grpcerr.Invalid("seq", "must be set (a task's seq or a message's)")
	}
	all, err := d.refresh(ctx)
	if err != nil {
		return nil, err
	}
	e := find(all, seq)
	if e == nil {
		return nil, notFound(seq)
	}
	dl, _, err := d.read(ctx, e)
	if err != nil {
		return nil, err
	}
	p := dl.GetPayload()
	resp := &pushpb.GetDeadLetterResponse{Summary: e.sum, CreatedAt: p.GetTimestamp()}
	for _, a := range p.GetAttempts() {
		resp.Attempts = append(resp.Attempts, &pushpb.DeadLetterAttempt{At: a.GetAt(), Error: a.GetError(), Platforms: a.GetPlatforms()})
	}
	switch b := p.GetBody().(type) {
	case *mqpb.Payload_ToUid:
		resp.Msgs, resp.Notification = b.ToUid.GetMsgs(), b.ToUid.GetNotification()
	case *mqpb.Payload_KickoutSession:
		resp.Sid = b.KickoutSession.GetSid()
	case *mqpb.Payload_SendOfflineToSession:
		resp.Sid = b.SendOfflineToSession.GetSid()
	}
	return resp, nil
}

func notFound(seq int64) error {
	return grpcerr.New(codes.NotFound, errorpb.Code_CODE_UNSPECIFIED,
		"no waiting dead letter has seq %d (as a task's or a message's seq): it may be redriven, purged or never dead-lettered", seq)
}

// read reads an entry's whole record.
func (d *DLQ) read(ctx context.Context, e *entry) (*mqpb.DeadLetter, queue.Message, error) {
	m, err := d.src.ReadOne(ctx, int(e.sum.GetPartition()), e.sum.GetOffset())
	if err != nil {
		return nil, m, err
	}
	var dl mqpb.DeadLetter
	if err := proto.Unmarshal(m.Value, &dl); err != nil {
		return nil, m, fmt.Errorf("dead letter %s: %w", e.id(), err)
	}
	return &dl, m, nil
}
