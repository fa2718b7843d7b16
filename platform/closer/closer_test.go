package closer

import (
	"errors"
	"slices"
	"testing"
)

func TestCloseReleasesInReverseOrderOnce(t *testing.T) {
	var got []string
	var s Stack
	errB := errors.New("b failed")
	s.PushFunc(func() { got = append(got, "a") })
	s.Push(func() error { got = append(got, "b"); return errB })
	s.Push(func() error { got = append(got, "c"); return nil })

	if err := s.Close(); !errors.Is(err, errB) {
		t.Errorf("Close = %v, want the error of b", err)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(got, want) {
		t.Errorf("released %v, want %v (the last opened first, a failure not stopping the rest)", got, want)
	}
	if err := s.Close(); err != nil || len(got) != 3 {
		t.Errorf("second Close = %v after releasing %v; want nothing released twice", err, got)
	}
	s.PushFunc(func() { got = append(got, "d") })
	if err := s.Close(); err != nil || !slices.Equal(got, []string{"c", "b", "a", "d"}) {
		t.Errorf("Close after a new push = %v, released %v", err, got)
	}
}

func TestZeroStackClosesToNil(t *testing.T) {
	var s Stack
	if err := s.Close(); err != nil {
		t.Fatalf("Close of an empty stack = %v", err)
	}
}
