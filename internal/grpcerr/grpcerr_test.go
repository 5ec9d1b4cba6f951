package grpcerr

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/session"
)

// Each domain error reaches the caller with the code that tells it what to
// do: fix the request, authenticate, or retry later.
func TestStatusCodes(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("publish: %w: 1 of 1 records refused: larger than the topic accepts", queue.ErrInvalidRecord), codes.InvalidArgument},
		{fmt.Errorf("publish: %w", queue.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("sessions: %w", session.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("token: %w", auth.ErrInvalidToken), codes.Unauthenticated},
		{fmt.Errorf("auth: %w", auth.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("call: %w", context.Canceled), codes.Canceled},
		{Invalid("uids", "empty"), codes.InvalidArgument},
		{status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{fmt.Errorf("something else"), codes.Internal},
	}
	for _, c := range cases {
		got := status.Code(Status(c.err))
		if got != c.want {
			t.Errorf("Status(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if Status(nil) != nil {
		t.Error("Status(nil) is not nil")
	}
}
