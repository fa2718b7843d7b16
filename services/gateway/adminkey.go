package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// AdminKeyFile bootstraps an operator key (tmo_…) for the admin API into
// the file at path, so that a new installation can create its first
// tenants:
//
//   - a file that already holds a key is left alone and its key returned
//     (created false);
//   - otherwise, with onlyIfNone, a key is created only when no usable
//     operator key exists (the first start of the first replica; later
//     starts and other replicas create none, as the secret of the existing
//     key cannot be recovered) and "" is returned when none was created;
//   - without onlyIfNone a key is always created (taskmesh dev, whose one
//     user has lost the file).
//
// A new key's file is written with mode 0600 and never overwritten.
func (g *Gateway) AdminKeyFile(ctx context.Context, path string, onlyIfNone bool) (secret string, created bool, err error) {
	if path == "" {
		return "", false, errors.New("gateway: admin key file: empty path")
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(b)) != "":
		return strings.TrimSpace(string(b)), false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("gateway: admin key file: %w", err)
	}
	if onlyIfNone {
		_, secret, created, err = g.creds.BootstrapAdminKey(ctx, "bootstrap")
	} else {
		_, secret, err = g.creds.CreateAdminKey(ctx, "taskmesh dev", nil)
		created = err == nil
	}
	if err != nil || !created {
		return "", false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("gateway: admin key file: %w", err)
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("gateway: admin key file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("gateway: admin key file: %w", err)
	}
	return secret, true, nil
}
