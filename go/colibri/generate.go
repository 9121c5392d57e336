package colibri

/*
#include <stdint.h>
#include <colibri.h>

extern int32_t colibriGoToken(uintptr_t h, int32_t token, char *text, size_t len);

static int32_t colibri_go_token_cb(void *ud, int32_t token, const char *text, size_t len) {
	return colibriGoToken((uintptr_t)ud, token, (char *)text, len);
}

// The userdata is a runtime/cgo.Handle (an integer), never a Go pointer.
static colibri_status colibri_go_generate(colibri_session *s, const int32_t *prompt, size_t n_prompt,
                                          const colibri_sampler_params *p, uintptr_t h,
                                          int32_t *out, size_t cap, size_t *n_out) {
	return colibri_generate(s, prompt, n_prompt, p, h ? colibri_go_token_cb : NULL, (void *)h, out, cap, n_out);
}
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime/cgo"
)

// SamplerParams are the sampling and stopping options of Generate. Start from
// DefaultSamplerParams: the zero value generates nothing (MaxTokens 0).
type SamplerParams struct {
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
	Seed              uint64
}

// DefaultSamplerParams returns the library's defaults (temperature 0.8, top-k 40, top-p 0.95,
// min-p 0.05, no penalties, 128 tokens, stop at end-of-sequence).
func DefaultSamplerParams() SamplerParams {
	var c C.colibri_sampler_params
	C.colibri_sampler_params_init(&c)
	return SamplerParams{
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

func (p *SamplerParams) toC(op string) (C.colibri_sampler_params, error) {
	var c C.colibri_sampler_params
	C.colibri_sampler_params_init(&c)
	for _, v := range []struct {
		name string
		v    int
	}{{"TopK", p.TopK}, {"PenaltyLastN", p.PenaltyLastN}, {"MaxTokens", p.MaxTokens}} {
		if v.v < math.MinInt32 || v.v > math.MaxInt32 {
			return c, invalid(op, fmt.Sprintf("%s %d is out of range", v.name, v.v))
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
	return c, nil
}

// genState is what the C callback reaches through its cgo.Handle during one Generate.
type genState struct {
	fn       func(token int32, text string) bool
	s        *Session
	stopped  bool // fn returned false
	panicked bool
	panicVal interface{}
}

// Generate feeds prompt (ids as given: no BOS or chat template is added) into the session and
// samples up to p.MaxTokens tokens, stopping early at an end-of-sequence token (unless
// p.IgnoreEOS), when the context is full, or when fn returns false. It returns the generated
// ids that were delivered to fn (an end-of-sequence token that stopped generation is neither
// delivered nor returned).
//
// fn (may be nil) runs on the calling goroutine for each sampled token with the text it
// completes (may be empty: text is only ever cut at UTF-8 character boundaries); an
// end-of-sequence token that stops generation is not passed to fn. At the end fn may be called
// once more with token -1 and held-back text (also after it returned false: that text belongs
// to tokens it has already seen). The concatenated texts are the generated text. fn must not
// call methods of this Session (they return ErrBusy); a panic in fn stops generation and is
// re-raised by Generate once the library has returned.
//
// The prompt must not be empty. The last returned token is not in the KV cache yet: to
// continue a generation, pass it as the next prompt.
func (s *Session) Generate(prompt []int32, p SamplerParams, fn func(token int32, text string) bool) ([]int32, error) {
	cp, err := p.toC("Generate")
	if err != nil {
		return nil, err
	}
	ptr, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.release()

	// Every generated id lands in out (the callback does not see a stopping EOS). Generation
	// never outruns the context, so nCtx+1 slots suffice whatever MaxTokens says.
	capTokens := p.MaxTokens
	if capTokens < 0 {
		capTokens = 0
	}
	if capTokens > s.nCtx+1 {
		capTokens = s.nCtx + 1
	}
	out := make([]int32, capTokens)

	var h cgo.Handle
	var st *genState
	if fn != nil {
		st = &genState{fn: fn, s: s}
		h = cgo.NewHandle(st)
		defer h.Delete()
	}
	var n C.size_t
	err = ccall("Generate", func() C.colibri_status {
		return C.colibri_go_generate(ptr, cInt32s(prompt), C.size_t(len(prompt)), &cp, C.uintptr_t(h),
			cInt32s(out), C.size_t(len(out)), &n)
	})
	if st != nil && st.panicked {
		panic(st.panicVal)
	}
	s.rethrowRoutePanic()
	if err != nil {
		return nil, err
	}
	if int(n) > len(out) {
		n = C.size_t(len(out))
	}
	return out[:n:n], nil
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
// busy Session) stays blocked.
func (s *Session) GenerateChan(ctx context.Context, prompt []int32, p SamplerParams) (<-chan Piece, <-chan error) {
	pieces := make(chan Piece)
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		defer close(pieces)
		if err := ctx.Err(); err != nil {
			errc <- err
			return
		}
		cancelled := false
		_, err := s.Generate(prompt, p, func(token int32, text string) bool {
			if cancelled || ctx.Err() != nil { // cancellation wins over a ready receiver
				cancelled = true
				return false
			}
			select {
			case pieces <- Piece{Token: token, Text: text}:
				return true
			case <-ctx.Done():
				cancelled = true
				return false
			}
		})
		if err == nil && cancelled {
			err = ctx.Err()
		}
		errc <- err
	}()
	return pieces, errc
}
