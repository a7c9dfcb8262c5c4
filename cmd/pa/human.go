package main

// Output for people: tables and wrapped text (the default), kept apart from the commands
// so that every command can reuse them. -json prints the server's answer unchanged.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// textWidth is the column text is wrapped at.
const textWidth = 80

// table writes rows under a header, each column as wide as its widest cell (the last
// column is not padded). Cells are single-line: newlines and tabs become spaces.
func table(w io.Writer, header []string, rows [][]string) {
	width := make([]int, len(header))
	clean := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	all := append([][]string{header}, rows...)
	for _, r := range all {
		for i := range r {
			r[i] = clean(r[i])
			width[i] = max(width[i], utf8.RuneCountInString(r[i]))
		}
	}
	for _, r := range all {
		var b strings.Builder
		for i, cell := range r {
			if i == len(r)-1 {
				b.WriteString(cell)
				break
			}
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell)+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// wrap breaks text into lines of at most width columns at spaces (a longer word stays
// whole), each line after the first starting with indent. Existing line breaks are kept.
func wrap(text string, width int, indent string) string {
	var out []string
	for _, para := range strings.Split(text, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			switch {
			case line == "":
				line = word
			case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width-utf8.RuneCountInString(indent):
				out = append(out, line)
				line = word
			default:
				line += " " + word
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n"+indent)
}

// when shows an RFC 3339 time as local minutes ("" stays "", unparsable stays as it is).
func when(ts string) string {
	if ts == "" {
		return ""
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return t.UTC().Format("2006-01-02 15:04")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// render prints an answer: raw with asJSON (exactly what the server said), else through
// human (which decodes b itself). With an error, the raw answer (the error envelope) is
// printed only with asJSON.
func (c *cli) render(asJSON bool, human func(w io.Writer, b json.RawMessage) error) func(json.RawMessage, error) error {
	return func(b json.RawMessage, err error) error {
		if err != nil || asJSON {
			return c.print(asJSON, b, err)
		}
		if herr := human(c.out, b); herr != nil {
			return fmt.Errorf("read the answer: %w", herr)
		}
		return nil
	}
}

// noServer is the error of a connection nobody answered (an exitErr, exit 1).
type noServer struct{ *exitErr }

func (e noServer) Unwrap() error { return e.exitErr }

// unreachable turns a failure to connect into a plain sentence (a noServer); other errors
// are returned as they are.
func unreachable(err error, what, url string) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &dns) || (errors.As(err, &op) && op.Op == "dial") || errors.Is(err, syscall.ECONNREFUSED) {
		return noServer{&exitErr{exitError, fmt.Sprintf("cannot reach %s at %s: is it running? (make dev)", what, url)}}
	}
	return err
}

// wrapWriter writes streamed text wrapped at width. Within a piece of text, a line breaks
// at the last space before width; a word split between two pieces is placed by the part
// in the first (it is shown at once, never held back, so a line may then run a few
// columns over). Leading spaces of a line (indented code) are kept and never wrap. Notes
// and prompts go through it too (Note, Prompt), from any goroutine, so they always start
// on a line of their own.
type wrapWriter struct {
	mu     sync.Mutex
	w      io.Writer
	width  int
	col    int    // runes on the current line
	words  bool   // the current line has a word
	inWord bool   // the last rune written was part of a word (it goes on on this line)
	broken bool   // a note broke the text's line: the spaces that follow are dropped
	spaces []rune // spaces after the line's last word, not written yet
	word   []rune // the word being read, not placed yet
}

func (ww *wrapWriter) WriteString(s string) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\n':
			ww.place(&b)
			b.WriteByte('\n')
			ww.col, ww.words, ww.inWord, ww.broken, ww.spaces = 0, false, false, false, ww.spaces[:0]
		case ' ', '\t':
			ww.place(&b)
			ww.inWord = false
			if ww.broken {
				continue
			}
			if !ww.words {
				b.WriteRune(r) // indentation
				ww.col++
				continue
			}
			ww.spaces = append(ww.spaces, r)
		default:
			if ww.inWord {
				b.WriteRune(r)
				ww.col++
				continue
			}
			ww.word = append(ww.word, r)
		}
	}
	ww.place(&b)
	_, _ = io.WriteString(ww.w, b.String())
}

// place writes the word read, on this line or, when it does not fit, on the next.
func (ww *wrapWriter) place(b *strings.Builder) {
	if len(ww.word) == 0 {
		return
	}
	if ww.words && ww.col+len(ww.spaces)+len(ww.word) > ww.width {
		b.WriteByte('\n')
		ww.col = 0
	} else {
		b.WriteString(string(ww.spaces))
		ww.col += len(ww.spaces)
	}
	ww.spaces = ww.spaces[:0]
	b.WriteString(string(ww.word))
	ww.col += len(ww.word)
	ww.words, ww.inWord, ww.broken = true, true, false
	ww.word = ww.word[:0]
}

// Note writes s (whole lines) on a line of its own.
func (ww *wrapWriter) Note(s string) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	ww.startLine()
	_, _ = io.WriteString(ww.w, s)
}

// Prompt writes a question on a line of its own; the answer's Enter ends that line.
func (ww *wrapWriter) Prompt(s string) { ww.Note(s) }

// startLine ends the open line, if any, so other output starts on its own.
func (ww *wrapWriter) startLine() {
	if ww.col > 0 {
		_, _ = io.WriteString(ww.w, "\n")
		ww.broken = true
	}
	ww.col, ww.words, ww.inWord, ww.spaces = 0, false, false, ww.spaces[:0]
}
