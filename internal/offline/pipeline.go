package offline

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script invocation sent in a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	eval   bool // send as EVAL: Redis answered NOSCRIPT to the EVALSHA
	cmd    *redis.Cmd
}

// How long and how often the store sends again a call Redis Cluster refused
// (isRefused; see exec). A migration moves a slot's keys in batches of a few MIGRATEs, so
// a user's keys stay split for milliseconds; the bound keeps a caller from
// waiting on a migration that stalled.
const (
	tryAgainFor = 2 * time.Second
	tryAgainMin = 5 * time.Millisecond
	tryAgainMax = 100 * time.Millisecond
)

// exec sends writes and then cleans in one pipeline of EVALSHAs, and sends
// again, in a new pipeline, the calls Redis refused without running any of
// them:
//
//   - NOSCRIPT: the Redis does not know the script (it restarted, its script
//     cache was flushed, or it is a cluster node a slot just moved to). The
//     call is sent again at once as EVAL, which also caches the script.
//   - TRYAGAIN: on a cluster, the call's slot is migrating and its keys are
//     split, some on the source, some already on the target, so neither can
//     run it whole; the split ends when the migration moves the rest.
//     go-redis sends a refused transaction again only MaxRedirects (3)
//     times, within tens of milliseconds, so exec goes on: backoff from
//     tryAgainMin doubling to tryAgainMax, for up to tryAgainFor after the
//     first refusal, or until ctx ends. A MOVED or ASK that go-redis gave
//     back instead of following is waited out the same way.
//
// When a write is sent again, every clean is sent again after it too, so the
// cleans still see all the writes (a clean run twice changes nothing the
// second time). It returns the first error left in any call.
func (s *Store) exec(ctx context.Context, writes, cleans []*call) error {
	sent := make([]*call, 0, len(writes)+len(cleans))
	sent = append(append(sent, writes...), cleans...)
	var pace tryAgain
	var stop error
	for len(sent) > 0 && stop == nil {
		s.pipeline(ctx, sent)
		var again []*call
		wait := false
		for _, c := range writes {
			if c.refused(&wait) {
				again = append(again, c)
			}
		}
		rewrote := len(again) > 0
		for _, c := range cleans {
			if c.refused(&wait) || rewrote {
				again = append(again, c)
			}
		}
		if wait {
			stop = pace.next(ctx)
		}
		sent = again
	}
	for _, cs := range [][]*call{writes, cleans} {
		for _, c := range cs {
			if err := c.cmd.Err(); err != nil {
				return stopped(stop, err)
			}
		}
	}
	return nil
}

// refused reports whether Redis refused c without running it, in a way that
// sending it again can fix, and sets *wait when that must wait (isRefused).
func (c *call) refused(wait *bool) bool {
	err := c.cmd.Err()
	switch {
	case isNoScript(err):
		c.eval = true
		return true
	case isRefused(err):
		*wait = true
		return true
	}
	return false
}

// pipeline sends calls in one round trip, each as EVALSHA or, after a
// NOSCRIPT, as EVAL. Pipelined's own error is the first command's error;
// every call keeps its own in c.cmd, which is what the caller inspects.
//
// On a cluster the calls (all of one user, so of one slot) go in a MULTI
// transaction. A plain go-redis v9.23 cluster pipeline can send a command
// twice during a slot migration: when the first reply from a node is
// TRYAGAIN it queues the node's whole batch again, and it also queues, for
// the ASK target, each command answered ASK, so such a command runs on both
// nodes, its two replies racing into one Cmd (go test -race catches it in
// TestSlotMigration). A transaction instead queues every command before any
// runs; Redis refuses the lot (EXECABORT) if any is refused, and go-redis
// sends the whole transaction again to one node. So a Write also lands on a
// cluster all at once or not at all. A standalone Redis has no migrations,
// and keeps the plain pipeline.
func (s *Store) pipeline(ctx context.Context, calls []*call) {
	send := s.rdb.Pipelined
	if s.keys.IsCluster() {
		send = s.rdb.TxPipelined
	}
	_, _ = send(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			if c.eval {
				c.cmd = c.script.Eval(ctx, p, c.keys, c.args...)
			} else {
				c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
			}
		}
		return nil
	})
}

// retryRefused runs f again, paced as exec paces its calls, while Redis
// refused it without running it: TRYAGAIN, or a MOVED or ASK that go-redis
// gave back instead of following. go-redis v9.23 does give back MOVED for
// MGET: it sends a "multi_shard" command (MGET's request policy) to the node
// its slot table names, not to the node a MOVED named, and its table reloads
// in the background, so its immediate retries after a slot moved all go to
// the old node. Waiting lets the reload land.
func (s *Store) retryRefused(ctx context.Context, f func() error) error {
	var pace tryAgain
	for {
		err := f()
		if !isRefused(err) {
			return err
		}
		if stop := pace.next(ctx); stop != nil {
			return stopped(stop, err)
		}
	}
}

// tryAgain paces the attempts after refusals (isRefused); the zero value is
// ready before the first.
type tryAgain struct {
	wait     time.Duration
	deadline time.Time
}

// next waits before the next attempt. It returns errTryAgainSpent, without
// waiting, once the next attempt would start more than tryAgainFor after the
// first call to next, and ctx's error when ctx ends during the wait.
func (p *tryAgain) next(ctx context.Context) error {
	if p.wait == 0 {
		p.wait = tryAgainMin
		p.deadline = time.Now().Add(tryAgainFor)
	}
	if time.Now().Add(p.wait).After(p.deadline) {
		return errTryAgainSpent
	}
	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	p.wait = min(2*p.wait, tryAgainMax)
	return nil
}

// errTryAgainSpent says Redis still refused a call (isRefused) tryAgainFor
// after the first refusal.
var errTryAgainSpent = fmt.Errorf("refused by Redis Cluster for %s (a slot migrating)", tryAgainFor)

// stopped adds to err, the error left in a call, why the retries stopped: a
// context error stays matchable by errors.Is.
func stopped(stop, err error) error {
	if stop == nil {
		return err
	}
	return fmt.Errorf("%w: %w", stop, err)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// isRefused reports a reply by which Redis Cluster refused a command
// without running it, and which a later attempt can get past: TRYAGAIN
// while a slot migrates, and a MOVED or ASK redirection go-redis did not
// follow (see retryRefused).
func isRefused(err error) bool {
	return redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "MOVED") ||
		redis.HasErrorPrefix(err, "ASK")
}
