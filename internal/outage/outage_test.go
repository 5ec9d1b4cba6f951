package outage

import (
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestOneWarnOneInfoPerOutage(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	tr := New(zap.New(core), "kafka")
	tr.OK() // healthy: nothing
	for range 5 {
		tr.Fail(errors.New("connection refused"))
	}
	if !tr.Failing() {
		t.Fatal("not failing after five failures")
	}
	tr.OK()
	tr.OK()
	tr.Fail(errors.New("again"))
	tr.OK()

	var warns, infos, debugs int
	for _, e := range logs.All() {
		switch e.Level {
		case zapcore.WarnLevel:
			warns++
		case zapcore.InfoLevel:
			infos++
		case zapcore.DebugLevel:
			debugs++
		}
	}
	if warns != 2 || infos != 2 || debugs != 4 {
		t.Fatalf("warn=%d info=%d debug=%d, want 2, 2 and 4", warns, infos, debugs)
	}
	ended := logs.FilterMessage("outage ended").All()
	if got := ended[0].ContextMap()["failures"]; got != int64(5) {
		t.Fatalf("first outage ended with failures=%v, want 5", got)
	}
	if got := ended[1].ContextMap()["failures"]; got != int64(1) {
		t.Fatalf("second outage ended with failures=%v, want 1", got)
	}
	if got := ended[0].ContextMap()["dependency"]; got != "kafka" {
		t.Fatalf("dependency=%v, want kafka", got)
	}
}
