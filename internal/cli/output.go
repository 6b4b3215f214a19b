package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mattn/go-isatty"
)

// isTerminal reports whether w is a terminal: colour and progress bars only
// go there, never into a pipe or a file.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// table is what listing commands print: an aligned table for people, or with
// --json the rows as JSON for scripts.
type table struct {
	headers []string
	rows    [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// print writes the table aligned with two spaces between columns. With
// colour, status words are coloured (success green, failed red, ...).
func (t *table) print(w io.Writer, colour bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.headers, "\t"))
	for _, r := range t.rows {
		cells := make([]string, len(r))
		for i, c := range r {
			c = strings.NewReplacer("\n", " ", "\t", " ").Replace(c)
			if colour {
				c = colourStatus(c)
			}
			cells[i] = c
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

var statusColours = map[string]string{
	"success": "32", "loaded": "32", "ok": "32",
	"failed": "31", "fatal": "31", "crashed": "31", "exhausted": "31", "dead_letter": "31",
	"started": "33", "missing": "33", "pending": "33",
	"skipped": "36",
}

// colourStatus colours a cell that is exactly a status word. tabwriter counts
// the escape bytes, so coloured columns stay aligned only because every cell
// of a status column is coloured the same way; other cells are left alone.
func colourStatus(c string) string {
	if code, ok := statusColours[c]; ok {
		return "\x1b[" + code + "m" + c + "\x1b[0m"
	}
	return c
}

// printJSON writes v as indented JSON followed by a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
