package outage

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/testutil"
)

// A flood of refusals writes RefusalBurst lines at once, then one a second;
// the first line after some were left out says how many.
func TestRefusalsAreRateLimited(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := NewRefusals(zap.New(core), "call refused")
	for i := range 3 * RefusalBurst {
		r.Log(zap.Int("n", i))
	}
	if n := logs.Len(); n != RefusalBurst {
		t.Fatalf("%d lines for %d refusals at once, want %d", n, 3*RefusalBurst, RefusalBurst)
	}
	for _, e := range logs.TakeAll() {
		if e.Message != "call refused" || e.Level != zapcore.WarnLevel {
			t.Fatalf("line %q at %v", e.Message, e.Level)
		}
		if _, ok := e.ContextMap()["not_logged_before"]; ok {
			t.Fatalf("a line of the burst says some were left out: %v", e.ContextMap())
		}
	}
	left := int64(2 * RefusalBurst)
	testutil.WaitFor(t, 5*time.Second, func() error { // the bucket refills at one a second
		r.Log(zap.Int("n", -1))
		if logs.Len() == 0 {
			left++
			return fmt.Errorf("no line yet")
		}
		return nil
	})
	e := logs.TakeAll()
	if len(e) != 1 {
		t.Fatalf("%d lines once the bucket refilled, want 1", len(e))
	}
	if got := e[0].ContextMap()["not_logged_before"]; got != left {
		t.Fatalf("not_logged_before = %v, want %d", got, left)
	}
}
