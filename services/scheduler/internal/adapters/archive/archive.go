// Package archive writes the events of tasks whose history left the
// database to the object store, and reads them back: gzip-compressed JSON
// Lines, one event per line, with the event store's fields and the
// payload (the topic envelope, as the relay published it) in base64
// (docs/operations.md, "Database size").
package archive

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// line is one archived event.
type line struct {
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	Version       int64             `json:"version"`
	Type          string            `json:"event_type"`
	EventID       string            `json:"event_id"`
	TenantID      string            `json:"tenant_id"`
	OccurredAt    time.Time         `json:"occurred_at"`
	Payload       []byte            `json:"payload"`
	Headers       map[string]string `json:"headers,omitempty"`
}

// Archive is app.HistoryArchive over an object store.
type Archive struct{ Objects objectstore.Store }

var _ app.HistoryArchive = Archive{}

// Put implements app.HistoryArchive.
func (a Archive) Put(ctx context.Context, key string, tasks []app.ArchivedTask) error {
	var lines []line
	for _, t := range tasks {
		for _, e := range t.Events {
			lines = append(lines, line{AggregateType: e.AggregateType, AggregateID: e.AggregateID, Version: e.Version, Type: e.Type,
				EventID: e.EventID, TenantID: e.TenantID, OccurredAt: e.OccurredAt, Payload: e.Payload, Headers: e.Headers})
		}
	}
	return objectstore.PutJSONLines(ctx, a.Objects, key, lines, true)
}

// Read returns the events of one archive in the order they were written
// (each task's in version order), without a repeated (aggregate, version).
func Read(ctx context.Context, objects objectstore.Store, key string) ([]eventstore.Event, error) {
	type id struct {
		aggregate string
		version   int64
	}
	seen := map[id]bool{}
	var out []eventstore.Event
	err := objectstore.ReadJSONLines(ctx, objects, key, func(l line) error {
		if seen[id{l.AggregateID, l.Version}] {
			return nil
		}
		seen[id{l.AggregateID, l.Version}] = true
		out = append(out, eventstore.Event{AggregateType: l.AggregateType, AggregateID: l.AggregateID, Version: l.Version, Type: l.Type,
			EventID: l.EventID, TenantID: l.TenantID, OccurredAt: l.OccurredAt.UTC(), Payload: l.Payload, Headers: l.Headers})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive %w", err)
	}
	return out, nil
}
