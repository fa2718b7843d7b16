package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"syscall"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/pgstats"
)

// env is a durable Postgres server and an embedded broker under dir.
type env struct {
	server *pg.LocalServer
	broker *kafka.Embedded
	dir    string
	lock   *os.File // held while the benchmark runs
	// log receives the services' logs (Common.ServiceLog; discarded
	// without it), logFile is its file.
	log     *slog.Logger
	logFile *os.File
}

// startEnv starts the server and the broker of one benchmark under
// c.Dir/name. params are extra server settings. pg_stat_statements is
// loaded only with c.PGStats: tracking every statement (and its planning)
// costs the server time that would be charged to whatever is measured.
func startEnv(ctx context.Context, c Common, name string, params map[string]string) (*env, error) {
	dir := c.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Two benchmarks in one work directory would delete each other's
	// servers: hold a lock on it for the whole run.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another benchmark is running in %s (pass --dir to use another directory)", dir)
	}
	dir = filepath.Join(dir, name)
	if err := os.RemoveAll(dir); err != nil {
		lock.Close()
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		lock.Close()
		return nil, err
	}
	server := &pg.LocalServer{DataDir: filepath.Join(dir, "pg"), Durable: true, Params: serverParams(c.PGStats, params)}
	if err := server.Start(ctx); err != nil {
		lock.Close()
		return nil, err
	}
	broker, err := kafka.StartEmbedded(kafka.EmbeddedOptions{Partitions: 16})
	if err != nil {
		_ = server.Stop()
		lock.Close()
		return nil, err
	}
	e := &env{server: server, broker: broker, dir: dir, lock: lock}
	if e.log, e.logFile, err = serviceLog(c, name); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// serviceLog is the logger of the services benchmark name runs: JSON
// lines into c.ServiceLog, or nowhere without it (file is then nil).
func serviceLog(c Common, name string) (log *slog.Logger, file *os.File, err error) {
	if c.ServiceLog == "" {
		return slog.New(slog.DiscardHandler), nil, nil
	}
	if file, err = os.Create(c.ServiceLog); err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewJSONHandler(file, nil)).With("benchmark", name), file, nil
}

// serverParams are the server's settings beyond PostgreSQL's durable
// defaults.
func serverParams(pgStats bool, extra map[string]string) map[string]string {
	params := pgstats.Params(pgStats, map[string]string{"max_connections": "300"})
	maps.Copy(params, extra)
	return params
}

func (e *env) close() {
	e.broker.Close()
	_ = e.server.Stop()
	_ = os.RemoveAll(e.dir)
	e.lock.Close()
	if e.logFile != nil {
		_ = e.logFile.Close()
	}
}

// dropDatabase drops a database and checkpoints the server, so that what
// was written there is not flushed during the next measurement.
func (e *env) dropDatabase(ctx context.Context, db string) error {
	return e.onServer(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`, `CHECKPOINT`)
}

// createDatabase (re)creates an empty database on the server.
func (e *env) createDatabase(ctx context.Context, db string) error {
	return e.onServer(ctx, `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`, `CREATE DATABASE `+db)
}

// onServer runs statements in turn on the server's postgres database.
func (e *env) onServer(ctx context.Context, statements ...string) error {
	admin, err := pg.Open(ctx, pg.Config{URL: e.server.URL("postgres")})
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, s := range statements {
		if _, err := admin.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
