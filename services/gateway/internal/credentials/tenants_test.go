package credentials

import (
	"context"
	"errors"
	"testing"
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
