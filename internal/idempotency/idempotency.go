// Package idempotency remembers Push requests by their idempotency key, in
// Redis: STRING msg/push/idem:<key>, "p:<fingerprint>:<token>" while the
// first request is in flight (for at most PendingTTL), then
// "d:<fingerprint>:<seq,seq,…>" for the idempotency window. The name is the
// same in both of package rkeys' layouts; each script touches that one key,
// so it runs on Redis Cluster as on a standalone server.
package idempotency

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
)

// ErrUnavailable wraps every Redis failure.
var ErrUnavailable = errors.New("idempotency store unavailable")

// State is what a reservation found.
type State int

const (
	// Reserved: the key was free; the caller owns it and must Complete or
	// Release the Reservation.
	Reserved State = iota
	// Done: a request with the same fingerprint completed; Seqs holds its
	// seqs.
	Done
	// InFlight: a request with the same fingerprint holds the key and has
	// not completed yet.
	InFlight
	// Conflict: the key belongs to a different request.
	Conflict
)

// Reservation is the outcome of Reserve.
type Reservation struct {
	State State
	Seqs  []int64
	key   string
	value string
}

// Store reserves and settles idempotency keys.
type Store struct {
	rdb             redis.UniversalClient
	keys            rkeys.Layout
	reserve, settle *redis.Script
}

//go:embed reserve.lua
var reserveLua string

//go:embed settle.lua
var settleLua string

// New returns a store on rdb, in the key layout of rdb (rkeys.Of).
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, keys: rkeys.Of(rdb), reserve: redis.NewScript(reserveLua), settle: redis.NewScript(settleLua)}
}

// Reserve takes key for a request with fingerprint fp for pending (the
// longest the request may be in flight), or reports who holds it.
func (s *Store) Reserve(ctx context.Context, key, fp string, pending time.Duration) (*Reservation, error) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	r := &Reservation{key: s.keys.Idempotency(key), value: "p:" + fp + ":" + hex.EncodeToString(tok[:])}
	v, err := s.reserve.Run(ctx, s.rdb, []string{r.key}, r.value, pending.Milliseconds()).Text()
	switch {
	case errors.Is(err, redis.Nil):
		r.State = Reserved
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("%w: reserve %q: %v", ErrUnavailable, key, err)
	}
	kind, rest, _ := strings.Cut(v, ":")
	gotFP, rest, _ := strings.Cut(rest, ":")
	switch {
	case gotFP != fp:
		r.State = Conflict
	case kind == "d":
		r.State = Done
		for _, f := range strings.Split(rest, ",") {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s holds %q", ErrUnavailable, r.key, v)
			}
			r.Seqs = append(r.Seqs, n)
		}
	default:
		r.State = InFlight
	}
	return r, nil
}

// Complete records the seqs of a reserved request for window. It returns
// false when the reservation had lapsed (PendingTTL passed) and was not
// the caller's any more.
func (s *Store) Complete(ctx context.Context, r *Reservation, seqs []int64, window time.Duration) (bool, error) {
	fp, _, _ := strings.Cut(strings.TrimPrefix(r.value, "p:"), ":")
	f := make([]string, len(seqs))
	for i, n := range seqs {
		f[i] = strconv.FormatInt(n, 10)
	}
	return s.run(ctx, r, "d:"+fp+":"+strings.Join(f, ","), window.Milliseconds())
}

// Release gives up a reservation so a retry can publish.
func (s *Store) Release(ctx context.Context, r *Reservation) error {
	_, err := s.run(ctx, r, "", 0)
	return err
}

func (s *Store) run(ctx context.Context, r *Reservation, done string, ms int64) (bool, error) {
	n, err := s.settle.Run(ctx, s.rdb, []string{r.key}, r.value, done, ms).Int()
	if err != nil {
		return false, fmt.Errorf("%w: settle %s: %v", ErrUnavailable, r.key, err)
	}
	return n == 1, nil
}
