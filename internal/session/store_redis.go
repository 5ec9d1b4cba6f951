// Package session keeps who is online where, in one Redis hash per user:
// HASH msg/u:<uid>/ss, field sid, value "<platform>-<boat_id>" (named by
// package rkeys, msg/{u:<uid>}/ss on Redis Cluster). There is no heartbeat in
// Redis: boats own liveness, and dirty entries are removed when they are read
// and found dead (see carrier).
//
// Each session is also a member "<uid> <sid>" of its boat's index
// msg/b:<boat>/ss, so that a boat starting again clears what its previous
// run left (ResetBoat). The index may hold more than the hashes, never less:
// every write adds the member before the hash entry and removes it after, so
// a step that fails halfway leaves a member without an entry (ResetBoat's
// HDEL of it does nothing; the boat's ghost sweep reports it and RemoveMany
// drops it), never a recorded session a boat reset would miss.
package session

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/batch"
	"github.com/gomsg/gomsg/internal/rkeys"
)

// ErrUnavailable wraps every Redis failure, so callers can map it.
var ErrUnavailable = errors.New("session store unavailable")

// Session is one open device stream.
type Session struct {
	Sid      string
	Platform string
	BoatID   string
}

func boatMember(uid, sid string) string { return uid + " " + sid }

// Value is the hash value of a session.
func Value(platform, boatID string) string { return platform + "-" + boatID }

// ParseValue splits a hash value; platform names never contain '-'.
func ParseValue(v string) (platform, boatID string, ok bool) {
	platform, boatID, ok = strings.Cut(v, "-")
	return platform, boatID, ok && platform != "" && boatID != ""
}

// Store reads and writes session hashes.
type Store struct {
	rdb  redis.UniversalClient
	keys rkeys.Layout
	add  *redis.Script
	// lists gathers concurrent List calls into pipelines; nil sends one
	// HGETALL per call.
	lists *batch.Coalescer[string, []Session]
}

//go:embed add.lua
var addLua string

// Option configures a Store.
type Option func(*options)

type options struct{ listBatch int }

// WithListBatch caps how many concurrent List calls share one pipeline
// (batch.DefaultMax when n <= 0); n = 1 sends one HGETALL per call, with
// no gathering.
func WithListBatch(n int) Option { return func(o *options) { o.listBatch = n } }

// New returns a store on rdb, in the key layout of rdb (rkeys.Of).
func New(rdb redis.UniversalClient, opts ...Option) *Store {
	o := options{listBatch: batch.DefaultMax}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{rdb: rdb, keys: rkeys.Of(rdb), add: redis.NewScript(addLua)}
	if o.listBatch != 1 {
		s.lists = batch.New(o.listBatch, s.listMany)
	}
	return s
}

// Caps bound the sessions one user may hold; zero is no cap.
type Caps struct {
	PerUID      int
	PerPlatform int
}

// LimitError is a session refused because the user is at a cap.
type LimitError struct {
	// Platform is true when the per-platform cap was reached, false for the
	// per-user one.
	Platform bool
	// Have is how many sessions the user (on the platform) holds.
	Have int
}

func (e *LimitError) Error() string {
	if e.Platform {
		return fmt.Sprintf("%d sessions on this platform already", e.Have)
	}
	return fmt.Sprintf("%d sessions already", e.Have)
}

// orderTTL is how long a user's connect order outlives the user's last
// connect. Losing it is harmless: a session without a number ranks below
// every numbered one, so a new connect still wins.
const orderTTL = 7 * 24 * time.Hour

// Add records a session. With keepNewest it also returns, from the same
// atomic step, the losers: every session of sess.Platform except the newest
// connect (the one whose Add ran last; sids are minted from different boats'
// clocks, so their order is not the connect order), sorted by sid. They are still recorded; the caller kicks
// them. sess itself is a loser when a newer session of its platform is
// recorded, so of two racing adds exactly one survives, whatever the order
// their scripts run in. A user at one of caps gets a *LimitError and no
// session is recorded; the check and the write are one Lua script on the
// user's hash, so concurrent adds cannot pass a cap either.
//
// On a standalone server the script also adds the boat index member, in the
// same atomic step. On Redis Cluster the index and the user's hash are in
// different slots, which one script cannot touch, so the member is added
// first, by its own SADD, and the script then runs on the user's hash alone.
// If the SADD succeeds and the script refuses (a cap) or fails, the index
// holds a member with no session: harmless, ResetBoat's HDEL of it does
// nothing (and on a refusal Add removes it again). The other order could
// record a session missing from its boat's index, which a restart of the
// boat would leave behind, dead.
func (s *Store) Add(ctx context.Context, uid string, sess Session, caps Caps, keepNewest bool) (losers []Session, err error) {
	keep := "0"
	if keepNewest {
		keep = "1"
	}
	member := boatMember(uid, sess.Sid)
	index := s.keys.BoatSessions(sess.BoatID)
	keys := []string{s.keys.Sessions(uid), s.keys.SessionOrder(uid), index}
	if s.keys.IsCluster() {
		if err := s.rdb.SAdd(ctx, index, member).Err(); err != nil {
			return nil, fmt.Errorf("%w: add session %s of %q to the index of boat %s: %v", ErrUnavailable, sess.Sid, uid, sess.BoatID, err)
		}
		keys = keys[:2]
	}
	res, err := s.add.Run(ctx, s.rdb, keys,
		sess.Sid, Value(sess.Platform, sess.BoatID), member,
		caps.PerUID, caps.PerPlatform, sess.Platform+"-", keep, int(orderTTL/time.Second)).StringSlice()
	if err != nil {
		if which, have, ok := parseLimit(err); ok {
			if len(keys) == 2 {
				// The script wrote nothing, so the member names no session.
				// Should this SREM fail, the member stays: a superset, as
				// above, which the boat's ghost sweep reports.
				_ = s.rdb.SRem(ctx, index, member).Err()
			}
			return nil, &LimitError{Platform: which == "platform", Have: have}
		}
		return nil, fmt.Errorf("%w: add session %s of %q: %v", ErrUnavailable, sess.Sid, uid, err)
	}
	m := make(map[string]string, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		m[res[i]] = res[i+1]
	}
	return parse(m), nil
}

// parseLimit reads add.lua's "LIMIT <which> <count>" error.
func parseLimit(err error) (which string, have int, ok bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", 0, false
	}
	rest, ok := strings.CutPrefix(rerr.Error(), "LIMIT ")
	if !ok {
		return "", 0, false
	}
	which, n, _ := strings.Cut(rest, " ")
	have, convErr := strconv.Atoi(n)
	return which, have, convErr == nil
}

// List returns the user's sessions sorted by sid, oldest first. Entries whose
// value cannot be parsed are returned with an empty BoatID, so callers remove
// them as dirty.
//
// Concurrent calls share round trips: a call that finds no List in flight
// sends its HGETALL at once, and calls arriving meanwhile go together in the
// next pipeline (see batch.Coalescer). A caller waiting for a pipeline
// returns ctx.Err() as soon as ctx ends.
func (s *Store) List(ctx context.Context, uid string) ([]Session, error) {
	if s.lists == nil {
		return s.listOne(ctx, uid)
	}
	return s.lists.Do(ctx, uid)
}

func (s *Store) listOne(ctx context.Context, uid string) ([]Session, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Sessions(uid)).Result()
	if err != nil {
		return nil, listError(uid, err)
	}
	return parse(m), nil
}

// listMany reads the hashes of uids in one round trip, with an error per
// uid whose HGETALL failed (all of them when the connection did). On a
// cluster go-redis splits the pipeline by node and sends the parts at once:
// a round trip per node, in parallel, and a node that fails fails only the
// uids it serves. A lone uid is read without a pipeline, which costs
// go-redis less.
func (s *Store) listMany(ctx context.Context, uids []string) ([][]Session, []error) {
	if len(uids) == 1 {
		all, err := s.listOne(ctx, uids[0])
		if err != nil {
			return [][]Session{nil}, []error{err}
		}
		return [][]Session{all}, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(uids))
	// Pipelined's error is that of the first failed command; each command
	// carries its own, which is the one its caller gets.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, uid := range uids {
			cmds[i] = p.HGetAll(ctx, s.keys.Sessions(uid))
		}
		return nil
	})
	out := make([][]Session, len(uids))
	var errs []error
	for i, cmd := range cmds {
		m, err := cmd.Result()
		if err != nil {
			if errs == nil {
				errs = make([]error, len(uids))
			}
			errs[i] = listError(uids[i], err)
			continue
		}
		out[i] = parse(m)
	}
	return out, errs
}

func listError(uid string, err error) error {
	return fmt.Errorf("%w: list sessions of %q: %v", ErrUnavailable, uid, err)
}

// Get returns one session; ok is false when it is not recorded.
func (s *Store) Get(ctx context.Context, uid, sid string) (sess Session, ok bool, err error) {
	v, err := s.rdb.HGet(ctx, s.keys.Sessions(uid), sid).Result()
	if errors.Is(err, redis.Nil) {
		return Session{}, false, nil
	}
	if err != nil {
		return Session{}, false, fmt.Errorf("%w: get session %s of %q: %v", ErrUnavailable, sid, uid, err)
	}
	p, b, _ := ParseValue(v)
	return Session{Sid: sid, Platform: p, BoatID: b}, true, nil
}

// Remove deletes sessions of one user (and their boat index entries).
func (s *Store) Remove(ctx context.Context, uid string, sessions ...Session) error {
	if len(sessions) == 0 {
		return nil
	}
	refs := make([]Ref, len(sessions))
	for i, sess := range sessions {
		refs[i] = Ref{UID: uid, Sid: sess.Sid, BoatID: sess.BoatID}
	}
	_, err := s.RemoveMany(ctx, refs)
	return err
}

// Ref names one session of one user on a boat.
type Ref struct{ UID, Sid, BoatID string }

// RemoveMany deletes sessions of many users (a boat reports disconnects in
// batches): their hash entries, then their boat index members, one SREM
// per boat (see inOrder), in one pipelined round trip, two on a cluster.
//
// removed[i] is the session refs[i] named as it was recorded when this call
// removed it (its HDEL deleted the field), and the zero Session otherwise: a
// session removed already, by an earlier report or by another caller, is
// not reported removed twice. Its value is read just before, in the same
// pipeline.
func (s *Store) RemoveMany(ctx context.Context, refs []Ref) (removed []Session, err error) {
	if len(refs) == 0 {
		return nil, nil
	}
	gets := make([]*redis.SliceCmd, len(refs))
	dels := make([]*redis.IntCmd, len(refs))
	err = s.inOrder(ctx, func(p redis.Pipeliner) {
		for i, r := range refs {
			// HMGET: a field that is gone is a nil value, not the
			// redis.Nil error that would end the pipeline's error check.
			gets[i] = p.HMGet(ctx, s.keys.Sessions(r.UID), r.Sid)
			dels[i] = p.HDel(ctx, s.keys.Sessions(r.UID), r.Sid)
		}
	}, func(p redis.Pipeliner) {
		// One SREM per boat index rather than per session: a page of a
		// boat's reports (or of its clear) is one boat's.
		byBoat := make(map[string][]any, 1)
		var boats []string
		for _, r := range refs {
			if r.BoatID == "" {
				continue
			}
			if _, ok := byBoat[r.BoatID]; !ok {
				boats = append(boats, r.BoatID)
			}
			byBoat[r.BoatID] = append(byBoat[r.BoatID], boatMember(r.UID, r.Sid))
		}
		for _, b := range boats {
			p.SRem(ctx, s.keys.BoatSessions(b), byBoat[b]...)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: remove %d sessions: %v", ErrUnavailable, len(refs), err)
	}
	return removedOf(refs, gets, dels), nil
}

// AddMany records sessions of many users on one boat: their boat index
// members, then their hash entries (see inOrder), in one pipelined round
// trip, two on a cluster.
func (s *Store) AddMany(ctx context.Context, boatID string, refs []Ref, platforms []string) error {
	if len(refs) == 0 {
		return nil
	}
	members := make([]any, len(refs))
	for i, r := range refs {
		members[i] = boatMember(r.UID, r.Sid)
	}
	err := s.inOrder(ctx, func(p redis.Pipeliner) {
		p.SAdd(ctx, s.keys.BoatSessions(boatID), members...)
	}, func(p redis.Pipeliner) {
		for i, r := range refs {
			p.HSet(ctx, s.keys.Sessions(r.UID), r.Sid, Value(platforms[i], boatID))
		}
	})
	if err != nil {
		return fmt.Errorf("%w: add %d sessions: %v", ErrUnavailable, len(refs), err)
	}
	return nil
}

// inOrder sends first's commands and then then's, such that then's take
// effect only after first's: it keeps a boat's index a superset of the
// sessions recorded for the boat (see the package comment) when a pipeline
// fails halfway. A standalone server runs a pipeline in order, and a
// connection lost midway ends it after some prefix, so one pipeline holds
// both. go-redis splits a cluster pipeline by node and sends the parts at
// once, so on a cluster then is sent only once every command of first has
// succeeded. The error is that of the first failed command.
func (s *Store) inOrder(ctx context.Context, first, then func(p redis.Pipeliner)) error {
	if !s.keys.IsCluster() {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			first(p)
			then(p)
			return nil
		})
		return err
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { first(p); return nil }); err != nil {
		return err
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { then(p); return nil })
	return err
}

// CountBoat is how many sessions are recorded for boatID (the size of its
// index, which may hold a few more than the hashes; see the package comment).
func (s *Store) CountBoat(ctx context.Context, boatID string) (int64, error) {
	n, err := s.rdb.SCard(ctx, s.keys.BoatSessions(boatID)).Result()
	if err != nil {
		return 0, fmt.Errorf("%w: count boat %s: %v", ErrUnavailable, boatID, err)
	}
	return n, nil
}

// ScanPage is the COUNT a ScanBoat page asks for. Redis may return more
// or fewer members a page.
const ScanPage = 500

// ScanBoat returns one page of the sessions recorded for boatID (SSCAN of
// its index, cursor 0 to start) and the next cursor, 0 at the end.
func (s *Store) ScanBoat(ctx context.Context, boatID string, cursor uint64) ([]Ref, uint64, error) {
	members, next, err := s.rdb.SScan(ctx, s.keys.BoatSessions(boatID), cursor, "", ScanPage).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: scan boat %s: %v", ErrUnavailable, boatID, err)
	}
	refs := make([]Ref, 0, len(members))
	for _, m := range members {
		uid, sid, _ := strings.Cut(m, " ")
		refs = append(refs, Ref{UID: uid, Sid: sid, BoatID: boatID})
	}
	return refs, next, nil
}

// ResetBoat removes every session recorded for boatID, in batches, and
// returns how many it removed. A batch's members leave the index only after
// their hash entries are gone (see inOrder): a reset that fails midway keeps
// the rest in the index, so the boat's retry finds them.
func (s *Store) ResetBoat(ctx context.Context, boatID string) (int, error) {
	key := s.keys.BoatSessions(boatID)
	removed := 0
	for {
		members, err := s.rdb.SRandMemberN(ctx, key, 500).Result()
		if err != nil {
			return removed, fmt.Errorf("%w: reset boat %s: %v", ErrUnavailable, boatID, err)
		}
		if len(members) == 0 {
			return removed, nil
		}
		var srem *redis.IntCmd
		err = s.inOrder(ctx, func(p redis.Pipeliner) {
			for _, m := range members {
				uid, sid, _ := strings.Cut(m, " ")
				p.HDel(ctx, s.keys.Sessions(uid), sid)
			}
		}, func(p redis.Pipeliner) {
			args := make([]any, len(members))
			for i, m := range members {
				args[i] = m
			}
			srem = p.SRem(ctx, key, args...)
		})
		if err != nil {
			return removed, fmt.Errorf("%w: reset boat %s: %v", ErrUnavailable, boatID, err)
		}
		removed += int(srem.Val())
	}
}

// removedOf reads a pipeline's HMGET and HDEL of each ref's field: the
// session as recorded where HDEL deleted it, the zero Session elsewhere.
func removedOf(refs []Ref, gets []*redis.SliceCmd, dels []*redis.IntCmd) []Session {
	out := make([]Session, len(refs))
	for i, r := range refs {
		if dels[i].Val() != 1 {
			continue
		}
		var value string
		if v := gets[i].Val(); len(v) == 1 {
			value, _ = v[0].(string)
		}
		platform, boatID, _ := ParseValue(value)
		out[i] = Session{Sid: r.Sid, Platform: platform, BoatID: boatID}
	}
	return out
}

func parse(m map[string]string) []Session {
	out := make([]Session, 0, len(m))
	for sid, v := range m {
		p, b, _ := ParseValue(v)
		out = append(out, Session{Sid: sid, Platform: p, BoatID: b})
	}
	sort.Slice(out, func(i, j int) bool { return Less(out[i].Sid, out[j].Sid) })
	return out
}

// ConnectOrder returns the user's connect order, as Add records it when it
// keeps only the newest session of a platform: sid → the how-manieth connect
// of the user recorded it. Sessions recorded without a number are absent.
func (s *Store) ConnectOrder(ctx context.Context, uid string) (map[string]int64, error) {
	flat, err := s.rdb.HGetAll(ctx, s.keys.SessionOrder(uid)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: connect order of %q: %v", ErrUnavailable, uid, err)
	}
	order := make(map[string]int64, len(flat))
	for sid, n := range flat {
		if sid == orderCounter {
			continue
		}
		if v, err := strconv.ParseInt(n, 10, 64); err == nil {
			order[sid] = v
		}
	}
	return order, nil
}

// orderCounter is the connect order's field holding the last number given.
const orderCounter = "#"

// OlderConnect reports whether session a connected before session b, in
// the order Add ranks them: by connect order (order, from ConnectOrder), a
// session without a number before every numbered one, and by sid (Less)
// between two without.
func OlderConnect(order map[string]int64, a, b string) bool {
	if oa, ob := order[a], order[b]; oa != ob {
		return oa < ob
	}
	return Less(a, b)
}

// Less orders sids by age: sids are decimal time-sortable ids, so a shorter
// one is older, and equal lengths compare as strings.
func Less(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}
