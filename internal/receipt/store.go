package receipt

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// ErrUnavailable wraps every Redis failure of the delivery store.
var ErrUnavailable = errors.New("delivery store unavailable")

// ErrPageToken is a page token the store did not hand out for this request.
var ErrPageToken = errors.New("page token not valid")

// Bounds of one stored step. A receipt whose names are longer, or hold a
// NUL (the separator of a stored field), is not stored (Check); a longer
// detail is cut to MaxDetailBytes, so a step costs at most about 1.3 KB.
const (
	MaxNameBytes   = 256
	MaxDetailBytes = 256
)

// Store keeps the receipts of each seq in Redis, for GetDelivery. A seq has
// two keys (package rkeys), expiring together retention after its last
// receipt:
//
//	hash DeliverySteps(seq): field  uid NUL platform NUL state NUL sid NUL attempt
//	                         value  at NUL acked NUL boat_id NUL detail
//	zset DeliveryIndex(seq): every field of the hash, score 0
//
// A field is what identifies a step (the receipt's id without the seq), so
// the same step written twice is one field, holding what was written last.
// The index, all of one score, is ordered by its members' bytes: by uid,
// then platform, so a page of targets is a range of it (ZRANGEBYLEX), and a
// page token is the last target of the page before.
type Store struct {
	rdb  redis.UniversalClient
	keys rkeys.Layout
}

// NewStore returns a store on rdb, in the key layout of rdb.
func NewStore(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, keys: rkeys.Of(rdb)}
}

// Check reports a receipt the store does not keep: no seq, uid or platform,
// an unknown state, a name longer than MaxNameBytes or holding a NUL.
func Check(rc *receiptpb.Receipt) error {
	switch {
	case rc.GetSeq() <= 0:
		return fmt.Errorf("seq %d, must be positive", rc.GetSeq())
	case rc.GetUid() == "" || rc.GetPlatform() == "":
		return errors.New("no uid or platform")
	case rc.GetState() == receiptpb.State_STATE_UNSPECIFIED || receiptpb.State_name[int32(rc.GetState())] == "":
		return fmt.Errorf("state %d unknown", rc.GetState())
	}
	for _, f := range [...]struct{ name, v string }{{"uid", rc.GetUid()}, {"platform", rc.GetPlatform()}, {"sid", rc.GetSid()}, {"boat_id", rc.GetBoatId()}} {
		if v := f.v; len(v) > MaxNameBytes || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%s: longer than %d bytes or holds a NUL", f.name, MaxNameBytes)
		}
	}
	return nil
}

// field is the hash field (and index member) of a step.
func field(rc *receiptpb.Receipt) string {
	return rc.GetUid() + "\x00" + rc.GetPlatform() + "\x00" + strconv.Itoa(int(rc.GetState())) + "\x00" +
		rc.GetSid() + "\x00" + strconv.Itoa(int(rc.GetAttempt()))
}

// value is the hash value of a step.
func value(rc *receiptpb.Receipt) string {
	acked := "0"
	if rc.GetAcked() {
		acked = "1"
	}
	return strconv.FormatInt(rc.GetAt(), 10) + "\x00" + acked + "\x00" + rc.GetBoatId() + "\x00" + truncate(rc.GetDetail(), MaxDetailBytes)
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Write stores receipts, which Check accepts, in one pipeline whatever
// their seqs, and sets each seq's keys to expire retention from now. It is
// idempotent: writing a receipt again changes nothing but the expiry. An
// error wraps ErrUnavailable; some of the receipts may then be stored, and
// writing them all again completes the rest.
func (s *Store) Write(ctx context.Context, retention time.Duration, rs []*receiptpb.Receipt) error {
	if len(rs) == 0 {
		return nil
	}
	type seqWrite struct {
		fields []any // field, value, field, value …
		index  []redis.Z
	}
	bySeq := map[int64]*seqWrite{}
	var order []int64
	for _, rc := range rs {
		w := bySeq[rc.GetSeq()]
		if w == nil {
			w = &seqWrite{}
			bySeq[rc.GetSeq()] = w
			order = append(order, rc.GetSeq())
		}
		f := field(rc)
		w.fields = append(w.fields, f, value(rc))
		w.index = append(w.index, redis.Z{Member: f})
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, seq := range order {
			w := bySeq[seq]
			steps, index := s.keys.DeliverySteps(seq), s.keys.DeliveryIndex(seq)
			p.HSet(ctx, steps, w.fields...)
			p.ZAdd(ctx, index, w.index...)
			p.PExpire(ctx, steps, retention)
			p.PExpire(ctx, index, retention)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: write %d receipts of %d seqs: %w", ErrUnavailable, len(rs), len(order), err)
	}
	return nil
}

// Page is one page of a seq's targets.
type Page struct {
	// Targets are sorted by uid, then platform; each target's steps by
	// time, then state.
	Targets []*pushpb.DeliveryTarget
	// Next is the token of the next page; empty on the last.
	Next string
}

// Get returns up to pageSize targets of seq (only uid's when uid is not
// empty), from the page token a previous Get returned (empty: the first
// page). A seq with nothing recorded returns an empty page. A token not
// handed out for this seq and uid is ErrPageToken.
//
// Memory is bounded by the page, not by the seq: Get reads the index in
// ranges of about 4 fields per target of the page (ZRANGEBYLEX … LIMIT),
// stops at the first field of the target after the page, then reads the
// page's steps with one HMGET. It holds at most pageSize targets' steps and
// one range, however many targets the seq has. A target's steps are bounded
// by what can happen to it: a DELIVERED per session of the platform, a
// RETRIED per retry, and a few more.
func (s *Store) Get(ctx context.Context, seq int64, uid string, pageSize int, pageToken string) (Page, error) {
	lo, hi := "-", "+"
	if uid != "" {
		lo, hi = "["+uid+"\x00", "("+uid+"\x01"
	}
	if pageToken != "" {
		tu, tp, err := decodeToken(seq, pageToken)
		if err != nil || uid != "" && tu != uid {
			return Page{}, fmt.Errorf("%w: not one for seq %d%s", ErrPageToken, seq, ofUID(uid))
		}
		// Past every field of the token's target: "uid NUL platform NUL …"
		// sorts below "uid NUL platform \x01", and every other platform of
		// the uid above it.
		lo = "[" + tu + "\x00" + tp + "\x01"
	}
	chunk := int64(min(max(4*pageSize, 16), 4096))
	index := s.keys.DeliveryIndex(seq)
	var fields []string
	targets, more := 0, false
	last := ""
scan:
	for {
		ms, err := s.rdb.ZRangeByLex(ctx, index, &redis.ZRangeBy{Min: lo, Max: hi, Count: chunk}).Result()
		if err != nil {
			return Page{}, fmt.Errorf("%w: read the delivery index of seq %d: %w", ErrUnavailable, seq, err)
		}
		for _, m := range ms {
			if t := targetOf(m); t != last {
				if targets == pageSize {
					more = true
					break scan
				}
				targets++
				last = t
			}
			fields = append(fields, m)
		}
		if int64(len(ms)) < chunk {
			break
		}
		lo = "(" + ms[len(ms)-1]
	}
	if len(fields) == 0 {
		return Page{}, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.keys.DeliverySteps(seq), fields...).Result()
	if err != nil {
		return Page{}, fmt.Errorf("%w: read the delivery steps of seq %d: %w", ErrUnavailable, seq, err)
	}
	page := Page{Targets: make([]*pushpb.DeliveryTarget, 0, targets)}
	var cur *pushpb.DeliveryTarget
	for i, f := range fields {
		v, ok := vals[i].(string)
		if !ok {
			continue // expired between the two reads
		}
		t, step, ok := parseStep(f, v)
		if !ok {
			continue
		}
		if cur == nil || cur.Uid != t.Uid || cur.Platform != t.Platform {
			cur = t
			page.Targets = append(page.Targets, cur)
		}
		cur.Steps = append(cur.Steps, step)
	}
	for _, t := range page.Targets {
		slices.SortStableFunc(t.Steps, func(a, b *pushpb.DeliveryStep) int {
			return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.State, b.State))
		})
		t.State = t.Steps[len(t.Steps)-1].State
	}
	if more {
		tu, tp, _ := strings.Cut(last, "\x00")
		page.Next = encodeToken(seq, tu, tp)
	}
	return page, nil
}

func ofUID(uid string) string {
	if uid == "" {
		return ""
	}
	return fmt.Sprintf(" and uid %q", uid)
}

// targetOf is the "uid NUL platform" a field starts with.
func targetOf(f string) string {
	i := strings.IndexByte(f, 0)
	if i < 0 {
		return f
	}
	j := strings.IndexByte(f[i+1:], 0)
	if j < 0 {
		return f
	}
	return f[:i+1+j]
}

// parseStep reads a stored field and value.
func parseStep(f, v string) (*pushpb.DeliveryTarget, *pushpb.DeliveryStep, bool) {
	fp := strings.SplitN(f, "\x00", 5)
	vp := strings.SplitN(v, "\x00", 4)
	if len(fp) != 5 || len(vp) != 4 {
		return nil, nil, false
	}
	state, err1 := strconv.Atoi(fp[2])
	attempt, err2 := strconv.Atoi(fp[4])
	at, err3 := strconv.ParseInt(vp[0], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, nil, false
	}
	return &pushpb.DeliveryTarget{Uid: fp[0], Platform: fp[1]},
		&pushpb.DeliveryStep{State: receiptpb.State(state), At: at, Sid: fp[3], BoatId: vp[2],
			Acked: vp[1] == "1", Attempt: int32(attempt), Detail: vp[3]}, true
}

// A page token is the last target of the page before, with its seq, so a
// token is refused on another seq: base64url("1" NUL seq NUL uid NUL platform).
func encodeToken(seq int64, uid, platform string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("1\x00" + strconv.FormatInt(seq, 10) + "\x00" + uid + "\x00" + platform))
}

func decodeToken(seq int64, tok string) (uid, platform string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", "", err
	}
	p := strings.Split(string(b), "\x00")
	if len(p) != 4 || p[0] != "1" || p[1] != strconv.FormatInt(seq, 10) || p[2] == "" || p[3] == "" {
		return "", "", errors.New("malformed")
	}
	return p[2], p[3], nil
}
