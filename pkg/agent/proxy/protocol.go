package proxy

// Number is the protocol's IP protocol number (TCP 6, UDP 17, SCTP 132).
func (p Protocol) Number() uint8 {
	switch p {
	case UDP:
		return 17
	case SCTP:
		return 132
	}
	return 6
}
