package ctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// writeConfig writes a config file with the given mode.
func writeConfig(t *testing.T, dir, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, "taskmesh", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode is filtered by the umask; set it exactly.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSettingsPrecedence(t *testing.T) {
	xdg := t.TempDir()
	cfgPath := writeConfig(t, xdg, "server: cfg.example:1\napi_key: key-from-config\n", 0o600)
	other := writeConfig(t, t.TempDir(), "server: other.example:2\napi_key: key-from-other\n", 0o600)

	tests := []struct {
		name       string
		flags      connFlags
		env        map[string]string
		wantServer string
		wantKey    string
		wantConfig string
	}{
		{"config file only", connFlags{}, map[string]string{"XDG_CONFIG_HOME": xdg},
			"cfg.example:1", "key-from-config", cfgPath},
		{"environment beats config", connFlags{}, map[string]string{"XDG_CONFIG_HOME": xdg, EnvServer: "env.example:3", EnvAPIKey: "key-from-env"},
			"env.example:3", "key-from-env", cfgPath},
		{"flags beat environment", connFlags{server: "flag.example:4", apiKey: "key-from-flag"},
			map[string]string{"XDG_CONFIG_HOME": xdg, EnvServer: "env.example:3", EnvAPIKey: "key-from-env"},
			"flag.example:4", "key-from-flag", cfgPath},
		{"each setting on its own", connFlags{server: "flag.example:4"}, map[string]string{"XDG_CONFIG_HOME": xdg, EnvAPIKey: "key-from-env"},
			"flag.example:4", "key-from-env", cfgPath},
		{"--config replaces the default file", connFlags{config: other}, map[string]string{"XDG_CONFIG_HOME": xdg},
			"other.example:2", "key-from-other", other},
		{"default server", connFlags{apiKey: "k"}, map[string]string{"XDG_CONFIG_HOME": t.TempDir()},
			DefaultServer, "k", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := environment{getenv: func(k string) string { return tt.env[k] },
				homeDir: func() (string, error) { return "", errors.New("unused") }}
			s, err := resolveSettings(tt.flags, env)
			if err != nil {
				t.Fatal(err)
			}
			if s.Server != tt.wantServer || s.APIKey != tt.wantKey || s.ConfigPath != tt.wantConfig {
				t.Errorf("got server %q key %q config %q, want %q %q %q", s.Server, s.APIKey, s.ConfigPath,
					tt.wantServer, tt.wantKey, tt.wantConfig)
			}
		})
	}
}

// Without XDG_CONFIG_HOME the file is ~/.config/taskmesh/config.yaml.
func TestSettingsHomeConfig(t *testing.T) {
	home := t.TempDir()
	writeConfig(t, filepath.Join(home, ".config"), "api_key: home-key\n", 0o600)
	env := environment{getenv: func(string) string { return "" }, homeDir: func() (string, error) { return home, nil }}
	s, err := resolveSettings(connFlags{}, env)
	if err != nil {
		t.Fatal(err)
	}
	if s.APIKey != "home-key" || s.ConfigPath != filepath.Join(home, ".config", "taskmesh", "config.yaml") {
		t.Errorf("settings = %+v", s)
	}
}

// The tenants and keys commands send the operator key, from the flag, the
// environment or the config file, never the API key.
func TestSettingsAdminKey(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, "api_key: user-key\nadmin_key: file-admin\n", 0o600)
	tests := []struct {
		name  string
		flags connFlags
		env   map[string]string
		want  string
	}{
		{"config file", connFlags{config: path, admin: true}, nil, "file-admin"},
		{"environment over file", connFlags{config: path, admin: true}, map[string]string{EnvAdminKey: "env-admin"}, "env-admin"},
		{"flag over environment", connFlags{config: path, admin: true, adminKey: "flag-admin"}, map[string]string{EnvAdminKey: "env-admin"}, "flag-admin"},
		{"task commands keep the API key", connFlags{config: path}, map[string]string{EnvAdminKey: "env-admin"}, "user-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := environment{getenv: func(k string) string { return tt.env[k] },
				homeDir: func() (string, error) { return "", errors.New("unused") }}
			s, err := resolveSettings(tt.flags, env)
			if err != nil || s.APIKey != tt.want {
				t.Errorf("key %q, %v; want %q", s.APIKey, err, tt.want)
			}
		})
	}
}

func TestConfigFileChecks(t *testing.T) {
	const secret = "tm_abcdef_supersecretvalue"
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		wantErr string // substring; "" for success
	}{
		{"private key file", "api_key: " + secret + "\n", 0o600, ""},
		{"key readable by others", "api_key: " + secret + "\n", 0o644, "is accessible by group or others (mode 0644); fix it with: chmod 600 "},
		{"key readable by group", "api_key: " + secret + "\n", 0o640, "chmod 600"},
		{"key writable by group", "api_key: " + secret + "\n", 0o620, "chmod 600"},
		{"no key: any mode", "server: s.example:1\n", 0o644, "no API key"},
		{"unknown key", "server: s\napi-key: " + secret + "\n", 0o600, `:2: unknown key "api-key" (want server, api_key or admin_key)`},
		{"operator key readable by others", "admin_key: " + secret + "\n", 0o644, "chmod 600"},
		{"key of the wrong type", "api_key: [" + secret + "]\n", 0o600, ":1: api_key must be a string"},
		{"not a mapping", "- " + secret + "\n", 0o600, "want a mapping with server: and api_key:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, t.TempDir(), tt.content, tt.mode)
			env := environment{getenv: func(string) string { return "" }, homeDir: func() (string, error) { return "", errors.New("none") }}
			_, err := resolveSettings(connFlags{config: path}, env)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
	env := environment{getenv: func(string) string { return "" }, homeDir: func() (string, error) { return "", errors.New("none") }}
	if _, err := resolveSettings(connFlags{config: filepath.Join(t.TempDir(), "missing.yaml")}, env); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing --config: %v", err)
	}
}

// Mistakes the command line can fix exit 2; a bad config file exits 1.
func TestSettingsErrorsExitCodes(t *testing.T) {
	dir := t.TempDir()
	leaky := writeConfig(t, dir, "api_key: k\n", 0o644)
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"tasks", "get", "x"}, ExitUsage},                                          // no key
		{[]string{"tasks", "get", "x", "--api-key", "k", "--tls", "--insecure"}, ExitUsage}, // contradiction
		{[]string{"tasks", "get", "x", "--api-key", "k", "--server", "ftp://h"}, ExitUsage},
		{[]string{"tasks", "get", "x", "--config", leaky}, ExitError},
		{[]string{"tasks", "get", "x", "--api-key", "k", "-o", "xml"}, ExitUsage},
		{[]string{"tasks", "list", "--api-key", "k", "--limit", "501"}, ExitUsage},
		{[]string{"tasks", "list", "--api-key", "k", "--since", "yesterday"}, ExitUsage},
		{[]string{"tasks", "list", "--api-key", "k", "--status", "done"}, ExitUsage},
		{[]string{"tasks", "list", "--api-key", "k", "--priority", "11"}, ExitUsage},
		{[]string{"tasks", "submit", "--api-key", "k"}, ExitUsage},
		{[]string{"tasks", "get"}, ExitUsage},
		{[]string{"tasks", "get", "a", "b"}, ExitUsage},
		{[]string{"tasks", "frobnicate"}, ExitUsage},
		{[]string{"tasks", "get", "x", "--no-such-flag"}, ExitUsage},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := testApp().run(t, "", tt.args...)
			if r.code != tt.want {
				t.Errorf("exit %d, want %d; stderr %q", r.code, tt.want, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("stderr = %q, want an error line", r.stderr)
			}
		})
	}
}

func TestTransport(t *testing.T) {
	tests := []struct {
		server        string
		tls, insecure bool
		wantTarget    string
		wantTLS       bool
		wantErr       string
	}{
		{server: "127.0.0.1:9090", wantTarget: "127.0.0.1:9090"},
		{server: "127.9.9.9:1", wantTarget: "127.9.9.9:1"},
		{server: "localhost", wantTarget: "localhost:9090"},
		{server: "[::1]:7000", wantTarget: "[::1]:7000"},
		{server: "::1", wantTarget: "[::1]:9090"},
		{server: "[::ffff:127.0.0.1]:1", wantTarget: "[::ffff:127.0.0.1]:1"},
		{server: "gw.example.com:443", wantTarget: "gw.example.com:443", wantTLS: true},
		{server: "gw.example.com", wantTarget: "gw.example.com:9090", wantTLS: true},
		{server: "10.0.0.5:9090", wantTarget: "10.0.0.5:9090", wantTLS: true},
		{server: "10.0.0.5:9090", insecure: true, wantTarget: "10.0.0.5:9090"},
		{server: "127.0.0.1:9090", tls: true, wantTarget: "127.0.0.1:9090", wantTLS: true},
		{server: "https://gw.example.com", wantTarget: "gw.example.com:9090", wantTLS: true},
		{server: "https://127.0.0.1:9090/", wantTarget: "127.0.0.1:9090", wantTLS: true},
		{server: "http://localhost:9090", wantTarget: "localhost:9090"},
		{server: "http://gw.example.com:80", insecure: true, wantTarget: "gw.example.com:80"},
		{server: "unix:///run/taskmesh.sock", wantTarget: "unix:///run/taskmesh.sock"},
		{server: "http://gw.example.com:80", wantErr: "plaintext would expose the API key; use --insecure"},
		{server: "https://gw.example.com", insecure: true, wantErr: "says TLS but --insecure"},
		{server: "http://localhost", tls: true, wantErr: "says plaintext but --tls"},
		{server: "ftp://gw.example.com", wantErr: `unknown scheme "ftp"`},
		{server: "", wantErr: "is not host:port"},
		{server: "a b:1", wantErr: "is not host:port"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s tls=%v insecure=%v", tt.server, tt.tls, tt.insecure), func(t *testing.T) {
			target, useTLS, err := transport(tt.server, tt.tls, tt.insecure)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if target != tt.wantTarget || useTLS != tt.wantTLS {
				t.Errorf("got %q tls=%v, want %q tls=%v", target, useTLS, tt.wantTarget, tt.wantTLS)
			}
		})
	}
}

// recordingServer is a TaskService that records the metadata of each call.
type recordingServer struct {
	taskv1.UnimplementedTaskServiceServer
	mu sync.Mutex
	md []metadata.MD
}

func (s *recordingServer) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.md = append(s.md, md)
}

func (s *recordingServer) GetTask(ctx context.Context, r *taskv1.GetTaskRequest) (*taskv1.GetTaskResponse, error) {
	s.record(ctx)
	return &taskv1.GetTaskResponse{Task: &taskv1.Task{Id: r.GetId(), Status: "pending"}}, nil
}

func (s *recordingServer) WatchTask(r *taskv1.WatchTaskRequest, stream grpc.ServerStreamingServer[taskv1.WatchTaskResponse]) error {
	s.record(stream.Context())
	return stream.Send(&taskv1.WatchTaskResponse{Task: &taskv1.Task{Id: r.GetId(), Status: "completed", Version: 1}})
}

// serve starts srv on a loopback port and returns its address.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// The key travels as "authorization: Bearer <key>" on unary and streaming
// calls alike, and is never printed.
func TestAuthMetadata(t *testing.T) {
	rec := &recordingServer{}
	addr := serve(t, func(s *grpc.Server) { taskv1.RegisterTaskServiceServer(s, rec) })
	const key = "tm_prefix_0123456789secret"
	a := testApp(EnvAPIKey, key)
	get := a.run(t, "", "tasks", "get", "t1", "--server", addr, "-o", "json")
	watch := testApp(EnvAPIKey, key).run(t, "", "tasks", "watch", "t1", "--server", addr)
	for _, r := range []result{get, watch} {
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, key) {
			t.Errorf("output shows the key:\n%s%s", r.stdout, r.stderr)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.md) != 2 {
		t.Fatalf("server saw %d calls, want 2", len(rec.md))
	}
	for i, md := range rec.md {
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+key {
			t.Errorf("call %d: authorization = %q", i, got)
		}
	}
	if s := fmt.Sprint(bearer{key: key}); strings.Contains(s, key) {
		t.Errorf("bearer prints as %q", s)
	}
}
