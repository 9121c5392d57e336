package colibri

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// vmFlags returns the VmFlags of this process's mappings of path by address range.
func vmFlags(t *testing.T, path string) map[string][]string {
	name, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	if name, err = filepath.Abs(name); err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	mapping := ""
	for _, line := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			mapping = ""
			if len(f) > 5 && f[5] == name {
				mapping = f[0]
			}
		case mapping != "" && f[0] == "VmFlags:":
			out[mapping] = f[1:]
		}
	}
	return out
}

// The model mapping carries the huge-page advice (the kernel's "hg" VmFlag) by default and not
// with WithHugePages(false); the logits are the same either way.
func TestHugePageAdviceIsOnByDefaultAndCanBeTurnedOff(t *testing.T) {
	var got [][]float32
	for _, c := range []struct {
		opts []Option
		huge bool
	}{{nil, true}, {[]Option{WithHugePages(false)}, false}} {
		before := vmFlags(t, modelPath)
		m, err := Open(modelPath, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		var added [][]string
		for r, flags := range vmFlags(t, modelPath) {
			if _, old := before[r]; !old {
				added = append(added, flags)
			}
		}
		if len(added) != 1 || slices.Contains(added[0], "hg") != c.huge {
			t.Errorf("huge pages %v: VmFlags of the new model mapping %v", c.huge, added)
		}
		s, err := m.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		logits, err := s.Infer([]int32{5, 6, 7, 8})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, logits)
		s.Close()
		m.Close()
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Error("the advice changed the logits")
	}
}
