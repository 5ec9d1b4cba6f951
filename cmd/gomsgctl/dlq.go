package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gomsg/gomsg/pb/pushpb"
)

const dlqUsage = `dlq list [--since D] [--uid U] [--reason R] [--limit N] [--json] | dlq show --seq N | dlq redrive (--seq N | --uid U | --since D | --all) [--rate R] [--dry-run] | dlq purge --before D --yes`

// dlqCmd runs `gomsgctl dlq list|show|redrive|purge`.
func dlqCmd(ctx context.Context, args []string, out, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("want a subcommand: %s", dlqUsage)
	}
	switch args[0] {
	case "list":
		return dlqList(ctx, args[1:], out, stderr)
	case "show":
		return dlqShow(ctx, args[1:], out, stderr)
	case "redrive":
		return dlqRedrive(ctx, args[1:], out, stderr)
	case "purge":
		return dlqPurge(ctx, args[1:], out, stderr)
	case "-h", "-help", "--help":
		fmt.Fprintf(stderr, "usage: gomsgctl %s\n", strings.ReplaceAll(dlqUsage, " | ", "\n       gomsgctl "))
		return flag.ErrHelp
	}
	return usageErrorf("unknown subcommand %q: %s", args[0], dlqUsage)
}

// dlqFlags are the flags every dlq subcommand takes: where station is and
// the key (it needs the dlq scope).
func dlqFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, func(ctx context.Context) (pushpb.PushClient, context.Context, func(), error)) {
	fs := newFlagSet("dlq "+name, "dlq "+synopsis, stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	return fs, func(ctx context.Context) (pushpb.PushClient, context.Context, func(), error) {
		return pushAPI(ctx, *addr, tr, *key)
	}
}

// parseWhen reads a point in time: a duration before now ("2h", "30m"), an
// RFC 3339 time or a UTC date (2026-12-01).
func parseWhen(flagName, v string) (int64, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return 0, usageErrorf("--%s %s: a duration before now must be positive", flagName, v)
		}
		return time.Now().Add(-d).UnixMilli(), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, usageErrorf("--%s %q: want a duration before now (2h), an RFC 3339 time or a date (2006-01-02)", flagName, v)
}

func dlqList(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs, dial := dlqFlags("list", "list [--since D] [--uid U] [--reason R] [--limit N] [--json] [flags]", stderr)
	since := fs.String("since", "", "only dead letters since D: a duration before now (2h), an RFC 3339 time or a date")
	uid := fs.String("uid", "", "only this user's tasks")
	reason := fs.String("reason", "", "only tasks whose reason or last failure contains this text")
	limit := fs.Int("limit", 0, "at most this many, newest first (default: station's, 100; at most 1000)")
	asJSON := fs.Bool("json", false, "print the answer as one line of protojson")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	req := &pushpb.ListDeadLettersRequest{Uid: *uid, Reason: *reason, Limit: int32(*limit)}
	if *since != "" {
		var err error
		if req.SinceMs, err = parseWhen("since", *since); err != nil {
			return err
		}
	}
	api, ctx, done, err := dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.ListDeadLetters(ctx, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, resp)
	}
	for _, r := range resp.GetRecords() {
		if _, err := fmt.Fprintln(out, deadLetterLine(r)); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(out, "%d shown of %d dead letters matching\n", len(resp.GetRecords()), resp.GetMatched())
	return err
}

// deadLetterLine is one dead letter:
//
//	seq 7405… alice [ios] to_uid msgs [7405…] attempts 4 redrives 0 dead 2026-12-06T16:40:01.123Z last "deliver: …"
func deadLetterLine(r *pushpb.DeadLetterSummary) string {
	return fmt.Sprintf("seq %d %s [%s] %s msgs %v attempts %d redrives %d dead %s last %q", r.GetSeq(), r.GetUid(),
		strings.Join(r.GetPlatforms(), ","), r.GetKind(), r.GetMsgSeqs(), r.GetAttempts(), r.GetRedriveCount(),
		time.UnixMilli(r.GetDeadAt()).UTC().Format("2006-01-02T15:04:05.000Z"), r.GetLastError())
}

func dlqShow(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs, dial := dlqFlags("show", "show --seq N [flags]", stderr)
	seq := fs.Int64("seq", 0, "the task's seq, or one of its messages' (required)")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *seq <= 0 {
		return usageErrorf("--seq is required (a seq dlq list printed)")
	}
	api, ctx, done, err := dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.GetDeadLetter(ctx, &pushpb.GetDeadLetterRequest{Seq: *seq})
	if err != nil {
		return err
	}
	return printJSON(out, resp)
}

func dlqRedrive(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs, dial := dlqFlags("redrive", "redrive (--seq N | --uid U | --since D | --all) [--rate R] [--dry-run] [flags]", stderr)
	seq := fs.Int64("seq", 0, "the task with this seq (a task's or a message's)")
	uid := fs.String("uid", "", "this user's tasks")
	since := fs.String("since", "", "the tasks dead-lettered since D: a duration before now (2h), an RFC 3339 time or a date")
	all := fs.Bool("all", false, "every waiting task")
	perSec := fs.Float64("rate", 10, "at most this many tasks per second (at most 1000)")
	dry := fs.Bool("dry-run", false, "print what would be redriven, put nothing back")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	n := 0
	for _, set := range []bool{*seq != 0, *uid != "", *since != "", *all} {
		if set {
			n++
		}
	}
	if n != 1 {
		return usageErrorf("give exactly one of --seq, --uid, --since and --all")
	}
	if *perSec <= 0 || *perSec > 1000 {
		return usageErrorf("--rate %g: want more than 0 and at most 1000", *perSec)
	}
	req := &pushpb.RedriveDeadLettersRequest{Seq: *seq, Uid: *uid, All: *all, Rate: *perSec, DryRun: *dry,
		// Each call is paced by station at --rate: a batch fits in a
		// call's 30 seconds.
		Limit: int32(min(10000, max(1, int(*perSec*20))))}
	if *since != "" {
		var err error
		if req.SinceMs, err = parseWhen("since", *since); err != nil {
			return err
		}
	}
	verb := "redriven"
	if *dry {
		verb = "would redrive"
	}
	var redriven, refused int
	seen := map[int64]bool{}
	for {
		api, cctx, done, err := dial(ctx)
		if err != nil {
			return err
		}
		resp, err := api.RedriveDeadLetters(cctx, req)
		done()
		if err != nil {
			if redriven > 0 {
				fmt.Fprintf(out, "%s %d, refused %d before the error\n", verb, redriven, refused)
			}
			return err
		}
		for _, r := range resp.GetRedriven() {
			fmt.Fprintf(out, "%s: %s\n", verb, deadLetterLine(r))
		}
		for _, r := range resp.GetRefused() {
			// Each call answers the refusals before its batch again.
			if !seen[r.GetSeq()] {
				seen[r.GetSeq()] = true
				refused++
				fmt.Fprintf(out, "refused: seq %d %s: %s\n", r.GetSeq(), r.GetUid(), r.GetReason())
			}
		}
		redriven += len(resp.GetRedriven())
		// A dry run changes nothing: the next call would list the same.
		if !resp.GetMore() || *dry || len(resp.GetRedriven()) == 0 {
			if resp.GetMore() {
				fmt.Fprintf(out, "more match: run again to go on\n")
			}
			break
		}
	}
	_, err := fmt.Fprintf(out, "%s %d, refused %d\n", verb, redriven, refused)
	return err
}

func dlqPurge(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs, dial := dlqFlags("purge", "purge --before D --yes [flags]", stderr)
	before := fs.String("before", "", "purge what was dead-lettered before D: a duration before now (2h), an RFC 3339 time or a date (required)")
	yes := fs.Bool("yes", false, "confirm: a purge cannot be undone")
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *before == "" {
		return usageErrorf("--before is required")
	}
	ms, err := parseWhen("before", *before)
	if err != nil {
		return err
	}
	if !*yes {
		return usageErrorf("refusing to purge the dead letters before %s without --yes: a purge cannot be undone",
			time.UnixMilli(ms).UTC().Format(time.RFC3339))
	}
	api, ctx, done, err := dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.PurgeDeadLetters(ctx, &pushpb.PurgeDeadLettersRequest{BeforeMs: ms, Confirm: true})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "purged %d dead letters before %s\n", resp.GetPurged(), time.UnixMilli(ms).UTC().Format(time.RFC3339))
	return err
}
