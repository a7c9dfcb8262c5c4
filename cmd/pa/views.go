package main

// The human views of the user commands' answers (human.go has the helpers).

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

type conversationView struct {
	ID             string `json:"id"`
	Title          string `json:"title"`
	LastActivityAt string `json:"lastActivityAt"`
	CreatedAt      string `json:"createdAt"`
}

func showConversations(w io.Writer, b json.RawMessage) error {
	var v struct {
		Conversations []conversationView `json:"conversations"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v.Conversations) == 0 {
		fmt.Fprintln(w, "No conversations yet: start one with pa chat, or pa new TITLE.")
		return nil
	}
	rows := [][]string{}
	for _, c := range v.Conversations {
		rows = append(rows, []string{c.ID, when(c.LastActivityAt), c.Title})
	}
	table(w, []string{"ID", "LAST ACTIVITY", "TITLE"}, rows)
	return nil
}

func showConversation(w io.Writer, b json.RawMessage) error {
	var c conversationView
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	fmt.Fprintf(w, "Conversation %s %q created.\nSend to it with: pa send %s TEXT   (or pa chat -conversation %s)\n", c.ID, c.Title, c.ID, c.ID)
	return nil
}

func showAdmitted(w io.Writer, b json.RawMessage) error {
	var a struct {
		MessageID string `json:"messageId"`
		RunID     string `json:"runId"`
		Status    string `json:"status"`
		Role      string `json:"role"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	fmt.Fprintf(w, "Sent (message %s). Run %s (%s) is %s.\nFollow it with: pa tail %s\n", a.MessageID, a.RunID, a.Role, a.Status, a.RunID)
	return nil
}

func showRoles(w io.Writer, b json.RawMessage) error {
	var v struct {
		Roles []struct {
			Name  string   `json:"name"`
			Tools []string `json:"tools"`
		} `json:"roles"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	rows := [][]string{}
	for _, r := range v.Roles {
		tools := strings.Join(r.Tools, ", ")
		if tools == "" {
			tools = "(none)"
		}
		rows = append(rows, []string{r.Name, tools})
	}
	table(w, []string{"ROLE", "TOOLS"}, rows)
	return nil
}

type runView struct {
	ID             string  `json:"id"`
	ConversationID string  `json:"conversationId"`
	Role           string  `json:"role"`
	Status         string  `json:"status"`
	QueuedAt       string  `json:"queuedAt"`
	QueuePosition  *int64  `json:"queuePosition"`
	Error          *string `json:"error"`
}

func showRuns(w io.Writer, b json.RawMessage) error {
	var v struct {
		Runs []runView `json:"runs"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v.Runs) == 0 {
		fmt.Fprintln(w, "No runs.")
		return nil
	}
	rows := [][]string{}
	for _, r := range v.Runs {
		status := r.Status
		if r.QueuePosition != nil {
			status += fmt.Sprintf(" (#%d)", *r.QueuePosition)
		}
		note := deref(r.Error)
		if len([]rune(note)) > 60 {
			note = string([]rune(note)[:59]) + "…"
		}
		rows = append(rows, []string{r.ID, when(r.QueuedAt), r.Role, status, r.ConversationID, note})
	}
	table(w, []string{"RUN", "QUEUED", "ROLE", "STATUS", "CONVERSATION", "ERROR"}, rows)
	return nil
}

func showCancel(w io.Writer, b json.RawMessage) error {
	var v struct {
		RunID  string `json:"runId"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	fmt.Fprintf(w, "Cancel requested for run %s (now %s).\n", v.RunID, v.Status)
	return nil
}

func showApproval(w io.Writer, b json.RawMessage) error {
	var v struct {
		RunID     string `json:"runId"`
		RequestID string `json:"requestId"`
		Choice    string `json:"choice"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s for request %s of run %s.\n", choiceWords(v.Choice), v.RequestID, v.RunID)
	return nil
}

// choiceWords says an approval choice ("once", "deny") as a person would.
func choiceWords(choice string) string {
	switch choice {
	case "once":
		return "Allowed once"
	case "deny":
		return "Denied"
	}
	return "Answered " + choice
}

// human prints one run event for people: the answer's text wrapped as it streams, the
// rest as notes on lines of their own.
func (t *tailer) human(e tailEvent) {
	var d struct {
		Text, Reason, Status, Phase, Tool, Preview string
		QueueReason                                *string
		QueuePosition                              *int64
		DurationSec                                float64
		Error                                      any
		RequestID, Command, Description, Choice    string
		Filename                                   string
		Size                                       int64
		ArtifactID                                 string
	}
	_ = json.Unmarshal(e.Data, &d)
	var b strings.Builder
	switch e.Type {
	case "message.delta":
		t.text.WriteString(d.Text)
		return
	case "run.queued", "message.interim":
		// nothing to say: the run was admitted; the text was streamed already
	case "message.reset":
		fmt.Fprintf(&b, "[the answer starts over: %s]\n", d.Reason)
	case "run.status":
		if d.Status == "waiting_for_resource" {
			at := ""
			if d.QueuePosition != nil {
				at = fmt.Sprintf(", number %d in line", *d.QueuePosition)
			}
			fmt.Fprintf(&b, "[waiting: %s%s]\n", strings.ReplaceAll(deref(d.QueueReason), "_", " "), at)
		}
	case "tool.started":
		if d.Preview != "" {
			fmt.Fprintf(&b, "[tool %s: %s]\n", d.Tool, wrap(d.Preview, textWidth, "  "))
		} else {
			fmt.Fprintf(&b, "[tool %s]\n", d.Tool)
		}
	case "tool.completed":
		if d.Error == true {
			fmt.Fprintf(&b, "[tool %s failed after %.1f s]\n", d.Tool, d.DurationSec)
		} else {
			fmt.Fprintf(&b, "[tool %s done in %.1f s]\n", d.Tool, d.DurationSec)
		}
	case "approval.request":
		fmt.Fprintf(&b, "[approval needed] The assistant wants to run this command:\n    %s\n", d.Command)
		if d.Description != "" {
			fmt.Fprintf(&b, "  %s\n", wrap(d.Description, textWidth, "  "))
		}
		if !t.inChat {
			fmt.Fprintf(&b, "  Answer it with: pa approve -yes %s %s once   (or deny)\n", t.run, d.RequestID)
		}
	case "approval.responded":
		if d.Reason != "" {
			fmt.Fprintf(&b, "[approval: %s]\n", d.Reason)
		} else {
			fmt.Fprintf(&b, "[approval: %s]\n", strings.ToLower(choiceWords(d.Choice)))
		}
	case "artifact.created":
		fmt.Fprintf(&b, "[file %s, %s (artifact %s)]\n", d.Filename, size(d.Size), d.ArtifactID)
	case "run.completed", "run.failed", "run.cancelled", "run.interrupted":
		if s, ok := d.Error.(string); ok && s != "" {
			t.endNote = s
		} else if d.Reason != "" {
			t.endNote = d.Reason
		}
	default:
		fmt.Fprintf(&b, "[%s %s]\n", e.Type, e.Data)
	}
	if b.Len() > 0 {
		t.text.Note(b.String())
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
