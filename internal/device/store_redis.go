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
//
// A token belongs to one user at a time: a shared device that signs out of
// one user and into another registers its token for the second, and the
// first must stop getting notifications on it at once (they show previews
// of the first user's messages). The owner of each token is kept under its
// own key,
//
//	msg/dt:<platform>/<provider>/<token>   string "<gen> <uid>"
//
// and List returns a user's entry only while that key names the user (or is
// absent: entries written before owners were kept). Registering claims the
// token first (claim.lua, one atomic step on that one key): from then on
// the earlier owner's entry is invisible to every reader, horn included, so
// the move is atomic as seen from outside. The owner key and the two users'
// hashes lie in three hash slots on a cluster, so the rest follows as single-
// slot steps, each safe if the next never runs: register.lua writes the entry
// for the new owner, then release.lua deletes the earlier owner's entry
// unless it was written under a later claim (the earlier owner took the
// token back meanwhile). A leftover entry stays hidden, and List removes it
// when it meets it. A registration refused for its session puts the earlier
// owner back, unless another claim came since.
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

var (
	//go:embed register.lua
	registerLua string
	//go:embed claim.lua
	claimLua string
	//go:embed disown.lua
	disownLua string
	//go:embed release.lua
	releaseLua string
)

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
	claim    *redis.Script
	disown   *redis.Script
	release  *redis.Script
}

// New returns a store on rdb, in the key layout of rdb (rkeys.Of).
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, keys: rkeys.Of(rdb), register: redis.NewScript(registerLua),
		claim: redis.NewScript(claimLua), disown: redis.NewScript(disownLua), release: redis.NewScript(releaseLua)}
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
	// MovedFrom is the uid that owned the token until this registration,
	// or "" when it was unowned or the registering user's.
	MovedFrom string
}

// Register records d, whose RegisteredAt is ignored (Redis' clock is used),
// and makes d.UID the token's only owner: another user's entry for it stops
// being listed at once and is removed. When the user then holds more than
// limit tokens (limit > 0), the oldest others are removed in the same atomic
// step as the write; registering a token again evicts nothing. With owner
// set, nothing is written unless owner's session is recorded as given
// (ErrNoSession), and the token stays with whoever owned it.
func (s *Store) Register(ctx context.Context, d Device, limit int, owner *Owner) (Registered, error) {
	appID := ""
	if d.AppID != "" {
		b, err := json.Marshal(d.AppID)
		if err != nil {
			return Registered{}, fmt.Errorf("marshal app_id: %w", err)
		}
		appID = string(b)
	}
	field := Field(d.Platform, d.Provider, d.Token)
	okey := s.keys.DeviceOwner(field)
	claimed, err := s.claim.Run(ctx, s.rdb, []string{okey}, d.UID).StringSlice()
	if err != nil {
		return Registered{}, fmt.Errorf("%w: claim device token of %q: %w", ErrUnavailable, d.UID, err)
	}
	if len(claimed) != 2 {
		return Registered{}, fmt.Errorf("%w: claim device token of %q: unexpected reply %v", ErrUnavailable, d.UID, claimed)
	}
	prev, gen := claimed[0], claimed[1]
	prevUID, _ := parseOwner(prev)

	keys := []string{s.keys.Devices(d.UID)}
	args := []any{field, appID, strconv.Itoa(max(limit, 0)), "", "", gen}
	if owner != nil {
		keys = append(keys, s.keys.Sessions(d.UID))
		args[3], args[4] = owner.Sid, owner.Value
	}
	// Run sends EVALSHA and, on NOSCRIPT (a restarted Redis, SCRIPT FLUSH),
	// EVAL, which runs it once and caches it.
	res, err := s.register.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil || len(res) == 1 {
		// Nothing was written: give the token back to its earlier owner,
		// unless someone claimed it since. If this fails too, the token is
		// owned by a user whose hash lacks it: nobody gets its
		// notifications until it is registered again, which is the safe
		// side.
		_ = s.disown.Run(context.WithoutCancel(ctx), s.rdb, []string{okey}, d.UID, gen, prev).Err()
	}
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
			// The evicted token's owner key would otherwise outlive it.
			_ = s.disown.Run(ctx, s.rdb, []string{s.keys.DeviceOwner(fs)}, d.UID, "", "").Err()
		}
	}
	if prevUID != "" && prevUID != d.UID {
		out.MovedFrom = prevUID
		// Failing here leaves the earlier owner's entry hidden; List
		// removes it when it meets it.
		_ = s.release.Run(ctx, s.rdb, []string{s.keys.Devices(prevUID)}, field, gen).Err()
	}
	return out, nil
}

// parseOwner splits an owner key's value "<gen> <uid>".
func parseOwner(v string) (uid, gen string) {
	gen, uid, ok := strings.Cut(v, " ")
	if !ok {
		return "", ""
	}
	return uid, gen
}

// Remove deletes a token; it reports whether it was registered.
// The token's owner key goes too, unless another user owns it.
func (s *Store) Remove(ctx context.Context, uid, platform, provider, token string) (bool, error) {
	field := Field(platform, provider, token)
	n, err := s.rdb.HDel(ctx, s.keys.Devices(uid), field).Result()
	if err != nil {
		return false, fmt.Errorf("%w: remove device of %q: %w", ErrUnavailable, uid, err)
	}
	if err := s.disown.Run(ctx, s.rdb, []string{s.keys.DeviceOwner(field)}, uid, "", "").Err(); err != nil {
		return false, fmt.Errorf("%w: remove device owner of %q: %w", ErrUnavailable, uid, err)
	}
	return n == 1, nil
}

// List returns the user's devices sorted by platform, provider and token;
// a non-empty platform keeps only that platform's. A token another user has
// registered since is not the user's any more: it is left out (and removed).
func (s *Store) List(ctx context.Context, uid, platform string) ([]Device, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Devices(uid)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: list devices of %q: %w", ErrUnavailable, uid, err)
	}
	fields := make([]string, 0, len(all))
	for f := range all {
		if parts := strings.SplitN(f, "/", 3); len(parts) == 3 && (platform == "" || parts[0] == platform) {
			fields = append(fields, f)
		}
	}
	// One GET per owner key: they lie in many slots on a cluster, where
	// the pipeline sends each to its node.
	owners := make([]*redis.StringCmd, len(fields))
	if len(fields) > 0 {
		pipe := s.rdb.Pipeline()
		for i, f := range fields {
			owners[i] = pipe.Get(ctx, s.keys.DeviceOwner(f))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("%w: list device owners of %q: %w", ErrUnavailable, uid, err)
		}
	}
	out := make([]Device, 0, len(fields))
	for i, f := range fields {
		if ov, err := owners[i].Result(); err == nil {
			if ouid, gen := parseOwner(ov); gen != "" && ouid != uid {
				_ = s.release.Run(ctx, s.rdb, []string{s.keys.Devices(uid)}, f, gen).Err()
				continue
			}
		}
		raw := all[f]
		parts := strings.SplitN(f, "/", 3)
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
