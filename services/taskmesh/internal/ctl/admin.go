package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
)

// The tenants and keys commands call the admin API with an operator key
// (--admin-key, TASKMESH_ADMIN_KEY or admin_key: in the config file).

// adminCall is taskCall with the operator key.
func (a *app) adminCall(cmd *cobra.Command, call func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error)) error {
	a.conn.admin = true
	return a.taskCall(cmd, call)
}

// tiers a tenant may have.
var tiers = []string{"premium", "standard"}

func checkTier(cmd *cobra.Command, tier string) error {
	for _, t := range tiers {
		if tier == t {
			return nil
		}
	}
	return usageErrorf(cmd, "--tier %s: want %s", tier, strings.Join(tiers, " or "))
}

// maxLimit is the largest RPM or TPM the server accepts.
const maxLimit = 60_000_000

func checkLimit(cmd *cobra.Command, name string, v int) error {
	if v < 0 || v > maxLimit {
		return usageErrorf(cmd, "--%s %d: want 0 to %d", name, v, maxLimit)
	}
	return nil
}

func (a *app) tenantsCommand() *cobra.Command {
	tenants := &cobra.Command{
		Use:     "tenants",
		Aliases: []string{"tenant"},
		Short:   "Create, list, inspect and update tenants (operator key)",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	tenants.AddCommand(a.tenantCreateCommand(), a.tenantListCommand(), a.tenantGetCommand(), a.tenantUpdateCommand())
	return tenants
}

// tenantArgs checks for exactly one tenant id.
var tenantArgs = usageArgs(func(_ *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return errors.New("no tenant id given")
	case len(args) > 1:
		return fmt.Errorf("want one tenant id, got %d arguments", len(args))
	case strings.TrimSpace(args[0]) == "":
		return errors.New("the tenant id is empty")
	}
	return nil
})

func (a *app) tenantCreateCommand() *cobra.Command {
	var name, tier string
	var rpm, tpm int
	cmd := &cobra.Command{
		Use:   "create ID",
		Short: "Create a tenant (limits of 0 use the tier's defaults)",
		Args:  tenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTier(cmd, tier); err != nil {
				return err
			}
			if err := errors.Join(checkLimit(cmd, "rpm", rpm), checkLimit(cmd, "tpm", tpm)); err != nil {
				return err
			}
			if name == "" {
				name = args[0]
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admin.CreateTenant(ctx, &adminv1.CreateTenantRequest{TenantId: args[0], Name: name, Tier: tier,
					RpmLimit: int32(rpm), TpmLimit: int32(tpm)})
				return resp.GetTenant(), func(w io.Writer) error { return writeTenants(w, resp.GetTenant()) }, err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "display name (default: the id)")
	f.StringVar(&tier, "tier", "standard", "premium or standard")
	f.IntVar(&rpm, "rpm", 0, "requests per minute (0: the tier's default)")
	f.IntVar(&tpm, "tpm", 0, "tokens per minute (0: the tier's default)")
	return cmd
}

func (a *app) tenantListCommand() *cobra.Command {
	var limit int
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tenants by id",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return usageErrorf(cmd, "--limit %d: want 1 to 1000", limit)
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				tenants, next, err := collectPages(all, func(token string) ([]*adminv1.Tenant, string, error) {
					resp, err := c.admin.ListTenants(ctx, &adminv1.ListTenantsRequest{PageSize: int32(limit), PageToken: token})
					return resp.GetTenants(), resp.GetNextPageToken(), err
				})
				if err != nil {
					return nil, nil, err
				}
				out := &adminv1.ListTenantsResponse{Tenants: tenants, NextPageToken: next}
				return out, func(w io.Writer) error {
					if err := writeTenants(w, tenants...); err != nil {
						return err
					}
					return writeMore(cmd.ErrOrStderr(), next, "tenants")
				}, nil
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "tenants per page")
	cmd.Flags().BoolVar(&all, "all", false, "list every page")
	return cmd
}

func (a *app) tenantGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one tenant",
		Args:  tenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admin.GetTenant(ctx, &adminv1.GetTenantRequest{TenantId: args[0]})
				return resp.GetTenant(), func(w io.Writer) error { return writeTenants(w, resp.GetTenant()) }, err
			})
		},
	}
}

func (a *app) tenantUpdateCommand() *cobra.Command {
	var name, tier string
	var rpm, tpm int
	cmd := &cobra.Command{
		Use:   "update ID",
		Short: "Change a tenant's name, tier or limits (only the flags given; a limit of 0 returns to the tier's default)",
		Args:  tenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminv1.UpdateTenantRequest{TenantId: args[0]}
			f := cmd.Flags()
			if f.Changed("name") {
				req.Name = &name
			}
			if f.Changed("tier") {
				if err := checkTier(cmd, tier); err != nil {
					return err
				}
				req.Tier = &tier
			}
			if f.Changed("rpm") {
				if err := checkLimit(cmd, "rpm", rpm); err != nil {
					return err
				}
				v := int32(rpm)
				req.RpmLimit = &v
			}
			if f.Changed("tpm") {
				if err := checkLimit(cmd, "tpm", tpm); err != nil {
					return err
				}
				v := int32(tpm)
				req.TpmLimit = &v
			}
			if req.Name == nil && req.Tier == nil && req.RpmLimit == nil && req.TpmLimit == nil {
				return usageErrorf(cmd, "nothing to change: give --name, --tier, --rpm or --tpm")
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admin.UpdateTenant(ctx, req)
				return resp.GetTenant(), func(w io.Writer) error { return writeTenants(w, resp.GetTenant()) }, err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "display name")
	f.StringVar(&tier, "tier", "", "premium or standard")
	f.IntVar(&rpm, "rpm", 0, "requests per minute (0: the tier's default)")
	f.IntVar(&tpm, "tpm", 0, "tokens per minute (0: the tier's default)")
	return cmd
}

// limitText shows a limit in force, marking a tier default.
func limitText(own, effective int32) string {
	switch {
	case effective == 0:
		return "unlimited"
	case own == 0:
		return fmt.Sprintf("%d (tier)", effective)
	}
	return fmt.Sprint(effective)
}

func writeTenants(out io.Writer, ts ...*adminv1.Tenant) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTIER\tRPM\tTPM\tCREATED")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.GetId(), t.GetName(), t.GetTier(),
			limitText(t.GetRpmLimit(), t.GetEffectiveRpmLimit()), limitText(t.GetTpmLimit(), t.GetEffectiveTpmLimit()),
			timeText(t.GetCreatedAt()))
	}
	return tw.Flush()
}

func (a *app) keysCommand() *cobra.Command {
	keys := &cobra.Command{
		Use:     "keys",
		Aliases: []string{"key"},
		Short:   "Create, list and revoke a tenant's API keys (operator key)",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	keys.AddCommand(a.keyCreateCommand(), a.keyListCommand(), a.keyRevokeCommand())
	return keys
}

func requireTenant(cmd *cobra.Command, tenant string) error {
	if strings.TrimSpace(tenant) == "" {
		return usageErrorf(cmd, "--tenant is required")
	}
	return nil
}

func (a *app) keyCreateCommand() *cobra.Command {
	var tenant, name, expires string
	var rpm, tpm int
	cmd := &cobra.Command{
		Use:   "create --tenant ID",
		Short: "Issue an API key; its secret is printed once and cannot be shown again",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireTenant(cmd, tenant); err != nil {
				return err
			}
			if err := errors.Join(checkLimit(cmd, "rpm", rpm), checkLimit(cmd, "tpm", tpm)); err != nil {
				return err
			}
			req := &adminv1.CreateApiKeyRequest{TenantId: tenant, Name: name, RpmLimit: int32(rpm), TpmLimit: int32(tpm)}
			if expires != "" {
				at, err := parseExpiry(expires, a.now())
				if err != nil {
					return usageErrorf(cmd, "--expires: %v", err)
				}
				req.ExpiresAt = timestamppb.New(at)
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admin.CreateApiKey(ctx, req)
				return resp, func(w io.Writer) error {
					if err := writeKeys(w, resp.GetApiKey()); err != nil {
						return err
					}
					_, err := fmt.Fprintf(w, "\nSecret (shown only now; store it safely):\n%s\n", resp.GetSecret())
					return err
				}, err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant id (required)")
	f.StringVar(&name, "name", "", "what the key is for")
	f.StringVar(&expires, "expires", "", "expiry: a duration from now (720h) or an RFC 3339 time (default: never)")
	f.IntVar(&rpm, "rpm", 0, "the key's own requests per minute, within the tenant's (0: the tenant's only)")
	f.IntVar(&tpm, "tpm", 0, "the key's own tokens per minute, within the tenant's (0: the tenant's only)")
	return cmd
}

// parseExpiry reads a positive duration from now or an RFC 3339 time.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%s is not in the future", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration (720h) nor an RFC 3339 time", s)
	}
	return t, nil
}

func (a *app) keyListCommand() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "list --tenant ID",
		Short: "List a tenant's keys, revoked and expired ones included (never their secrets)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireTenant(cmd, tenant); err != nil {
				return err
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admin.ListApiKeys(ctx, &adminv1.ListApiKeysRequest{TenantId: tenant})
				return resp, func(w io.Writer) error { return writeKeys(w, resp.GetApiKeys()...) }, err
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant id (required)")
	return cmd
}

func (a *app) keyRevokeCommand() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "revoke --tenant ID KEY_ID",
		Short: "Revoke an API key; it is refused from the next request on",
		Args: usageArgs(func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return fmt.Errorf("want one key id, got %d arguments", len(args))
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireTenant(cmd, tenant); err != nil {
				return err
			}
			return a.adminCall(cmd, func(ctx context.Context, c *conn) (proto.Message, func(io.Writer) error, error) {
				resp, err := c.admin.RevokeApiKey(ctx, &adminv1.RevokeApiKeyRequest{TenantId: tenant, KeyId: args[0]})
				return resp.GetApiKey(), func(w io.Writer) error { return writeKeys(w, resp.GetApiKey()) }, err
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant id (required)")
	return cmd
}

func writeKeys(out io.Writer, ks ...*adminv1.ApiKey) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tRPM\tTPM\tCREATED\tEXPIRES\tREVOKED\tLAST USED")
	for _, k := range ks {
		fmt.Fprintf(tw, "%s\ttm_%s_…\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.GetId(), k.GetPrefix(), k.GetName(),
			keyLimit(k.GetRpmLimit()), keyLimit(k.GetTpmLimit()), timeText(k.GetCreatedAt()),
			orDash(timeText(k.GetExpiresAt())), orDash(timeText(k.GetRevokedAt())), orDash(timeText(k.GetLastUsedAt())))
	}
	return tw.Flush()
}

func keyLimit(v int32) string {
	if v == 0 {
		return "tenant's"
	}
	return fmt.Sprint(v)
}
