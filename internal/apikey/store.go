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
}

// Store is the live key set: the inline keys plus the file's, swapped
// atomically when the file changes.
type Store struct {
	cfg Config
	log *zap.Logger
	env []Key
	cur atomic.Pointer[Set]

	mu       sync.Mutex // serialises reloads
	fileHash [sha256.Size]byte
}

var devHash = Hash(DevKey)

// NewStore reads the keys; a bad line, a file that cannot be read, the
// public dev key outside dev, or no key at all outside dev is an error naming
// the setting.
func NewStore(cfg Config, log *zap.Logger) (*Store, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = 2 * time.Second
	}
	s := &Store{cfg: cfg, log: log.With(zap.String("component", "apikeys"))}
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

// Reload reads the file again if its content changed. On any error the
// previous keys stay in force.
func (s *Store) Reload() error {
	if s.cfg.File == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, h, err := s.readFile()
	if h == s.fileHash && h != ([sha256.Size]byte{}) {
		return nil // unchanged (also when unchanged and bad: logged once)
	}
	if err != nil {
		if h != ([sha256.Size]byte{}) {
			s.fileHash = h
		}
		s.log.Error("API key file not reloaded; the previous keys stay in force",
			zap.String("file", s.cfg.File), zap.Error(err))
		return fmt.Errorf("--api-keys-file %s: %w", s.cfg.File, err)
	}
	s.fileHash = h
	set := s.combine(keys)
	s.cur.Store(set)
	s.log.Info("API keys reloaded", zap.String("file", s.cfg.File), zap.Int("file_keys", len(keys)), zap.Int("keys", set.Len()))
	return nil
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
