package pktgen

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SendConfig is one run of the sender.
type SendConfig struct {
	// Dev is the interface to send on (the pod's eth0).
	Dev string
	// DstMAC, SrcIP and DstIP fill the headers; the source MAC is Dev's.
	DstMAC       net.HardwareAddr
	SrcIP, DstIP net.IP
	Space        FlowSpace
	// Rate is the offered rate in packets/s; 0 sends as fast as possible.
	Rate float64
	// FrameLen is the Ethernet frame length without FCS (64 = the classic
	// "64 B packet" minus nothing: headers, flow number, padding).
	FrameLen int
	// Batch is the most frames handed to the kernel per sendmmsg call.
	Batch int
}

// SendReport is what the sender did. Times are Unix nanoseconds so that
// the lab can put them on the same axis as its flow-count samples.
type SendReport struct {
	Flows   int   `json:"flows"`
	Sent    int   `json:"sent"`
	StartNs int64 `json:"start_ns"`
	EndNs   int64 `json:"end_ns"`
	// OfferedPPS is Sent over the sending time.
	OfferedPPS float64 `json:"offered_pps"`
	// TargetPPS is the configured rate (0 = flat out).
	TargetPPS float64 `json:"target_pps"`
	// TxDropped is the increase of Dev's tx_dropped counter: frames the
	// kernel accepted but the veth could not hand to its peer (the peer
	// CPU's backlog was full). They never reached the switch.
	TxDropped uint64 `json:"tx_dropped"`
	// SendErrors counts sendmmsg calls that failed with ENOBUFS/EAGAIN
	// (retried).
	SendErrors int `json:"send_errors"`
	// Stalls counts pacer schedule restarts: the sender was descheduled
	// for longer than the pacer catches up (see Pacer).
	Stalls int `json:"stalls"`
}

// Sender is an AF_PACKET socket bound to one interface.
type Sender struct {
	fd  int
	dev string
	mac net.HardwareAddr
}

// OpenSender opens the socket in the current network namespace. With
// PACKET_QDISC_BYPASS the frames go straight to the driver (veth_xmit):
// no qdisc lock, no requeue, which is what a packet generator wants.
func OpenSender(dev string) (*Sender, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // protocol 0: send only
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	s := &Sender{fd: fd, dev: dev, mac: ifi.HardwareAddr}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		s.Close()
		return nil, fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bind to %s: %w", dev, err)
	}
	return s, nil
}

// Close closes the socket.
func (s *Sender) Close() error { return unix.Close(s.fd) }

// MAC is the interface's address (the frames' source MAC).
func (s *Sender) MAC() net.HardwareAddr { return s.mac }

// Send sends one frame per flow of c.Space, paced by p.
func (s *Sender) Send(c SendConfig, p *Pacer) (SendReport, error) {
	if err := c.Space.Validate(); err != nil {
		return SendReport{Flows: c.Space.Flows, TargetPPS: c.Rate}, err
	}
	next := 0
	return s.send(c, p, 0, func(b []byte, tmpl *Template) {
		src, dst := c.Space.Ports(next)
		tmpl.Build(b, uint32(next), src, dst)
		next++
	})
}

// send sends c.Space.Flows frames (or, with d > 0, frames until d has
// passed), each written by build, paced by p.
func (s *Sender) send(c SendConfig, p *Pacer, d time.Duration, build func(b []byte, tmpl *Template)) (SendReport, error) {
	rep := SendReport{Flows: c.Space.Flows, TargetPPS: c.Rate}
	tmpl, err := NewTemplate(Header{SrcMAC: s.mac, DstMAC: c.DstMAC, SrcIP: c.SrcIP, DstIP: c.DstIP}, c.FrameLen)
	if err != nil {
		return rep, err
	}
	batch := max(1, c.Batch)
	bufs := make([]byte, batch*tmpl.Len())
	iovs := make([]unix.Iovec, batch)
	msgs := make([]unix.Mmsghdr, batch)
	for i := range msgs {
		iovs[i].Base = &bufs[i*tmpl.Len()]
		iovs[i].SetLen(tmpl.Len())
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.SetIovlen(1)
	}
	drop0 := txDropped(s.dev)
	start := time.Now()
	rep.StartNs = start.UnixNano()
	total := c.Space.Flows
	if d > 0 {
		total = int(^uint(0) >> 1)
	}
	next := 0
	for next < total && (d == 0 || time.Since(start) < d) {
		n := p.Next(total - next)
		for k := 0; k < n; k++ {
			build(bufs[k*tmpl.Len():], tmpl)
		}
		for off := 0; off < n; {
			r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msgs[off])), uintptr(n-off), 0, 0, 0)
			switch e {
			case 0:
				off += int(r)
			case unix.ENOBUFS, unix.EAGAIN, unix.EINTR:
				rep.SendErrors++
				time.Sleep(10 * time.Microsecond) // the socket's send buffer drains as the peer takes frames
			default:
				return rep, fmt.Errorf("sendmmsg: %w", e)
			}
		}
		next += n
	}
	rep.EndNs = time.Now().UnixNano()
	rep.Sent = next
	if d > 0 {
		rep.Flows = next
	}
	rep.Stalls = p.Stalls
	if d := float64(rep.EndNs-rep.StartNs) / 1e9; d > 0 {
		rep.OfferedPPS = float64(rep.Sent) / d
	}
	if d1 := txDropped(s.dev); d1 >= drop0 {
		rep.TxDropped = d1 - drop0
	}
	return rep, nil
}

// txDropped reads an interface's tx_dropped counter (sysfs is the
// namespace's own under ip netns exec); 0 if unreadable.
func txDropped(dev string) uint64 {
	data, err := os.ReadFile("/sys/class/net/" + dev + "/statistics/tx_dropped")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return v
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
