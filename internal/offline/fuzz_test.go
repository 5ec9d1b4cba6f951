package offline

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FuzzDecodePage feeds pages (member, score) and MGET replies to pageSeqs and
// joinPage: any page either is refused or splits into messages and gone seqs
// that account for every member, with the seqs, timestamps and bodies it was
// given.
func FuzzDecodePage(f *testing.F) {
	f.Add("1|1700000000000|hello|2|1700000000001|")
	f.Add("9223372036854775807|1.5|x")
	f.Add("a|1|c")
	f.Add("1|2")
	f.Fuzz(func(t *testing.T, in string) {
		parts := strings.Split(in, "|")
		var page []redis.Z
		var bodies []any
		for i := 0; i+1 < len(parts); i += 3 {
			score, _ := strconv.ParseFloat(parts[i+1], 64)
			page = append(page, redis.Z{Member: parts[i], Score: score})
			// A missing or empty third field stands for a missing body (nil).
			var body any
			if i+2 < len(parts) && parts[i+2] != "" {
				body = parts[i+2]
			}
			bodies = append(bodies, body)
		}
		seqs, err := pageSeqs(page)
		if err != nil {
			return
		}
		msgs, gone := joinPage(page, seqs, bodies)
		if len(msgs)+len(gone) != len(page) {
			t.Fatalf("%d members became %d messages and %d gone", len(page), len(msgs), len(gone))
		}
		m, g := 0, 0
		for i, z := range page {
			seq, _ := strconv.ParseInt(z.Member.(string), 10, 64)
			if bodies[i] == nil {
				if gone[g] != seq {
					t.Fatalf("member %d gone as %d, want %d", i, gone[g], seq)
				}
				g++
				continue
			}
			got := msgs[m]
			if got.Seq != seq || got.Timestamp != int64(z.Score) || string(got.Body) != bodies[i] {
				t.Fatalf("member %d decoded as %d %d %q, want %d %d %q",
					i, got.Seq, got.Timestamp, got.Body, seq, int64(z.Score), bodies[i])
			}
			m++
		}
	})
}
