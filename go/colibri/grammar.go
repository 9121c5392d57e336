package colibri

/*
#include <stdlib.h>
#include <colibri.h>
*/
import "C"

import (
	"sync"
)

// Grammar is a response format compiled against a model's vocabulary (colibri_grammar): set
// GenerateParams.Grammar to hold a generation's output to it. A generation that then ends with
// FinishEOS has produced a complete JSON document valid against the schema. Immutable and safe
// for concurrent use; do not Close it while a Generate using it runs.
type Grammar struct {
	mu  sync.Mutex
	ptr *C.colibri_grammar
}

// NewGrammar compiles jsonSchema (JSON Schema text; "" for any JSON object) against the
// model's vocabulary. A schema that is not JSON or that the grammar engine refuses is
// ErrInvalidArgument (the Error's Message says why). The first grammar of a model prepares its
// vocabulary (1-2 s for 150k tokens).
func (m *Model) NewGrammar(jsonSchema string) (*Grammar, error) {
	ptr, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	format := C.colibri_response_format(C.COLIBRI_RESPONSE_JSON_SCHEMA)
	if jsonSchema == "" {
		format = C.COLIBRI_RESPONSE_JSON_OBJECT
	}
	text := C.CBytes([]byte(jsonSchema + "\x00"))
	defer C.free(text)
	var g *C.colibri_grammar
	err = ccall("NewGrammar", func() C.colibri_status {
		return C.colibri_grammar_new(ptr, format, (*C.char)(text), C.size_t(len(jsonSchema)), &g)
	})
	if err != nil {
		return nil, err
	}
	return &Grammar{ptr: g}, nil
}

// Close frees the grammar; later calls do nothing.
func (g *Grammar) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ptr != nil {
		C.colibri_grammar_free(g.ptr)
		g.ptr = nil
	}
	return nil
}

// cPtr is the C grammar of g (NULL for a nil or closed one).
func (g *Grammar) cPtr() *C.colibri_grammar {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ptr
}
