package station

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/gomsg/gomsg/internal/apikey"
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

// keyQuota is one per-API-key rate (--push-rate-per-key and its
// siblings): a token bucket per key name, a second's worth at once (or one
// request's most, when that is more), so that one push-scoped key cannot fill
// the Redis and Kafka every other caller and every session need. Buckets are
// per station: N stations admit N times the rate.
type keyQuota struct {
	flag  string // the flag's name, in refusals
	label string // the metric's limit label
	what  string // what is counted, in refusals
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newKeyQuota(flag, label, what string, perSecond float64, atOnce int) *keyQuota {
	return &keyQuota{flag: flag, label: label, what: what, limit: rate.Limit(perSecond),
		burst: max(atOnce, int(perSecond), 1), buckets: map[string]*rate.Limiter{}}
}

func (q *keyQuota) bucket(key string) *rate.Limiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, ok := q.buckets[key]
	if !ok {
		// Keys come from the configured set, so the map stays as small as
		// that set.
		b = rate.NewLimiter(q.limit, q.burst)
		q.buckets[key] = b
	}
	return b
}

// keyName names the API key a call was admitted with, for quotas and their
// metric: its name, else "cert:<name>" or the start of its hash; "-" for a
// call admitted without one.
func keyName(ctx context.Context) string {
	k := apikey.FromContext(ctx)
	switch {
	case k == nil:
		return "-"
	case k.Name != "":
		return k.Name
	case k.Cert != "":
		return "cert:" + k.Cert
	}
	return fmt.Sprintf("%x", k.Hash[:4])
}

// allowQuota takes n tokens of q for the calling key, or refuses with
// ResourceExhausted naming the flag and the wait, counted per key.
func (s *Station) allowQuota(ctx context.Context, q *keyQuota, n int) error {
	if n == 0 {
		return nil
	}
	key := keyName(ctx)
	res := q.bucket(key).ReserveN(time.Now(), n)
	d := res.Delay()
	if res.OK() && d == 0 {
		return nil
	}
	res.Cancel()
	s.metrics.LimitRejections.WithLabelValues(q.label).Inc()
	s.metrics.KeyQuotaRejections.WithLabelValues(q.label, key).Inc()
	if !res.OK() {
		return grpcerr.Limited(q.flag, "%d %s in one call, more than key %q may use at once (%d)", n, q.what, key, q.burst)
	}
	return grpcerr.Limited(q.flag, "key %q is over %g %s per second on this station; retry in %s",
		key, float64(q.limit), q.what, d.Round(time.Millisecond))
}
