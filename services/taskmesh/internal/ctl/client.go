package ctl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	usagev1 "github.com/taskmesh/taskmesh/gen/taskmesh/usage/v1"
	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	webhookv1 "github.com/taskmesh/taskmesh/gen/taskmesh/webhook/v1"
)

// Client setup: where the server is, which key to send, and whether to use
// TLS. Settings come, highest first, from flags, the environment
// (TASKMESH_SERVER, TASKMESH_API_KEY) and the config file (server:,
// api_key:), so a config file can hold the everyday defaults and a flag
// can override one call.

// DefaultServer is the gateway's gRPC front door on this machine.
const DefaultServer = "127.0.0.1:9090"

// defaultPort is added to a server given without one.
const defaultPort = "9090"

// Environment variables read by the client.
const (
	EnvServer = "TASKMESH_SERVER"
	EnvAPIKey = "TASKMESH_API_KEY"
	// EnvAdminKey is the operator key (tmo_…) of the tenants and keys
	// commands.
	EnvAdminKey = "TASKMESH_ADMIN_KEY"
)

// maxRecvBytes lets a full page of tasks through (500 tasks, each with up
// to 64 KiB of stdout and stderr); gRPC's default is 4 MiB.
const maxRecvBytes = 128 << 20

// connFlags are the connection flags of the ctl command.
type connFlags struct {
	server, apiKey, config string
	adminKey               string
	tls, insecure          bool
	// admin says the command calls the admin API: the operator key is
	// sent instead of the API key.
	admin bool
}

// environment is what the client reads from the process, injectable for
// tests.
type environment struct {
	getenv  func(string) string
	homeDir func() (string, error)
}

// Settings are the resolved connection settings.
type Settings struct {
	Server string // as given, e.g. "gw.example.com:9090"
	APIKey string // never printed
	// Target is the gRPC dial target, TLS whether to dial with TLS.
	Target string
	TLS    bool
	// ConfigPath is the config file consulted ("" if none exists).
	ConfigPath string
}

// fileConfig is the config file's content.
type fileConfig struct {
	Server, APIKey, AdminKey string
}

// resolveSettings applies the precedence flags > environment > config file
// > default, then decides on TLS.
func resolveSettings(f connFlags, env environment) (Settings, error) {
	if f.tls && f.insecure {
		return Settings{}, invocationError{errors.New("--tls and --insecure contradict each other")}
	}
	path, explicit := f.config, f.config != ""
	if !explicit {
		path = defaultConfigPath(env)
	}
	var cfg fileConfig
	if path != "" {
		var found bool
		var err error
		cfg, found, err = loadConfig(path)
		switch {
		case err != nil:
			return Settings{}, err
		case !found && explicit:
			return Settings{}, fmt.Errorf("config file %s does not exist", path)
		case !found:
			path = ""
		}
	}
	s := Settings{
		Server:     first(f.server, strings.TrimSpace(env.getenv(EnvServer)), cfg.Server, DefaultServer),
		APIKey:     first(f.apiKey, strings.TrimSpace(env.getenv(EnvAPIKey)), cfg.APIKey),
		ConfigPath: path,
	}
	if f.admin {
		s.APIKey = first(f.adminKey, strings.TrimSpace(env.getenv(EnvAdminKey)), cfg.AdminKey)
		if s.APIKey == "" {
			return Settings{}, invocationError{fmt.Errorf("no operator key: pass --admin-key, set %s, or put admin_key: in the config file (mode 0600); taskmesh dev writes one to its data directory", EnvAdminKey)}
		}
	}
	if s.APIKey == "" {
		where := "~/.config/taskmesh/config.yaml"
		if p := defaultConfigPath(env); p != "" {
			where = p
		}
		return Settings{}, invocationError{fmt.Errorf("no API key: pass --api-key, set %s, or put api_key: in %s (mode 0600)", EnvAPIKey, where)}
	}
	// A key with a line break would be split into two metadata values by
	// some proxies, or refused by gRPC with a message that echoes it.
	if strings.ContainsAny(s.APIKey, " \t\r\n") {
		return Settings{}, errors.New("the API key contains whitespace; check how it was copied")
	}
	var err error
	if s.Target, s.TLS, err = transport(s.Server, f.tls, f.insecure); err != nil {
		return Settings{}, invocationError{err}
	}
	return s, nil
}

// invocationError marks settings errors that the command line can fix
// (contradicting flags, no key, a malformed address): they become usage
// errors. Problems with the config file itself do not.
type invocationError struct{ error }

func (e invocationError) Unwrap() error { return e.error }

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// defaultConfigPath is $XDG_CONFIG_HOME/taskmesh/config.yaml, else
// ~/.config/taskmesh/config.yaml ("" when neither can be known).
func defaultConfigPath(env environment) string {
	if x := env.getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "taskmesh", "config.yaml")
	}
	home, err := env.homeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "taskmesh", "config.yaml")
}

// loadConfig reads the config file. found is false when it does not exist.
// A file holding a key must be private to its owner: anyone who can read
// it can act as the tenant, and anyone who can write it can point the
// client (and the key) at a server of their choosing.
func loadConfig(path string) (cfg fileConfig, found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileConfig{}, false, nil
	}
	if err != nil {
		return fileConfig{}, false, fmt.Errorf("config file: %w", err)
	}
	cfg, err = parseConfig(path, data)
	if err != nil {
		return fileConfig{}, true, err
	}
	if (cfg.APIKey != "" || cfg.AdminKey != "") && runtime.GOOS != "windows" {
		fi, err := os.Stat(path)
		if err != nil {
			return fileConfig{}, true, fmt.Errorf("config file: %w", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return fileConfig{}, true, fmt.Errorf("config file %s holds an API key but is accessible by group or others (mode %04o); fix it with: chmod 600 %s", path, perm, path)
		}
	}
	return cfg, true, nil
}

// parseConfig reads server: and api_key:. It walks the YAML nodes itself
// because decoding errors of yaml quote the offending value, which for
// api_key is the secret.
func parseConfig(path string, data []byte) (fileConfig, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// Syntax errors name a line and a token class, not values.
		return fileConfig{}, fmt.Errorf("config file %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var cfg fileConfig
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return cfg, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return cfg, fmt.Errorf("config file %s:%d: want a mapping with server: and api_key:", path, root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], deref(root.Content[i+1])
		var dst *string
		switch k.Value {
		case "server":
			dst = &cfg.Server
		case "api_key":
			dst = &cfg.APIKey
		case "admin_key":
			dst = &cfg.AdminKey
		default:
			return fileConfig{}, fmt.Errorf("config file %s:%d: unknown key %q (want server, api_key or admin_key)", path, k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return fileConfig{}, fmt.Errorf("config file %s:%d: %s must be a string", path, v.Line, k.Value)
		}
		if !isNull(v) {
			*dst = strings.TrimSpace(v.Value)
		}
	}
	return cfg, nil
}

// transport decides the dial target and whether to use TLS. Plaintext is
// the default only for loopback addresses, where nothing crosses a
// network; anywhere else the key would travel in the clear, so plaintext
// needs --insecure. A URL scheme may say the same thing as the flags.
func transport(server string, tlsFlag, insecureFlag bool) (target string, useTLS bool, err error) {
	s := strings.TrimSpace(server)
	if strings.HasPrefix(s, "unix:") {
		// A Unix socket never leaves the machine.
		return s, tlsFlag, nil
	}
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, s = strings.ToLower(s[:i]), strings.TrimSuffix(s[i+3:], "/")
	}
	switch scheme {
	case "", "grpc", "dns":
	case "https", "grpcs":
		if insecureFlag {
			return "", false, fmt.Errorf("server %q says TLS but --insecure was given", server)
		}
		tlsFlag = true
	case "http":
		if tlsFlag {
			return "", false, fmt.Errorf("server %q says plaintext but --tls was given", server)
		}
	default:
		return "", false, fmt.Errorf("server %q: unknown scheme %q (give host:port)", server, scheme)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// No port: "example.com", "10.0.0.1", "::1" or "[::1]".
		host, port = strings.Trim(s, "[]"), defaultPort
	}
	if host == "" || strings.ContainsAny(host, "/ ") {
		return "", false, fmt.Errorf("server %q is not host:port", server)
	}
	target = net.JoinHostPort(host, port)
	switch {
	case tlsFlag:
		return target, true, nil
	case insecureFlag:
		return target, false, nil
	case scheme == "http" && !isLoopback(host):
		return "", false, fmt.Errorf("server %q is not on this machine: plaintext would expose the API key; use --insecure to accept that", server)
	}
	return target, !isLoopback(host), nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// bearer sends the API key on every call, unary and streaming.
type bearer struct{ key string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity is false because the TLS decision was made by
// transport() before dialing: plaintext is only used for loopback or with
// --insecure, which the user asked for.
func (bearer) RequireTransportSecurity() bool { return false }

// String keeps the key out of any accidental %v.
func (bearer) String() string { return "bearer([REDACTED])" }

// conn is an open client.
type conn struct {
	cc          *grpc.ClientConn
	tasks       taskv1.TaskServiceClient
	admin       adminv1.AdminServiceClient
	agents      adminv1.AgentServiceClient
	video       videov1.VideoServiceClient
	pipeline    pipelinev1.PipelineServiceClient
	admission   quotav1.AdmissionServiceClient
	groups      taskv1.TaskGroupServiceClient
	templates   taskv1.TemplateServiceClient
	audit       auditv1.AuditServiceClient
	usage       usagev1.UsageServiceClient
	webhooks    webhookv1.WebhookServiceClient
	deadLetters deadletterv1.DeadLetterServiceClient
}

func (c *conn) Close() error { return c.cc.Close() }

// dial connects lazily: errors to reach the server appear on the first
// call, as Unavailable with the address in the message.
func dial(s Settings) (*conn, error) {
	creds := insecure.NewCredentials()
	if s.TLS {
		// System roots; TLS 1.2 is the oldest version gRPC permits.
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	cc, err := grpc.NewClient(s.Target,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearer{key: s.APIKey}),
		grpc.WithUserAgent("taskmesh-ctl"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)),
		grpc.WithChainUnaryInterceptor(unreachableUnary(s.Target)),
		grpc.WithChainStreamInterceptor(unreachableStream(s.Target)),
	)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", s.Server, err)
	}
	return &conn{cc: cc, tasks: taskv1.NewTaskServiceClient(cc), admin: adminv1.NewAdminServiceClient(cc),
		agents: adminv1.NewAgentServiceClient(cc),
		video:  videov1.NewVideoServiceClient(cc), pipeline: pipelinev1.NewPipelineServiceClient(cc),
		admission: quotav1.NewAdmissionServiceClient(cc), groups: taskv1.NewTaskGroupServiceClient(cc),
		templates: taskv1.NewTemplateServiceClient(cc), audit: auditv1.NewAuditServiceClient(cc),
		usage: usagev1.NewUsageServiceClient(cc), webhooks: webhookv1.NewWebhookServiceClient(cc),
		deadLetters: deadletterv1.NewDeadLetterServiceClient(cc)}, nil
}

// unreachable names the server in Unavailable errors: gRPC's own message
// ("connection error: desc = …") does not always say which address failed.
func unreachable(server string, err error) error {
	st, ok := status.FromError(err)
	if ok && st.Code() == codes.DeadlineExceeded && strings.Contains(st.Message(), "waiting for connections to become ready") {
		return status.Errorf(codes.DeadlineExceeded, "no answer from %s within --timeout", server)
	}
	if !ok || st.Code() != codes.Unavailable || len(st.Details()) > 0 {
		return err
	}
	return status.Errorf(codes.Unavailable, "cannot reach %s: %s", server, dialProblem(st.Message()))
}

// dialFailure finds the reason at the end of gRPC's "connection error:
// desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect:
// connection refused"".
var dialFailure = regexp.MustCompile(`dial tcp [^ ]+: (?:connect: )?([^"]+)"?$`)

// dialProblem says in a few words why the server could not be reached:
// the reason gRPC's transport message ends with, or that the address
// answers HTTP/1.1 (the REST port given where the gRPC port belongs).
func dialProblem(msg string) string {
	if strings.Contains(msg, "HTTP/1.1 header") {
		return "it answers HTTP/1.1, not gRPC: --server takes the gateway's gRPC port (" + defaultPort + " by default), not its REST port"
	}
	if m := dialFailure.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return msg
}

func unreachableUnary(server string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return unreachable(server, invoker(ctx, method, req, reply, cc, opts...))
	}
}

func unreachableStream(server string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, unreachable(server, err)
		}
		return unreachableClientStream{ClientStream: s, server: server}, nil
	}
}

// unreachableClientStream names the server when a stream breaks midway.
type unreachableClientStream struct {
	grpc.ClientStream
	server string
}

func (s unreachableClientStream) RecvMsg(m any) error {
	return unreachable(s.server, s.ClientStream.RecvMsg(m))
}
