package objectstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// Retention (docs/operations.md, "Retention"): objects such as task
// results expire after an age. A store that can do it itself (an S3
// lifecycle rule) implements Expirer; the others are swept by their
// owner, which lists them (Lister) and deletes the old ones.

// Lister lists stored objects.
type Lister interface {
	// List calls fn for every object whose key starts with prefix, in no
	// particular order; an error from fn stops the walk and is returned.
	List(ctx context.Context, prefix string, fn func(Info) error) error
}

// Expirer expires objects by itself.
type Expirer interface {
	// SetExpiry makes the store delete objects under prefix once they are
	// older than age, from now on, without anyone sweeping.
	SetExpiry(ctx context.Context, prefix string, age time.Duration) error
}

// List implements Lister: a walk of the objects directory below prefix.
func (f *FS) List(ctx context.Context, prefix string, fn func(Info) error) error {
	// Walk from the deepest directory the prefix names whole; the rest of
	// the prefix filters keys.
	dir := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = prefix[:i]
		if err := ValidateKey(dir); err != nil {
			return err
		}
	}
	start := objectsDir
	if dir != "" {
		start = objectName(dir)
	}
	err := fs.WalkDir(f.root.FS(), filepath.ToSlash(start), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		key := strings.TrimPrefix(p, objectsDir+"/")
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		file, h, err := f.openObject(key)
		if err != nil {
			return nil // removed meanwhile, or not an object: nothing to expire
		}
		file.Close()
		return fn(h.info(key))
	})
	if err != nil {
		return fmt.Errorf("objectstore: list %q: %w", prefix, err)
	}
	return nil
}

// List implements Lister.
func (s *S3) List(ctx context.Context, prefix string, fn func(Info) error) error {
	for oi := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("objectstore: s3 list %q: %w", prefix, oi.Err)
		}
		if err := fn(s.info(strings.TrimPrefix(oi.Key, s.prefix), oi)); err != nil {
			return err
		}
	}
	return nil
}

// expiryRuleID names the lifecycle rule SetExpiry keeps for a prefix.
func expiryRuleID(prefix string) string {
	return "taskmesh-expire-" + strings.Trim(path.Clean("/"+prefix), "/")
}

// SetExpiry implements Expirer with a bucket lifecycle rule (whole days,
// rounded up: S3's unit; so an age under a day is one day), replacing the rule it set before for the same
// prefix and keeping every other rule of the bucket.
func (s *S3) SetExpiry(ctx context.Context, prefix string, age time.Duration) error {
	days := int((age + 24*time.Hour - 1) / (24 * time.Hour))
	if days < 1 {
		return fmt.Errorf("objectstore: expiry %s is not positive", age)
	}
	cfg, err := s.client.GetBucketLifecycle(ctx, s.bucket)
	if err != nil {
		if minio.ToErrorResponse(err).Code != "NoSuchLifecycleConfiguration" {
			return fmt.Errorf("objectstore: s3 lifecycle of %s: %w", s.bucket, err)
		}
		cfg = lifecycle.NewConfiguration()
	}
	id := expiryRuleID(prefix)
	rules := cfg.Rules[:0]
	for _, r := range cfg.Rules {
		if r.ID != id {
			rules = append(rules, r)
		}
	}
	cfg.Rules = append(rules, lifecycle.Rule{
		ID:         id,
		Status:     "Enabled",
		RuleFilter: lifecycle.Filter{Prefix: s.prefix + prefix},
		Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(days)},
	})
	if err := s.client.SetBucketLifecycle(ctx, s.bucket, cfg); err != nil {
		return fmt.Errorf("objectstore: s3 lifecycle of %s: %w", s.bucket, err)
	}
	return nil
}

// ExpireOld deletes the objects under prefix last written before cutoff
// and returns how many it deleted: the sweep for stores without lifecycle
// rules. Deletions race nothing that matters: an object rewritten after
// the listing is newer, and Delete of a missing object succeeds.
func ExpireOld(ctx context.Context, l Lister, s Store, prefix string, cutoff time.Time) (int, error) {
	var old []string
	if err := l.List(ctx, prefix, func(i Info) error {
		if i.ModTime.Before(cutoff) {
			old = append(old, i.Key)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for n, key := range old {
		if err := s.Delete(ctx, key); err != nil {
			return n, err
		}
	}
	return len(old), nil
}
