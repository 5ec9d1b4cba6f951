package grpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/errorpb"
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

// An error split into Parts (to cross a Deliver stream) and put together
// again keeps its code, message and detail; OK stays nil.
func TestPartsRoundTrip(t *testing.T) {
	for _, err := range []error{
		Invalid("sid", "must be set"),
		Limited("--max-pushes", "too many"),
		New(codes.NotFound, errorpb.Code_SESSION_NOT_FOUND, "session s1 is not held"),
		status.Error(codes.Unavailable, "plain"),
		fmt.Errorf("something else"),
	} {
		want := status.Convert(Status(err))
		got := status.Convert(FromParts(Parts(err)))
		if got.Code() != want.Code() || got.Message() != want.Message() || DetailCode(got.Err()) != DetailCode(want.Err()) {
			t.Errorf("%v: round trip gave %v (detail %s), want %v (detail %s)", err, got, DetailCode(got.Err()), want, DetailCode(want.Err()))
		}
		_, _, d := Parts(err)
		var e *Error
		if errors.As(err, &e) && (d.GetField() != e.Field || d.GetCode() != e.Detail) {
			t.Errorf("%v: detail %v, want field %q code %s", err, d, e.Field, e.Detail)
		}
	}
	if code, _, d := Parts(nil); code != codes.OK || d != nil || FromParts(codes.OK, "", nil) != nil {
		t.Errorf("nil: Parts gave %s %v", code, d)
	}
}
