package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// groupAnnotation marks the command groups guard made runnable.
const groupAnnotation = "idem.group"

// guard walks the command tree once it is built. A group (a command with
// subcommands and no Run of its own) prints its help when called alone and
// refuses any positional argument as an unknown command; cobra itself does so
// only for the root, and otherwise prints the group's help and returns nil,
// which exits 0. Every other runnable command's argument errors become usage
// errors.
func guard(c *cobra.Command) {
	switch {
	case c.HasSubCommands() && !c.Runnable():
		// cobra never checked Args of a command without Run; whatever is
		// there is replaced.
		c.Args = groupArgs
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		c.DisableFlagsInUseLine = true // "idem dlq", not "idem dlq [flags]"
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[groupAnnotation] = "true"
	case c.HasSubCommands():
		// A group with a Run of its own decides its arguments; without an
		// Args, anything but a subcommand is an unknown one.
		if c.Args == nil {
			c.Args = groupArgs
		} else {
			c.Args = wrapArgs(c.Args)
		}
	case c.Runnable():
		c.Args = wrapArgs(c.Args)
	}
	for _, sub := range c.Commands() {
		guard(sub)
	}
}

// isGroup says whether guard made c a group that takes no arguments.
func isGroup(c *cobra.Command) bool { return c.Annotations[groupAnnotation] == "true" }

// groupArgs accepts no positional argument: what reaches a group's own Args
// is not one of its subcommands.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return &UsageError{&unknownCommandError{cmd: cmd, name: args[0]}}
}

// unknownCommandError is an argument of a group that names none of its
// subcommands.
type unknownCommandError struct {
	cmd  *cobra.Command
	name string
}

func (e *unknownCommandError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown command %q for %q", e.name, e.cmd.CommandPath())
	if !e.cmd.DisableSuggestions {
		if e.cmd.SuggestionsMinimumDistance <= 0 {
			e.cmd.SuggestionsMinimumDistance = 2
		}
		if s := e.cmd.SuggestionsFor(e.name); len(s) > 0 {
			b.WriteString("\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n")
		}
	}
	var names []string
	for _, sub := range e.cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if len(names) > 0 {
		fmt.Fprintf(&b, "\n%s commands: %s", e.cmd.CommandPath(), strings.Join(names, ", "))
	}
	return b.String()
}

// helpPath is the command whose --help a usage error points to: the group
// for an unknown subcommand, otherwise idem itself.
func (e *unknownCommandError) helpPath() string { return e.cmd.CommandPath() }
