package lab

import (
	"errors"
	"fmt"
	"sync"
)

// Cleanup is a registry of undo actions run last-in first-out: namespaces
// are registered when created, processes when started, so undoing in reverse
// kills the processes before their namespaces are deleted. It is safe for
// concurrent use; each action runs at most once.
type Cleanup struct {
	mu    sync.Mutex
	steps []*Undo
}

// Undo is one registered cleanup action.
type Undo struct {
	desc string
	fn   func() error
	mu   sync.Mutex
	done bool
	err  error
}

// Add registers fn, described by desc for error messages, and returns a
// handle that can run it early.
func (c *Cleanup) Add(desc string, fn func() error) *Undo {
	u := &Undo{desc: desc, fn: fn}
	c.mu.Lock()
	c.steps = append(c.steps, u)
	c.mu.Unlock()
	return u
}

// Run runs the action now if it has not run yet and returns its error.
func (u *Undo) Run() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.done {
		u.done = true
		if err := u.fn(); err != nil {
			u.err = fmt.Errorf("%s: %w", u.desc, err)
		}
	}
	return u.err
}

// Pending returns how many actions have not run yet.
func (c *Cleanup) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, u := range c.steps {
		u.mu.Lock()
		if !u.done {
			n++
		}
		u.mu.Unlock()
	}
	return n
}

// RunAll runs every action not yet run, newest first, and empties the
// registry. It continues past errors and returns them joined.
func (c *Cleanup) RunAll() error {
	c.mu.Lock()
	steps := c.steps
	c.steps = nil
	c.mu.Unlock()
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		if err := steps[i].Run(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
