package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestVideoFlags(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("sk-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) *videoFlags {
		var v videoFlags
		f := pflag.NewFlagSet("test", pflag.ContinueOnError)
		v.add(f, true)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &v
	}
	cfg, err := parse("--video-rewriter-base-url=http://llm/v1", "--video-rewriter-model=m",
		"--video-rewriter-api-key-file="+keyFile, "--video-time-zone=Asia/Shanghai").config()
	if err != nil || cfg.RewriterAPIKey != "sk-test" || cfg.Location.String() != "Asia/Shanghai" || cfg.RewriterModel != "m" {
		t.Fatalf("config = %+v, %v", cfg, err)
	}
	if cfg, err := parse().config(); err != nil || cfg.Location != nil {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	if cfg, err := parse("--video=false").config(); cfg != nil || err != nil {
		t.Errorf("switched off: %+v, %v", cfg, err)
	}
	for flag, arg := range map[string]string{"video-time-zone": "Mars/Olympus", "video-rewriter-api-key-file": "/no/such/file"} {
		if _, err := parse("--" + flag + "=" + arg).config(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("--%s=%s: %v", flag, arg, err)
		}
	}
}
