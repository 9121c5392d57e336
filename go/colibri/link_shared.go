//go:build !colibri_static

package colibri

// Links libcolibri.so (SONAME libcolibri.so.0) as described by colibri.pc.

// #cgo pkg-config: colibri
import "C"
