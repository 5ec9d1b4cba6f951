package station

import (
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errFenced answers a call that needs an id while this station's claim on its
// node id may have lapsed (etcd unreachable or the lease lost): nothing is
// published, and a retry succeeds once the claim is renewed or made again.
var errFenced = status.Error(codes.Unavailable, "node id claim lapsed; retry")

// nextID mints a seq, or fails with errFenced.
func (s *Station) nextID() (int64, error) {
	id, err := s.ids.Next()
	if err != nil {
		s.log.Warn("no seq minted", zap.Error(err))
		return 0, errFenced
	}
	return id, nil
}
