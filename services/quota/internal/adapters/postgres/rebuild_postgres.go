package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// States folds events into aggregate states, for rebuilding the inline
// projection from the event store.
type States struct {
	states map[string]any
	order  []string
}

// NewStates returns an empty fold.
func NewStates() *States { return &States{states: map[string]any{}} }

// Apply folds one event (its Version must be set).
func (s *States) Apply(e capacity.Event) error {
	cur, ok := s.states[e.Aggregate]
	if !ok {
		z, err := capacity.ZeroState(e.Aggregate)
		if err != nil {
			return err
		}
		cur = z
		s.order = append(s.order, e.Aggregate)
	}
	s.states[e.Aggregate] = capacity.Fold(cur, e)
	return nil
}

// Order lists the aggregates in the order first seen.
func (s *States) Order() []string { return s.order }

// Get returns an aggregate's state.
func (s *States) Get(aggregate string) any { return s.states[aggregate] }

// Store writes every state's row.
func (s *States) Store(ctx context.Context, tx pgx.Tx) error {
	for _, agg := range s.order {
		if err := upsert(ctx, tx, s.states[agg]); err != nil {
			return err
		}
	}
	return nil
}

// LiveDoc returns the aggregate's live row document (nil when none).
func LiveDoc(ctx context.Context, tx pgx.Tx, aggregate string) ([]byte, error) {
	table, key := locate(aggregate)
	var doc []byte
	err := tx.QueryRow(ctx, `SELECT doc FROM `+table+` WHERE `+key.where, key.args...).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return doc, err
}
