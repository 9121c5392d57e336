package colibri

/*
#include <stdint.h>
#include <stdlib.h>
#include <colibri.h>

extern int32_t colibriGoToken(uintptr_t h, int32_t token, char *text, size_t len);

static int32_t colibri_go_token_cb(void *ud, int32_t token, const char *text, size_t len) {
	return colibriGoToken((uintptr_t)ud, token, (char *)text, len);
}

// The userdata is a runtime/cgo.Handle (an integer, never 0), never a Go pointer.
static colibri_status colibri_go_generate(colibri_session *s, const int32_t *prompt, size_t n_prompt,
                                          const colibri_generate_params *p, uintptr_t h,
                                          int32_t *out, size_t cap, colibri_generate_result *r) {
	return colibri_generate(s, prompt, n_prompt, p, colibri_go_token_cb, (void *)h, out, cap, r);
}
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime/cgo"
	"strings"
	"unsafe"
)

// GenerateParams are the sampling, limits and stop strings of one Generate
// (colibri_generate_params). Start from DefaultGenerateParams: the zero value generates
// nothing (MaxTokens 0).
type GenerateParams struct {
	Temperature       float32 // 0 = greedy
	TopK              int     // 0 = off
	TopP              float32 // 1 = off
	MinP              float32 // 0 = off
	RepetitionPenalty float32 // 1 = off
	PresencePenalty   float32
	FrequencyPenalty  float32
	PenaltyLastN      int // last tokens the penalties look at
	MaxTokens         int // most tokens to generate
	IgnoreEOS         bool
	Seed              uint64 // the sampler's seed: SeedRandom (the default) = a fresh one per call; any other value repeats exactly (the routing seed is a session option)
	// Stop ends generation as soon as the generated text contains one of these strings
	// (UTF-8, no NUL bytes; empty strings are ignored). The stop string and anything after it
	// are never delivered: text that could still become one is held back until it cannot.
	// Stop strings need the model's tokenizer (ErrUnsupported without one).
	Stop []string
	// Grammar, when set, holds the output to a JSON format (Model.NewGrammar); it cannot be
	// combined with IgnoreEOS (ErrInvalidArgument). A Stop string still ends the output (the
	// document then incomplete).
	Grammar *Grammar
}

// SeedRandom as a seed asks for a fresh random seed (COLIBRI_SEED_RANDOM, the default of
// GenerateParams.Seed and of the routing seed); every other value, 0 included, repeats exactly.
const SeedRandom uint64 = C.COLIBRI_SEED_RANDOM

// DefaultGenerateParams returns the library's defaults (temperature 0.8, top-k 40, top-p 0.95,
// min-p 0.05, no penalties, 128 tokens, stop at end-of-sequence, no stop strings, SeedRandom).
func DefaultGenerateParams() GenerateParams {
	var c C.colibri_generate_params
	_ = C.colibri_generate_params_init_sized(&c, C.size_t(C.sizeof_colibri_generate_params))
	return GenerateParams{
		Temperature:       float32(c.temperature),
		TopK:              int(c.top_k),
		TopP:              float32(c.top_p),
		MinP:              float32(c.min_p),
		RepetitionPenalty: float32(c.repetition_penalty),
		PresencePenalty:   float32(c.presence_penalty),
		FrequencyPenalty:  float32(c.frequency_penalty),
		PenaltyLastN:      int(c.penalty_last_n),
		MaxTokens:         int(c.max_tokens),
		IgnoreEOS:         c.ignore_eos != 0,
		Seed:              uint64(c.seed),
	}
}

// toC checks p and converts everything but the stop strings, which Generate puts in C memory
// for the duration of the call.
func (p *GenerateParams) toC(op string) (C.colibri_generate_params, error) {
	var c C.colibri_generate_params
	_ = C.colibri_generate_params_init_sized(&c, C.size_t(C.sizeof_colibri_generate_params))
	for _, v := range []struct {
		name string
		v    int
	}{{"TopK", p.TopK}, {"PenaltyLastN", p.PenaltyLastN}, {"MaxTokens", p.MaxTokens}} {
		if v.v < math.MinInt32 || v.v > math.MaxInt32 {
			return c, invalid(op, fmt.Sprintf("%s %d is out of range", v.name, v.v))
		}
	}
	for i, stop := range p.Stop {
		if strings.IndexByte(stop, 0) >= 0 {
			return c, invalid(op, fmt.Sprintf("stop string %d contains a NUL byte", i))
		}
	}
	c.temperature = C.float(p.Temperature)
	c.top_k = C.int32_t(p.TopK)
	c.top_p = C.float(p.TopP)
	c.min_p = C.float(p.MinP)
	c.repetition_penalty = C.float(p.RepetitionPenalty)
	c.presence_penalty = C.float(p.PresencePenalty)
	c.frequency_penalty = C.float(p.FrequencyPenalty)
	c.penalty_last_n = C.int32_t(p.PenaltyLastN)
	c.max_tokens = C.int32_t(p.MaxTokens)
	c.ignore_eos = boolInt(p.IgnoreEOS)
	c.seed = C.uint64_t(p.Seed)
	c.grammar = p.Grammar.cPtr()
	return c, nil
}

// FinishReason says why a generation ended (colibri_finish_reason).
type FinishReason int32

// Finish reasons (COLIBRI_FINISH_*).
const (
	// FinishLength: MaxTokens tokens were generated.
	FinishLength FinishReason = C.COLIBRI_FINISH_LENGTH
	// FinishStop: the text came to contain a stop string (which was not delivered).
	FinishStop FinishReason = C.COLIBRI_FINISH_STOP
	// FinishEOS: an end-of-sequence token was sampled (it was not delivered).
	FinishEOS FinishReason = C.COLIBRI_FINISH_EOS
	// FinishContextFull: the session's context is full.
	FinishContextFull FinishReason = C.COLIBRI_FINISH_CONTEXT_FULL
	// FinishCallback: the callback returned true (stop), the context was cancelled, or the
	// Session was closed during the call.
	FinishCallback FinishReason = C.COLIBRI_FINISH_CALLBACK
)

// String is the reason's lower-case name ("length", "stop", "eos", "context_full",
// "callback"), the names the Python binding uses too.
func (f FinishReason) String() string {
	switch f {
	case FinishLength:
		return "length"
	case FinishStop:
		return "stop"
	case FinishEOS:
		return "eos"
	case FinishContextFull:
		return "context_full"
	case FinishCallback:
		return "callback"
	}
	return fmt.Sprintf("FinishReason(%d)", int32(f))
}

// GenerateResult is what one Generate produced: the library's colibri_generate_result and the
// tokens and text it delivered.
type GenerateResult struct {
	// Tokens are the generated ids, in the order they were passed to the callback. An
	// end-of-sequence token that ended generation is not among them; a token whose text
	// completed a stop string is (only its text before the stop string was delivered).
	Tokens []int32
	// Text is the generated text: the concatenation of the texts passed to the callback,
	// held-back text flushed at the end included. It never contains a stop string.
	Text string
	// Finish says why generation ended.
	Finish FinishReason
	// Cached is the number of tokens in the session's KV cache when generation ended. After
	// FinishEOS every token of Tokens is in it; after any other reason the last of Tokens is
	// not in it yet: to continue the generation, pass it as the next prompt.
	Cached int
}

// TokenFunc is Generate's per-token callback: the sampled id and the text it completes.
// Return true to stop generating, false to go on — the convention of the C callback (non-zero
// stops) and of the Python binding (a truthy return stops).
type TokenFunc func(token int32, text string) (stop bool)

// genState is what the C callback reaches through its cgo.Handle during one Generate.
type genState struct {
	ctx       context.Context
	fn        TokenFunc // nil: only collect the text
	s         *Session
	text      strings.Builder // every piece of text delivered
	stopped   bool            // fn returned true
	cancelled bool            // ctx was done after a delivered piece
	panicked  bool
	panicVal  interface{}
}

// Generate feeds prompt (ids as given: no BOS or chat template is added) into the session,
// appended to what its KV cache holds, and samples up to p.MaxTokens tokens, stopping early at
// an end-of-sequence token (unless p.IgnoreEOS), when the text contains one of p.Stop, when the
// context is full, when fn returns true, or when ctx is done. The result holds the delivered
// ids and text and says which of these ended the generation; ending early is not an error,
// except for ctx: then Generate returns what was delivered (Finish FinishCallback) together
// with ctx.Err(). ctx is checked before the call and after each delivered token (the prompt's
// forward pass itself is not interrupted).
//
// fn (may be nil) runs on the calling goroutine for each sampled token with the text it
// completes (may be empty: text is only ever cut at UTF-8 character boundaries, and text that
// could become a stop string is held back); an end-of-sequence token that stops generation is
// not passed to fn. fn returns true to stop (the C convention: non-zero stops). At the end fn
// may be called once more with token -1 and held-back text (also after it asked to stop: that
// text belongs to tokens it has already seen). The concatenated texts are the result's Text.
// fn must not call methods of this Session (they return ErrBusy); a panic in fn stops
// generation and is re-raised by Generate once the library has returned.
//
// The prompt must not be empty. Unless generation ended with FinishEOS, the last returned
// token is not in the KV cache yet (Cached counts what is): to continue a generation, pass it
// as the next prompt.
func (s *Session) Generate(ctx context.Context, prompt []int32, p GenerateParams, fn TokenFunc) (GenerateResult, error) {
	if err := ctx.Err(); err != nil {
		return GenerateResult{}, err
	}
	cp, err := p.toC("Generate")
	if err != nil {
		return GenerateResult{}, err
	}
	ptr, err := s.acquire()
	if err != nil {
		return GenerateResult{}, err
	}
	defer s.release()

	// The stop strings and the array of their pointers live in C memory (C may be given
	// neither Go strings nor a Go array of pointers); the params struct, Go memory holding
	// only that C pointer, may then be passed to C, which reads them during the call only.
	if len(p.Stop) > 0 {
		// C.calloc never returns NULL (cgo aborts on out-of-memory).
		arr := (**C.char)(C.calloc(C.size_t(len(p.Stop)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		defer C.free(unsafe.Pointer(arr))
		cs := unsafe.Slice(arr, len(p.Stop))
		for i, stop := range p.Stop {
			cs[i] = C.CString(stop)
			defer C.free(unsafe.Pointer(cs[i]))
		}
		cp.stop, cp.n_stop = arr, C.size_t(len(p.Stop))
	}

	// Every delivered id lands in out. Generation never outruns the context, so nCtx+1 slots
	// suffice whatever MaxTokens says (and the library never stops at this cap first).
	capTokens := p.MaxTokens
	if capTokens < 0 {
		capTokens = 0
	}
	if capTokens > s.nCtx+1 {
		capTokens = s.nCtx + 1
	}
	out := make([]int32, capTokens)

	// The callback always runs, to collect the text (and to stop when the Session is closed).
	st := &genState{ctx: ctx, fn: fn, s: s}
	h := cgo.NewHandle(st)
	defer h.Delete()
	var res C.colibri_generate_result
	_ = C.colibri_generate_result_init_sized(&res, C.size_t(C.sizeof_colibri_generate_result))
	err = ccall("Generate", func() C.colibri_status {
		return C.colibri_go_generate(ptr, cInt32s(prompt), C.size_t(len(prompt)), &cp, C.uintptr_t(h),
			cInt32s(out), C.size_t(len(out)), &res)
	})
	if st.panicked {
		panic(st.panicVal)
	}
	s.rethrowRoutePanic()
	if err != nil {
		return GenerateResult{}, err
	}
	n := int(res.n_tokens)
	if n > len(out) {
		n = len(out)
	}
	result := GenerateResult{
		Tokens: out[:n:n],
		Text:   st.text.String(),
		Finish: FinishReason(res.finish_reason),
		Cached: int(res.n_cached),
	}
	if st.cancelled {
		return result, ctx.Err()
	}
	return result, nil
}

// Piece is one step of GenerateChan: a sampled token and the text it completes (Token -1:
// held-back text flushed at the end).
type Piece struct {
	Token int32
	Text  string
}

// GenerateChan runs Generate on a new goroutine and streams its pieces. The pieces channel is
// closed when generation ends; then the error channel yields exactly one value (nil on
// success, ctx.Err() when ctx was cancelled, or the failure) and is closed. Cancel ctx to stop
// early; a consumer that stops reading must cancel ctx, or the generating goroutine (and the
// busy Session) stays blocked. Stop strings in p are never sent, as with Generate; the finish
// reason is not reported (call Generate with a callback when it is needed).
func (s *Session) GenerateChan(ctx context.Context, prompt []int32, p GenerateParams) (<-chan Piece, <-chan error) {
	pieces := make(chan Piece)
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		defer close(pieces)
		cancelled := false
		_, err := s.Generate(ctx, prompt, p, func(token int32, text string) bool {
			if cancelled || ctx.Err() != nil { // cancellation wins over a ready receiver
				cancelled = true
				return true
			}
			select {
			case pieces <- Piece{Token: token, Text: text}:
				return false
			case <-ctx.Done():
				cancelled = true
				return true
			}
		})
		if err == nil && cancelled { // cancelled during the final flush
			err = ctx.Err()
		}
		errc <- err
	}()
	return pieces, errc
}
