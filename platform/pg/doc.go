// Package pg is Taskmesh's PostgreSQL toolkit: connection pools with tracing
// and a per-service search_path (Open), transactions (InTx), forward-only
// schema migrations (LoadMigrations, Migrate), session advisory locks that
// elect a single active worker (TryLock), helpers that classify server errors
// (IsUniqueViolation, IsSerializationFailure), and a PostgreSQL server run
// from the system's binaries for tests and `taskmesh dev` (LocalServer).
//
// Every service owns one schema in a shared database. Pools put that schema
// first in search_path so queries use unqualified names, and Migrate keeps a
// schema_migrations table per schema so services migrate independently.
package pg
