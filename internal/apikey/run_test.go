package apikey

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

// Run, with no Poll given, checks the file every couple of seconds: a key
// added to the file comes into force without a restart, and Run returns
// once its context ends.
func TestRunPicksUpTheFileWithTheDefaultPoll(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(f, []byte(Line("old", []Scope{Push}, "old")), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(Config{File: f}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	if err := os.WriteFile(f, []byte(Line("new", []Scope{Push}, "new")), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, err := s.Check("new", Push); err != nil {
			return err
		}
		if _, err := s.Check("old", Push); err == nil {
			return errors.New("the key removed from the file still works")
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil once its context ends", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its context ended")
	}
}

// Without a file there is nothing to watch: Run returns at once, on a nil
// Store too (a service built without a key store).
func TestRunWithoutAFileReturnsAtOnce(t *testing.T) {
	t.Parallel()
	s, err := NewStore(Config{Keys: Line("k", []Scope{Push}, "")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, s := range map[string]*Store{"no file": s, "nil store": nil} {
		if err := s.Run(ctx); err != nil || ctx.Err() != nil {
			t.Fatalf("%s: Run returned %v after the context %v, want nil at once", name, err, ctx.Err())
		}
	}
}
