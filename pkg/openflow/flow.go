package openflow

// FLOW_MOD and FLOW_REMOVED: installing and retiring flow entries.

// Flow-mod commands (ofp_flow_mod_command).
const (
	FlowAdd          uint8 = 0
	FlowModify       uint8 = 1
	FlowModifyStrict uint8 = 2
	FlowDelete       uint8 = 3
	FlowDeleteStrict uint8 = 4
)

// Flow-mod flags (ofp_flow_mod_flags).
const (
	FlowFlagSendFlowRem  uint16 = 1 << 0
	FlowFlagCheckOverlap uint16 = 1 << 1
	FlowFlagResetCounts  uint16 = 1 << 2
	FlowFlagNoPktCounts  uint16 = 1 << 3
	FlowFlagNoBytCounts  uint16 = 1 << 4
	flowFlagsAll                = 0x1f
)

// FlowMod is OFPT_FLOW_MOD.
//
//	8 bytes: ofp_header
//	8 bytes: cookie
//	8 bytes: cookie_mask (for modify/delete: only flows whose cookie matches under the mask)
//	1 byte:  table_id (TableAll for delete in all tables)
//	1 byte:  command (Flow*)
//	2 bytes: idle_timeout, seconds, 0 = none
//	2 bytes: hard_timeout, seconds, 0 = none
//	2 bytes: priority
//	4 bytes: buffer_id (NoBuffer)
//	4 bytes: out_port (delete: only flows outputting here; PortAny = no filter)
//	4 bytes: out_group (delete: only flows using this group; GroupAny = no filter)
//	2 bytes: flags (FlowFlag*)
//	2 bytes: pad
//	n bytes: match, padded to 8
//	rest:    instructions
type FlowMod struct {
	MsgHeader
	Cookie       uint64
	CookieMask   uint64
	TableID      uint8
	Command      uint8
	IdleTimeout  uint16
	HardTimeout  uint16
	Priority     uint16
	BufferID     uint32
	OutPort      uint32
	OutGroup     uint32
	Flags        uint16
	Match        Match
	Instructions Instructions
}

// MsgType returns TypeFlowMod.
func (*FlowMod) MsgType() MsgType { return TypeFlowMod }

// MarshalBinary encodes the FLOW_MOD.
func (m *FlowMod) MarshalBinary() ([]byte, error) {
	b := m.start(TypeFlowMod, 48)
	be.PutUint64(b[8:], m.Cookie)
	be.PutUint64(b[16:], m.CookieMask)
	b[24], b[25] = m.TableID, m.Command
	be.PutUint16(b[26:], m.IdleTimeout)
	be.PutUint16(b[28:], m.HardTimeout)
	be.PutUint16(b[30:], m.Priority)
	be.PutUint32(b[32:], m.BufferID)
	be.PutUint32(b[36:], m.OutPort)
	be.PutUint32(b[40:], m.OutGroup)
	be.PutUint16(b[44:], m.Flags)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return nil, err
	}
	if b, err = m.Instructions.appendTo(b); err != nil {
		return nil, err
	}
	return finish(b)
}

// UnmarshalBinary decodes a FLOW_MOD.
func (m *FlowMod) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeFlowMod)
	if err != nil {
		return err
	}
	if len(body) < 40 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "flow mod")
	}
	m.Cookie, m.CookieMask = be.Uint64(body), be.Uint64(body[8:])
	m.TableID, m.Command = body[16], body[17]
	m.IdleTimeout, m.HardTimeout, m.Priority = be.Uint16(body[18:]), be.Uint16(body[20:]), be.Uint16(body[22:])
	m.BufferID, m.OutPort, m.OutGroup = be.Uint32(body[24:]), be.Uint32(body[28:]), be.Uint32(body[32:])
	m.Flags = be.Uint16(body[36:])
	n, err := m.Match.decode(body[40:])
	if err != nil {
		return err
	}
	return m.Instructions.UnmarshalBinary(body[40+n:])
}

// Validate checks the FLOW_MOD as a switch must before applying it:
// command (OFPFMFC_BAD_COMMAND), flags (OFPFMFC_BAD_FLAGS), table
// (OFPFMFC_BAD_TABLE_ID for add/modify to TableAll), then the match and,
// for add/modify, the instructions.
func (m *FlowMod) Validate() error {
	if m.Command > FlowDeleteStrict {
		return bad(ErrTypeFlowModFailed, FlowModBadCommand, "command %d", m.Command)
	}
	if m.Flags&^flowFlagsAll != 0 {
		return bad(ErrTypeFlowModFailed, FlowModBadFlags, "flags %#x", m.Flags)
	}
	isDelete := m.Command == FlowDelete || m.Command == FlowDeleteStrict
	if m.TableID == TableAll && !isDelete {
		return bad(ErrTypeFlowModFailed, FlowModBadTableID, "table_id ALL for command %d", m.Command)
	}
	if err := m.Match.Validate(); err != nil {
		return err
	}
	if isDelete {
		return nil
	}
	return ValidateInstructions(m.Instructions, m.TableID, m.Match)
}

// Flow-removed reasons (ofp_flow_removed_reason).
const (
	FlowRemovedIdleTimeout uint8 = 0
	FlowRemovedHardTimeout uint8 = 1
	FlowRemovedDelete      uint8 = 2
	FlowRemovedGroupDelete uint8 = 3
)

// FlowRemoved is OFPT_FLOW_REMOVED.
//
//	8 bytes: ofp_header
//	8 bytes: cookie
//	2 bytes: priority
//	1 byte:  reason (FlowRemoved*)
//	1 byte:  table_id
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	8 bytes: packet_count
//	8 bytes: byte_count
//	n bytes: match, padded to 8
type FlowRemoved struct {
	MsgHeader
	Cookie       uint64
	Priority     uint16
	Reason       uint8
	TableID      uint8
	DurationSec  uint32
	DurationNsec uint32
	IdleTimeout  uint16
	HardTimeout  uint16
	PacketCount  uint64
	ByteCount    uint64
	Match        Match
}

// MsgType returns TypeFlowRemoved.
func (*FlowRemoved) MsgType() MsgType { return TypeFlowRemoved }

// MarshalBinary encodes the FLOW_REMOVED.
func (m *FlowRemoved) MarshalBinary() ([]byte, error) {
	b := m.start(TypeFlowRemoved, 48)
	be.PutUint64(b[8:], m.Cookie)
	be.PutUint16(b[16:], m.Priority)
	b[18], b[19] = m.Reason, m.TableID
	be.PutUint32(b[20:], m.DurationSec)
	be.PutUint32(b[24:], m.DurationNsec)
	be.PutUint16(b[28:], m.IdleTimeout)
	be.PutUint16(b[30:], m.HardTimeout)
	be.PutUint64(b[32:], m.PacketCount)
	be.PutUint64(b[40:], m.ByteCount)
	b, err := m.Match.appendTo(b)
	if err != nil {
		return nil, err
	}
	return finish(b)
}

// UnmarshalBinary decodes a FLOW_REMOVED.
func (m *FlowRemoved) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeFlowRemoved)
	if err != nil {
		return err
	}
	if len(body) < 40 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "flow removed")
	}
	m.Cookie, m.Priority = be.Uint64(body), be.Uint16(body[8:])
	m.Reason, m.TableID = body[10], body[11]
	m.DurationSec, m.DurationNsec = be.Uint32(body[12:]), be.Uint32(body[16:])
	m.IdleTimeout, m.HardTimeout = be.Uint16(body[20:]), be.Uint16(body[22:])
	m.PacketCount, m.ByteCount = be.Uint64(body[24:]), be.Uint64(body[32:])
	_, err = m.Match.decode(body[40:])
	return err
}
