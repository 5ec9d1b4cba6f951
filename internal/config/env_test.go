package config

import (
	"flag"
	"strings"
	"testing"
)

func TestCheckEnv(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("redis-addr", "", "")
	fs.String("kafka-brokers", "", "")
	other := flag.NewFlagSet("y", flag.ContinueOnError)
	other.Int("workers", 1, "")
	cases := []struct {
		name    string
		environ []string
		want    []string // empty: no error
	}{
		{"known", []string{"GOMSG_REDIS_ADDR=a:1", "PATH=/bin", "GOMSGX=1"}, nil},
		{"flag of another set", []string{"GOMSG_WORKERS=3"}, nil},
		{"other binary", []string{"GOMSG_PUSH_ADDR=a:1"}, nil},
		{"extra", []string{"GOMSG_TEST_ONLY=1"}, nil},
		{"typo", []string{"GOMSG_REDIS_ADR=a:1"}, []string{"GOMSG_REDIS_ADR", "did you mean GOMSG_REDIS_ADDR"}},
		{"typo 2", []string{"GOMSG_KAFKA_BROKER=a:1"}, []string{"GOMSG_KAFKA_BROKER", "did you mean GOMSG_KAFKA_BROKERS"}},
		{"far from anything", []string{"GOMSG_SOMETHING_ELSE_ENTIRELY=1"}, []string{"GOMSG_SOMETHING_ELSE_ENTIRELY"}},
		{"several", []string{"GOMSG_B=1", "GOMSG_A=1"}, []string{"GOMSG_A", "also unknown: GOMSG_B"}},
	}
	for _, tc := range cases {
		err := checkEnv(tc.environ, []*flag.FlagSet{fs, other}, []string{"GOMSG_TEST_ONLY"})
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want no error", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want one naming %v", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not contain %q", tc.name, err, w)
			}
		}
		if tc.name == "far from anything" && strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%s: %q suggests a name that is not close", tc.name, err)
		}
	}
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"abc", "abd", 1}, {"abc", "ab", 1}, {"kitten", "sitting", 3}, {"", "xy", 2}} {
		if got := distance(c.a, c.b); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
