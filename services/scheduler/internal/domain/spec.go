package domain

import (
	"maps"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/taskmesh/taskmesh/platform/domain/cmdline"
	"github.com/taskmesh/taskmesh/platform/domain/quantity"
	"github.com/taskmesh/taskmesh/platform/domain/weburl"
)

// SpecInput is a submission as received: optional numbers are nil when the
// submitter left them out, so defaults apply.
type SpecInput struct {
	Name, Type, Command, Workdir         string
	Args                                 []string
	Env                                  map[string]string
	Timeout, Priority, RetryDelay        *int
	MaxRetries                           *int
	MachineID, GroupID, ParentID, Queue  string
	DependsOn                            []string
	Mode                                 string
	Labels                               []string
	ScatterCount                         int
	LeaseTTL, RenewInterval, GracePeriod *int
	HeartbeatInterval                    *int
	// Targets fan one submission out into one task per machine or IP.
	TargetMachines []string
	TargetIPs      []string
	// Repeat runs the task this many times, one after another
	// (repeat_count, docs/api/tasks.md#taskspec; 0 or 1 = once).
	Repeat    int
	Resources map[string]string
	Quota     string
	Video     *Video
	// Checkpoint asks for cooperative checkpointing (checkpoint.enabled);
	// nil when the submission has no checkpoint object.
	Checkpoint *bool
	// Artifacts are output globs relative to the working directory.
	Artifacts []string
	// Webhook is an http(s) URL to notify when the task ends.
	Webhook string
	// emptied are the strings an update gives as "" on purpose (Clear):
	// they replace the task's instead of keeping it.
	emptied map[string]bool
}

// WithParent is s with its parent task among the tasks it depends on: the
// parent_id of the task API is a dependency ("父任务ID（用于依赖）"), so
// the task waits for its parent as for depends_on (docs/api/tasks.md,
// parent_id). A group member's parent_id is not (its dependencies are
// the group's).
func (s Spec) WithParent() Spec {
	if s.ParentID != "" && !slices.Contains(s.DependsOn, s.ParentID) {
		s.DependsOn = append(slices.Clone(s.DependsOn), s.ParentID)
	}
	return s
}

// Limits on what one task may carry.
const (
	MaxEnvBytes  = 64 << 10
	MaxArgsBytes = 128 << 10
	MaxResources = 16
	MaxArtifacts = 32
)

var (
	envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	ident  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)
)

// ReservedEnvPrefix starts the environment names the agent sets itself
// for a task's or a service's process (TASKMESH_TASK_ID,
// TASKMESH_PROGRESS_FILE, TASKMESH_SERVICE_ID, …).
const ReservedEnvPrefix = "TASKMESH_"

// CheckReservedEnv refuses an env that names a key of the agent's. The
// agent drops such keys rather than let a spec forge its own identity, so
// one accepted would be stored and shown but never reach the process. The
// first such key in name order is named, so the answer does not depend on
// map order.
func CheckReservedEnv(env map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if strings.HasPrefix(k, ReservedEnvPrefix) {
			return invalid("env", "key %q is not allowed", k)
		}
	}
	return nil
}

func orDefault(p *int, d int) int {
	if p == nil {
		return d
	}
	return *p
}

// NormalizeSpec validates in and fills defaults. Every error is an
// *InvalidError naming the field.
func NormalizeSpec(in SpecInput) (Spec, error) {
	// Defaults are filled before validation, so every bound applies to the
	// value the task will carry, whether it was given or defaulted.
	s := Spec{
		Name: strings.TrimSpace(in.Name), Type: in.Type, Command: in.Command, Args: in.Args,
		Workdir: in.Workdir, Env: in.Env,
		Timeout:    orDefault(in.Timeout, DefaultTimeout),
		Priority:   orDefault(in.Priority, DefaultPriority),
		RetryDelay: orDefault(in.RetryDelay, DefaultRetryDelay),
		MaxRetries: orDefault(in.MaxRetries, DefaultMaxRetries),
		MachineID:  in.MachineID, GroupID: in.GroupID, ParentID: in.ParentID, DependsOn: in.DependsOn,
		Mode: in.Mode, Labels: in.Labels, ScatterCount: in.ScatterCount, Queue: in.Queue,
		Resources: in.Resources, Quota: in.Quota, Video: in.Video, Webhook: strings.TrimSpace(in.Webhook),
		Checkpoint: in.Checkpoint != nil && *in.Checkpoint, Artifacts: in.Artifacts,
		LeaseTTL:          orDefault(in.LeaseTTL, DefaultLeaseTTL),
		RenewInterval:     orDefault(in.RenewInterval, defaultRenewInterval(orDefault(in.LeaseTTL, DefaultLeaseTTL))),
		HeartbeatInterval: orDefault(in.HeartbeatInterval, DefaultHeartbeatInterval),
		GracePeriod:       orDefault(in.GracePeriod, DefaultGracePeriod),
	}
	// An untyped task is a shell task, as the task API documents.
	if s.Type == "" {
		s.Type = TypeShell
	}
	if s.Mode == "" {
		s.Mode = ModeSingle
	}
	// A shell or python task's command without args is a command line,
	// split into the words it runs (docs/api/tasks.md, "A command line").
	if s.Type == TypeShell || s.Type == TypePython {
		var err error
		if s.Command, s.Args, err = cmdline.Resolve(s.Command, s.Args); err != nil {
			return s, invalid("command", "%v", err)
		}
	}
	switch {
	case s.Name == "":
		return s, invalid("name", "is required")
	case utf8.RuneCountInString(s.Name) > 255:
		return s, invalid("name", "is longer than 255 characters")
	case CheckType(s.Type) != nil:
		return s, CheckType(s.Type)
	case s.Command == "" && s.Type != TypeNoop && s.Type != TypeVideo:
		return s, invalid("command", "is required")
	case s.Type == TypeVideo && s.Video == nil:
		return s, invalid("video", "is required for a video task")
	case s.Type != TypeVideo && s.Video != nil:
		return s, invalid("video", "is only for type video")
	// exec(2) takes NUL-terminated strings: a NUL would silently cut what
	// the agent runs short of what was accepted.
	case strings.ContainsRune(s.Command, 0):
		return s, invalid("command", "contains a NUL byte")
	case s.Priority < 1 || s.Priority > 10:
		return s, invalid("priority", "must be 1 (highest) to 10, not %d", s.Priority)
	case s.Timeout < 1 || s.Timeout > 7*86400:
		return s, invalid("timeout", "must be 1 to 604800 seconds, not %d", s.Timeout)
	case s.RetryDelay < 0 || s.RetryDelay > 86400:
		return s, invalid("retry_delay", "must be 0 to 86400 seconds")
	case s.MaxRetries < 0 || s.MaxRetries > 100:
		return s, invalid("max_retries", "must be 0 to 100")
	case s.LeaseTTL < 5 || s.LeaseTTL > 86400:
		return s, invalid("lease_ttl_sec", "must be 5 to 86400 seconds")
	// Renewing no sooner than the lease lasts would let every lease expire
	// before its first renewal.
	case s.RenewInterval < 1 || s.RenewInterval >= s.LeaseTTL:
		return s, invalid("renew_interval_sec", "must be at least 1 and below lease_ttl_sec (%d)", s.LeaseTTL)
	case s.HeartbeatInterval < 1 || s.HeartbeatInterval > 86400:
		return s, invalid("heartbeat_interval_sec", "must be 1 to 86400 seconds")
	case s.GracePeriod < 0 || s.GracePeriod > 3600:
		return s, invalid("grace_period_sec", "must be 0 to 3600 seconds")
	// An agent has no directory of the task's to resolve a relative path
	// against: it would land in whatever directory the agent runs the
	// task's process from (docs/api/tasks.md#taskspec).
	case s.Workdir != "" && !path.IsAbs(s.Workdir):
		return s, invalid("workdir", "must be an absolute path, not %q", s.Workdir)
	}
	// Bounded so that a task always fits in one event
	// (eventstore.MaxPayload) and its environment and arguments stay far
	// below the kernel's limit for exec.
	if err := CheckReservedEnv(s.Env); err != nil {
		return s, err
	}
	var envBytes int
	for k, v := range s.Env {
		// A key that is not a variable name cannot be read by the task's
		// shell, and one with "=" would corrupt the environment block.
		if !envKey.MatchString(k) {
			return s, invalid("env", "key %q is not a valid variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return s, invalid("env", "value of %s contains a NUL byte", k)
		}
		envBytes += len(k) + len(v)
	}
	if envBytes > MaxEnvBytes {
		return s, invalid("env", "is %d bytes; at most %d", envBytes, MaxEnvBytes)
	}
	var argBytes int
	for _, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			return s, invalid("args", "an argument contains a NUL byte")
		}
		argBytes += len(a)
	}
	if argBytes > MaxArgsBytes {
		return s, invalid("args", "are %d bytes; at most %d", argBytes, MaxArgsBytes)
	}
	if err := checkResources(s.Resources); err != nil {
		return s, err
	}
	if err := checkVideo(s.Video); err != nil {
		return s, err
	}
	if err := checkArtifacts(s.Artifacts); err != nil {
		return s, err
	}
	if err := checkWebhook(s.Webhook); err != nil {
		return s, err
	}
	// These identifiers travel to other services and into URLs (queues,
	// quotas, machines); a conservative character set keeps them safe to
	// log, compare and put in a path without escaping.
	for name, v := range map[string]string{"machine_id": s.MachineID, "group_id": s.GroupID, "parent_id": s.ParentID, "queue": s.Queue, "quota": s.Quota} {
		if v != "" && !ident.MatchString(v) {
			return s, invalid(name, "%q is not a valid identifier", v)
		}
	}
	for _, d := range s.DependsOn {
		if !ident.MatchString(d) {
			return s, invalid("depends_on", "%q is not a valid task id", d)
		}
	}
	for _, l := range s.Labels {
		if !ident.MatchString(l) {
			return s, invalid("labels", "%q is not a valid label", l)
		}
	}
	switch s.Mode {
	case ModeSingle:
		if s.ScatterCount != 0 {
			return s, invalid("distribution.count", "is only for scatter")
		}
	// Broadcast runs on every matching machine; a machine_id would make it a
	// single-machine task, so the contradiction is refused rather than
	// guessed at.
	case ModeBroadcast:
		if s.MachineID != "" || s.ScatterCount != 0 {
			return s, invalid("distribution", "broadcast takes neither machine_id nor count")
		}
	case ModeScatter:
		if s.MachineID != "" {
			return s, invalid("distribution.machine_id", "scatter spreads over machines; it takes no machine_id")
		}
		if s.ScatterCount < 1 || s.ScatterCount > 10000 {
			return s, invalid("distribution.count", "scatter needs a count of 1 to 10000")
		}
	default:
		return s, invalid("distribution.mode", "must be single, broadcast or scatter, not %q", s.Mode)
	}
	// Targets already say where each task runs; another placement beside
	// them would give two answers to one question.
	if (len(in.TargetMachines) > 0 || len(in.TargetIPs) > 0) && (s.MachineID != "" || s.Mode != ModeSingle) {
		return s, invalid("targets", "cannot be combined with machine_id or a broadcast/scatter distribution")
	}
	// 0 is an omitted repeat_count: once.
	if in.Repeat < 0 || in.Repeat > 1000 {
		return s, invalid("repeat_count", "must be 1 to 1000")
	}
	// Repeats run one after another on each placement: the task's own, or
	// each of its targets (docs/api/tasks.md#targeting). Broadcast and
	// scatter choose their machines themselves, and a scatter's machine
	// takes only one of its tasks, so repeating them is refused.
	if in.Repeat > 1 && s.Mode != ModeSingle {
		return s, invalid("repeat_count", "cannot be combined with a broadcast/scatter distribution")
	}
	for _, m := range in.TargetMachines {
		if !ident.MatchString(m) {
			return s, invalid("targets.machine_ids", "%q is not a valid machine id", m)
		}
	}
	for _, ip := range in.TargetIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			return s, invalid("targets.ips", "%q is not an IP address", ip)
		}
	}
	return s, nil
}

// DistinctTargets returns the submission's target machine ids and IPs,
// each once, in the order they first appear: a fan-out makes one task per
// machine and per address however often it is named
// (docs/api/tasks.md#targeting). IPs are compared as addresses, so
// 2001:db8::1 and 2001:DB8:0::1 are one (the first spelling is kept); an
// IP that is not an address (NormalizeSpec refuses it) is compared as
// written.
func (in SpecInput) DistinctTargets() (machines, ips []string) {
	seen := map[string]bool{}
	for _, m := range in.TargetMachines {
		if !seen[m] {
			seen[m] = true
			machines = append(machines, m)
		}
	}
	addrs := map[netip.Addr]bool{}
	clear(seen)
	for _, ip := range in.TargetIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			if addrs[a] {
				continue
			}
			addrs[a] = true
		} else if seen[ip] {
			continue
		}
		seen[ip] = true
		ips = append(ips, ip)
	}
	return machines, ips
}

// MaxWebhookURL bounds a webhook URL.
const MaxWebhookURL = 2048

// CheckWebhook is checkWebhook for the other aggregates that take a
// webhook (a task group's own, docs/api/webhooks.md).
func CheckWebhook(raw string) error { return checkWebhook(raw) }

// checkWebhook accepts "" or an absolute http(s) URL with a host and no
// credentials (package weburl: the rule of every URL a tenant gives to be
// called back). Whether the host is one Taskmesh may call is decided when
// a notification is sent (the address it resolves to then).
func checkWebhook(raw string) error {
	if raw == "" {
		return nil
	}
	if problem := weburl.Problem(raw, MaxWebhookURL); problem != "" {
		return invalid("webhook.url", "%s", problem)
	}
	return nil
}

func checkResources(r map[string]string) error {
	if len(r) > MaxResources {
		return invalid("resources", "names %d resources; at most %d", len(r), MaxResources)
	}
	for name, q := range r {
		if !ident.MatchString(name) {
			return invalid("resources", "%q is not a valid resource name", name)
		}
		// The one rule of quantities (package quantity: syntax, length,
		// range), which admission parses by and the usage consumer meters
		// by; what a quantity means for a queue is for admission to decide.
		if quantity.Check(q) != nil {
			return invalid("resources", "%s: %q is not a quantity such as 2, 500m or 4Gi", name, q)
		}
	}
	return nil
}

// checkArtifacts refuses globs the agent could not match safely: each is
// a path.Match pattern relative to the working directory that never climbs
// out of it, so an artifact can only be a file the task wrote there.
func checkArtifacts(globs []string) error {
	if len(globs) > MaxArtifacts {
		return invalid("artifacts", "names %d globs; at most %d", len(globs), MaxArtifacts)
	}
	for _, g := range globs {
		switch {
		case g == "" || len(g) > 500:
			return invalid("artifacts", "a glob must be 1 to 500 characters")
		case strings.HasPrefix(g, "/"):
			return invalid("artifacts", "%q is absolute; globs are relative to the working directory", g)
		case strings.ContainsRune(g, 0) || strings.Contains(g, "\\"):
			return invalid("artifacts", "%q contains a NUL byte or a backslash", g)
		}
		for _, part := range strings.Split(g, "/") {
			if part == ".." {
				return invalid("artifacts", "%q leaves the working directory", g)
			}
		}
		if _, err := path.Match(g, ""); err != nil {
			return invalid("artifacts", "%q is not a valid glob", g)
		}
	}
	return nil
}

// checkVideo guards the invariants the runner relies on; the video API has
// already applied the documented limits.
func checkVideo(v *Video) error {
	if v == nil {
		return nil
	}
	switch {
	case v.Model == "":
		return invalid("video.model", "is required")
	case v.Type != "text_to_video" && v.Type != "image_to_video":
		return invalid("video.type", "must be text_to_video or image_to_video, not %q", v.Type)
	case v.Prompt == "":
		return invalid("video.prompt", "is required")
	case v.Type == "image_to_video" && v.ImageURL == "":
		return invalid("video.image_url", "is required for image_to_video")
	case v.Width < 16 || v.Height < 16 || v.Width > 4096 || v.Height > 4096:
		return invalid("video.width", "%dx%d is outside 16 to 4096 pixels", v.Width, v.Height)
	case v.Duration < 1 || v.Duration > 60:
		return invalid("video.duration", "must be 1 to 60 seconds")
	case v.FrameNum < 1:
		return invalid("video.frame_num", "must be at least 1")
	case v.Seed < 0:
		return invalid("video.seed", "must be 0 to 2147483647")
	}
	return nil
}

// defaultRenewInterval is the renewal interval of a task that sets none:
// 60 s, or a fifth of a shorter lease (the defaults' own ratio, 300 s and
// 60 s), so that a task setting only a short lease_ttl_sec is valid and
// renews in time (docs/api/tasks.md#taskspec).
func defaultRenewInterval(leaseTTL int) int {
	return max(1, min(DefaultRenewInterval, leaseTTL/5))
}

// ClearablePaths are the spec's lists, maps and strings an update may
// give empty, by their names in an update mask (docs/api/tasks.md,
// UpdateTask). Protobuf cannot tell an empty value from one left out, so
// an update names the ones it gives empty on purpose. An emptied string is
// then checked as a submission's is: "" clears workdir and webhook, and is
// refused for name and command, which every task has.
var ClearablePaths = []string{"args", "env", "depends_on", "distribution.labels", "artifacts", "resources",
	"name", "command", "workdir", "webhook"}

// Clear marks the lists and maps named by paths (ClearablePaths) as given:
// one in leaves empty then replaces the task's instead of keeping it, which
// clears it. Any other path is ErrInvalid naming update_mask, and in is
// unchanged.
func (in *SpecInput) Clear(paths []string) error {
	for _, p := range paths {
		if !slices.Contains(ClearablePaths, p) {
			return invalid("update_mask", "%q is not a list or map an update can clear (one of %s); "+
				"other fields change by giving their new value", p, strings.Join(ClearablePaths, ", "))
		}
	}
	given := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	givenMap := func(m map[string]string) map[string]string {
		if m == nil {
			return map[string]string{}
		}
		return m
	}
	for _, p := range paths {
		switch p {
		case "name", "command", "workdir", "webhook":
			if in.emptied == nil {
				in.emptied = map[string]bool{}
			}
			in.emptied[p] = true
		case "args":
			in.Args = given(in.Args)
		case "env":
			in.Env = givenMap(in.Env)
		case "depends_on":
			in.DependsOn = given(in.DependsOn)
		case "distribution.labels":
			in.Labels = given(in.Labels)
		case "artifacts":
			in.Artifacts = given(in.Artifacts)
		case "resources":
			in.Resources = givenMap(in.Resources)
		}
	}
	return nil
}

// UpdatedSpec is cur changed by in, an update's fields (docs/api/tasks.md,
// UpdateTask): what in leaves out (nil numbers, empty strings, lists and maps
// not named by Clear, no checkpoint object) keeps its value, and the result is validated as a
// submission is.
//
// Where the task runs was settled when it was created: a fan-out (targets,
// repeat_count, a broadcast or a scatter) made it one of several tasks and
// gave it its machine or target address. An update changes one task, so it
// cannot fan out or change that mode, and what the fan-out gave the task
// stays. So does a group_id once set: a group's member or a fan-out's task
// stays in its group (a task without one may be given one).
func UpdatedSpec(cur Spec, in SpecInput) (Spec, error) {
	switch {
	case len(in.TargetMachines) > 0 || len(in.TargetIPs) > 0:
		return cur, invalid("targets", "fan a submission out into several tasks; an update changes one task")
	case in.Repeat > 1:
		return cur, invalid("repeat_count", "makes several tasks at creation; an update changes one task")
	case in.Mode != "" && in.Mode != cur.Mode:
		return cur, invalid("distribution.mode", "is %s: a task keeps the mode it was created with", cur.Mode)
	case cur.Mode == ModeScatter && in.ScatterCount != 0 && in.ScatterCount != cur.ScatterCount:
		return cur, invalid("distribution.count", "is %d: a scatter's count is fixed when its tasks are created", cur.ScatterCount)
	case cur.Mode == ModeBroadcast && in.MachineID != "" && in.MachineID != cur.MachineID:
		return cur, invalid("machine_id", "a broadcast's task runs on the machine it was made for (%s)", cur.MachineID)
	case cur.GroupID != "" && in.GroupID != "" && in.GroupID != cur.GroupID:
		// A group's member or a fan-out's task: the group goes on running
		// it whatever the task says, so moving it would only hide it from
		// the group's list.
		return cur, invalid("group_id", "is %s: a task stays in the group it was created in", cur.GroupID)
	}
	merged := mergeSpec(cur, in)
	// A broadcast's task carries both the mode and the machine it was made
	// for, a pair a new submission may not name; as one task it is checked
	// as the single task it is.
	if cur.Mode == ModeBroadcast {
		merged.Mode = ModeSingle
	}
	s, err := NormalizeSpec(merged)
	if err != nil {
		return s, err
	}
	s.Mode, s.TargetIP = cur.Mode, cur.TargetIP
	return s, nil
}

// mergeSpec overlays the fields set in in on s.
func mergeSpec(s Spec, in SpecInput) SpecInput {
	str := func(v, cur string) string {
		if v != "" {
			return v
		}
		return cur
	}
	// cleared is str for a field an update may give empty on purpose.
	cleared := func(path, v, cur string) string {
		if in.emptied[path] {
			return v
		}
		return str(v, cur)
	}
	num := func(v *int, cur int) *int {
		if v != nil {
			return v
		}
		return &cur
	}
	list := func(v, cur []string) []string {
		if v != nil {
			return v
		}
		return cur
	}
	out := SpecInput{
		Name: cleared("name", in.Name, s.Name), Type: str(in.Type, s.Type), Command: cleared("command", in.Command, s.Command),
		Workdir: cleared("workdir", in.Workdir, s.Workdir), Args: list(in.Args, s.Args), Env: in.Env,
		Timeout: num(in.Timeout, s.Timeout), Priority: num(in.Priority, s.Priority),
		RetryDelay: num(in.RetryDelay, s.RetryDelay), MaxRetries: num(in.MaxRetries, s.MaxRetries),
		MachineID: str(in.MachineID, s.MachineID), GroupID: str(in.GroupID, s.GroupID), ParentID: str(in.ParentID, s.ParentID),
		Queue: str(in.Queue, s.Queue), DependsOn: list(in.DependsOn, s.DependsOn), Mode: str(in.Mode, s.Mode),
		Labels: list(in.Labels, s.Labels), ScatterCount: s.ScatterCount,
		LeaseTTL: num(in.LeaseTTL, s.LeaseTTL), RenewInterval: num(in.RenewInterval, s.RenewInterval),
		HeartbeatInterval: num(in.HeartbeatInterval, s.HeartbeatInterval), GracePeriod: num(in.GracePeriod, s.GracePeriod),
		Resources: in.Resources, Quota: str(in.Quota, s.Quota), Video: in.Video, Webhook: cleared("webhook", in.Webhook, s.Webhook),
		Checkpoint: in.Checkpoint, Artifacts: list(in.Artifacts, s.Artifacts),
	}
	if in.Resources == nil {
		out.Resources = s.Resources
	}
	if in.Video == nil {
		out.Video = s.Video
	}
	if in.ScatterCount != 0 {
		out.ScatterCount = in.ScatterCount
	}
	if in.Env == nil {
		out.Env = s.Env
	}
	if in.Checkpoint == nil {
		out.Checkpoint = &s.Checkpoint
	}
	// A new command line without args brings its own arguments: the old
	// args went with the old command (docs/api/tasks.md, "A command line").
	// A new one-word command keeps them, as any field left out does.
	if t := out.Type; in.Command != "" && len(in.Args) == 0 && (t == TypeShell || t == TypePython) {
		if cmd, words, err := cmdline.Resolve(in.Command, nil); err != nil {
			out.Args = nil // NormalizeSpec refuses the line, naming command
		} else if len(words) > 0 {
			out.Command, out.Args = cmd, words
		} else {
			out.Command = cmd
		}
	}
	return out
}
