package client

import (
	"context"
	"crypto/tls"
	"time"

	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// TokenSource returns the device token to connect with. The client calls it
// before every connect, so a token that expires is replaced by a fresh one.
// An error from it is retried after a backoff, like a failed connect.
type TokenSource func(ctx context.Context) (string, error)

// StaticToken is a TokenSource that always returns token.
func StaticToken(token string) TokenSource {
	return func(context.Context) (string, error) { return token, nil }
}

// Handler processes one pushed message. Returning nil means processed: the
// client ACKs it (in the automatic ACK mode). An error means not processed:
// see the package documentation. ctx ends when the session does.
type Handler func(ctx context.Context, m *msgpb.Message) error

// RoomHandler receives one room broadcast message. room is the room's name,
// or "" for a broadcast to every online session. Room messages are at most
// once: never ACKed, stored or redelivered.
type RoomHandler func(ctx context.Context, room string, m *msgpb.Message)

// Option configures a Client.
type Option func(*config)

type config struct {
	handler        Handler
	roomHandler    RoomHandler
	stateHandler   func(StateChange)
	errorHandler   func(error)
	manualAck      bool
	dedup          int
	minWait        time.Duration
	maxWait        time.Duration
	connectTimeout time.Duration
	tls            *tls.Config
	insecure       bool
	dialOpts       []grpc.DialOption
	rooms          []string
	pullOffline    bool
	duplicate      func(seq int64)
}

// Defaults of the options.
const (
	DefaultDedup          = 4096
	DefaultMinBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultConnectTimeout = 15 * time.Second
)

// WithHandler sets the handler of pushed messages. Without one, messages
// are dropped (and ACKed in the automatic mode).
func WithHandler(h Handler) Option { return func(c *config) { c.handler = h } }

// WithRoomHandler sets the handler of room broadcasts.
func WithRoomHandler(h RoomHandler) Option { return func(c *config) { c.roomHandler = h } }

// WithStateHandler sets a function that hears every state change, in order,
// on the client's receive goroutine; it must return quickly.
func WithStateHandler(f func(StateChange)) Option { return func(c *config) { c.stateHandler = f } }

// WithErrorHandler sets a function that hears the errors that change no
// state: a room the server refused to join again on a new session (the
// token of the new session may not allow it any more; the client forgets
// the room). It runs on the client's receive goroutine.
func WithErrorHandler(f func(error)) Option { return func(c *config) { c.errorHandler = f } }

// WithManualAck turns the automatic ACK off: the application ACKs with
// Client.Ack once it has processed a message (the server waits for it
// until its ack wait runs out). A message handed to the handler is not
// handed again while the client remembers its seq (WithDedup), even when the
// server redelivers it: the application owes it an Ack, and an Ack given
// after the session ended is sent when the message comes again. A message
// never ACKed keeps coming back (ACK_TIMEOUT, replay) until it is.
func WithManualAck() Option { return func(c *config) { c.manualAck = true } }

// WithDedup sets how many of the latest seqs are remembered to drop
// duplicates (DefaultDedup). It should exceed the number of messages that
// can be in flight across a reconnect: the offline store's maximum per
// platform plus one session's unACKed messages.
func WithDedup(n int) Option { return func(c *config) { c.dedup = n } }

// WithBackoff sets the wait before a reconnect: min (jittered to [min/2,
// min)) after the first failure, doubling up to max. The count starts
// again after a session that stayed up for max.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.minWait, c.maxWait = min, max }
}

// WithConnectTimeout bounds a connect: opening the stream and the server's
// Connected answer (DefaultConnectTimeout).
func WithConnectTimeout(d time.Duration) Option { return func(c *config) { c.connectTimeout = d } }

// WithTLS dials with conf instead of the default TLS configuration (the
// system roots, the address's host name).
func WithTLS(conf *tls.Config) Option { return func(c *config) { c.tls, c.insecure = conf, false } }

// WithInsecure dials in plaintext: for a boat on a trusted network or
// `gomsg dev`, never across the internet.
func WithInsecure() Option { return func(c *config) { c.tls, c.insecure = nil, true } }

// WithDialOptions adds gRPC dial options (applied after the client's own).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithPullOffline connects in pull mode: the server does not replay the
// messages stored while the device was offline; the application pages
// through them with Client.Pull (for a large backlog, which is better pulled
// than pushed). Live messages reach the handler from the start, so they may
// arrive before older stored ones: order by seq where it matters. Ready
// still comes, once the server handled the connect's offline task.
func WithPullOffline() Option { return func(c *config) { c.pullOffline = true } }

// WithDuplicateHandler sets a function that hears the seq of every message
// dropped as a duplicate (delivery is at least once: see WithDedup), on the
// client's receive goroutine or Pull's; it must return quickly.
func WithDuplicateHandler(f func(seq int64)) Option { return func(c *config) { c.duplicate = f } }

// WithRooms joins rooms on every session, as JoinRoom does.
func WithRooms(rooms ...string) Option {
	return func(c *config) { c.rooms = append(c.rooms, rooms...) }
}
