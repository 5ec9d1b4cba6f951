package queue

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// gatherer collects calls bound for one partition leader during a short
// window and hands each leader's gathered calls to send as one request.
// The first call for a leader opens the window; the calls that arrive
// before it closes join. Requests to one leader do not wait for each other:
// a window that closes while an earlier request is in flight sends its own.
// A call whose caller has gone by the time the window closes is left out.
//
// With eager set, a call goes at once when traffic to its leader is light:
// its calls have come, on average, at least a window apart, and the leader
// is idle (no request in flight, none answered within the last window).
// The window only gathers calls that come faster than one per window; under
// light traffic there is nothing to gather, and waiting it out would only
// add latency. The average keeps steady traffic gathered
// even across a pause: publishers that each wait for their last call come
// back together, some time after an answer. The consumer's fetches are not
// eager: its partition loops come back together after one answer, and the
// first of them going alone would split them.
type gatherer[C any] struct {
	window time.Duration
	eager  bool
	alive  func(C) bool    // whether the call's caller still waits for it
	send   func(calls []C) // sends one leader's calls; answers each of them

	mu     sync.Mutex
	queues map[int]*gatherQueue[C]
}

type gatherQueue[C any] struct {
	mu       sync.Mutex
	waiting  []C
	timer    bool          // a request is coming: when the window closes, or at once
	last     time.Time     // when the last request came back
	inflight int           // requests sent and not yet answered
	lastCall time.Time     // when the last call came
	gap      time.Duration // the calls' average spacing (eager only)
}

func newGatherer[C any](window time.Duration, alive func(C) bool, send func([]C)) *gatherer[C] {
	return &gatherer[C]{window: window, alive: alive, send: send, queues: make(map[int]*gatherQueue[C])}
}

// add puts c in leader's next request.
func (g *gatherer[C]) add(leader int, c C) {
	g.mu.Lock()
	q := g.queues[leader]
	if q == nil {
		q = &gatherQueue[C]{}
		g.queues[leader] = q
	}
	window := g.window
	g.mu.Unlock()

	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	light := false
	if g.eager {
		now := time.Now()
		// An exponential average over about the last eight calls; a long
		// pause counts as eight windows, so that steady traffic after it
		// is seen as such within a few calls.
		q.gap += (min(now.Sub(q.lastCall), 8*window) - q.gap) / 8
		q.lastCall = now
		light = q.gap >= window && q.inflight == 0 && now.Sub(q.last) >= window
	}
	if !q.timer {
		q.timer = true
		if light {
			go g.flush(q)
		} else {
			time.AfterFunc(window, func() { g.flush(q) })
		}
	}
	q.mu.Unlock()
}

// flush sends the live calls gathered in q, when its window closes (or at
// once, under light traffic).
func (g *gatherer[C]) flush(q *gatherQueue[C]) {
	q.mu.Lock()
	calls := q.waiting[:0:0]
	for _, c := range q.waiting {
		if g.alive(c) {
			calls = append(calls, c)
		}
	}
	q.waiting = nil
	q.timer = false
	if len(calls) == 0 {
		q.mu.Unlock()
		return
	}
	q.inflight++
	q.mu.Unlock()
	g.send(calls)
	q.mu.Lock()
	q.inflight--
	q.last = time.Now()
	q.mu.Unlock()
}

// waiting returns how many calls wait for their window to close.
func (g *gatherer[C]) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, q := range g.queues {
		q.mu.Lock()
		n += len(q.waiting)
		q.mu.Unlock()
	}
	return n
}

// topicLayout is a topic's partitions, sorted as kafka-go's balancer takes
// them, and each one's leader.
type topicLayout struct {
	partitions []int
	leader     map[int]int
	at         time.Time
}

// layoutTTL is how long a topic's layout is used before it is looked up
// again (kafka-go's transport refreshes its own metadata as often), so that
// partitions added to a topic, or leaders that moved without an error
// telling, are seen by the batchers as by kafka-go.
const layoutTTL = 6 * time.Second

// layouts keeps the layouts of topics that the batchers route by. kafka-go's
// transport keeps its own metadata private, so the batchers look leaders up
// themselves. One caller looks a topic up at a time; the others use the old
// layout meanwhile, or go without one (the batchers then send their call
// the ordinary way), so that a cluster that does not answer holds no call
// behind another. A topic whose look-up failed is not looked up again for a
// second.
type layouts struct {
	lookup func(ctx context.Context, topic string) (topicLayout, error)

	mu      sync.Mutex
	known   map[string]topicLayout
	looking map[string]bool      // a look-up of the topic runs
	failed  map[string]time.Time // when the topic's last look-up failed
}

func newLayouts(lookup func(ctx context.Context, topic string) (topicLayout, error)) *layouts {
	return &layouts{lookup: lookup, known: make(map[string]topicLayout),
		looking: make(map[string]bool), failed: make(map[string]time.Time)}
}

// get returns topic's layout, looking it up when it is missing or older
// than layoutTTL and no other caller is looking it up.
func (ls *layouts) get(ctx context.Context, topic string) (topicLayout, bool) {
	ls.mu.Lock()
	l, found := ls.known[topic]
	if (found && time.Since(l.at) <= layoutTTL) || ls.looking[topic] ||
		time.Since(ls.failed[topic]) < time.Second {
		ls.mu.Unlock()
		return l, found
	}
	ls.looking[topic] = true
	ls.mu.Unlock()

	fresh, err := ls.lookup(ctx, topic)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.looking, topic)
	if err != nil {
		ls.failed[topic] = time.Now()
		delete(ls.known, topic)
		return topicLayout{}, false
	}
	ls.known[topic] = fresh
	return fresh, true
}

// forget makes the next calls look every topic up again: a broker answered
// that a partition's leader is elsewhere.
func (ls *layouts) forget() {
	ls.mu.Lock()
	clear(ls.known)
	ls.mu.Unlock()
}

// kafkaLayout returns a look-up of a topic's layout through client.
func kafkaLayout(client *kafka.Client) func(ctx context.Context, topic string) (topicLayout, error) {
	return func(ctx context.Context, topic string) (topicLayout, error) {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return topicLayout{}, err
		}
		for _, t := range md.Topics {
			if t.Name != topic {
				continue
			}
			if t.Error != nil {
				return topicLayout{}, t.Error
			}
			l := topicLayout{leader: make(map[int]int, len(t.Partitions)), at: time.Now()}
			for _, p := range t.Partitions {
				l.partitions = append(l.partitions, p.ID)
				l.leader[p.ID] = p.Leader.ID
			}
			sort.Ints(l.partitions)
			if len(l.partitions) == 0 {
				return topicLayout{}, fmt.Errorf("topic %s has no partitions", topic)
			}
			return l, nil
		}
		return topicLayout{}, fmt.Errorf("topic %s not in the cluster's metadata", topic)
	}
}

// roundTripper returns a function sending a request of type Req through
// client's transport, which routes it to its partitions' leader, and
// expecting an answer of type Res.
func roundTripper[Req kafka.Request, Res any](client *kafka.Client, what string) func(ctx context.Context, req Req) (Res, error) {
	return func(ctx context.Context, req Req) (Res, error) {
		var zero Res
		m, err := client.Transport.RoundTrip(ctx, client.Addr, req)
		if err != nil {
			return zero, err
		}
		res, ok := m.(Res)
		if !ok {
			return zero, fmt.Errorf("%s answered with %T", what, m)
		}
		return res, nil
	}
}
