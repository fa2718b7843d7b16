package objectstore

import (
	"context"
	"fmt"
	"log/slog"
)

// Config chooses an implementation (for service configuration).
type Config struct {
	Kind string // "fs" or "s3"; anything else, "" included, is an error
	FS   FSConfig
	S3   S3Config
}

// Kinds accepted in Config.Kind.
const (
	KindFS = "fs"
	KindS3 = "s3"
)

// String describes the configuration of the chosen kind without secrets.
func (c Config) String() string {
	switch c.Kind {
	case KindFS:
		return fmt.Sprintf("Config{Kind:%q FS:%s}", c.Kind, c.FS)
	case KindS3:
		return fmt.Sprintf("Config{Kind:%q S3:%s}", c.Kind, c.S3)
	}
	return fmt.Sprintf("Config{Kind:%q}", c.Kind)
}

// GoString keeps %#v from printing secrets.
func (c Config) GoString() string { return "objectstore." + c.String() }

// LogValue makes slog print the configuration without secrets; a JSON
// handler would otherwise marshal the nested secret fields.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("kind", c.Kind)}
	switch c.Kind {
	case KindFS:
		attrs = append(attrs, slog.Any("fs", c.FS))
	case KindS3:
		attrs = append(attrs, slog.Any("s3", c.S3))
	}
	return slog.GroupValue(attrs...)
}

// Open builds the Store that cfg.Kind names. An empty Kind is refused rather
// than defaulted, so a production deployment that forgot its S3 settings
// fails at startup instead of writing results to a local disk.
func Open(ctx context.Context, cfg Config) (Store, error) {
	// Each case returns its own nil on error: returning a nil *FS or *S3
	// as a Store would make a non-nil interface.
	switch cfg.Kind {
	case KindFS:
		s, err := NewFS(cfg.FS)
		if err != nil {
			return nil, err
		}
		return s, nil
	case KindS3:
		s, err := NewS3(ctx, cfg.S3)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("objectstore: Config.Kind %q is not %q or %q", cfg.Kind, KindFS, KindS3)
}
