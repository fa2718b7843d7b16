package kafka

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Mechanism names accepted in SASLConfig.Mechanism.
const (
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismPlain       = "PLAIN"
)

// mechanism builds the franz-go SASL mechanism. An unknown mechanism or an
// empty user is rejected here: the broker would only answer with a generic
// authentication failure that does not say which setting is wrong.
func (s SASLConfig) mechanism() (sasl.Mechanism, error) {
	if s.Username == "" {
		return nil, errors.New("kafka: SASL username is empty")
	}
	switch strings.ToUpper(strings.TrimSpace(s.Mechanism)) {
	case MechanismScramSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case MechanismScramSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	default:
		return nil, fmt.Errorf("kafka: unknown SASL mechanism %q (want %s, %s or %s)",
			s.Mechanism, MechanismScramSHA256, MechanismScramSHA512, MechanismPlain)
	}
}
