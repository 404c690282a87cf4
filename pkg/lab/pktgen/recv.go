package pktgen

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// RecvConfig is one run of the receiver.
type RecvConfig struct {
	Space FlowSpace
	// Idle ends the run once no packet arrived for this long, after the
	// first one.
	Idle time.Duration
	// Timeout ends the run regardless (nothing arrived at all, or a
	// trickle that never goes idle).
	Timeout time.Duration
	// RcvBuf is each socket's receive buffer (SO_RCVBUFFORCE), large so that
	// the receiver, not being the system under test, does not drop.
	RcvBuf int
}

// RecvReport is what arrived.
type RecvReport struct {
	Flows int `json:"flows"`
	// Distinct is the number of flows of the space with at least one
	// packet: the delivered first packets.
	Distinct int `json:"distinct"`
	Packets  int `json:"packets"`
	// Foreign counts packets on the sockets whose ports are outside the
	// space or whose payload names another flow than their ports.
	Foreign int   `json:"foreign"`
	FirstNs int64 `json:"first_ns,omitempty"`
	LastNs  int64 `json:"last_ns,omitempty"`
	// RcvbufErrors and InCsumErrors are the increases of the namespace's
	// UDP counters (/proc/net/snmp): drops at the receiver's own sockets,
	// and packets the kernel dropped for a bad checksum.
	RcvbufErrors uint64 `json:"rcvbuf_errors"`
	InCsumErrors uint64 `json:"in_csum_errors"`
	TimedOut     bool   `json:"timed_out,omitempty"`
}

// Receiver is one UDP socket per destination port of a flow space. Using
// the stack (not AF_PACKET) also checks the generator's checksums: a frame
// with a bad IPv4 or UDP checksum never reaches a socket.
type Receiver struct {
	cfg RecvConfig
	fds []int
}

// OpenReceiver binds the sockets (0.0.0.0:port) in the current namespace.
func OpenReceiver(c RecvConfig) (*Receiver, error) {
	if err := c.Space.Validate(); err != nil {
		return nil, err
	}
	r := &Receiver{cfg: c}
	for k := 0; k < c.Space.DstPorts(); k++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.fds = append(r.fds, fd)
		if c.RcvBuf > 0 {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, c.RcvBuf); err != nil {
				unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, c.RcvBuf)
			}
		}
		// A receive timeout lets each reader notice the end of the run.
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			r.Close()
			return nil, err
		}
		port := int(c.Space.DstPortBase) + k
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
			r.Close()
			return nil, fmt.Errorf("bind UDP port %d: %w", port, err)
		}
	}
	return r, nil
}

// Close closes the sockets.
func (r *Receiver) Close() error {
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	r.fds = nil
	return nil
}

// Run counts packets until the run goes idle, times out, every flow has
// arrived, or stop is closed.
func (r *Receiver) Run(stop <-chan struct{}) (RecvReport, error) {
	c := r.cfg
	rep := RecvReport{Flows: c.Space.Flows}
	seen := make([]uint32, (c.Space.Flows+31)/32)
	var (
		mu       sync.Mutex
		distinct atomic.Int64
		last     atomic.Int64 // Unix ns of the latest packet
		done     = make(chan struct{})
		doneOnce sync.Once
		wg       sync.WaitGroup
		firstErr error
	)
	finish := func() { doneOnce.Do(func() { close(done) }) }
	snmp0 := udpCounters()
	start := time.Now()
	for k, fd := range r.fds {
		dst := c.Space.DstPortBase + uint16(k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2048)
			for {
				select {
				case <-done:
					return
				default:
				}
				n, from, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
						continue
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					finish()
					return
				}
				now := time.Now().UnixNano()
				last.Store(now)
				sa, _ := from.(*unix.SockaddrInet4)
				idx := -1
				if sa != nil {
					idx = c.Space.Index(uint16(sa.Port), dst)
				}
				flow, ok := FlowOf(buf[:n])
				mu.Lock()
				rep.Packets++
				if rep.FirstNs == 0 {
					rep.FirstNs = now
				}
				if idx < 0 || !ok || int(flow) != idx {
					rep.Foreign++
				} else if seen[idx/32]&(1<<(idx%32)) == 0 {
					seen[idx/32] |= 1 << (idx % 32)
					if distinct.Add(1) == int64(c.Space.Flows) {
						finish()
					}
				}
				mu.Unlock()
			}
		}()
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-stop:
			finish()
			break wait
		case now := <-tick.C:
			l := last.Load()
			if l != 0 && now.Sub(time.Unix(0, l)) >= c.Idle {
				finish()
				break wait
			}
			if c.Timeout > 0 && now.Sub(start) >= c.Timeout {
				rep.TimedOut = true
				finish()
				break wait
			}
		}
	}
	wg.Wait()
	rep.Distinct = int(distinct.Load())
	rep.LastNs = last.Load()
	snmp1 := udpCounters()
	rep.RcvbufErrors = snmp1["RcvbufErrors"] - snmp0["RcvbufErrors"]
	rep.InCsumErrors = snmp1["InCsumErrors"] - snmp0["InCsumErrors"]
	return rep, firstErr
}

// udpCounters reads the Udp: lines of /proc/net/snmp (the namespace's own).
func udpCounters() map[string]uint64 {
	data, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return map[string]uint64{}
	}
	return ParseSNMP(string(data), "Udp")
}

// ParseSNMP returns the counters of one protocol from /proc/net/snmp text
// (a header line of names followed by a line of values).
func ParseSNMP(text, proto string) map[string]uint64 {
	out := map[string]uint64{}
	var names []string
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != proto+":" {
			continue
		}
		if names == nil {
			names = fields[1:]
			continue
		}
		for i, v := range fields[1:] {
			if i < len(names) {
				out[names[i]], _ = strconv.ParseUint(v, 10, 64)
			}
		}
		break
	}
	return out
}
