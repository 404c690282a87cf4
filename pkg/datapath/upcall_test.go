package datapath

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
)

func readUpcall(t *testing.T, r *UpcallReader) *Upcall {
	t.Helper()
	type res struct {
		u   *Upcall
		err error
	}
	c := make(chan res, 1)
	go func() {
		u, err := r.Read()
		c <- res{u, err}
	}()
	select {
	case x := <-c:
		if x.err != nil {
			t.Fatal(x.err)
		}
		return x.u
	case <-time.After(5 * time.Second):
		t.Fatal("no upcall arrived")
	}
	return nil
}

func TestUpcalls(t *testing.T) {
	d := newTestDP(t)
	r, err := d.Upcalls()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1001, 3333, "first packet")

	// A miss goes to userspace with its key and the whole packet.
	if v := d.run(pkt, "lo"); v.verdict != tcActShot {
		t.Fatalf("miss verdict %d", v.verdict)
	}
	u := readUpcall(t, r)
	want := exactKeyUDP4("10.0.0.1", "10.0.0.2", 1001, 3333)
	if u.Reason != UpcallMiss || u.Key != want || !bytes.Equal(u.Packet, pkt) || u.Len != len(pkt) || u.Truncated() {
		t.Fatalf("upcall %+v\nkey %s", u, flow.Format(u.Key, flow.ExactMask()))
	}

	// Records come in five sizes; a miss carries the whole packet (a
	// larger one is a GSO packet that userspace segments).
	for _, size := range []int{upcallMin, upcallMin + 1, upcallTiny, upcallTiny + 1, upcallSmall, upcallSmall + 1, 1514, upcallSnap, upcallSnap + 100} {
		p := udpPkt(t, "10.0.0.1", "10.0.0.2", 1001, 3333, strings.Repeat("x", size-42))
		if v := d.run(p, "lo"); v.verdict != tcActShot {
			t.Fatalf("%d B: miss verdict %d", size, v.verdict)
		}
		u := readUpcall(t, r)
		if u.Len != size || !bytes.Equal(u.Packet, p) || u.Truncated() {
			t.Fatalf("%d B: upcall len %d, %d bytes captured (want all)", size, u.Len, len(u.Packet))
		}
	}
	// A userspace action's copy (a PACKET_IN) is cut at the snapshot.
	big := udpPkt(t, "10.0.0.1", "10.0.0.2", 1001, 3334, strings.Repeat("y", upcallSnap+100-42))
	d.put(flow.Flow{Key: exactKeyUDP4("10.0.0.1", "10.0.0.2", 1001, 3334), Mask: flow.ExactMask(), Actions: []flow.Action{flow.Userspace{Cookie: 1}, flow.Output{Port: portOut}}})
	d.run(big, "lo")
	if u := readUpcall(t, r); u.Reason != UpcallAction || len(u.Packet) != upcallSnap || !u.Truncated() {
		t.Fatalf("action upcall of %d B: %d bytes captured, want %d", len(big), len(u.Packet), upcallSnap)
	}

	// A userspace action sends a copy with its cookie; forwarding goes on.
	d.put(inPortFlow(flow.Userspace{Cookie: 0xfeed}, flow.Output{Port: portOut}))
	if v := d.run(pkt, "lo"); v.verdict != tcActRedirect {
		t.Fatalf("verdict %d with userspace+output", v.verdict)
	}
	u = readUpcall(t, r)
	if u.Reason != UpcallAction || u.Cookie != 0xfeed || !bytes.Equal(u.Packet, pkt) {
		t.Fatalf("action upcall %+v", u)
	}
}

// TestUpcallRingFull: when userspace does not keep up, misses are dropped
// with a reason, not silently.
func TestUpcallRingFull(t *testing.T) {
	d := newTestDP(t)
	// Minimum-size frames take the least records (bpf/lib/upcall.h:
	// UPCALL_MIN).
	pkt := udpPkt(t, "10.0.0.1", "10.0.0.2", 1, 2, strings.Repeat("x", upcallMin-42))
	records := upcallRingBytes / (upcallHeader + upcallMin + 8)
	send := func(n int) {
		t.Helper()
		if err := d.inNetns(func() error {
			_, _, err := d.objs.NagarePortIngress.Benchmark(pkt, n, nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// That many fit (a record larger than the least one would not) ...
	send(records - 50)
	if full := d.drops()[DropUpcallRingFull]; full != 0 {
		t.Fatalf("%d ring-full drops in the first %d misses of %d B", full, records-50, len(pkt))
	}
	// ... and no more.
	send(150)
	c := d.counters()
	full := d.drops()[DropUpcallRingFull]
	if full == 0 || c["upcall"]+full != c["miss"] {
		t.Fatalf("ring-full drops %d, upcalls %d, misses %d", full, c["upcall"], c["miss"])
	}
}

// TestUpcallReaderCloseDuringBatch closes the reader while ReadBatch runs
// with records streaming in, as a stopping switch does: ReadBatch must end
// with an error, not hang or crash. (The ring reader's AvailableBytes takes
// no lock against its Close; the switch tests under -race caught that
// once, this loop did not reproduce it in 200 rounds: it guards the
// behaviour, not the race.)
func TestUpcallReaderCloseDuringBatch(t *testing.T) {
	d := newTestDP(t)
	for round := 0; round < 20; round++ {
		r, err := d.Upcalls()
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		sent := make(chan struct{})
		go func() { // a stream of misses
			defer close(sent)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d.run(udpPkt(t, "10.0.0.1", "10.0.0.2", uint16(i), 9, "m"), "lo")
			}
		}()
		done := make(chan error, 1)
		go func() {
			ups := make([]Upcall, 64)
			for {
				if _, err := r.ReadBatch(ups); err != nil {
					done <- err
					return
				}
			}
		}()
		time.Sleep(time.Duration(round%10) * time.Millisecond) // close at different points of a batch
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("ReadBatch did not end after Close")
		}
		close(stop)
		<-sent
	}
}
