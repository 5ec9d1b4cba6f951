package carrier

import (
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

// addSteps appends to rs a receipt of st for every message of msgs that keep
// selects (nil: every one), sent to one (uid, platform). With receipts off
// it returns rs untouched and allocates nothing.
func (c *Carrier) addSteps(rs []*receiptpb.Receipt, uid, pl string, msgs []*msgpb.Message,
	keep func(*msgpb.Message) bool, st step) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return rs
	}
	for _, m := range msgs {
		if keep != nil && !keep(m) {
			continue
		}
		rs = append(rs, &receiptpb.Receipt{Seq: m.GetSeq(), Uid: uid, Platform: pl, State: st.state,
			Sid: st.sid, BoatId: st.boatID, Acked: st.acked && asksAck(m), Attempt: st.attempt, Detail: st.detail})
	}
	return rs
}

// deliverySteps returns the receipts of a ToUid task's first pass, per
// platform: DELIVERED to the newest session, STORED for the messages kept
// offline, and DROPPED for those nobody took and nothing kept, unless the
// platform is retried (retryLater records RETRIED or DEAD_LETTERED for it).
func (c *Carrier) deliverySteps(t *mqpb.ToUid, results map[string]outcome, newest map[string]*target) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return nil
	}
	uid, msgs := t.GetUid(), t.GetMsgs()
	var rs []*receiptpb.Receipt
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

// replaySteps returns the REPLAYED receipts of the seqs a session ACKed
// from the offline store.
func (c *Carrier) replaySteps(tg target, acked []int64) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return nil
	}
	rs := make([]*receiptpb.Receipt, len(acked))
	for i, seq := range acked {
		rs[i] = &receiptpb.Receipt{Seq: seq, Uid: tg.uid, Platform: tg.Platform, State: receiptpb.State_REPLAYED,
			Sid: tg.Sid, BoatId: tg.BoatID, Acked: true}
	}
	return rs
}

// expirySteps appends an EXPIRED receipt per seq the offline store gave up
// unread.
func (c *Carrier) expirySteps(rs []*receiptpb.Receipt, uid, pl string, seqs []int64, why string) []*receiptpb.Receipt {
	if !c.cfg.Receipts.Enabled() {
		return rs
	}
	for _, seq := range seqs {
		rs = append(rs, &receiptpb.Receipt{Seq: seq, Uid: uid, Platform: pl, State: receiptpb.State_EXPIRED, Detail: why})
	}
	return rs
}
