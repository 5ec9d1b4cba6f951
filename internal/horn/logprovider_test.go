package horn

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The log provider (gomsg dev) must not write device tokens or notification
// text to the log: one-time codes travel in notifications.
func TestLogProviderHidesTokenAndText(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	p := NewLogProvider("apns", zap.New(core))
	const token, title, body = "secret-device-token-0123456789", "Your code", "one-time code 482913"
	r := p.Send(context.Background(), device.Device{UID: "alice", Platform: "ios", Token: token},
		&pushpb.Notification{Title: title, Body: body})
	if r.Verdict != Sent {
		t.Fatalf("verdict %v, want Sent", r.Verdict)
	}
	if logs.Len() != 1 {
		t.Fatalf("%d log entries, want 1", logs.Len())
	}
	e := logs.All()[0]
	all := fmt.Sprint(e.Message, e.ContextMap())
	for _, secret := range []string{token, title, body, "482913"} {
		if strings.Contains(all, secret) {
			t.Errorf("log entry %q holds %q", all, secret)
		}
	}
	if got := e.ContextMap()["token_sha256"]; got != TokenFingerprint(token) || len(TokenFingerprint(token)) != 12 {
		t.Errorf("token_sha256 = %v, want %s", got, TokenFingerprint(token))
	}
	if e.ContextMap()["uid"] != "alice" {
		t.Errorf("uid field = %v", e.ContextMap()["uid"])
	}
}
