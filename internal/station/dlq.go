package station

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The dead-letter methods (scope dlq) delegate to package dlq; every call
// that changes something is logged with the key that made it.

func (p *pushServer) dlqReady() error {
	if p.s.cfg.DLQ == nil {
		return status.Error(codes.Unimplemented, "dead-letter tools are not available on this station: it was built without a dead-letter reader")
	}
	return nil
}

func (p *pushServer) ListDeadLetters(ctx context.Context, req *pushpb.ListDeadLettersRequest) (*pushpb.ListDeadLettersResponse, error) {
	if err := p.dlqReady(); err != nil {
		return nil, err
	}
	resp, err := p.s.cfg.DLQ.List(ctx, req)
	return resp, grpcerr.Status(err)
}

func (p *pushServer) GetDeadLetter(ctx context.Context, req *pushpb.GetDeadLetterRequest) (*pushpb.GetDeadLetterResponse, error) {
	if err := p.dlqReady(); err != nil {
		return nil, err
	}
	resp, err := p.s.cfg.DLQ.Get(ctx, req.GetSeq())
	return resp, grpcerr.Status(err)
}

func (p *pushServer) RedriveDeadLetters(ctx context.Context, req *pushpb.RedriveDeadLettersRequest) (*pushpb.RedriveDeadLettersResponse, error) {
	if err := p.dlqReady(); err != nil {
		return nil, err
	}
	resp, err := p.s.cfg.DLQ.Redrive(ctx, req)
	if resp != nil && !req.GetDryRun() {
		p.s.log.Info("dead letters redriven", keyField(ctx), zap.Int("redriven", len(resp.GetRedriven())),
			zap.Int("refused", len(resp.GetRefused())), zap.Int64("seq", req.GetSeq()), zap.String("uid", req.GetUid()),
			zap.Int64("since_ms", req.GetSinceMs()), zap.Bool("all", req.GetAll()), zap.Error(err))
	}
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return resp, nil
}

func (p *pushServer) PurgeDeadLetters(ctx context.Context, req *pushpb.PurgeDeadLettersRequest) (*pushpb.PurgeDeadLettersResponse, error) {
	if err := p.dlqReady(); err != nil {
		return nil, err
	}
	resp, err := p.s.cfg.DLQ.Purge(ctx, req)
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	p.s.log.Warn("dead letters purged", keyField(ctx), zap.Int64("before_ms", req.GetBeforeMs()), zap.Int64("purged", resp.GetPurged()))
	return resp, nil
}

// keyField names the API key a call was admitted with.
func keyField(ctx context.Context) zap.Field {
	k := apikey.FromContext(ctx)
	switch {
	case k == nil:
		return zap.Skip()
	case k.Name != "":
		return zap.String("key", k.Name)
	case k.Cert != "":
		return zap.String("key", apikey.CertPrefix+k.Cert)
	}
	return zap.String("key", "(unnamed)")
}
