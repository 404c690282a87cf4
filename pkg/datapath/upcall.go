package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/nagare-net/nagare/pkg/flow"
)

// UpcallReason says why the fast path handed a packet to userspace.
type UpcallReason uint32

const (
	UpcallMiss   UpcallReason = 1 // no cached flow matched
	UpcallAction UpcallReason = 2 // a flow's Userspace action
)

func (r UpcallReason) String() string {
	switch r {
	case UpcallMiss:
		return "miss"
	case UpcallAction:
		return "action"
	case UpcallOnload:
		return "onload"
	}
	return fmt.Sprintf("reason(%d)", uint32(r))
}

// Upcall is one packet the fast path handed to userspace. A TCP/UDP
// checksum its sender left to offload is completed (see completeChecksum),
// so Packet can be executed as it is; except in an onloaded GSO packet,
// which the Onloader sends as the segments Segment makes, checksums
// computed.
type Upcall struct {
	Reason  UpcallReason
	Ifindex int
	Key     flow.Key
	Cookie  uint64 // Userspace action argument
	Len     int    // length of the packet on the wire
	Packet  []byte // its first bytes; shorter than Len for packets over the snapshot
	// GSOSize is the segment size of a GSO packet (a super-packet from a
	// sender with TSO or UDP_SEGMENT), 0 for others: see Segment.
	GSOSize int
}

// Truncated reports whether Packet misses part of the packet (it then cannot
// be executed; its flow can still be installed).
func (u *Upcall) Truncated() bool { return len(u.Packet) < u.Len }

// struct upcall header (bpf/lib/upcall.h):
//
//	0 reason u32, 4 ifindex u32, 8 pkt_len u32, 12 cap_len u32,
//	16 cookie u64, 24 vlan u32 (proto<<16 | tci, 0: none), 28 gso_size u32,
//	32 key [160], 192 pkt [up to 65536]
const upcallHeader = 32 + flow.KeySize

// UnmarshalBinary decodes one upcall record.
func (u *Upcall) UnmarshalBinary(b []byte) error {
	if len(b) < upcallHeader {
		return io.ErrUnexpectedEOF
	}
	u.Reason = UpcallReason(binary.NativeEndian.Uint32(b[0:]))
	u.Ifindex = int(binary.NativeEndian.Uint32(b[4:]))
	u.Len = int(binary.NativeEndian.Uint32(b[8:]))
	capLen := int(binary.NativeEndian.Uint32(b[12:]))
	u.Cookie = binary.NativeEndian.Uint64(b[16:])
	vlan := binary.NativeEndian.Uint32(b[24:])
	u.GSOSize = int(binary.NativeEndian.Uint32(b[28:]))
	if err := u.Key.UnmarshalBinary(b[32:]); err != nil {
		return err
	}
	if capLen > len(b)-upcallHeader || capLen > u.Len {
		return fmt.Errorf("datapath: upcall claims %d captured bytes of %d", capLen, u.Len)
	}
	pkt := b[upcallHeader : upcallHeader+capLen]
	if vlan != 0 && capLen >= 12 {
		// The tag the kernel kept beside the packet goes back in,
		// after the MAC addresses: the packet as it was on the wire.
		u.Packet = append(u.Packet[:0], pkt[:12]...)
		u.Packet = binary.BigEndian.AppendUint16(u.Packet, uint16(vlan>>16))
		u.Packet = binary.BigEndian.AppendUint16(u.Packet, uint16(vlan))
		u.Packet = append(u.Packet, pkt[12:]...)
		u.Len += 4
	} else {
		u.Packet = append(u.Packet[:0], pkt...)
	}
	if !u.Truncated() && (u.GSOSize == 0 || u.Reason != UpcallOnload) {
		// An onloaded GSO packet is only ever sent cut (Segment
		// computes every segment's checksums): summing 64 KiB here
		// would be wasted. (A missed one may become a PACKET_IN too.)
		completeChecksum(u.Packet)
	}
	return nil
}

// UpcallReader reads upcalls from the ring. One reader per instance.
type UpcallReader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
	// Malformed counts records ReadBatch skipped.
	Malformed uint64

	// closeMu orders Close against waiting(): the ring reader's
	// AvailableBytes takes no lock, and its Close drops the ring (a data
	// race, and a nil dereference, when a switch stops mid-batch).
	closeMu sync.Mutex
	closed  bool

	// lingerUntil: until upcallLinger after the last action upcall read,
	// the fast path may submit action upcalls without waking the reader
	// (bpf/lib/upcall.h, ACTION_WAKE_GAP_NS): until then a wait ends at
	// lingerUntil at the latest, to find them.
	lingerUntil time.Time
}

// upcallLinger is longer than the fast path's ACTION_WAKE_GAP_NS (4 ms).
const upcallLinger = 8 * time.Millisecond

// waiting reports whether more records are in the ring.
func (r *UpcallReader) waiting() bool {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	return !r.closed && r.r.AvailableBytes() > 0
}

// Upcalls opens the upcall ring for reading.
func (d *Datapath) Upcalls() (*UpcallReader, error) { return d.newUpcallReader(d.objs.Upcalls) }

func (d *Datapath) newUpcallReader(m *ebpf.Map) (*UpcallReader, error) {
	r, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err
	}
	return &UpcallReader{r: r}, nil
}

// Read blocks until an upcall arrives (or Close). The returned Upcall's
// Packet is a fresh slice.
func (r *UpcallReader) Read() (*Upcall, error) {
	if err := r.r.ReadInto(&r.rec); err != nil {
		return nil, err
	}
	u := new(Upcall)
	if err := u.UnmarshalBinary(r.rec.RawSample); err != nil {
		return nil, err
	}
	return u, nil
}

// ReadBatch blocks until an upcall arrives (or Close), then also takes the
// upcalls already waiting in the ring, up to len(ups): a handler that keeps
// up reads one at a time, one that falls behind catches up in batches.
// The Upcalls and their Packet buffers are reused by the next call. A
// record that does not decode is skipped and counted in Malformed.
func (r *UpcallReader) ReadBatch(ups []Upcall) (int, error) {
	n := 0
	for n < len(ups) {
		if n > 0 && !r.waiting() {
			break
		}
		lingering := n == 0 && !r.lingerUntil.IsZero()
		if lingering {
			r.r.SetDeadline(r.lingerUntil)
		}
		err := r.r.ReadInto(&r.rec)
		if lingering {
			r.r.SetDeadline(time.Time{})
		}
		if err != nil {
			if n > 0 {
				break
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if lingering && time.Now().Before(r.lingerUntil) {
					// Stale: cilium's reader keeps the error of a wait
					// that timed out but found a record, and returns it
					// the next time the ring is empty, without waiting.
					// Taken for "nothing more came", it would end the
					// linger early, and records submitted without a
					// wakeup would wait for the next one (a lost
					// PACKET_IN until the client retransmits).
					continue
				}
				r.lingerUntil = time.Time{} // nothing more came: wait for a wakeup
				continue
			}
			return 0, err
		}
		if err := ups[n].UnmarshalBinary(r.rec.RawSample); err != nil {
			r.Malformed++
			continue
		}
		if ups[n].Reason == UpcallAction {
			r.lingerUntil = time.Now().Add(upcallLinger)
		}
		n++
	}
	return n, nil
}

// ReadWaiting is ReadBatch without the wait: the records already in the
// ring, up to len(ups), possibly none.
func (r *UpcallReader) ReadWaiting(ups []Upcall) (int, error) {
	n := 0
	for n < len(ups) && r.waiting() {
		if err := r.r.ReadInto(&r.rec); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // a stale deadline of an earlier wait (ReadBatch): the record is still there
			}
			return n, err
		}
		if err := ups[n].UnmarshalBinary(r.rec.RawSample); err != nil {
			r.Malformed++
			continue
		}
		n++
	}
	return n, nil
}

// Close unblocks Read and releases the reader.
func (r *UpcallReader) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	r.closed = true
	return r.r.Close()
}
