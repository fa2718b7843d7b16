package objectstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

func TestOpenConfig(t *testing.T) {
	ctx := context.Background()
	fsCfg := objectstore.FSConfig{Root: filepath.Join(t.TempDir(), "r"), BaseURL: "http://127.0.0.1:1/objects", Secret: testSecret}

	s, err := objectstore.Open(ctx, objectstore.Config{Kind: "fs", FS: fsCfg})
	if err != nil {
		t.Fatalf("Open fs: %v", err)
	}
	if _, ok := s.(*objectstore.FS); !ok {
		t.Errorf("Open fs returned %T", s)
	}
	mustPut(t, s, "via/config", []byte("x"), "")

	f := newFakeS3(t)
	s, err = objectstore.Open(ctx, objectstore.Config{Kind: "s3", S3: f.config("p/")})
	if err != nil {
		t.Fatalf("Open s3: %v", err)
	}
	if _, ok := s.(*objectstore.S3); !ok {
		t.Errorf("Open s3 returned %T", s)
	}
	mustPut(t, s, "via/config", []byte("x"), "")

	for _, cfg := range []objectstore.Config{
		{Kind: "", FS: fsCfg},
		{Kind: "FS", FS: fsCfg},
		{Kind: "gcs"},
		{Kind: "fs"}, // empty FSConfig
		{Kind: "s3", S3: func() objectstore.S3Config { c := f.config(""); c.Bucket = "missing"; return c }()},
	} {
		s, err := objectstore.Open(ctx, cfg)
		if err == nil {
			t.Errorf("Open(%v) succeeded", cfg)
		}
		if s != nil {
			t.Errorf("Open(%v) returned a non-nil Store %#v with its error", cfg, s)
		}
	}
}

// No way of printing or logging a configuration may reveal a secret.
func TestConfigRedaction(t *testing.T) {
	const fsSecret = "fs-hmac-secret-0123456789abcdefXYZ"
	const s3Secret = "s3-secret-key-do-not-print"
	fsCfg := objectstore.FSConfig{Root: "/var/lib/taskmesh/objects", BaseURL: "http://gw/objects", Secret: []byte(fsSecret), MaxPutBytes: 42}
	s3Cfg := objectstore.S3Config{Endpoint: "minio:9000", Bucket: "results", Region: "us-east-1", Prefix: "task-results/", AccessKey: "AKIAEXAMPLE", SecretKey: s3Secret}
	all := objectstore.Config{Kind: "s3", FS: fsCfg, S3: s3Cfg}
	allFS := objectstore.Config{Kind: "fs", FS: fsCfg, S3: s3Cfg}

	var outputs []string
	for _, v := range []any{fsCfg, &fsCfg, s3Cfg, &s3Cfg, all, &all, allFS} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			outputs = append(outputs, fmt.Sprintf(verb, v))
		}
		for _, h := range []func(*bytes.Buffer) slog.Handler{
			func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
			func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		} {
			var buf bytes.Buffer
			slog.New(h(&buf)).Info("config", "cfg", v)
			outputs = append(outputs, buf.String())
		}
	}
	// Structs holding the configs, printed without any help from them.
	type service struct {
		Name  string
		Store objectstore.Config
	}
	outputs = append(outputs, fmt.Sprintf("%+v", service{"gw", all}), fmt.Sprintf("%+v", []objectstore.S3Config{s3Cfg}))

	for _, out := range outputs {
		if strings.Contains(out, fsSecret) || strings.Contains(out, s3Secret) {
			t.Errorf("secret printed: %s", out)
		}
	}
	// The useful fields are still there.
	if s := s3Cfg.String(); !strings.Contains(s, "minio:9000") || !strings.Contains(s, "results") || !strings.Contains(s, "[REDACTED]") {
		t.Errorf("S3Config.String() = %s", s)
	}
	if s := fsCfg.String(); !strings.Contains(s, "/var/lib/taskmesh/objects") || !strings.Contains(s, "[REDACTED]") {
		t.Errorf("FSConfig.String() = %s", s)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "cfg", all)
	if !strings.Contains(buf.String(), `"bucket":"results"`) {
		t.Errorf("JSON log lacks the bucket: %s", buf.String())
	}
}
