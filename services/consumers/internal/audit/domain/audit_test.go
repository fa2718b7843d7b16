package domain

import (
	"errors"
	"testing"
	"time"
)

func TestParseQuery(t *testing.T) {
	tenant := Scope{Tenant: "acme"}
	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	q, err := ParseQuery(QueryInput{Resource: "task", Action: "created", From: "2024-01-01", To: "2024-01-31"}, tenant)
	if err != nil || q.Action != "task.created" || q.ActionVerb != "" || !q.From.Equal(day("2024-01-01")) ||
		!q.Until.Equal(day("2024-02-01")) || q.Tenant != "acme" || q.PageSize != DefaultPageSize {
		t.Fatalf("the document's example = %+v, %v", q, err)
	}
	if q, err := ParseQuery(QueryInput{Action: "task.created"}, tenant); err != nil || q.Action != "task.created" {
		t.Errorf("full action = %+v, %v", q, err)
	}
	if q, err := ParseQuery(QueryInput{Action: "created"}, tenant); err != nil || q.ActionVerb != "created" || q.Action != "" {
		t.Errorf("verb alone = %+v, %v", q, err)
	}
	q, err = ParseQuery(QueryInput{From: "2026-11-22T10:00:00+01:00", To: "2026-11-22T12:00:00Z", TenantID: "other"}, Scope{AllTenants: true})
	if err != nil || !q.From.Equal(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)) ||
		!q.Until.Equal(time.Date(2026, 11, 22, 12, 0, 0, 1000, time.UTC)) || q.Tenant != "other" {
		t.Errorf("RFC 3339 bounds, operator = %+v, %v", q, err)
	}
	for _, c := range []Cursor{
		{At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Version: 7, ID: "ev-1"},
		{At: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), ID: "ev_with_underscores"},
	} {
		if q, err := ParseQuery(QueryInput{PageToken: c.Token(), PageSize: 5}, tenant); err != nil || *q.After != c || q.PageSize != 5 {
			t.Errorf("page token of %+v = %+v, %v", c, q, err)
		}
	}
	for name, in := range map[string]QueryInput{
		"resource":   {Resource: "planet"},
		"action":     {Action: "planet.created"},
		"mismatch":   {Resource: "quota", Action: "task.created"},
		"from":       {From: "2024-13-01"},
		"to":         {To: "yesterday"},
		"order":      {From: "2024-02-01", To: "2024-01-01"},
		"size":       {PageSize: 1001},
		"token":      {PageToken: "x"},
		"no version": {PageToken: "1767323045000000006_ev-1"},
		"tenant_id":  {TenantID: "other"},
	} {
		var ie *InvalidError
		if _, err := ParseQuery(in, tenant); !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want InvalidError", name, err)
		}
	}
}

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "36h": 36 * time.Hour, "1d12h": 36 * time.Hour, "2h30m": 150 * time.Minute} {
		if got, err := ParseRetention(in); err != nil || got != want {
			t.Errorf("ParseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "30m", "d", "-1d", "90days", "x"} {
		if _, err := ParseRetention(in); err == nil {
			t.Errorf("ParseRetention(%q) accepted", in)
		}
	}
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	if got := DefaultRetention.Cutoff(now); !got.Equal(now.AddDate(0, 0, -90)) {
		t.Errorf("cutoff = %v", got)
	}
}
