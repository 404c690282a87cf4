package ipam

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	subnet24 = netip.MustParsePrefix("10.77.1.0/24")
	gw24     = netip.MustParseAddr("10.77.1.1")
)

func open(t testing.TB, path string, p netip.Prefix, reserved ...netip.Addr) *Store {
	t.Helper()
	s, err := Open(path, p, reserved...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestAllocateOrderReservedAndExhaustion(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "a.db"), netip.MustParsePrefix("10.77.1.0/29"), netip.MustParseAddr("10.77.1.1"))
	if used, total := s.Stats(); used != 0 || total != 5 {
		t.Fatalf("stats %d/%d, want 0/5", used, total)
	}
	var got []string
	for i := 0; i < 5; i++ {
		a, fresh, err := s.Allocate(fmt.Sprintf("c%d", i), "eth0", "ns/p")
		if err != nil || !fresh {
			t.Fatalf("allocate %d: %v %v", i, err, fresh)
		}
		got = append(got, a.IP.String())
	}
	if want := "10.77.1.2 10.77.1.3 10.77.1.4 10.77.1.5 10.77.1.6"; strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s (never .0, .1 (gateway) or .7)", got, want)
	}
	if _, _, err := s.Allocate("c5", "eth0", ""); !errors.Is(err, ErrExhausted) {
		t.Fatalf("sixth allocation in a /29: %v", err)
	}
	// Release one; round-robin continues after the last given, so the
	// freed address comes back only when its turn comes.
	if ok, err := s.Release("c1", "eth0"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s.Release("c1", "eth0"); ok || err != nil {
		t.Fatalf("second release: %v %v", ok, err)
	}
	a, _, err := s.Allocate("c6", "eth0", "")
	if err != nil || a.IP.String() != "10.77.1.3" {
		t.Fatalf("after release: %v %v", a.IP, err)
	}
}

func TestIdempotentAndPersistent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := Open(path, subnet24, gw24)
	if err != nil {
		t.Fatal(err)
	}
	a1, fresh, err := s.Allocate("abc", "eth0", "default/x")
	if err != nil || !fresh {
		t.Fatal(err)
	}
	a2, fresh, err := s.Allocate("abc", "eth0", "default/x")
	if err != nil || fresh || a2.IP != a1.IP {
		t.Fatalf("repeat: %v %v %v", a2.IP, fresh, err)
	}
	if b, _, _ := s.Allocate("abc", "eth1", ""); b.IP == a1.IP {
		t.Fatal("a second interface of the same container got the same address")
	}
	if err := s.SetAttachment("abc", "eth0", []byte(`{"host":"nag1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAttachment("nope", "eth0", []byte(`{}`)); err == nil {
		t.Fatal("attachment for an unknown allocation accepted")
	}
	s.Close()
	// A second process cannot open it while the first has it.
	s, err = Open(path, subnet24, gw24)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, subnet24, gw24); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v", err)
	}
	got, ok, err := s.Get("abc", "eth0")
	if err != nil || !ok || got.IP != a1.IP || got.Pod != "default/x" || string(got.Attachment) != `{"host":"nag1"}` {
		t.Fatalf("after reopen: %+v %v %v", got, ok, err)
	}
	// A new allocation does not reuse anything on disk.
	a3, _, err := s.Allocate("def", "eth0", "")
	if err != nil || a3.IP == a1.IP {
		t.Fatalf("after reopen: %v %v", a3.IP, err)
	}
	gone, err := s.GC(func(a Allocation) bool { return a.ContainerID == "abc" })
	if err != nil || len(gone) != 1 || gone[0].ContainerID != "def" {
		t.Fatalf("GC: %v %v", gone, err)
	}
	if used, _ := s.Stats(); used != 2 {
		t.Fatalf("after GC %d in use, want 2 (abc's two)", used)
	}
	s.Close()
	// Another subnet: refused while allocations fall outside it.
	if _, err := Open(path, netip.MustParsePrefix("10.78.0.0/24")); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("subnet change with allocations outside: %v", err)
	}
	// A wider subnet that contains them is fine.
	s = open(t, path, netip.MustParsePrefix("10.77.0.0/16"))
	if _, ok, _ := s.Get("abc", "eth0"); !ok {
		t.Fatal("allocation lost when the subnet grew")
	}
}

func TestConcurrentAllocations(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "a.db"), subnet24, gw24)
	const n = 50
	ips := make([]netip.Addr, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, _, err := s.Allocate(fmt.Sprintf("c%d", i), "eth0", "")
			ips[i], errs[i] = a.IP, err
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, ip := range ips {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if j, dup := seen[ip]; dup {
			t.Fatalf("c%d and c%d both got %s", i, j, ip)
		}
		seen[ip] = i
	}
}

// TestKillAtAnyPoint kills a process allocating in a loop at random
// instants, several times, and checks after each that every address the
// process reported (it prints only after Allocate returned) is on disk,
// no address is recorded twice, and the database opens.
func TestKillAtAnyPoint(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	reported := map[string]string{} // ip -> container
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAllocator$")
		cmd.Env = append(os.Environ(), "NAGARE_IPAM_CHILD="+path, fmt.Sprintf("NAGARE_IPAM_ROUND=%d", round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Wait for a random number of allocations, then kill mid-loop.
		want := 3 + rand.IntN(15)
		for i := 0; i < want; i++ {
			l, ok := <-lines
			if !ok {
				t.Fatalf("round %d: child ended early", round)
			}
			f := strings.Fields(l)
			if o, dup := reported[f[1]]; dup {
				t.Fatalf("round %d: %s reported for %s and %s", round, f[1], o, f[0])
			}
			reported[f[1]] = f[0]
		}
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for l := range lines { // whatever it managed to report before dying
			f := strings.Fields(l)
			if o, dup := reported[f[1]]; dup {
				t.Fatalf("round %d: %s reported for %s and %s", round, f[1], o, f[0])
			}
			reported[f[1]] = f[0]
		}
		_ = cmd.Wait()
		s, err := Open(path, subnet24, gw24)
		if err != nil {
			t.Fatalf("round %d: reopen after kill: %v", round, err)
		}
		all, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		onDisk := map[string]string{}
		for _, a := range all {
			if o, dup := onDisk[a.IP.String()]; dup {
				t.Fatalf("round %d: %s recorded for %s and %s", round, a.IP, o, a.ContainerID)
			}
			onDisk[a.IP.String()] = a.ContainerID
		}
		for ip, c := range reported {
			if onDisk[ip] != c {
				t.Fatalf("round %d: %s was given to %s but the database says %q", round, ip, c, onDisk[ip])
			}
		}
		// Free some, as DELs would, so the next round reuses addresses.
		for ip, c := range reported {
			if rand.IntN(2) == 0 {
				if _, err := s.Release(c, "eth0"); err != nil {
					t.Fatal(err)
				}
				delete(reported, ip)
			}
		}
		s.Close()
	}
}

// TestHelperAllocator is the child of TestKillAtAnyPoint.
func TestHelperAllocator(t *testing.T) {
	path := os.Getenv("NAGARE_IPAM_CHILD")
	if path == "" {
		t.Skip("helper process")
	}
	s, err := Open(path, subnet24, gw24)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	round := os.Getenv("NAGARE_IPAM_ROUND")
	for i := 0; ; i++ {
		id := fmt.Sprintf("r%s-c%d", round, i)
		a, _, err := s.Allocate(id, "eth0", "")
		if errors.Is(err, ErrExhausted) {
			time.Sleep(time.Second)
			continue
		}
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println(id, a.IP)
	}
}

func BenchmarkAllocateRelease(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "b.db"), subnet24, gw24)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint(i)
		if _, _, err := s.Allocate(id, "eth0", ""); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Release(id, "eth0"); err != nil {
			b.Fatal(err)
		}
	}
}
