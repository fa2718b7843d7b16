package secrets

import (
	"bytes"
	"testing"
)

func TestSealOpen(t *testing.T) {
	s, err := New(bytes.Repeat([]byte{1}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.Seal("acme", []byte("signing key"))
	if err != nil || bytes.Contains(sealed, []byte("signing key")) {
		t.Fatalf("sealed %x, %v", sealed, err)
	}
	if plain, err := s.Open("acme", sealed); err != nil || string(plain) != "signing key" {
		t.Errorf("open = %q, %v", plain, err)
	}
	if _, err := s.Open("globex", sealed); err == nil {
		t.Error("another tenant opened acme's key")
	}
	other, _ := New(bytes.Repeat([]byte{2}, KeySize))
	if _, err := other.Open("acme", sealed); err == nil {
		t.Error("another service key opened it")
	}
	if _, err := New([]byte("short")); err == nil {
		t.Error("a short key was accepted")
	}
}
