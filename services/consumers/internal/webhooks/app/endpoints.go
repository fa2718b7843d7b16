package app

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/taskmesh/taskmesh/services/consumers/internal/webhooks/domain"
)

// tenantOnly refuses an operator: endpoints and secrets are a tenant's own.
func tenantOnly(c Caller) error {
	if c.Operator || c.Tenant == "" {
		return fmt.Errorf("%w: a tenant's webhook endpoint is managed with that tenant's API key", ErrForbidden)
	}
	return nil
}

func (a *App) newKey() ([]byte, error) {
	key := make([]byte, domain.SecretBytes)
	if _, err := io.ReadFull(a.cfg.Keys, key); err != nil {
		return nil, fmt.Errorf("webhooks: new signing key: %w", err)
	}
	return key, nil
}

// GetEndpoint returns the caller's default endpoint.
func (a *App) GetEndpoint(ctx context.Context, c Caller) (Endpoint, error) {
	if err := tenantOnly(c); err != nil {
		return Endpoint{}, err
	}
	return a.cfg.Endpoints.Get(ctx, c.Tenant)
}

// SetEndpoint sets (or, with "", removes) the caller's default endpoint.
// The first call creates the tenant's signing secret and returns it, once
// ("" on later calls). A bad URL is a *domain.InvalidError.
func (a *App) SetEndpoint(ctx context.Context, c Caller, url string) (Endpoint, string, error) {
	if err := tenantOnly(c); err != nil {
		return Endpoint{}, "", err
	}
	url = strings.TrimSpace(url)
	if err := domain.CheckURL("url", url); err != nil {
		return Endpoint{}, "", err
	}
	key, err := a.newKey()
	if err != nil {
		return Endpoint{}, "", err
	}
	e, created, err := a.cfg.Endpoints.SetURL(ctx, c.Tenant, url, key, a.cfg.Now().UTC())
	if err != nil || !created {
		return e, "", err
	}
	return e, domain.NewSecret(key), nil
}

// RotateSecret replaces the caller's signing secret and returns the new
// one, once.
func (a *App) RotateSecret(ctx context.Context, c Caller) (Endpoint, string, error) {
	if err := tenantOnly(c); err != nil {
		return Endpoint{}, "", err
	}
	key, err := a.newKey()
	if err != nil {
		return Endpoint{}, "", err
	}
	e, err := a.cfg.Endpoints.SetKey(ctx, c.Tenant, key, a.cfg.Now().UTC())
	if err != nil {
		return e, "", err
	}
	return e, domain.NewSecret(key), nil
}
