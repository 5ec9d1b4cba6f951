// Package horntest stands in for Apple's and Google's push services in
// tests: an HTTP/2 TLS APNs server that verifies the ES256 provider token
// and the headers, and an FCM HTTP v1 server that also serves the OAuth
// token exchange and verifies the service account's signed assertion. Only
// these external providers are mocked; tests run horn itself for real.
package horntest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/pb/mqpb"
)

// Answer is what a mock answers to one request.
type Answer struct {
	Status int
	// Reason is APNs' reason or FCM's errorCode.
	Reason string
	// RetryAfter is the Retry-After header ("" for none).
	RetryAfter string
}

// Request is one request a mock accepted as well-formed (whatever it
// answered).
type Request struct {
	Token   string
	Header  http.Header
	Body    map[string]any
	Raw     []byte
	At      time.Time
	Answer  Answer
	Account string // FCM: the project of the URL
}

// recorder is the part both mocks share: scripted answers per token, the
// requests seen and the protocol errors found.
type recorder struct {
	mu       sync.Mutex
	answers  map[string][]Answer
	counts   map[string]int
	requests []Request
	discard  bool
	errs     []string
}

// DiscardRequests stops keeping requests (Count still counts them), so a
// benchmark's mock does constant work per request.
func (r *recorder) DiscardRequests() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discard = true
}

// Respond scripts the answers to a token's requests: the i-th request gets
// answers[i], later ones the last answer. Unscripted tokens get 200.
func (r *recorder) Respond(token string, answers ...Answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answers == nil {
		r.answers = map[string][]Answer{}
	}
	r.answers[token] = answers
}

func (r *recorder) record(req Request) Answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	n := r.counts[req.Token]
	r.counts[req.Token]++
	a := Answer{Status: http.StatusOK}
	if list := r.answers[req.Token]; len(list) > 0 {
		a = list[min(n, len(list)-1)]
	}
	req.Answer = a
	if !r.discard {
		r.requests = append(r.requests, req)
	}
	return a
}

func (r *recorder) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// Requests returns the requests for token ("" for all), in arrival order.
func (r *recorder) Requests(token string) []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Request
	for _, q := range r.requests {
		if token == "" || q.Token == token {
			out = append(out, q)
		}
	}
	return out
}

// Count is how many requests token got ("" for all).
func (r *recorder) Count(token string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token != "" {
		return r.counts[token]
	}
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

// Errors lists the malformed requests the mock refused (bad provider token,
// missing header, …); a test expects none.
func (r *recorder) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// ReadTopic returns every record on a topic, partition by partition.
func ReadTopic(tb testing.TB, broker, topic string) []*mqpb.Payload {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		tb.Fatalf("dial kafka: %v", err)
	}
	parts, err := conn.ReadPartitions(topic)
	_ = conn.Close()
	if err != nil {
		tb.Fatalf("partitions of %s: %v", topic, err)
	}
	var out []*mqpb.Payload
	for _, p := range parts {
		pc, err := kafka.DialLeader(ctx, "tcp", broker, topic, p.ID)
		if err != nil {
			tb.Fatalf("dial leader: %v", err)
		}
		first, last, err := pc.ReadOffsets()
		if err != nil {
			tb.Fatalf("offsets: %v", err)
		}
		if _, err := pc.Seek(first, kafka.SeekAbsolute); err != nil {
			tb.Fatalf("seek: %v", err)
		}
		for off := first; off < last; off++ {
			m, err := pc.ReadMessage(10 << 20)
			if err != nil {
				tb.Fatalf("read %s/%d@%d: %v", topic, p.ID, off, err)
			}
			var pl mqpb.Payload
			if err := proto.Unmarshal(m.Value, &pl); err != nil {
				tb.Fatalf("decode %s/%d@%d: %v", topic, p.ID, off, err)
			}
			out = append(out, &pl)
		}
		_ = pc.Close()
	}
	return out
}
