package colibri

import (
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
)

// pooledOracle pools transformers' final-normed hidden states of the fixture's prompt
// (oracle/hidden_f32.npy, tools/make_embedding_fixtures.py) as colibri_embed documents.
func pooledOracle(t *testing.T, p Pooling, normalize bool) []float64 {
	shape, h := readNpyF32(t, filepath.Join(fixtureDir, "oracle", "hidden_f32.npy"))
	n, d := shape[0], shape[1]
	v := make([]float64, d)
	for j := range v {
		switch p {
		case PoolingMean:
			for i := 0; i < n; i++ {
				v[j] += float64(h[i*d+j]) / float64(n)
			}
		case PoolingLast:
			v[j] = float64(h[(n-1)*d+j])
		default:
			v[j] = float64(h[j])
		}
	}
	if normalize {
		var s float64
		for _, x := range v {
			s += x * x
		}
		for j := range v {
			v[j] /= math.Sqrt(s)
		}
	}
	return v
}

// Embed is transformers' hidden states pooled, for every pooling, normalised or not.
func TestEmbedMatchesTransformers(t *testing.T) {
	m := openModel(t)
	for _, p := range []Pooling{PoolingMean, PoolingLast, PoolingCLS} {
		for _, norm := range []bool{true, false} {
			got, err := m.Embed(oracle.InputIDs, WithPooling(p), WithNormalize(norm), WithEmbedQuantAct(QuantActFloat))
			if err != nil {
				t.Fatal(err)
			}
			want := pooledOracle(t, p, norm)
			if len(got) != m.Info().HiddenSize || len(got) != len(want) {
				t.Fatalf("pooling %d: %d floats, want %d", p, len(got), len(want))
			}
			var scale, diff float64
			for j := range want {
				scale = math.Max(scale, math.Abs(want[j]))
				diff = math.Max(diff, math.Abs(float64(got[j])-want[j]))
			}
			if diff > 1e-4*scale {
				t.Errorf("pooling %d normalize %v: max|Δ| %g of %g", p, norm, diff, scale)
			}
		}
	}
}

// EmbedText tokenises with special tokens; concurrent calls agree; bad input is an error.
func TestEmbedTextConcurrencyAndErrors(t *testing.T) {
	m := openModel(t)
	ids, err := m.Tokenize("Hello world", true)
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.Embed(ids)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := m.EmbedText("Hello world")
			if err != nil {
				t.Error(err)
				return
			}
			for j := range want {
				if got[j] != want[j] {
					t.Errorf("concurrent EmbedText differs at %d", j)
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, err := m.Embed(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("no tokens: %v", err)
	}
	if _, err := m.Embed([]int32{1, 1 << 20}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("an id outside the vocabulary: %v", err)
	}
	if _, err := m.Embed(ids, WithPooling(7)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("pooling 7: %v", err)
	}
	m.Close()
	if _, err := m.Embed(ids); !errors.Is(err, ErrClosed) {
		t.Errorf("closed model: %v", err)
	}
}
