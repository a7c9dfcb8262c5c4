package schema

import "sort"

// RootParent is the Message.ParentID of a user message that follows no other: an edit
// of a conversation's first message.
const RootParent = "root"

// Branches (issue 34). A conversation is a tree of turns: each user message follows one
// earlier user message (its parent) or none; an edit, a regeneration and a retry are new
// user messages beside the one they replace (the same parent), each with its own run and
// answer. A run's context is its branch only: the user messages of its parent chain, each
// followed by its run's answer (Branch). Messages without a ParentID (before issue 34, or
// from a client that names none: the CLI, the runtime API) follow the previous user
// message by sequence, so a conversation never branched reads exactly as before.

// EffectiveParent returns the id of the user message m follows ("" for none) among all
// (the conversation's messages, any order). A parent that is missing, not a user message
// or not earlier than m is none: a chain always ends, and a client cannot name a message
// of another conversation into it (all holds only this conversation's).
func EffectiveParent(all []Message, m *Message) string {
	if m.ParentID != nil {
		if *m.ParentID == RootParent {
			return ""
		}
		for i := range all {
			p := &all[i]
			if p.ID == *m.ParentID {
				if p.Role == "user" && p.Sequence < m.Sequence {
					return p.ID
				}
				return ""
			}
		}
		return ""
	}
	best, id := int64(-1), ""
	for i := range all {
		p := &all[i]
		if p.Role == "user" && p.Sequence < m.Sequence && p.Sequence > best {
			best, id = p.Sequence, p.ID
		}
	}
	return id
}

// Branch returns what precedes the user message m on its branch, oldest first: the user
// messages of its parent chain, each followed by its run's answers, and the system
// messages older than m (they belong to every branch). Answers of other branches, and m's
// own, are not in it.
func Branch(all []Message, m *Message) []Message {
	byID := make(map[string]*Message, len(all))
	answers := map[string][]Message{}
	for i := range all {
		x := &all[i]
		byID[x.ID] = x
		if x.Role == "assistant" && x.RunID != nil {
			answers[*x.RunID] = append(answers[*x.RunID], *x)
		}
	}
	var chain []*Message
	for id := EffectiveParent(all, m); id != ""; {
		u := byID[id]
		chain = append(chain, u)
		id = EffectiveParent(all, u)
	}
	var out []Message
	var sys []Message
	for i := range all {
		if all[i].Role == "system" && all[i].Sequence < m.Sequence {
			sys = append(sys, all[i])
		}
	}
	sort.Slice(sys, func(i, j int) bool { return sys[i].Sequence < sys[j].Sequence })
	for i := len(chain) - 1; i >= 0; i-- {
		u := chain[i]
		for len(sys) > 0 && sys[0].Sequence < u.Sequence {
			out, sys = append(out, sys[0]), sys[1:]
		}
		out = append(out, *u)
		if u.RunID != nil {
			as := answers[*u.RunID]
			sort.Slice(as, func(i, j int) bool { return as[i].Sequence < as[j].Sequence })
			out = append(out, as...)
		}
	}
	return append(out, sys...)
}
