// Package quantity converts Kubernetes quantity strings ("8", "500m",
// "1.5", "4Gi") to and from the milli-units the admission core counts in.
// Only the forms the admission protos allow are accepted (see their
// patterns): a decimal number with an optional SI or binary suffix.
package quantity

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

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

// Milli parses s into milli-units. A fraction of a milli-unit rounds up,
// as Kubernetes does, so a request never counts for less than it asks.
func Milli(s string) (int64, error) {
	num, mult := s, big.NewInt(1000)
	for _, suf := range suffixes {
		if strings.HasSuffix(s, suf.s) {
			num, mult = strings.TrimSuffix(s, suf.s), suf.m
			break
		}
	}
	if num == "" || strings.HasPrefix(num, "+") || strings.HasPrefix(num, "-") || strings.ContainsAny(num, "eE_") {
		return 0, fmt.Errorf("%w: %q", ErrInvalid, s)
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
