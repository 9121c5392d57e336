package colibri

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// Three prompts of different lengths, stepped together: the same logits (bit-identical with
// today's kernels; a tolerance for kernels whose rounding depends on the row count) and the
// same greedy tokens as separate Infer calls on twin sessions, also with Gumbel routing.
func TestInferBatchEqualsSeparateCalls(t *testing.T) {
	m := openModel(t)
	ids := oracle.InputIDs
	for _, opts := range [][]SessionOption{nil, {WithRouting(RoutingGumbel, 5, 1)}} {
		batched := []*Session{newSession(t, m, opts...), newSession(t, m, opts...), newSession(t, m, opts...)}
		twins := []*Session{newSession(t, m, opts...), newSession(t, m, opts...), newSession(t, m, opts...)}
		feed := [][]int32{ids[:3], ids[3:8], ids[5:14]}
		for step := 0; step < 9; step++ {
			got, err := m.InferBatch(batched, feed)
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			next := make([][]int32, 3)
			for i, tw := range twins {
				want, err := tw.Infer(feed[i])
				if err != nil {
					t.Fatal(err)
				}
				maxAbs, maxDiff := 0.0, 0.0
				for j := range want {
					maxAbs = math.Max(maxAbs, math.Abs(float64(want[j])))
					maxDiff = math.Max(maxDiff, math.Abs(float64(got[i][j])-float64(want[j])))
				}
				if len(got[i]) != len(want) || !(maxDiff <= 1e-5*maxAbs) {
					t.Fatalf("step %d, sequence %d: %d logits, max diff %g", step, i, len(got[i]), maxDiff)
				}
				if argmax(got[i]) != argmax(want) {
					t.Fatalf("step %d, sequence %d: greedy token differs", step, i)
				}
				next[i] = []int32{argmax(want)}
			}
			feed = next
		}
	}
}

func TestInferBatchShapesAndCallbacks(t *testing.T) {
	m := openModel(t)
	V := m.Info().VocabSize
	a, b := newSession(t, m, WithAllLogits(true)), newSession(t, m)
	got, err := m.InferBatch([]*Session{a, b}, [][]int32{{1, 2, 3}, {4, 5}})
	if err != nil || len(got) != 2 || len(got[0]) != 3*V || len(got[1]) != V {
		t.Fatalf("shapes: %v", err)
	}
	var positions []int
	if err := b.SetRouteCallback(func(r Route) bool { positions = append(positions, r.Position); return true }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.InferBatch([]*Session{a, b}, [][]int32{{1}, {2, 3}}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(positions, []int{2}) {
		t.Errorf("route callback of session b: positions %v, want [2] (stops after the first record)", positions)
	}
	if err := b.SetRouteCallback(func(Route) bool { panic("batch boom") }); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "batch boom" {
				t.Errorf("recovered %v, want batch boom", r)
			}
		}()
		m.InferBatch([]*Session{a, b}, [][]int32{{1}, {2}})
	}()
	// Neither session is left busy.
	if err := b.SetRouteCallback(nil); err != nil {
		t.Fatal(err)
	}
	// The step whose callback panicked was undone for both sessions.
	if pa, _, err := a.Position(); err != nil || pa != 4 {
		t.Errorf("a: position %d, %v", pa, err)
	}
	if pb, _, err := b.Position(); err != nil || pb != 4 {
		t.Errorf("b: position %d, %v", pb, err)
	}
}

func TestInferBatchErrorsChangeNothing(t *testing.T) {
	m := openModel(t)
	other := openModel(t)
	a, b, small := newSession(t, m), newSession(t, m), newSession(t, m, WithContextSize(4))
	foreign := newSession(t, other)
	closed := newSession(t, m)
	closed.Close()
	if _, err := m.InferBatch([]*Session{a, b, small}, [][]int32{{1, 2}, {3}, {4, 5, 6}}); err != nil {
		t.Fatal(err)
	}
	positions := func() []int {
		var out []int
		for _, s := range []*Session{a, b, small} {
			p, _, err := s.Position()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	before := positions()
	V := int32(m.Info().VocabSize)
	cases := []struct {
		what     string
		sessions []*Session
		tokens   [][]int32
		want     error
		needle   string
	}{
		{"nil session", []*Session{a, nil}, [][]int32{{1}, {2}}, ErrNullArgument, "sessions[1]"},
		{"empty token list", []*Session{a, b}, [][]int32{{1}, {}}, ErrInvalidArgument, "n_tokens[1] is 0"},
		{"another model", []*Session{a, foreign}, [][]int32{{1}, {2}}, ErrInvalidArgument, "another model"},
		{"context full", []*Session{a, b, small}, [][]int32{{1}, {2}, {3, 4}}, ErrContextFull, "sequence 2"},
		{"bad id", []*Session{a, b}, [][]int32{{1}, {V}}, ErrInvalidArgument, "vocabulary"},
		{"negative id", []*Session{a, b}, [][]int32{{-1}, {2}}, ErrInvalidArgument, "tokens[0]"},
		{"no sessions", nil, nil, ErrInvalidArgument, "n_sessions is 0"},
		{"repeated session", []*Session{a, b, a}, [][]int32{{1}, {2}, {3}}, ErrInvalidArgument, "same session"},
		{"mismatched lists", []*Session{a, b}, [][]int32{{1}}, ErrInvalidArgument, "token lists"},
		{"closed session", []*Session{a, closed}, [][]int32{{1}, {2}}, ErrClosed, ""},
	}
	for _, c := range cases {
		_, err := m.InferBatch(c.sessions, c.tokens)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.needle) {
			t.Errorf("%s: %v, want %v containing %q", c.what, err, c.want, c.needle)
		}
		if got := positions(); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: positions %v, want %v", c.what, got, before)
		}
	}
	// A busy session is refused, and no other session is left busy.
	if err := b.SetRouteCallback(func(Route) bool {
		_, err := m.InferBatch([]*Session{a, b}, [][]int32{{1}, {2}})
		if !errors.Is(err, ErrBusy) {
			t.Errorf("a batch with a busy session: %v", err)
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Infer([]int32{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.InferBatch([]*Session{a, small}, [][]int32{{1}, {2}}); err != nil {
		t.Errorf("after the refused batch: %v", err)
	}
}
