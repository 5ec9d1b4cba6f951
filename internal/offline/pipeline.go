package offline

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// call is one script invocation sent in a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// exec sends writes and then cleans in one pipeline of EVALSHAs. A Redis that
// does not know a script (it restarted, or its script cache was flushed)
// answers NOSCRIPT without running anything; those calls are sent once more
// as EVAL, which also caches the script. When a write is re-sent, every clean
// is re-sent after it too, so the cleans still see all the writes (a clean
// run twice changes nothing the second time). It returns the first error
// left in any call.
func (s *Store) exec(ctx context.Context, writes, cleans []*call) error {
	all := make([]*call, 0, len(writes)+len(cleans))
	all = append(append(all, writes...), cleans...)
	s.pipeline(ctx, all, false)

	var again []*call
	for _, c := range writes {
		if isNoScript(c.cmd.Err()) {
			again = append(again, c)
		}
	}
	rewrote := len(again) > 0
	for _, c := range cleans {
		if rewrote || isNoScript(c.cmd.Err()) {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		s.pipeline(ctx, again, true)
	}
	for _, c := range all {
		if err := c.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// pipeline sends calls in one round trip, as EVALSHA or as EVAL. Pipelined's
// own error is the first command's error; every call keeps its own in c.cmd,
// which is what the caller inspects.
func (s *Store) pipeline(ctx context.Context, calls []*call, eval bool) {
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			if eval {
				c.cmd = c.script.Eval(ctx, p, c.keys, c.args...)
			} else {
				c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
			}
		}
		return nil
	})
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
