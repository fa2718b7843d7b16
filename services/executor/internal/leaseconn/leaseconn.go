// Package leaseconn dials the Taskmesh front door for the executor's lease
// protocol: the agent and the Kubernetes backend use the same connection
// settings (agent token as a per-call bearer credential, reread from its
// file after a rotation, TLS when given, trace context on every call, a
// short reconnect backoff).
package leaseconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/taskmesh/taskmesh/platform/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// bearer sends the agent token on every call. It is the only place the
// token is used; it is never logged.
type bearer struct {
	token  *Token
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token.Secret()}, nil
}

// RequireTransportSecurity is false only for plaintext loopback development
// (no TLS configured); with TLS configured gRPC refuses to send the token in
// the clear.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Option adjusts Dial.
type Option func(*[]grpc.DialOption) error

// FromAddress makes the connection leave from the local address ip (a
// machine with several addresses, where the agent token is bound to one).
func FromAddress(ip string) Option {
	return func(opts *[]grpc.DialOption) error {
		if ip == "" {
			return nil
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return fmt.Errorf("source address %q: %w", ip, err)
		}
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}}
		*opts = append(*opts, grpc.WithContextDialer(func(ctx context.Context, target string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", target)
		}))
		return nil
	}
}

// gatewaysScheme names the resolver of a list of front doors (Dial).
const gatewaysScheme = "taskmesh-gateways"

// frontDoors turns a list "host:port,host:port,…" into a target whose
// resolver hands gRPC every address, in order. gRPC's default policy,
// pick_first, connects to the first that answers and, when that connection
// breaks, goes through the list again: an agent pointed at several
// gateways keeps heartbeating, claiming and reporting through the loss of
// one (docs/executor.md). Each address keeps its own host as its TLS
// server name. One address is dialled as it is.
func frontDoors(target string, opts *[]grpc.DialOption) (string, error) {
	if !strings.Contains(target, ",") {
		return target, nil
	}
	var addrs []resolver.Address
	for _, a := range strings.Split(target, ",") {
		a = strings.TrimSpace(a)
		host, _, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return "", fmt.Errorf("server %q in %q: want host:port", a, target)
		}
		addrs = append(addrs, resolver.Address{Addr: a, ServerName: host})
	}
	r := manual.NewBuilderWithScheme(gatewaysScheme)
	r.InitialState(resolver.State{Addresses: addrs})
	*opts = append(*opts, grpc.WithResolvers(r))
	return gatewaysScheme + ":///front-doors", nil
}

// Dial returns a client connection to target: host:port, or several
// separated by commas (frontDoors). A nil or empty token sends no
// credentials; a nil tlsCfg is plaintext. A unary call refused as
// unauthenticated is retried once when the token's file holds a new secret
// (a rotation).
func Dial(target string, token *Token, tlsCfg *tls.Config, options ...Option) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// Trace context goes with every call (the global tracer provider;
		// a no-op until the binary sets one up).
		otel.DialOption(),
		// Reconnect quickly once the server is back: outcomes wait and a
		// long reconnect backoff would only delay them.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 3 * time.Second,
		}),
	}
	for _, o := range options {
		if err := o(&opts); err != nil {
			return nil, err
		}
	}
	if token.Secret() != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: token, secure: tlsCfg != nil}),
			grpc.WithChainUnaryInterceptor(token.retryUnary))
	}
	dialed, err := frontDoors(target, &opts)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(dialed, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}
