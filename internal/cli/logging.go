package cli

import (
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// newLogger logs JSON lines, or a readable console format when w is a
// terminal. IDEM_LOG_LEVEL (debug, info, warn, error) sets the level.
func newLogger(w io.Writer, getenv func(string) string) zerolog.Logger {
	out := w
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	level := zerolog.InfoLevel
	if l, err := zerolog.ParseLevel(getenv("IDEM_LOG_LEVEL")); err == nil && l != zerolog.NoLevel {
		level = l
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger()
}
