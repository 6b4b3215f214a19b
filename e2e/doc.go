// Package e2e tests the idem binary from the outside; it has only tests.
package e2e
