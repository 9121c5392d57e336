// Package colibri is the Go binding of colibri, a Mixture-of-Experts LLM inference engine
// for CPUs (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) with a stable C ABI.
//
// It links libcolibri through cgo and pkg-config (`#cgo pkg-config: colibri`): colibri.pc
// must be found at build time and libcolibri.so.1 (the SONAME, whose suffix is
// HeaderABIVersion) at run time (see README.md). Build with `-tags colibri_static` to link
// libcolibri.a instead (`#cgo pkg-config: colibri-static`).
//
// # Objects and ownership
//
// A [Model] is an opened, validated .colibri file. It is immutable and safe for concurrent
// use by any number of goroutines; sessions made from it keep it alive inside the library,
// so closing the Model while its sessions live is fine.
//
// A [Session] holds one sequence's KV cache. It serves one call at a time: a call that
// overlaps another call on the same Session (from a second goroutine, or from inside a
// Generate callback) returns [ErrBusy] instead of racing or deadlocking. Use one Session per
// goroutine for parallelism.
//
// Explicit Close is the contract for both: it is idempotent, safe to call concurrently with
// other methods (the handle is freed when the last in-flight call returns) and never blocks.
// Methods called after Close return [ErrClosed]. A finalizer closes handles that become
// unreachable without Close, as a safety net only: the Go garbage collector does not see the
// native memory (KV caches, model buffers) and may run finalizers late or never.
//
// # Errors
//
// Failures of the library come back as *[Error] values carrying the library's status and its
// detailed message; compare them with errors.Is against the sentinels ([ErrInvalidArgument],
// [ErrIO], …) or unwrap them with errors.As. The message is read with
// colibri_last_error_message_copy while the goroutine is locked to its OS thread
// (runtime.LockOSThread around the failing call and the read), because the library keeps
// the last message per OS thread and cgo calls may otherwise run on different threads.
package colibri

/*
#include <stdlib.h>
#include <colibri.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Version is the version of the loaded library ("MAJOR.MINOR.PATCH").
func Version() string { return C.GoString(C.colibri_version()) }

// ABIVersion is the C ABI version of the loaded library (the SONAME suffix of libcolibri.so).
func ABIVersion() int { return int(C.colibri_abi_version()) }

// HeaderABIVersion is the C ABI version of the colibri.h this package was compiled against.
const HeaderABIVersion = int(C.COLIBRI_ABI_VERSION)

// headerVersion is the library version of the colibri.h this package was compiled against.
func headerVersion() string {
	return fmt.Sprintf("%d.%d.%d", C.COLIBRI_VERSION_MAJOR, C.COLIBRI_VERSION_MINOR, C.COLIBRI_VERSION_PATCH)
}

// lastErrorMessage copies the calling OS thread's last error message out of the library.
// The caller must have locked the goroutine to its thread since the failing call.
func lastErrorMessage() string {
	var small [256]byte
	buf := small[:]
	for {
		need := int(C.colibri_last_error_message_copy((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))))
		if need <= 1 {
			return ""
		}
		if need <= len(buf) {
			return string(buf[:need-1])
		}
		buf = make([]byte, need)
	}
}

// ccall runs one fallible C call and turns a non-OK status into an *Error with the library's
// message. The goroutine stays on one OS thread from the call until the message is read.
func ccall(op string, f func() C.colibri_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := f()
	if st == C.COLIBRI_STATUS_OK {
		return nil
	}
	return &Error{Op: op, Status: Status(st), Message: lastErrorMessage()}
}

// debugPanic calls colibri_debug_panic, which panics inside the library: the panic must be
// caught at the C boundary and come back as StatusPanic (used by the tests).
func debugPanic() error {
	return ccall("debug_panic", func() C.colibri_status { return C.colibri_debug_panic() })
}

// cInt32s points C at a Go []int32 for the duration of one call (NULL when empty). Go memory
// without Go pointers may be passed to C this way; C does not keep it.
func cInt32s(s []int32) *C.int32_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&s[0]))
}

// cFloats is cInt32s for []float32.
func cFloats(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

// cBytes is cInt32s for []byte.
func cBytes(s []byte) *C.char {
	if len(s) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&s[0]))
}

func boolInt(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}
