// Package client is gomsg's Go SDK for devices: it holds one session on a
// boat (the gomsg.msg.Msg/Loop stream), hands every pushed message to the
// application once, ACKs it, and reconnects when the session ends.
//
// An application builds a Client with New and runs it:
//
//	c, err := client.New("boat.example.com:7100", tokens,
//		client.WithHandler(func(ctx context.Context, m *msgpb.Message) error {
//			return store(ctx, m) // nil: processed, the client ACKs it
//		}))
//	if err != nil { … }
//	err = c.Run(ctx) // until ctx ends, Close, or a terminal error
//
// # Delivery
//
// gomsg delivers at least once, in order per user. The client adds:
//
//   - ACK: with the default automatic mode a message is ACKed (when it asks
//     for one, NEED_ACK) once the handler returned nil for it. With
//     WithManualAck the application calls Client.Ack itself.
//   - De-duplication: the seqs of the last WithDedup messages handled are
//     remembered across reconnects. A message seen again (the server
//     redelivers what it did not see ACKed) is not passed to the handler;
//     it is ACKed again at once when it was ACKed before.
//   - A handler error means "not processed": the message is not ACKed, no
//     later message of the session reaches the handler (so order holds),
//     and the client ends the session and reconnects after a backoff. The
//     server then delivers the message again: from the offline store when it
//     was pushed with NEED_OFFLINE, by carrier's retries otherwise. A
//     message pushed without NEED_ACK counts as delivered once it was
//     written to the stream, so it is not delivered again. A handler that
//     wants to drop a message it cannot process returns nil.
//
// Handlers run one at a time on the client's receive goroutine, in the
// order the messages arrive. A handler that takes long holds up the
// session: past the server's ack wait (carrier's --ack-wait, 10 s by
// default) the server ends the session (ACK_TIMEOUT) and the message comes
// again as after a handler error (the client drops it then if the handler
// did return nil meanwhile). A
// handler must not wait for JoinRoom, LeaveRoom or RegisterDevice: their
// answers arrive on the goroutine the handler holds.
//
// # Reconnecting
//
// The TokenSource is called before every connect, so an expired token is
// replaced. What the client does after a session ended or a connect failed
// follows the protocol's close codes (msgpb.CloseStops; the WebSocket
// client follows the same rule): the end's close code (CloseCode: from the
// Kickout reason or the gRPC status code) in the reconnect range means
// reconnect after a jittered exponential backoff (WithBackoff) — the stream
// failed, the boat is unreachable or busy (Unavailable, ResourceExhausted),
// the server ended the session with SLOW_CONSUMER, ACK_TIMEOUT or
// BY_REQUEST — and at once when the boat is shutting down
// (SERVER_DRAINING). A close code in the stop range ends Run with the
// error: the same user signed in again on the same platform (a
// *KickoutError that errors.Is ErrNewSession), the request is refused for
// what it is (InvalidArgument, e.g. a token naming an unknown platform;
// PermissionDenied), or the token is refused (Unauthenticated) a second
// time: the first refusal is followed at once by a connect with a fresh
// token from the TokenSource. A handler's or the TokenSource's error
// carries no close code: the client reconnects after the backoff. Rooms
// joined with JoinRoom or WithRooms are joined again on every new session.
//
// # Pulling the offline backlog
//
// By default the server replays the messages stored while the device was
// offline as soon as it connects, before live ones. A device with a large
// backlog can connect in pull mode instead (WithPullOffline): nothing is
// replayed, live messages reach the handler at once (possibly before older
// stored ones), and the application pages through the backlog with
// Client.Pull, each Pull ACKing the page before.
//
// # State
//
// WithStateHandler hears every change: Connecting, Connected (with the
// session's sid, uid and platform), Ready (the messages stored while the
// device was offline have been delivered; what follows is live),
// Disconnected (with the reason and the wait before the next attempt) and,
// last, Closed.
//
// # Transport
//
// The client dials with TLS (the system roots) unless WithTLS gives another
// configuration or WithInsecure asks for plaintext (e.g. `gomsg dev` on
// 127.0.0.1). WithDialOptions passes more grpc.DialOption, e.g. gRPC
// keepalive parameters: a boat pings idle connections itself every 30 s and
// closes a connection whose client pings more often than every 10 s.
//
// The package links no Kafka, Redis or etcd client.
package client
