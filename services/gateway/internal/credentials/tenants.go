package credentials

import (
	"context"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// tenantID matches the tenants.id CHECK constraint; checked here first for a
// clear error instead of a constraint violation.
var tenantID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// tenantColumns are read by scanTenant, in this order.
const tenantColumns = `id, name, tier, rpm_limit, tpm_limit, created_at, updated_at`

// TenantSpec is what AddTenant creates.
type TenantSpec struct {
	ID, Name, Tier string
	Limits         Limits
	// By is who creates it, for the audit log (System when zero).
	By Actor
}

// CreateTenant creates a tenant without limits of its own (its tier's
// defaults apply); see AddTenant.
func (s *Store) CreateTenant(ctx context.Context, id, name, tier string) (Tenant, error) {
	return s.AddTenant(ctx, TenantSpec{ID: id, Name: name, Tier: tier})
}

// AddTenant creates a tenant. The id is 1–63 characters of [a-z0-9_-]
// starting with a letter or digit; the name 1–255 bytes; the tier
// TierPremium or TierStandard; limits within [0, MaxLimit]. Errors:
// ErrInvalid, ErrExists.
func (s *Store) AddTenant(ctx context.Context, spec TenantSpec) (Tenant, error) {
	if err := checkTenant(spec.ID, spec.Name, spec.Tier); err != nil {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", spec.ID, err)
	}
	if err := spec.Limits.check(); err != nil {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", spec.ID, err)
	}
	now := pgTime(s.now())
	t := Tenant{ID: spec.ID, Name: spec.Name, Tier: spec.Tier, Limits: spec.Limits, CreatedAt: now, UpdatedAt: now}
	err := s.inCommand(ctx, AggregateTenant, t.ID, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO tenants (id, name, tier, rpm_limit, tpm_limit, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6)`,
			t.ID, t.Name, t.Tier, t.Limits.RPM, t.Limits.TPM, t.CreatedAt); err != nil {
			return err
		}
		return s.record(ctx, tx, change{aggType: AggregateTenant, id: t.ID, tenant: t.ID, by: spec.By,
			event: &adminv1.AdminEvent{Event: &adminv1.AdminEvent_TenantCreated{TenantCreated: &adminv1.TenantCreated{
				Name: t.Name, Tier: t.Tier, RpmLimit: int32(t.Limits.RPM), TpmLimit: int32(t.Limits.TPM)}}}})
	})
	if pg.IsUniqueViolation(err, "tenants_pkey") {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", spec.ID, ErrExists)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", spec.ID, err)
	}
	return t, nil
}

func checkTenant(id, name, tier string) error {
	switch {
	case !tenantID.MatchString(id):
		return fmt.Errorf("%w: id must be 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", ErrInvalid)
	case name == "" || utf8.RuneCountInString(name) > 255:
		return fmt.Errorf("%w: name must be 1-255 characters", ErrInvalid)
	case tier != TierPremium && tier != TierStandard:
		return fmt.Errorf("%w: tier must be %q or %q, not %q", ErrInvalid, TierPremium, TierStandard, tier)
	}
	return nil
}

// GetTenant returns the tenant. Errors: ErrNotFound.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
	t, err := scanTenant(s.db.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
	if errNoRows(err) {
		return Tenant{}, fmt.Errorf("tenant %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("get tenant %q: %w", id, err)
	}
	return t, nil
}

// ListTenants returns up to limit tenants with ids after after, by id, and
// the id to pass as after for the next page ("" when there is none).
func (s *Store) ListTenants(ctx context.Context, after string, limit int) ([]Tenant, string, error) {
	if limit <= 0 {
		return nil, "", fmt.Errorf("list tenants: %w: limit %d is not positive", ErrInvalid, limit)
	}
	rows, err := s.db.Query(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id > $1 ORDER BY id LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Tenant, error) { return scanTenant(row) })
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	next := ""
	if len(tenants) > limit {
		tenants = tenants[:limit]
		next = tenants[limit-1].ID
	}
	if tenants == nil {
		tenants = []Tenant{}
	}
	return tenants, next, nil
}

// TenantUpdate lists the fields UpdateTenant changes; nil fields keep
// their value.
type TenantUpdate struct {
	Name, Tier *string
	// RPM and TPM set the tenant's own limits; 0 returns to the tier's
	// default.
	RPM, TPM *int
	// By is who makes the change, for the audit log (System when zero).
	By Actor
}

// UpdateTenant changes the given fields and returns the tenant; given none,
// it returns the tenant as it is. Errors: ErrInvalid (nothing is changed
// then), ErrNotFound.
func (s *Store) UpdateTenant(ctx context.Context, id string, u TenantUpdate) (Tenant, error) {
	cur, err := s.GetTenant(ctx, id)
	if err != nil {
		return Tenant{}, fmt.Errorf("update tenant: %w", err)
	}
	// Validate the result as a whole with the same rules as creation.
	next := cur
	if u.Name != nil {
		next.Name = *u.Name
	}
	if u.Tier != nil {
		next.Tier = *u.Tier
	}
	if u.RPM != nil {
		next.Limits.RPM = *u.RPM
	}
	if u.TPM != nil {
		next.Limits.TPM = *u.TPM
	}
	if err := checkTenant(next.ID, next.Name, next.Tier); err != nil {
		return Tenant{}, fmt.Errorf("update tenant %q: %w", id, err)
	}
	if err := next.Limits.check(); err != nil {
		return Tenant{}, fmt.Errorf("update tenant %q: %w", id, err)
	}
	if u.Name == nil && u.Tier == nil && u.RPM == nil && u.TPM == nil {
		// An update naming no field changes nothing: no new updated_at,
		// no admin event or audit entry claiming a change.
		return cur, nil
	}
	// Each column is set from the request or kept (coalesce), so two
	// updates of different fields racing each other both take effect.
	var t Tenant
	err = s.inCommand(ctx, AggregateTenant, id, func(tx pgx.Tx) error {
		var err error
		t, err = scanTenant(tx.QueryRow(ctx, `
			UPDATE tenants SET name = coalesce($2, name), tier = coalesce($3, tier),
				rpm_limit = coalesce($4, rpm_limit), tpm_limit = coalesce($5, tpm_limit), updated_at = $6
			WHERE id = $1
			RETURNING `+tenantColumns, id, u.Name, u.Tier, u.RPM, u.TPM, pgTime(s.now())))
		if err != nil {
			return err
		}
		// The event holds the tenant as the update left it (the row
		// lock orders racing updates, and so their events).
		return s.record(ctx, tx, change{aggType: AggregateTenant, id: t.ID, tenant: t.ID, by: u.By,
			event: &adminv1.AdminEvent{Event: &adminv1.AdminEvent_TenantUpdated{TenantUpdated: &adminv1.TenantUpdated{
				Name: t.Name, Tier: t.Tier, RpmLimit: int32(t.Limits.RPM), TpmLimit: int32(t.Limits.TPM)}}}})
	})
	s.keys.forgetTenant(id) // cached keys and agent tokens carry the tenant's tier
	if errNoRows(err) {
		return Tenant{}, fmt.Errorf("update tenant %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("update tenant %q: %w", id, err)
	}
	return t, nil
}

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.Name, &t.Tier, &t.Limits.RPM, &t.Limits.TPM, &t.CreatedAt, &t.UpdatedAt)
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	return t, err
}

// tenantExists reports whether the tenant exists.
func (s *Store) tenantExists(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, id).Scan(&ok)
	return ok, err
}
