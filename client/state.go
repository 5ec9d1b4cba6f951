package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// State is where the client is in its life.
type State int

const (
	// Connecting: a session is being opened (the token fetched, the stream
	// opened, the server's answer awaited).
	Connecting State = iota + 1
	// Connected: the server accepted the session; the messages stored
	// while the device was offline arrive now.
	Connected
	// Ready: every stored message was delivered; what follows is live.
	Ready
	// Disconnected: the session ended or a connect failed; the client
	// reconnects after StateChange.RetryIn. (An end after which it does
	// not is told by Closed.)
	Disconnected
	// Closed: Run returned; StateChange.Err is its error (nil when ctx
	// ended or Close was called).
	Closed
)

func (s State) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Connected:
		return "connected"
	case Ready:
		return "ready"
	case Disconnected:
		return "disconnected"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Session identifies a session the server accepted.
type Session struct {
	Sid      string
	UID      string
	Platform string
}

// StateChange is one change of state.
type StateChange struct {
	State State
	// Session is the session (Connected, Ready, Disconnected after a
	// session was accepted).
	Session Session
	// Err is why the client is Disconnected, or why Run ended (Closed).
	Err error
	// CloseCode is Err's close code in the protocol (see CloseCode), 0
	// when Err carries none.
	CloseCode int
	// RetryIn is the wait before the next connect (Disconnected).
	RetryIn time.Duration
}

// ErrNewSession is what a *KickoutError with reason NEW_SESSION is
// (errors.Is): the same user signed in on the same platform elsewhere, and
// the client stopped for good.
var ErrNewSession = errors.New("signed in again on the same platform")

// ErrClosed is returned by Run when the client was closed before Run was
// called, or Run was called a second time.
var ErrClosed = errors.New("gomsg client: closed")

// KickoutError is a session the server ended with a reason.
type KickoutError struct {
	Reason  msgpb.KickoutReason
	Message string
}

func (e *KickoutError) Error() string {
	if e.Message == "" {
		return "gomsg client: kicked out: " + e.Reason.String()
	}
	return fmt.Sprintf("gomsg client: kicked out: %s (%s)", e.Reason, e.Message)
}

// Is makes a NEW_SESSION kickout match ErrNewSession.
func (e *KickoutError) Is(target error) bool {
	return target == ErrNewSession && e.Reason == msgpb.KickoutReason_NEW_SESSION
}

// HandlerError is a handler's error that ended a session.
type HandlerError struct {
	Seq int64
	Err error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("gomsg client: handler failed on message %d: %v", e.Seq, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }
