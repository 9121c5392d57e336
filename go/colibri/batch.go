package colibri

/*
#include <stdlib.h>
#include <colibri.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// InferBatch runs one forward step over several sessions of this model together
// (colibri_infer_batch): session i gets tokens[i] (one id when decoding, or a prompt chunk)
// exactly as sessions[i].Infer(tokens[i]) would, but the model's weights are read once for all
// of them. It returns each session's logits, shaped as its Infer would return them. Each session
// keeps its own options (all logits, routing, seed, experts per token) and route callback.
//
// Every session must come from this Model and be free: a closed one gives ErrClosed, one in
// use ErrBusy, one given twice ErrInvalidArgument. The library checks the rest before anything
// changes (an empty token list, a session of another Model or sessions with different
// QuantAct: ErrInvalidArgument; a full context: ErrContextFull), so a failed call leaves every
// session as it was.
func (m *Model) InferBatch(sessions []*Session, tokens [][]int32) ([][]float32, error) {
	const op = "InferBatch"
	if len(sessions) != len(tokens) {
		return nil, invalid(op, fmt.Sprintf("%d sessions but %d token lists", len(sessions), len(tokens)))
	}
	for i, s := range sessions {
		if s == nil {
			return nil, &Error{Op: op, Status: StatusNullArgument, Message: fmt.Sprintf("sessions[%d] is nil", i)}
		}
		for j := 0; j < i; j++ {
			if sessions[j] == s {
				return nil, invalid(op, fmt.Sprintf("sessions[%d] and sessions[%d] are the same session", j, i))
			}
		}
	}
	mp, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.release()
	ptrs := make([]*C.colibri_session, len(sessions)) // C pointers only: may be passed to C
	for i, s := range sessions {
		p, err := s.acquire()
		if err != nil {
			for _, held := range sessions[:i] {
				held.release()
			}
			return nil, err
		}
		ptrs[i] = p
	}
	defer func() {
		for _, s := range sessions {
			s.release()
		}
	}()

	// The ids go to C memory: a Go array of pointers into Go memory may not be passed to C.
	counts := make([]C.size_t, len(tokens))
	total, rows := 0, 0
	for i, t := range tokens {
		counts[i] = C.size_t(len(t))
		total += len(t)
		if sessions[i].allLogits {
			rows += len(t)
		} else {
			rows++
		}
	}
	n := len(sessions)
	// C.malloc never returns NULL (cgo aborts on out-of-memory).
	cids := unsafe.Slice((*C.int32_t)(C.malloc(C.size_t(total+1)*C.size_t(unsafe.Sizeof(C.int32_t(0))))), total+1)
	defer C.free(unsafe.Pointer(&cids[0]))
	cptrs := unsafe.Slice((**C.int32_t)(C.malloc(C.size_t(n+1)*C.size_t(unsafe.Sizeof((*C.int32_t)(nil))))), n+1)
	defer C.free(unsafe.Pointer(&cptrs[0]))
	at := 0
	for i, t := range tokens {
		cptrs[i] = &cids[at]
		for _, id := range t {
			cids[at] = C.int32_t(id)
			at++
		}
	}
	vocab := m.info.VocabSize
	out := make([]float32, rows*vocab)
	var sp **C.colibri_session
	var cp **C.int32_t
	var np *C.size_t
	if n > 0 {
		sp, cp, np = &ptrs[0], &cptrs[0], &counts[0]
	}
	err = ccall(op, func() C.colibri_status {
		return C.colibri_infer_batch(mp, sp, cp, np, C.size_t(n), cFloats(out), C.size_t(len(out)))
	})
	rethrowRoutePanics(sessions)
	if err != nil {
		return nil, err
	}
	logits := make([][]float32, n)
	at = 0
	for i, t := range tokens {
		k := vocab
		if sessions[i].allLogits {
			k *= len(t)
		}
		logits[i] = out[at : at+k : at+k]
		at += k
	}
	return logits, nil
}

// rethrowRoutePanics re-raises the first panic of the sessions' route callbacks during a batch
// (each was caught before it could unwind through the library) and forgets the others.
func rethrowRoutePanics(sessions []*Session) {
	var first interface{}
	panicked := false
	for _, s := range sessions {
		if st := s.routeSt; st != nil && st.panicked {
			if !panicked {
				first, panicked = st.panicVal, true
			}
			st.panicked, st.panicVal = false, nil
		}
	}
	if panicked {
		panic(first)
	}
}
