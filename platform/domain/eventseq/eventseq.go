// Package eventseq is the rule every read model applies to an aggregate's
// events before folding one (docs/events.md, the envelope's version): an
// aggregate's events are numbered from 1 with none left out, all are of
// its tenant, and only the first creates it. The relays publish nothing
// else, so an event out of that sequence did not come from them; folded,
// a gap or a version far ahead would make every later event of the
// aggregate look applied, and the read model would stop following it for
// good. A read model refuses such an event (its runner parks the record
// as a dead letter) and goes on.
//
// It is pure, and sits under platform/domain so that the scheduler's
// task_views and the consumers' read models judge by the one rule.
package eventseq

import "fmt"

// Event is what the rule reads of an event.
type Event struct {
	Version int64
	Tenant  string
	// Creates: the event creates its aggregate (a task's submission),
	// which only its first event, version 1, does.
	Creates bool
}

// Next judges e against a read model that holds stored events of the
// aggregate, of storedTenant (stored 0: none; which first events it takes
// is the read model's to decide). It reports whether e is the next event
// to fold; false with no error is an event folded before (a redelivery or
// a replay), to skip. An error says why e cannot be the aggregate's.
func Next(stored int64, storedTenant string, e Event) (bool, error) {
	switch {
	case e.Version < 1:
		return false, fmt.Errorf("version %d is refused: versions start at 1", e.Version)
	case e.Version <= stored:
		return false, nil
	case stored > 0 && e.Version > stored+1:
		return false, fmt.Errorf("version %d does not follow version %d: the events between are missing", e.Version, stored)
	case stored > 0 && e.Tenant != storedTenant:
		return false, fmt.Errorf("version %d is of tenant %q, the aggregate of tenant %q", e.Version, e.Tenant, storedTenant)
	case e.Creates && e.Version != 1:
		return false, fmt.Errorf("version %d creates the aggregate, which only its first event, version 1, does", e.Version)
	}
	return true, nil
}
