package datapath

import (
	"errors"
	"strings"
	"testing"
)

// TestXSKMemoryCap: AF_XDP sockets together take no more UMEM than the
// cap: a socket past it is refused with ErrXSKMemory and a message that
// says the numbers and the flag, before any kernel object is made (so no
// root here); a released socket's memory is available again. Before: no
// cap, 12 MiB pinned per port and queue without bound.
func TestXSKMemoryCap(t *testing.T) {
	defer SetXSKMemoryMax(DefaultXSKMemoryMax)
	SetXSKMemoryMax(xskUMEM + xskUMEM/2) // room for one socket
	umemBudget.Lock()
	before := umemBudget.used
	umemBudget.Unlock()
	if before != 0 {
		t.Skipf("%d bytes of UMEM in use by other tests", before)
	}
	if err := reserveUMEM(); err != nil {
		t.Fatalf("first socket: %v", err)
	}
	_, err := NewXSK(1, 0)
	if !errors.Is(err, ErrXSKMemory) || !strings.Contains(err.Error(), "--xsk-memory-max") {
		t.Fatalf("second socket: %v, want the cap", err)
	}
	releaseUMEM()
	if err := reserveUMEM(); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	releaseUMEM()
	SetXSKMemoryMax(0)
	for i := 0; i < 100; i++ {
		if err := reserveUMEM(); err != nil {
			t.Fatalf("no cap: %v", err)
		}
	}
	for i := 0; i < 100; i++ {
		releaseUMEM()
	}
}
