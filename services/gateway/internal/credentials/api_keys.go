package credentials

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
)

// prefixAttempts bounds the retries when a new random prefix collides with
// an existing one (40 random bits: a collision is already rare).
const prefixAttempts = 5

// APIKeySpec is what AddAPIKey creates.
type APIKeySpec struct {
	TenantID, Name string
	// ExpiresAt, if set, must be in the future.
	ExpiresAt *time.Time
	// Limits are the key's own; zero fields leave only the tenant's.
	Limits Limits
	// By is who issues it, for the audit log (System when zero).
	By Actor
}

// CreateAPIKey issues an API key without limits of its own; see AddAPIKey.
func (s *Store) CreateAPIKey(ctx context.Context, tenantID, name string, expiresAt *time.Time) (APIKey, string, error) {
	return s.AddAPIKey(ctx, APIKeySpec{TenantID: tenantID, Name: name, ExpiresAt: expiresAt})
}

// AddAPIKey issues an API key for the tenant and returns it with its
// secret, the bearer string "tm_<prefix>_<secret>", which is shown only
// here. Errors: ErrInvalid, ErrNotFound (no such tenant).
func (s *Store) AddAPIKey(ctx context.Context, spec APIKeySpec) (APIKey, string, error) {
	now := s.now()
	tenantID := spec.TenantID
	if utf8.RuneCountInString(spec.Name) > 255 {
		return APIKey{}, "", fmt.Errorf("create api key for tenant %q: %w", tenantID, invalidField("name", "longer than 255 characters"))
	}
	if spec.ExpiresAt != nil && !spec.ExpiresAt.After(now) {
		return APIKey{}, "", fmt.Errorf("create api key for tenant %q: %w", tenantID, invalidField("expires_at", "%s is not in the future", spec.ExpiresAt.Format(time.RFC3339)))
	}
	if err := spec.Limits.check(); err != nil {
		return APIKey{}, "", fmt.Errorf("create api key for tenant %q: %w", tenantID, err)
	}
	k := APIKey{
		ID:        newID("key_"),
		TenantID:  tenantID,
		Name:      spec.Name,
		Limits:    spec.Limits,
		CreatedAt: pgTime(now),
		ExpiresAt: utc(spec.ExpiresAt),
	}
	for range prefixAttempts {
		bearer, prefix, hash := newSecret(userScheme)
		// INSERT … SELECT: no row is inserted when the tenant does not
		// exist, which tells "no such tenant" apart without parsing a
		// foreign-key violation.
		err := s.inCommand(ctx, AggregateAPIKey, k.ID, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
				INSERT INTO api_keys (id, tenant_id, name, prefix, secret_hash, created_at, expires_at, rpm_limit, tpm_limit)
				SELECT $1, id, $3, $4, $5, $6, $7, $8, $9 FROM tenants WHERE id = $2`,
				k.ID, k.TenantID, k.Name, prefix, hash, k.CreatedAt, k.ExpiresAt, k.Limits.RPM, k.Limits.TPM)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("create api key: tenant %q: %w", tenantID, ErrNotFound)
			}
			return s.record(ctx, tx, change{aggType: AggregateAPIKey, id: k.ID, tenant: k.TenantID, by: spec.By,
				event: &adminv1.AdminEvent{Event: &adminv1.AdminEvent_ApiKeyCreated{ApiKeyCreated: &adminv1.ApiKeyCreated{
					KeyId: k.ID, Name: k.Name, Prefix: prefix, RpmLimit: int32(k.Limits.RPM), TpmLimit: int32(k.Limits.TPM),
					ExpiresAt: timestamp(k.ExpiresAt)}}}})
		})
		if pg.IsUniqueViolation(err, "api_keys_prefix_key") {
			continue
		}
		if errors.Is(err, ErrNotFound) {
			return APIKey{}, "", err
		}
		if err != nil {
			return APIKey{}, "", fmt.Errorf("create api key for tenant %q: %w", tenantID, err)
		}
		k.Prefix = prefix
		return k, bearer, nil
	}
	return APIKey{}, "", fmt.Errorf("create api key for tenant %q: no free prefix after %d attempts", tenantID, prefixAttempts)
}

// RevokeAPIKey revokes one of the tenant's keys on behalf of by; it stops
// working at once on this gateway and within KeyCacheTTL on the others.
// Revoking a revoked key succeeds, keeps the first revocation time and
// records nothing new. Errors: ErrNotFound (no such key for this tenant).
func (s *Store) RevokeAPIKey(ctx context.Context, tenantID, keyID string, by Actor) error {
	err := s.inCommand(ctx, AggregateAPIKey, keyID, func(tx pgx.Tx) error {
		var prefix string
		err := tx.QueryRow(ctx, `
			UPDATE api_keys SET revoked_at = $3
			WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL
			RETURNING prefix`, keyID, tenantID, s.now()).Scan(&prefix)
		if errNoRows(err) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1 AND tenant_id = $2)`,
				keyID, tenantID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("revoke api key %s of tenant %q: %w", keyID, tenantID, ErrNotFound)
			}
			return nil // revoked before
		}
		if err != nil {
			return err
		}
		return s.record(ctx, tx, change{aggType: AggregateAPIKey, id: keyID, tenant: tenantID, by: by,
			event: &adminv1.AdminEvent{Event: &adminv1.AdminEvent_ApiKeyRevoked{ApiKeyRevoked: &adminv1.ApiKeyRevoked{
				KeyId: keyID, Prefix: prefix}}}})
	})
	s.keys.forgetAPIKey(keyID) // whether or not it committed: the cache may only shrink
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", keyID, err)
	}
	return nil
}

// ListAPIKeys returns the tenant's keys, oldest first, revoked and expired
// ones included. Errors: ErrNotFound (no such tenant).
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error) {
	ok, err := s.tenantExists(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list api keys of tenant %q: %w", tenantID, err)
	}
	if !ok {
		return nil, fmt.Errorf("list api keys: tenant %q: %w", tenantID, ErrNotFound)
	}
	rows, err := s.db.Query(ctx, `SELECT `+apiKeyColumns+`
		FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list api keys of tenant %q: %w", tenantID, err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (APIKey, error) { return scanAPIKey(row) })
	if err != nil {
		return nil, fmt.Errorf("list api keys of tenant %q: %w", tenantID, err)
	}
	if keys == nil {
		keys = []APIKey{}
	}
	return keys, nil
}

// GetAPIKey returns one of the tenant's keys. Errors: ErrNotFound (no such
// key for this tenant).
func (s *Store) GetAPIKey(ctx context.Context, tenantID, keyID string) (APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1 AND tenant_id = $2`, keyID, tenantID))
	if errNoRows(err) {
		return APIKey{}, fmt.Errorf("api key %s of tenant %q: %w", keyID, tenantID, ErrNotFound)
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("get api key %s: %w", keyID, err)
	}
	return k, nil
}

// apiKeyColumns are read by scanAPIKey, in this order.
const apiKeyColumns = `id, tenant_id, name, prefix, rpm_limit, tpm_limit, created_at, expires_at, revoked_at, last_used_at`

func scanAPIKey(row pgx.Row) (APIKey, error) {
	var k APIKey
	err := row.Scan(&k.ID, &k.TenantID, &k.Name, &k.Prefix, &k.Limits.RPM, &k.Limits.TPM,
		&k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt)
	k.CreatedAt = k.CreatedAt.UTC()
	k.ExpiresAt, k.RevokedAt, k.LastUsedAt = utc(k.ExpiresAt), utc(k.RevokedAt), utc(k.LastUsedAt)
	return k, err
}

// errNoRows reports pgx.ErrNoRows, possibly wrapped.
func errNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
