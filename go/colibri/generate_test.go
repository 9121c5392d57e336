package colibri

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// pieceLog is a Generate callback that records every piece it is given.
type pieceLog struct {
	tokens []int32  // the ids ≥ 0, in order
	texts  []string // every piece's text, the final flush (token -1) included
	flush  bool     // a piece with token -1 came
}

func (l *pieceLog) fn(tok int32, text string) bool {
	if tok >= 0 {
		l.tokens = append(l.tokens, tok)
	} else {
		l.flush = true
	}
	l.texts = append(l.texts, text)
	return false
}

func (l *pieceLog) text() string { return strings.Join(l.texts, "") }

func TestFinishReasonNames(t *testing.T) {
	for f, want := range map[FinishReason]string{
		FinishLength:      "length",
		FinishStop:        "stop",
		FinishEOS:         "eos",
		FinishContextFull: "context_full",
		FinishCallback:    "callback",
		FinishReason(42):  "FinishReason(42)",
	} {
		if f.String() != want {
			t.Errorf("FinishReason(%d).String() = %q, want %q", int32(f), f.String(), want)
		}
	}
}

// Stop strings: generation ends at the first occurrence of a stop string, which is neither in
// the returned text nor in any piece given to the callback; the finish reason is "stop".
func TestGenerateStopStrings(t *testing.T) {
	m := openModel(t)
	const n = 48
	prompt, err := m.Tokenize("The quick brown fox", true)
	if err != nil {
		t.Fatal(err)
	}
	// The reference: the same greedy generation without stop strings.
	generate := func(p GenerateParams) (GenerateResult, *pieceLog) {
		t.Helper()
		s := newSession(t, m)
		var log pieceLog
		res, err := s.Generate(context.Background(), prompt, p, log.fn)
		if err != nil {
			t.Fatalf("Generate(stop %q): %v", p.Stop, err)
		}
		if res.Text != log.text() || !reflect.DeepEqual(res.Tokens, log.tokens) {
			t.Errorf("stop %q: result %q / %v, callback saw %q / %v", p.Stop, res.Text, res.Tokens, log.text(), log.tokens)
		}
		if len(res.Tokens) > 0 && res.Cached != len(prompt)+len(res.Tokens)-1 {
			t.Errorf("stop %q: %d cached, want %d", p.Stop, res.Cached, len(prompt)+len(res.Tokens)-1)
		}
		return res, &log
	}
	full, fullLog := generate(greedy(n))
	if full.Finish != FinishLength || len(full.Tokens) != n {
		t.Fatalf("reference: finish %v, %d tokens", full.Finish, len(full.Tokens))
	}
	T := full.Text
	t.Logf("reference text %q", T)

	// Stop strings taken from the reference text: one inside a piece, one across two pieces
	// (held back until it completes), the whole text but its first character.
	var stops []string
	if r := []rune(T); len(r) >= 8 {
		stops = append(stops, string(r[len(r)/2:len(r)/2+3]), string(r[1:]))
	}
	at := 0
	for k := 0; k+1 < len(fullLog.texts); k++ {
		a, b := fullLog.texts[k], fullLog.texts[k+1]
		at += len(a)
		if a != "" && b != "" && k > 2 {
			_, la := utf8.DecodeLastRuneInString(a)
			_, lb := utf8.DecodeRuneInString(b)
			stops = append(stops, T[at-la:at+lb])
			break
		}
	}
	if len(stops) < 3 {
		t.Fatalf("reference text %q too short to take stop strings from", T)
	}
	for _, stop := range stops {
		cut := strings.Index(T, stop)
		p := greedy(n)
		p.Stop = []string{"\x01never", stop}
		res, log := generate(p)
		if res.Finish != FinishStop {
			t.Errorf("stop %q: finish %v, want stop", stop, res.Finish)
		}
		if strings.Contains(res.Text, stop) || res.Text != T[:cut] {
			t.Errorf("stop %q: text %q, want %q", stop, res.Text, T[:cut])
		}
		for _, piece := range log.texts {
			if strings.Contains(piece, stop) {
				t.Errorf("stop %q: piece %q delivered", stop, piece)
			}
		}
		// The tokens are the reference's up to the one whose text completed the stop string
		// (the last token when only the flushed tail completes it).
		k := 1
		for k < n && !strings.Contains(strings.Join(fullLog.texts[:k], ""), stop) {
			k++
		}
		if !reflect.DeepEqual(res.Tokens, full.Tokens[:k]) {
			t.Errorf("stop %q: tokens %v, want %v", stop, res.Tokens, full.Tokens[:k])
		}
	}

	// A stop string that starts like the end of the text but never completes is held back,
	// then flushed at the end (token -1): the text is the reference's, the finish "length".
	last, _ := utf8.DecodeLastRuneInString(T)
	p := greedy(n)
	p.Stop = []string{string(last) + "\x01never", ""} // the empty string is ignored
	res, log := generate(p)
	if res.Finish != FinishLength || res.Text != T || !reflect.DeepEqual(res.Tokens, full.Tokens) || !log.flush {
		t.Errorf("unmatched stop: finish %v, text %q, flushed %v; want length, %q, true", res.Finish, res.Text, log.flush, T)
	}

	// GenerateChan honours stop strings too.
	s := newSession(t, m)
	p.Stop = stops[:1]
	pieces, errc := s.GenerateChan(context.Background(), prompt, p)
	var streamed strings.Builder
	for piece := range pieces {
		streamed.WriteString(piece.Text)
	}
	if err := <-errc; err != nil || streamed.String() != T[:strings.Index(T, stops[0])] {
		t.Errorf("GenerateChan with stop %q: %q, %v", stops[0], streamed.String(), err)
	}

	// A NUL byte cannot be passed to C.
	p.Stop = []string{"a\x00b"}
	if _, err := s.Generate(context.Background(), prompt, p, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NUL in a stop string: %v", err)
	}
}

// The finish reasons of a length limit, a callback that stops, a full context and an
// end-of-sequence token, with the tokens and cache positions each leaves.
func TestGenerateFinishReasons(t *testing.T) {
	m := openModel(t)
	P := len(oracle.GreedyPrompt)

	s := newSession(t, m)
	res, err := s.Generate(context.Background(), oracle.GreedyPrompt, greedy(5), nil)
	if err != nil || res.Finish != FinishLength || len(res.Tokens) != 5 || res.Cached != P+4 {
		t.Errorf("length: %+v, %v; want 5 tokens, %d cached", res, err, P+4)
	}

	s = newSession(t, m)
	calls := 0
	res, err = s.Generate(context.Background(), oracle.GreedyPrompt, greedy(20), func(tok int32, _ string) bool {
		calls++
		return calls >= 2
	})
	if err != nil || res.Finish != FinishCallback || !reflect.DeepEqual(res.Tokens, oracle.GreedyF32[:2]) || res.Cached != P+1 {
		t.Errorf("callback: %+v, %v; want %v, %d cached", res, err, oracle.GreedyF32[:2], P+1)
	}

	// A context of 8 after a prompt of 3: five tokens are fed back, the sixth is sampled from
	// the full cache and generation ends there (MaxTokens would allow 100).
	small := newSession(t, m, WithContextSize(8))
	res, err = small.Generate(context.Background(), []int32{1, 2, 3}, greedy(100), nil)
	if err != nil || res.Finish != FinishContextFull || len(res.Tokens) != 6 || res.Cached != 8 {
		t.Errorf("context full: %+v, %v; want 6 tokens, 8 cached", res, err)
	}
	// Feeding one more token into the full context is an error.
	res, err = small.Generate(context.Background(), res.Tokens[5:], greedy(100), nil)
	if !errors.Is(err, ErrContextFull) {
		t.Errorf("generating on a full context: %+v, %v; want ErrContextFull", res, err)
	}

	// End of sequence: sample near-uniformly until a seed meets an end-of-sequence id, which
	// ends the generation and is not returned; with IgnoreEOS the same seed draws the same ids
	// and runs past it to the limit.
	eos := fixtureEOS(t)
	isEOS := func(id int32) bool {
		for _, e := range eos {
			if id == e {
				return true
			}
		}
		return false
	}
	if !isEOS(m.Info().EOS) {
		t.Fatalf("fixture EOS ids %v without Info().EOS %d", eos, m.Info().EOS)
	}
	p := DefaultGenerateParams()
	p.Temperature, p.TopK, p.TopP, p.MinP, p.MaxTokens = 3, 0, 1, 0, 400
	found := false
	for seed := uint64(1); seed <= 20 && !found; seed++ {
		p.Seed, p.IgnoreEOS = seed, false
		s := newSession(t, m)
		res, err := s.Generate(context.Background(), oracle.GreedyPrompt, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Finish != FinishEOS {
			continue
		}
		found = true
		for _, id := range res.Tokens {
			if isEOS(id) {
				t.Errorf("seed %d: an end-of-sequence id was returned: %v", seed, res.Tokens)
			}
		}
		n := len(res.Tokens)
		if n >= p.MaxTokens || res.Cached != P+n {
			t.Errorf("seed %d: EOS after %d tokens, %d cached; want < %d, %d", seed, n, res.Cached, p.MaxTokens, P+n)
		}
		p.IgnoreEOS = true
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
		all, err := s.Generate(context.Background(), oracle.GreedyPrompt, p, nil)
		if err != nil || all.Finish != FinishLength || len(all.Tokens) != p.MaxTokens ||
			!reflect.DeepEqual(all.Tokens[:n], res.Tokens) || !isEOS(all.Tokens[n]) {
			t.Errorf("seed %d with IgnoreEOS: finish %v, %d tokens, %v; want length, %d tokens, %v then an EOS id %v",
				seed, all.Finish, len(all.Tokens), err, p.MaxTokens, res.Tokens, eos)
		}
	}
	if !found {
		t.Error("no seed sampled the EOS id")
	}
}

// WithQuantAct: the three valid modes are accepted and leave float weights alone; on a q8
// file reduced (int8) and float activations differ; other values are refused.
func TestQuantAct(t *testing.T) {
	m := openModel(t)
	_, want := readNpyF32(t, filepath.Join(fixtureDir, "oracle", "logits_f32.npy"))
	for _, q := range []QuantAct{QuantActDefault, QuantActReduced, QuantActFloat} {
		s := newSession(t, m, WithQuantAct(q), WithAllLogits(true))
		got, err := s.Infer(oracle.InputIDs)
		if err != nil {
			t.Fatalf("quant act %d: %v", q, err)
		}
		checkLogits(t, "float weights, quant act", got, want)
	}
	for _, q := range []QuantAct{-1, QuantActFloat + 1, 9} {
		if s, err := m.NewSession(WithQuantAct(q)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("quant act %d: %v, want ErrInvalidArgument", q, err)
			if s != nil {
				s.Close()
			}
		} else {
			t.Logf("quant act %d: %v", q, err)
		}
	}

	// A q8 copy of the fixture: the activation mode now matters.
	q8 := filepath.Join(t.TempDir(), "q8.colibri")
	if out, err := exec.Command(cliPath, "convert", fixtureDir, "-o", q8, "--quantize", "q8", "--no-progress").CombinedOutput(); err != nil {
		t.Fatalf("convert --quantize q8: %v\n%s", err, out)
	}
	mq, err := Open(q8)
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	logits := func(q QuantAct) []float32 {
		t.Helper()
		s := newSession(t, mq, WithQuantAct(q), WithAllLogits(true))
		l, err := s.Infer(oracle.InputIDs)
		if err != nil {
			t.Fatalf("q8, quant act %d: %v", q, err)
		}
		return l
	}
	i8, f32, def := logits(QuantActReduced), logits(QuantActFloat), logits(QuantActDefault)
	if reflect.DeepEqual(i8, f32) {
		t.Error("q8 weights: reduced (int8) and float activations give identical logits")
	}
	if !reflect.DeepEqual(def, i8) && !reflect.DeepEqual(def, f32) {
		t.Error("q8 weights: the default activation mode is neither reduced nor float")
	}
	for name, l := range map[string][]float32{"reduced": i8, "float": f32} {
		var maxAbs, maxDiff float64
		for i := range want {
			maxAbs = math.Max(maxAbs, math.Abs(float64(want[i])))
			maxDiff = math.Max(maxDiff, math.Abs(float64(l[i])-float64(want[i])))
		}
		t.Logf("q8 weights, %s activations: max diff %.3g, max|logit| %.3g", name, maxDiff, maxAbs)
		if !(maxDiff <= 0.02*maxAbs) {
			t.Errorf("q8 weights, %s activations: max diff %.3g > 0.02 · max|logit| %.3g", name, maxDiff, maxAbs)
		}
	}
}

// fixtureEOS reads the fixture's end-of-sequence ids (generation_config.json's eos_token_id,
// a number or a list; Info().EOS is one of them).
func fixtureEOS(t *testing.T) []int32 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureDir, "generation_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	var ids []int32
	if err := json.Unmarshal(cfg.EOS, &ids); err != nil {
		var id int32
		if err := json.Unmarshal(cfg.EOS, &id); err != nil {
			t.Fatalf("eos_token_id %s: %v", cfg.EOS, err)
		}
		ids = []int32{id}
	}
	return ids
}

// Generate stops when its context is done — checked after each delivered token — and returns
// what was delivered with ctx.Err(); the session stays usable. A context done before the call
// generates nothing and feeds nothing.
func TestGenerateContextCancel(t *testing.T) {
	m := openModel(t)
	s := newSession(t, m)
	P := len(oracle.GreedyPrompt)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	res, err := s.Generate(ctx, oracle.GreedyPrompt, greedy(len(oracle.GreedyF32)), func(tok int32, _ string) bool {
		if tok >= 0 {
			n++
		}
		if n == 2 {
			cancel() // as another goroutine would; fn itself asks to go on
		}
		return false
	})
	if !errors.Is(err, context.Canceled) || res.Finish != FinishCallback ||
		!reflect.DeepEqual(res.Tokens, oracle.GreedyF32[:2]) || res.Cached != P+1 {
		t.Fatalf("cancelled after 2 tokens: %+v, %v; want %v, %d cached, context.Canceled",
			res, err, oracle.GreedyF32[:2], P+1)
	}
	// The session goes on from there: feeding the last token continues the greedy sequence.
	rest, err := s.Generate(context.Background(), res.Tokens[1:], greedy(2), nil)
	if err != nil || !reflect.DeepEqual(rest.Tokens, oracle.GreedyF32[2:4]) {
		t.Errorf("continuing after a cancel: %v, %v; want %v", rest.Tokens, err, oracle.GreedyF32[2:4])
	}
	pos, _, err := s.Position()
	if err != nil {
		t.Fatal(err)
	}
	res, err = s.Generate(ctx, []int32{1}, greedy(4), nil)
	if !errors.Is(err, context.Canceled) || len(res.Tokens) != 0 {
		t.Errorf("an already cancelled context: %+v, %v", res, err)
	}
	if after, _, _ := s.Position(); after != pos {
		t.Errorf("an already cancelled context fed tokens: position %d -> %d", pos, after)
	}
	expired, stop := context.WithTimeout(context.Background(), -time.Second)
	defer stop()
	if _, err := s.Generate(expired, []int32{1}, greedy(4), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an expired deadline: %v", err)
	}
}
