package colibri

/*
#include <colibri.h>
*/
import "C"

import (
	"errors"
	"strconv"
	"strings"
)

// Status is a colibri_status value of the C ABI. The numbers are frozen by the ABI.
type Status int32

// The statuses of the C ABI (COLIBRI_STATUS_*).
const (
	StatusOK              Status = C.COLIBRI_STATUS_OK
	StatusInvalidArgument Status = C.COLIBRI_STATUS_INVALID_ARGUMENT
	StatusNullArgument    Status = C.COLIBRI_STATUS_NULL_ARGUMENT
	StatusIO              Status = C.COLIBRI_STATUS_IO
	StatusInvalidModel    Status = C.COLIBRI_STATUS_INVALID_MODEL
	StatusUnsupported     Status = C.COLIBRI_STATUS_UNSUPPORTED
	StatusBufferTooSmall  Status = C.COLIBRI_STATUS_BUFFER_TOO_SMALL
	StatusContextFull     Status = C.COLIBRI_STATUS_CONTEXT_FULL
	StatusPanic           Status = C.COLIBRI_STATUS_PANIC
	StatusBadStructSize   Status = C.COLIBRI_STATUS_BAD_STRUCT_SIZE
	StatusOutOfMemory     Status = C.COLIBRI_STATUS_OUT_OF_MEMORY
	StatusBusy            Status = C.COLIBRI_STATUS_BUSY
	StatusAborted         Status = C.COLIBRI_STATUS_ABORTED
	StatusModelChanged    Status = C.COLIBRI_STATUS_MODEL_CHANGED
)

// String is the library's description of the status (colibri_status_str), e.g. "I/O error".
func (s Status) String() string {
	return C.GoString(C.colibri_status_str(C.colibri_status(s)))
}

// Error is a failure reported by the library: its status and the detailed message of the
// failing call. Op names the Go method that failed.
type Error struct {
	Op      string
	Status  Status
	Message string
}

func (e *Error) Error() string {
	s := "colibri: "
	if e.Op != "" {
		s += e.Op + ": "
	}
	status := e.Status.String()
	if status == "unknown status" {
		status += " " + strconv.Itoa(int(e.Status))
	}
	s += status
	if msg := e.Message; msg != "" {
		// Some library messages already start with the status ("invalid argument: …").
		msg = strings.TrimPrefix(msg, status+": ")
		s += ": " + msg
	}
	return s
}

// Is reports whether target is an *Error sentinel with the same status (a target with an Op
// or Message must match those too), so errors.Is(err, colibri.ErrIO) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Status == e.Status && (t.Op == "" || t.Op == e.Op) && (t.Message == "" || t.Message == e.Message)
}

// Sentinels for errors.Is, one per failure status.
var (
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	ErrNullArgument    = &Error{Status: StatusNullArgument}
	ErrIO              = &Error{Status: StatusIO}
	ErrInvalidModel    = &Error{Status: StatusInvalidModel}
	ErrUnsupported     = &Error{Status: StatusUnsupported}
	ErrBufferTooSmall  = &Error{Status: StatusBufferTooSmall}
	ErrContextFull     = &Error{Status: StatusContextFull}
	ErrOutOfMemory     = &Error{Status: StatusOutOfMemory}
	// ErrPanic: a bug inside the library was caught at the C boundary. The process keeps
	// running; the Session the call was working on should be closed.
	ErrPanic         = &Error{Status: StatusPanic}
	ErrBadStructSize = &Error{Status: StatusBadStructSize}
	// ErrBusy: a Session method was called while another call on the same Session was
	// running (from another goroutine, or from inside that call's callback). Nothing was done.
	ErrBusy = &Error{Status: StatusBusy}
	// ErrAborted: a route callback panicked; the call was undone (the Session is as it was
	// before it) and the panic is re-raised by the method.
	ErrAborted = &Error{Status: StatusAborted}
	// ErrModelChanged: the model file was truncated or rewritten in place after it was opened
	// (see WithSigbusGuard); the call's results were discarded. Open the model again.
	ErrModelChanged = &Error{Status: StatusModelChanged}
)

// ErrClosed is returned by methods of a Model or Session after Close.
var ErrClosed = errors.New("colibri: use of a closed Model or Session")

// invalid builds an INVALID_ARGUMENT error for arguments the Go side rejects itself.
func invalid(op, msg string) error {
	return &Error{Op: op, Status: StatusInvalidArgument, Message: msg}
}
