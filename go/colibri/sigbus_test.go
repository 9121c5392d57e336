package colibri

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
)

// faultSink keeps a read from being optimised away.
var faultSink byte

// copyModel copies the test model to a file the test may damage.
func copyModel(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "m.colibri")
	in, err := os.Open(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// A model file truncated under its mapping, from a Go host: the read of the chat template
// inside the library faults (SIGBUS on a goroutine's thread, which runs the handler on Go's
// alternate signal stack); the guard absorbs it and the call returns ErrModelChanged, and so do
// the next calls. A fault in Go's own code still reaches Go's handler (a recoverable panic under
// SetPanicOnFault), not ours.
func TestSigbusGuardUnderGo(t *testing.T) {
	path := copyModel(t)
	m, err := Open(path, WithSigbusGuard(true))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := newSession(t, m)
	if _, err := s.Infer([]int32{1, 2, 3}); err != nil {
		t.Fatalf("Infer before the damage: %v", err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ChatRender([]Message{{Role: "user", Content: "hi"}}, true); !errors.Is(err, ErrModelChanged) {
		t.Fatalf("ChatRender on a truncated file: %v, want ErrModelChanged", err)
	}
	if _, err := s.Infer([]int32{4}); !errors.Is(err, ErrModelChanged) {
		t.Fatalf("Infer on a truncated file: %v, want ErrModelChanged", err)
	}

	// Go's own mapping of another file, truncated: the fault is Go's.
	other := filepath.Join(t.TempDir(), "other.bin")
	if err := os.WriteFile(other, make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, 1<<16, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(data)
	if err := os.Truncate(other, 0); err != nil {
		t.Fatal(err)
	}
	recovered := func() (r any) {
		old := debug.SetPanicOnFault(true)
		defer debug.SetPanicOnFault(old)
		defer func() { r = recover() }()
		faultSink = data[8192]
		return nil
	}()
	if recovered == nil {
		t.Fatal("reading a truncated Go mapping did not fault")
	}
}
