package kafka_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

func TestConfigOptsValidation(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.der")
	if err := os.WriteFile(notPEM, []byte{0x30, 0x82, 0x01}, 0o600); err != nil {
		t.Fatal(err)
	}
	ok := []string{"127.0.0.1:9092"}
	cases := []struct {
		name string
		cfg  kafka.Config
		want string
	}{
		{"no brokers", kafka.Config{}, "no brokers"},
		{"empty broker", kafka.Config{Brokers: []string{"a:1", " "}}, "broker 1 is empty"},
		{"comma list in one entry", kafka.Config{Brokers: []string{"a:1,b:2"}}, "separate entries"},
		{"bad port", kafka.Config{Brokers: []string{"a:notaport"}}, "invalid port"},
		{"port out of range", kafka.Config{Brokers: []string{"a:70000"}}, "invalid port"},
		{"no host", kafka.Config{Brokers: []string{":9092"}}, "no host"},
		{"unknown mechanism", kafka.Config{Brokers: ok, SASL: &kafka.SASLConfig{Mechanism: "GSSAPI", Username: "u"}}, `unknown SASL mechanism "GSSAPI"`},
		{"empty mechanism", kafka.Config{Brokers: ok, SASL: &kafka.SASLConfig{Username: "u"}}, "unknown SASL mechanism"},
		{"empty username", kafka.Config{Brokers: ok, SASL: &kafka.SASLConfig{Mechanism: "PLAIN"}}, "username is empty"},
		{"unreadable CA", kafka.Config{Brokers: ok, TLS: &kafka.TLSConfig{CAFile: filepath.Join(dir, "missing.pem")}}, "reading TLS CA file"},
		{"CA without PEM", kafka.Config{Brokers: ok, TLS: &kafka.TLSConfig{CAFile: notPEM}}, "contains no PEM certificate"},
		{"cert without key", kafka.Config{Brokers: ok, TLS: &kafka.TLSConfig{CertFile: notPEM}}, "must be set together"},
		{"bad key pair", kafka.Config{Brokers: ok, TLS: &kafka.TLSConfig{CertFile: notPEM, KeyFile: notPEM}}, "loading TLS client certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.cfg.Opts()
			if err == nil {
				t.Fatalf("Opts() = %d opts, want error containing %q", len(opts), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Opts() error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigOptsAcceptsValidConfigs(t *testing.T) {
	for _, mech := range []string{"SCRAM-SHA-256", "scram-sha-512", "PLAIN"} {
		cfg := kafka.Config{
			Brokers:  []string{"kafka-0:9093", "kafka-1", "[::1]:9092"},
			ClientID: "taskmesh",
			TLS:      &kafka.TLSConfig{InsecureSkipVerify: true},
			SASL:     &kafka.SASLConfig{Mechanism: mech, Username: "u", Password: "p"},
		}
		opts, err := cfg.Opts()
		if err != nil {
			t.Fatalf("%s: Opts: %v", mech, err)
		}
		// seed brokers, the options every client takes, client id, TLS
		// dialer, SASL
		if want := 4 + len(kafka.ClientOpts()); len(opts) != want {
			t.Fatalf("%s: got %d options, want %d", mech, len(opts), want)
		}
	}
}

func TestConfigNeverPrintsPassword(t *testing.T) {
	const secret = "hunter2-very-secret"
	cfg := kafka.Config{
		Brokers:  []string{"kafka:9092"},
		ClientID: "svc",
		TLS:      &kafka.TLSConfig{CAFile: "/etc/ca.pem"},
		SASL:     &kafka.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "alice", Password: secret},
	}
	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%s", "%#v"} {
		outputs = append(outputs, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, &cfg),
			fmt.Sprintf(verb, *cfg.SASL), fmt.Sprintf(verb, cfg.SASL))
	}
	outputs = append(outputs, cfg.String())
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("start", "kafka", cfg, "sasl", *cfg.SASL)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("start", "kafka", cfg, "sasl", cfg.SASL)
	outputs = append(outputs, logs.String())
	for _, out := range outputs {
		if strings.Contains(out, secret) {
			t.Fatalf("password leaked in %q", out)
		}
	}
	s := cfg.String()
	for _, want := range []string{"kafka:9092", "svc", "alice", "SCRAM-SHA-512", "/etc/ca.pem", "[REDACTED]"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, want it to mention %q", s, want)
		}
	}
}
