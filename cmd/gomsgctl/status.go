package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gomsg/gomsg/pb/pushpb"
)

// statusCmd prints what became of a pushed message at each target: one line
// per target, or with --json the whole answer (every page) as protojson.
func statusCmd(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlagSet("status", "status --seq N [--uid U] [--json] [flags]", stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	seq := fs.Int64("seq", 0, "the message's seq, as push printed it (required)")
	uid := fs.String("uid", "", "only this user's targets")
	size := fs.Int("page-size", 0, "targets per call (1 to 1000; default: station's, 100); every page is printed")
	asJSON := fs.Bool("json", false, "print the GetDelivery answer, all pages in one, as one line of protojson")
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *seq <= 0 {
		return usageErrorf("--seq is required (a seq push printed)")
	}
	api, ctx, done, err := pushAPI(ctx, *addr, tr, *key)
	if err != nil {
		return err
	}
	defer done()
	all := &pushpb.GetDeliveryResponse{Seq: *seq}
	req := &pushpb.GetDeliveryRequest{Seq: *seq, Uid: *uid, PageSize: int32(*size)}
	for {
		resp, err := api.GetDelivery(ctx, req)
		if err != nil {
			return err
		}
		if *asJSON {
			all.Targets = append(all.Targets, resp.GetTargets()...)
		} else {
			for _, t := range resp.GetTargets() {
				if _, err := fmt.Fprintln(out, targetLine(t)); err != nil {
					return err
				}
			}
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if *asJSON {
		return printJSON(out, all)
	}
	return nil
}

// targetLine is one target: uid, platform, latest state, then each step,
// the first with its UTC time and the others with their delay after it:
//
//	alice ios DELIVERED: ACCEPTED 2026-11-27T18:53:30.123Z, DELIVERED +17ms (sid 1f…, boat boat-1, acked)
func targetLine(t *pushpb.DeliveryTarget) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s:", t.GetUid(), t.GetPlatform(), t.GetState())
	var first int64
	for i, s := range t.GetSteps() {
		if i > 0 {
			b.WriteByte(',')
		}
		if i == 0 {
			first = s.GetAt()
			fmt.Fprintf(&b, " %s %s", s.GetState(), time.UnixMilli(s.GetAt()).UTC().Format("2006-01-02T15:04:05.000Z"))
		} else {
			fmt.Fprintf(&b, " %s +%s", s.GetState(), time.Duration(s.GetAt()-first)*time.Millisecond)
		}
		var notes []string
		if s.GetSid() != "" {
			notes = append(notes, "sid "+s.GetSid())
		}
		if s.GetBoatId() != "" {
			notes = append(notes, "boat "+s.GetBoatId())
		}
		if s.GetAcked() {
			notes = append(notes, "acked")
		}
		if s.GetAttempt() != 0 {
			notes = append(notes, fmt.Sprintf("attempt %d", s.GetAttempt()))
		}
		if s.GetDetail() != "" {
			notes = append(notes, fmt.Sprintf("%q", s.GetDetail()))
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
	}
	return b.String()
}
