package main

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// A development stack's webhooks may reach receivers on this machine unless
// the flag says otherwise; other private networks stay refused.
func TestDevWebhooksReachLoopbackByDefault(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []netip.Prefix
	}{
		{nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}},
		{[]string{"--webhook-allow="}, nil},
		{[]string{"--webhook-allow", "10.20.0.0/16"}, []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}},
	} {
		f := devFlags{video: videoFlags{enabled: true}}
		fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
		f.add(fs)
		if err := fs.Parse(append([]string{"--data-dir", t.TempDir()}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		o, err := f.options()
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Consumers.Webhooks.Allow; !slices.Equal(got, tt.want) {
			t.Errorf("%v: webhooks may reach %v, want %v", tt.args, got, tt.want)
		}
	}
}
