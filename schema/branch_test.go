package schema

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func turn(id string, seq int64, parent *string) Message {
	return Message{Meta: Meta{ID: id}, Sequence: seq, Role: "user", RunID: Ptr("r" + id), ParentID: parent}
}

func answer(id, run string, seq int64) Message {
	return Message{Meta: Meta{ID: id}, Sequence: seq, Role: "assistant", RunID: Ptr("r" + run)}
}

func ids(ms []Message) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// TestBranchFollowsTheSelectedVersion: an edited message's run sees its own branch only;
// messages without a parent read linearly, as before issue 34.
func TestBranchFollowsTheSelectedVersion(t *testing.T) {
	all := []Message{
		turn("u1", 1, nil), answer("a1", "u1", 2),
		turn("u2", 3, nil), answer("a2", "u2", 4),
		turn("u2b", 5, Ptr("u1")), answer("a2b", "u2b", 6), // u2 edited
		turn("u3", 7, Ptr("u2b")),
		turn("u1b", 8, Ptr(RootParent)), // the first message edited
		turn("cli", 9, nil),             // no parent named: after the previous user message
		{Meta: Meta{ID: "s"}, Sequence: 10, Role: "system"},
		turn("bad", 11, Ptr("a1")), // a parent that is not a user message: none
		turn("fut", 12, Ptr("zz")), // a parent not in the conversation: none
	}
	at := func(id string) *Message {
		for i := range all {
			if all[i].ID == id {
				return &all[i]
			}
		}
		t.Fatalf("no %s", id)
		return nil
	}
	require.Equal(t, []string{"u1", "a1"}, ids(Branch(all, at("u2b"))))
	require.Equal(t, []string{"u1", "a1", "u2b", "a2b"}, ids(Branch(all, at("u3"))))
	require.Equal(t, []string{"u1", "a1"}, ids(Branch(all, at("u2"))))
	require.Empty(t, ids(Branch(all, at("u1b"))))
	require.Equal(t, []string{"u1b"}, ids(Branch(all, at("cli"))))
	require.Equal(t, []string{"s"}, ids(Branch(all, at("bad"))))
	require.Equal(t, "", EffectiveParent(all, at("fut")))
	require.Equal(t, "u2", EffectiveParent(all, &Message{Sequence: 5, Role: "user"}))
}
