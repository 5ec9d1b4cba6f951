package clusterchaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

const (
	// expiry is every platform's offline expiry: long enough that nothing
	// expires during a test, so every acknowledged message must be there.
	expiry = time.Hour
	// attemptTimeout bounds one store call; a call that takes longer
	// counts as failed and is retried.
	attemptTimeout = 5 * time.Second
	// retryFor is how long the load retries one failed call before the
	// test fails: well past a failover (cluster-node-timeout, the election,
	// then up to app.RedisClusterSlotsMaxAge until the client looks at the
	// new slot map),
	// which takes about 4 s here.
	retryFor = 30 * time.Second
	// migrateRounds is how many MIGRATEs carry a slot's keys (those it held
	// when its move began; keys the load adds meanwhile land on the new
	// owner). Between two the slot's keys are split over both nodes, and the
	// load's calls on it are answered ASK or TRYAGAIN.
	migrateRounds = 3
	// numSlots is Redis Cluster's slot count.
	numSlots = 16384
)

// platforms are the two lists every message is written to, so a body is
// shared by two lists and its count starts at 2.
var platforms = []string{"ios", "web"}

var policy = offline.Policy{Store: true, Expiry: expiry}

// bodyOf is the body stored for seq of uid: it names both, so a body read
// back under the wrong seq or user shows.
func bodyOf(uid string, seq int64) string { return fmt.Sprintf("%s#%d", uid, seq) }

// itemsFor is one message for every platform of a user.
func itemsFor(uid string, seq, ts int64) []offline.Item {
	items := make([]offline.Item, len(platforms))
	for i, p := range platforms {
		items[i] = offline.Item{Platform: p, Policy: policy,
			Msg: offline.Message{Seq: seq, Timestamp: ts, Body: []byte(bodyOf(uid, seq))}}
	}
	return items
}

// replies counts, per user, the replies node clients read for commands
// naming a key of that user ({u:<uid>}): attempts on the user's slot,
// answered with a result or refused (ASK, MOVED, TRYAGAIN), each attempt
// once. The reshard test uses it to let the load reach a slot between two
// MIGRATEs.
type replies struct {
	mu     sync.Mutex
	byUser map[string]int64
}

// user returns how many replies node clients got to commands on uid's keys.
func (r *replies) user(uid string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byUser[uid]
}

// note counts one reply for every user whose key one of cmds names.
func (r *replies) note(cmds ...redis.Cmder) {
	users := map[string]bool{}
	for _, cmd := range cmds {
		for _, arg := range cmd.Args() {
			s, ok := arg.(string)
			if !ok {
				continue
			}
			if _, tag, ok := strings.Cut(s, "{u:"); ok {
				if uid, _, ok := strings.Cut(tag, "}"); ok {
					users[uid] = true
				}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byUser == nil {
		r.byUser = map[string]int64{}
	}
	for uid := range users {
		r.byUser[uid]++
	}
}

// countHook is installed on every node client of the cluster client. Its
// hooks run once per attempt on a node (a redirected command runs them
// again on the next node), after the replies are read.
type countHook struct{ r *replies }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.r.note(cmd)
		return err
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.r.note(cmds...)
		return err
	}
}

// newClient is a cluster client on c with gomsg's options
// (app.RedisClusterOptions, so the failover test checks how fast
// production clients see a promotion) whose node clients count replies per
// user, closed by t.Cleanup.
func newClient(tb testing.TB, c *testutil.RedisCluster) (*redis.ClusterClient, *replies) {
	r := &replies{}
	opt := app.RedisClusterOptions(c.Addrs())
	opt.NewClient = func(opt *redis.Options) *redis.Client {
		cl := redis.NewClient(opt)
		cl.AddHook(countHook{r})
		return cl
	}
	rdb := redis.NewClusterClient(opt)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb, r
}

// refusals sums what nodes answered instead of running a command, by kind
// (ASK, MOVED, TRYAGAIN), from INFO errorstats. The server counts them
// wherever they arise, also inside a MULTI, where go-redis follows them
// without telling its hooks.
func refusals(tb testing.TB, nodes []*testutil.Redis) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, n := range nodes {
		info, err := direct(tb, n).Info(context.Background(), "errorstats").Result()
		if err != nil {
			tb.Fatalf("%s: info errorstats: %v", n.Addr, err)
		}
		for _, kind := range []string{"ASK", "MOVED", "TRYAGAIN"} {
			_, rest, ok := strings.Cut(info, "errorstat_"+kind+":count=")
			if !ok {
				continue
			}
			digits, _, _ := strings.Cut(rest, "\r\n")
			v, err := strconv.ParseInt(strings.TrimSpace(digits), 10, 64)
			if err != nil {
				tb.Fatalf("%s: errorstat_%s: %q: %v", n.Addr, kind, digits, err)
			}
			out[kind] += v
		}
	}
	return out
}

// direct is a plain client to one node, closed by t.Cleanup.
func direct(tb testing.TB, r *testutil.Redis) *redis.Client {
	cl := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// slotOwners is the address of every slot's master as node r sees it in
// CLUSTER SLOTS ("" for a slot it knows no owner of).
func slotOwners(tb testing.TB, r *testutil.Redis) []string {
	tb.Helper()
	cl := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer cl.Close()
	ranges, err := cl.ClusterSlots(context.Background()).Result()
	if err != nil {
		tb.Fatalf("%s: cluster slots: %v", r.Addr, err)
	}
	out := make([]string, numSlots)
	for _, s := range ranges {
		for i := s.Start; i <= s.End; i++ {
			out[i] = s.Nodes[0].Addr
		}
	}
	return out
}

// masters are the nodes that serve at least one slot in owners.
func masters(tb testing.TB, c *testutil.RedisCluster, owners []string) []*testutil.Redis {
	tb.Helper()
	var out []*testutil.Redis
	for _, n := range c.Nodes {
		if slices.Contains(owners, n.Addr) {
			out = append(out, n)
		}
	}
	return out
}

// placed is a user and the slot all its keys hash to.
type placed struct {
	uid  string
	slot int
}

// usersOn picks n uids (prefix followed by a number) whose slots are
// distinct and served by master now.
func usersOn(tb testing.TB, c *testutil.RedisCluster, master *testutil.Redis, n int, prefix string) []placed {
	tb.Helper()
	owners := slotOwners(tb, master)
	taken := map[int]bool{}
	var out []placed
	for i := 0; len(out) < n; i++ {
		if i > 100*n {
			tb.Fatalf("found %d of %d users on %s", len(out), n, master.Addr)
		}
		uid := fmt.Sprintf("%s%d", prefix, i)
		slot := c.KeySlot(tb, rkeys.Cluster.Offline(uid, platforms[0]))
		if owners[slot] != master.Addr || taken[slot] {
			continue
		}
		taken[slot] = true
		out = append(out, placed{uid: uid, slot: slot})
	}
	return out
}

// migrateSlot moves slot from src to dst by hand, the steps of
// `redis-cli --cluster reshard` — IMPORTING on dst, MIGRATING on src,
// MIGRATE of the slot's keys, then SETSLOT NODE on every master, dst first —
// in migrateRounds MIGRATEs with between called after each (with the
// round, from 1), so that the load works on a slot whose keys are split
// between the two nodes. It returns how many keys it moved.
func migrateSlot(tb testing.TB, c *testutil.RedisCluster, slot int, src, dst *testutil.Redis, all []*testutil.Redis, between func(round int)) int {
	tb.Helper()
	ctx := context.Background()
	s, d := direct(tb, src), direct(tb, dst)
	srcID, dstID := c.NodeID(tb, src), c.NodeID(tb, dst)
	host, port, err := net.SplitHostPort(dst.Addr)
	if err != nil {
		tb.Fatal(err)
	}
	must := func(cl *redis.Client, args ...any) {
		tb.Helper()
		if err := cl.Do(ctx, args...).Err(); err != nil {
			tb.Fatalf("%s: %v: %v", cl.Options().Addr, args, err)
		}
	}
	must(d, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	must(s, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	held, err := s.ClusterCountKeysInSlot(ctx, slot).Result()
	if err != nil {
		tb.Fatalf("%s: cluster countkeysinslot %d: %v", src.Addr, slot, err)
	}
	batch := held/migrateRounds + 1
	moved := 0
	for round := 1; ; round++ {
		keys, err := s.ClusterGetKeysInSlot(ctx, slot, int(batch)).Result()
		if err != nil {
			tb.Fatalf("%s: cluster getkeysinslot %d: %v", src.Addr, slot, err)
		}
		if len(keys) == 0 {
			break
		}
		// No REPLACE: a key on both sides would mean something wrote the
		// source's copy after the slot began migrating; BUSYKEY shows it.
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(s, args...)
		moved += len(keys)
		between(round)
	}
	must(d, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	must(s, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	for _, m := range all {
		if m != src && m != dst {
			must(direct(tb, m), "CLUSTER", "SETSLOT", slot, "NODE", dstID)
		}
	}
	return moved
}

// keysInSlot is how many keys node r holds in slot.
func keysInSlot(tb testing.TB, r *testutil.Redis, slot int) int64 {
	tb.Helper()
	cl := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer cl.Close()
	n, err := cl.ClusterCountKeysInSlot(context.Background(), slot).Result()
	if err != nil {
		tb.Fatalf("%s: cluster countkeysinslot %d: %v", r.Addr, slot, err)
	}
	return n
}

// failures counts the errors store calls returned, by operation and
// message, and the calls given up on.
type failures struct {
	mu     sync.Mutex
	byKind map[string]int
	total  int
	gaveUp []string
}

func (f *failures) add(op string, err error) {
	// Quoted names, addresses and slot numbers are cut so that like errors
	// add up.
	msg := quoted.ReplaceAllString(err.Error(), `"…"`)
	for _, cut := range []string{" 127.0.0.1", " slot "} {
		if i := strings.Index(msg, cut); i >= 0 {
			msg = msg[:i]
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byKind == nil {
		f.byKind = map[string]int{}
	}
	f.byKind[op+": "+msg]++
	f.total++
}

func (f *failures) giveUp(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gaveUp = append(f.gaveUp, what)
}

// report logs the errors, most frequent first.
func (f *failures) report(tb testing.TB) {
	tb.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	kinds := make([]string, 0, len(f.byKind))
	for k := range f.byKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return f.byKind[kinds[i]] > f.byKind[kinds[j]] })
	tb.Logf("store calls failed %d times, each retried until it worked", f.total)
	for _, k := range kinds {
		tb.Logf("  %5d × %s", f.byKind[k], k)
	}
}

var quoted = regexp.MustCompile(`"[^"]*"`)

// retryPolicy spaces the load's retries: short, since the cluster client
// already backs off on TRYAGAIN and CLUSTERDOWN.
var retryPolicy = backoff.Policy{Min: 5 * time.Millisecond, Max: 200 * time.Millisecond}

// retry calls f, each call under attemptTimeout, until it returns nil,
// counting every error in fails. It returns false, recording what was
// given up, when f still fails after retryFor — the store's contract is
// that a failed call may be retried until it works, so giving up fails the
// test.
func retry(fails *failures, op, what string, f func(ctx context.Context) error) bool {
	ctx, cancel := context.WithTimeout(context.Background(), retryFor)
	defer cancel()
	err := backoff.Retry(ctx, retryPolicy, func() error {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		return f(actx)
	}, func(err error, _ time.Duration) { fails.add(op, err) })
	if err != nil {
		fails.giveUp(fmt.Sprintf("%s %s: %v", op, what, err))
		return false
	}
	return true
}

// drainStored checks what the offline store holds for uid once the load
// has stopped, and empties it. It reads each platform list through
// Store.Read to the end, a page at a time, ACKing each page with Delete;
// every message read must carry bodyOf(uid, seq), and a list must come
// back in seq order (the load's timestamps grow with the seq). Each seq in
// seqs (every seq the load wrote for uid) must have a count equal to the
// number of lists holding it, and a body when that is not zero; a seq no
// list holds must have neither. After the drain no body or count of seqs
// may be left. It returns the seqs each list held, in order.
func drainStored(tb testing.TB, rdb redis.UniversalClient, store *offline.Store, uid string, seqs []int64) map[string][]int64 {
	tb.Helper()
	ctx := context.Background()
	bodies := make([]*redis.StringCmd, len(seqs))
	counts := make([]*redis.StringCmd, len(seqs))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, seq := range seqs {
			bodies[i] = p.Get(ctx, rkeys.Cluster.Body(uid, seq))
			counts[i] = p.Get(ctx, rkeys.Cluster.Count(uid, seq))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatalf("%s: read bodies and counts: %v", uid, err)
	}

	lists := map[string][]int64{}
	holders := map[int64]int{}
	for _, p := range platforms {
		lists[p] = []int64{}
		for {
			page, err := store.Read(ctx, uid, p, time.Now(), expiry, 1000)
			if err != nil {
				tb.Fatalf("%s/%s: read: %v", uid, p, err)
			}
			if len(page) == 0 {
				break
			}
			read := make([]int64, len(page))
			for i, m := range page {
				read[i] = m.Seq
				if string(m.Body) != bodyOf(uid, m.Seq) {
					tb.Errorf("%s/%s seq %d: Read body %q, want %q", uid, p, m.Seq, m.Body, bodyOf(uid, m.Seq))
				}
				if n := len(lists[p]); n > 0 && lists[p][n-1] >= m.Seq {
					tb.Errorf("%s/%s: Read seq %d after %d, out of order", uid, p, m.Seq, lists[p][n-1])
				}
				lists[p] = append(lists[p], m.Seq)
				holders[m.Seq]++
			}
			if err := store.Delete(ctx, uid, p, read); err != nil {
				tb.Fatalf("%s/%s: delete a read page: %v", uid, p, err)
			}
		}
	}

	for i, seq := range seqs {
		n := holders[seq]
		body, bErr := bodies[i].Result()
		count, cErr := counts[i].Int()
		if n == 0 {
			if bErr != redis.Nil || cErr != redis.Nil {
				tb.Errorf("%s seq %d is in no list, but its body (%q, %v) or count (%d, %v) is left",
					uid, seq, body, bErr, count, cErr)
			}
			continue
		}
		if bErr != nil || body != bodyOf(uid, seq) {
			tb.Errorf("%s seq %d: body %q (%v), want %q", uid, seq, body, bErr, bodyOf(uid, seq))
		}
		if cErr != nil || count != n {
			tb.Errorf("%s seq %d: count %d (%v), want %d: the lists holding it", uid, seq, count, cErr, n)
		}
	}
	for _, seq := range seqs {
		n, err := rdb.Exists(ctx, rkeys.Cluster.Body(uid, seq), rkeys.Cluster.Count(uid, seq)).Result()
		if err != nil {
			tb.Fatalf("%s: exists: %v", uid, err)
		}
		if n != 0 {
			tb.Errorf("%s seq %d: body or count left after every list ACKed it", uid, seq)
		}
	}
	return lists
}

// firstDiff describes where two seq lists first differ.
func firstDiff(got, want []int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d got seq %d, want %d", i, got[i], want[i])
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Sprintf("extra seq %d at %d", got[len(want)], len(want))
	case len(got) < len(want):
		return fmt.Sprintf("seq %d missing at %d", want[len(got)], len(got))
	}
	return "none"
}

// workers are a load's goroutines and the failures they met.
type workers struct {
	fails failures
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// start runs n goroutines, run(0) … run(n-1), until halt. The halt is
// registered with t.Cleanup after the cluster's cleanups, so it runs before
// them: the workers stop before the servers do.
func (w *workers) start(t *testing.T, n int, run func(w int)) {
	w.stop = make(chan struct{})
	for i := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			run(i)
		}()
	}
	t.Cleanup(func() {
		w.halt()
		if t.Failed() {
			w.fails.report(t)
		}
	})
}

// halt stops the workers after their current step and waits for them.
func (w *workers) halt() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}
