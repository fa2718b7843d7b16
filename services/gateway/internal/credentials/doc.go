// Package credentials stores and checks the gateway's credentials: tenants,
// their API keys, and executor agents' tokens, in the gateway's Postgres
// schema (see Migrations).
//
// Secrets are 256 random bits, shown once when created and never stored. A
// bearer string looks like tm_<prefix>_<secret> (API key) or
// tma_<prefix>_<secret> (agent token): the 8-character prefix is random and
// not secret, it is stored in clear and finds the row; the row keeps only the
// SHA-256 of the whole string, compared in constant time. A database leak
// therefore reveals no usable secret, and logs may name the prefix or the key
// id but never the bearer string.
//
// Agent tokens are bound to their agent id and to where they are used from
// (docs/api/README.md#credentials). A token created with allowed CIDRs is
// accepted only from those networks (the answer for NAT and elastic IPs). A
// token without is bound to the first address it is used from; use from any
// other address is refused and revokes the token at once, because a second
// address means the secret has leaked. Rotation issues a new secret, stops
// the old one and lets the new one bind afresh.
//
// Every change — a tenant created or updated, an API key or operator key
// issued or revoked, an agent registered, rotated, revoked, moved,
// drained or undrained — appends one AdminEvent to the events table of
// the same schema, in the transaction of the change (events.go): the
// gateway's outbox, published to the admin topic and turned into audit
// log entries (docs/events.md#admin-events). Events name keys and tokens
// by id and prefix, never by secret or hash.
//
// Errors: Authenticate returns an *AuthError wrapping ErrUnauthenticated or
// ErrForbidden; management methods return ErrInvalid, ErrNotFound, ErrExists
// or ErrRevoked (wrapped, test with errors.Is); anything else is a database
// failure.
package credentials
