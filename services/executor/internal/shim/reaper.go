package shim

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper is a shim process's only collector of child exits. As a child
// subreaper the shim inherits its tasks' orphaned descendants, and a host
// (host.go) has many tasks at once, so exits are collected for any pid
// and handed to whoever forked that pid; the rest are reaped and dropped.
//
// Ordering: every fork goes through fork, which holds mu from before the
// fork until the new pid is registered. A collection pass holds mu too, so
//   - a child that exits at once is never collected before its pid is
//     known, and
//   - a traced start (traced_linux.go), which waits for its child's first
//     stop itself, never has that stop taken by a pass: a ptrace stop is
//     reported to wait4(-1) like an exit.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

// newReaper starts collecting exits on SIGCHLD. A process has one.
func newReaper() *reaper {
	r := &reaper{waiting: map[int]chan syscall.WaitStatus{}}
	// Signals coalesce, so each one starts a pass that collects every
	// exit there is; one that arrives during a pass is kept in the
	// channel's slot and starts another.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		for range sig {
			r.collect()
		}
	}()
	return r
}

// collect reaps every child that has ended, without blocking.
func (r *reaper) collect() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD, or nothing has ended yet
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
		}
	}
}

// fork runs start, which forks one child and returns its pid, and returns
// a channel that yields the child's wait status once it has exited.
func (r *reaper) fork(start func() (int, error)) (int, <-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[pid] = ch
	// The child may have exited before its pid was registered; its
	// SIGCHLD then started a pass that waits for mu, and collects it.
	return pid, ch, nil
}
