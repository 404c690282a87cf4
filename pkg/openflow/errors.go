package openflow

import (
	"errors"
	"fmt"
	"io"
)

// ErrorType is ofp_error_type: the class of an OFPT_ERROR.
type ErrorType uint16

// OpenFlow 1.3 error types (ofp_error_type).
const (
	ErrTypeHelloFailed         ErrorType = 0
	ErrTypeBadRequest          ErrorType = 1
	ErrTypeBadAction           ErrorType = 2
	ErrTypeBadInstruction      ErrorType = 3
	ErrTypeBadMatch            ErrorType = 4
	ErrTypeFlowModFailed       ErrorType = 5
	ErrTypeGroupModFailed      ErrorType = 6
	ErrTypePortModFailed       ErrorType = 7
	ErrTypeTableModFailed      ErrorType = 8
	ErrTypeQueueOpFailed       ErrorType = 9
	ErrTypeSwitchConfigFailed  ErrorType = 10
	ErrTypeRoleRequestFailed   ErrorType = 11
	ErrTypeMeterModFailed      ErrorType = 12
	ErrTypeTableFeaturesFailed ErrorType = 13
	ErrTypeExperimenter        ErrorType = 0xffff
)

// Error codes, one block per ErrorType; the prefix names the type.
const (
	// OFPET_HELLO_FAILED
	HelloFailedIncompatible uint16 = 0
	HelloFailedEPerm        uint16 = 1

	// OFPET_BAD_REQUEST
	BadRequestBadVersion      uint16 = 0
	BadRequestBadType         uint16 = 1
	BadRequestBadMultipart    uint16 = 2
	BadRequestBadExperimenter uint16 = 3
	BadRequestBadExpType      uint16 = 4
	BadRequestEPerm           uint16 = 5
	BadRequestBadLen          uint16 = 6
	BadRequestBufferEmpty     uint16 = 7
	BadRequestBufferUnknown   uint16 = 8
	BadRequestBadTableID      uint16 = 9
	BadRequestIsSlave         uint16 = 10
	BadRequestBadPort         uint16 = 11
	BadRequestBadPacket       uint16 = 12
	BadRequestMultipartBufOvf uint16 = 13

	// OFPET_BAD_ACTION
	BadActionBadType           uint16 = 0
	BadActionBadLen            uint16 = 1
	BadActionBadExperimenter   uint16 = 2
	BadActionBadExpType        uint16 = 3
	BadActionBadOutPort        uint16 = 4
	BadActionBadArgument       uint16 = 5
	BadActionEPerm             uint16 = 6
	BadActionTooMany           uint16 = 7
	BadActionBadQueue          uint16 = 8
	BadActionBadOutGroup       uint16 = 9
	BadActionMatchInconsistent uint16 = 10
	BadActionUnsupportedOrder  uint16 = 11
	BadActionBadTag            uint16 = 12
	BadActionBadSetType        uint16 = 13
	BadActionBadSetLen         uint16 = 14
	BadActionBadSetArgument    uint16 = 15

	// OFPET_BAD_INSTRUCTION
	BadInstUnknownInst       uint16 = 0
	BadInstUnsupInst         uint16 = 1
	BadInstBadTableID        uint16 = 2
	BadInstUnsupMetadata     uint16 = 3
	BadInstUnsupMetadataMask uint16 = 4
	BadInstBadExperimenter   uint16 = 5
	BadInstBadExpType        uint16 = 6
	BadInstBadLen            uint16 = 7
	BadInstEPerm             uint16 = 8

	// OFPET_BAD_MATCH
	BadMatchBadType       uint16 = 0
	BadMatchBadLen        uint16 = 1
	BadMatchBadTag        uint16 = 2
	BadMatchBadDLAddrMask uint16 = 3
	BadMatchBadNWAddrMask uint16 = 4
	BadMatchBadWildcards  uint16 = 5
	BadMatchBadField      uint16 = 6
	BadMatchBadValue      uint16 = 7
	BadMatchBadMask       uint16 = 8
	BadMatchBadPrereq     uint16 = 9
	BadMatchDupField      uint16 = 10
	BadMatchEPerm         uint16 = 11

	// OFPET_FLOW_MOD_FAILED
	FlowModUnknown    uint16 = 0
	FlowModTableFull  uint16 = 1
	FlowModBadTableID uint16 = 2
	FlowModOverlap    uint16 = 3
	FlowModEPerm      uint16 = 4
	FlowModBadTimeout uint16 = 5
	FlowModBadCommand uint16 = 6
	FlowModBadFlags   uint16 = 7

	// OFPET_GROUP_MOD_FAILED
	GroupModGroupExists         uint16 = 0
	GroupModInvalidGroup        uint16 = 1
	GroupModWeightUnsupported   uint16 = 2
	GroupModOutOfGroups         uint16 = 3
	GroupModOutOfBuckets        uint16 = 4
	GroupModChainingUnsupported uint16 = 5
	GroupModWatchUnsupported    uint16 = 6
	GroupModLoop                uint16 = 7
	GroupModUnknownGroup        uint16 = 8
	GroupModChainedGroup        uint16 = 9
	GroupModBadType             uint16 = 10
	GroupModBadCommand          uint16 = 11
	GroupModBadBucket           uint16 = 12
	GroupModBadWatch            uint16 = 13
	GroupModEPerm               uint16 = 14

	// OFPET_PORT_MOD_FAILED
	PortModBadPort      uint16 = 0
	PortModBadHWAddr    uint16 = 1
	PortModBadConfig    uint16 = 2
	PortModBadAdvertise uint16 = 3
	PortModEPerm        uint16 = 4

	// OFPET_TABLE_MOD_FAILED
	TableModBadTable  uint16 = 0
	TableModBadConfig uint16 = 1
	TableModEPerm     uint16 = 2

	// OFPET_SWITCH_CONFIG_FAILED
	SwitchConfigBadFlags uint16 = 0
	SwitchConfigBadLen   uint16 = 1
	SwitchConfigEPerm    uint16 = 2

	// OFPET_ROLE_REQUEST_FAILED
	RoleRequestStale   uint16 = 0
	RoleRequestUnsup   uint16 = 1
	RoleRequestBadRole uint16 = 2

	// OFPET_METER_MOD_FAILED
	MeterModUnknown      uint16 = 0
	MeterModMeterExists  uint16 = 1
	MeterModInvalidMeter uint16 = 2
	MeterModUnknownMeter uint16 = 3
	MeterModBadCommand   uint16 = 4
	MeterModBadFlags     uint16 = 5
	MeterModBadRate      uint16 = 6
	MeterModBadBurst     uint16 = 7
	MeterModBadBand      uint16 = 8
	MeterModBadBandValue uint16 = 9
	MeterModOutOfMeters  uint16 = 10
	MeterModOutOfBands   uint16 = 11

	// OFPET_TABLE_FEATURES_FAILED
	TableFeaturesBadTable    uint16 = 0
	TableFeaturesBadMetadata uint16 = 1
	TableFeaturesBadType     uint16 = 2
	TableFeaturesBadLen      uint16 = 3
	TableFeaturesBadArgument uint16 = 4
	TableFeaturesEPerm       uint16 = 5
)

// Error is a decoding or validation failure that maps to an OFPT_ERROR the
// receiver should send back. errors.Is(err, &Error{Type: t, Code: c})
// matches on type and code only; short input also wraps io.ErrUnexpectedEOF.
type Error struct {
	Type   ErrorType
	Code   uint16
	Reason string // for humans and logs; never sent on the wire
	Err    error  // wrapped cause (io.ErrUnexpectedEOF for short input)
	// Experimenter is the experimenter id of an ErrTypeExperimenter
	// error (Code is then its exp_type), e.g. ExperimenterNicira.
	Experimenter uint32
}

// Open vSwitch's own errors that an OF1.3 switch sends as OFPET_EXPERIMENTER
// with experimenter ExperimenterNicira and these exp_types (ofp-errors.h,
// "NX1.2+(n)").
const (
	nxBRCMustBeZero     uint16 = 4  // NXBRC_MUST_BE_ZERO: a must-be-zero field was not
	nxBACBadConjunction uint16 = 15 // NXBAC_BAD_CONJUNCTION
)

// Exported names of the Nicira error codes above.
const (
	NXErrMustBeZero     = nxBRCMustBeZero
	NXErrBadConjunction = nxBACBadConjunction
)

// nxErr returns a Nicira experimenter error.
func nxErr(code uint16, reason string) error {
	return &Error{Type: ErrTypeExperimenter, Code: code, Experimenter: ExperimenterNicira, Reason: reason}
}

// Error returns e.g. "openflow: BAD_MATCH/BAD_PREREQ: tcp_dst needs ...".
func (e *Error) Error() string {
	s := fmt.Sprintf("openflow: %s", errorName(e.Type, e.Code))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the wrapped cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same type and code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Type == e.Type && t.Code == e.Code && (e.Type != ErrTypeExperimenter || t.Experimenter == e.Experimenter)
}

// Reply builds the OFPT_ERROR to send in answer to the offending message
// req (its raw bytes): same xid, data echoing at most 64 bytes of req.
func (e *Error) Reply(req []byte) *ErrorMsg {
	m := &ErrorMsg{Type: e.Type, Code: e.Code}
	if e.Type == ErrTypeExperimenter {
		m.Experimenter = e.Experimenter
	}
	if len(req) >= HeaderLen {
		m.Xid = be.Uint32(req[4:8])
	}
	if len(req) >= 1 && e.Type == ErrTypeHelloFailed {
		// HELLO_FAILED may be sent before a version is agreed; answer in
		// the peer's version if it is lower than ours.
		if req[0] < Version {
			m.Version = req[0]
		}
	}
	n := min(len(req), 64)
	m.Data = append([]byte(nil), req[:n]...)
	return m
}

// ErrorReply converts any error returned by this package's decoders or
// validators into the OFPT_ERROR for request req. Errors that are not an
// *Error become OFPET_BAD_REQUEST/OFPBRC_BAD_LEN when they wrap
// io.ErrUnexpectedEOF and OFPET_BAD_REQUEST/OFPBRC_EPERM otherwise.
func ErrorReply(err error, req []byte) *ErrorMsg {
	var oe *Error
	if errors.As(err, &oe) {
		return oe.Reply(req)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return (&Error{Type: ErrTypeBadRequest, Code: BadRequestBadLen}).Reply(req)
	}
	return (&Error{Type: ErrTypeBadRequest, Code: BadRequestEPerm}).Reply(req)
}

// short reports input that ended before the structure it announced: an
// *Error with the given type/code that also wraps io.ErrUnexpectedEOF.
func short(t ErrorType, code uint16, what string) error {
	return &Error{Type: t, Code: code, Reason: what, Err: io.ErrUnexpectedEOF}
}

// bad reports malformed input with the error type/code to send back.
func bad(t ErrorType, code uint16, format string, args ...any) error {
	return &Error{Type: t, Code: code, Reason: fmt.Sprintf(format, args...)}
}

var errorTypeNames = map[ErrorType]string{
	ErrTypeHelloFailed: "HELLO_FAILED", ErrTypeBadRequest: "BAD_REQUEST",
	ErrTypeBadAction: "BAD_ACTION", ErrTypeBadInstruction: "BAD_INSTRUCTION",
	ErrTypeBadMatch: "BAD_MATCH", ErrTypeFlowModFailed: "FLOW_MOD_FAILED",
	ErrTypeGroupModFailed: "GROUP_MOD_FAILED", ErrTypePortModFailed: "PORT_MOD_FAILED",
	ErrTypeTableModFailed: "TABLE_MOD_FAILED", ErrTypeQueueOpFailed: "QUEUE_OP_FAILED",
	ErrTypeSwitchConfigFailed: "SWITCH_CONFIG_FAILED", ErrTypeRoleRequestFailed: "ROLE_REQUEST_FAILED",
	ErrTypeMeterModFailed: "METER_MOD_FAILED", ErrTypeTableFeaturesFailed: "TABLE_FEATURES_FAILED",
	ErrTypeExperimenter: "EXPERIMENTER",
}

var errorCodeNames = map[ErrorType][]string{
	ErrTypeHelloFailed: {"INCOMPATIBLE", "EPERM"},
	ErrTypeBadRequest: {"BAD_VERSION", "BAD_TYPE", "BAD_MULTIPART", "BAD_EXPERIMENTER",
		"BAD_EXP_TYPE", "EPERM", "BAD_LEN", "BUFFER_EMPTY", "BUFFER_UNKNOWN", "BAD_TABLE_ID",
		"IS_SLAVE", "BAD_PORT", "BAD_PACKET", "MULTIPART_BUFFER_OVERFLOW"},
	ErrTypeBadAction: {"BAD_TYPE", "BAD_LEN", "BAD_EXPERIMENTER", "BAD_EXP_TYPE",
		"BAD_OUT_PORT", "BAD_ARGUMENT", "EPERM", "TOO_MANY", "BAD_QUEUE", "BAD_OUT_GROUP",
		"MATCH_INCONSISTENT", "UNSUPPORTED_ORDER", "BAD_TAG", "BAD_SET_TYPE", "BAD_SET_LEN",
		"BAD_SET_ARGUMENT"},
	ErrTypeBadInstruction: {"UNKNOWN_INST", "UNSUP_INST", "BAD_TABLE_ID", "UNSUP_METADATA",
		"UNSUP_METADATA_MASK", "BAD_EXPERIMENTER", "BAD_EXP_TYPE", "BAD_LEN", "EPERM"},
	ErrTypeBadMatch: {"BAD_TYPE", "BAD_LEN", "BAD_TAG", "BAD_DL_ADDR_MASK", "BAD_NW_ADDR_MASK",
		"BAD_WILDCARDS", "BAD_FIELD", "BAD_VALUE", "BAD_MASK", "BAD_PREREQ", "DUP_FIELD", "EPERM"},
	ErrTypeFlowModFailed: {"UNKNOWN", "TABLE_FULL", "BAD_TABLE_ID", "OVERLAP", "EPERM",
		"BAD_TIMEOUT", "BAD_COMMAND", "BAD_FLAGS"},
	ErrTypeGroupModFailed: {"GROUP_EXISTS", "INVALID_GROUP", "WEIGHT_UNSUPPORTED",
		"OUT_OF_GROUPS", "OUT_OF_BUCKETS", "CHAINING_UNSUPPORTED", "WATCH_UNSUPPORTED", "LOOP",
		"UNKNOWN_GROUP", "CHAINED_GROUP", "BAD_TYPE", "BAD_COMMAND", "BAD_BUCKET", "BAD_WATCH", "EPERM"},
	ErrTypePortModFailed:      {"BAD_PORT", "BAD_HW_ADDR", "BAD_CONFIG", "BAD_ADVERTISE", "EPERM"},
	ErrTypeTableModFailed:     {"BAD_TABLE", "BAD_CONFIG", "EPERM"},
	ErrTypeQueueOpFailed:      {"BAD_PORT", "BAD_QUEUE", "EPERM"},
	ErrTypeSwitchConfigFailed: {"BAD_FLAGS", "BAD_LEN", "EPERM"},
	ErrTypeRoleRequestFailed:  {"STALE", "UNSUP", "BAD_ROLE"},
	ErrTypeMeterModFailed: {"UNKNOWN", "METER_EXISTS", "INVALID_METER", "UNKNOWN_METER",
		"BAD_COMMAND", "BAD_FLAGS", "BAD_RATE", "BAD_BURST", "BAD_BAND", "BAD_BAND_VALUE",
		"OUT_OF_METERS", "OUT_OF_BANDS"},
	ErrTypeTableFeaturesFailed: {"BAD_TABLE", "BAD_METADATA", "BAD_TYPE", "BAD_LEN",
		"BAD_ARGUMENT", "EPERM"},
}

// String returns the spec name without the OFPET_ prefix, e.g. "BAD_MATCH".
func (t ErrorType) String() string {
	if s, ok := errorTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("ERROR_TYPE_%d", uint16(t))
}

func errorName(t ErrorType, code uint16) string {
	if t == ErrTypeExperimenter {
		switch code {
		case nxBRCMustBeZero:
			return "EXPERIMENTER/NXBRC_MUST_BE_ZERO"
		case nxBACBadConjunction:
			return "EXPERIMENTER/NXBAC_BAD_CONJUNCTION"
		}
	}
	codes := errorCodeNames[t]
	if int(code) < len(codes) {
		return t.String() + "/" + codes[code]
	}
	return fmt.Sprintf("%s/%d", t, code)
}
