// Package chaos runs Taskmesh as separate OS processes — Postgres, the
// broker, Redis, two gateways, two schedulers, two quota services, the
// consumers service and three agents, all on 127.0.0.x loopback
// addresses — under a steady mixed load while a fault driver, from a
// printed seed, kills and restarts processes, restarts Postgres
// immediately, stalls the broker, stops agents past their heartbeat
// timeout and cuts agents off the network. After a drain period it checks
// the invariants from the event log and the databases, and from the
// records of a witness process some tasks run (witness.go). `taskmesh
// chaos` and `make chaos` run it; docs/chaos.md explains the faults and
// the invariants.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// Config is one run.
type Config struct {
	// Binary is the taskmesh binary every service process runs.
	Binary string
	// RedisServer is the redis-server executable.
	RedisServer string
	// Duration of the load and the faults; Drain is the wait for the
	// accepted work to end afterwards, extended while it keeps ending
	// (see drainer).
	Duration, Drain time.Duration
	// Rate is requests a second (tasks and groups).
	Rate int
	// Seed draws the fault schedule (and the load's mix); 0 picks one.
	Seed int64
	// Short makes the broker stalls and the gaps between faults shorter,
	// for a run of a minute or two.
	Short bool
	// NoFaults runs the load alone: what the deployment serves on this
	// machine with nothing failing, the baseline of a run with faults.
	NoFaults bool
	// PGStats loads pg_stat_statements into the deployment's Postgres and
	// prints, after the drain, the statements that took most of its time
	// from the load's start (internal/pgstats). A Postgres restart clears
	// the figures: the print then covers what ran since the last one.
	PGStats bool
	// Dir keeps the data directories and logs; "" is a fresh temporary
	// directory, removed after a run whose invariants hold.
	Dir string
	Out io.Writer

	redisURL string
}

// Report is what a run found.
type Report struct {
	Seed     int64
	Requests int
	// Offered is the requests made a second over the load's duration:
	// below the rate only when the cap on requests in flight held the
	// load back.
	Offered float64
	Windows []window
	// DrainExtended is how long the drain went on past its period while
	// the open work kept ending (see drainer).
	DrainExtended time.Duration
	// Served says how much of the accepted work ended while the load ran,
	// as a rate beside Offered: the deployment's capacity on this
	// machine, under the faults. Empty when the drain could not read the
	// open work.
	Served string
	// Stalls says how late the driver's own timers woke during the load
	// and the drain (stalls.go): context for a process overlap.
	Stalls string
	// Lapses says how many times an agent went unanswered past its fence,
	// and which of those had no fault in progress (lapses.go).
	Lapses     string
	Invariants []Invariant
	Dir        string // logs and data, kept when an invariant failed
}

// Failed says whether any invariant has offenders.
func (r *Report) Failed() bool {
	for _, i := range r.Invariants {
		if i.Count > 0 {
			return true
		}
	}
	return false
}

// Run starts the deployment, drives load and faults for Duration, drains,
// checks the invariants and stops everything. The error is for a run that
// could not be carried out; a failed invariant is in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	switch {
	case cfg.Binary == "":
		return nil, errors.New("chaos: Config.Binary is empty")
	case cfg.Rate < 1 || cfg.Rate > 10000:
		return nil, fmt.Errorf("chaos: the rate must be 1–10000 requests a second, not %d", cfg.Rate)
	case cfg.Duration <= 0 || cfg.Drain <= 0:
		return nil, fmt.Errorf("chaos: the duration (%s) and the drain (%s) must be positive", cfg.Duration, cfg.Drain)
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()%1_000_000_000 + 1
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.RedisServer == "" {
		cfg.RedisServer = "redis-server"
	}
	// The agents render the load's video generations with ffmpeg; without
	// it they never claim them, and every one would count as lost.
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		return nil, fmt.Errorf("chaos: ffmpeg not found (%v): the load's video generations need it; install it with apt-get install -y ffmpeg", err)
	}
	rep := &Report{Seed: cfg.Seed}
	fmt.Fprintf(cfg.Out, "chaos: seed %d (replay with --seed %d), %s at %d/s\n", cfg.Seed, cfg.Seed, cfg.Duration, cfg.Rate)
	if cfg.NoFaults {
		fmt.Fprintln(cfg.Out, "chaos: no faults: the load alone")
	}
	dir, cleanup, err := runDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	rep.Dir = dir
	d := &deployment{cfg: cfg, dir: dir, exits: exitLog{out: cfg.Out}}
	defer func() {
		if err := d.stop(); err != nil {
			fmt.Fprintln(cfg.Out, "chaos: stopping:", err)
		}
		if cleanup != nil && err == nil && !rep.Failed() {
			cleanup()
		}
	}()
	start := time.Now()
	if err = d.start(ctx); err != nil {
		return rep, fmt.Errorf("start the deployment (logs in %s): %w", dir, err)
	}
	fmt.Fprintf(cfg.Out, "chaos: %d processes up in %s (logs in %s)\n", len(d.procs)+1, time.Since(start).Round(time.Millisecond), filepath.Join(dir, "logs"))
	err = drive(ctx, cfg, d, rep)
	return rep, err
}

// runDir is the run's directory; cleanup removes it when it is temporary.
// Postgres runs as the postgres user when this is root: the directory must
// be reachable by it.
func runDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, nil, os.MkdirAll(dir, 0o755)
	}
	// Short: the agents' shims put Unix sockets under it.
	tmp, err := os.MkdirTemp("", "tmchaos")
	if err != nil {
		return "", nil, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// drive runs the load and the faults, drains and checks.
func drive(ctx context.Context, cfg Config, d *deployment, rep *Report) error {
	l, err := newLoad(d, cfg.Rate, cfg.Seed+1)
	if err != nil {
		return err
	}
	f := &driver{d: d, rnd: rand.New(rand.NewSource(cfg.Seed)), short: cfg.Short, out: cfg.Out}
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	retryCtx, stopRetries := context.WithTimeout(ctx, cfg.Duration+cfg.Drain)
	defer stopRetries()
	var stalls stallLog
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() { defer close(watched); stalls.watch(watchCtx) }()
	var stats *pgxpool.Pool
	if cfg.PGStats {
		if stats, err = pg.Open(ctx, pg.Config{URL: d.dbURL, MaxConns: 1}); err != nil {
			return err
		}
		defer stats.Close()
		if err := pgstats.Reset(ctx, stats); err != nil {
			return fmt.Errorf("pg_stat_statements: %w", err)
		}
	}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if !cfg.NoFaults {
			f.run(loadCtx)
		}
	}()
	made := l.run(loadCtx, retryCtx)
	rep.Offered = float64(made) / cfg.Duration.Seconds()
	<-faultsDone
	fmt.Fprintln(cfg.Out, "chaos: load stopped, draining")
	// Requests still unanswered keep being retried while the work drains.
	l.inflight.Wait()
	stopRetries()
	reqs, errs, rejected := l.snapshot()
	rep.Requests, rep.Windows = len(reqs), f.snapshot()
	if err := writeRecords(d.dir, reqs, errs, rep.Windows); err != nil {
		return err
	}
	db, err := pg.Open(ctx, pg.Config{URL: d.dbURL, MaxConns: 4})
	if err != nil {
		return err
	}
	defer db.Close()
	ended := map[string]bool{}
	dr := &drainer{read: func(ctx context.Context) ([]string, error) { return openWork(ctx, db, reqs, ended) },
		period: cfg.Drain, extension: drainExtension(cfg.Drain, cfg.Duration), stall: drainStall, poll: drainPoll}
	if err := dr.run(ctx); err != nil {
		fmt.Fprintln(cfg.Out, "chaos: drain:", err)
	} else if dr.extendedFor > 0 {
		fmt.Fprintf(cfg.Out, "chaos: drained %s past the drain period (%s): the open work kept ending\n",
			dr.extendedFor, cfg.Drain)
	}
	rep.DrainExtended = dr.extendedFor
	if stats != nil {
		if err := printStatements(ctx, stats, cfg.Out, rep.Windows); err != nil {
			fmt.Fprintln(cfg.Out, "chaos: pg_stat_statements:", err)
		}
	}
	rep.Served = served(reqs, dr.atStart, cfg.Duration)
	stopWatch()
	<-watched
	rep.Stalls = stalls.summary()
	rep.Lapses = d.lapses(rep.Windows)
	return check(ctx, cfg, d, db, rep, reqs, errs, rejected)
}

// printStatements prints the statements that took most of Postgres's time
// since the load began, or since its last restart among windows.
func printStatements(ctx context.Context, pool *pgxpool.Pool, w io.Writer, windows []window) error {
	restarts := 0
	for _, win := range windows {
		if win.kind == faultPostgres {
			restarts++
		}
	}
	if restarts > 0 {
		fmt.Fprintf(w, "chaos: Postgres restarted %d times: the statements below ran since its last start\n", restarts)
	}
	return pgstats.Print(ctx, pool, w)
}

// served describes the accepted work that ended while the load ran:
// everything accepted (acceptedWork) but what the drain found open when
// it began. openAtStop < 0 (never read) gives "".
func served(reqs []request, openAtStop int, load time.Duration) string {
	if openAtStop < 0 {
		return ""
	}
	accepted := acceptedWork(reqs)
	ended := max(0, accepted-openAtStop)
	return fmt.Sprintf("%d of %d accepted requests ended (%.1f/s); %d open when it stopped",
		ended, accepted, float64(ended)/load.Seconds(), openAtStop)
}

func check(ctx context.Context, cfg Config, d *deployment, db *pgxpool.Pool, rep *Report, reqs []request, errs []serverError, rejected []string) error {
	lost, err := checkLost(ctx, db, reqs)
	if err != nil {
		return err
	}
	jobs, err := checkJobsFailed(ctx, db, reqs)
	if err != nil {
		return err
	}
	videos, err := checkVideosFailed(ctx, db, reqs)
	if err != nil {
		return err
	}
	doubles, err := checkDoubleRuns(ctx, db)
	if err != nil {
		return err
	}
	stubborn := 0
	for _, r := range reqs {
		if r.kind == "stubborn" && r.id != "" {
			stubborn++
		}
	}
	overlaps, err := checkOverlaps(d.witnessDir, stubborn)
	if err != nil {
		return fmt.Errorf("read the witness's records: %w", err)
	}
	admitted, err := checkOverAdmission(ctx, db)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	stream, err := checkStream(sctx, db, []string{d.brokerAddr})
	if err != nil {
		return fmt.Errorf("read the relay's topics back: %w", err)
	}
	replay, out, err := checkReplay(ctx, cfg.Binary, d.dbURL, d.brokerAddr)
	if err != nil {
		return err
	}
	if replay.Count > 0 {
		fmt.Fprint(cfg.Out, out)
	}
	rep.Invariants = []Invariant{checkHealed(rep.Windows), checkExits(d.exits.snapshot(), len(d.procs)), lost, jobs, videos, checkUnanswered(reqs, rejected), doubles, overlaps, admitted, replay,
		checkServerErrors(errs, rep.Windows, outageSlack), stream}
	rep.print(cfg.Out)
	return nil
}

// writeRecords keeps what the run did beside the logs, for a failed run's
// post-mortem: requests.tsv (key, kind, accepted id), server-errors.tsv
// and faults.tsv (times in UTC).
func writeRecords(dir string, reqs []request, errs []serverError, windows []window) error {
	const ts = "15:04:05.000"
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", r.key, r.kind, r.id)
	}
	if err := os.WriteFile(filepath.Join(dir, "requests.tsv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	for _, e := range errs {
		fmt.Fprintf(&b, "%s\t%s\t%d\t%s\t%q\n", e.at.UTC().Format(ts), e.via, e.status, e.code, e.body)
	}
	if err := os.WriteFile(filepath.Join(dir, "server-errors.tsv"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	b.Reset()
	for _, w := range windows {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%v\n", w.start.UTC().Format(ts), w.end.UTC().Format(ts), w.kind, w.target, w.err)
	}
	return os.WriteFile(filepath.Join(dir, "faults.tsv"), []byte(b.String()), 0o644)
}

// outageSlack is how long after a fault healed a 503 still belongs to it:
// clients reconnect with backoff, a restarted service warms up.
const outageSlack = 10 * time.Second

func (r *Report) print(w io.Writer) {
	kinds := map[string]int{}
	for _, win := range r.Windows {
		k := win.kind
		if win.kind == faultKill {
			k = "kill " + strings.TrimRight(strings.TrimRight(win.target, "0123456789"), "-")
		}
		kinds[k]++
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\nchaos: seed %d, %d requests (%.1f/s), %d faults:", r.Seed, r.Requests, r.Offered, len(r.Windows))
	for _, k := range names {
		fmt.Fprintf(w, " %s=%d", k, kinds[k])
	}
	fmt.Fprintln(w)
	if r.Served != "" {
		fmt.Fprintf(w, "chaos: work served during the load: %s\n", r.Served)
	}
	if r.Stalls != "" {
		fmt.Fprintf(w, "chaos: machine stalls (the driver's timers): %s\n", r.Stalls)
	}
	if r.Lapses != "" {
		fmt.Fprintf(w, "chaos: agents unanswered past their fence: %s\n", r.Lapses)
	}
	for _, i := range r.Invariants {
		mark := "ok  "
		if i.Count > 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-42s %6d   (%s)\n", mark, i.Name, i.Count, i.Checked)
		for _, id := range i.First {
			fmt.Fprintln(w, "         ", id)
		}
	}
	if r.Failed() {
		fmt.Fprintf(w, "chaos: FAILED with seed %d; logs and data kept in %s\n", r.Seed, r.Dir)
	} else {
		fmt.Fprintln(w, "chaos: every invariant holds")
	}
}

// ErrInvariant is returned by callers that turn a failed report into an
// error.
var ErrInvariant = errors.New("chaos: an invariant does not hold")
