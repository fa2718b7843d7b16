package credentials

import (
	"context"
	"fmt"
)

// KeyLimits are the limits stored for one API key and its tenant; zero
// fields are not set (see Limits).
type KeyLimits struct {
	Key, Tenant Limits
}

// LimitsOfKey returns the limits of the API key and of its tenant, for the
// rate limiter. Errors: ErrNotFound.
func (s *Store) LimitsOfKey(ctx context.Context, keyID string) (KeyLimits, error) {
	var l KeyLimits
	err := s.db.QueryRow(ctx, `
		SELECT k.rpm_limit, k.tpm_limit, t.rpm_limit, t.tpm_limit
		FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
		WHERE k.id = $1`, keyID).Scan(&l.Key.RPM, &l.Key.TPM, &l.Tenant.RPM, &l.Tenant.TPM)
	if errNoRows(err) {
		return KeyLimits{}, fmt.Errorf("limits of api key %s: %w", keyID, ErrNotFound)
	}
	if err != nil {
		return KeyLimits{}, fmt.Errorf("limits of api key %s: %w", keyID, err)
	}
	return l, nil
}
