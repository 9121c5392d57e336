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
