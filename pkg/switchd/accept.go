package switchd

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

func newReader(r io.Reader) *openflow.Reader { return openflow.NewReader(r) }

// peekConn is a net.Conn whose reads go through a bufio.Reader that may
// hold bytes already peeked at.
type peekConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// serveAccepted serves one accepted connection. On Unix sockets the first
// byte tells the two protocols apart: '{' starts a nagarectl control
// request (JSON), anything else is OpenFlow (its first byte is the
// version). A peer that says nothing for a moment is taken for an OpenFlow
// peer waiting for our HELLO. A TLS listener (the DPU's control network)
// carries both, like the Unix socket; plain TCP listeners speak OpenFlow
// only.
func (s *Switch) serveAccepted(c net.Conn, t Target) {
	br := bufio.NewReader(c)
	pc := &peekConn{Conn: c, r: br}
	if t.TLS {
		tc := c.(*tls.Conn)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		err := tc.Handshake()
		_ = c.SetDeadline(time.Time{})
		if err != nil {
			s.log.Warn("control network: TLS handshake refused", "peer", c.RemoteAddr(), "err", err)
			c.Close()
			return
		}
	}
	if t.Network == "unix" || t.TLS {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		first, err := br.Peek(1)
		_ = c.SetReadDeadline(time.Time{})
		if err == nil && first[0] == '{' {
			s.serveControl(pc)
			return
		}
		if err != nil && !isTimeout(err) {
			c.Close()
			return
		}
	}
	oc := s.newConn(pc, t.Network == "tcp")
	oc.serve(openflow.NewReader(pc))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
