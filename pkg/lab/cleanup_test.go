package lab

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCleanupRunsLIFOOnceAndJoinsErrors(t *testing.T) {
	var c Cleanup
	var order []string
	add := func(name string, err error) *Undo {
		return c.Add(name, func() error { order = append(order, name); return err })
	}
	add("netns", nil)
	early := add("link", nil)
	add("proc", errors.New("boom"))
	add("ovs", nil)
	if err := early.Run(); err != nil {
		t.Fatal(err)
	}
	if c.Pending() != 3 {
		t.Errorf("pending %d, want 3", c.Pending())
	}
	err := c.RunAll()
	if want := []string{"link", "ovs", "proc", "netns"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if err == nil || !strings.Contains(err.Error(), "proc: boom") {
		t.Errorf("err = %v, want the failed step named", err)
	}
	if c.RunAll() != nil || len(order) != 4 {
		t.Error("second RunAll ran something again")
	}
}
