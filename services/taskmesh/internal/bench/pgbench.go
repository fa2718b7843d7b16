package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/timerslack"
)

// pgbench measures the server's ceiling for small write transactions with
// `pgbench -N -M prepared` from the given number of clients. -N is the
// simple-update script: BEGIN; UPDATE pgbench_accounts; SELECT its
// balance; INSERT INTO pgbench_history; END — one durable commit per
// transaction, which is what a command of one transaction costs. -M
// prepared sends prepared statements, as pgx does.
type pgbench struct {
	server  *pg.LocalServer
	bin     string
	clients int
}

func newPgbench(ctx context.Context, server *pg.LocalServer, clients int) (*pgbench, error) {
	binDir := server.BinDir
	if binDir == "" {
		var err error
		if binDir, err = pg.FindBinDir(); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(binDir, "pgbench")
	if _, err := exec.LookPath(bin); err != nil {
		if bin, err = exec.LookPath("pgbench"); err != nil {
			return nil, fmt.Errorf("pgbench not found (install the postgresql-contrib or postgresql-client package): %w", err)
		}
	}
	pb := &pgbench{server: server, bin: bin, clients: clients}
	pool, err := pg.Open(ctx, pg.Config{URL: server.URL("postgres")})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `DROP DATABASE IF EXISTS pgbench`); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE DATABASE pgbench`); err != nil {
		return nil, err
	}
	// pgbench is a peer of the services' figures, so it runs with the
	// slack the benchmark was started with, as the tasks and Postgres do.
	out, err := timerslack.CombinedOutput(exec.CommandContext(ctx, bin, "-i", "-q", "-s", "10", server.URL("pgbench")))
	if err != nil {
		return nil, fmt.Errorf("pgbench -i: %w\n%s", err, out)
	}
	return pb, nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// run returns transactions per second over d.
func (pb *pgbench) run(ctx context.Context, d time.Duration) (float64, error) {
	out, err := timerslack.CombinedOutput(exec.CommandContext(ctx, pb.bin, "-N", "-M", "prepared", "-c", strconv.Itoa(pb.clients), "-j", "2",
		"-T", strconv.Itoa(int(d.Seconds())), pb.server.URL("pgbench")))
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in output:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
