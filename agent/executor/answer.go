package executor

import "strings"

// The stored answer of a run with several model turns (text, a tool call or an approval,
// more text) holds every turn, a blank line apart — as the web shows it live — not only
// the harness's final text, which for Hermes is the last turn ("Let me check that." was
// lost from the history). The published deltas are unchanged: clients add the break
// themselves when a tool or approval event comes between two turns.

// noteTurn records where a new turn begins, before delta is appended to a.text.
func (a *attempt) noteTurn(delta string) {
	if delta == "" {
		return
	}
	if a.turnBreak && a.text.Len() > 0 {
		a.breaks = append(a.breaks, a.text.Len())
	}
	a.turnBreak = false
}

// streamedAnswer is the streamed text with a blank line between turns.
func (a *attempt) streamedAnswer() string {
	t := a.text.String()
	if len(a.breaks) == 0 {
		return t
	}
	var b strings.Builder
	prev := 0
	for _, at := range a.breaks {
		if at <= prev || at > len(t) {
			continue
		}
		b.WriteString(t[prev:at])
		if !strings.HasSuffix(t[:at], "\n\n") && !strings.HasPrefix(t[at:], "\n") {
			b.WriteString("\n\n")
		}
		prev = at
	}
	b.WriteString(t[prev:])
	return b.String()
}

// wholeAnswer picks the answer to store: the streamed turns when they are the partial
// answer, or when the harness's final text is only their last part; else final.
func (a *attempt) wholeAnswer(final string, completed bool) string {
	streamed := a.text.String()
	if streamed == "" {
		return final
	}
	if final == streamed || final == "" {
		return a.streamedAnswer()
	}
	if completed && len(streamed) > len(final) && strings.HasSuffix(strings.TrimSpace(streamed), strings.TrimSpace(final)) {
		return a.streamedAnswer()
	}
	return final
}
