package main

import (
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

func TestGatewayTrustedProxiesFlag(t *testing.T) {
	var g gatewayFlags
	cmd := &cobra.Command{}
	g.add(cmd)
	if err := cmd.Flags().Parse([]string{"--trusted-proxies", "10.0.0.0/8, 192.0.2.7,::ffff:198.51.100.1,2001:db8::/33"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := g.config(&process{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.TrustedProxies); got != "[10.0.0.0/8 192.0.2.7/32 198.51.100.1/32 2001:db8::/33]" {
		t.Errorf("trusted proxies = %s", got)
	}
	g = gatewayFlags{}
	cmd = &cobra.Command{}
	g.add(cmd)
	if err := cmd.Flags().Parse([]string{"--trusted-proxies", "lb.example"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.config(&process{}); err == nil {
		t.Error("a host name was taken as a trusted proxy")
	}
}
