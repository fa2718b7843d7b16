package credentials

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCreateTenant(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		id, name, tier string
		wantErr        error
	}{
		{id: "acme", name: "Acme", tier: TierPremium},
		{id: "globex-2_x", name: "Globex", tier: TierStandard},
		{id: "acme", name: "Again", tier: TierPremium, wantErr: ErrExists},
		{id: "", name: "x", tier: TierStandard, wantErr: ErrInvalid},
		{id: "Upper", name: "x", tier: TierStandard, wantErr: ErrInvalid},
		{id: "-lead", name: "x", tier: TierStandard, wantErr: ErrInvalid},
		{id: "ok", name: "", tier: TierStandard, wantErr: ErrInvalid},
		{id: "ok", name: "x", tier: "gold", wantErr: ErrInvalid},
		{id: "ok", name: "x", tier: "", wantErr: ErrInvalid},
		// Names are limited in characters, not bytes: 255 three-byte
		// characters are a name, 256 are not.
		{id: "cjk", name: strings.Repeat("租", 255), tier: TierStandard},
		{id: "cjk-2", name: strings.Repeat("租", 256), tier: TierStandard, wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		got, err := f.store.CreateTenant(ctx, tt.id, tt.name, tt.tier)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("CreateTenant(%q, %q, %q) error = %v, want %v", tt.id, tt.name, tt.tier, err, tt.wantErr)
			continue
		}
		if err == nil && (got.ID != tt.id || got.Name != tt.name || got.Tier != tt.tier || !got.CreatedAt.Equal(f.clock.Now())) {
			t.Errorf("CreateTenant(%q) = %+v", tt.id, got)
		}
	}
}

func TestAddTenantWithLimits(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	got, err := f.store.AddTenant(ctx, TenantSpec{ID: "acme", Name: "Acme", Tier: TierPremium, Limits: Limits{RPM: 120, TPM: 5000}})
	if err != nil {
		t.Fatal(err)
	}
	want := Tenant{ID: "acme", Name: "Acme", Tier: TierPremium, Limits: Limits{RPM: 120, TPM: 5000}, CreatedAt: f.clock.Now(), UpdatedAt: f.clock.Now()}
	if got != want {
		t.Errorf("AddTenant = %+v, want %+v", got, want)
	}
	if read, err := f.store.GetTenant(ctx, "acme"); err != nil || read != want {
		t.Errorf("GetTenant = %+v, %v; want %+v", read, err, want)
	}
	for _, l := range []Limits{{RPM: -1}, {TPM: -1}, {RPM: MaxLimit + 1}, {TPM: MaxLimit + 1}} {
		if _, err := f.store.AddTenant(ctx, TenantSpec{ID: "bad", Name: "x", Tier: TierStandard, Limits: l}); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddTenant(limits %+v) error = %v, want ErrInvalid", l, err)
		}
	}
	if _, err := f.store.GetTenant(ctx, "bad"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused tenant was stored: GetTenant error = %v", err)
	}
}

func TestListTenantsPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, id := range []string{"delta", "alpha", "charlie", "bravo", "echo"} {
		f.tenant(t, id, TierStandard)
	}
	var ids []string
	after := ""
	pages := 0
	for {
		page, next, err := f.store.ListTenants(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, tn := range page {
			ids = append(ids, tn.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	if got, want := strings.Join(ids, ","), "alpha,bravo,charlie,delta,echo"; got != want || pages != 3 {
		t.Errorf("pages %d, ids %s; want 3 pages of %s", pages, got, want)
	}
	// A page that ends exactly at the last tenant says there is no more.
	if page, next, err := f.store.ListTenants(ctx, "", 5); err != nil || len(page) != 5 || next != "" {
		t.Errorf("ListTenants(limit 5) = %d tenants, next %q, %v", len(page), next, err)
	}
	if _, _, err := f.store.ListTenants(ctx, "", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("ListTenants(limit 0) error = %v, want ErrInvalid", err)
	}
}

func TestUpdateTenant(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	created := f.tenant(t, "acme", TierStandard)
	f.clock.Advance(time.Hour)
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }

	got, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{Tier: str(TierPremium), RPM: num(30)})
	if err != nil {
		t.Fatal(err)
	}
	want := Tenant{ID: "acme", Name: created.Name, Tier: TierPremium, Limits: Limits{RPM: 30}, CreatedAt: created.CreatedAt, UpdatedAt: f.clock.Now()}
	if got != want {
		t.Errorf("UpdateTenant = %+v, want %+v", got, want)
	}
	// Absent fields keep their value; 0 returns a limit to the tier default.
	got, err = f.store.UpdateTenant(ctx, "acme", TenantUpdate{Name: str("Acme Corp"), RPM: num(0), TPM: num(900)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "Acme Corp" || got.Tier != TierPremium || got.Limits != (Limits{TPM: 900}) {
		t.Errorf("second update = %+v", got)
	}
	// An update naming no field changes nothing, updated_at included, and
	// records no event.
	var events int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour)
	if same, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{}); err != nil || same != got {
		t.Errorf("empty update = %+v, %v; want %+v unchanged", same, err, got)
	}
	var after int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&after); err != nil || after != events {
		t.Errorf("empty update recorded %d events (%v)", after-events, err)
	}

	tests := []struct {
		name    string
		id      string
		u       TenantUpdate
		wantErr error
	}{
		{"unknown tenant", "nobody", TenantUpdate{Name: str("x")}, ErrNotFound},
		{"empty name", "acme", TenantUpdate{Name: str("")}, ErrInvalid},
		{"unknown tier", "acme", TenantUpdate{Tier: str("gold")}, ErrInvalid},
		{"negative rpm", "acme", TenantUpdate{RPM: num(-5)}, ErrInvalid},
		{"tpm too large", "acme", TenantUpdate{TPM: num(MaxLimit + 1)}, ErrInvalid},
		// A valid field beside an invalid one is not applied either.
		{"partly invalid", "acme", TenantUpdate{Name: str("Renamed"), Tier: str("gold")}, ErrInvalid},
	}
	for _, tt := range tests {
		if _, err := f.store.UpdateTenant(ctx, tt.id, tt.u); !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: error = %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	if after, _ := f.store.GetTenant(ctx, "acme"); after != got {
		t.Errorf("refused updates changed the tenant: %+v, want %+v", after, got)
	}
}

// Concurrent updates of one tenant all take effect, each recorded as the
// next version of its aggregate. An UPDATE takes its transaction id before
// it waits for the row; were the lock of the aggregate taken only after it,
// a waiting update would append after a newer transaction's event, which
// the event store refuses (decision 0122).
func TestConcurrentTenantUpdatesAllLand(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.tenant(t, "acme", TierStandard)
	const n = 40
	concurrently(t, n, func(i int) error {
		rpm := i + 1
		_, err := f.store.UpdateTenant(ctx, "acme", TenantUpdate{RPM: &rpm})
		return err
	})
	f.wantVersions(t, "tenant/acme", 1+n)
}
