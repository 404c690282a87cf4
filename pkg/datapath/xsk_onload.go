package datapath

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The AF_XDP onload path. On a port enabled with Onloader.EnableXDP,
// nagare_port_xdp (bpf/nagare_port_xdp.h) redirects the packets of
// onloaded flows (and of flows with packets still in userspace) to an
// AF_XDP socket of the port's, in copy mode, instead of tc copying them
// into the onload ring; the Onloader reads every socket's RX ring and the
// onload ring in one loop, executes the packets with the same code
// (Onloader.execute), and transmits plain outputs to ports with a socket
// on that socket's TX ring (one sendto per port per batch), to other
// ports with sendmmsg. Ports without a socket, and every packet XDP does
// not take, keep the ring path.

// OnloadPath is how onloaded packets reach the switch.
type OnloadPath string

const (
	OnloadPathAuto  OnloadPath = "auto"  // AF_XDP where it can be set up, the ring elsewhere
	OnloadPathAFXDP OnloadPath = "afxdp" // AF_XDP; a port where it fails keeps the ring (reported)
	OnloadPathRing  OnloadPath = "ring"  // the onload ring and sendmmsg only
)

// ParseOnloadPath parses auto, afxdp or ring.
func ParseOnloadPath(s string) (OnloadPath, error) {
	switch p := OnloadPath(s); p {
	case OnloadPathAuto, OnloadPathAFXDP, OnloadPathRing:
		return p, nil
	}
	return "", fmt.Errorf("onload path %q: want auto, afxdp or ring", s)
}

// xskMaxMTU is the largest device MTU whose frames (with a VLAN tag and
// the XDP header) fit a UMEM frame after the kernel's XDP headroom.
const xskMaxMTU = xskFrame - unix.XDP_PACKET_HEADROOM - xskHdrLen - 18

// xskHdrLen is sizeof(struct xsk_hdr) in bpf/nagare_port_xdp.h: cookie,
// seq, in_port, len.
const xskHdrLen = 24

// xskPort is one port's sockets (one per receive queue; the first also
// transmits) and XDP attachment.
type xskPort struct {
	ofport uint32
	xs     []*XSK
	l      link.Link
}

// xskQueues is XSK_QUEUES in bpf/nagare_port_xdp.h: sockets per port at
// most; the xsks key is ifindex * xskQueues + queue.
const xskQueues = 4

// xdpSource is the Onloader's AF_XDP side.
type xdpSource struct {
	epfd, evfd int
	closed     atomic.Bool

	mu       sync.Mutex
	ports    map[uint32]*xskPort // by OpenFlow port
	gen      atomic.Uint64       // bumped when ports changes
	retiring []*xskPort          // closed by the loop
	failed   map[uint32]string   // ports where AF_XDP could not be set up: why

	// Owned by the loop.
	seenGen uint64
	active  []*XSK
	frames  [][]byte
	held    []*XSK
	next    int               // the socket read first, modulo len(active)
	lastSeq map[uint32]uint64 // flow id → highest seq seen
}

// xdpLoop is Run on the AF_XDP path: the sockets and the onload ring.
func (o *Onloader) xdpLoop() error {
	s := o.xdp
	evs := make([]unix.EpollEvent, 8)
	for {
		if s.closed.Load() {
			return nil
		}
		if g := s.gen.Load(); g != s.seenGen {
			s.refresh(o)
			s.seenGen = g
		}
		// Sockets first, then the ring: a ring record of a flow was
		// written before any later packet of it reached a socket, so a
		// ring read after the socket read holds every record that came
		// before the frames it found (a port moving to AF_XDP).
		s.frames, s.held = s.frames[:0], s.held[:0]
		// Start at another socket each time: a busy port does not keep
		// the others waiting behind a full batch.
		s.next++
		for i := range s.active {
			x := s.active[(s.next+i)%len(s.active)]
			before := len(s.frames)
			s.frames = x.Receive(s.frames, onloadBatch-len(s.frames))
			if len(s.frames) > before {
				s.held = append(s.held, x)
			}
			if len(s.frames) == onloadBatch {
				break
			}
		}
		n, err := o.r.ReadWaiting(o.ups)
		o.Stats.Malformed.Store(o.r.Malformed)
		if err != nil && !errors.Is(err, os.ErrClosed) {
			return err
		}
		if n > 0 {
			o.executeRing(o.ups[:n])
		}
		if len(s.frames) > 0 {
			o.executeFrames(s.frames)
			for _, x := range s.held {
				x.Release()
			}
		}
		if n > 0 || len(s.frames) > 0 {
			o.d.pruneRetired()
			continue
		}
		// Idle: wait for a wakeup; while frames were seen since the last
		// look at the drop counters, at most 20 ms (resync).
		timeout := -1
		if len(s.lastSeq) > 0 {
			timeout = 20
		}
		k, err := unix.EpollWait(s.epfd, evs, timeout)
		if err != nil && err != unix.EINTR {
			return fmt.Errorf("datapath: onload epoll: %w", err)
		}
		for _, ev := range evs[:max(k, 0)] {
			if int(ev.Fd) == s.evfd {
				var b [8]byte
				_, _ = unix.Read(s.evfd, b[:])
			}
		}
		if k == 0 {
			s.resync(o)
		}
	}
}

// executeFrames executes frames from the sockets: header, then the frame.
func (o *Onloader) executeFrames(frames [][]byte) {
	s := o.xdp
	o.pkts = o.pkts[:0]
	for _, f := range frames {
		if len(f) < xskHdrLen+14 {
			o.Stats.Failed.Add(1) // not what nagare_port_xdp writes
			continue
		}
		h := (*[3]uint64)(unsafe.Pointer(&f[0]))
		inPort := *(*uint32)(unsafe.Pointer(&f[16]))
		pkt := f[xskHdrLen:]
		// As for ring records: a local sender's CHECKSUM_PARTIAL is not
		// carried over, so a half-done checksum is finished here.
		completeChecksum(pkt)
		o.pkts = append(o.pkts, onloadPacket{cookie: h[0], inPort: inPort, pkt: pkt})
		id, seq := uint32(h[0]), h[1]
		if seq > s.lastSeq[id] {
			s.lastSeq[id] = seq
		}
	}
	o.execute(o.pkts)
	o.Stats.XDP.Add(uint64(len(o.pkts)))
	// Done up to each packet's place in its flow: a frame the socket
	// dropped before it (a full ring) is counted done with it.
	for i := range o.pkts {
		id := uint32(o.pkts[i].cookie)
		o.settle(id, s.lastSeq[id])
	}
}

// settle raises flow id's done counter to seq (never past enq).
func (o *Onloader) settle(id uint32, seq uint64) {
	enq, done := o.d.seqCounters(id)
	if done == nil {
		return
	}
	for {
		d, e := atomic.LoadUint64(done), atomic.LoadUint64(enq)
		if seq > e {
			seq = e
		}
		if d >= seq || atomic.CompareAndSwapUint64(done, d, seq) {
			return
		}
	}
}

// resync runs when the loop was idle for a poll timeout (20 ms): if a
// socket dropped frames since the last look (its ring was full), the
// flows handed up through the sockets may wait for packets that will
// never come; every such flow is settled up to its enq, so its later
// packets may take the fast path again. Nothing is in flight after 20 ms
// of silence (XDP hands a frame over within its NAPI poll).
func (s *xdpSource) resync(o *Onloader) {
	var lost uint64
	for _, x := range s.active {
		if n := x.RxDrops(); n != x.dropsSeen {
			lost += n - x.dropsSeen
			x.dropsSeen = n
		}
	}
	if lost == 0 {
		clear(s.lastSeq) // every frame seen was executed and settled
		return
	}
	o.Stats.Lost.Add(lost)
	for id := range s.lastSeq {
		enq, _ := o.d.seqCounters(id)
		if enq != nil {
			o.settle(id, atomic.LoadUint64(enq))
		}
		delete(s.lastSeq, id)
	}
}

// refresh takes the current port set: closes retired sockets, rebuilds
// the transmit map. Loop only.
func (s *xdpSource) refresh(o *Onloader) {
	s.mu.Lock()
	retiring := s.retiring
	s.retiring = nil
	s.active = s.active[:0]
	m := make(map[int]*XSK, len(s.ports))
	for _, p := range s.ports {
		s.active = append(s.active, p.xs...)
		m[p.xs[0].Ifindex] = p.xs[0]
	}
	s.mu.Unlock()
	slices.SortFunc(s.active, func(a, b *XSK) int { return (a.Ifindex-b.Ifindex)*xskQueues + a.RxQueue - b.RxQueue })
	o.eb.xsk = m
	// A retired socket may still hold frames XDP redirected before it was
	// unbound: they are counted in their flows' enq, so they are sent on
	// before the socket goes.
	for _, p := range retiring {
		for _, x := range p.xs {
			for {
				s.frames = x.Receive(s.frames[:0], onloadBatch)
				if len(s.frames) == 0 {
					break
				}
				o.executeFrames(s.frames)
				x.Release()
			}
		}
		p.close()
	}
}

func (s *xdpSource) wake() {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = 1
	_, _ = unix.Write(s.evfd, b[:])
}

// startXDP sets up the AF_XDP side: an epoll set with the onload ring and
// an eventfd; ports join it with EnableXDP.
func (o *Onloader) startXDP() error {
	if err := ProbeAFXDP(); err != nil {
		return err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return err
	}
	for _, fd := range []int{evfd, o.d.objs.Onload.FD()} {
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(epfd)
			unix.Close(evfd)
			return fmt.Errorf("datapath: onload epoll: %w", err)
		}
	}
	o.xdp = &xdpSource{epfd: epfd, evfd: evfd, ports: map[uint32]*xskPort{}, failed: map[uint32]string{}, lastSeq: map[uint32]uint64{}}
	o.xdp.gen.Store(1)
	return nil
}

// EnableXDP moves port ofport's onloaded packets to the AF_XDP path: a
// socket on the port's device, the XDP program attached (copy mode). On
// error the port keeps the ring path; the reason is kept for XDPPorts.
func (o *Onloader) EnableXDP(ofport uint32) error {
	s := o.xdp
	if s == nil {
		return fmt.Errorf("datapath: onload path is the ring: %w", ErrNotSupported)
	}
	err := o.enableXDP(ofport)
	s.mu.Lock()
	if err != nil {
		s.failed[ofport] = err.Error()
	} else {
		delete(s.failed, ofport)
	}
	s.mu.Unlock()
	return err
}

func (o *Onloader) enableXDP(ofport uint32) error {
	d, s := o.d, o.xdp
	s.mu.Lock()
	_, on := s.ports[ofport]
	s.mu.Unlock()
	if on {
		return nil
	}
	d.mu.Lock()
	dp, ok := d.ports[ofport]
	var port Port
	if ok {
		port = *dp
	}
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("datapath: no port %d", ofport)
	}
	if port.Kind == PortTunnel {
		return fmt.Errorf("datapath: port %d is a tunnel: its packets are decapsulated at tc, not seen by XDP", ofport)
	}
	if port.Ifindex >= portArray {
		return fmt.Errorf("datapath: %s has ifindex %d: past the xsks map", port.Name, port.Ifindex)
	}
	p := &xskPort{ofport: ofport}
	err := d.inNetns(func() error {
		ln, err := netlink.LinkByIndex(port.Ifindex)
		if err != nil {
			return err
		}
		a := ln.Attrs()
		if a.MTU > xskMaxMTU {
			return fmt.Errorf("datapath: %s has MTU %d: its frames do not fit a %d-byte AF_XDP frame (MTU %d at most); the ring carries jumbo frames",
				port.Name, a.MTU, xskFrame, xskMaxMTU)
		}
		queues := max(a.NumRxQueues, 1)
		if queues > xskQueues {
			return fmt.Errorf("datapath: %s has %d receive queues: the AF_XDP path takes %d at most", port.Name, queues, xskQueues)
		}
		for q := range queues {
			x, err := NewXSK(port.Ifindex, q)
			if err != nil && q > 0 && errors.Is(err, unix.EINVAL) {
				break // queues allocated, not in use (veth: its channels)
			}
			if err != nil {
				return err
			}
			p.xs = append(p.xs, x)
			if err = d.objs.Xsks.Put(uint32(port.Ifindex*xskQueues+q), uint32(x.FD())); err != nil {
				return fmt.Errorf("datapath: xsks: %w", err)
			}
		}
		p.l, err = link.AttachXDP(link.XDPOptions{Program: d.objs.NagarePortXdp, Interface: port.Ifindex, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("datapath: attaching XDP to %s: %w", port.Name, err)
		}
		return nil
	})
	if err == nil {
		for _, x := range p.xs {
			if err = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, x.FD(), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(x.FD())}); err != nil {
				break
			}
		}
	}
	if err != nil {
		d.unbindXSK(p)
		p.close()
		return err
	}
	s.mu.Lock()
	s.ports[ofport] = p
	s.mu.Unlock()
	s.gen.Add(1)
	s.wake()
	// Last: from now on tc leaves the port's packets to XDP's decision.
	return d.setPortXDP(port.Ifindex, true)
}

// setPortXDP sets or clears PORT_XDP in the port's entry.
func (d *Datapath) setPortXDP(ifindex int, on bool) error {
	var info nagarePortInfo
	m := d.portMap(ifindex)
	if err := m.Lookup(uint32(ifindex), &info); err != nil {
		return fmt.Errorf("datapath: port flags of ifindex %d: %w", ifindex, err)
	}
	if on {
		info.Flags |= portFlagXDP
	} else {
		info.Flags &^= portFlagXDP
	}
	return m.Put(uint32(ifindex), info)
}

// DisableXDP gives port ofport back to the ring path and detaches XDP
// (the peer gets GSO back). Packets already on the socket are still
// executed. The caller moves a port only while none of its flows has
// packets in userspace, or order across the change is not kept.
func (o *Onloader) DisableXDP(ofport uint32) {
	s := o.xdp
	if s == nil {
		return
	}
	s.mu.Lock()
	p, ok := s.ports[ofport]
	if ok {
		delete(s.ports, ofport)
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	_ = o.d.setPortXDP(p.xs[0].Ifindex, false)
	o.d.unbindXSK(p)
	for _, x := range p.xs {
		_ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, x.FD(), nil)
	}
	s.mu.Lock()
	s.retiring = append(s.retiring, p)
	s.mu.Unlock()
	s.gen.Add(1)
	s.wake()
}

// unbindXSK detaches p's XDP program and removes its sockets from xsks.
func (d *Datapath) unbindXSK(p *xskPort) {
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for _, x := range p.xs {
		_ = d.objs.Xsks.Delete(uint32(x.Ifindex*xskQueues + x.RxQueue))
	}
}

func (p *xskPort) close() {
	for _, x := range p.xs {
		x.Close()
	}
}

// XDPPorts lists the ports on the AF_XDP path, and those where it could
// not be set up with the reason.
func (o *Onloader) XDPPorts() (on []uint32, failed map[uint32]string) {
	s := o.xdp
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for no := range s.ports {
		on = append(on, no)
	}
	slices.Sort(on)
	failed = make(map[uint32]string, len(s.failed))
	for k, v := range s.failed {
		failed[k] = v
	}
	return on, failed
}

// Path is the onload path this Onloader runs: afxdp (it can put ports on
// AF_XDP sockets) or ring.
func (o *Onloader) Path() OnloadPath {
	if o.xdp != nil {
		return OnloadPathAFXDP
	}
	return OnloadPathRing
}

// closeXDP detaches every port and releases the sockets.
func (o *Onloader) closeXDP() {
	s := o.xdp
	if s == nil {
		return
	}
	on, _ := o.XDPPorts()
	for _, no := range on {
		o.DisableXDP(no)
	}
	s.closed.Store(true)
	s.wake()
}

// releaseXDP runs when the loop has stopped.
func (s *xdpSource) release() {
	s.mu.Lock()
	for _, p := range s.retiring {
		p.close()
	}
	s.retiring = nil
	s.mu.Unlock()
	unix.Close(s.epfd)
	unix.Close(s.evfd)
}

// ProbeAFXDP reports whether this kernel gives AF_XDP sockets.
func ProbeAFXDP() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("datapath: AF_XDP socket: %w", err)
	}
	unix.Close(fd)
	return nil
}

// kickXSK transmits what Add queued on AF_XDP sockets: one sendto per
// socket with frames queued.
func (b *ExecBatch) kickXSK() {
	for _, x := range b.xsk {
		if x.txQueued > 0 {
			x.Kick()
		}
	}
}
