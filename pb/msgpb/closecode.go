package msgpb

import "google.golang.org/grpc/codes"

// Close codes carry one reconnect rule for every client: a session that is
// refused or ends has a close code, and its range alone says what the
// client does next. The WebSocket transport sends it as the close frame's
// code; on the gRPC stream the client derives it from the status code of
// the refusal or from the Kickout frame's reason with CloseCodeOfStatus and
// CloseCodeOfKickout, the functions the boat uses for WebSocket closes.
//
//	4000–4499  reconnect, after a backoff; at once for CloseServerDraining
//	4500–4999  stop: reconnecting with the same input cannot help
//
// Within each range, 0–99 is a gRPC status code (4000 + code or 4500 +
// code) and 100–199 a KickoutReason (4100 + reason or 4600 + reason). A
// code the client does not know is placed by its range only, so the server
// may add codes without updating clients.
//
// A token refused (CloseUnauthenticated) is the one stop a client may try
// once more: with a fresh token from its token source, at once, before it
// stops.
const (
	CloseReconnectMin = 4000
	CloseReconnectMax = 4499
	CloseStopMin      = 4500
	CloseStopMax      = 4999

	// The codes a client may want to name.
	CloseUnauthenticated = CloseStopMin + int(codes.Unauthenticated)                     // 4516
	CloseInvalidArgument = CloseStopMin + int(codes.InvalidArgument)                     // 4503
	ClosePermission      = CloseStopMin + int(codes.PermissionDenied)                    // 4507
	CloseNewSession      = CloseStopMin + kickoutOffset + int(KickoutReason_NEW_SESSION) // 4601
	CloseServerDraining  = CloseReconnectMin + kickoutOffset + int(KickoutReason_SERVER_DRAINING)
)

const kickoutOffset = 100

// CloseCodeOfStatus is the close code of a session refused or ended with
// gRPC status code c. The codes that say the request itself is wrong (its
// token, its arguments, or what it asks for) stop; every other, including
// Unavailable, ResourceExhausted and DeadlineExceeded, reconnects.
func CloseCodeOfStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.Unauthenticated:
		return CloseStopMin + int(c)
	}
	return CloseReconnectMin + int(c)
}

// CloseCodeOfKickout is the close code of a session kicked out for r:
// NEW_SESSION (the user signed in again on the platform) stops; every other
// reason reconnects.
func CloseCodeOfKickout(r KickoutReason) int {
	if r == KickoutReason_NEW_SESSION {
		return CloseStopMin + kickoutOffset + int(r)
	}
	return CloseReconnectMin + kickoutOffset + int(r)
}

// CloseStops reports whether a client stops after a session closed with
// code: true in the stop range, false otherwise (the reconnect range, and
// the codes of the WebSocket protocol itself and of the client, 1000–3999).
func CloseStops(code int) bool {
	return code >= CloseStopMin && code <= CloseStopMax
}
