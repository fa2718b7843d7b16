package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config connects to a real Kafka-protocol cluster.
//
// The zero value is not usable: at least one seed broker is required. Config
// is safe to print and log: String, GoString and LogValue redact the SASL
// password.
type Config struct {
	Brokers  []string    // seed brokers host:port (a missing port means 9092)
	ClientID string      // "" = franz-go's default client id
	TLS      *TLSConfig  // nil = plaintext
	SASL     *SASLConfig // nil = none
}

// TLSConfig enables TLS to the brokers.
//
// With no CAFile the system roots verify the brokers. CertFile and KeyFile
// (both or neither) present a client certificate for mutual TLS. ServerName
// overrides the name checked against the broker certificates; empty means the
// host of each broker address, which is what franz-go dials.
type TLSConfig struct {
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool // accepts any broker certificate: dev clusters only
}

// SASLConfig authenticates the client.
//
// PLAIN sends the password as is: use it only together with TLS or on a
// trusted network.
type SASLConfig struct {
	Mechanism string // "SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN" (case-insensitive)
	Username  string
	Password  string
}

// Opts returns the kgo options for this config: seed brokers, client id, the
// TLS dialer and the SASL mechanism. It reads the TLS files now, so a missing
// or malformed file is reported here rather than on the first dial.
func (c Config) Opts() ([]kgo.Opt, error) {
	brokers, err := c.brokers()
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, ClientOpts()...)
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	if c.TLS != nil {
		tc, err := c.TLS.build()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.SASL != nil {
		mech, err := c.SASL.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// ClientOpts are the options every client of the event log takes, whatever
// its brokers: a client made without a Config (a repair, a check) adds them
// to its own.
//
// Client metrics (KIP-714) are not pushed to the brokers. Each push of a
// franz-go client allocates a fresh 4 MiB lz4 buffer, or a gzip writer, for
// a few kilobytes of metrics; with a client per projection, relay and
// consumer, the pushes were 39% of all the bytes the end-to-end tests
// allocated. The event log is watched through Taskmesh's own metrics
// instead (docs/decisions/0128-kafka-clients-push-no-client-metrics.md).
func ClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.DisableClientMetrics()}
}

// brokers validates the seed list. franz-go would accept most garbage here and
// then fail to dial forever, so we reject what cannot possibly work.
func (c Config) brokers() ([]string, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers configured")
	}
	out := make([]string, 0, len(c.Brokers))
	for i, b := range c.Brokers {
		b = strings.TrimSpace(b)
		if b == "" {
			return nil, fmt.Errorf("kafka: broker %d is empty", i)
		}
		if strings.ContainsAny(b, " ,;/") {
			return nil, fmt.Errorf("kafka: broker %q is not host:port (list brokers as separate entries)", b)
		}
		if strings.Contains(b, ":") {
			host, port, err := net.SplitHostPort(b)
			if err != nil {
				return nil, fmt.Errorf("kafka: broker %q: %w", b, err)
			}
			if host == "" {
				return nil, fmt.Errorf("kafka: broker %q has no host", b)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("kafka: broker %q has invalid port %q", b, port)
			}
		}
		out = append(out, b)
	}
	return out, nil
}

const redacted = "[REDACTED]"

// String describes the config without the SASL password, so that it can be
// logged at start-up.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka.Config{Brokers:%v ClientID:%q", c.Brokers, c.ClientID)
	if c.TLS != nil {
		fmt.Fprintf(&b, " TLS:%+v", *c.TLS)
	} else {
		b.WriteString(" TLS:<nil>")
	}
	if c.SASL != nil {
		fmt.Fprintf(&b, " SASL:%s", c.SASL.String())
	} else {
		b.WriteString(" SASL:<nil>")
	}
	b.WriteString("}")
	return b.String()
}

// GoString keeps %#v from printing the password through the pointer.
func (c Config) GoString() string { return c.String() }

// LogValue keeps slog handlers (the JSON one in particular, which would
// otherwise walk the struct) from logging the password.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// String describes the SASL settings with the password redacted.
func (s SASLConfig) String() string {
	pw := ""
	if s.Password != "" {
		pw = redacted
	}
	return fmt.Sprintf("{Mechanism:%s Username:%s Password:%s}", s.Mechanism, s.Username, pw)
}

// GoString keeps %#v from printing the password.
func (s SASLConfig) GoString() string { return "kafka.SASLConfig" + s.String() }

// LogValue keeps slog from logging the password.
func (s SASLConfig) LogValue() slog.Value { return slog.StringValue(s.String()) }
