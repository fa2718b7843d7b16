// Package closer releases what a constructor opened, in the reverse order
// of opening: all of it when the constructor fails part way, or later, when
// the value it built is closed. A constructor pushes each resource's
// release as soon as the resource exists and defers one call that closes
// the stack on error, instead of repeating a cleanup chain after every
// step that can fail.
//
//	var undo closer.Stack
//	defer func() {
//		if err != nil {
//			undo.Close()
//		}
//	}()
//	pool, err := pg.Open(ctx, cfg)
//	if err != nil {
//		return nil, err
//	}
//	undo.PushFunc(pool.Close)
package closer

import (
	"errors"
	"sync"
)

// Stack is a last-in, first-out list of release functions. The zero value
// is an empty stack; it is safe for concurrent use.
type Stack struct {
	mu  sync.Mutex
	fns []func() error
}

// Push adds release, to be called before everything pushed earlier.
func (s *Stack) Push(release func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fns = append(s.fns, release)
}

// PushFunc adds a release that cannot fail (e.g. pgxpool.Pool.Close).
func (s *Stack) PushFunc(release func()) {
	s.Push(func() error { release(); return nil })
}

// Close calls every release function once, the last pushed first, and
// returns their errors joined. A release that fails does not keep the
// earlier ones from running: each resource is independent of the ones
// opened after it. Calling Close again releases only what was pushed since.
func (s *Stack) Close() error {
	s.mu.Lock()
	fns := s.fns
	s.fns = nil
	s.mu.Unlock()
	var errs []error
	for i := len(fns) - 1; i >= 0; i-- {
		if err := fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
