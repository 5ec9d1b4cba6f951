package station

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// GetDelivery's page sizes.
const (
	defaultDeliveryPage = 100
	maxDeliveryPage     = 1000
)

// GetDelivery reads one page of what became of a seq at each of its targets,
// from the receipts carrier keeps (package receipt). NotFound when nothing
// is recorded for the seq (for the uid, when one is given).
func (s *Station) GetDelivery(ctx context.Context, req *pushpb.GetDeliveryRequest) (*pushpb.GetDeliveryResponse, error) {
	seq, uid, size := req.GetSeq(), req.GetUid(), int(req.GetPageSize())
	switch {
	case seq <= 0:
		return nil, grpcerr.Invalid("seq", "%d, must be positive (a seq Push returned)", seq)
	case size < 0 || size > maxDeliveryPage:
		return nil, grpcerr.Invalid("page_size", "%d, must be 0 (default %d) to %d", size, defaultDeliveryPage, maxDeliveryPage)
	}
	if size == 0 {
		size = defaultDeliveryPage
	}
	if uid != "" {
		if err := validUID(uid); err != nil {
			return nil, err
		}
	}
	if s.cfg.Deliveries == nil {
		return nil, grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "this station has no delivery store")
	}
	page, err := s.cfg.Deliveries.Get(ctx, seq, uid, size, req.GetPageToken())
	switch {
	case errors.Is(err, receipt.ErrPageToken):
		return nil, grpcerr.Invalid("page_token", "not one a previous response for seq %d returned%s", seq, forUID(uid))
	case err != nil:
		return nil, err
	case len(page.Targets) == 0 && req.GetPageToken() == "":
		return nil, grpcerr.New(codes.NotFound, errorpb.Code_CODE_UNSPECIFIED,
			"no delivery record for seq %d%s (unknown, older than --delivery-retention, or receipts off)", seq, forUID(uid))
	}
	return &pushpb.GetDeliveryResponse{Seq: seq, Targets: page.Targets, NextPageToken: page.Next}, nil
}

func forUID(uid string) string {
	if uid == "" {
		return ""
	}
	return " for uid " + uid
}

func (p *pushServer) GetDelivery(ctx context.Context, req *pushpb.GetDeliveryRequest) (*pushpb.GetDeliveryResponse, error) {
	resp, err := p.s.GetDelivery(ctx, req)
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return resp, nil
}
