// Package archive writes the events of tasks whose history left the
// database to the object store, and reads them back: gzip-compressed JSON
// Lines, one event per line, with the event store's fields and the
// payload (the topic envelope, as the relay published it) in base64
// (docs/operations.md, "Database size").
package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	enc := json.NewEncoder(zw)
	for _, t := range tasks {
		for _, e := range t.Events {
			if err := enc.Encode(line{AggregateType: e.AggregateType, AggregateID: e.AggregateID, Version: e.Version, Type: e.Type,
				EventID: e.EventID, TenantID: e.TenantID, OccurredAt: e.OccurredAt, Payload: e.Payload, Headers: e.Headers}); err != nil {
				return err
			}
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	_, err := a.Objects.Put(ctx, key, &buf, int64(buf.Len()), "application/gzip")
	return err
}

// Read returns the events of one archive in the order they were written
// (each task's in version order), without a repeated (aggregate, version).
func Read(ctx context.Context, objects objectstore.Store, key string) ([]eventstore.Event, error) {
	body, _, err := objects.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	zr, err := gzip.NewReader(body)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	defer zr.Close()
	type id struct {
		aggregate string
		version   int64
	}
	seen := map[id]bool{}
	var out []eventstore.Event
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20) // a payload is at most eventstore.MaxPayload, base64
	for n := 1; sc.Scan(); n++ {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("archive %s line %d: %w", key, n, err)
		}
		if seen[id{l.AggregateID, l.Version}] {
			continue
		}
		seen[id{l.AggregateID, l.Version}] = true
		out = append(out, eventstore.Event{AggregateType: l.AggregateType, AggregateID: l.AggregateID, Version: l.Version, Type: l.Type,
			EventID: l.EventID, TenantID: l.TenantID, OccurredAt: l.OccurredAt.UTC(), Payload: l.Payload, Headers: l.Headers})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	return out, nil
}
