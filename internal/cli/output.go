package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

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
// colour, status words are coloured after padding, so escape codes never
// count toward a column's width.
func (t *table) print(w io.Writer, colour bool) error {
	clean := func(c string) string { return strings.NewReplacer("\n", " ", "\t", " ").Replace(c) }
	widths := make([]int, len(t.headers))
	grow := func(cells []string) {
		for i, c := range cells {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(clean(c)))
		}
	}
	grow(t.headers)
	for _, r := range t.rows {
		grow(r)
	}
	line := func(cells []string, colourise bool) error {
		var b strings.Builder
		for i, c := range cells {
			c = clean(c)
			pad := ""
			if i < len(cells)-1 {
				pad = strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2)
			}
			if colourise {
				c = colourStatus(c)
			}
			b.WriteString(c + pad)
		}
		_, err := fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		return err
	}
	if err := line(t.headers, false); err != nil {
		return err
	}
	for _, r := range t.rows {
		if err := line(r, colour); err != nil {
			return err
		}
	}
	return nil
}

var statusColours = map[string]string{
	"success": "32", "loaded": "32", "ok": "32", "pass": "32", "warn": "33", "fail": "31",
	"failed": "31", "fatal": "31", "crashed": "31", "exhausted": "31", "dead_letter": "31",
	"started": "33", "missing": "33", "pending": "33",
	"skipped": "36",
}

// colourStatus colours a cell that is exactly a status word.
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

// printJSONLine writes v as one line of JSON: what a scheduler reads as
// the command's last stdout line (Airflow's XCom).
func printJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
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
