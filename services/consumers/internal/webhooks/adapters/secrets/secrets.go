// Package secrets seals tenants' webhook signing keys for storage: the
// key must be read back to sign, so it cannot be kept as a hash like an API
// key; it is stored encrypted (AES-256-GCM) under the consumers service's
// key, which lives outside the database (a file, a secret manager).
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// KeySize is the length of the service's key.
const KeySize = 32

// Sealer encrypts and decrypts signing keys.
type Sealer struct{ aead cipher.AEAD }

// New returns a sealer under key (KeySize bytes).
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("webhook key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal returns nonce ‖ ciphertext of plain, bound to tenant (a sealed key
// copied to another tenant's row does not open).
func (s *Sealer) Seal(tenant string, plain []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(tenant)), nil
}

// Open reverses Seal.
func (s *Sealer) Open(tenant string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("webhook key: sealed key too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(tenant))
	if err != nil {
		return nil, errors.New("webhook key: cannot open the sealed key (wrong service key?)")
	}
	return plain, nil
}
