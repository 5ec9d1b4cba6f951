// Package apikey holds the API keys business backends use on the Push API:
// keys are configured as SHA-256 hashes with scopes, so the configuration
// never holds a usable key, and a presented key is checked by hashing it and
// comparing the hash with every configured one in constant time.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Scope is what a key may do.
type Scope string

// The Push API's scopes.
const (
	Push      Scope = "push"      // Push
	Kickout   Scope = "kickout"   // Kickout
	Online    Scope = "online"    // Online, RoomOnline
	Devices   Scope = "devices"   // RegisterDevice, UnregisterDevice, ListDevices
	Broadcast Scope = "broadcast" // BroadcastRoom, BroadcastAll
	Delivery  Scope = "delivery"  // GetDelivery: reads what became of pushed messages
	DLQ       Scope = "dlq"       // ListDeadLetters, GetDeadLetter, RedriveDeadLetters, PurgeDeadLetters
	Console   Scope = "console"   // the admin console's pages (read); its actions need their own scope too
	All       Scope = "*"         // every scope
)

// Scopes are the known scopes, All last.
var Scopes = []Scope{Push, Kickout, Online, Devices, Broadcast, Delivery, DLQ, Console, All}

// DevKey is the key `gomsg dev` accepts and gomsgctl sends by default. It is
// public: every service but `gomsg dev` refuses it.
const DevKey = "gomsg-dev-key-do-not-use-in-production"

// Errors of a check; the reason label of gomsg_auth_failures_total is
// Reason(err).
var (
	ErrMissing = errors.New("no API key: send authorization: Bearer <key>")
	ErrInvalid = errors.New("API key not valid")
	ErrScope   = errors.New("API key lacks the scope")
)

// Reason is the metric label of a check's error.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrMissing):
		return "missing"
	case errors.Is(err, ErrScope):
		return "scope"
	default:
		return "invalid"
	}
}

// Key is one configured credential: an API key, kept as its SHA-256 Hash,
// or, when Cert is set, a client certificate verified against the Push API's
// client CA (--push-client-ca-file) whose subject common name, DNS name or URI
// is Cert.
type Key struct {
	Hash   [sha256.Size]byte
	Cert   string
	Scopes []Scope
	Name   string
}

// Allows reports whether the key has scope s.
func (k *Key) Allows(s Scope) bool {
	return slices.Contains(k.Scopes, All) || slices.Contains(k.Scopes, s)
}

// Hash is the SHA-256 of a key.
func Hash(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// Line is the configuration line of key.
func Line(key string, scopes []Scope, name string) string {
	h := Hash(key)
	ss := make([]string, len(scopes))
	for i, s := range scopes {
		ss[i] = string(s)
	}
	line := hex.EncodeToString(h[:]) + " " + strings.Join(ss, ",")
	if name != "" {
		line += " " + name
	}
	return line
}

// Generate returns a new random key (256 bits, URL-safe base64 with a gmk_
// prefix so that leaked keys are easy to search for).
func Generate() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "gmk_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseScopes reads "push,kickout".
func ParseScopes(v string) ([]Scope, error) {
	var out []Scope
	for _, s := range strings.Split(v, ",") {
		sc := Scope(strings.TrimSpace(s))
		if !slices.Contains(Scopes, sc) {
			return nil, fmt.Errorf("unknown scope %q (known: push, kickout, online, devices, broadcast, delivery, dlq, console, *)", s)
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// CertPrefix starts a line naming a client certificate instead of a key
// hash: `cert:<name> <scope,scope> [label]`.
const CertPrefix = "cert:"

// Parse reads key lines: `<sha256-hex> <scope,scope> [name]` or
// `cert:<certificate name> <scope,scope> [name]`, one per line (or separated
// by ';'), blank lines and # comments ignored.
func Parse(text string) ([]Key, error) {
	var keys []Key
	text = strings.ReplaceAll(text, ";", "\n")
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want `<sha256-hex> <scope,scope> [name]` or `cert:<certificate name> <scope,scope> [name]`", n+1)
		}
		scopes, err := ParseScopes(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		k := Key{Scopes: scopes}
		if id, ok := strings.CutPrefix(f[0], CertPrefix); ok {
			if id == "" {
				return nil, fmt.Errorf("line %d: %s needs the client certificate's name (its subject common name, a DNS name or a URI)", n+1, CertPrefix)
			}
			k.Cert = id
		} else {
			raw, err := hex.DecodeString(f[0])
			if err != nil || len(raw) != sha256.Size {
				return nil, fmt.Errorf("line %d: %q is not a SHA-256 in hex (64 characters; `gomsg keygen` prints one)", n+1, short(f[0]))
			}
			copy(k.Hash[:], raw)
		}
		if len(f) == 3 {
			k.Name = f[2]
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// short keeps a bad value out of logs when it may be a key pasted by mistake.
func short(s string) string {
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return s
}

// Set is an immutable set of keys.
type Set struct {
	keys []Key
}

// NewSet makes a set.
func NewSet(keys []Key) *Set { return &Set{keys: slices.Clone(keys)} }

// Len is the number of keys.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// Has reports whether a key with this hash is in the set.
func (s *Set) Has(h [sha256.Size]byte) bool {
	return s.find(h) != nil
}

// Check finds the key presented and checks its scope. The presented key is
// hashed once and compared with every configured hash in constant time, so
// the time taken does not depend on how much of a hash matched or which key
// it was.
func (s *Set) Check(presented string, scope Scope) (*Key, error) {
	if presented == "" {
		return nil, ErrMissing
	}
	k := s.find(Hash(presented))
	if k == nil {
		return nil, ErrInvalid
	}
	if scope != "" && !k.Allows(scope) {
		return k, fmt.Errorf("%w %q", ErrScope, scope)
	}
	return k, nil
}

// CheckCert finds the certificate line naming one of ids (the names of a
// verified client certificate, CertNames) and checks its scope.
func (s *Set) CheckCert(ids []string, scope Scope) (*Key, error) {
	if len(ids) == 0 {
		return nil, ErrMissing
	}
	var found *Key
	if s != nil {
		for i := range s.keys {
			if k := &s.keys[i]; k.Cert != "" && slices.Contains(ids, k.Cert) {
				found = k
				break
			}
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no %s line names the client certificate %q", ErrInvalid, CertPrefix, ids[0])
	}
	if scope != "" && !found.Allows(scope) {
		return found, fmt.Errorf("%w %q", ErrScope, scope)
	}
	return found, nil
}

func (s *Set) find(h [sha256.Size]byte) *Key {
	if s == nil {
		return nil
	}
	var found *Key
	for i := range s.keys {
		if s.keys[i].Cert == "" && subtle.ConstantTimeCompare(s.keys[i].Hash[:], h[:]) == 1 {
			found = &s.keys[i]
		}
	}
	return found
}

// Bearer returns the credential of an `authorization` value "Bearer <key>"
// (scheme case-insensitive), or "" when there is none.
func Bearer(v string) string {
	const p = "bearer "
	if len(v) < len(p) || !strings.EqualFold(v[:len(p)], p) {
		return ""
	}
	return strings.TrimSpace(v[len(p):])
}
