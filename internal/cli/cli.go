// Package cli holds idem's commands. Run parses arguments and writes to the
// given writers, so every command is testable without a process; cmd/idem only
// turns the returned error into an exit code (UsageError: 2, other errors: 1).
//
// A command parses its flags, loads the config and renders; it does not
// assemble the service: `idem serve` and `idem dev` hand the config to
// internal/service, whose wiring the other commands share (connecting,
// building datasets, the streams' config).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/internal/config"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=v1.2.3".
var Version = "dev"

// UsageError means the command line itself was wrong (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitError is a failure with an exit code of its own (publish --wait: 3
// not finished by the timeout, 4 NATS or the results unreachable). Err nil:
// the command already said why.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}
func (e *ExitError) Unwrap() error { return e.Err }

// ErrReported means the command already printed why it failed (exit code 1).
var ErrReported = errors.New("failed")

// env is what commands share: writers, the environment and global flags.
type env struct {
	out, errOut io.Writer
	getenv      func(string) string
	configPath  string
}

// loadConfig reads and completes the config file; validation is the caller's.
func (e *env) loadConfig() (*config.Config, error) {
	cfg, err := config.Load(e.configPath, e.getenv)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config file %s not found: pass --config or set IDEM_CONFIG", e.configPath)
	}
	return cfg, err
}

// validConfig loads the config and refuses to go on with any problem.
func (e *env) validConfig() (*config.Config, error) {
	cfg, err := e.loadConfig()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s has problems (run 'idem validate'):\n%w", e.configPath, err)
	}
	return cfg, nil
}

// databaseURL is the Postgres URL from the config, or the environment alone
// when there is no config file (idem migrate needs nothing else).
func (e *env) databaseURL() (string, error) {
	cfg, err := config.Load(e.configPath, e.getenv)
	switch {
	case err == nil && cfg.Postgres.URL != "":
		return cfg.Postgres.URL, nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if u := e.getenv("IDEM_DATABASE_URL"); u != "" {
			return u, nil
		}
		return "", errors.New("no database: set postgres.url in the config or IDEM_DATABASE_URL")
	default:
		return "", err
	}
}

// Run runs the idem command line args.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return run(ctx, args, stdout, stderr, os.Getenv)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	root := newRoot(&env{out: stdout, errOut: stderr, getenv: getenv})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var exit *ExitError
	if err == nil || errors.Is(err, ErrReported) || errors.As(err, &exit) && exit.Err == nil {
		return err
	}
	var usage *UsageError
	if errors.As(err, &usage) || isCobraUsage(err) {
		help := "idem"
		var unknown *unknownCommandError
		if errors.As(err, &unknown) {
			help = unknown.helpPath()
		}
		fmt.Fprintf(stderr, "idem: %v\nRun '%s --help' for usage.\n", err, help)
		if usage == nil {
			return &UsageError{err}
		}
		return err
	}
	fmt.Fprintf(stderr, "idem: %v\n", err)
	return err
}

// newRoot builds idem's whole command tree, writing to e's writers.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "idem",
		Short: "Idempotent partition loads from NATS JetStream into PostgreSQL",
		Long: `idem consumes "partition ready" events from NATS JetStream and loads each
partition into PostgreSQL with an idempotent strategy (delete_insert, merge,
append_dedupe), recording every attempt in the idem.pipeline_audit table.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	defPath := "idem.yaml"
	if p := e.getenv("IDEM_CONFIG"); p != "" {
		defPath = p
	}
	root.PersistentFlags().StringVarP(&e.configPath, "config", "c", defPath, "config file (env IDEM_CONFIG)")
	root.SetOut(e.out)
	root.SetErr(e.errOut)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// "idem dlq replya --all": the flag belongs to no group; the
		// subcommand before it is what is wrong.
		if isGroup(cmd) {
			if err := groupArgs(cmd, cmd.Flags().Args()); err != nil {
				return err
			}
		}
		return &UsageError{err}
	})
	root.AddCommand(versionCmd(e), migrateCmd(e), checkCmd(e), loadCmd(e), validateCmd(e), devCmd(e), serveCmd(e), streamsCmd(e),
		publishCmd(e), backfillCmd(e), dlqCmd(e), auditCmd(e), pauseCmd(e), resumeCmd(e), restoreCmd(e), retractCmd(e))
	// cobra adds its completion group when the command runs; added now,
	// guard covers it too (the help command stays cobra's, added later).
	root.InitDefaultCompletionCmd()
	guard(root)
	return root
}

// ExitCode is the process's exit code for the error Run returned: 0 for
// nil, 2 for a UsageError, an ExitError's own code, 1 for any other.
func ExitCode(err error) int {
	var usage *UsageError
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		return 2
	case errors.As(err, &exit):
		return exit.Code
	default:
		return 1
	}
}

// wrapArgs turns cobra's argument-count errors into usage errors.
func wrapArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	if check == nil {
		check = cobra.NoArgs
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &UsageError{err}
		}
		return nil
	}
}

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the idem version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(e.out, "idem %s (%s, %s/%s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// isCobraUsage recognises cobra's own command-line errors, which it returns as
// plain errors.
func isCobraUsage(err error) bool {
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "invalid argument", "flag needs an argument"} {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}
