//go:build !colibri_static

package colibri

// Links libcolibri.so (SONAME libcolibri.so.1: the header's COLIBRI_ABI_VERSION, see
// HeaderABIVersion) as described by colibri.pc.

// #cgo pkg-config: colibri
import "C"
