// Package archive writes expired audit entries to the object store as JSON
// Lines — one object per line with the audit API's field names — gzip
// compressed when the retention says so, and reads them back.
package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if compress {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	enc := json.NewEncoder(w)
	for _, e := range entries {
		details := json.RawMessage(e.Details)
		if !json.Valid(details) {
			details, _ = json.Marshal(e.Details)
		}
		if err := enc.Encode(line{ID: e.ID, Timestamp: e.At, TenantID: e.TenantID, Action: e.Action, Resource: e.Resource,
			ResourceID: e.ResourceID, UserID: e.UserID, MachineID: e.MachineID, Details: details, IP: e.IP}); err != nil {
			return err
		}
	}
	contentType := "application/x-ndjson"
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
		contentType = "application/gzip"
	}
	_, err := a.Objects.Put(ctx, key, &buf, int64(buf.Len()), contentType)
	return err
}

// Read reads an archive back (gzip or not, told by the key's .gz suffix).
func Read(ctx context.Context, objects objectstore.Store, key string) ([]domain.Entry, error) {
	body, _, err := objects.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var r io.Reader = body
	if strings.HasSuffix(key, ".gz") {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("archive %s: %w", key, err)
		}
		defer zr.Close()
		r = zr
	}
	var out []domain.Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("archive %s line %d: %w", key, len(out)+1, err)
		}
		out = append(out, domain.Entry{ID: l.ID, At: l.Timestamp.UTC(), TenantID: l.TenantID, Action: l.Action, Resource: l.Resource,
			ResourceID: l.ResourceID, UserID: l.UserID, MachineID: l.MachineID, Details: string(l.Details), IP: l.IP})
	}
	return out, sc.Err()
}
