package pg_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/taskmesh/taskmesh/platform/pg"
)

// serverDir returns a directory for a test's own server, removed after the
// test. It is searchable by everyone because, when the tests run as root, the
// server runs as the postgres user (t.TempDir's directories are 0700).
func serverDir(t *testing.T) string {
	t.Helper()
	root := os.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		root = "/dev/shm"
	}
	dir, err := os.MkdirTemp(root, "pg-localserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func startServer(t *testing.T, s *pg.LocalServer) {
	t.Helper()
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(testCtx(t), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func setting(t *testing.T, conn *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(testCtx(t), `SELECT current_setting($1)`, name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLocalServerRestartKeepsData(t *testing.T) {
	t.Parallel()
	dir := serverDir(t)
	s := &pg.LocalServer{DataDir: filepath.Join(dir, "data"), Params: map[string]string{"Max_Connections": "42"}} // names are case-insensitive
	startServer(t, s)
	if s.Port == 0 {
		t.Fatal("Port not set after Start")
	}
	port := s.Port
	if err := s.Start(testCtx(t)); err == nil {
		t.Error("second Start of a running server succeeded")
	}

	conn := connect(t, s.URL("postgres"))
	for name, want := range map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"max_connections":         "42",
		"server_encoding":         "UTF8",
	} {
		if got := setting(t, conn, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	exec(t, conn, `CREATE TABLE kept (v text)`)
	exec(t, conn, `INSERT INTO kept VALUES ('survives restart')`)
	conn.Close(context.Background())

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if s.Port != port {
		t.Errorf("port changed across restart: %d -> %d", port, s.Port)
	}
	var v string
	if err := connect(t, s.URL("postgres")).QueryRow(testCtx(t), `SELECT v FROM kept`).Scan(&v); err != nil || v != "survives restart" {
		t.Errorf("after restart: %q, %v", v, err)
	}
	if log, err := os.ReadFile(filepath.Join(dir, "postgres.log")); err != nil || len(log) == 0 {
		t.Errorf("server log next to the data dir: %d bytes, %v", len(log), err)
	}
}

// TestLocalServerKillThenStart crashes a durable server: Start recovers it
// and committed data is there.
func TestLocalServerKillThenStart(t *testing.T) {
	t.Parallel()
	dir := serverDir(t)
	logPath := filepath.Join(dir, "logs", "server.log")
	if err := os.Mkdir(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &pg.LocalServer{DataDir: filepath.Join(dir, "data"), Durable: true, LogPath: logPath}
	startServer(t, s)
	conn := connect(t, s.URL("postgres"))
	if got := setting(t, conn, "fsync"); got != "on" {
		t.Errorf("durable server has fsync=%s", got)
	}
	exec(t, conn, `CREATE TABLE crash (v int)`)
	exec(t, conn, `INSERT INTO crash SELECT generate_series(1, 1000)`)
	// An open transaction at the time of the crash must vanish.
	tx, err := conn.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(testCtx(t), `INSERT INTO crash VALUES (-1)`); err != nil {
		t.Fatal(err)
	}

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := conn.Ping(testCtx(t)); err == nil {
		t.Fatal("connection still works after Kill")
	}
	start := time.Now()
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart after kill took %v", time.Since(start))
	var n, negative int
	if err := connect(t, s.URL("postgres")).QueryRow(testCtx(t), `SELECT count(*), count(*) FILTER (WHERE v < 0) FROM crash`).Scan(&n, &negative); err != nil {
		t.Fatal(err)
	}
	if n != 1000 || negative != 0 {
		t.Errorf("after crash recovery: %d rows, %d uncommitted; want 1000, 0", n, negative)
	}
	log, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(log), "not properly shut down") {
		t.Errorf("log at LogPath does not show crash recovery (%v):\n%s", err, log)
	}
}

func TestLocalServerPassword(t *testing.T) {
	t.Parallel()
	const password = "s3cret with spaces:@/"
	s := &pg.LocalServer{DataDir: filepath.Join(serverDir(t), "data"), Password: password}
	startServer(t, s)

	url := s.URL("postgres")
	if !strings.Contains(url, "postgres:") {
		t.Errorf("URL %q lacks the password", url)
	}
	connect(t, url)

	wrong := &pg.LocalServer{Port: s.Port, Password: "wrong"}
	none := &pg.LocalServer{Port: s.Port}
	for _, u := range []string{wrong.URL("postgres"), none.URL("postgres")} {
		conn, err := pgx.Connect(testCtx(t), u)
		if err == nil {
			conn.Close(context.Background())
			t.Errorf("connected with %s", u)
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
			t.Errorf("connect with %s: %v, want invalid_password (28P01)", u, err)
		}
	}

	// The password is set by initdb; a different one later is reported,
	// not waited on until the context expires.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	s.Password = "changed"
	if err := s.Start(testCtx(t)); err == nil || !strings.Contains(err.Error(), "refuses the connection") {
		t.Errorf("Start with another password than initdb's: %v", err)
	}
	s.Password = password
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatalf("Start after a refused start: %v", err)
	}
	connect(t, s.URL("postgres"))
}

func TestLocalServerRefusesDataDirInUse(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(serverDir(t), "data")
	s := &pg.LocalServer{DataDir: dataDir}
	startServer(t, s)
	second := &pg.LocalServer{DataDir: dataDir}
	err := second.Start(testCtx(t))
	if err == nil {
		second.Stop()
		t.Fatal("a second server started on the same data directory")
	}
	if !strings.Contains(err.Error(), "already running") {
		t.Errorf("error does not say the data dir is in use: %v", err)
	}
	// The first server is unaffected.
	connect(t, s.URL("postgres"))
}

func TestLocalServerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := serverDir(t)
	notEmpty := filepath.Join(dir, "not-empty")
	if err := os.MkdirAll(notEmpty, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notEmpty, "leftover"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*pg.LocalServer{
		"no data dir":            {},
		"non-empty data dir":     {DataDir: notEmpty},
		"listen on all":          {DataDir: filepath.Join(dir, "a"), Params: map[string]string{"listen_addresses": "*"}},
		"override port":          {DataDir: filepath.Join(dir, "b"), Params: map[string]string{"Port": "5432"}},
		"bin dir without server": {DataDir: filepath.Join(dir, "c"), BinDir: dir},
	} {
		if err := s.Start(testCtx(t)); err == nil {
			s.Stop()
			t.Errorf("%s: Start succeeded", name)
		}
	}
	if err := (&pg.LocalServer{DataDir: filepath.Join(dir, "c"), BinDir: dir}).Start(testCtx(t)); !errors.Is(err, pg.ErrNoBinaries) {
		t.Errorf("BinDir without binaries: %v, want ErrNoBinaries", err)
	}
	if err := (&pg.LocalServer{}).Stop(); err != nil {
		t.Errorf("Stop of a never started server: %v", err)
	}
	if err := (&pg.LocalServer{}).Kill(); err != nil {
		t.Errorf("Kill of a never started server: %v", err)
	}
}

// TestLocalServerStartFailureQuotesLog: when postgres refuses to start, the
// error carries its reason from the server log.
func TestLocalServerStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	s := &pg.LocalServer{DataDir: filepath.Join(serverDir(t), "data"), Params: map[string]string{"shared_buffers": "lots"}}
	err := s.Start(testCtx(t))
	if err == nil {
		s.Stop()
		t.Fatal("Start succeeded with an invalid setting")
	}
	if !strings.Contains(err.Error(), `invalid value for parameter "shared_buffers"`) {
		t.Errorf("error lacks the server's reason: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after a failed Start: %v", err)
	}
}

func TestFindBinDir(t *testing.T) {
	dir, err := pg.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("FindBinDir returned %s: %v", dir, err)
		}
	}

	t.Setenv("TASKMESH_PG_BIN", dir)
	if got, err := pg.FindBinDir(); err != nil || got != dir {
		t.Errorf("with TASKMESH_PG_BIN=%s: %q, %v", dir, got, err)
	}

	empty := t.TempDir()
	t.Setenv("TASKMESH_PG_BIN", empty)
	_, err = pg.FindBinDir()
	if !errors.Is(err, pg.ErrNoBinaries) {
		t.Fatalf("with TASKMESH_PG_BIN=%s: %v, want ErrNoBinaries", empty, err)
	}
	for _, want := range []string{"apt-get install -y postgresql", "brew install postgresql@15", "TASKMESH_PG_BIN", empty} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
