package colibri

/*
#include <stdlib.h>
#include <colibri.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Family is the model architecture (colibri_family).
type Family int32

// The families of colibri_model_info.family (COLIBRI_FAMILY_*).
const (
	FamilyMixtral    Family = C.COLIBRI_FAMILY_MIXTRAL
	FamilyQwen2MoE   Family = C.COLIBRI_FAMILY_QWEN2_MOE
	FamilyQwen3MoE   Family = C.COLIBRI_FAMILY_QWEN3_MOE
	FamilyOLMoE      Family = C.COLIBRI_FAMILY_OLMOE
	FamilyGraniteMoE Family = C.COLIBRI_FAMILY_GRANITEMOE
	FamilyGLM4MoE    Family = C.COLIBRI_FAMILY_GLM4_MOE
	FamilyDeepSeekV2 Family = C.COLIBRI_FAMILY_DEEPSEEK_V2
	FamilyDeepSeekV3 Family = C.COLIBRI_FAMILY_DEEPSEEK_V3
	FamilyGPTOSS     Family = C.COLIBRI_FAMILY_GPT_OSS
	FamilyPhiMoE     Family = C.COLIBRI_FAMILY_PHIMOE
	FamilyQwen3Next  Family = C.COLIBRI_FAMILY_QWEN3_NEXT
	FamilyDots1      Family = C.COLIBRI_FAMILY_DOTS1
	FamilyERNIE45MoE Family = C.COLIBRI_FAMILY_ERNIE4_5_MOE
	FamilyHunyuanMoE Family = C.COLIBRI_FAMILY_HUNYUAN_V1_MOE
	FamilyLlama4     Family = C.COLIBRI_FAMILY_LLAMA4
)

func (f Family) String() string {
	switch f {
	case FamilyMixtral:
		return "mixtral"
	case FamilyQwen2MoE:
		return "qwen2_moe"
	case FamilyQwen3MoE:
		return "qwen3_moe"
	case FamilyOLMoE:
		return "olmoe"
	case FamilyDeepSeekV2:
		return "deepseek_v2"
	case FamilyDeepSeekV3:
		return "deepseek_v3"
	case FamilyGraniteMoE:
		return "granitemoe"
	case FamilyGLM4MoE:
		return "glm4_moe"
	case FamilyGPTOSS:
		return "gpt_oss"
	case FamilyPhiMoE:
		return "phimoe"
	case FamilyQwen3Next:
		return "qwen3_next"
	case FamilyDots1:
		return "dots1"
	case FamilyERNIE45MoE:
		return "ernie4_5_moe"
	case FamilyHunyuanMoE:
		return "hunyuan_v1_moe"
	case FamilyLlama4:
		return "llama4"
	}
	return fmt.Sprintf("Family(%d)", int32(f))
}

// ModelInfo holds facts about a model (colibri_model_info).
type ModelInfo struct {
	Family        Family
	VocabSize     int
	NCtxTrain     int // trained context length (max_position_embeddings)
	HiddenSize    int
	NLayers       int
	NExperts      int
	TopK          int    // experts per token
	NParams       uint64 // all parameters
	NActiveParams uint64 // parameters read per token
	BOS           int32  // -1 when the model has none
	EOS           int32  // first end-of-sequence id, -1 when none
	// Layers with a recurrent state instead of a KV cache (Qwen3-Next's DeltaNet), layers with
	// softmax attention, and the recurrent-state bytes each session holds whatever its length.
	NRecurrentLayers  int
	NAttentionLayers  int
	SessionStateBytes uint64
}

// Message is one chat message for ChatRender.
type Message struct {
	Role    string // "system", "user", "assistant", …
	Content string
}

// Option configures Open.
type Option func(*openConfig)

type openConfig struct {
	mmap, mlock bool
	threads     int
	pin         bool
	sigbus      bool
	hugepages   bool
}

// WithMmap maps the file (true, the default) or reads it into memory (false, for filesystems
// where mmap is unsafe).
func WithMmap(on bool) Option { return func(c *openConfig) { c.mmap = on } }

// WithMlock locks the model's pages in RAM (default false).
func WithMlock(on bool) Option { return func(c *openConfig) { c.mlock = on } }

// WithThreads sets the number of worker threads the model's forward passes run on (0, the
// default: one per physical core; at most 1024). The model owns them, shared by all its
// sessions; results do not depend on the count.
func WithThreads(n int) Option { return func(c *openConfig) { c.threads = n } }

// WithPinnedThreads pins worker i to the i-th CPU the process may run on (Linux; default false).
func WithPinnedThreads(on bool) Option { return func(c *openConfig) { c.pin = on } }

// WithSigbusGuard survives the model file being truncated or rewritten in place while it is
// mapped (default false): calls then fail with ErrModelChanged (open the model again) instead of
// the process dying of SIGBUS. It installs a process-wide SIGBUS handler once; the handler runs
// on the alternate signal stack (SA_ONSTACK, which Go's runtime requires) and passes every
// fault outside a model mapping on to the handler installed before it (Go's own).
func WithSigbusGuard(on bool) Option { return func(c *openConfig) { c.sigbus = on } }

// WithHugePages advises transparent huge pages on the model mapping (true, the default: the
// weights are read and mapped in 2 MiB pages where the kernel allows); false leaves the system's
// default.
func WithHugePages(on bool) Option { return func(c *openConfig) { c.hugepages = on } }

// Model is an opened .colibri file; see the package documentation for ownership rules.
type Model struct {
	mu     sync.Mutex
	ptr    *C.colibri_model
	users  int // calls in flight
	closed bool
	info   ModelInfo
}

// Open maps and validates the .colibri file at path.
func Open(path string, opts ...Option) (*Model, error) {
	var p C.colibri_model_params
	_ = C.colibri_model_params_init_sized(&p, C.size_t(C.sizeof_colibri_model_params))
	cfg := openConfig{mmap: p.use_mmap != 0, mlock: p.use_mlock != 0, hugepages: p.use_hugepages != 0}
	for _, o := range opts {
		o(&cfg)
	}
	p.use_mmap, p.use_mlock = boolInt(cfg.mmap), boolInt(cfg.mlock)
	if cfg.threads < 0 || cfg.threads > 1024 {
		return nil, invalid("Open", fmt.Sprintf("WithThreads(%d) outside 0..1024", cfg.threads))
	}
	p.n_threads, p.pin_threads = C.uint32_t(cfg.threads), boolInt(cfg.pin)
	p.sigbus_guard, p.use_hugepages = boolInt(cfg.sigbus), boolInt(cfg.hugepages)
	if strings.IndexByte(path, 0) >= 0 {
		return nil, invalid("Open", "path contains a NUL byte")
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var ptr *C.colibri_model
	if err := ccall("Open", func() C.colibri_status { return C.colibri_model_open(cpath, &p, &ptr) }); err != nil {
		return nil, err
	}
	var ci C.colibri_model_info
	_ = C.colibri_model_info_init_sized(&ci, C.size_t(C.sizeof_colibri_model_info))
	if err := ccall("Open", func() C.colibri_status { return C.colibri_model_get_info(ptr, &ci) }); err != nil {
		C.colibri_model_free(ptr)
		return nil, err
	}
	m := &Model{ptr: ptr, info: ModelInfo{
		Family:            Family(ci.family),
		VocabSize:         int(ci.vocab_size),
		NCtxTrain:         int(ci.n_ctx_train),
		HiddenSize:        int(ci.hidden_size),
		NLayers:           int(ci.n_layers),
		NExperts:          int(ci.n_experts),
		TopK:              int(ci.top_k),
		NParams:           uint64(ci.n_params),
		NActiveParams:     uint64(ci.n_active_params),
		BOS:               int32(ci.bos_token),
		EOS:               int32(ci.eos_token),
		NRecurrentLayers:  int(ci.n_recurrent_layers),
		NAttentionLayers:  int(ci.n_attention_layers),
		SessionStateBytes: uint64(ci.session_state_bytes),
	}}
	runtime.SetFinalizer(m, func(m *Model) { m.Close() })
	return m, nil
}

// Info returns facts about the model (read once at Open; still available after Close).
func (m *Model) Info() ModelInfo { return m.info }

// acquire marks a call in flight and returns the handle, or ErrClosed.
func (m *Model) acquire() (*C.colibri_model, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	m.users++
	return m.ptr, nil
}

// release ends a call; the last call after Close frees the handle.
func (m *Model) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users--
	if m.closed && m.users == 0 && m.ptr != nil {
		C.colibri_model_free(m.ptr)
		m.ptr = nil
	}
}

// Close releases the model. It is idempotent and never blocks: calls in flight finish first
// (the handle is freed when the last one returns). Sessions made from the model stay valid.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	runtime.SetFinalizer(m, nil)
	if m.users == 0 && m.ptr != nil {
		C.colibri_model_free(m.ptr)
		m.ptr = nil
	}
	return nil
}

// Tokenize encodes UTF-8 text to token ids. addSpecial adds BOS etc. as the tokenizer's
// post-processor says. Safe for concurrent use.
func (m *Model) Tokenize(text string, addSpecial bool) ([]int32, error) {
	ptr, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	ctext := C.CString(text) // copies: C must not see Go string memory
	defer C.free(unsafe.Pointer(ctext))
	return readIDs("Tokenize", len(text)/2+16, func(toks []int32, n *C.size_t) C.colibri_status {
		return C.colibri_tokenize(ptr, ctext, C.size_t(len(text)), boolInt(addSpecial),
			cInt32s(toks), C.size_t(len(toks)), n)
	})
}

// readIDs runs an id-returning call with a buffer of capacity ids, growing it once when the
// library says how many it needs.
func readIDs(op string, capacity int, call func(toks []int32, n *C.size_t) C.colibri_status) ([]int32, error) {
	toks := make([]int32, capacity)
	for {
		var n C.size_t
		err := ccall(op, func() C.colibri_status { return call(toks, &n) })
		if err == nil {
			return toks[:n], nil
		}
		if !isBufferTooSmall(err) || int(n) <= len(toks) {
			return nil, err
		}
		toks = make([]int32, n)
	}
}

// Detokenize decodes token ids to text, special tokens included. Safe for concurrent use.
func (m *Model) Detokenize(ids []int32) (string, error) {
	return m.detokenize("Detokenize", ids, false)
}

// DetokenizeSkipSpecial decodes token ids to text without special tokens (BOS, EOS, …).
func (m *Model) DetokenizeSkipSpecial(ids []int32) (string, error) {
	return m.detokenize("DetokenizeSkipSpecial", ids, true)
}

func (m *Model) detokenize(op string, ids []int32, skipSpecial bool) (string, error) {
	ptr, err := m.acquire()
	if err != nil {
		return "", err
	}
	defer m.release()
	return readText(op, 8*len(ids)+16, func(buf []byte, n *C.size_t) C.colibri_status {
		return C.colibri_detokenize(ptr, cInt32s(ids), C.size_t(len(ids)), boolInt(skipSpecial),
			cBytes(buf), C.size_t(len(buf)), n)
	})
}

// ChatRender renders messages with the model's chat template; addGenerationPrompt ends the
// text with the assistant header. ErrUnsupported when the model has no template. The result
// is text; to feed a conversation use ChatTokens (tokenizing this text reads special-token
// strings typed inside messages as control tokens).
func (m *Model) ChatRender(msgs []Message, addGenerationPrompt bool) (string, error) {
	ptr, err := m.acquire()
	if err != nil {
		return "", err
	}
	defer m.release()
	arr, free, err := cMessages("ChatRender", msgs)
	if err != nil {
		return "", err
	}
	defer free()
	return readText("ChatRender", 256, func(buf []byte, n *C.size_t) C.colibri_status {
		return C.colibri_chat_render(ptr, arr, C.size_t(len(msgs)), boolInt(addGenerationPrompt),
			cBytes(buf), C.size_t(len(buf)), n)
	})
}

// ChatTokens returns the conversation's prompt ids, with text that comes from a message
// tokenized as text: "<|im_end|>" typed by a user stays characters and cannot forge a turn;
// special tokens are read only where the template writes them. Safe for concurrent use.
func (m *Model) ChatTokens(msgs []Message, addGenerationPrompt bool) ([]int32, error) {
	ptr, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	arr, free, err := cMessages("ChatTokens", msgs)
	if err != nil {
		return nil, err
	}
	defer free()
	return readIDs("ChatTokens", 256, func(toks []int32, n *C.size_t) C.colibri_status {
		return C.colibri_chat_tokenize(ptr, arr, C.size_t(len(msgs)), boolInt(addGenerationPrompt),
			cInt32s(toks), C.size_t(len(toks)), n)
	})
}

// cMessages copies msgs into C memory (the array holds C pointers only: C never sees Go
// pointers); free releases it.
func cMessages(op string, msgs []Message) (*C.colibri_chat_message, func(), error) {
	var arr *C.colibri_chat_message
	var strs []*C.char
	free := func() {
		for _, p := range strs {
			C.free(unsafe.Pointer(p))
		}
		if arr != nil {
			C.free(unsafe.Pointer(arr))
		}
	}
	if len(msgs) > 0 {
		arr = (*C.colibri_chat_message)(C.calloc(C.size_t(len(msgs)), C.size_t(unsafe.Sizeof(C.colibri_chat_message{}))))
		if arr == nil {
			panic("colibri: out of memory")
		}
	}
	cm := unsafe.Slice(arr, len(msgs))
	for i, msg := range msgs {
		if strings.IndexByte(msg.Role, 0) >= 0 || strings.IndexByte(msg.Content, 0) >= 0 {
			free()
			return nil, nil, invalid(op, fmt.Sprintf("message %d contains a NUL byte", i))
		}
		cm[i].role = C.CString(msg.Role)
		cm[i].content = C.CString(msg.Content)
		strs = append(strs, cm[i].role, cm[i].content)
	}
	return arr, free, nil
}

// UserMetadata returns a copy of the blob attached at conversion (`colibri convert
// --user-metadata`), or nil when the file has none.
func (m *Model) UserMetadata() ([]byte, error) {
	ptr, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	var data *C.uint8_t
	var n C.size_t
	if err := ccall("UserMetadata", func() C.colibri_status { return C.colibri_model_user_metadata(ptr, &data, &n) }); err != nil {
		return nil, err
	}
	if data == nil || n == 0 {
		return nil, nil
	}
	// The blob points into the model's mapping: copy it out while the model is held.
	out := make([]byte, int(n))
	copy(out, unsafe.Slice((*byte)(unsafe.Pointer(data)), int(n)))
	return out, nil
}

// readText runs a C function that writes NUL-terminated text to a caller buffer and reports
// the length through n (also on BUFFER_TOO_SMALL), growing the buffer once if needed.
func readText(op string, guess int, f func(buf []byte, n *C.size_t) C.colibri_status) (string, error) {
	buf := make([]byte, guess)
	for {
		var n C.size_t
		err := ccall(op, func() C.colibri_status { return f(buf, &n) })
		if err == nil {
			return string(buf[:n]), nil
		}
		if !isBufferTooSmall(err) || int(n)+1 <= len(buf) {
			return "", err
		}
		buf = make([]byte, int(n)+1)
	}
}

func isBufferTooSmall(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Status == StatusBufferTooSmall
}
