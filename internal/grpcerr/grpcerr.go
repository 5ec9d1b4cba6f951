// Package grpcerr is the one place where gomsg's domain errors become gRPC
// statuses (with an errorpb detail for codes a client must act on). It is a
// package of its own, apart from grpcx, because it knows the domain packages
// (queue, session, device) and with them their Kafka and Redis clients: a
// device client needs grpcx, not this.
package grpcerr

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/errorpb"
)

// Error is a domain error that knows its gRPC code and errorpb code.
type Error struct {
	Code   codes.Code
	Detail errorpb.Code
	Field  string
	Msg    string
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Msg
	}
	return e.Msg
}

// Invalid is a bad-input error naming the request field at fault.
func Invalid(field, format string, args ...any) error {
	return &Error{Code: codes.InvalidArgument, Detail: errorpb.Code_INVALID_REQUEST, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// UnknownPlatform is a bad-input error for a platform the cluster does not know.
func UnknownPlatform(field, platform string) error {
	return &Error{Code: codes.InvalidArgument, Detail: errorpb.Code_UNKNOWN_PLATFORM, Field: field,
		Msg: fmt.Sprintf("unknown platform %q", platform)}
}

// New makes a coded error.
func New(code codes.Code, detail errorpb.Code, format string, args ...any) error {
	return &Error{Code: code, Detail: detail, Msg: fmt.Sprintf(format, args...)}
}

// Status converts any error returned by gomsg's logic into a gRPC status
// error. Statuses pass through unchanged.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return withDetail(e.Code, e.Detail, e.Field, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, auth.ErrInvalidToken):
		return withDetail(codes.Unauthenticated, errorpb.Code_INVALID_TOKEN, "", err.Error())
	case errors.Is(err, queue.ErrInvalidRecord):
		// E.g. a push larger than the task topic's max.message.bytes (set
		// below station's --max-push-bytes): retrying cannot help.
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, queue.ErrUnavailable):
		return withDetail(codes.Unavailable, errorpb.Code_QUEUE_UNAVAILABLE, "", err.Error())
	case errors.Is(err, session.ErrUnavailable), errors.Is(err, device.ErrUnavailable), errors.Is(err, receipt.ErrUnavailable):
		return withDetail(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "", err.Error())
	case errors.Is(err, auth.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func withDetail(code codes.Code, detail errorpb.Code, field, msg string) error {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errorpb.Error{Code: detail, Field: field}); err == nil {
		st = ds
	}
	return st.Err()
}

// DetailCode returns the errorpb code carried by a status error, or
// CODE_UNSPECIFIED.
func DetailCode(err error) errorpb.Code {
	st, ok := status.FromError(err)
	if !ok {
		return errorpb.Code_CODE_UNSPECIFIED
	}
	for _, d := range st.Details() {
		if e, ok := d.(*errorpb.Error); ok {
			return e.GetCode()
		}
	}
	return errorpb.Code_CODE_UNSPECIFIED
}

// Limited is a refusal because a configured limit was reached: gRPC
// ResourceExhausted with an errorpb LIMIT_EXCEEDED detail naming the flag.
func Limited(flag, format string, args ...any) error {
	return &Error{Code: codes.ResourceExhausted, Detail: errorpb.Code_LIMIT_EXCEEDED, Field: flag, Msg: fmt.Sprintf(format, args...)}
}

// Parts splits a status error into what a message can carry: its code, its
// message and its errorpb detail (nil when it has none). A nil error is OK.
func Parts(err error) (code codes.Code, msg string, detail *errorpb.Error) {
	st := status.Convert(Status(err))
	for _, d := range st.Details() {
		if e, ok := d.(*errorpb.Error); ok {
			detail = e
			break
		}
	}
	return st.Code(), st.Message(), detail
}

// FromParts is the status error Parts split; nil for OK.
func FromParts(code codes.Code, msg string, detail *errorpb.Error) error {
	if code == codes.OK {
		return nil
	}
	if detail == nil {
		return status.Error(code, msg)
	}
	return withDetail(code, detail.GetCode(), detail.GetField(), msg)
}
