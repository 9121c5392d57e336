package colibri

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A session saved to a file and loaded into a fresh one continues with identical logits; the
// stored ids come back; a damaged file is refused and changes nothing.
func TestSaveLoadState(t *testing.T) {
	m := openModel(t)
	a := newSession(t, m)
	prompt := oracle.InputIDs
	if _, err := a.Infer(prompt); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.state")
	if err := a.SaveState(path, prompt); err != nil {
		t.Fatal(err)
	}
	b := newSession(t, m)
	ids, err := b.LoadState(path)
	if err != nil || !reflect.DeepEqual(ids, prompt) {
		t.Fatalf("LoadState = %v, %v; want %v", ids, err, prompt)
	}
	la, err := a.Infer([]int32{5})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Infer([]int32{5})
	if err != nil || !reflect.DeepEqual(la, lb) {
		t.Fatalf("restored session differs (err %v)", err)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x20
	bad := filepath.Join(t.TempDir(), "bad.state")
	if err := os.WriteFile(bad, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _, _ := b.Position()
	_, err = b.LoadState(bad)
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidArgument {
		t.Fatalf("damaged file: %v", err)
	}
	if pos, _, _ := b.Position(); pos != before {
		t.Fatalf("a refused load moved the session from %d to %d", before, pos)
	}
}

// A session copied in memory continues with identical logits, and the source is unaffected by
// what the copy does; a context too small is refused and changes nothing.
func TestCopyFrom(t *testing.T) {
	m := openModel(t)
	a := newSession(t, m)
	if _, err := a.Infer(oracle.InputIDs); err != nil {
		t.Fatal(err)
	}
	b := newSession(t, m)
	if err := b.CopyFrom(a); err != nil {
		t.Fatal(err)
	}
	if err := b.CopyFrom(b); err != nil {
		t.Fatalf("a copy to itself: %v", err)
	}
	lb, err := b.Infer([]int32{5})
	if err != nil {
		t.Fatal(err)
	}
	la, err := a.Infer([]int32{5})
	if err != nil || !reflect.DeepEqual(la, lb) {
		t.Fatalf("the copy continues differently (err %v)", err)
	}
	if pos, _, _ := a.Position(); pos != len(oracle.InputIDs)+1 {
		t.Fatalf("source at %d after the copy's call", pos)
	}
	small := newSession(t, m, WithContextSize(1))
	var e *Error
	if err := small.CopyFrom(a); !errors.As(err, &e) || e.Status != StatusContextFull {
		t.Fatalf("a context too small: %v", err)
	}
	if pos, _, _ := small.Position(); pos != 0 {
		t.Fatalf("a refused copy moved the session to %d", pos)
	}
}
