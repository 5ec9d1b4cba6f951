package station

import (
	"context"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
)

// The Cluster page's figures that come from elsewhere than etcd and Redis:
// the carriers' consumer lag, read from the brokers, and the rates of
// station's own counters (and carrier's, when it runs in this process).

// GroupLagReader reads a consumer group's lag on a topic (queue.LagReader).
type GroupLagReader interface {
	GroupLag(ctx context.Context, group, topic string) (queue.TopicLag, error)
}

// GroupTopic is a consumer group and the topic it consumes.
type GroupTopic struct{ Group, Topic string }

type consoleTopicLag struct {
	queue.TopicLag
	// Lag is -1 and Error says why when the brokers did not answer.
	Error string `json:"error,omitempty"`
}

type consoleLag struct {
	Available bool              `json:"available"`
	Note      string            `json:"note,omitempty"`
	Topics    []consoleTopicLag `json:"topics"`
}

// carrierLag reads each carrier group's lag, all at once so that brokers
// that do not answer cost one timeout, not one per topic.
func (s *Station) carrierLag(ctx context.Context) consoleLag {
	out := consoleLag{Topics: []consoleTopicLag{}, Note: s.cfg.CarrierLagNote}
	if s.cfg.CarrierLag == nil {
		return out
	}
	out.Available = true
	out.Topics = make([]consoleTopicLag, len(s.cfg.CarrierGroups))
	var wg sync.WaitGroup
	for i, g := range s.cfg.CarrierGroups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.cfg.CarrierLag.GroupLag(ctx, g.Group, g.Topic)
			if err != nil {
				l = queue.TopicLag{Topic: g.Topic, Group: g.Group, Lag: -1}
				out.Topics[i].Error = err.Error()
			}
			if l.Partitions == nil {
				l.Partitions = []queue.PartitionLag{}
			}
			out.Topics[i].TopicLag = l
		}()
	}
	wg.Wait()
	return out
}

// consoleRateMinWindow is the shortest time a rate is computed over: the
// reading it starts from is the newest one at least this old.
const consoleRateMinWindow = 2 * time.Second

// consoleRateSeries are the counters the console shows rates of: a name,
// the metric and the labels a sample must have (an empty value: any; a
// value starting with "!": any but that one). Samples that match are
// summed.
var consoleRateSeries = []struct {
	Name, Metric string
	Labels       map[string]string
	Carrier      bool // carrier's: shown when carrier runs in this process
}{
	{Name: "push calls accepted", Metric: "gomsg_station_push_requests_total", Labels: map[string]string{"code": "OK"}},
	{Name: "push calls refused", Metric: "gomsg_station_push_requests_total", Labels: map[string]string{"code": "!OK"}},
	{Name: "tasks accepted", Metric: "gomsg_station_pushes_accepted_total"},
	{Name: "messages accepted", Metric: "gomsg_station_messages_accepted_total"},
	{Name: "deliveries acked", Metric: "gomsg_carrier_deliveries_total", Labels: map[string]string{"outcome": metrics.Acked}, Carrier: true},
	{Name: "deliveries delivered", Metric: "gomsg_carrier_deliveries_total", Labels: map[string]string{"outcome": metrics.Delivered}, Carrier: true},
	{Name: "deliveries stored offline", Metric: "gomsg_carrier_deliveries_total", Labels: map[string]string{"outcome": metrics.StoredOffline}, Carrier: true},
	{Name: "deliveries retried", Metric: "gomsg_carrier_deliveries_total", Labels: map[string]string{"outcome": metrics.Retried}, Carrier: true},
	{Name: "deliveries dead-lettered", Metric: "gomsg_carrier_deliveries_total", Labels: map[string]string{"outcome": metrics.DeadLettered}, Carrier: true},
}

// rateReading is the value of each of consoleRateSeries at a time.
type rateReading struct {
	at     time.Time
	values []float64
}

// consoleRates keeps the readings rates are computed from: the newest
// reading at least consoleRateMinWindow old and the ones after it.
type consoleRates struct {
	mu       sync.Mutex
	readings []rateReading
}

// observe records r and returns the reading a rate up to r starts from;
// ok is false while there is none at least consoleRateMinWindow older.
func (c *consoleRates) observe(r rateReading) (base rateReading, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := -1
	for i, x := range c.readings {
		if r.at.Sub(x.at) >= consoleRateMinWindow {
			from = i
		}
	}
	if from >= 0 {
		base, ok = c.readings[from], true
		c.readings = c.readings[from:]
	}
	c.readings = append(c.readings, r)
	return base, ok
}

type consoleRate struct {
	Name   string `json:"name"`
	Metric string `json:"metric"`
	// Total is the counter's value now, Delta how much it grew over the
	// window, PerS Delta divided by the window.
	Total float64 `json:"total"`
	Delta float64 `json:"delta"`
	PerS  float64 `json:"perS"`
}

type consoleRatesAnswer struct {
	// Measured is false on the first reading (nothing to compute a rate
	// from yet): Delta and PerS are then 0.
	Measured bool          `json:"measured"`
	WindowS  float64       `json:"windowS"`
	Series   []consoleRate `json:"series"`
	Error    string        `json:"error,omitempty"`
}

// readRates reads station's counters now.
func (s *Station) readRates() (rateReading, error) {
	mfs, err := s.metrics.Registry.Gather()
	if err != nil {
		return rateReading{}, err
	}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	r := rateReading{at: time.Now(), values: make([]float64, len(consoleRateSeries))}
	for i, sr := range consoleRateSeries {
		mf := byName[sr.Metric]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m.GetLabel(), sr.Labels) {
				r.values[i] += m.GetCounter().GetValue()
			}
		}
	}
	return r, nil
}

func labelsMatch(have []*dto.LabelPair, want map[string]string) bool {
	for name, v := range want {
		got := ""
		for _, l := range have {
			if l.GetName() == name {
				got = l.GetValue()
			}
		}
		if not, ok := strings.CutPrefix(v, "!"); ok {
			if got == not {
				return false
			}
		} else if got != v {
			return false
		}
	}
	return true
}

// rates reads the counters and answers their rates since the
// reading this one is measured from.
func (s *Station) rates() consoleRatesAnswer {
	out := consoleRatesAnswer{Series: []consoleRate{}}
	now, err := s.readRates()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	base, ok := s.consoleRates.observe(now)
	window := now.at.Sub(base.at).Seconds()
	if ok {
		out.Measured, out.WindowS = true, window
	}
	for i, sr := range consoleRateSeries {
		if sr.Carrier && !s.cfg.ConsoleDeliveries {
			continue
		}
		r := consoleRate{Name: sr.Name, Metric: sr.Metric, Total: now.values[i]}
		if ok {
			r.Delta = now.values[i] - base.values[i]
			r.PerS = r.Delta / window
		}
		out.Series = append(out.Series, r)
	}
	return out
}
