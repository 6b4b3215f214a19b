package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// groups walks the tree the binary builds and returns every command with
// subcommands and no Run of its own, the root first. A runnable one
// (backfill DATASET, beside backfill cancel) takes its own arguments:
// TestRunnableGroupKeepsItsArguments.
func groups(t *testing.T) []*cobra.Command {
	t.Helper()
	root := newRoot(&env{out: io.Discard, errOut: io.Discard, getenv: func(string) string { return "" }})
	var found []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && (!c.Runnable() || isGroup(c)) {
			found = append(found, c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	require.NotEmpty(t, found)
	require.Same(t, root, found[0], "the root is a group")
	require.Greater(t, len(found), 1, "the walk found no group below the root")
	return found
}

// argv is the command line that reaches c: its path without "idem".
func argv(c *cobra.Command) []string { return strings.Fields(c.CommandPath())[1:] }

func TestGroupsRefuseUnknownSubcommands(t *testing.T) {
	for _, g := range groups(t) {
		path := g.CommandPath()
		t.Run(path, func(t *testing.T) {
			for _, tail := range [][]string{
				{"nosuchcommand"},
				{"nosuchcommand", "12"},
				{"nosuchcommand", "--nosuchflag"},
			} {
				args := append(argv(g), tail...)
				r := runCLI(t, nil, args...)
				require.Error(t, r.e, "%v", args)
				require.Equal(t, 2, ExitCode(r.e), "%v: %v", args, r.e)
				var usage *UsageError
				require.True(t, errors.As(r.e, &usage), "%v: %v", args, r.e)
				require.Contains(t, r.err, fmt.Sprintf("unknown command %q for %q", "nosuchcommand", path), "%v", args)
				require.Contains(t, r.err, fmt.Sprintf("Run '%s --help' for usage.", path), "%v", args)
				require.Empty(t, r.out, "%v: nothing on stdout", args)
				for _, sub := range g.Commands() {
					if sub.IsAvailableCommand() {
						require.Contains(t, r.err, sub.Name(), "%v: the group's commands are listed", args)
					}
				}
			}
		})
	}
}

func TestGroupsAlonePrintHelp(t *testing.T) {
	for _, g := range groups(t) {
		path := g.CommandPath()
		t.Run(path, func(t *testing.T) {
			for _, extra := range [][]string{nil, {"--help"}} {
				args := append(argv(g), extra...)
				r := runCLI(t, nil, args...)
				require.NoError(t, r.e, "%v: %s", args, r.err)
				require.Equal(t, 0, ExitCode(r.e))
				require.Empty(t, r.err, "%v", args)
				require.Contains(t, r.out, "Usage:", "%v", args)
				require.Contains(t, r.out, path+" [command]", "%v", args)
				for _, sub := range g.Commands() {
					if sub.IsAvailableCommand() {
						require.Contains(t, r.out, sub.Name(), "%v", args)
					}
				}
			}
		})
	}
}

func TestRunnableGroupKeepsItsArguments(t *testing.T) {
	r := runCLI(t, nil, "backfill")
	require.Equal(t, 2, ExitCode(r.e), "backfill needs its DATASET: %v", r.e)
	r = runCLI(t, nil, "backfill", "cancel", "--help")
	require.NoError(t, r.e)
	require.Contains(t, r.out, "backfill cancel RUN_ID")
	r = runCLI(t, nil, "backfill", "cancel", "backfill__x")
	require.Equal(t, 2, ExitCode(r.e))
	require.Contains(t, r.err, "--reason is required")
}

func TestExitCode(t *testing.T) {
	require.Equal(t, 0, ExitCode(nil))
	require.Equal(t, 2, ExitCode(&UsageError{errors.New("bad flag")}))
	require.Equal(t, 2, ExitCode(fmt.Errorf("wrapped: %w", &UsageError{errors.New("bad flag")})))
	require.Equal(t, 3, ExitCode(&ExitError{Code: 3}))
	require.Equal(t, 1, ExitCode(ErrReported))
	require.Equal(t, 1, ExitCode(errors.New("boom")))
}
