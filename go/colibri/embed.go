package colibri

/*
#include <stdlib.h>
#include <colibri.h>
*/
import "C"

// Pooling is how Embed turns the per-token hidden states into one vector (colibri_pooling).
type Pooling int32

// Poolings (COLIBRI_POOLING_*).
const (
	// PoolingMean averages every token's state (the default).
	PoolingMean Pooling = C.COLIBRI_POOLING_MEAN
	// PoolingLast takes the last token's state (the one position that has seen the whole input).
	PoolingLast Pooling = C.COLIBRI_POOLING_LAST
	// PoolingCLS takes the first token's state (BERT's [CLS] convention).
	PoolingCLS Pooling = C.COLIBRI_POOLING_CLS
)

// EmbedOption configures Embed and EmbedText.
type EmbedOption func(*C.colibri_embed_params)

// WithPooling chooses the pooling (default PoolingMean).
func WithPooling(p Pooling) EmbedOption {
	return func(c *C.colibri_embed_params) { c.pooling = C.colibri_pooling(p) }
}

// WithNormalize scales the vector to unit L2 norm (default true).
func WithNormalize(on bool) EmbedOption {
	return func(c *C.colibri_embed_params) { c.normalize = boolInt(on) }
}

// WithEmbedQuantAct chooses how reduced-precision weights meet their activations (default
// QuantActDefault), as WithQuantAct does for a session.
func WithEmbedQuantAct(q QuantAct) EmbedOption {
	return func(c *C.colibri_embed_params) { c.quant_act = C.colibri_quant_act(q) }
}

// Embed returns the embedding of tokens (at least one; add BOS yourself if the model wants
// one): the model's final-normed hidden states — what the lm_head reads — pooled over the
// tokens (mean by default) and scaled to unit L2 norm, Info().HiddenSize floats. It runs in a
// session of its own: none of the model's sessions is touched. Safe for concurrent use.
func (m *Model) Embed(tokens []int32, opts ...EmbedOption) ([]float32, error) {
	var p C.colibri_embed_params
	_ = C.colibri_embed_params_init_sized(&p, C.size_t(C.sizeof_colibri_embed_params))
	for _, o := range opts {
		o(&p)
	}
	ptr, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	out := make([]float32, m.info.HiddenSize)
	var n C.size_t
	err = ccall("Embed", func() C.colibri_status {
		return C.colibri_embed(ptr, cInt32s(tokens), C.size_t(len(tokens)), &p, cFloats(out), C.size_t(len(out)), &n)
	})
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// EmbedText is Embed of text tokenised with the tokenizer's special tokens (Tokenize(text, true)).
func (m *Model) EmbedText(text string, opts ...EmbedOption) ([]float32, error) {
	ids, err := m.Tokenize(text, true)
	if err != nil {
		return nil, err
	}
	return m.Embed(ids, opts...)
}
