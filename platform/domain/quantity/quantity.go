// Package quantity holds the one rule for the resource quantities a task
// asks for and a queue's quotas are written in — Kubernetes quantity
// strings ("8", "500m", "1.5", "4Gi") — and converts them to and from the
// milli-units admission counts in.
//
// A quantity is a plain decimal number with an optional SI or binary
// suffix (Pattern), at most MaxLen characters, whose value fits int64
// milli-units: no sign, no exponent, so never negative, NaN or infinite.
// The protos' patterns and lengths spell the same rule (TaskSpec.resources,
// the admission protos), the scheduler checks a task's resources by it when
// the task is submitted or updated, admission parses them by it, and the
// usage consumer refuses a task event whose GPU quantity breaks it
// (docs/api/usage.md, "What is metered"), so a value the edge refuses can
// never be counted.
//
// It is pure, and sits under platform/domain so that every service reads
// quantities by the one rule.
package quantity

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// Pattern is the syntax of a quantity, as the protos' patterns spell it.
const Pattern = `^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$`

// MaxLen bounds a quantity's length, as the protos' max_len does.
const MaxLen = 32

var syntax = regexp.MustCompile(Pattern)

// ErrInvalid is returned for a string that is not a quantity, or one too
// large for int64 milli-units.
var ErrInvalid = errors.New("invalid quantity")

// suffixes map to their multiplier in milli-units.
var suffixes = []struct {
	s string
	m *big.Int
}{
	// Two-letter suffixes first, so "Mi" is not read as "M".
	{"Ki", pow(1024, 1)}, {"Mi", pow(1024, 2)}, {"Gi", pow(1024, 3)}, {"Ti", pow(1024, 4)}, {"Pi", pow(1024, 5)},
	{"m", big.NewInt(1)}, {"k", pow(1000, 1)}, {"M", pow(1000, 2)}, {"G", pow(1000, 3)}, {"T", pow(1000, 4)}, {"P", pow(1000, 5)},
}

// pow returns b^e in milli-units (times 1000).
func pow(b, e int64) *big.Int {
	r := new(big.Int).Exp(big.NewInt(b), big.NewInt(e), nil)
	return r.Mul(r, big.NewInt(1000))
}

// Check returns nil for a quantity the rule accepts, else an error
// wrapping ErrInvalid.
func Check(s string) error {
	_, err := Milli(s)
	return err
}

// Milli parses s into milli-units. A fraction of a milli-unit rounds up,
// as Kubernetes does, so a request never counts for less than it asks.
func Milli(s string) (int64, error) {
	if len(s) > MaxLen {
		return 0, fmt.Errorf("%w: %q is longer than %d characters", ErrInvalid, s, MaxLen)
	}
	if !syntax.MatchString(s) {
		return 0, fmt.Errorf("%w: %q", ErrInvalid, s)
	}
	num, mult := s, big.NewInt(1000)
	for _, suf := range suffixes {
		if strings.HasSuffix(s, suf.s) {
			num, mult = strings.TrimSuffix(s, suf.s), suf.m
			break
		}
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrInvalid, s)
	}
	r.Mul(r, new(big.Rat).SetInt(mult))
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, fmt.Errorf("%w: %q is too large", ErrInvalid, s)
	}
	return q.Int64(), nil
}

// Units is s as a number of units ("500m" is 0.5, "1k" 1000): finite,
// non-negative and at most math.MaxInt64/1000, or an error wrapping
// ErrInvalid.
func Units(s string) (float64, error) {
	milli, err := Milli(s)
	if err != nil {
		return 0, err
	}
	return float64(milli) / 1000, nil
}

// Format renders milli-units as the shortest plain quantity: whole units
// without a suffix ("8"), otherwise milli-units ("500m").
func Format(milli int64) string {
	if milli%1000 == 0 {
		return strconv.FormatInt(milli/1000, 10)
	}
	return strconv.FormatInt(milli, 10) + "m"
}

// MilliMap parses every value of m; the error names the key at fault.
func MilliMap(m map[string]string) (map[string]int64, error) {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := Milli(v)
		if err != nil {
			return nil, fmt.Errorf("resources[%s]: %w", k, err)
		}
		out[k] = n
	}
	return out, nil
}
