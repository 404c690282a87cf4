package switchd

import (
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// flowMod applies a FLOW_MOD to the tables. The fast path catches up in
// the revalidator's next round (or at the next BARRIER).
func (s *Switch) flowMod(oc *ofConn, m *openflow.FlowMod, raw []byte) {
	if err := m.Validate(); err != nil {
		_ = oc.send(openflow.ErrorReply(err, raw))
		return
	}
	if m.BufferID != openflow.NoBuffer {
		// nagare never buffers packets (n_buffers = 0 in FEATURES_REPLY).
		_ = oc.send(openflow.ErrorReply(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBufferUnknown}, raw))
		return
	}
	removed, err := s.pl.FlowMod(m)
	if err != nil {
		_ = oc.send(openflow.ErrorReply(err, raw))
		return
	}
	for _, rm := range removed {
		s.sendFlowRemoved(rm)
	}
}

// sendFlowRemoved reports a removed rule to the controllers that asked
// for it (SEND_FLOW_REM) and want the reason.
func (s *Switch) sendFlowRemoved(rm ofproto.Removed) {
	if rm.SendFlowRem() {
		s.broadcast(rm.Message(), rm.Reason)
	}
}

// packetOut sends a controller's packet through its action list: the same
// translation and the same fast-path action code as any packet.
func (s *Switch) packetOut(m *openflow.PacketOut) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.BufferID != openflow.NoBuffer {
		return &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBufferUnknown}
	}
	key, err := packetKey(m.Data, m.InPort)
	if err != nil {
		return &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadPacket, Reason: err.Error()}
	}
	t, err := s.pl.TranslatePacketOut(key, m.InPort, m.Actions, ofproto.TranslateOptions{PacketOut: true})
	if err != nil {
		return err
	}
	// The rules an output:TABLE went through (and the groups the actions
	// used) count the packet, as they count a packet from a port: no
	// cached flow will ever report it.
	s.pl.Credit(t.Rules, 1, uint64(len(m.Data)), time.Now())
	for _, pi := range t.PacketIns {
		s.sendPacketIn(pi, m.Data, len(m.Data), key)
	}
	acts := withoutUserspace(s.lower(t.Actions))
	if len(acts) == 0 {
		return nil
	}
	in := m.InPort
	if in >= openflow.PortMax {
		in = 0 // OFPP_CONTROLLER / ANY: no ingress device
	}
	if err := s.dp.Execute(m.Data, in, acts); err != nil {
		return &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadPacket, Reason: err.Error()}
	}
	return nil
}

// pipelineMultipart answers the statistics the pipeline keeps.
func (s *Switch) pipelineMultipart(m *openflow.MultipartRequest) (openflow.MultipartBody, error) {
	switch m.Type {
	case openflow.MPFlow:
		req, _ := m.Body.(*openflow.FlowStatsRequest)
		if req == nil {
			return nil, &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadLen}
		}
		return &openflow.FlowStatsReply{Stats: s.pl.FlowStats(req)}, nil
	case openflow.MPAggregate:
		req, _ := m.Body.(*openflow.AggregateStatsRequest)
		if req == nil {
			return nil, &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadLen}
		}
		agg := s.pl.AggregateStats(req)
		return &agg, nil
	case openflow.MPTable:
		return &openflow.TableStatsReply{Stats: s.pl.TableStats()}, nil
	case openflow.MPGroup:
		req, _ := m.Body.(*openflow.GroupStatsRequest)
		if req == nil {
			req = &openflow.GroupStatsRequest{GroupID: openflow.GroupAll}
		}
		return &openflow.GroupStatsReply{Stats: s.pl.GroupStats(req)}, nil
	case openflow.MPGroupDesc:
		return &openflow.GroupDescReply{Groups: s.pl.GroupDesc()}, nil
	case openflow.MPGroupFeatures:
		f := s.pl.GroupFeatures()
		return &f, nil
	}
	return nil, &openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadMultipart}
}

// packetKey parses a frame into a flow key the way the fast path does, so
// packet-outs and traces translate like real packets.
func packetKey(pkt []byte, inPort uint32) (flow.Key, error) {
	k, err := flow.ParsePacket(pkt)
	if err != nil {
		return flow.Key{}, err
	}
	k.InPort = inPort
	return k, nil
}
