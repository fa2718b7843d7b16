package credentials

import (
	"context"
	"fmt"
	"regexp"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// tenantID matches the tenants.id CHECK constraint; checked here first for a
// clear error instead of a constraint violation.
var tenantID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CreateTenant creates a tenant. id is 1–63 characters of [a-z0-9_-]
// starting with a letter or digit; tier is TierPremium or TierStandard.
// Errors: ErrInvalid, ErrExists.
func (s *Store) CreateTenant(ctx context.Context, id, name, tier string) (Tenant, error) {
	switch {
	case !tenantID.MatchString(id):
		return Tenant{}, fmt.Errorf("create tenant %q: %w: id must be 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", id, ErrInvalid)
	case name == "" || len(name) > 255:
		return Tenant{}, fmt.Errorf("create tenant %q: %w: name must be 1-255 bytes", id, ErrInvalid)
	case tier != TierPremium && tier != TierStandard:
		return Tenant{}, fmt.Errorf("create tenant %q: %w: tier must be %q or %q, not %q", id, ErrInvalid, TierPremium, TierStandard, tier)
	}
	t := Tenant{ID: id, Name: name, Tier: tier, CreatedAt: pgTime(s.now())}
	_, err := s.db.Exec(ctx, `INSERT INTO tenants (id, name, tier, created_at) VALUES ($1, $2, $3, $4)`,
		t.ID, t.Name, t.Tier, t.CreatedAt)
	if pg.IsUniqueViolation(err, "tenants_pkey") {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", id, ErrExists)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", id, err)
	}
	return t, nil
}

// tenantExists reports whether the tenant exists.
func (s *Store) tenantExists(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, id).Scan(&ok)
	return ok, err
}
