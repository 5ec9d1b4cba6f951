package station

import (
	"golang.org/x/sync/semaphore"

	"github.com/gomsg/gomsg/internal/grpcerr"
)

// inFlight bounds the fan-out bytes the Push calls of one station hold at
// once (--max-push-bytes-in-flight). --max-push-bytes bounds one call, but
// every call holds its records until Kafka took them: a few large pushes in
// parallel would otherwise take station's memory past its limit. A call
// that does not fit is refused at once rather than queued, so a caller
// learns to back off instead of piling up waiting requests.
type inFlight struct {
	sem   *semaphore.Weighted
	limit int64
}

func newInFlight(limit int64) *inFlight {
	return &inFlight{sem: semaphore.NewWeighted(limit), limit: limit}
}

// acquire reserves n bytes, or refuses with ResourceExhausted (counted);
// the caller calls the returned release when its records are gone.
func (s *Station) acquirePushBytes(n int64) (release func(), err error) {
	if s.inFlight.sem.TryAcquire(n) {
		return func() { s.inFlight.sem.Release(n) }, nil
	}
	s.metrics.LimitRejections.WithLabelValues("max_push_bytes_in_flight").Inc()
	return nil, grpcerr.Limited("--max-push-bytes-in-flight", "this push's %d bytes of fan-out do not fit: station holds at most %d bytes of pushes at once; retry shortly",
		n, s.inFlight.limit)
}
