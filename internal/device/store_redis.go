// Package device is the registry of device tokens for mobile notifications,
// kept next to the user's other Redis keys:
//
//	HASH msg/u:<uid>/dv   field "<platform>/<provider>/<token>"
//	                      value JSON {"app_id":"…","registered_at":<unix ms>}
//
// The field is the identity of a device, so registering the same token again
// overwrites one entry instead of adding a second. Station writes it (Push
// API), horn reads it and removes tokens the provider rejects.
package device

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable wraps every Redis failure.
var ErrUnavailable = errors.New("device store unavailable")

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

// Key is the user's device hash.
func Key(uid string) string { return "msg/u:" + uid + "/dv" }

// Field is a device's field in the hash. Platform and provider names never
// contain '/', and tokens are validated not to.
func Field(platform, provider, token string) string {
	return platform + "/" + provider + "/" + token
}

// Store reads and writes device hashes.
type Store struct {
	rdb redis.UniversalClient
}

// New returns a store on rdb.
func New(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// Register records d; it reports whether the token is new.
func (s *Store) Register(ctx context.Context, d Device) (bool, error) {
	v, err := json.Marshal(value{AppID: d.AppID, RegisteredAt: d.RegisteredAt})
	if err != nil {
		return false, fmt.Errorf("marshal device: %w", err)
	}
	n, err := s.rdb.HSet(ctx, Key(d.UID), Field(d.Platform, d.Provider, d.Token), v).Result()
	if err != nil {
		return false, fmt.Errorf("%w: register device of %q: %w", ErrUnavailable, d.UID, err)
	}
	return n == 1, nil
}

// Remove deletes a token; it reports whether it was registered.
func (s *Store) Remove(ctx context.Context, uid, platform, provider, token string) (bool, error) {
	n, err := s.rdb.HDel(ctx, Key(uid), Field(platform, provider, token)).Result()
	if err != nil {
		return false, fmt.Errorf("%w: remove device of %q: %w", ErrUnavailable, uid, err)
	}
	return n == 1, nil
}

// List returns the user's devices sorted by platform, provider and token;
// a non-empty platform keeps only that platform's.
func (s *Store) List(ctx context.Context, uid, platform string) ([]Device, error) {
	all, err := s.rdb.HGetAll(ctx, Key(uid)).Result()
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
