package apikey

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Config says where the keys come from.
type Config struct {
	// Keys are key lines given inline (GOMSG_API_KEYS), separated by
	// newlines or ';'.
	Keys string
	// File holds key lines (--api-keys-file); it is read again when it
	// changes.
	File string
	// Dev accepts DevKey with every scope. Without Dev, DevKey is refused
	// and at least one key must be configured.
	Dev bool
	// Poll is how often File is checked for changes (default 2s).
	Poll time.Duration
	// Grace is how long the keys File held stay in force once the file
	// cannot be used (deleted, emptied, unreadable, a bad line): long
	// enough for a file being rewritten or a volume being remounted, short
	// enough that an accident does not keep revoked keys alive. After it
	// they are dropped; the inline keys stay. 0: DefaultGrace.
	Grace time.Duration
}

// DefaultGrace is Config.Grace when none is given (--api-keys-grace).
const DefaultGrace = time.Minute

// Store is the live key set: the inline keys plus the file's, swapped
// atomically when the file changes.
type Store struct {
	cfg Config
	log *zap.Logger
	env []Key
	cur atomic.Pointer[Set]

	mu       sync.Mutex // serialises reloads
	fileHash [sha256.Size]byte
	// badSince is when the file became unusable (zero while it is fine);
	// dropped is set once its keys were dropped for it.
	badSince time.Time
	dropped  bool
	now      func() time.Time

	unusable prometheus.Gauge   // 1 while the file cannot be used
	drops    prometheus.Counter // the file's keys dropped after Grace
}

// Instrument reports the file's state on unusable (1 while the file cannot
// be used) and counts on dropped each time its keys are dropped after
// Grace. Call it before Run.
func (s *Store) Instrument(unusable prometheus.Gauge, dropped prometheus.Counter) {
	s.unusable, s.drops = unusable, dropped
}

var devHash = Hash(DevKey)

// NewStore reads the keys; a bad line, a file that cannot be read, the
// public dev key outside dev, or no key at all outside dev is an error naming
// the setting.
func NewStore(cfg Config, log *zap.Logger) (*Store, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("--api-keys-grace: %s, must not be negative", cfg.Grace)
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	s := &Store{cfg: cfg, log: log.With(zap.String("component", "apikeys")), now: time.Now}
	env, err := Parse(cfg.Keys)
	if err != nil {
		return nil, fmt.Errorf("--api-keys (GOMSG_API_KEYS): %w", err)
	}
	if err := s.checkDev(env); err != nil {
		return nil, fmt.Errorf("--api-keys (GOMSG_API_KEYS): %w", err)
	}
	s.env = env
	var file []Key
	if cfg.File != "" {
		var h [sha256.Size]byte
		if file, h, err = s.readFile(); err != nil {
			return nil, fmt.Errorf("--api-keys-file %s: %w", cfg.File, err)
		}
		s.fileHash = h
	}
	set := s.combine(file)
	if set.Len() == 0 {
		return nil, errors.New("no API key configured: set --api-keys-file or GOMSG_API_KEYS (`gomsg keygen` makes a key and its line)")
	}
	s.cur.Store(set)
	return s, nil
}

func (s *Store) checkDev(keys []Key) error {
	if s.cfg.Dev {
		return nil
	}
	for _, k := range keys {
		if k.Hash == devHash {
			return errors.New("the public dev key is only accepted by `gomsg dev`")
		}
	}
	return nil
}

func (s *Store) combine(file []Key) *Set {
	keys := append(append([]Key{}, s.env...), file...)
	if s.cfg.Dev {
		keys = append(keys, Key{Hash: devHash, Scopes: []Scope{All}, Name: "dev"})
	}
	return NewSet(keys)
}

// readFile reads and parses the file. A file with nothing in it is an error
// (a file being written, or a mount gone wrong); a file of comments only is
// not: it revokes every key it held.
func (s *Store) readFile() ([]Key, [sha256.Size]byte, error) {
	b, err := os.ReadFile(s.cfg.File)
	if err != nil {
		return nil, [sha256.Size]byte{}, err
	}
	h := sha256.Sum256(b)
	if strings.TrimSpace(string(b)) == "" {
		return nil, h, errors.New("empty (a file of # comments only revokes every key)")
	}
	keys, err := Parse(string(b))
	if err != nil {
		return nil, h, err
	}
	if err := s.checkDev(keys); err != nil {
		return nil, h, err
	}
	return keys, h, nil
}

// Check checks a presented key against the current keys.
func (s *Store) Check(presented string, scope Scope) (*Key, error) {
	return s.cur.Load().Check(presented, scope)
}

// CheckCert checks a verified client certificate's names (CertNames)
// against the current certificate lines.
func (s *Store) CheckCert(ids []string, scope Scope) (*Key, error) {
	return s.cur.Load().CheckCert(ids, scope)
}

// Len is the number of keys in force.
func (s *Store) Len() int { return s.cur.Load().Len() }

// Reload reads the file again if its content changed. When the file cannot
// be used (deleted, emptied, unreadable, a bad line) the keys it held stay
// in force for Grace, with an ERROR logged and the unusable gauge at 1;
// after Grace they are dropped, so that an accident does not keep revoked
// keys alive. A file of # comments only is not an accident: it revokes its
// keys at once.
func (s *Store) Reload() error {
	if s.cfg.File == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, h, err := s.readFile()
	if err != nil {
		s.fileUnusable(h, err)
		return fmt.Errorf("--api-keys-file %s: %w", s.cfg.File, err)
	}
	if h == s.fileHash && s.badSince.IsZero() {
		return nil // unchanged
	}
	if !s.badSince.IsZero() {
		s.log.Info("API key file usable again", zap.String("file", s.cfg.File),
			zap.Duration("unusable_for", s.now().Sub(s.badSince)))
		s.badSince, s.dropped = time.Time{}, false
		if s.unusable != nil {
			s.unusable.Set(0)
		}
	}
	s.fileHash = h
	set := s.combine(keys)
	s.cur.Store(set)
	s.log.Info("API keys reloaded", zap.String("file", s.cfg.File), zap.Int("file_keys", len(keys)), zap.Int("keys", set.Len()))
	return nil
}

// fileUnusable handles a read of the file that failed: err is logged when
// the failure starts and whenever the file's content changes (not on every
// poll), and the file's keys are dropped once it has lasted Grace.
func (s *Store) fileUnusable(h [sha256.Size]byte, err error) {
	now := s.now()
	if s.badSince.IsZero() {
		s.badSince = now
		if s.unusable != nil {
			s.unusable.Set(1)
		}
		s.log.Error("API key file unusable; the keys it held stay in force until --api-keys-grace passes",
			zap.String("file", s.cfg.File), zap.Error(err), zap.Duration("grace", s.cfg.Grace))
	} else if h != s.fileHash {
		s.log.Error("API key file still unusable", zap.String("file", s.cfg.File), zap.Error(err),
			zap.Duration("unusable_for", now.Sub(s.badSince)))
	}
	s.fileHash = h
	if s.dropped || now.Sub(s.badSince) < s.cfg.Grace {
		return
	}
	s.dropped = true
	set := s.combine(nil)
	s.cur.Store(set)
	if s.drops != nil {
		s.drops.Inc()
	}
	s.log.Error("API key file unusable for longer than --api-keys-grace: the keys it held are dropped",
		zap.String("file", s.cfg.File), zap.Error(err), zap.Duration("unusable_for", now.Sub(s.badSince)), zap.Int("keys", set.Len()))
}

// Run checks the file for changes every Poll until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	if s == nil || s.cfg.File == "" {
		return nil
	}
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_ = s.Reload()
		}
	}
}
