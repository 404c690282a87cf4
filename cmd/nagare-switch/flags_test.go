package main

import (
	"strings"
	"testing"
)

// TestFlagErrors: bad sizes are refused with the flag named, before the
// switch touches anything.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bridge", "x", "--mac-table-size", "10", "--mac-per-port", "20"}, "--mac-per-port 20"},
		{[]string{"--bridge", "x", "--mac-table-size", "-1"}, "--mac-table-size -1"},
		{[]string{"--bridge", "x", "--emc-insert-inv-prob", "0"}, "emc-insert-inv-prob"},
		{[]string{"--bridge", "x", "--emc-insert-inv-prob", "often"}, "emc-insert-inv-prob"},
	} {
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}
