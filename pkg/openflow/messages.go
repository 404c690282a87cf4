package openflow

// Fixed-layout messages: ERROR, ECHO, EXPERIMENTER, FEATURES, switch
// config, BARRIER, ROLE, async config and TABLE_MOD.

// ErrorMsg is OFPT_ERROR.
//
//	8 bytes: ofp_header
//	2 bytes: type (ErrorType)
//	2 bytes: code; for type EXPERIMENTER (0xffff) this is exp_type
//	4 bytes: experimenter id, present only for type EXPERIMENTER
//	rest:    data; for most errors at least 64 bytes of the failed request
type ErrorMsg struct {
	MsgHeader
	Type         ErrorType
	Code         uint16 // exp_type when Type is ErrTypeExperimenter
	Experimenter uint32 // only for ErrTypeExperimenter
	Data         []byte
}

// MsgType returns TypeError.
func (*ErrorMsg) MsgType() MsgType { return TypeError }

// Err returns the error type and code as an *Error.
func (m *ErrorMsg) Err() *Error {
	e := &Error{Type: m.Type, Code: m.Code}
	if m.Type == ErrTypeExperimenter {
		e.Experimenter = m.Experimenter
	}
	return e
}

// MarshalBinary encodes the ERROR.
func (m *ErrorMsg) MarshalBinary() ([]byte, error) {
	n := 12
	if m.Type == ErrTypeExperimenter {
		n = 16
	}
	b := m.start(TypeError, n)
	be.PutUint16(b[8:], uint16(m.Type))
	be.PutUint16(b[10:], m.Code)
	if m.Type == ErrTypeExperimenter {
		be.PutUint32(b[12:], m.Experimenter)
	}
	return finish(append(b, m.Data...))
}

// UnmarshalBinary decodes an ERROR of any version.
func (m *ErrorMsg) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeError)
	if err != nil {
		return err
	}
	if len(body) < 4 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "error")
	}
	m.Type, m.Code, m.Experimenter = ErrorType(be.Uint16(body)), be.Uint16(body[2:]), 0
	body = body[4:]
	if m.Type == ErrTypeExperimenter {
		if len(body) < 4 {
			return short(ErrTypeBadRequest, BadRequestBadLen, "experimenter error")
		}
		m.Experimenter = be.Uint32(body)
		body = body[4:]
	}
	m.Data = append([]byte{}, body...)
	return nil
}

// EchoRequest is OFPT_ECHO_REQUEST: 8-byte header then arbitrary data.
type EchoRequest struct {
	MsgHeader
	Data []byte
}

// EchoReply is OFPT_ECHO_REPLY: 8-byte header then the request's data.
type EchoReply struct {
	MsgHeader
	Data []byte
}

// MsgType returns TypeEchoRequest.
func (*EchoRequest) MsgType() MsgType { return TypeEchoRequest }

// MsgType returns TypeEchoReply.
func (*EchoReply) MsgType() MsgType { return TypeEchoReply }

// MarshalBinary encodes the ECHO_REQUEST.
func (m *EchoRequest) MarshalBinary() ([]byte, error) {
	return finish(append(m.start(TypeEchoRequest, HeaderLen), m.Data...))
}

// UnmarshalBinary decodes an ECHO_REQUEST.
func (m *EchoRequest) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeEchoRequest)
	m.Data = append([]byte{}, body...)
	return err
}

// Reply returns the ECHO_REPLY for this request (same xid and data).
func (m *EchoRequest) Reply() *EchoReply {
	return &EchoReply{MsgHeader: MsgHeader{Xid: m.Xid}, Data: append([]byte{}, m.Data...)}
}

// MarshalBinary encodes the ECHO_REPLY.
func (m *EchoReply) MarshalBinary() ([]byte, error) {
	return finish(append(m.start(TypeEchoReply, HeaderLen), m.Data...))
}

// UnmarshalBinary decodes an ECHO_REPLY.
func (m *EchoReply) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeEchoReply)
	m.Data = append([]byte{}, body...)
	return err
}

// Experimenter is OFPT_EXPERIMENTER (e.g. Nicira extensions).
//
//	8 bytes: ofp_header
//	4 bytes: experimenter id (0x00002320 is Nicira)
//	4 bytes: exp_type
//	rest:    experimenter-defined data
type Experimenter struct {
	MsgHeader
	Experimenter uint32
	ExpType      uint32
	Data         []byte
}

// MsgType returns TypeExperimenter.
func (*Experimenter) MsgType() MsgType { return TypeExperimenter }

// MarshalBinary encodes the EXPERIMENTER message.
func (m *Experimenter) MarshalBinary() ([]byte, error) {
	b := m.start(TypeExperimenter, 16)
	be.PutUint32(b[8:], m.Experimenter)
	be.PutUint32(b[12:], m.ExpType)
	return finish(append(b, m.Data...))
}

// UnmarshalBinary decodes an EXPERIMENTER message.
func (m *Experimenter) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeExperimenter)
	if err != nil {
		return err
	}
	if len(body) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "experimenter")
	}
	m.Experimenter, m.ExpType = be.Uint32(body), be.Uint32(body[4:])
	m.Data = append([]byte{}, body[8:]...)
	return nil
}

// empty is the codec of header-only messages.
func emptyMarshal(h *MsgHeader, t MsgType) ([]byte, error) { return finish(h.start(t, HeaderLen)) }

func emptyUnmarshal(h *MsgHeader, t MsgType, b []byte) error {
	body, err := h.parse(b, t)
	if err == nil && len(body) != 0 {
		return bad(ErrTypeBadRequest, BadRequestBadLen, "%s with %d-byte body", t, len(body))
	}
	return err
}

// FeaturesRequest is OFPT_FEATURES_REQUEST: the 8-byte header only.
type FeaturesRequest struct{ MsgHeader }

// MsgType returns TypeFeaturesRequest.
func (*FeaturesRequest) MsgType() MsgType { return TypeFeaturesRequest }

// MarshalBinary encodes the FEATURES_REQUEST.
func (m *FeaturesRequest) MarshalBinary() ([]byte, error) {
	return emptyMarshal(&m.MsgHeader, TypeFeaturesRequest)
}

// UnmarshalBinary decodes a FEATURES_REQUEST.
func (m *FeaturesRequest) UnmarshalBinary(b []byte) error {
	return emptyUnmarshal(&m.MsgHeader, TypeFeaturesRequest, b)
}

// Switch capabilities (ofp_capabilities), FeaturesReply.Capabilities.
const (
	CapFlowStats   uint32 = 1 << 0
	CapTableStats  uint32 = 1 << 1
	CapPortStats   uint32 = 1 << 2
	CapGroupStats  uint32 = 1 << 3
	CapIPReasm     uint32 = 1 << 5
	CapQueueStats  uint32 = 1 << 6
	CapPortBlocked uint32 = 1 << 8
)

// FeaturesReply is OFPT_FEATURES_REPLY (ofp_switch_features, 32 bytes).
//
//	8 bytes: ofp_header
//	8 bytes: datapath_id (low 48 bits MAC, high 16 implementer-defined)
//	4 bytes: n_buffers
//	1 byte:  n_tables
//	1 byte:  auxiliary_id
//	2 bytes: pad
//	4 bytes: capabilities (Cap* bits)
//	4 bytes: reserved
type FeaturesReply struct {
	MsgHeader
	DatapathID   uint64
	NBuffers     uint32
	NTables      uint8
	AuxiliaryID  uint8
	Capabilities uint32
	Reserved     uint32
}

// MsgType returns TypeFeaturesReply.
func (*FeaturesReply) MsgType() MsgType { return TypeFeaturesReply }

// MarshalBinary encodes the FEATURES_REPLY.
func (m *FeaturesReply) MarshalBinary() ([]byte, error) {
	b := m.start(TypeFeaturesReply, 32)
	be.PutUint64(b[8:], m.DatapathID)
	be.PutUint32(b[16:], m.NBuffers)
	b[20], b[21] = m.NTables, m.AuxiliaryID
	be.PutUint32(b[24:], m.Capabilities)
	be.PutUint32(b[28:], m.Reserved)
	return finish(b)
}

// UnmarshalBinary decodes a FEATURES_REPLY.
func (m *FeaturesReply) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeFeaturesReply)
	if err != nil {
		return err
	}
	if len(body) < 24 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "features reply")
	}
	m.DatapathID = be.Uint64(body)
	m.NBuffers = be.Uint32(body[8:])
	m.NTables, m.AuxiliaryID = body[12], body[13]
	m.Capabilities = be.Uint32(body[16:])
	m.Reserved = be.Uint32(body[20:])
	return nil
}

// GetConfigRequest is OFPT_GET_CONFIG_REQUEST: the 8-byte header only.
type GetConfigRequest struct{ MsgHeader }

// MsgType returns TypeGetConfigRequest.
func (*GetConfigRequest) MsgType() MsgType { return TypeGetConfigRequest }

// MarshalBinary encodes the GET_CONFIG_REQUEST.
func (m *GetConfigRequest) MarshalBinary() ([]byte, error) {
	return emptyMarshal(&m.MsgHeader, TypeGetConfigRequest)
}

// UnmarshalBinary decodes a GET_CONFIG_REQUEST.
func (m *GetConfigRequest) UnmarshalBinary(b []byte) error {
	return emptyUnmarshal(&m.MsgHeader, TypeGetConfigRequest, b)
}

// Switch config flags (ofp_config_flags): IP fragment handling.
const (
	ConfigFragNormal uint16 = 0
	ConfigFragDrop   uint16 = 1
	ConfigFragReasm  uint16 = 2
	ConfigFragMask   uint16 = 3
)

// SwitchConfig is ofp_switch_config, the body of GET_CONFIG_REPLY and
// SET_CONFIG (12 bytes with the header).
//
//	8 bytes: ofp_header
//	2 bytes: flags (ConfigFrag*)
//	2 bytes: miss_send_len, max bytes of a table-miss packet sent to the controller
type SwitchConfig struct {
	Flags       uint16
	MissSendLen uint16
}

func (c SwitchConfig) marshal(h *MsgHeader, t MsgType) ([]byte, error) {
	b := h.start(t, 12)
	be.PutUint16(b[8:], c.Flags)
	be.PutUint16(b[10:], c.MissSendLen)
	return finish(b)
}

func (c *SwitchConfig) unmarshal(h *MsgHeader, t MsgType, b []byte) error {
	body, err := h.parse(b, t)
	if err != nil {
		return err
	}
	if len(body) < 4 {
		return short(ErrTypeSwitchConfigFailed, SwitchConfigBadLen, "switch config")
	}
	c.Flags, c.MissSendLen = be.Uint16(body), be.Uint16(body[2:])
	return nil
}

// GetConfigReply is OFPT_GET_CONFIG_REPLY.
type GetConfigReply struct {
	MsgHeader
	SwitchConfig
}

// MsgType returns TypeGetConfigReply.
func (*GetConfigReply) MsgType() MsgType { return TypeGetConfigReply }

// MarshalBinary encodes the GET_CONFIG_REPLY.
func (m *GetConfigReply) MarshalBinary() ([]byte, error) {
	return m.marshal(&m.MsgHeader, TypeGetConfigReply)
}

// UnmarshalBinary decodes a GET_CONFIG_REPLY.
func (m *GetConfigReply) UnmarshalBinary(b []byte) error {
	return m.unmarshal(&m.MsgHeader, TypeGetConfigReply, b)
}

// SetConfig is OFPT_SET_CONFIG.
type SetConfig struct {
	MsgHeader
	SwitchConfig
}

// MsgType returns TypeSetConfig.
func (*SetConfig) MsgType() MsgType { return TypeSetConfig }

// MarshalBinary encodes the SET_CONFIG.
func (m *SetConfig) MarshalBinary() ([]byte, error) {
	return m.marshal(&m.MsgHeader, TypeSetConfig)
}

// UnmarshalBinary decodes a SET_CONFIG.
func (m *SetConfig) UnmarshalBinary(b []byte) error {
	return m.unmarshal(&m.MsgHeader, TypeSetConfig, b)
}

// BarrierRequest is OFPT_BARRIER_REQUEST: the 8-byte header only.
type BarrierRequest struct{ MsgHeader }

// BarrierReply is OFPT_BARRIER_REPLY: the 8-byte header only.
type BarrierReply struct{ MsgHeader }

// MsgType returns TypeBarrierRequest.
func (*BarrierRequest) MsgType() MsgType { return TypeBarrierRequest }

// MsgType returns TypeBarrierReply.
func (*BarrierReply) MsgType() MsgType { return TypeBarrierReply }

// MarshalBinary encodes the BARRIER_REQUEST.
func (m *BarrierRequest) MarshalBinary() ([]byte, error) {
	return emptyMarshal(&m.MsgHeader, TypeBarrierRequest)
}

// UnmarshalBinary decodes a BARRIER_REQUEST.
func (m *BarrierRequest) UnmarshalBinary(b []byte) error {
	return emptyUnmarshal(&m.MsgHeader, TypeBarrierRequest, b)
}

// MarshalBinary encodes the BARRIER_REPLY.
func (m *BarrierReply) MarshalBinary() ([]byte, error) {
	return emptyMarshal(&m.MsgHeader, TypeBarrierReply)
}

// UnmarshalBinary decodes a BARRIER_REPLY.
func (m *BarrierReply) UnmarshalBinary(b []byte) error {
	return emptyUnmarshal(&m.MsgHeader, TypeBarrierReply, b)
}

// Controller roles (ofp_controller_role).
const (
	RoleNoChange uint32 = 0
	RoleEqual    uint32 = 1
	RoleMaster   uint32 = 2
	RoleSlave    uint32 = 3
)

// Role is ofp_role_request, the body of ROLE_REQUEST and ROLE_REPLY (24
// bytes with the header).
//
//	8 bytes: ofp_header
//	4 bytes: role (Role*)
//	4 bytes: pad
//	8 bytes: generation_id
type Role struct {
	Role         uint32
	GenerationID uint64
}

func (r Role) marshal(h *MsgHeader, t MsgType) ([]byte, error) {
	b := h.start(t, 24)
	be.PutUint32(b[8:], r.Role)
	be.PutUint64(b[16:], r.GenerationID)
	return finish(b)
}

func (r *Role) unmarshal(h *MsgHeader, t MsgType, b []byte) error {
	body, err := h.parse(b, t)
	if err != nil {
		return err
	}
	if len(body) < 16 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "role")
	}
	r.Role, r.GenerationID = be.Uint32(body), be.Uint64(body[8:])
	return nil
}

// RoleRequest is OFPT_ROLE_REQUEST.
type RoleRequest struct {
	MsgHeader
	Role
}

// RoleReply is OFPT_ROLE_REPLY.
type RoleReply struct {
	MsgHeader
	Role
}

// MsgType returns TypeRoleRequest.
func (*RoleRequest) MsgType() MsgType { return TypeRoleRequest }

// MsgType returns TypeRoleReply.
func (*RoleReply) MsgType() MsgType { return TypeRoleReply }

// MarshalBinary encodes the ROLE_REQUEST.
func (m *RoleRequest) MarshalBinary() ([]byte, error) {
	return m.marshal(&m.MsgHeader, TypeRoleRequest)
}

// UnmarshalBinary decodes a ROLE_REQUEST.
func (m *RoleRequest) UnmarshalBinary(b []byte) error {
	return m.unmarshal(&m.MsgHeader, TypeRoleRequest, b)
}

// MarshalBinary encodes the ROLE_REPLY.
func (m *RoleReply) MarshalBinary() ([]byte, error) {
	return m.marshal(&m.MsgHeader, TypeRoleReply)
}

// UnmarshalBinary decodes a ROLE_REPLY.
func (m *RoleReply) UnmarshalBinary(b []byte) error {
	return m.unmarshal(&m.MsgHeader, TypeRoleReply, b)
}

// GetAsyncRequest is OFPT_GET_ASYNC_REQUEST: the 8-byte header only.
type GetAsyncRequest struct{ MsgHeader }

// MsgType returns TypeGetAsyncRequest.
func (*GetAsyncRequest) MsgType() MsgType { return TypeGetAsyncRequest }

// MarshalBinary encodes the GET_ASYNC_REQUEST.
func (m *GetAsyncRequest) MarshalBinary() ([]byte, error) {
	return emptyMarshal(&m.MsgHeader, TypeGetAsyncRequest)
}

// UnmarshalBinary decodes a GET_ASYNC_REQUEST.
func (m *GetAsyncRequest) UnmarshalBinary(b []byte) error {
	return emptyUnmarshal(&m.MsgHeader, TypeGetAsyncRequest, b)
}

// AsyncConfig is ofp_async_config, the body of GET_ASYNC_REPLY and
// SET_ASYNC (32 bytes with the header). Index 0 of each pair applies to a
// master or equal controller, index 1 to a slave; bit n enables reason n.
//
//	8 bytes: ofp_header
//	2×4 bytes: packet_in_mask
//	2×4 bytes: port_status_mask
//	2×4 bytes: flow_removed_mask
type AsyncConfig struct {
	PacketInMask    [2]uint32
	PortStatusMask  [2]uint32
	FlowRemovedMask [2]uint32
}

func (c AsyncConfig) marshal(h *MsgHeader, t MsgType) ([]byte, error) {
	b := h.start(t, 32)
	for i, v := range [6]uint32{c.PacketInMask[0], c.PacketInMask[1], c.PortStatusMask[0],
		c.PortStatusMask[1], c.FlowRemovedMask[0], c.FlowRemovedMask[1]} {
		be.PutUint32(b[8+4*i:], v)
	}
	return finish(b)
}

func (c *AsyncConfig) unmarshal(h *MsgHeader, t MsgType, b []byte) error {
	body, err := h.parse(b, t)
	if err != nil {
		return err
	}
	if len(body) < 24 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "async config")
	}
	w := func(i int) uint32 { return be.Uint32(body[4*i:]) }
	c.PacketInMask = [2]uint32{w(0), w(1)}
	c.PortStatusMask = [2]uint32{w(2), w(3)}
	c.FlowRemovedMask = [2]uint32{w(4), w(5)}
	return nil
}

// GetAsyncReply is OFPT_GET_ASYNC_REPLY.
type GetAsyncReply struct {
	MsgHeader
	AsyncConfig
}

// SetAsync is OFPT_SET_ASYNC.
type SetAsync struct {
	MsgHeader
	AsyncConfig
}

// MsgType returns TypeGetAsyncReply.
func (*GetAsyncReply) MsgType() MsgType { return TypeGetAsyncReply }

// MsgType returns TypeSetAsync.
func (*SetAsync) MsgType() MsgType { return TypeSetAsync }

// MarshalBinary encodes the GET_ASYNC_REPLY.
func (m *GetAsyncReply) MarshalBinary() ([]byte, error) {
	return m.marshal(&m.MsgHeader, TypeGetAsyncReply)
}

// UnmarshalBinary decodes a GET_ASYNC_REPLY.
func (m *GetAsyncReply) UnmarshalBinary(b []byte) error {
	return m.unmarshal(&m.MsgHeader, TypeGetAsyncReply, b)
}

// MarshalBinary encodes the SET_ASYNC.
func (m *SetAsync) MarshalBinary() ([]byte, error) {
	return m.marshal(&m.MsgHeader, TypeSetAsync)
}

// UnmarshalBinary decodes a SET_ASYNC.
func (m *SetAsync) UnmarshalBinary(b []byte) error {
	return m.unmarshal(&m.MsgHeader, TypeSetAsync, b)
}

// Table numbers (ofp_table).
const (
	TableMax uint8 = 0xfe // last usable table number
	TableAll uint8 = 0xff // wildcard table for requests and deletes
)

// TableMod is OFPT_TABLE_MOD (16 bytes).
//
//	8 bytes: ofp_header
//	1 byte:  table_id (TableAll for all tables)
//	3 bytes: pad
//	4 bytes: config (OFPTC_*; deprecated, 0 in 1.3)
type TableMod struct {
	MsgHeader
	TableID uint8
	Config  uint32
}

// MsgType returns TypeTableMod.
func (*TableMod) MsgType() MsgType { return TypeTableMod }

// MarshalBinary encodes the TABLE_MOD.
func (m *TableMod) MarshalBinary() ([]byte, error) {
	b := m.start(TypeTableMod, 16)
	b[8] = m.TableID
	be.PutUint32(b[12:], m.Config)
	return finish(b)
}

// UnmarshalBinary decodes a TABLE_MOD.
func (m *TableMod) UnmarshalBinary(b []byte) error {
	body, err := m.parse(b, TypeTableMod)
	if err != nil {
		return err
	}
	if len(body) < 8 {
		return short(ErrTypeBadRequest, BadRequestBadLen, "table mod")
	}
	m.TableID, m.Config = body[0], be.Uint32(body[4:])
	return nil
}

// Validate checks a SET_CONFIG: unknown flag bits are
// OFPSCFC_BAD_FLAGS.
func (m *SetConfig) Validate() error {
	if m.Flags&^ConfigFragMask != 0 {
		return bad(ErrTypeSwitchConfigFailed, SwitchConfigBadFlags, "flags %#x", m.Flags)
	}
	return nil
}

// Validate checks a ROLE_REQUEST: a role above SLAVE is OFPRRFC_BAD_ROLE.
func (m *RoleRequest) Validate() error {
	if m.Role.Role > RoleSlave {
		return bad(ErrTypeRoleRequestFailed, RoleRequestBadRole, "role %d", m.Role.Role)
	}
	return nil
}

// Validate checks a TABLE_MOD: a table above TableMax other than
// TableAll is OFPTMFC_BAD_TABLE; unknown config bits (only OFPTC_DEPRECATED_MASK
// = 3 is defined) are OFPTMFC_BAD_CONFIG.
func (m *TableMod) Validate() error {
	if m.TableID > TableMax && m.TableID != TableAll {
		return bad(ErrTypeTableModFailed, TableModBadTable, "table %d", m.TableID)
	}
	if m.Config&^3 != 0 {
		return bad(ErrTypeTableModFailed, TableModBadConfig, "config %#x", m.Config)
	}
	return nil
}
