package kafka_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// startKfake runs a bare kfake cluster with extra options (SASL, TLS), which
// the Embedded broker deliberately does not expose.
func startKfake(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// pingWith connects with cfg and issues one request, returning its error.
// Retries are off so that an authentication or TLS failure surfaces at once.
func pingWith(t *testing.T, cfg kafka.Config) error {
	t.Helper()
	cl := newClient(t, cfg, kgo.RequestRetries(0), kgo.DialTimeout(5*time.Second))
	return cl.Ping(testContext(t, 10*time.Second))
}

func TestConfigSASLAgainstBroker(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			addrs := startKfake(t, kfake.EnableSASL(), kfake.Superuser(mech, "alice", "right-password"))
			good := kafka.Config{Brokers: addrs, SASL: &kafka.SASLConfig{Mechanism: mech, Username: "alice", Password: "right-password"}}
			if err := pingWith(t, good); err != nil {
				t.Fatalf("ping with correct credentials: %v", err)
			}
			bad := good
			bad.SASL = &kafka.SASLConfig{Mechanism: mech, Username: "alice", Password: "wrong"}
			if err := pingWith(t, bad); err == nil {
				t.Fatal("ping with a wrong password succeeded")
			}
			if err := pingWith(t, kafka.Config{Brokers: addrs}); err == nil {
				t.Fatal("ping without SASL succeeded against a SASL broker")
			}
		})
	}
}

func TestConfigTLSAgainstBroker(t *testing.T) {
	ca := newTestCA(t)
	caFile := ca.file
	srv, _, _ := ca.issue(t, true)
	addrs := startKfake(t, kfake.TLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{srv}}))

	if err := pingWith(t, kafka.Config{Brokers: addrs, TLS: &kafka.TLSConfig{CAFile: caFile}}); err != nil {
		t.Fatalf("ping with the right CA: %v", err)
	}
	err := pingWith(t, kafka.Config{Brokers: addrs, TLS: &kafka.TLSConfig{}})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("ping verifying against system roots: err = %v, want a certificate error", err)
	}
	if err := pingWith(t, kafka.Config{Brokers: addrs, TLS: &kafka.TLSConfig{InsecureSkipVerify: true}}); err != nil {
		t.Fatalf("ping with InsecureSkipVerify: %v", err)
	}
	err = pingWith(t, kafka.Config{Brokers: addrs, TLS: &kafka.TLSConfig{CAFile: caFile, ServerName: "not-the-broker"}})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("ping with a wrong ServerName: err = %v, want a certificate error", err)
	}
}

func TestConfigMutualTLSAgainstBroker(t *testing.T) {
	ca := newTestCA(t)
	srv, _, _ := ca.issue(t, true)
	_, certFile, keyFile := ca.issue(t, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	addrs := startKfake(t, kfake.TLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{srv},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}))

	withCert := kafka.Config{Brokers: addrs, TLS: &kafka.TLSConfig{CAFile: ca.file, CertFile: certFile, KeyFile: keyFile}}
	if err := pingWith(t, withCert); err != nil {
		t.Fatalf("ping with a client certificate: %v", err)
	}
	if err := pingWith(t, kafka.Config{Brokers: addrs, TLS: &kafka.TLSConfig{CAFile: ca.file}}); err == nil {
		t.Fatal("ping without a client certificate succeeded against a broker requiring one")
	}
}

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM of cert
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "taskmesh test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	writePEM(t, file, "CERTIFICATE", der)
	return &testCA{cert: cert, key: key, file: file}
}

// issue signs a leaf certificate: a server one for 127.0.0.1 or a client
// one. It returns the certificate and the PEM files holding it and its key.
func (ca *testCA) issue(t *testing.T, server bool) (cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "taskmesh-client"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.Subject.CommonName = "127.0.0.1"
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certFile, keyFile
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
