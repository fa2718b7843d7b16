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

// adminKeyColumns are read by scanAdminKey, in this order.
const adminKeyColumns = `id, name, prefix, created_at, expires_at, revoked_at, last_used_at`

// bootstrapLock serializes BootstrapAdminKey among gateway replicas starting
// at once (a transaction-level advisory lock; any constant would do).
const bootstrapLock = "taskmesh.gateway.admin_key_bootstrap"

// CreateAdminKey issues an operator key and returns it with its secret, the
// bearer string "tmo_<prefix>_<secret>", shown only here. Errors:
// ErrInvalid.
func (s *Store) CreateAdminKey(ctx context.Context, name string, expiresAt *time.Time) (AdminKey, string, error) {
	var (
		k      AdminKey
		secret string
	)
	err := pg.InTx(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		k, secret, err = s.insertAdminKey(ctx, tx, name, expiresAt)
		return err
	})
	return k, secret, err
}

// BootstrapAdminKey issues an operator key only if none is usable (every
// one is revoked or expired, or there is none): the first start of a
// gateway gets a key to create tenants with, later starts and other
// replicas do not pile up keys. created is false when a usable key exists;
// the secret is then "" (it cannot be recovered). Errors: ErrInvalid.
func (s *Store) BootstrapAdminKey(ctx context.Context, name string) (k AdminKey, secret string, created bool, err error) {
	err = pg.InTx(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Replicas starting together take turns here, so exactly one
		// creates the key.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, bootstrapLock); err != nil {
			return err
		}
		var usable bool
		if err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM admin_keys
				WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1))`, s.now()).Scan(&usable); err != nil {
			return err
		}
		if usable {
			return nil
		}
		k, secret, err = s.insertAdminKey(ctx, tx, name, nil)
		created = err == nil
		return err
	})
	if err != nil {
		return AdminKey{}, "", false, fmt.Errorf("bootstrap admin key: %w", err)
	}
	if created {
		s.log.Info("admin key created", "key_id", k.ID, "prefix", k.Prefix)
	}
	return k, secret, created, nil
}

func (s *Store) insertAdminKey(ctx context.Context, tx pgx.Tx, name string, expiresAt *time.Time) (AdminKey, string, error) {
	now := s.now()
	if utf8.RuneCountInString(name) > 255 {
		return AdminKey{}, "", fmt.Errorf("create admin key: %w", invalidField("name", "longer than 255 characters"))
	}
	if expiresAt != nil && !expiresAt.After(now) {
		return AdminKey{}, "", fmt.Errorf("create admin key: %w", invalidField("expires_at", "%s is not in the future", expiresAt.Format(time.RFC3339)))
	}
	k := AdminKey{ID: newID("adm_"), Name: name, CreatedAt: pgTime(now), ExpiresAt: utc(expiresAt)}
	for range prefixAttempts {
		bearer, prefix, hash := newSecret(adminScheme)
		// A savepoint, so that a prefix collision does not abort the
		// surrounding transaction.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return AdminKey{}, "", fmt.Errorf("create admin key: %w", err)
		}
		_, err = sp.Exec(ctx, `
			INSERT INTO admin_keys (id, name, prefix, secret_hash, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, k.ID, k.Name, prefix, hash, k.CreatedAt, k.ExpiresAt)
		if err != nil {
			_ = sp.Rollback(ctx)
		} else {
			err = sp.Commit(ctx)
		}
		if pg.IsUniqueViolation(err, "admin_keys_prefix_key") {
			continue
		}
		if err != nil {
			return AdminKey{}, "", fmt.Errorf("create admin key: %w", err)
		}
		k.Prefix = prefix
		// Operator keys are issued by the gateway itself (start-up,
		// taskmesh dev): no tenant, no client.
		if err := s.record(ctx, tx, change{aggType: AggregateAdminKey, id: k.ID, by: System,
			event: &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AdminKeyCreated{AdminKeyCreated: &adminv1.AdminKeyCreated{
				KeyId: k.ID, Name: k.Name, Prefix: k.Prefix, ExpiresAt: timestamp(k.ExpiresAt)}}}}); err != nil {
			return AdminKey{}, "", fmt.Errorf("create admin key: %w", err)
		}
		return k, bearer, nil
	}
	return AdminKey{}, "", fmt.Errorf("create admin key: no free prefix after %d attempts", prefixAttempts)
}

// RevokeAdminKey revokes an operator key; it stops working at once.
// Revoking it again keeps the first revocation time and records nothing
// new. Errors: ErrNotFound.
func (s *Store) RevokeAdminKey(ctx context.Context, keyID string) error {
	err := s.inCommand(ctx, AggregateAdminKey, keyID, func(tx pgx.Tx) error {
		var prefix string
		err := tx.QueryRow(ctx, `UPDATE admin_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING prefix`,
			keyID, s.now()).Scan(&prefix)
		if errNoRows(err) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM admin_keys WHERE id = $1)`, keyID).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("revoke admin key %s: %w", keyID, ErrNotFound)
			}
			return nil // revoked before
		}
		if err != nil {
			return err
		}
		return s.record(ctx, tx, change{aggType: AggregateAdminKey, id: keyID, by: System,
			event: &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AdminKeyRevoked{AdminKeyRevoked: &adminv1.AdminKeyRevoked{
				KeyId: keyID, Prefix: prefix}}}})
	})
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("revoke admin key %s: %w", keyID, err)
	}
	s.log.Info("admin key revoked", "key_id", keyID)
	return nil
}

// ListAdminKeys returns every operator key, oldest first.
func (s *Store) ListAdminKeys(ctx context.Context) ([]AdminKey, error) {
	rows, err := s.db.Query(ctx, `SELECT `+adminKeyColumns+` FROM admin_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list admin keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AdminKey, error) {
		var k AdminKey
		err := row.Scan(&k.ID, &k.Name, &k.Prefix, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.LastUsedAt)
		k.CreatedAt = k.CreatedAt.UTC()
		k.ExpiresAt, k.RevokedAt, k.LastUsedAt = utc(k.ExpiresAt), utc(k.RevokedAt), utc(k.LastUsedAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list admin keys: %w", err)
	}
	return keys, nil
}
