package colibri

/*
#include <stdint.h>
#include <stdlib.h>
#include <colibri.h>

extern int32_t colibriGoRoute(uintptr_t h, int32_t layer, int32_t position, int32_t *experts, float *weights, size_t k);

static int32_t colibri_go_route_cb(void *ud, int32_t layer, int32_t position, const int32_t *experts,
                                   const float *weights, size_t k) {
	return colibriGoRoute((uintptr_t)ud, layer, position, (int32_t *)experts, (float *)weights, k);
}

// The userdata is a runtime/cgo.Handle (an integer), never a Go pointer.
static colibri_status colibri_go_set_route_callback(colibri_session *s, uintptr_t h) {
	return colibri_session_set_route_callback(s, h ? colibri_go_route_cb : NULL, (void *)h);
}
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"
)

// KVType is the element type of the KV cache (colibri_kv_type).
type KVType int32

// KV cache element types (COLIBRI_KV_*).
const (
	KVF32  KVType = C.COLIBRI_KV_F32
	KVF16  KVType = C.COLIBRI_KV_F16
	KVBF16 KVType = C.COLIBRI_KV_BF16
)

// RoutingMode chooses how the router picks experts (colibri_routing_mode).
type RoutingMode int32

// Routing modes (COLIBRI_ROUTING_*).
const (
	// RoutingTopK picks the top-k router logits (the model's own rule).
	RoutingTopK RoutingMode = C.COLIBRI_ROUTING_TOPK
	// RoutingGumbel adds Gumbel noise to the router logits before the top-k choice; the
	// combination weights come from the un-noised logits. Seeded per session (the routing
	// seed of WithRouting / SetRouting).
	RoutingGumbel RoutingMode = C.COLIBRI_ROUTING_GUMBEL
)

// QuantAct says how a session's reduced-precision weight matrices (q8 / q4 and bf16 files)
// meet their activations (colibri_quant_act). f32 and f16 weights are unaffected.
type QuantAct int32

// Activation modes (COLIBRI_QUANT_ACT_*).
const (
	// QuantActDefault is the process default: COLIBRI_QUANT_ACT=reduced|float from the
	// environment (read once by the library), else QuantActReduced.
	QuantActDefault QuantAct = C.COLIBRI_QUANT_ACT_DEFAULT
	// QuantActReduced rounds the activations to each weight's own arithmetic for each product:
	// int8 blocks against q8 / q4 weights (W8A8 / W4A8), bf16 against bf16 weights. Faster.
	QuantActReduced QuantAct = C.COLIBRI_QUANT_ACT_REDUCED
	// QuantActFloat keeps the activations f32 for every weight (W8A16 / W4A16 / BF16A32).
	QuantActFloat QuantAct = C.COLIBRI_QUANT_ACT_FLOAT
)

// SessionOption configures NewSession.
type SessionOption func(*sessionConfig)

type sessionConfig struct {
	p   C.colibri_session_params
	err error
}

// WithContextSize sets the context length in tokens (0: the model's trained context capped
// at 4096).
func WithContextSize(n int) SessionOption {
	return func(c *sessionConfig) {
		if n < 0 || n > math.MaxUint32 {
			c.err = invalid("NewSession", fmt.Sprintf("context size %d", n))
			return
		}
		c.p.n_ctx = C.uint32_t(n)
	}
}

// WithKVType sets the KV cache element type (default KVF32). The library rejects other values
// (ErrInvalidArgument from NewSession).
func WithKVType(t KVType) SessionOption {
	return func(c *sessionConfig) { c.p.kv_type = C.colibri_kv_type(t) }
}

// WithQuantAct sets how the session's quantised matrices meet their activations (default
// QuantActDefault). The library rejects other values (ErrInvalidArgument from NewSession).
func WithQuantAct(q QuantAct) SessionOption {
	return func(c *sessionConfig) { c.p.quant_act = C.colibri_quant_act(q) }
}

// WithAllLogits makes Infer return the logits of every new position (n·vocab floats) instead
// of the last position's only.
func WithAllLogits(on bool) SessionOption {
	return func(c *sessionConfig) { c.p.all_logits = boolInt(on) }
}

// WithRouting sets the routing mode, the seed of the Gumbel routing RNG (the session's
// routing_seed, not the sampler's GenerateParams.Seed) and the number of experts per token
// (0: the model's top_k). See also Session.SetRouting.
func WithRouting(mode RoutingMode, routingSeed uint64, moeTopK int) SessionOption {
	return func(c *sessionConfig) {
		if moeTopK < 0 || moeTopK > math.MaxInt32 {
			c.err = invalid("NewSession", fmt.Sprintf("moeTopK %d", moeTopK))
			return
		}
		c.p.routing_mode = C.colibri_routing_mode(mode)
		c.p.routing_seed = C.uint64_t(routingSeed)
		c.p.moe_top_k = C.int32_t(moeTopK)
	}
}

// Session is one sequence's KV cache on a model; see the package documentation for the
// concurrency rules.
type Session struct {
	mu     sync.Mutex
	ptr    *C.colibri_session
	busy   bool // a call is running
	closed bool

	vocab, hidden, nCtx int
	allLogits           bool

	route   cgo.Handle // the registered route callback's state, 0 when none
	routeSt *routeState
}

// NewSession makes a session on the model. It stays valid after the Model is closed.
func (m *Model) NewSession(opts ...SessionOption) (*Session, error) {
	var cfg sessionConfig
	_ = C.colibri_session_params_init_sized(&cfg.p, C.size_t(C.sizeof_colibri_session_params))
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	mp, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	var ptr *C.colibri_session
	if err := ccall("NewSession", func() C.colibri_status { return C.colibri_session_new(mp, &cfg.p, &ptr) }); err != nil {
		return nil, err
	}
	var pos, nctx C.size_t
	if err := ccall("NewSession", func() C.colibri_status { return C.colibri_session_position(ptr, &pos, &nctx) }); err != nil {
		C.colibri_session_free(ptr)
		return nil, err
	}
	s := &Session{
		ptr:       ptr,
		vocab:     m.info.VocabSize,
		hidden:    m.info.HiddenSize,
		nCtx:      int(nctx),
		allLogits: cfg.p.all_logits != 0,
	}
	runtime.SetFinalizer(s, func(s *Session) { s.Close() })
	return s, nil
}

// acquire starts a call: the handle, or ErrClosed / ErrBusy.
func (s *Session) acquire() (*C.colibri_session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.busy {
		return nil, ErrBusy
	}
	s.busy = true
	return s.ptr, nil
}

// release ends a call; if Close came meanwhile, the handle is freed now.
func (s *Session) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	if s.closed {
		s.freeLocked()
	}
}

func (s *Session) freeLocked() {
	if s.ptr != nil {
		C.colibri_session_free(s.ptr)
		s.ptr = nil
	}
	if s.route != 0 {
		s.route.Delete()
		s.route, s.routeSt = 0, nil
	}
}

// closing reports whether Close was called (checked by callbacks to stop early).
func (s *Session) closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close releases the session. It is idempotent and never blocks: if a call is running (even
// from inside a Generate callback) generation stops at the next token and the handle is freed
// when that call returns.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	runtime.SetFinalizer(s, nil)
	if !s.busy {
		s.freeLocked()
	}
	return nil
}

// ContextSize is the session's context length in tokens.
func (s *Session) ContextSize() int { return s.nCtx }

// Infer runs the forward pass over tokens, appending them to the KV cache, and returns the
// last position's logits (VocabSize floats), or every new position's (len(tokens)·VocabSize,
// row-major) with WithAllLogits. Nothing is added to the tokens (no BOS). A failed call leaves
// the KV cache as it was.
func (s *Session) Infer(tokens []int32) ([]float32, error) {
	ptr, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.release()
	n := s.vocab
	if s.allLogits {
		n *= len(tokens)
	}
	out := make([]float32, n)
	err = ccall("Infer", func() C.colibri_status {
		return C.colibri_infer(ptr, cInt32s(tokens), C.size_t(len(tokens)), cFloats(out), C.size_t(len(out)))
	})
	s.rethrowRoutePanic()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// InferEmbeddings is Infer with hidden states instead of tokens: embeddings holds rows of
// HiddenSize floats, one per position.
func (s *Session) InferEmbeddings(embeddings []float32) ([]float32, error) {
	ptr, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.release()
	if s.hidden == 0 || len(embeddings)%s.hidden != 0 {
		return nil, invalid("InferEmbeddings", fmt.Sprintf("%d floats are not rows of hidden size %d", len(embeddings), s.hidden))
	}
	rows := len(embeddings) / s.hidden
	n := s.vocab
	if s.allLogits {
		n *= rows
	}
	out := make([]float32, n)
	err = ccall("InferEmbeddings", func() C.colibri_status {
		return C.colibri_infer_embeddings(ptr, cFloats(embeddings), C.size_t(rows), C.size_t(s.hidden),
			cFloats(out), C.size_t(len(out)))
	})
	s.rethrowRoutePanic()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Reset forgets every cached token.
func (s *Session) Reset() error {
	ptr, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release()
	return ccall("Reset", func() C.colibri_status { return C.colibri_session_reset(ptr) })
}

// Truncate keeps only the first n cached tokens (ErrInvalidArgument if fewer are cached).
func (s *Session) Truncate(n int) error {
	if n < 0 {
		return invalid("Truncate", fmt.Sprintf("n %d is negative", n))
	}
	ptr, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release()
	return ccall("Truncate", func() C.colibri_status { return C.colibri_session_truncate(ptr, C.size_t(n)) })
}

// SaveState writes the session's state (KV cache, recurrent state, routing RNG, last logits)
// to the file path, with tokens — the ids of all cached tokens, or nil — stored beside it. It is
// written to a temporary file and renamed into place: on failure an earlier file at path is as
// it was. The file belongs to the session's model file.
func (s *Session) SaveState(path string, tokens []int32) error {
	ptr, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return ccall("SaveState", func() C.colibri_status {
		return C.colibri_session_save_state(ptr, cpath, cInt32s(tokens), C.size_t(len(tokens)))
	})
}

// LoadState replaces the session's state by the one saved in path (by SaveState, for the same
// model file) and returns the token ids stored with it. The whole file is checked first: a
// damaged or foreign file is an error (StatusInvalidArgument; StatusContextFull when it holds
// more tokens than the session's context) and changes nothing.
func (s *Session) LoadState(path string) ([]int32, error) {
	ptr, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.release()
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return readIDs("LoadState", 256, func(toks []int32, n *C.size_t) C.colibri_status {
		return C.colibri_session_load_state(ptr, cpath, cInt32s(toks), C.size_t(len(toks)), n)
	})
}

// CopyFrom makes s hold exactly what src (a session of the same model) holds: its cached tokens
// (KV cache, only the used positions; recurrent state with the state of its last call's start),
// routing RNG state and last logits. src is unchanged and the two are independent afterwards; s
// keeps its own settings (context length, KV type, routing mode, top-k, route callback). An error
// (StatusInvalidArgument for sessions of different models; StatusContextFull when src holds more
// tokens than s's context) changes nothing. Copying a session to itself does nothing.
func (s *Session) CopyFrom(src *Session) error {
	if src == nil {
		return invalid("CopyFrom", "src is nil")
	}
	ptr, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release()
	if src == s {
		return nil
	}
	from, err := src.acquire()
	if err != nil {
		return err
	}
	defer src.release()
	return ccall("CopyFrom", func() C.colibri_status { return C.colibri_session_copy(ptr, from) })
}

// Position returns the number of tokens in the KV cache and the context length.
func (s *Session) Position() (position, nCtx int, err error) {
	ptr, err := s.acquire()
	if err != nil {
		return 0, 0, err
	}
	defer s.release()
	var pos, nc C.size_t
	err = ccall("Position", func() C.colibri_status { return C.colibri_session_position(ptr, &pos, &nc) })
	return int(pos), int(nc), err
}

// SetRouting changes the routing of later calls: the mode, the seed of the Gumbel routing RNG
// and the experts per token (0: the model's top_k, else 1..NExperts).
func (s *Session) SetRouting(mode RoutingMode, routingSeed uint64, moeTopK int) error {
	if moeTopK < 0 || moeTopK > math.MaxInt32 {
		return invalid("SetRouting", fmt.Sprintf("moeTopK %d", moeTopK))
	}
	ptr, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release()
	return ccall("SetRouting", func() C.colibri_status {
		return C.colibri_session_set_routing(ptr, C.colibri_routing_mode(mode), C.uint64_t(routingSeed), C.int32_t(moeTopK))
	})
}

// Route is one routing decision: at a token position and MoE layer, the chosen experts and
// their combination weights (most weight first).
type Route struct {
	Layer    int
	Position int
	Experts  []int32
	Weights  []float32
}

type routeState struct {
	fn       func(Route) (skip bool)
	panicked bool
	panicVal interface{}
}

// SetRouteCallback registers fn to receive, at the end of every Infer, InferEmbeddings and
// Generate, the routing of each (position, MoE layer) that call computed, ordered by position
// then layer; fn returns true to skip the rest of that call's records, false to go on (the
// C convention: non-zero stops, as for Generate's callback). nil removes the
// callback. fn runs on the calling goroutine inside the call and must not call methods of this
// Session (they return ErrBusy); a panic in fn is re-raised by the call, which the library has
// undone: the Session is as it was before it (cached tokens, routing RNG).
func (s *Session) SetRouteCallback(fn func(Route) (skip bool)) error {
	ptr, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.release()
	var h cgo.Handle
	var st *routeState
	if fn != nil {
		st = &routeState{fn: fn}
		h = cgo.NewHandle(st)
	}
	err = ccall("SetRouteCallback", func() C.colibri_status { return C.colibri_go_set_route_callback(ptr, C.uintptr_t(h)) })
	if err != nil {
		if h != 0 {
			h.Delete()
		}
		return err
	}
	if s.route != 0 {
		s.route.Delete()
	}
	s.route, s.routeSt = h, st
	return nil
}

// rethrowRoutePanic re-raises, on the calling goroutine, a panic of the route callback that
// was caught before it could unwind through the library's frames.
func (s *Session) rethrowRoutePanic() {
	rethrowRoutePanics([]*Session{s})
}
