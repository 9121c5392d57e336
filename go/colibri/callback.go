package colibri

// The Go functions the library calls back. They are reached through small C trampolines (in
// generate.go and session.go) whose userdata is a runtime/cgo.Handle: the library never holds
// a Go pointer. A panic in user code is recovered here, before it could unwind through the
// library's (Rust) frames, and re-raised by the Go method once the C call has returned.

/*
#include <stdint.h>
#include <stddef.h>
#include <colibri.h>
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// colibriGoToken is Generate's token callback: it records the piece's text for the result,
// hands the piece to the caller's fn (when there is one), and asks the library to stop once fn
// has returned true (stop) or panicked, the context is done, or the Session is being closed.
//
//export colibriGoToken
func colibriGoToken(h C.uintptr_t, token C.int32_t, text *C.char, n C.size_t) (stop C.int32_t) {
	st := cgo.Handle(h).Value().(*genState)
	if st.panicked {
		return 1
	}
	if (st.stopped || st.cancelled) && token >= 0 {
		return 1
	}
	defer func() {
		if r := recover(); r != nil {
			st.panicked, st.panicVal = true, r
			stop = 1
		}
	}()
	var s string
	if n > 0 {
		// Copy the text out of C memory (valid during this call only).
		s = string(unsafe.Slice((*byte)(unsafe.Pointer(text)), int(n)))
	}
	st.text.WriteString(s)
	if st.fn != nil && st.fn(int32(token), s) {
		st.stopped = true
		return 1
	}
	if st.ctx.Err() != nil { // checked after each delivered piece: Generate returns ctx.Err()
		st.cancelled = true
		return 1
	}
	if st.s.closing() {
		return 1
	}
	return 0
}

// colibriGoRoute is the route callback: it copies one routing record out of C memory for the
// caller's fn and asks the library to skip the call's remaining records once fn has returned
// true, or to abort (and undo) the call once fn has panicked.
//
//export colibriGoRoute
func colibriGoRoute(h C.uintptr_t, layer, position C.int32_t, experts *C.int32_t, weights *C.float, k C.size_t) (stop C.int32_t) {
	st := cgo.Handle(h).Value().(*routeState)
	if st.panicked {
		return C.COLIBRI_ROUTE_ABORT
	}
	defer func() {
		if r := recover(); r != nil {
			st.panicked, st.panicVal = true, r
			stop = C.COLIBRI_ROUTE_ABORT
		}
	}()
	r := Route{Layer: int(layer), Position: int(position), Experts: make([]int32, int(k)), Weights: make([]float32, int(k))}
	if k > 0 {
		copy(r.Experts, unsafe.Slice((*int32)(unsafe.Pointer(experts)), int(k)))
		copy(r.Weights, unsafe.Slice((*float32)(unsafe.Pointer(weights)), int(k)))
	}
	if st.fn(r) {
		return 1
	}
	return 0
}
