// Package device is the registry of device tokens for mobile notifications,
// kept next to the user's other Redis keys (named by package rkeys;
// msg/{u:<uid>}/dv on Redis Cluster):
//
//	HASH msg/u:<uid>/dv   field "<platform>/<provider>/<token>"
//	                      value JSON {"app_id":"…","registered_at":<unix ms>}
//
// The field is the identity of a device, so registering the same token again
// overwrites one entry instead of adding a second. Station writes it (Push
// API, and devices over their own session), horn reads it and removes tokens
// the provider rejects.
//
// A registration runs register.lua (embedded below), which also evicts the
// user's oldest tokens beyond a cap, in the same atomic step. With a session
// check it reads the user's session hash too: both are keys of one user,
// which the cluster layout puts in one hash slot, so the script runs on
// Redis Cluster as on a standalone server.
package device

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
)

// ErrUnavailable wraps every Redis failure.
var ErrUnavailable = errors.New("device store unavailable")

// ErrNoSession is returned by Register when the session it was asked to
// check is not recorded for the user with the expected value.
var ErrNoSession = errors.New("no such session")

//go:embed register.lua
var registerLua string

// Device is one registered token.
type Device struct {
	UID      string
	Platform string
	Provider string
	Token    string
	AppID    string
	// RegisteredAt is unix milliseconds of the last registration.
	RegisteredAt int64
}

// value is the JSON stored in the hash.
type value struct {
	AppID        string `json:"app_id,omitempty"`
	RegisteredAt int64  `json:"registered_at"`
}

// Field is a device's field in the hash. Platform and provider names never
// contain '/', and tokens are validated not to.
func Field(platform, provider, token string) string {
	return platform + "/" + provider + "/" + token
}

// Store reads and writes device hashes.
type Store struct {
	rdb      redis.UniversalClient
	keys     rkeys.Layout
	register *redis.Script
}

// New returns a store on rdb, in the key layout of rdb (rkeys.Of).
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, keys: rkeys.Of(rdb), register: redis.NewScript(registerLua)}
}

// Owner is a session a registration must belong to: the session hash of the
// device's uid must hold Sid with the value "<platform>-<boat_id>"
// (session.Value). The store names that hash itself, so an owner cannot be
// another user's session.
type Owner struct {
	Sid   string
	Value string
}

// Registered is the outcome of a Register.
type Registered struct {
	// Added is false when the token was registered already (it was
	// refreshed: app_id and time replaced).
	Added bool
	// RegisteredAt is the time Redis recorded, unix ms; it is later than
	// that of every other token of the user.
	RegisteredAt int64
	// Evicted are the user's oldest tokens removed to keep the cap.
	Evicted []Device
}

// Register records d, whose RegisteredAt is ignored (Redis' clock is used).
// When the user then holds more than limit tokens (limit > 0), the oldest others
// are removed in the same atomic step; registering a token again evicts
// nothing. With owner set, nothing is written unless owner's session is
// recorded as given (ErrNoSession).
func (s *Store) Register(ctx context.Context, d Device, limit int, owner *Owner) (Registered, error) {
	appID := ""
	if d.AppID != "" {
		b, err := json.Marshal(d.AppID)
		if err != nil {
			return Registered{}, fmt.Errorf("marshal app_id: %w", err)
		}
		appID = string(b)
	}
	keys := []string{s.keys.Devices(d.UID)}
	args := []any{Field(d.Platform, d.Provider, d.Token), appID, strconv.Itoa(max(limit, 0))}
	if owner != nil {
		keys = append(keys, s.keys.Sessions(d.UID))
		args = append(args, owner.Sid, owner.Value)
	}
	// Run sends EVALSHA and, on NOSCRIPT (a restarted Redis, SCRIPT FLUSH),
	// EVAL, which runs it once and caches it.
	res, err := s.register.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return Registered{}, fmt.Errorf("%w: register device of %q: %w", ErrUnavailable, d.UID, err)
	}
	if len(res) == 1 {
		return Registered{}, fmt.Errorf("register device of %q: session %q: %w", d.UID, owner.Sid, ErrNoSession)
	}
	if len(res) < 2 {
		return Registered{}, fmt.Errorf("%w: register device of %q: unexpected reply %v", ErrUnavailable, d.UID, res)
	}
	added, _ := res[0].(int64)
	at, _ := res[1].(string)
	out := Registered{Added: added == 1}
	out.RegisteredAt, _ = strconv.ParseInt(at, 10, 64)
	for _, f := range res[2:] {
		fs, _ := f.(string)
		if parts := strings.SplitN(fs, "/", 3); len(parts) == 3 {
			out.Evicted = append(out.Evicted, Device{UID: d.UID, Platform: parts[0], Provider: parts[1], Token: parts[2]})
		}
	}
	return out, nil
}

// Remove deletes a token; it reports whether it was registered.
func (s *Store) Remove(ctx context.Context, uid, platform, provider, token string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.keys.Devices(uid), Field(platform, provider, token)).Result()
	if err != nil {
		return false, fmt.Errorf("%w: remove device of %q: %w", ErrUnavailable, uid, err)
	}
	return n == 1, nil
}

// List returns the user's devices sorted by platform, provider and token;
// a non-empty platform keeps only that platform's.
func (s *Store) List(ctx context.Context, uid, platform string) ([]Device, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Devices(uid)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: list devices of %q: %w", ErrUnavailable, uid, err)
	}
	out := make([]Device, 0, len(all))
	for f, raw := range all {
		parts := strings.SplitN(f, "/", 3)
		if len(parts) != 3 || (platform != "" && parts[0] != platform) {
			continue
		}
		var v value
		_ = json.Unmarshal([]byte(raw), &v) // a bad value still names a usable token
		out = append(out, Device{UID: uid, Platform: parts[0], Provider: parts[1], Token: parts[2],
			AppID: v.AppID, RegisteredAt: v.RegisteredAt})
	}
	sort.Slice(out, func(i, j int) bool {
		return Field(out[i].Platform, out[i].Provider, out[i].Token) < Field(out[j].Platform, out[j].Provider, out[j].Token)
	})
	return out, nil
}
