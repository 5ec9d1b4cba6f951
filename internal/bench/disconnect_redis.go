package bench

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	sessionstore "github.com/gomsg/gomsg/internal/session"
)

// redisCounts is what Redis says it has processed: all commands and each
// command's calls (INFO stats, INFO commandstats).
type redisCounts struct {
	at    time.Time
	total int64
	calls map[string]int64
}

// readRedisCounts reads Redis's command counters; the INFO call itself is
// one command.
func readRedisCounts(ctx context.Context, rdb *redis.Client) (redisCounts, error) {
	rc := redisCounts{at: time.Now(), calls: make(map[string]int64)}
	info, err := rdb.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return rc, fmt.Errorf("redis INFO: %w", err)
	}
	found := false
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		if k == "total_commands_processed" {
			rc.total, err = strconv.ParseInt(v, 10, 64)
			found = err == nil
			continue
		}
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(v, ",")
		if n, err := strconv.ParseInt(strings.TrimPrefix(calls, "calls="), 10, 64); err == nil {
			rc.calls[name] = n
		}
	}
	if !found {
		return rc, fmt.Errorf("redis INFO: no total_commands_processed")
	}
	return rc, nil
}

// CommandCount is how often one Redis command ran.
type CommandCount struct {
	Command string `json:"command"`
	Calls   int64  `json:"calls"`
}

// topCommands are the n commands called most between a and b, less the
// calls in own (the tool's).
func topCommands(a, b redisCounts, n int, own map[string]int64) []CommandCount {
	var out []CommandCount
	for name, calls := range b.calls {
		if d := calls - a.calls[name] - own[name]; d > 0 {
			out = append(out, CommandCount{Command: name, Calls: d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Calls != out[j].Calls {
			return out[i].Calls > out[j].Calls
		}
		return out[i].Command < out[j].Command
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// cpuSampler samples a process's CPU time (redis-server, from /proc) every
// interval until stopped.
type cpuSampler struct {
	mu      sync.Mutex
	t       []time.Time
	cpu     []float64
	stop    chan struct{}
	stopped chan struct{}
}

func startCPUSampler(pid int, interval time.Duration) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if v, err := procSample(pid); err == nil {
				s.mu.Lock()
				s.t = append(s.t, time.Now())
				s.cpu = append(s.cpu, v.CPUSeconds)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *cpuSampler) close() {
	close(s.stop)
	<-s.stopped
}

// between returns the CPU used from the last sample at or before from to
// the first at or after to, as a share of one core (100 = one core busy),
// and the highest share over one sampling interval in that span.
func (s *cpuSampler) between(from, to time.Time) (avg, peak float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.t), func(k int) bool { return s.t[k].After(from) }) - 1
	j := sort.Search(len(s.t), func(k int) bool { return !s.t[k].Before(to) })
	if i < 0 || j >= len(s.t) || j <= i {
		return 0, 0, false
	}
	for k := i + 1; k <= j; k++ {
		if d := s.t[k].Sub(s.t[k-1]).Seconds(); d > 0 {
			peak = max(peak, (s.cpu[k]-s.cpu[k-1])/d*100)
		}
	}
	avg = (s.cpu[j] - s.cpu[i]) / s.t[j].Sub(s.t[i]).Seconds() * 100
	return avg, peak, true
}

// clearWatch polls Redis until it holds none of a boat's sessions: the
// boat's index (rkeys BoatSessions) is empty and none of the given users'
// session hashes holds an entry of the boat. The index is checked every
// round (one SCARD); the hashes, whose check costs one HGETALL per user,
// once the index is empty, and then only those that still held one.
type clearWatch struct {
	rdb      *redis.Client
	keys     rkeys.Layout
	boatID   string
	uids     []string
	interval time.Duration

	// What the watch found.
	polls    int
	commands int64 // the watch's own Redis commands
	hgetalls int64 // of them, HGETALLs (the rest are SCARDs)
	// hashLeft is how many hash entries were left when the index was
	// first seen empty.
	hashLeft     int
	leftIndex    int64
	leftHashes   int
	clearedAt    time.Time // when the round that found none had its answer
	cleared      bool
	indexEmptyAt time.Time
}

// run polls until clear or until deadline.
func (w *clearWatch) run(ctx context.Context, deadline time.Time) error {
	pending := w.uids
	checkedHashes := false
	for {
		n, err := w.rdb.SCard(ctx, w.keys.BoatSessions(w.boatID)).Result()
		w.polls++
		w.commands++
		if err != nil {
			return fmt.Errorf("poll boat %s's sessions: %w", w.boatID, err)
		}
		w.leftIndex = n
		if n == 0 {
			if w.indexEmptyAt.IsZero() {
				w.indexEmptyAt = time.Now()
			}
			left, err := w.holding(ctx, pending)
			if err != nil {
				return err
			}
			if !checkedHashes {
				checkedHashes = true
				w.hashLeft = len(left)
			}
			pending = left
			w.leftHashes = len(left)
			if len(left) == 0 {
				w.clearedAt, w.cleared = time.Now(), true
				return nil
			}
		}
		if time.Now().After(deadline) {
			return nil
		}
		if !sleepUntil(ctx, time.Now().Add(w.interval)) {
			return ctx.Err()
		}
	}
}

// holding returns the uids whose session hash holds an entry of the boat,
// reading the hashes in pipelines of 1,000.
func (w *clearWatch) holding(ctx context.Context, uids []string) ([]string, error) {
	var left []string
	for start := 0; start < len(uids); start += 1000 {
		part := uids[start:min(start+1000, len(uids))]
		cmds := make([]*redis.MapStringStringCmd, len(part))
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, uid := range part {
				cmds[i] = p.HGetAll(ctx, w.keys.Sessions(uid))
			}
			return nil
		})
		w.commands += int64(len(part))
		w.hgetalls += int64(len(part))
		if err != nil {
			return nil, fmt.Errorf("read session hashes: %w", err)
		}
		for i, c := range cmds {
			for _, v := range c.Val() {
				if _, boat, _ := sessionstore.ParseValue(v); boat == w.boatID {
					left = append(left, part[i])
					break
				}
			}
		}
	}
	return left, nil
}
