package testutil

import (
	"testing"
	"time"
)

func TestLongestPause(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	arrivals := []time.Time{at(900), at(-50), at(100), at(300), at(1200)}
	for _, c := range []struct {
		from, to  time.Time
		pause, at time.Duration
	}{
		{t0, time.Time{}, 600 * time.Millisecond, 300 * time.Millisecond}, // 300 → 900
		{t0, at(800), 500 * time.Millisecond, 300 * time.Millisecond},     // 300 → the end at 800
		{at(950), time.Time{}, 250 * time.Millisecond, 0},                 // from 950 to 1200
		{at(1300), time.Time{}, 0, 0},                                     // nothing after from
		{t0, at(200), 100 * time.Millisecond, 0},                          // 0 → 100, 100 → 200
	} {
		p, a := LongestPause(arrivals, c.from, c.to)
		if p != c.pause || a != c.at {
			t.Errorf("LongestPause(from %v, to %v) = %v at %v, want %v at %v", c.from.Sub(t0), c.to, p, a, c.pause, c.at)
		}
	}
}
