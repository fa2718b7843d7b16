// Package ctl is the command-line client of Taskmesh, `taskmesh ctl`: it
// submits tasks from YAML task files (docs/ctl.md) and lists, inspects,
// watches, cancels, retries and deletes them, and submits, inspects and
// deletes video generations, through the gateway's gRPC front door, as a
// tenant identified by an API key; and manages tenants and their API keys
// through the admin API with an operator key.
//
// The command tree is
//
//	ctl tasks submit -f FILE…   create tasks from task files (taskfile.go)
//	ctl tasks list              one page, or every page with --all
//	ctl tasks get ID            human readable, or -o json|yaml
//	ctl tasks watch ID          follow a task until it is final
//	ctl tasks cancel|retry|delete ID
//	ctl tasks result ID         inline output, or the object-store download
//	ctl groups submit -f FILE   create task groups and repeats (groupfile.go)
//	ctl groups get|list|watch|start|cancel|delete, groups reset ID --reason
//	ctl templates create|list|get|update|delete|run (templates.go)
//	ctl tenants create|list|get|update   tenants, tiers, limits (admin.go)
//	ctl keys create|list|revoke          a tenant's API keys (admin.go)
//	ctl video submit|get|delete the video generation API (video.go)
//	ctl queues list|get          admission queues with live usage (queues.go)
//	ctl tasks why ID             why a task waits for admission (queues.go)
//	ctl quota …                 the quota service, as the operator (quota.go)
//	ctl audit                   the audit log, filtered (audit.go)
//	ctl usage                   metered usage, priced, or as CSV (usage.go)
//	ctl webhooks endpoint|deliveries|get|redeliver   notifications (webhooks.go)
//	ctl deadletters list|retry|drop   parked records, operator key (deadletters.go)
//
// Errors print as one line, "error: <message> (code <n> <meaning>)", and
// exit 1; mistakes in the command line itself exit 2 before anything is
// sent (see Main).
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultTimeout bounds each unary call, each step of an upload and the
// first answer of a watch; a connected watch is not bounded.
const defaultTimeout = 30 * time.Second

// app holds what every subcommand shares: the global flags and the
// process environment (injected by tests).
type app struct {
	env        environment
	terminal   func(io.Writer) bool
	httpClient *http.Client
	now        func() time.Time

	conn    connFlags
	output  string
	timeout time.Duration
}

func defaultApp() *app {
	return &app{
		env:        environment{getenv: os.Getenv, homeDir: os.UserHomeDir},
		terminal:   isTerminal,
		httpClient: &http.Client{Transport: downloadTransport()},
		now:        time.Now,
	}
}

// Command returns the `ctl` command with `tasks` under it. Errors are
// returned, not printed: use Main to print them and get the exit code.
func Command() *cobra.Command { return defaultApp().command() }

// Main runs `taskmesh ctl` with args (those after "ctl") and returns the
// exit code: 0, 1 (ExitError), 2 (ExitUsage) or 130 (ExitInterrupted, ctx
// was cancelled). It prints errors as
// FormatError does. The binary calls it rather than executing Command
// beside the other subcommands so that the exit code and the error line
// are ctl's own.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return defaultApp().main(ctx, args, stdin, stdout, stderr)
}

func (a *app) main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// A parent named like the binary makes help and usage hints read
	// "taskmesh ctl tasks …", the command the user typed.
	root := &cobra.Command{Use: "taskmesh", SilenceErrors: true, SilenceUsage: true}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(a.command())
	root.SetArgs(append([]string{"ctl"}, args...))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err != nil && ctx.Err() != nil {
		// Whatever the command was doing when it was stopped (a watch, a
		// request) failed because of the stop, not on its own.
		err = &InterruptedError{Err: err}
	}
	if err != nil {
		fmt.Fprintln(stderr, FormatError(err))
	}
	return ExitCode(err)
}

func (a *app) command() *cobra.Command {
	ctl := &cobra.Command{
		Use:   "ctl",
		Short: "Manage Taskmesh tasks through the gateway",
		Long: `Manage Taskmesh tasks through the gateway's gRPC front door.

The server and API key come from, highest first: --server and --api-key;
TASKMESH_SERVER and TASKMESH_API_KEY; the config file (--config, default
$XDG_CONFIG_HOME/taskmesh/config.yaml or ~/.config/taskmesh/config.yaml)
with server: and api_key:, which must be private (chmod 600).
The tenants, keys and agents commands send the operator key (tmo_…) instead:
--admin-key, TASKMESH_ADMIN_KEY, or admin_key: in the config file.
Prefer the environment or the config file to --api-key, which other users
of the machine can see in the process list.

Plaintext is used only for loopback addresses (the default server is
` + DefaultServer + `); any other server is reached over TLS with the system's
root certificates unless --insecure is given.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRunE,
	}
	// Flag parse errors are usage errors wherever they happen below.
	ctl.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Command: c.CommandPath(), Err: plainFlagError(err)}
	})
	f := ctl.PersistentFlags()
	f.StringVar(&a.conn.server, "server", "", "gateway gRPC address host:port (default "+DefaultServer+", env "+EnvServer+")")
	f.StringVar(&a.conn.apiKey, "api-key", "", "API key (env "+EnvAPIKey+"; visible to other users in the process list)")
	f.StringVar(&a.conn.adminKey, "admin-key", "", "operator key for tenants, keys and agents (env "+EnvAdminKey+"; visible in the process list)")
	f.StringVar(&a.conn.config, "config", "", "config file with server: and api_key: (default $XDG_CONFIG_HOME/taskmesh/config.yaml)")
	f.BoolVar(&a.conn.tls, "tls", false, "use TLS with the system roots even for a loopback address")
	f.BoolVar(&a.conn.insecure, "insecure", false, "use plaintext even for a non-loopback address (sends the key unencrypted)")
	f.StringVarP(&a.output, "output", "o", formatTable, "output format: table, json or yaml")
	f.DurationVar(&a.timeout, "timeout", defaultTimeout, "time limit of each request (of a watch, only its first answer)")

	tasks := &cobra.Command{
		Use:     "tasks",
		Aliases: []string{"task"},
		Short:   "Submit, list, inspect, watch, cancel, retry and delete tasks",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	tasks.AddCommand(a.submitCommand(), a.listCommand(), a.getCommand(), a.watchCommand(),
		a.cancelCommand(), a.retryCommand(), a.suspendCommand(), a.resumeCommand(), a.deleteCommand(), a.resultCommand(), a.whyCommand())
	ctl.AddCommand(tasks, a.groupsCommand(), a.templatesCommand(), a.servicesCommand(), a.videoCommand(), a.jobsCommand(), a.queuesCommand(),
		a.tenantsCommand(), a.keysCommand(), a.agentsCommand(), a.quotaCommand(), a.auditCommand(), a.usageCommand(), a.webhooksCommand(),
		a.deadLettersCommand())
	return ctl
}

// flagParseErrors are the Go parsers' words in pflag's "invalid argument
// "abc" for "--limit" flag: …", and what a user should read instead.
var flagParseErrors = []struct {
	re   *regexp.Regexp
	says string
}{
	{regexp.MustCompile(`strconv\.Parse(Int|Uint): parsing "[^"]*": invalid syntax$`), "not a whole number"},
	{regexp.MustCompile(`strconv\.ParseFloat: parsing "[^"]*": invalid syntax$`), "not a number"},
	{regexp.MustCompile(`strconv\.Parse\w+: parsing "[^"]*": value out of range$`), "out of range"},
	{regexp.MustCompile(`strconv\.ParseBool: parsing "[^"]*": invalid syntax$`), "not true or false"},
	{regexp.MustCompile(`time: (invalid|unknown unit .* in) duration "[^"]*"$`), "not a duration (such as 30s, 5m or 1h)"},
}

// plainFlagError says what is wrong with a flag's value in words, not in
// the Go parser's.
func plainFlagError(err error) error {
	msg := err.Error()
	for _, p := range flagParseErrors {
		if loc := p.re.FindStringIndex(msg); loc != nil {
			return errors.New(msg[:loc[0]] + p.says)
		}
	}
	return err
}

// groupRunE serves commands that only group others: bare, they show
// help; with an argument, it names an unknown subcommand (cobra reports
// those only for the root command).
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return &UsageError{Command: cmd.CommandPath(), Err: errors.New(msg)}
}

// format returns the -o format, refusing unknown ones before any request.
func (a *app) format(cmd *cobra.Command, allowed ...string) (string, error) {
	if len(allowed) == 0 {
		allowed = []string{formatTable, formatJSON, formatYAML}
	}
	for _, f := range allowed {
		if a.output == f {
			return f, nil
		}
	}
	return "", usageErrorf(cmd, "-o %s: want %s", a.output, strings.Join(allowed, ", "))
}

// connect resolves the settings and dials. Settings the command line can
// fix (no key, contradicting flags) are usage errors.
func (a *app) connect(cmd *cobra.Command) (*conn, error) {
	if a.timeout <= 0 {
		return nil, usageErrorf(cmd, "--timeout %s: want a positive duration (30s)", a.timeout)
	}
	s, err := resolveSettings(a.conn, a.env)
	var ie invocationError
	if errors.As(err, &ie) {
		return nil, &UsageError{Command: cmd.CommandPath(), Err: ie.error}
	}
	if err != nil {
		return nil, err
	}
	return dial(s)
}

// call returns a context for one unary request.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// idArgs checks for exactly one task id.
var idArgs = idArgsOf("task")

// idArgsOf checks for exactly one id of a what (task, group, service).
func idArgsOf(what string) cobra.PositionalArgs {
	return usageArgs(func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return fmt.Errorf("no %s id given", what)
		case len(args) > 1:
			return fmt.Errorf("want one %s id, got %d arguments", what, len(args))
		case strings.TrimSpace(args[0]) == "":
			return fmt.Errorf("the %s id is empty", what)
		}
		return nil
	})
}
