package outbox

import (
	"fmt"
	"strconv"
	"strings"
)

// Position orders events for publishing: the writing transaction's id
// (xid8), then the event's id. Every event of a transaction whose id is
// below the oldest running transaction is visible, so a relay that reads
// only such rows in Position order never skips a row that commits late.
//
// For one aggregate, Position order is version order: version N+1 is
// appended only after version N committed, so its transaction started (and
// got its xid) later.
type Position struct {
	TxID    uint64
	EventID int64
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	if p.TxID != q.TxID {
		return p.TxID < q.TxID
	}
	return p.EventID < q.EventID
}

// Compare returns -1, 0 or +1 as p is before, at or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Less(q):
		return -1
	case q.Less(p):
		return 1
	}
	return 0
}

// String is the header form "txid:eventid".
func (p Position) String() string {
	return strconv.FormatUint(p.TxID, 10) + ":" + strconv.FormatInt(p.EventID, 10)
}

// ParsePosition parses the header form written by String.
func ParsePosition(s string) (Position, error) {
	tx, id, ok := strings.Cut(s, ":")
	if !ok {
		return Position{}, fmt.Errorf("outbox: bad position %q", s)
	}
	t, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("outbox: bad position %q: %w", s, err)
	}
	e, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("outbox: bad position %q: %w", s, err)
	}
	return Position{TxID: t, EventID: e}, nil
}
