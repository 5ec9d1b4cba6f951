package carrier

import (
	"context"
	"slices"
	"time"

	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// step is what a receipt says of one step of a task's messages on one
// platform; addSteps makes one receipt per message.
type step struct {
	state   receiptpb.State
	sid     string
	boatID  string
	acked   bool // DELIVERED: set on the messages that asked NEED_ACK
	attempt int32
	detail  string
}

// addSteps appends to rs a receipt of st for every message of msgs that
// asked NEED_RECEIPTS and that keep selects (nil: every one), sent to one
// (uid, platform). With receipts off it returns rs untouched and allocates
// nothing.
func (c *Carrier) addSteps(rs []*receiptpb.Receipt, uid, pl string, msgs []*msgpb.Message,
	keep func(*msgpb.Message) bool, st step) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return rs
	}
	for _, m := range msgs {
		if !receipt.Wanted(m) || keep != nil && !keep(m) {
			continue
		}
		rs = append(rs, &receiptpb.Receipt{Seq: m.GetSeq(), Uid: uid, Platform: pl, State: st.state,
			Sid: st.sid, BoatId: st.boatID, Acked: st.acked && asksAck(m), Attempt: st.attempt, Detail: st.detail})
	}
	return rs
}

// acceptedSteps appends to rs the ACCEPTED receipts of a ToUid task's
// messages, as station wrote them (receipt.Accepted). Station writes them
// in the Push call that writes the task, but to the receipts topic, which
// carrier's later steps may reach first: a task's first pass leads its
// receipts with them again, so a uid's receipts start with ACCEPTED in the
// topic whatever the timing. A consumer drops the repeat by id, as it
// drops every repeat.
func (c *Carrier) acceptedSteps(rs []*receiptpb.Receipt, p *mqpb.Payload) []*receiptpb.Receipt {
	t := p.GetToUid()
	if !c.cfg.Receipts.Enabled() || t == nil || p.GetRetryCount() != 0 {
		return rs
	}
	return receipt.Accepted(rs, t.GetUid(), t.GetPlatforms(), t.GetMsgs())
}

// deliverySteps returns the receipts of a pass of ToUid task p, per
// platform: on the first pass ACCEPTED (acceptedSteps), then DELIVERED to
// the newest session, STORED for the messages kept offline, and DROPPED for
// those nobody took and nothing kept, unless the platform is retried
// (retryLater records RETRIED or DEAD_LETTERED for it).
func (c *Carrier) deliverySteps(p *mqpb.Payload, results map[string]outcome, newest map[string]*target) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return nil
	}
	t := p.GetToUid()
	uid, msgs := t.GetUid(), t.GetMsgs()
	rs := c.acceptedSteps(nil, p)
	for _, pl := range t.GetPlatforms() {
		if results[pl] == delivered {
			tg := newest[pl]
			rs = c.addSteps(rs, uid, pl, msgs, nil, step{state: receiptpb.State_DELIVERED, sid: tg.Sid, boatID: tg.BoatID, acked: true})
			continue
		}
		p, ok := c.cfg.Platforms.Get(pl)
		stores := ok && p.Offline.Store
		if stores {
			rs = c.addSteps(rs, uid, pl, msgs, needOffline, step{state: receiptpb.State_STORED})
		}
		if results[pl] == failed && !c.storedAll(pl, msgs) {
			continue // retried
		}
		rs = c.addSteps(rs, uid, pl, msgs, func(m *msgpb.Message) bool { return !stores || !needOffline(m) },
			step{state: receiptpb.State_DROPPED})
	}
	return rs
}

// replaySteps returns the REPLAYED receipts of the messages of a replayed
// page (msgs) that asked NEED_RECEIPTS and that the session ACKed (acked).
func (c *Carrier) replaySteps(tg target, msgs []*msgpb.Message, acked []int64) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return nil
	}
	var rs []*receiptpb.Receipt
	for _, m := range msgs {
		if !receipt.Wanted(m) || !slices.Contains(acked, m.GetSeq()) {
			continue
		}
		rs = append(rs, &receiptpb.Receipt{Seq: m.GetSeq(), Uid: tg.uid, Platform: tg.Platform, State: receiptpb.State_REPLAYED,
			Sid: tg.Sid, BoatId: tg.BoatID, Acked: true})
	}
	return rs
}

// expirySteps appends an EXPIRED receipt per seq the offline store gave up
// unread whose message asked NEED_RECEIPTS. The store returns only seqs, not
// the messages' options: Tracked says which asked (and forgets them, as
// their last stored step is now known; a retry of the task would not see
// them again either, the store no longer holds them).
func (c *Carrier) expirySteps(ctx context.Context, rs []*receiptpb.Receipt, uid, pl string, seqs []int64, why string) ([]*receiptpb.Receipt, error) {
	if !c.cfg.Receipts.Enabled() || len(seqs) == 0 {
		return rs, nil
	}
	if t := c.cfg.Tracked; t != nil {
		var err error
		if seqs, err = t.Filter(ctx, uid, pl, seqs); err != nil {
			return rs, err
		}
		if err := t.Forget(ctx, uid, pl, seqs); err != nil {
			return rs, err
		}
	}
	for _, seq := range seqs {
		rs = append(rs, &receiptpb.Receipt{Seq: seq, Uid: uid, Platform: pl, State: receiptpb.State_EXPIRED, Detail: why})
	}
	return rs, nil
}

// track records, per platform that stored them, the stored messages that
// asked NEED_RECEIPTS (see Config.Tracked).
func (c *Carrier) track(ctx context.Context, uid string, items []offline.Item, msgs []*msgpb.Message) error {
	t := c.cfg.Tracked
	if !c.cfg.Receipts.Enabled() || t == nil || !slices.ContainsFunc(msgs, receipt.Wanted) {
		return nil
	}
	byPlatform := map[string][]receipt.TrackedMsg{}
	expiry := map[string]time.Duration{}
	wanted := map[int64]bool{}
	for _, m := range msgs {
		wanted[m.GetSeq()] = receipt.Wanted(m)
	}
	for _, it := range items {
		if wanted[it.Msg.Seq] {
			byPlatform[it.Platform] = append(byPlatform[it.Platform], receipt.TrackedMsg{Seq: it.Msg.Seq, SentAt: it.Msg.Timestamp})
			expiry[it.Platform] = it.Policy.Expiry
		}
	}
	for pl, ms := range byPlatform {
		if err := t.Add(ctx, uid, pl, expiry[pl], ms...); err != nil {
			return err
		}
	}
	return nil
}

// forgetTracked forgets seqs the store no longer holds after an ACK: their
// REPLAYED step is recorded.
func (c *Carrier) forgetTracked(ctx context.Context, uid, pl string, seqs []int64) error {
	if !c.cfg.Receipts.Enabled() || c.cfg.Tracked == nil {
		return nil
	}
	return c.cfg.Tracked.Forget(ctx, uid, pl, seqs)
}
