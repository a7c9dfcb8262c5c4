package main

// pa chat: an interactive conversation. Each line typed is sent as a message; the run is
// followed over the stream service as pa tail follows it; an approval is asked inline
// (y: allow once, n: deny — the choices the web offers); Ctrl-C cancels the run and a
// second Ctrl-C quits; Ctrl-C at the prompt, or the end of input (Ctrl-D), ends the chat.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
)

var chatCommand = &command{name: "chat", args: "[TEXT]", min: 0, max: 1,
	summary: "chat: send, follow the answer, answer approvals inline",
	help: "Sends each line you type to the conversation (-conversation ID, default: a new one titled after your\n" +
		"first message) and shows the answer as it streams. TEXT, when given, is sent first. When the assistant\n" +
		"asks to run a command, answer y (allow once) or n (deny). Ctrl-C cancels the running answer; a second\n" +
		"Ctrl-C quits. At the prompt, Ctrl-C or Ctrl-D ends the chat.",
	setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
		role := fs.String("role", "", "the work role that answers (default: the conversation's)")
		conv := fs.String("conversation", "", "go on with the conversation `ID` (pa conversations lists them)")
		return func(ctx context.Context, a []string) error {
			text := ""
			if len(a) > 0 {
				text = a[0]
			}
			title := ""
			if *conv != "" {
				if err := checkID("conversation", *conv); err != nil {
					return err
				}
				b, err := c.call(ctx, "GET", apiPath("/api/conversations/{}", *conv), nil)
				if err != nil {
					return err
				}
				var v conversationView
				if err := json.Unmarshal(b, &v); err != nil {
					return fmt.Errorf("read the conversation: %w", err)
				}
				title = v.Title
			}
			if *role != "" {
				if err := c.checkRole(ctx, *role); err != nil {
					return err
				}
			}
			return c.chat(ctx, *conv, title, text, *role)
		}
	}}

// lockedWriter serializes writes: the run's events and the prompts come from two
// goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// readLines delivers the lines of r until it ends (the channel closes) or done closes.
func readLines(r io.Reader, done <-chan struct{}) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	return ch
}

func (c *cli) chat(ctx context.Context, conv, convTitle, first, role string) error {
	c.out = &lockedWriter{w: c.out}
	if c.ownInterrupts != nil {
		c.ownInterrupts.Store(true)
		defer c.ownInterrupts.Store(false)
	}
	done := make(chan struct{})
	lines := readLines(c.in, done)
	// The reader is stopped by closing done; one blocked reading a terminal ends with the
	// process, one reading a pipe or a file ends with it.
	defer close(done)
	if conv != "" {
		fmt.Fprintf(c.out, "Chatting in %q (%s).", convTitle, conv)
	} else {
		fmt.Fprint(c.out, "A new conversation starts with your first message.")
	}
	fmt.Fprintln(c.out, " Ctrl-C cancels an answer; Ctrl-D ends the chat.")
	next := first
	for {
		if next == "" {
			fmt.Fprint(c.out, "> ")
			select {
			case l, ok := <-lines:
				if !ok {
					fmt.Fprintln(c.out)
					return nil
				}
				next = l
			case <-c.interrupts:
				fmt.Fprintln(c.out)
				return nil
			case <-ctx.Done():
				return nil
			}
		}
		text := strings.TrimSpace(next)
		next = ""
		if text == "" {
			continue
		}
		if conv == "" {
			b, err := c.call(ctx, "POST", "/api/conversations", map[string]any{"title": title(text), "requestId": reqID()})
			if err != nil {
				return err
			}
			var v conversationView
			if err := json.Unmarshal(b, &v); err != nil {
				return fmt.Errorf("read the new conversation: %w", err)
			}
			conv = v.ID
			fmt.Fprintf(c.out, "(conversation %s: go on with it later with pa chat -conversation %s)\n", conv, conv)
		}
		body := map[string]any{"requestId": reqID(), "text": text}
		if role != "" {
			body["role"] = role
		}
		b, err := c.call(ctx, "POST", apiPath("/api/conversations/{}/messages", conv), body)
		var ee *exitErr
		if errors.As(err, &ee) && ee.code != exitSignedOut && ee.code != exitNotFound {
			// Refused (too long, a limit, a conflict): say so and let the person go on.
			fmt.Fprintln(c.out, "pa:", ee.msg)
			continue
		}
		if err != nil {
			return err
		}
		var adm struct {
			RunID string `json:"runId"`
		}
		if err := json.Unmarshal(b, &adm); err != nil || adm.RunID == "" {
			return fmt.Errorf("read the admitted run: %s", b)
		}
		var quit bool
		if lines, quit, err = c.followChat(ctx, adm.RunID, lines); err != nil || quit {
			return err
		}
	}
}

// title names a new conversation after its first message.
func title(text string) string {
	t := strings.Join(strings.Fields(text), " ")
	if r := []rune(t); len(r) > 60 {
		t = string(r[:59]) + "…"
	}
	return t
}

// followChat follows one run to its end, asking approvals and cancelling on Ctrl-C. It
// returns the input (nil once it ended) and whether the person quit.
func (c *cli) followChat(ctx context.Context, run string, lines <-chan string) (<-chan string, bool, error) {
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	asks := make(chan tailEvent, 16)
	t := c.newTailer(run, false)
	t.inChat = true
	t.onEvent = func(e tailEvent) {
		if e.Type == "approval.request" || e.Type == "approval.responded" {
			select {
			case asks <- e:
			case <-fctx.Done():
			}
		}
	}
	ended := make(chan error, 1)
	go func() { ended <- t.follow(fctx) }()
	finish := func(err error) error { // stops the follower and waits for it
		stop()
		<-ended
		return err
	}
	var pending string // the request id waiting for an answer
	cancelling := false
	for {
		in := lines
		if pending == "" {
			in = nil // typed ahead: read at the next prompt
		}
		select {
		case err := <-ended:
			var ee *exitErr
			if errors.As(err, &ee) && ee.code == exitIncomplete {
				err = nil // said already; the chat goes on
			}
			return lines, false, err
		case e := <-asks:
			var d struct{ RequestID string }
			_ = json.Unmarshal(e.Data, &d)
			switch {
			case e.Type == "approval.request":
				pending = d.RequestID
				t.text.Prompt("Allow it? [y] once / [n] deny: ")
			case d.RequestID == "" || d.RequestID == pending:
				pending = "" // answered (here, elsewhere, or it expired)
			}
		case l, ok := <-in:
			if !ok {
				lines = nil // no more input: the approval waits for an answer elsewhere
				t.text.Note("\n(no more input: answer it in the web, or with pa approve)\n")
				continue
			}
			choice := ""
			switch strings.ToLower(strings.TrimSpace(l)) {
			case "y", "yes", "once":
				choice = "once"
			case "n", "no", "deny":
				choice = "deny"
			default:
				t.text.Prompt("Please answer y (allow once) or n (deny): ")
				continue
			}
			_, err := c.call(ctx, "POST", apiPath("/api/runs/{}/approval", run), map[string]any{"requestId": pending, "choice": choice})
			var ee *exitErr
			switch {
			case errors.As(err, &ee) && ee.code == exitConflict:
				t.text.Note("That approval is no longer pending; the run has moved on.\n")
			case err != nil:
				return lines, false, finish(err)
			}
			pending = ""
		case <-c.interrupts:
			if cancelling {
				_ = finish(context.Canceled)
				fmt.Fprintln(c.out)
				return lines, true, fail(exitIncomplete, "quit; run %s was asked to cancel", run)
			}
			cancelling = true
			t.text.Note("[cancelling the answer; Ctrl-C again quits]\n")
			if _, err := c.call(ctx, "POST", apiPath("/api/runs/{}/cancel", run), map[string]any{}); err != nil {
				return lines, false, finish(err)
			}
		case <-ctx.Done():
			return lines, true, finish(ctx.Err())
		}
	}
}
