package msgpb

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// Every status code and kickout reason has a close code in the range that
// says what a client does: stop for a refused token, bad input, a refused
// permission and NEW_SESSION; reconnect for the rest.
func TestCloseCodes(t *testing.T) {
	t.Parallel()
	stop := map[codes.Code]bool{codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true,
		codes.PermissionDenied: true, codes.FailedPrecondition: true, codes.OutOfRange: true,
		codes.Unimplemented: true, codes.Unauthenticated: true}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		code := CloseCodeOfStatus(c)
		want := CloseReconnectMin + int(c)
		if stop[c] {
			want = CloseStopMin + int(c)
		}
		if code != want || CloseStops(code) != stop[c] {
			t.Errorf("%s: close code %d (stops %v), want %d (stops %v)", c, code, CloseStops(code), want, stop[c])
		}
	}
	for r := range KickoutReason_name {
		reason := KickoutReason(r)
		code := CloseCodeOfKickout(reason)
		wantStop := reason == KickoutReason_NEW_SESSION
		if CloseStops(code) != wantStop || code%100 != int(r) || code/100%5 != 1 {
			t.Errorf("%s: close code %d (stops %v)", reason, code, CloseStops(code))
		}
	}
	for code, want := range map[int]bool{1000: false, 1006: false, 3003: false, 3999: false, CloseReconnectMin: false,
		CloseReconnectMax: false, CloseStopMin: true, CloseStopMax: true, 5000: false} {
		if CloseStops(code) != want {
			t.Errorf("CloseStops(%d) = %v, want %v", code, !want, want)
		}
	}
	named := map[int]int{CloseUnauthenticated: 4516, CloseInvalidArgument: 4503, ClosePermission: 4507,
		CloseNewSession: 4601, CloseServerDraining: 4105}
	for got, want := range named {
		if got != want {
			t.Errorf("named close code %d, want %d", got, want)
		}
	}
}
