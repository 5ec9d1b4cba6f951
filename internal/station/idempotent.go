package station

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
	"unicode"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// IdempotencyPending bounds how long a Push with an idempotency key may be
// in flight: its publish is given up after it, and its reservation lapses
// after it even if the station died before settling it.
const IdempotencyPending = time.Minute

// validIdempotencyKey accepts an empty key (none) or 1–128 bytes of
// printable characters without spaces.
func validIdempotencyKey(k string) error {
	if len(k) > 128 {
		return grpcerr.Invalid("idempotency_key", "is %d bytes, at most 128", len(k))
	}
	if strings.IndexFunc(k, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return grpcerr.Invalid("idempotency_key", "%q must not contain spaces or control characters", k)
	}
	return nil
}

// fingerprint is the SHA-256 of the request without its key, marshalled
// deterministically (maps in key order).
func fingerprint(req *pushpb.PushRequest) (string, error) {
	c := proto.Clone(req).(*pushpb.PushRequest)
	c.IdempotencyKey = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// idempotentPush publishes a keyed request at most once per
// --idempotency-window: the first call reserves the key, publishes and
// records the seqs; a retry of the same request gets them back; a different
// request under the key is refused, and so is a retry while the first call
// is still in flight (Aborted: retry).
func (s *Station) idempotentPush(ctx context.Context, req *pushpb.PushRequest, uids []string) ([]int64, error) {
	store := s.cfg.Idempotency
	if store == nil {
		return nil, grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "idempotency_key: this station has no idempotency store")
	}
	fp, err := fingerprint(req)
	if err != nil {
		return nil, err
	}
	r, err := store.Reserve(ctx, req.GetIdempotencyKey(), fp, IdempotencyPending)
	if err != nil {
		s.metrics.BackendErrors.WithLabelValues("redis", "idempotency").Inc()
		return nil, grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "%v", err)
	}
	switch r.State {
	case idempotency.Done:
		return r.Seqs, nil
	case idempotency.InFlight:
		return nil, &grpcerr.Error{Code: codes.Aborted, Detail: errorpb.Code_CODE_UNSPECIFIED, Field: "idempotency_key",
			Msg: "a push with this key is in progress; retry"}
	case idempotency.Conflict:
		return nil, grpcerr.Invalid("idempotency_key", "was used within --idempotency-window for a different request")
	}
	pctx, cancel := context.WithTimeout(ctx, IdempotencyPending)
	seqs, err := s.push(pctx, req, uids)
	cancel()
	// Settle whatever happens to the caller's context.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err != nil {
		if rerr := store.Release(sctx, r); rerr != nil {
			s.log.Warn("idempotency key not released; retries are refused until it lapses",
				zap.String("idempotency_key", req.GetIdempotencyKey()), zap.Error(rerr))
		}
		return nil, err
	}
	if ok, cerr := store.Complete(sctx, r, seqs, s.cfg.IdempotencyWindow); cerr != nil || !ok {
		s.log.Warn("idempotency key not recorded; a retry may publish again",
			zap.String("idempotency_key", req.GetIdempotencyKey()), zap.Bool("lapsed", !ok), zap.Error(cerr))
	}
	return seqs, nil
}
