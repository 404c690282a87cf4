package datapath

import (
	"encoding/binary"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// TestXSKRoundTrip drives the raw AF_XDP code: frames sent into veth xa
// are redirected by a minimal XDP program to an XSK on xa, read from its
// RX ring, queued on another XSK's TX ring (on xc) and read back, intact
// and in order, on xc's peer. 3×2048 frames: every ring wraps more than
// once.
func TestXSKRoundTrip(t *testing.T) {
	n, p := nstest.New(t, "xk-sw"), nstest.New(t, "xk-peer")
	nstest.Veth(t, p, "in0", n, "xa", 1500)
	nstest.Veth(t, p, "out0", n, "xc", 1500)
	in, out := nstest.RawSocket(t, p, "in0"), nstest.RawSocket(t, p, "out0")

	var rx, tx *XSK
	var ferr error
	n.In(t, func() {
		xa, err := net.InterfaceByName("xa")
		if err != nil {
			ferr = err
			return
		}
		xc, _ := net.InterfaceByName("xc")
		xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			ferr = err
			return
		}
		t.Cleanup(func() { xsks.Close() })
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R1, xsks.FD()),
			asm.Mov.Imm(asm.R2, 0),
			asm.Mov.Imm(asm.R3, 2), // XDP_PASS when the slot is empty
			asm.FnRedirectMap.Call(),
			asm.Return(),
		}})
		if err != nil {
			ferr = err
			return
		}
		t.Cleanup(func() { prog.Close() })
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: xa.Index, Flags: link.XDPDriverMode})
		if err != nil {
			ferr = err
			return
		}
		t.Cleanup(func() { l.Close() })
		if rx, ferr = NewXSK(xa.Index, 0); ferr != nil {
			return
		}
		if tx, ferr = NewXSK(xc.Index, 0); ferr != nil {
			return
		}
		ferr = xsks.Put(uint32(0), uint32(rx.FD()))
	})
	if ferr != nil {
		t.Fatal(ferr)
	}
	defer rx.Close()
	defer tx.Close()
	// XDP on a veth takes GSO from its peer (what docs/placement.md says
	// about pods on the AF_XDP path).
	if out, err := exec.Command("ip", "netns", "exec", p.Name, "ethtool", "-k", "in0").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	} else if !strings.Contains(string(out), "tx-tcp-segmentation: off [fixed]") {
		t.Fatalf("the peer keeps TSO with XDP attached:\n%s", out)
	}

	const total, burst = 3 * xskRxFrames, 64 // a burst fits the reading socket's buffer
	frame := func(i int) []byte {
		f := make([]byte, 60+i%200)
		copy(f, []byte{0x02, 0, 0, 0, 0, 0xd, 0x02, 0, 0, 0, 0, 0xa, 0x88, 0xb5}) // local experimental EtherType
		binary.BigEndian.PutUint32(f[14:], uint32(i))
		copy(f[18:], "xsk-test")
		return f
	}
	pfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	if err := unix.EpollCtl(pfd, unix.EPOLL_CTL_ADD, rx.FD(), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(rx.FD())}); err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	next := 0 // next frame expected on out0
	for sent := 0; sent < total; sent += burst {
		for i := sent; i < sent+burst; i++ {
			if _, err := unix.Write(in, frame(i)); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		deadline := time.Now().Add(5 * time.Second)
		for got < burst {
			if time.Now().After(deadline) {
				t.Fatalf("AF_XDP received %d of burst %d at frame %d (drops %d)", got, burst, sent, rx.RxDrops())
			}
			frames = rx.Receive(frames[:0], 64)
			if len(frames) == 0 {
				ev := make([]unix.EpollEvent, 1)
				_, _ = unix.EpollWait(pfd, ev, 100)
				continue
			}
			for _, f := range frames {
				if want := frame(sent + got); string(f) != string(want) {
					t.Fatalf("received frame %d: % x, want % x", sent+got, f[:20], want[:20])
				}
				if err := tx.Queue(f); err != nil {
					t.Fatal(err)
				}
				got++
			}
			rx.Release()
			tx.Kick()
		}
		for ; next < sent+burst; next++ {
			want := frame(next)
			f := nstest.ReadFrame(t, out, want[14:26], 5*time.Second)
			if string(f) != string(want) {
				t.Fatalf("transmitted frame %d arrived as % x", next, f[:20])
			}
		}
	}
	if d := rx.RxDrops(); d != 0 {
		t.Fatalf("%d frames dropped by the kernel", d)
	}
}

// TestXDPSettlesDroppedFrames: frames XDP counted for an onloaded flow but
// its socket had no room for (a burst larger than the RX ring while the
// Onloader is not reading) must not leave the flow "in userspace" for
// ever: the Onloader sends on what the ring held, settles done up to the
// last frame it saw, and, once idle with the socket's drop counter moved,
// up to enq. The flow can then take the fast path again.
func TestXDPSettlesDroppedFrames(t *testing.T) {
	_, a, _, d := podPair(t)
	id, err := d.Install(flow.Flow{Key: flow.Key{InPort: 1}, Mask: flow.Mask{InPort: 0xffffffff},
		Actions: []flow.Action{flow.Output{Port: 2}}, Onload: true})
	if err != nil {
		t.Fatal(err)
	}
	var o *Onloader
	var restore func()
	ready, stopped := make(chan error), make(chan error, 1)
	go func() {
		var err error
		if restore, err = d.LockToNetns(); err != nil {
			ready <- err
			return
		}
		defer restore()
		if o, err = d.NewOnloaderPath(OnloadPathAFXDP); err == nil {
			err = o.EnableXDP(1)
		}
		ready <- err
		if err != nil {
			return
		}
		<-ready // the burst is in
		stopped <- o.Run()
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	const burst = xskRxFrames + 500
	raw := nstest.RawSocket(t, a, "eth0")
	frame := udpPkt(t, "10.1.0.1", "10.1.0.2", 1000, 2000, "settle")
	for range burst {
		if _, err := unix.Write(raw, frame); err != nil {
			t.Fatal(err)
		}
	}
	// Every frame counted by XDP (enq); the socket holds at most its ring.
	for deadline := time.Now().Add(5 * time.Second); d.OnloadPending(id) < burst; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("XDP handed up %d of %d frames", d.OnloadPending(id), burst)
		}
	}
	ready <- nil
	defer func() {
		o.Close()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); d.OnloadPending(id) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d packets still pending; executed %d, lost %d", d.OnloadPending(id), o.Stats.Packets.Load(), o.Stats.Lost.Load())
		}
	}
	if x, l := o.Stats.XDP.Load(), o.Stats.Lost.Load(); x+l != burst || x > xskRxFrames || l == 0 {
		t.Fatalf("executed %d, lost %d: want the ring's worth executed and the rest counted lost (%d in all)", x, l, burst)
	}
}
