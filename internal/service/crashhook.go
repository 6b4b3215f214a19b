//go:build !idemtest

package service

// crashHook is a no-op in real builds. Tests build idem with -tags idemtest to
// make a process die at chosen points (see crashhook_idemtest.go).
func crashHook(point, runID string) {}
