package offline

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzDecodePage feeds read.lua-shaped replies to parsePage: any reply either
// is refused or splits into messages and gone seqs that account for every
// triple, with the seqs and bodies it was given.
func FuzzDecodePage(f *testing.F) {
	f.Add("1|1700000000000|hello|2|1700000000001|")
	f.Add("9223372036854775807|1.5|x")
	f.Add("a|b|c")
	f.Add("1|2")
	f.Fuzz(func(t *testing.T, in string) {
		parts := strings.Split(in, "|")
		reply := make([]any, len(parts))
		for i, p := range parts {
			// An empty third field stands for a missing body (nil from Lua).
			if i%3 == 2 && p == "" {
				continue
			}
			reply[i] = p
		}
		msgs, gone, err := parsePage(reply)
		if err != nil {
			return
		}
		if len(msgs)+len(gone) != len(reply)/3 {
			t.Fatalf("%d triples became %d messages and %d gone", len(reply)/3, len(msgs), len(gone))
		}
		m := 0
		for i := 0; i < len(reply); i += 3 {
			seq, _ := strconv.ParseInt(parts[i], 10, 64)
			if reply[i+2] == nil {
				continue
			}
			if msgs[m].Seq != seq || string(msgs[m].Body) != parts[i+2] {
				t.Fatalf("triple %d decoded as seq %d body %q, want %d %q", i/3, msgs[m].Seq, msgs[m].Body, seq, parts[i+2])
			}
			m++
		}
	})
}
