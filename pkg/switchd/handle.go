package switchd

import (
	"strconv"

	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// handle dispatches one decoded message from oc. raw is its encoding, for
// errors that echo the request.
func (s *Switch) handle(oc *ofConn, msg openflow.Message, raw []byte) {
	xid := msg.Hdr().Xid
	fail := func(err error) { _ = oc.send(openflow.ErrorReply(err, raw)) }
	reply := func(m openflow.Message) {
		m.Hdr().Xid = xid
		_ = oc.send(m)
	}
	// Messages that change the switch are refused from slaves.
	switch msg.(type) {
	case *openflow.FlowMod, *openflow.GroupMod, *openflow.PortMod, *openflow.TableMod, *openflow.PacketOut, *openflow.MeterMod:
		if oc.isSlave() {
			fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestIsSlave})
			return
		}
	}
	switch m := msg.(type) {
	case *openflow.EchoRequest:
		reply(m.Reply())
	case *openflow.EchoReply, *openflow.Hello:
		// keepalive answered / a late HELLO: nothing to do
	case *openflow.FeaturesRequest:
		reply(&openflow.FeaturesReply{
			DatapathID: s.cfg.DatapathID, NBuffers: 0, NTables: uint8(s.numTables),
			Capabilities: openflow.CapFlowStats | openflow.CapTableStats | openflow.CapPortStats | openflow.CapGroupStats,
		})
	case *openflow.GetConfigRequest:
		s.configMu.Lock()
		c := openflow.SwitchConfig{Flags: s.swFlags, MissSendLen: s.missSendLen}
		s.configMu.Unlock()
		reply(&openflow.GetConfigReply{SwitchConfig: c})
	case *openflow.SetConfig:
		if err := m.Validate(); err != nil {
			fail(err)
			return
		}
		s.configMu.Lock()
		s.swFlags, s.missSendLen = m.Flags, m.MissSendLen
		s.configMu.Unlock()
	case *openflow.BarrierRequest:
		// Everything before it has been handled (one message at a time);
		// wait until the fast path agrees with the tables too.
		s.rv.sync()
		reply(&openflow.BarrierReply{})
	case *openflow.RoleRequest:
		r, err := s.roleRequest(oc, m)
		if err != nil {
			fail(err)
			return
		}
		reply(r)
	case *openflow.GetAsyncRequest:
		oc.mu.Lock()
		a := oc.async
		oc.mu.Unlock()
		reply(&openflow.GetAsyncReply{AsyncConfig: a})
	case *openflow.SetAsync:
		oc.mu.Lock()
		oc.async = m.AsyncConfig
		oc.mu.Unlock()
	case *openflow.FlowMod:
		s.flowMod(oc, m, raw)
	case *openflow.GroupMod:
		// The pipeline validates: buckets have no match, so the codec's
		// match-consistency checks do not apply to them (groups.go).
		if err := s.pl.GroupMod(m); err != nil {
			fail(err)
		}
	case *openflow.TableMod:
		if err := m.Validate(); err != nil {
			fail(err)
			return
		}
		if err := s.pl.TableMod(m); err != nil {
			fail(err)
		}
	case *openflow.PortMod:
		if err := m.Validate(); err != nil {
			fail(err)
			return
		}
		if err := s.ports.PortMod(m); err != nil {
			fail(err)
		}
	case *openflow.MeterMod:
		if err := s.meterMod(m); err != nil {
			fail(err)
		}
	case *openflow.PacketOut:
		if err := s.packetOut(m); err != nil {
			fail(err)
		}
	case *openflow.MultipartRequest:
		s.multipart(oc, m, raw)
	case *openflow.Experimenter:
		if m.Experimenter == openflow.ExperimenterNagare {
			s.vsx(oc, m, fail, reply)
			return
		}
		fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadExperimenter})
	default:
		// Replies and asynchronous messages a switch never receives.
		fail(&openflow.Error{Type: openflow.ErrTypeBadRequest, Code: openflow.BadRequestBadType})
	}
}

// roleRequest implements controller roles: one master at a time, stale
// generation ids refused.
func (s *Switch) roleRequest(oc *ofConn, m *openflow.RoleRequest) (*openflow.RoleReply, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	s.connMu.Lock()
	defer s.connMu.Unlock()
	role := m.Role.Role
	if role == openflow.RoleMaster || role == openflow.RoleSlave {
		if s.genSet && int64(m.GenerationID-s.generation) < 0 {
			return nil, &openflow.Error{Type: openflow.ErrTypeRoleRequestFailed, Code: 0 /* STALE */}
		}
		s.generation, s.genSet = m.GenerationID, true
	}
	if role != openflow.RoleNoChange {
		if role == openflow.RoleMaster {
			for c := range s.conns {
				if c != oc {
					c.mu.Lock()
					if c.role == openflow.RoleMaster {
						c.role = openflow.RoleSlave
					}
					c.mu.Unlock()
				}
			}
		}
		oc.mu.Lock()
		oc.role = role
		oc.mu.Unlock()
	}
	oc.mu.Lock()
	role = oc.role
	oc.mu.Unlock()
	return &openflow.RoleReply{Role: openflow.Role{Role: role, GenerationID: s.generation}}, nil
}

// multipart answers statistics and description requests, splitting long
// replies into parts flagged REPLY_MORE.
func (s *Switch) multipart(oc *ofConn, m *openflow.MultipartRequest, raw []byte) {
	if err := m.Validate(); err != nil {
		_ = oc.send(openflow.ErrorReply(err, raw))
		return
	}
	var body openflow.MultipartBody
	var err error
	switch m.Type {
	case openflow.MPDesc:
		body = &openflow.DescReply{MfrDesc: "nagare", HWDesc: "nagare eBPF fast path", SWDesc: "nagare-switch",
			SerialNum: "None", DPDesc: s.cfg.Bridge}
	case openflow.MPPortDesc:
		var ports []openflow.Port
		for _, p := range s.ports.list() {
			ports = append(ports, p.desc())
		}
		body = &openflow.PortDescReply{Ports: ports}
	case openflow.MPPortStats:
		req, _ := m.Body.(*openflow.PortStatsRequest)
		no := openflow.PortAny
		if req != nil {
			no = req.PortNo
		}
		var st []openflow.PortStats
		st, err = s.ports.stats(no)
		body = &openflow.PortStatsReply{Stats: st}
	case openflow.MPTableFeatures:
		if tf, ok := m.Body.(*openflow.TableFeaturesBody); ok && len(tf.Tables) > 0 {
			err = &openflow.Error{Type: openflow.ErrTypeTableFeaturesFailed, Code: 5 /* EPERM */, Reason: "table features are fixed"}
			break
		}
		body = &openflow.TableFeaturesBody{Tables: s.tableFeatures(), Reply: true}
	case openflow.MPMeterFeatures:
		body = meterFeatures()
	case openflow.MPMeter, openflow.MPMeterConfig:
		body, err = s.meterMultipart(m)
	default:
		body, err = s.pipelineMultipart(m)
	}
	if err != nil {
		_ = oc.send(openflow.ErrorReply(err, raw))
		return
	}
	parts, err := openflow.SplitReply(&openflow.MultipartReply{MsgHeader: openflow.MsgHeader{Xid: m.Xid}, Type: m.Type, Body: body})
	if err != nil {
		_ = oc.send(openflow.ErrorReply(err, raw))
		return
	}
	for _, p := range parts {
		p.Xid = m.Xid
		if oc.send(p) != nil {
			return
		}
	}
}

// tableFeatures describes the tables: every instruction and action the
// pipeline implements, every match field, any later table as next table.
func (s *Switch) tableFeatures() []openflow.TableFeatures {
	n := s.numTables
	var insts, acts []openflow.TypeID
	// goto_table, write_metadata, write/apply/clear_actions, meter
	for _, t := range []uint16{1, 2, 3, 4, 5, 6} {
		insts = append(insts, openflow.TypeID{Type: t})
	}
	// output, copy_ttl_out/in, set/dec_mpls_ttl, push/pop_vlan,
	// push/pop_mpls, group, set_nw_ttl, dec_nw_ttl, set_field,
	// push/pop_pbb (no set_queue: ports have no queues)
	for _, t := range []uint16{0, 11, 12, 15, 16, 17, 18, 19, 20, 22, 23, 24, 25, 26, 27} {
		acts = append(acts, openflow.TypeID{Type: t})
	}
	// Match: a field the spec makes maskable is advertised with its mask
	// (Open vSwitch does the same), so controllers know they may mask
	// it; every field can be wildcarded; set-field lists what set_field
	// can rewrite.
	var match, wild, sets []uint32
	for _, f := range supportedFields {
		match = append(match, openflow.OXMHeader(f, f.Maskable()))
		wild = append(wild, openflow.OXMHeader(f, false))
		if ofproto.Settable(f) {
			sets = append(sets, openflow.OXMHeader(f, false))
		}
	}
	out := make([]openflow.TableFeatures, n)
	for i := range out {
		var next []uint8
		for j := i + 1; j < n; j++ {
			next = append(next, uint8(j))
		}
		out[i] = openflow.TableFeatures{
			TableID: uint8(i), Name: tableName(i),
			MetadataMatch: ^uint64(0), MetadataWrite: ^uint64(0), MaxEntries: 1 << 20,
			Properties: []openflow.TableFeatureProp{
				{Type: openflow.TFPInstructions, IDs: insts},
				{Type: openflow.TFPNextTables, Tables: next},
				{Type: openflow.TFPWriteActions, IDs: acts},
				{Type: openflow.TFPApplyActions, IDs: acts},
				{Type: openflow.TFPMatch, OXMs: match},
				{Type: openflow.TFPWildcards, OXMs: wild},
				{Type: openflow.TFPWriteSetField, OXMs: sets},
				{Type: openflow.TFPApplySetField, OXMs: sets},
			},
		}
	}
	return out
}

func tableName(i int) string {
	if i == 0 {
		return "classifier"
	}
	return "table" + strconv.Itoa(i)
}

// supportedFields are the OXM fields the pipeline matches on (the ones the
// fast path's key carries, plus metadata).
var supportedFields = []openflow.Field{
	openflow.FieldInPort, openflow.FieldMetadata, openflow.FieldEthDst, openflow.FieldEthSrc,
	openflow.FieldEthType, openflow.FieldVLANVID, openflow.FieldVLANPCP, openflow.FieldMPLSLabel,
	openflow.FieldMPLSTC, openflow.FieldMPLSBOS, openflow.FieldPBBISID, openflow.FieldIPDSCP,
	openflow.FieldIPECN, openflow.FieldIPProto, openflow.FieldIPv4Src, openflow.FieldIPv4Dst,
	openflow.FieldTCPSrc, openflow.FieldTCPDst, openflow.FieldUDPSrc, openflow.FieldUDPDst,
	openflow.FieldSCTPSrc, openflow.FieldSCTPDst, openflow.FieldICMPv4Type, openflow.FieldICMPv4Code,
	openflow.FieldARPOp, openflow.FieldARPSPA, openflow.FieldARPTPA, openflow.FieldARPSHA,
	openflow.FieldARPTHA, openflow.FieldIPv6Src, openflow.FieldIPv6Dst, openflow.FieldIPv6FLabel,
	openflow.FieldICMPv6Type, openflow.FieldICMPv6Code, openflow.FieldIPv6NDTarget, openflow.FieldIPv6NDSLL,
	openflow.FieldIPv6NDTLL, openflow.FieldTunnelID,
}
