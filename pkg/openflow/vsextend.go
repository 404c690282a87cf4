package openflow

import "io"

// VS-extend (seed 001) talks to its controller in OpenFlow 1.3
// EXPERIMENTER messages (type 4) under nagare's experimenter id. The
// body after the experimenter header (experimenter id, exp_type) is one
// of the layouts below; docs/steering.md draws them.
//
// ExperimenterNagare is not an IEEE-assigned OUI: it is "NAG" in the
// 24-bit OUI space, fine between nagare and its controllers, to be
// replaced by a registered id before anyone else must interoperate.
const ExperimenterNagare uint32 = 0x004e4147

// VS-extend exp_types.
const (
	VSXHostReport uint32 = 1 // switch → controller, after the handshake
	VSXPortReport uint32 = 2 // switch → controller, on port changes
	VSXFlowMod    uint32 = 3 // controller → switch: add/delete a Flow Table entry
	VSXCoreMod    uint32 = 4 // controller → switch: pin/unpin a workload to a CPU
)

// VSXKeyLen is the size of a steering key (and of its mask): the layout
// of struct steer_key in bpf/lib/steer.h, which pkg/steering encodes.
const VSXKeyLen = 48

// XDP modes in a host report.
const (
	VSXModeNone    uint8 = 0
	VSXModeGeneric uint8 = 1
	VSXModeNative  uint8 = 2
)

// RPS states in a host report.
const (
	VSXRPSOff     uint8 = 0
	VSXRPSOn      uint8 = 1
	VSXRPSUnknown uint8 = 2
)

// VSXHost is the body of a host report (16 bytes):
//
//	4 bytes: CPU count
//	1 byte:  XDP mode of the steering program (VSXMode*)
//	1 byte:  RPS on the uplink (VSXRPS*)
//	1 byte:  FCF id shift   1 byte: FCF id bits   1 byte: FCF priority bit (8+: none)
//	1 byte:  load threshold, percent
//	2 bytes: padding
//	4 bytes: Flow Table capacity
type VSXHost struct {
	CPUs       uint32
	XDPMode    uint8
	RPS        uint8
	FCFIDShift uint8
	FCFIDBits  uint8
	FCFPrioBit uint8
	Threshold  uint8
	MaxEntries uint32
}

// MarshalBinary encodes the body.
func (h VSXHost) MarshalBinary() ([]byte, error) {
	b := make([]byte, 16)
	be.PutUint32(b, h.CPUs)
	b[4], b[5], b[6], b[7], b[8], b[9] = h.XDPMode, h.RPS, h.FCFIDShift, h.FCFIDBits, h.FCFPrioBit, h.Threshold
	be.PutUint32(b[12:], h.MaxEntries)
	return b, nil
}

// UnmarshalBinary decodes the body.
func (h *VSXHost) UnmarshalBinary(b []byte) error {
	if len(b) < 16 {
		return io.ErrUnexpectedEOF
	}
	h.CPUs = be.Uint32(b)
	h.XDPMode, h.RPS, h.FCFIDShift, h.FCFIDBits, h.FCFPrioBit, h.Threshold = b[4], b[5], b[6], b[7], b[8], b[9]
	h.MaxEntries = be.Uint32(b[12:])
	return nil
}

// Port report reasons.
const (
	VSXPortAdd    uint8 = 0
	VSXPortDelete uint8 = 1
	VSXPortModify uint8 = 2
)

// VSXNoCPU is "no CPU" in a port report and "unpin" in a core mod.
const VSXNoCPU uint32 = 0xffffffff

// VSXPort is the body of a port report (20 bytes):
//
//	4 bytes: OpenFlow port number
//	4 bytes: workload (pod/VM) id, the FCF id its traffic carries; 0 unknown
//	4 bytes: tenant
//	4 bytes: pinned CPU, VSXNoCPU when none
//	1 byte:  reason (VSXPort*)   3 bytes: padding
type VSXPort struct {
	PortNo    uint32
	Workload  uint32
	Tenant    uint32
	PinnedCPU uint32
	Reason    uint8
}

// MarshalBinary encodes the body (20 bytes).
func (p VSXPort) MarshalBinary() ([]byte, error) {
	b := make([]byte, 20)
	be.PutUint32(b, p.PortNo)
	be.PutUint32(b[4:], p.Workload)
	be.PutUint32(b[8:], p.Tenant)
	be.PutUint32(b[12:], p.PinnedCPU)
	b[16] = p.Reason
	return b, nil
}

// UnmarshalBinary decodes the body.
func (p *VSXPort) UnmarshalBinary(b []byte) error {
	if len(b) < 20 {
		return io.ErrUnexpectedEOF
	}
	p.PortNo, p.Workload, p.Tenant, p.PinnedCPU = be.Uint32(b), be.Uint32(b[4:]), be.Uint32(b[8:]), be.Uint32(b[12:])
	p.Reason = b[16]
	return nil
}

// Flow mod commands and actions.
const (
	VSXFlowAdd    uint8 = 0 // add, or replace the entry with the same match
	VSXFlowDelete uint8 = 1 // delete the entry with exactly this match

	VSXActionCPU    uint8 = 0 // run on CPU
	VSXActionChoose uint8 = 1 // choose on the first packet (IRQ:-)

	VSXFlagPriorityFlow uint8 = 1 << 0 // a priority flow whatever its FCF bit
)

// VSXFlow is the body of a flow mod (16 + 2*48 = 112 bytes):
//
//	1 byte:  command (VSXFlowAdd, VSXFlowDelete)
//	1 byte:  action (VSXActionCPU, VSXActionChoose)
//	1 byte:  flags (VSXFlagPriorityFlow)
//	1 byte:  padding
//	2 bytes: priority
//	2 bytes: padding
//	4 bytes: CPU (VSXActionCPU)
//	4 bytes: padding
//	48 bytes: key   48 bytes: mask (struct steer_key: docs/steering.md)
type VSXFlow struct {
	Command  uint8
	Action   uint8
	Flags    uint8
	Priority uint16
	CPU      uint32
	Key      [VSXKeyLen]byte
	Mask     [VSXKeyLen]byte
}

// MarshalBinary encodes the body.
func (f VSXFlow) MarshalBinary() ([]byte, error) {
	b := make([]byte, 16, 16+2*VSXKeyLen)
	b[0], b[1], b[2] = f.Command, f.Action, f.Flags
	be.PutUint16(b[4:], f.Priority)
	be.PutUint32(b[8:], f.CPU)
	b = append(b, f.Key[:]...)
	return append(b, f.Mask[:]...), nil
}

// UnmarshalBinary decodes and checks the body: an unknown command or
// action is an OpenFlow error the switch sends back.
func (f *VSXFlow) UnmarshalBinary(b []byte) error {
	if len(b) < 16+2*VSXKeyLen {
		return io.ErrUnexpectedEOF
	}
	if len(b) > 16+2*VSXKeyLen {
		return bad(ErrTypeBadRequest, BadRequestBadLen, "vs-extend flow mod of %d bytes", len(b))
	}
	f.Command, f.Action, f.Flags = b[0], b[1], b[2]
	f.Priority = be.Uint16(b[4:])
	f.CPU = be.Uint32(b[8:])
	copy(f.Key[:], b[16:])
	copy(f.Mask[:], b[16+VSXKeyLen:])
	if f.Command > VSXFlowDelete {
		return bad(ErrTypeBadRequest, BadRequestBadExpType, "vs-extend flow mod command %d", f.Command)
	}
	if f.Action > VSXActionChoose {
		return bad(ErrTypeBadAction, BadActionBadType, "vs-extend action %d", f.Action)
	}
	return nil
}

// VSXCore is the body of a core mod (8 bytes):
//
//	4 bytes: CPU
//	4 bytes: workload id pinned to it; 0 unpins
type VSXCore struct {
	CPU      uint32
	Workload uint32
}

// MarshalBinary encodes the body.
func (c VSXCore) MarshalBinary() ([]byte, error) {
	b := make([]byte, 8)
	be.PutUint32(b, c.CPU)
	be.PutUint32(b[4:], c.Workload)
	return b, nil
}

// UnmarshalBinary decodes the body.
func (c *VSXCore) UnmarshalBinary(b []byte) error {
	if len(b) < 8 {
		return io.ErrUnexpectedEOF
	}
	if len(b) > 8 {
		return bad(ErrTypeBadRequest, BadRequestBadLen, "vs-extend core mod of %d bytes", len(b))
	}
	c.CPU, c.Workload = be.Uint32(b), be.Uint32(b[4:])
	return nil
}

// VSXMessage wraps a VS-extend body in an EXPERIMENTER message.
func VSXMessage(expType uint32, body interface{ MarshalBinary() ([]byte, error) }) (*Experimenter, error) {
	b, err := body.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &Experimenter{Experimenter: ExperimenterNagare, ExpType: expType, Data: b}, nil
}

// DecodeVSX returns the body of a VS-extend EXPERIMENTER message:
// *VSXHost, *VSXPort, *VSXFlow or *VSXCore. Another experimenter id or an
// unknown exp_type is an *Error (BAD_EXPERIMENTER, BAD_EXP_TYPE).
func DecodeVSX(m *Experimenter) (any, error) {
	if m.Experimenter != ExperimenterNagare {
		return nil, bad(ErrTypeBadRequest, BadRequestBadExperimenter, "experimenter 0x%08x", m.Experimenter)
	}
	var body interface{ UnmarshalBinary([]byte) error }
	switch m.ExpType {
	case VSXHostReport:
		body = &VSXHost{}
	case VSXPortReport:
		body = &VSXPort{}
	case VSXFlowMod:
		body = &VSXFlow{}
	case VSXCoreMod:
		body = &VSXCore{}
	default:
		return nil, bad(ErrTypeBadRequest, BadRequestBadExpType, "vs-extend exp_type %d", m.ExpType)
	}
	if err := body.UnmarshalBinary(m.Data); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, bad(ErrTypeBadRequest, BadRequestBadLen, "vs-extend exp_type %d: %d-byte body", m.ExpType, len(m.Data))
		}
		return nil, err
	}
	return body, nil
}
