package cli

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTableColourDoesNotBreakAlignment(t *testing.T) {
	tb := &table{headers: []string{"PARTITION", "STATUS", "ERROR"}}
	tb.add("2026-11-28", "success", "-")
	tb.add("2026-11-29", "failed", "empty_source: ünïcode\tand\nnewline")
	var plain, coloured bytes.Buffer
	require.NoError(t, tb.print(&plain, false))
	require.NoError(t, tb.print(&coloured, true))
	require.Contains(t, coloured.String(), "\x1b[31mfailed\x1b[0m")
	stripped := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(coloured.String(), "")
	require.Equal(t, plain.String(), stripped)
	require.Equal(t, "PARTITION   STATUS   ERROR\n2026-11-28  success  -\n2026-11-29  failed   empty_source: ünïcode and newline\n", plain.String())
}
