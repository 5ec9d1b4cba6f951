package app_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

type figuresAnswer struct {
	Lag struct {
		Available bool   `json:"available"`
		Note      string `json:"note"`
		Topics    []struct {
			Topic      string `json:"topic"`
			Group      string `json:"group"`
			Lag        int64  `json:"lag"`
			Error      string `json:"error"`
			Partitions []struct {
				Partition int   `json:"partition"`
				End       int64 `json:"end"`
				Committed int64 `json:"committed"`
				Lag       int64 `json:"lag"`
			} `json:"partitions"`
		} `json:"topics"`
	} `json:"lag"`
	Rates struct {
		Measured bool    `json:"measured"`
		WindowS  float64 `json:"windowS"`
		Series   []struct {
			Name  string  `json:"name"`
			Total float64 `json:"total"`
			Delta float64 `json:"delta"`
			PerS  float64 `json:"perS"`
		} `json:"series"`
	} `json:"rates"`
	Errors []string `json:"errors"`
}

func (f figuresAnswer) series() map[string][3]float64 {
	out := map[string][3]float64{}
	for _, s := range f.Rates.Series {
		out[s.Name] = [3]float64{s.Total, s.Delta, s.PerS}
	}
	return out
}

// The Cluster page's lag and rates on a station without carrier: tasks
// pushed wait in the task topic, so the carrier group's lag is exactly
// their number, and station's counters' rates count exactly the calls
// made.
func TestConsoleLagAndRates(t *testing.T) {
	e := startConsoleCluster(t, "boat", "station")
	ctx := context.Background()
	cluster := func() figuresAnswer {
		_, body := e.get("/v1/console/cluster", readerKey)
		return decode[figuresAnswer](t, body)
	}

	// 5 calls to one uid and one to two: 6 calls, 7 tasks (one per uid),
	// 6 messages (one body per call, whatever its uids);
	// and 2 calls refused (no uid).
	body := []*anypb.Any{textBody("hello")}
	for i := range 5 {
		if _, err := e.push.Push(ctx, &pushpb.PushRequest{Uids: []string{fmt.Sprintf("u%d", i)}, MsgBodies: body}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.push.Push(ctx, &pushpb.PushRequest{Uids: []string{"v1", "v2"}, MsgBodies: body}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.push.Push(ctx, &pushpb.PushRequest{MsgBodies: body}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("push without uids: %v, want InvalidArgument", err)
		}
	}
	want := map[string]float64{"push calls accepted": 6, "push calls refused": 2, "tasks accepted": 7, "messages accepted": 6}

	t.Run("rates count the calls made", func(t *testing.T) {
		// A reading measured from one taken before the pushes: station's
		// start, or a reading that came too soon after it.
		var f figuresAnswer
		testutil.WaitFor(t, 10*time.Second, func() error {
			f = cluster()
			if !f.Rates.Measured || f.Rates.WindowS < 2 {
				return fmt.Errorf("rates %+v: not measured over 2 s yet", f.Rates)
			}
			return nil
		})
		got := f.series()
		if len(got) != len(want) {
			t.Errorf("series %v, want exactly %v (no carrier series: carrier is not in this process)", got, want)
		}
		for name, n := range want {
			g := got[name]
			if g[0] != n || g[1] != n || math.Abs(g[2]-n/f.Rates.WindowS) > 1e-9 {
				t.Errorf("%s: total %v, delta %v, per s %v; want %v, %v, %v over %.3f s", name, g[0], g[1], g[2], n, n, n/f.Rates.WindowS, f.Rates.WindowS)
			}
		}
		// Later readings are measured from one taken after the pushes: the
		// totals stay, nothing grew.
		testutil.WaitFor(t, 10*time.Second, func() error {
			f = cluster()
			for name, n := range want {
				if g := f.series()[name]; g[0] != n || g[1] != 0 || g[2] != 0 {
					return fmt.Errorf("%s: total %v, delta %v, per s %v; want %v, 0, 0", name, g[0], g[1], g[2], n)
				}
			}
			return nil
		})
	})

	t.Run("lag of the carrier groups", func(t *testing.T) {
		f := cluster()
		if !f.Lag.Available || len(f.Errors) != 0 {
			t.Fatalf("lag %+v, errors %v: want lag available, no errors", f.Lag, f.Errors)
		}
		wantLag := []struct {
			group, topic string
			lag          int64
		}{{"gomsg-carrier", "gomsg.tasks", 7}, {"gomsg-carrier-retry", "gomsg.tasks.retry", 0},
			{"gomsg-carrier-broadcast", "gomsg.broadcast", 0}, {"gomsg-carrier-receipts", "gomsg.receipts", 0}}
		if len(f.Lag.Topics) != len(wantLag) {
			t.Fatalf("lag topics %+v, want %v", f.Lag.Topics, wantLag)
		}
		for i, w := range wantLag {
			l := f.Lag.Topics[i]
			if l.Group != w.group || l.Topic != w.topic || l.Lag != w.lag || l.Error != "" || len(l.Partitions) == 0 {
				t.Errorf("lag %d: %+v, want group %s on %s behind by %d", i, l, w.group, w.topic, w.lag)
			}
		}
		tasks := f.Lag.Topics[0]
		var sum int64
		for _, p := range tasks.Partitions {
			if p.Committed != -1 || p.Lag != p.End {
				t.Errorf("tasks partition %+v: want nothing committed, lag = end", p)
			}
			sum += p.Lag
		}
		if len(tasks.Partitions) != 2 || sum != 7 {
			t.Errorf("tasks: %d partitions summing to %d, want 2 summing to 7", len(tasks.Partitions), sum)
		}
	})

	t.Run("brokers down: the lag says so", func(t *testing.T) {
		e.kafka.Close()
		f := cluster()
		if !f.Lag.Available || len(f.Lag.Topics) != 4 {
			t.Fatalf("lag %+v, want 4 topics", f.Lag)
		}
		for _, l := range f.Lag.Topics {
			if l.Lag != -1 || !strings.Contains(l.Error, "unavailable") {
				t.Errorf("lag of %s on %s with Kafka down: %d, error %q; want -1 and an error", l.Group, l.Topic, l.Lag, l.Error)
			}
		}
		if len(f.Errors) != 4 || !strings.HasPrefix(f.Errors[0], "kafka (lag of group gomsg-carrier on gomsg.tasks): ") {
			t.Errorf("errors %q, want one per topic naming the group and topic", f.Errors)
		}
	})
}
