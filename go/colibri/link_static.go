//go:build colibri_static

package colibri

// Links libcolibri.a into the program (build with -tags colibri_static) as described by
// colibri-static.pc: no libcolibri.so.1 is needed at run time.

// #cgo pkg-config: colibri-static
import "C"
