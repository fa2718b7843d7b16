// Package archive writes expired audit entries to the object store as JSON
// Lines — one object per line with the audit API's field names — gzip
// compressed when the retention says so, and reads them back.
package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

// line is one archived entry.
type line struct {
	ID         string          `json:"id"`
	Timestamp  time.Time       `json:"timestamp"`
	TenantID   string          `json:"tenant_id"`
	Action     string          `json:"action"`
	Resource   string          `json:"resource"`
	ResourceID string          `json:"resource_id"`
	UserID     string          `json:"user_id"`
	MachineID  string          `json:"machine_id"`
	Details    json.RawMessage `json:"details"`
	IP         string          `json:"ip"`
}

// Archive puts archives into Objects.
type Archive struct{ Objects objectstore.Store }

// Put implements app.Archive.
func (a Archive) Put(ctx context.Context, key string, entries []domain.Entry, compress bool) error {
	lines := make([]line, 0, len(entries))
	for _, e := range entries {
		details := json.RawMessage(e.Details)
		if !json.Valid(details) {
			details, _ = json.Marshal(e.Details)
		}
		lines = append(lines, line{ID: e.ID, Timestamp: e.At, TenantID: e.TenantID, Action: e.Action, Resource: e.Resource,
			ResourceID: e.ResourceID, UserID: e.UserID, MachineID: e.MachineID, Details: details, IP: e.IP})
	}
	return objectstore.PutJSONLines(ctx, a.Objects, key, lines, compress)
}

// Read reads an archive back, gzip-compressed or not.
func Read(ctx context.Context, objects objectstore.Store, key string) ([]domain.Entry, error) {
	var out []domain.Entry
	err := objectstore.ReadJSONLines(ctx, objects, key, func(l line) error {
		out = append(out, domain.Entry{ID: l.ID, At: l.Timestamp.UTC(), TenantID: l.TenantID, Action: l.Action, Resource: l.Resource,
			ResourceID: l.ResourceID, UserID: l.UserID, MachineID: l.MachineID, Details: string(l.Details), IP: l.IP})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive %w", err)
	}
	return out, nil
}
